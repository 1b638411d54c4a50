"""The records of ``__transaction_state``, byte for byte as Kafka writes them.

Theory of operation: the transaction coordinator persists one record per
state change of a transactional id in the compacted ``__transaction_state``
topic, and rebuilds its cache from them when it loads a partition (last
value per key wins; a ``None`` value is a tombstone, written when an idle
transactional id expires).

* key  ``TransactionLogKey`` (TransactionLogKey.json): int16 version (0),
  string TransactionalId;
* value ``TransactionLogValue`` (TransactionLogValue.json): int16 version,
  int64 ProducerId, int16 ProducerEpoch, int32 TransactionTimeoutMs, int8
  TransactionStatus (the ``TransactionState`` byte), nullable array
  TransactionPartitions of [string Topic, array int32 PartitionIds], int64
  TransactionLastUpdateTimestampMs, int64 TransactionStartTimestampMs.

The layout is Kafka's generated-message layout, big-endian.  Version 0 is
not flexible: strings are an int16 length and UTF-8 bytes, arrays an int32
count, -1 meaning null.  We write version 0, as Kafka does until
transaction.version 1 (KIP-890 part 2) is enabled; the partition list is
null in the Empty state.  Version 1 is flexible (KIP-482): compact strings
and arrays (unsigned-varint length + 1, 0 = null) and tagged fields after
every struct -- at the end of the value: 0 PreviousProducerId (int64),
1 NextProducerId (int64), 2 ClientTransactionVersion (int16).  Decoding
reads both versions (unknown tags are skipped); ``encode_value`` can write
version 1 too, for tests and tools.  The primitive types are read and
written by ``coordinator.serde``.

A key of an unknown version decodes to ``UnknownKey`` (the loader logs and
skips it, as Kafka does: it could be a leftover of an aborted upgrade).
Malformed bytes, or a value of an unknown version, raise
``RecordDecodeError``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..serde import Reader, RecordDecodeError, UnknownKey, Writer

__all__ = [
    "KEY_VERSION",
    "VALUE_VERSION",
    "RecordDecodeError",
    "TransactionLogKey",
    "TransactionLogValue",
    "UnknownKey",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]

KEY_VERSION = 0
#: The value version we write (Kafka's, for transaction.version 0).
VALUE_VERSION = 0
_HIGHEST_VALUE_VERSION = 1

_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2


@dataclass(frozen=True, slots=True)
class TransactionLogKey:
    transactional_id: str


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    #: The ``TransactionState`` byte (0 Empty ... 7 PrepareEpochFence).
    transaction_status: int
    #: (topic, partition ids) in record order; None: the null array (Empty state).
    transaction_partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    #: Version 1 tagged fields (defaults when absent, and in version 0).
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


# ------------------------------------------------------------------- writing


def encode_key(transactional_id: str) -> bytes:
    w = Writer()
    w.int16(KEY_VERSION)
    w.string(transactional_id)
    return w.getvalue()


def encode_value(value: TransactionLogValue, version: int = VALUE_VERSION) -> bytes:
    """Version 0 (what the coordinator writes) or 1 (flexible)."""
    if version not in (0, 1):
        raise ValueError(f"cannot write transaction log value version {version}")
    w = Writer(flexible=version >= 1)
    w.int16(version)
    w.int64(value.producer_id)
    w.int16(value.producer_epoch)
    w.int32(value.transaction_timeout_ms)
    w.int8(value.transaction_status)
    partitions = value.transaction_partitions
    w.array_length(None if partitions is None else len(partitions))
    for topic, partition_ids in partitions or ():
        w.string(topic)
        w.array_length(len(partition_ids))
        for p in partition_ids:
            w.int32(p)
        w.tagged_fields([])
    w.int64(value.transaction_last_update_timestamp_ms)
    w.int64(value.transaction_start_timestamp_ms)
    tags: list[tuple[int, bytes]] = []
    if value.previous_producer_id != -1:
        tags.append((_TAG_PREVIOUS_PRODUCER_ID, struct.pack(">q", value.previous_producer_id)))
    if value.next_producer_id != -1:
        tags.append((_TAG_NEXT_PRODUCER_ID, struct.pack(">q", value.next_producer_id)))
    if value.client_transaction_version != 0:
        tags.append((_TAG_CLIENT_TRANSACTION_VERSION, struct.pack(">h", value.client_transaction_version)))
    if tags and version == 0:
        raise ValueError("version 0 cannot carry previous/next producer id or client transaction version")
    w.tagged_fields(tags)
    return w.getvalue()


# ------------------------------------------------------------------- reading


def decode_key(data: bytes) -> TransactionLogKey | UnknownKey:
    r = Reader(data)
    version = r.int16()
    if version != KEY_VERSION:
        return UnknownKey(version)
    return TransactionLogKey(r.required_string())


def _tag_int(fields: dict[int, bytes], tag: int, fmt: str, default: int) -> int:
    data = fields.get(tag)
    if data is None:
        return default
    if len(data) != struct.calcsize(fmt):
        raise RecordDecodeError(f"tagged field {tag} has {len(data)} bytes")
    return int(struct.unpack(fmt, data)[0])


def decode_value(data: bytes | None) -> TransactionLogValue | None:
    """Versions 0-1; ``None`` (a tombstone) decodes to ``None``."""
    if data is None:
        return None
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= _HIGHEST_VALUE_VERSION:
        raise RecordDecodeError(f"unknown transaction log value version {version}")
    r.flexible = version >= 1
    producer_id = r.int64()
    producer_epoch = r.int16()
    timeout_ms = r.int32()
    status = r.int8()
    n = r.array_length(nullable=True)
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    if n is None:
        partitions = None
    else:
        entries = []
        for _ in range(n):
            topic = r.required_string()
            count = r.array_length(nullable=True)
            if count is None:
                raise RecordDecodeError("null partition id array")
            entries.append((topic, tuple(r.int32() for _ in range(count))))
            r.skip_tagged_fields()
        partitions = tuple(entries)
    last_update = r.int64()
    start = r.int64()
    tags = r.tagged_fields()
    # Trailing bytes are ignored, as Kafka's generated readers do.
    return TransactionLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_timeout_ms=timeout_ms,
        transaction_status=status,
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=last_update,
        transaction_start_timestamp_ms=start,
        previous_producer_id=_tag_int(tags, _TAG_PREVIOUS_PRODUCER_ID, ">q", -1),
        next_producer_id=_tag_int(tags, _TAG_NEXT_PRODUCER_ID, ">q", -1),
        client_transaction_version=_tag_int(tags, _TAG_CLIENT_TRANSACTION_VERSION, ">h", 0),
    )
