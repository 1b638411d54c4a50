"""``__transaction_state`` record encoding (log_records.py) and its mapping to metadata."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onceflow.coordinator.transaction import log_records as rec
from onceflow.coordinator.transaction.metadata import (
    TransactionState,
    TxnTransitMetadata,
)
from onceflow.coordinator.transaction.state_manager import (
    metadata_from_value,
    transit_to_value,
)

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
int8 = st.integers(-128, 127)
text = st.text(max_size=30)
partitions = st.none() | st.lists(st.tuples(text, st.lists(int32, max_size=5).map(tuple)), max_size=4).map(tuple)


def uvarint(n: int) -> bytes:
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def cstr(s: str) -> bytes:
    b = s.encode()
    return uvarint(len(b) + 1) + b


# Built by hand from TransactionLogValue.json, version 0 (non-flexible).
KNOWN_VALUE_V0 = bytes.fromhex(
    "0000"                          # version 0
    "00000000000003e8"              # ProducerId 1000
    "0003"                          # ProducerEpoch 3
    "0000ea60"                      # TransactionTimeoutMs 60000
    "01"                            # TransactionStatus 1 (Ongoing)
    "00000002"                      # TransactionPartitions: 2 entries
    "0006" + b"orders".hex() +      #   Topic "orders"
    "00000002" "00000000" "00000002"  # PartitionIds [0, 2]
    "0003" + b"pay".hex() +         #   Topic "pay"
    "00000001" "00000001"           #   PartitionIds [1]
    "0000018bcfe5687b"              # TransactionLastUpdateTimestampMs 1700000000123
    "0000018bcfe56800"              # TransactionStartTimestampMs 1700000000000
)
KNOWN = rec.TransactionLogValue(
    producer_id=1000,
    producer_epoch=3,
    transaction_timeout_ms=60000,
    transaction_status=1,
    transaction_partitions=(("orders", (0, 2)), ("pay", (1,))),
    transaction_last_update_timestamp_ms=1700000000123,
    transaction_start_timestamp_ms=1700000000000,
)


def test_key_layout_is_kafkas() -> None:
    assert rec.encode_key("my-txn") == b"\x00\x00\x00\x06my-txn"
    assert rec.decode_key(b"\x00\x00\x00\x06my-txn") == rec.TransactionLogKey("my-txn")


def test_value_layout_is_kafkas() -> None:
    assert rec.encode_value(KNOWN) == KNOWN_VALUE_V0
    assert rec.decode_value(KNOWN_VALUE_V0) == KNOWN


def test_empty_state_writes_null_partition_array() -> None:
    value = rec.TransactionLogValue(7, 0, 1000, 0, None, 5, -1)
    data = rec.encode_value(value)
    assert data == (b"\x00\x00" + struct.pack(">qhib", 7, 0, 1000, 0) + b"\xff\xff\xff\xff" + struct.pack(">qq", 5, -1))
    assert rec.decode_value(data) == value


def test_transit_to_value_as_kafka() -> None:
    transit = TxnTransitMetadata(
        producer_id=1000, prev_producer_id=1000, producer_epoch=3, last_producer_epoch=-1, txn_timeout_ms=60000,
        txn_state=TransactionState.ONGOING, topic_partitions=frozenset({("pay", 1), ("orders", 2), ("orders", 0)}),
        txn_start_timestamp=1700000000000, txn_last_update_timestamp=1700000000123,
    )
    assert rec.encode_value(transit_to_value(transit)) == KNOWN_VALUE_V0
    empty = TxnTransitMetadata(5, 5, 0, -1, 1000, TransactionState.EMPTY, frozenset(), -1, 9)
    assert transit_to_value(empty).transaction_partitions is None
    complete = TxnTransitMetadata(5, 5, 0, 0, 1000, TransactionState.COMPLETE_COMMIT, frozenset(), 3, 9)
    assert transit_to_value(complete).transaction_partitions == ()  # an empty array, not null
    with pytest.raises(ValueError):
        transit_to_value(TxnTransitMetadata(5, 5, 0, -1, 1000, TransactionState.EMPTY, frozenset({("a", 0)}), -1, 9))


def test_metadata_from_value() -> None:
    md = metadata_from_value("t", KNOWN)
    assert md.state is TransactionState.ONGOING
    assert md.topic_partitions == {("orders", 0), ("orders", 2), ("pay", 1)}
    assert (md.producer_id, md.producer_epoch, md.last_producer_epoch, md.previous_producer_id) == (1000, 3, -1, -1)
    assert (md.txn_start_timestamp, md.txn_last_update_timestamp, md.txn_timeout_ms) == (
        1700000000000, 1700000000123, 60000)
    # Partitions of an Empty record are ignored, as Kafka does.
    empty = rec.TransactionLogValue(7, 0, 1000, 0, (("a", (0,)),), 5, -1)
    assert metadata_from_value("t", empty).topic_partitions == set()


def test_decodes_flexible_version_1_with_tagged_fields() -> None:
    data = (
        b"\x00\x01"
        + struct.pack(">qhib", 1000, 3, 60000, 4)
        + uvarint(2 + 1)
        + cstr("orders") + uvarint(2 + 1) + struct.pack(">ii", 0, 2) + b"\x00"
        + cstr("pay") + uvarint(1 + 1) + struct.pack(">i", 1) + b"\x01" + uvarint(9) + uvarint(1) + b"x"  # unknown tag
        + struct.pack(">qq", 1700000000123, 1700000000000)
        + uvarint(3)
        + uvarint(0) + uvarint(8) + struct.pack(">q", 999)
        + uvarint(2) + uvarint(2) + struct.pack(">h", 2)
        + uvarint(17) + uvarint(3) + b"abc"  # unknown tag, skipped
    )
    value = rec.decode_value(data)
    assert value == rec.TransactionLogValue(
        1000, 3, 60000, 4, (("orders", (0, 2)), ("pay", (1,))), 1700000000123, 1700000000000,
        previous_producer_id=999, next_producer_id=-1, client_transaction_version=2,
    )
    assert metadata_from_value("t", value).previous_producer_id == 999
    # Null array in the compact form.
    null_partitions = b"\x00\x01" + struct.pack(">qhib", 1, 0, 10, 0) + b"\x00" + struct.pack(">qq", 1, -1) + b"\x00"
    assert rec.decode_value(null_partitions).transaction_partitions is None


def test_unknown_versions_and_garbage() -> None:
    assert rec.decode_key(b"\x00\x05\x00\x01x") == rec.UnknownKey(5)
    assert rec.decode_value(None) is None
    with pytest.raises(rec.RecordDecodeError):
        rec.decode_value(b"\x00\x02" + KNOWN_VALUE_V0[2:])
    with pytest.raises(rec.RecordDecodeError):
        rec.decode_value(KNOWN_VALUE_V0[:-3])
    with pytest.raises(rec.RecordDecodeError):
        rec.decode_key(b"\x00\x00\x00\x09ab")
    with pytest.raises(rec.RecordDecodeError):
        rec.decode_key(b"\x00\x00\xff\xff")  # null transactional id
    with pytest.raises(ValueError):
        rec.encode_key("x" * 40000)
    with pytest.raises(ValueError):
        rec.encode_value(KNOWN, version=2)
    with pytest.raises(ValueError):  # v0 has no tagged fields to carry these
        rec.encode_value(rec.TransactionLogValue(1, 0, 1, 0, None, 1, 1, previous_producer_id=5), version=0)


@given(text)
def test_key_round_trip(tid: str) -> None:
    assert rec.decode_key(rec.encode_key(tid)) == rec.TransactionLogKey(tid)


values_v0 = st.builds(rec.TransactionLogValue, int64, int16, int32, int8, partitions, int64, int64)
values_v1 = st.builds(rec.TransactionLogValue, int64, int16, int32, int8, partitions, int64, int64, int64, int64, int16)


@given(values_v0)
def test_value_round_trip_v0(value: rec.TransactionLogValue) -> None:
    assert rec.decode_value(rec.encode_value(value)) == value


@given(values_v1)
def test_value_round_trip_v1(value: rec.TransactionLogValue) -> None:
    assert rec.decode_value(rec.encode_value(value, version=1)) == value
