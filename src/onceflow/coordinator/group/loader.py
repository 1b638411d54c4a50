"""Reading a ``__consumer_offsets`` partition back: records in, groups and offsets out.

Theory of operation
-------------------
At start-up the broker hands the coordinator each partition of
``__consumer_offsets``, oldest entry first (``GroupCoordinator.load_partition``):
``StoredRecord``s and ``StoredMarker``s, or plain ``(key, value)`` tuples
for non-transactional records.  This module turns those entries into a
value, and nothing else: ``read_partition`` is a pure function (it logs what
it skips, and touches no coordinator, clock or store), and
``build_group`` makes one loaded group into a ``GroupMetadata``.  The
coordinator installs the result (``coordinator.py``), the offset manager
tracks its open transactions (``offsets.py``) and the membership manager
starts its members' sessions (``membership.py``, Kafka's onGroupLoaded).

The rules are those of Kafka's loader (GroupMetadataManager.doLoadGroupsAndOffsets):

* The last value per key wins; a ``None`` value is a tombstone.  A group
  metadata record counts wherever it stands in the partition.
* Every entry, markers and unreadable records included, takes the next
  *position*, counting from ``first_position``.  Positions stand in for log
  offsets: each committed offset keeps the position of its record, and the
  coordinator's acknowledgement sequence continues after the last one
  (``LoadedPartition.end_position``), so that a record acknowledged later
  is newer than every loaded one (see ``metadata.GroupOffsets``).
* A transactional offset commit (KIP-98) is pending for its producer until
  that producer's next marker: COMMIT installs it unless the committed
  offset comes from a later record (Kafka compares log offsets), ABORT drops
  it.  A transactional tombstone removes the producer's pending entry; a
  plain tombstone removes only the committed offset.  Records of a producer
  after its marker belong to its next transaction.  Still open at the end of
  the partition, the entry stays pending: the transaction coordinator writes
  the marker later, and ``complete_transaction`` settles it then.
* A record whose key does not decode, or whose value does not, is logged
  and skipped; a key of a version we do not know is a leftover of an
  aborted upgrade and is skipped too, as Kafka does.

Records of a KIP-848 group (key types 3, 5-8) are kept in log order per
group and replayed into a ``consumer_group.ConsumerGroup`` by
``build_group`` (``ConsumerGroup.replay``, the function the coordinator also
applies its own writes with); a tombstone of the group's epoch record (the
group was deleted) forgets what came before it.  Types 4 and 16 are read
past.

A group is loaded if it has metadata, KIP-848 records, committed offsets or
pending transactional offsets; ``LoadedPartition.groups`` lists first the groups
with metadata, in the order of their records, then those that only store
offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from .. import OFFSETS_TOPIC
from . import log_records as rec
from .consumer_group import ConsumerGroup
from .metadata import GroupMetadata, GroupState, MemberMetadata
from .types import OffsetAndMetadata, StoredEntry, StoredMarker, StoredRecord, TopicPartition

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")


class LoadedOffset(NamedTuple):
    """An offset read back, with the position of its record in the partition."""

    position: int
    offset: OffsetAndMetadata


@dataclass(frozen=True, slots=True)
class LoadedGroup:
    group_id: str
    #: The group's last metadata record; None: the group only stores offsets
    #: (or its metadata was deleted).
    metadata: rec.GroupMetadataValue | None
    committed: Mapping[TopicPartition, LoadedOffset]
    #: producer id -> partition -> offset of a transaction still open at the
    #: end of the partition.
    pending_transactional: Mapping[int, Mapping[TopicPartition, LoadedOffset]]
    #: The KIP-848 records of the group, in log order (value None: a tombstone).
    consumer_records: tuple[tuple[rec.ConsumerGroupKey | rec.ConsumerGroupMemberKey, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class LoadedPartition:
    groups: tuple[LoadedGroup, ...]
    #: One past the last entry's position: where the acknowledgement sequence goes on.
    end_position: int


def read_partition(partition: int, entries: Iterable[StoredEntry], first_position: int = 1) -> LoadedPartition:
    """The groups, committed offsets and open transactions of one
    ``__consumer_offsets`` partition, from its entries in log order.
    ``partition`` only names the partition in what is logged."""
    # group -> partition -> committed offset
    committed: dict[str, dict[TopicPartition, LoadedOffset]] = {}
    # producer id -> (group, partition) -> offset pending in the producer's open transaction
    pending: dict[int, dict[tuple[str, TopicPartition], LoadedOffset]] = {}
    metadata: dict[str, rec.GroupMetadataValue] = {}
    consumer: dict[str, list[tuple[rec.ConsumerGroupKey | rec.ConsumerGroupMemberKey, bytes | None]]] = {}
    end_position = first_position
    for position, entry in enumerate(entries, first_position):
        end_position = position + 1
        if isinstance(entry, StoredMarker):
            producer_offsets = pending.pop(entry.producer_id, None)
            if entry.commit and producer_offsets:
                for (group_id, tp), candidate in producer_offsets.items():
                    group_offsets = committed.setdefault(group_id, {})
                    current = group_offsets.get(tp)
                    if current is None or current.position < candidate.position:
                        group_offsets[tp] = candidate
            continue
        if isinstance(entry, StoredRecord):
            key_bytes, value_bytes = entry.key, entry.value
            txn_producer = entry.producer_id if entry.transactional else None
        else:
            key_bytes, value_bytes = entry
            txn_producer = None
        key = _decode_key(partition, key_bytes)
        if key is None or isinstance(key, rec.IgnoredKey):
            continue
        if isinstance(key, (rec.ConsumerGroupKey, rec.ConsumerGroupMemberKey)):
            if isinstance(key, rec.ConsumerGroupKey) and key.record_type == rec.CONSUMER_GROUP_METADATA \
                    and value_bytes is None:
                consumer.pop(key.group, None)  # the group was deleted
            else:
                consumer.setdefault(key.group, []).append((key, value_bytes))
            continue
        if isinstance(key, rec.OffsetCommitKey):
            tp = (key.topic, key.partition)
            try:
                value = rec.decode_offset_commit_value(value_bytes)
            except rec.RecordDecodeError as exc:
                log.error("%s-%d: skipping offset of %s %s: %s", OFFSETS_TOPIC, partition, key.group, tp, exc)
                continue
            loaded = None if value is None else LoadedOffset(position, _offset_from_value(value))
            if txn_producer is not None:
                _put(pending.setdefault(txn_producer, {}), (key.group, tp), loaded)
            else:
                _put(committed.setdefault(key.group, {}), tp, loaded)
        else:
            try:
                group_value = rec.decode_group_metadata_value(value_bytes)
            except rec.RecordDecodeError as exc:
                log.error("%s-%d: skipping metadata of group %s: %s", OFFSETS_TOPIC, partition, key.group, exc)
                continue
            _put(metadata, key.group, group_value)

    # Transactions still open: group -> producer id -> partition -> offset.
    open_txns: dict[str, dict[int, dict[TopicPartition, LoadedOffset]]] = {}
    for producer_id, producer_offsets in pending.items():
        for (group_id, tp), candidate in producer_offsets.items():
            open_txns.setdefault(group_id, {}).setdefault(producer_id, {})[tp] = candidate
    groups = [
        LoadedGroup(group_id, value, committed.pop(group_id, {}), open_txns.pop(group_id, {}),
                    tuple(consumer.pop(group_id, ())))
        for group_id, value in metadata.items()
    ]
    for group_id, records in consumer.items():
        groups.append(LoadedGroup(group_id, None, committed.pop(group_id, {}), open_txns.pop(group_id, {}),
                                  tuple(records)))
    # Groups that only store offsets (or whose metadata was deleted).
    for group_id in list(committed) + [g for g in open_txns if g not in committed]:
        offsets, txns = committed.get(group_id, {}), open_txns.get(group_id, {})
        if offsets or txns:
            groups.append(LoadedGroup(group_id, None, offsets, txns))
    return LoadedPartition(tuple(groups), end_position)


def build_group(partition: int, loaded: LoadedGroup, now_ms: int) -> GroupMetadata:
    """The ``GroupMetadata`` of a loaded group (Kafka's GroupMetadata.loadGroup),
    offsets included.  Metadata that cannot be used (a member listed twice,
    say) is logged and the group is loaded empty: its offsets are kept, its
    membership is lost."""
    if loaded.metadata is None:
        group = GroupMetadata(loaded.group_id, now_ms)
    else:
        try:
            group = _group_from_record(loaded.group_id, loaded.metadata, now_ms)
        except (RuntimeError, ValueError) as exc:
            log.error("%s-%d: unusable metadata for group %s (%s); loading it empty",
                      OFFSETS_TOPIC, partition, loaded.group_id, exc)
            group = GroupMetadata(loaded.group_id, now_ms)
    if loaded.consumer_records:
        consumer = _consumer_group(partition, loaded)
        if consumer is not None:
            if group.members:
                log.error("%s-%d: group %s has both classic members and KIP-848 records; loading it as a consumer "
                          "group", OFFSETS_TOPIC, partition, loaded.group_id)
                group = GroupMetadata(loaded.group_id, now_ms)
            group.become_consumer_group(consumer, now_ms)
    group.initialize_offsets(loaded.committed, loaded.pending_transactional)
    return group


def _consumer_group(partition: int, loaded: LoadedGroup) -> ConsumerGroup | None:
    if all(value is None for _, value in loaded.consumer_records):
        return None  # only tombstones: no group (Kafka makes one only when it replays a value)
    consumer = ConsumerGroup(loaded.group_id)
    for key, value in loaded.consumer_records:
        try:
            consumer.replay(key, value)
        except rec.RecordDecodeError as exc:
            log.error("%s-%d: skipping a record of consumer group %s: %s", OFFSETS_TOPIC, partition,
                      loaded.group_id, exc)
    return consumer


def _group_from_record(group_id: str, value: rec.GroupMetadataValue, now_ms: int) -> GroupMetadata:
    state = GroupState.STABLE if value.members else GroupState.EMPTY
    group = GroupMetadata(group_id, now_ms, state)
    group.generation_id = value.generation
    group.protocol_name = value.protocol
    group.leader_id = value.leader
    for m in value.members:
        group.add(
            MemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=[(value.protocol or "", m.subscription)],
                assignment=m.assignment,
            )
        )
    group.protocol_type = value.protocol_type or None  # after add(), which sets it too
    group.current_state_timestamp_ms = None if value.current_state_timestamp_ms == -1 else value.current_state_timestamp_ms
    if group.leader_id is not None and group.leader_id not in group.members:
        group.leader_id = next(iter(group.members), None)
    group.subscribed_topics = group.compute_subscribed_topics()
    return group


KnownKey = rec.OffsetCommitKey | rec.GroupMetadataKey | rec.ConsumerGroupKey | rec.ConsumerGroupMemberKey | rec.IgnoredKey


def _decode_key(partition: int, key_bytes: bytes) -> KnownKey | None:
    """The record's key, or None (logged) if the record is to be skipped."""
    try:
        key = rec.decode_key(key_bytes)
    except rec.RecordDecodeError as exc:
        log.error("%s-%d: skipping a record with an undecodable key: %s", OFFSETS_TOPIC, partition, exc)
        return None
    if isinstance(key, rec.UnknownKey):
        log.warning(
            "%s-%d: ignoring a record with unknown key version %d "
            "(perhaps a leftover of an aborted upgrade)",
            OFFSETS_TOPIC, partition, key.version,
        )
        return None
    return key


def _put(values: dict[K, V], key: K, value: V | None) -> None:
    """Last value wins; None is a tombstone."""
    if value is None:
        values.pop(key, None)
    else:
        values[key] = value


def _offset_from_value(value: rec.OffsetCommitValue) -> OffsetAndMetadata:
    return OffsetAndMetadata(
        offset=value.offset,
        leader_epoch=value.leader_epoch,
        metadata=value.metadata,
        commit_timestamp_ms=value.commit_timestamp_ms,
    )
