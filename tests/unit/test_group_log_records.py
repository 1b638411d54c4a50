"""``__consumer_offsets`` record encoding (log_records.py)."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onceflow.coordinator.group import log_records as rec

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=40)
opt_text = st.none() | text
blob = st.binary(max_size=64)


def s16(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def b32(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def uvarint(n: int) -> bytes:
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def cstr(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


def test_key_layout_is_kafkas() -> None:
    assert rec.encode_offset_commit_key(rec.OffsetCommitKey("g", "t", 7)) == (
        b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x07"
    )
    assert rec.encode_group_metadata_key(rec.GroupMetadataKey("grp")) == b"\x00\x02\x00\x03grp"


def test_offset_value_layout_is_kafkas() -> None:
    v = rec.OffsetCommitValue(offset=10, leader_epoch=3, metadata="m", commit_timestamp_ms=99)
    assert rec.encode_offset_commit_value(v) == (
        b"\x00\x03" + struct.pack(">qi", 10, 3) + b"\x00\x01m" + struct.pack(">q", 99)
    )


def test_group_value_layout_is_kafkas() -> None:
    m = rec.MemberMetadataValue("m1", None, "cid", "/h", 300, 100, b"S", b"AA")
    v = rec.GroupMetadataValue("consumer", 5, "range", "m1", 1234, (m,))
    expected = (
        b"\x00\x03" + s16("consumer") + struct.pack(">i", 5) + s16("range") + s16("m1") + struct.pack(">q", 1234)
        + struct.pack(">i", 1)
        + s16("m1") + s16(None) + s16("cid") + s16("/h") + struct.pack(">ii", 300, 100) + b32(b"S") + b32(b"AA")
    )
    assert rec.encode_group_metadata_value(v) == expected
    empty = rec.GroupMetadataValue("consumer", 6, None, None, 1, ())
    assert rec.encode_group_metadata_value(empty) == (
        b"\x00\x03" + s16("consumer") + struct.pack(">i", 6) + s16(None) + s16(None) + struct.pack(">qi", 1, 0)
    )


@given(text, text, int32)
def test_offset_key_roundtrip(group: str, topic: str, partition: int) -> None:
    key = rec.OffsetCommitKey(group, topic, partition)
    assert rec.decode_key(rec.encode_offset_commit_key(key)) == key


@given(text)
def test_group_key_roundtrip(group: str) -> None:
    key = rec.GroupMetadataKey(group)
    assert rec.decode_key(rec.encode_group_metadata_key(key)) == key


@given(int64, int32, text, int64)
def test_offset_value_roundtrip(offset: int, epoch: int, metadata: str, ts: int) -> None:
    v = rec.OffsetCommitValue(offset, epoch, metadata, ts)
    assert rec.decode_offset_commit_value(rec.encode_offset_commit_value(v)) == v


members = st.builds(rec.MemberMetadataValue, text, opt_text, text, text, int32, int32, blob, blob)


@given(text, int32, opt_text, opt_text, int64, st.lists(members, max_size=4).map(tuple))
def test_group_value_roundtrip(ptype, generation, protocol, leader, ts, ms) -> None:
    v = rec.GroupMetadataValue(ptype, generation, protocol, leader, ts, ms)
    assert rec.decode_group_metadata_value(rec.encode_group_metadata_value(v)) == v


def test_none_metadata_is_written_as_empty() -> None:
    v = rec.OffsetCommitValue(1, -1, None, 5)  # type: ignore[arg-type]
    assert rec.decode_offset_commit_value(rec.encode_offset_commit_value(v)).metadata == ""


def test_tombstones() -> None:
    assert rec.decode_offset_commit_value(None) is None
    assert rec.decode_group_metadata_value(None) is None


def test_unknown_key_version() -> None:
    assert rec.decode_key(b"\x00\x09whatever") == rec.UnknownKey(9)


def test_old_key_version_zero() -> None:
    assert rec.decode_key(b"\x00\x00" + s16("g") + s16("t") + struct.pack(">i", 1)) == rec.OffsetCommitKey("g", "t", 1)


def test_old_offset_values() -> None:
    v0 = b"\x00\x00" + struct.pack(">q", 5) + s16("m") + struct.pack(">q", 7)
    assert rec.decode_offset_commit_value(v0) == rec.OffsetCommitValue(5, -1, "m", 7)
    v1 = b"\x00\x01" + struct.pack(">q", 5) + s16("m") + struct.pack(">qq", 7, 8)
    assert rec.decode_offset_commit_value(v1) == rec.OffsetCommitValue(5, -1, "m", 7, 8)
    v2 = b"\x00\x02" + struct.pack(">q", 5) + s16("") + struct.pack(">q", 7)
    assert rec.decode_offset_commit_value(v2) == rec.OffsetCommitValue(5, -1, "", 7)


def test_flexible_offset_value_v4() -> None:
    tagged = uvarint(1) + uvarint(0) + uvarint(2) + b"xx"  # one unknown tagged field
    v4 = b"\x00\x04" + struct.pack(">qi", 5, 2) + cstr("meta") + struct.pack(">q", 7) + tagged
    assert rec.decode_offset_commit_value(v4) == rec.OffsetCommitValue(5, 2, "meta", 7)


def test_old_group_values() -> None:
    member_v0 = s16("m") + s16("c") + s16("h") + struct.pack(">i", 100) + b32(b"s") + b32(b"a")
    v0 = b"\x00\x00" + s16("consumer") + struct.pack(">i", 2) + s16("range") + s16("m") + struct.pack(">i", 1) + member_v0
    got = rec.decode_group_metadata_value(v0)
    assert got == rec.GroupMetadataValue(
        "consumer", 2, "range", "m", -1, (rec.MemberMetadataValue("m", None, "c", "h", 100, 100, b"s", b"a"),)
    )
    member_v1 = s16("m") + s16("c") + s16("h") + struct.pack(">ii", 300, 100) + b32(b"s") + b32(b"a")
    v2 = b"\x00\x02" + s16("consumer") + struct.pack(">i", 2) + s16(None) + s16(None) + struct.pack(">qi", 9, 1) + member_v1
    assert rec.decode_group_metadata_value(v2).members[0].rebalance_timeout_ms == 300
    assert rec.decode_group_metadata_value(v2).current_state_timestamp_ms == 9


def test_flexible_group_value_v4() -> None:
    member = (
        cstr("m") + cstr("inst") + cstr("c") + cstr("h") + struct.pack(">ii", 300, 100)
        + uvarint(2) + b"s" + uvarint(2) + b"a" + uvarint(0)
    )
    v4 = (
        b"\x00\x04" + cstr("consumer") + struct.pack(">i", 3) + cstr("range") + cstr(None) + struct.pack(">q", 11)
        + uvarint(2) + member + uvarint(0)
    )
    assert rec.decode_group_metadata_value(v4) == rec.GroupMetadataValue(
        "consumer", 3, "range", None, 11, (rec.MemberMetadataValue("m", "inst", "c", "h", 300, 100, b"s", b"a"),)
    )


def test_consumer_member_value_layout_is_kafkas() -> None:
    """ConsumerGroupMemberMetadataValue v0 as Kafka 4.3.1 writes it for a consumer-protocol member:
    the topic names sorted and tag 0 (ClassicMemberMetadata) present with null.  Without the tag,
    Kafka reads an empty classic metadata instead of null and takes the member for one of the
    classic protocol (kafka-dump-log decoded our records so, without ``classicMemberMetadata``)."""
    v = rec.ConsumerMemberValue(instance_id=None, rack_id="r", client_id="c", client_host="/h",
                                subscribed_topic_names=("b", "a"), subscribed_topic_regex="",
                                rebalance_timeout_ms=300000, server_assignor=None)
    expected = (
        b"\x00\x00" + cstr(None) + cstr("r") + cstr("c") + cstr("/h") + uvarint(3) + cstr("a") + cstr("b") + cstr("")
        + struct.pack(">i", 300000) + cstr(None)
        + uvarint(1) + uvarint(0) + uvarint(1) + uvarint(0)  # one tagged field: tag 0, 1 byte, null
    )
    assert rec.encode_consumer_member(v) == expected
    assert rec.decode_consumer_member(expected) == rec.ConsumerMemberValue(
        None, "r", "c", "/h", ("a", "b"), "", 300000, None)


@pytest.mark.parametrize(
    "decode,data",
    [
        (rec.decode_key, b"\x00"),
        (rec.decode_key, b"\x00\x01\x00\x05ab"),
        (rec.decode_offset_commit_value, b"\x00\x03\x00"),
        (rec.decode_offset_commit_value, b"\x00\x07" + b"\x00" * 30),
        (rec.decode_group_metadata_value, b"\x00\x03\x00\x08consumer"),
        (rec.decode_group_metadata_value, b"\x00\x03" + s16(None)),
    ],
)
def test_malformed(decode, data: bytes) -> None:
    with pytest.raises(rec.RecordDecodeError):
        decode(data)


def _current_assignment(member_epoch: int, epochs_tag: list[int] | None, partitions: list[int]) -> bytes:
    """A ConsumerGroupCurrentMemberAssignmentValue v0 of one topic, its assignment epochs (tag 0) optional."""
    topic = uuid.UUID(int=7)
    body = struct.pack(">h", 0) + struct.pack(">ii", member_epoch, member_epoch) + b"\x00"  # state STABLE
    body += uvarint(2) + topic.bytes + uvarint(len(partitions) + 1) + b"".join(struct.pack(">i", p) for p in partitions)
    if epochs_tag is None:
        body += uvarint(0)
    else:
        tag = uvarint(len(epochs_tag) + 1) + b"".join(struct.pack(">i", e) for e in epochs_tag)
        body += uvarint(1) + uvarint(0) + uvarint(len(tag)) + tag
    return body + uvarint(1) + uvarint(0)  # no partitions pending revocation, no tagged fields


def test_current_assignments_without_usable_epochs_read_as_kafka_reads_them() -> None:
    """Kafka's assignmentFromTopicPartitions: before 4.3 no epochs (the member epoch, at
    least 0: a static member away is at -2); epochs not one per partition: the same."""
    topic = uuid.UUID(int=7)
    assert rec.decode_current_assignment(_current_assignment(5, [3, 4], [0, 1])).assigned == {topic: {0: 3, 1: 4}}
    assert rec.decode_current_assignment(_current_assignment(5, None, [0, 1])).assigned == {topic: {0: 5, 1: 5}}
    assert rec.decode_current_assignment(_current_assignment(-2, None, [0])).assigned == {topic: {0: 0}}
    assert rec.decode_current_assignment(_current_assignment(5, [3], [0, 1])).assigned == {topic: {0: 5, 1: 5}}
