"""Reading ``__consumer_offsets`` back (loader.py), as a pure function.

No coordinator, store or clock: entries go in, a ``LoadedPartition`` value
comes out and is compared whole.  How the coordinator installs it is tested
through ``load_partition`` in test_group_coordinator.py and
test_group_txn_offsets.py.
"""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onceflow.coordinator.group import log_records as rec
from onceflow.coordinator.group.loader import (
    LoadedGroup,
    LoadedOffset,
    LoadedPartition,
    build_group,
    read_partition,
)
from onceflow.coordinator.group.metadata import GroupState
from onceflow.coordinator.group.types import OffsetAndMetadata, StoredEntry, StoredMarker, StoredRecord

T0, T1 = ("t", 0), ("t", 1)
P1, P2 = 1000, 2000
SUB = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"  # ConsumerProtocolSubscription v0 of topic "t"


def off(offset: int) -> OffsetAndMetadata:
    """The offset as ``offset_record`` writes it."""
    return OffsetAndMetadata(offset, -1, "", 1)


def offset_record(group: str, tp: tuple[str, int], offset: int | None, producer_id: int = -1) -> StoredRecord:
    key = rec.encode_offset_commit_key(rec.OffsetCommitKey(group, tp[0], tp[1]))
    value = None if offset is None else rec.encode_offset_commit_value(rec.OffsetCommitValue(offset, -1, "", 1))
    return StoredRecord(key, value, producer_id, producer_id >= 0)


def metadata_record(group: str, value: rec.GroupMetadataValue | None) -> StoredRecord:
    encoded = None if value is None else rec.encode_group_metadata_value(value)
    return StoredRecord(rec.encode_group_metadata_key(rec.GroupMetadataKey(group)), encoded)


def member(member_id: str, instance: str | None = None, assignment: bytes = b"") -> rec.MemberMetadataValue:
    return rec.MemberMetadataValue(member_id, instance, "client", "/h", 30_000, 10_000, SUB, assignment)


def group_value(generation: int, *members: rec.MemberMetadataValue, leader: str | None = None,
                timestamp: int = 5) -> rec.GroupMetadataValue:
    protocol = "range" if members else None
    if leader is None and members:
        leader = members[0].member_id
    return rec.GroupMetadataValue("consumer", generation, protocol, leader, timestamp, members)


def read(*entries: StoredEntry, first_position: int = 1) -> LoadedPartition:
    return read_partition(7, entries, first_position)


def committed_only(loaded: LoadedPartition) -> dict[str, dict[tuple[str, int], int]]:
    """group -> partition -> offset: what OffsetFetch would answer, positions left out."""
    return {g.group_id: {tp: o.offset.offset for tp, o in g.committed.items()} for g in loaded.groups if g.committed}


# ============================================================ plain records


def test_last_value_wins_and_tombstones() -> None:
    loaded = read(
        offset_record("g", T0, 1),
        offset_record("g", T0, 2),
        offset_record("g", T1, 9),
        offset_record("g", T1, None),
        offset_record("h", T0, 3),
        offset_record("h", T0, None),  # h is left with nothing: not loaded
    )
    assert loaded == LoadedPartition(groups=(LoadedGroup("g", None, {T0: LoadedOffset(2, off(2))}, {}),), end_position=7)


def test_plain_tuples_are_non_transactional_records() -> None:
    record = offset_record("g", T0, 4)
    assert read((record.key, record.value)) == read(record)


def test_positions_count_every_entry_from_first_position() -> None:
    """Markers and skipped records take a position too: positions stand in for log offsets."""
    loaded = read(
        StoredMarker(P1, True),
        (b"\x00\x63junk", b"whatever"),
        offset_record("g", T0, 4),
        first_position=100,
    )
    assert loaded.groups[0].committed == {T0: LoadedOffset(102, off(4))}
    assert loaded.end_position == 103
    assert read(first_position=42) == LoadedPartition((), 42)


def test_reading_is_pure() -> None:
    entries = [offset_record("g", T0, 5, P1), metadata_record("g", group_value(1, member("m"))), offset_record("g", T1, 1)]
    first = read_partition(0, iter(entries))  # any iterable, read once
    assert read_partition(0, entries) == first == read_partition(0, list(entries))


# ============================================================ group metadata


def test_group_metadata_last_wins_wherever_it_stands() -> None:
    v1, v2 = group_value(1, member("m1")), group_value(2, member("m1"), member("m2"))
    loaded = read(
        offset_record("g", T0, 1),
        metadata_record("g", v1),
        metadata_record("gone", group_value(3)),
        offset_record("g", T0, 2),
        metadata_record("g", v2),
        metadata_record("gone", None),
    )
    assert loaded.groups == (LoadedGroup("g", v2, {T0: LoadedOffset(4, off(2))}, {}),)


def test_groups_with_metadata_come_first_then_offsets_only_groups() -> None:
    loaded = read(
        offset_record("offsets-only", T0, 1),
        offset_record("txn-only", T0, 2, P1),
        metadata_record("b", group_value(1)),
        offset_record("both", T0, 3),
        metadata_record("a", group_value(1)),
        metadata_record("both", group_value(1)),
    )
    assert [(g.group_id, g.metadata is not None) for g in loaded.groups] == [
        ("b", True), ("a", True), ("both", True), ("offsets-only", False), ("txn-only", False),
    ]


# ============================================================ transactional records


def test_commit_marker_installs_a_transactions_offsets() -> None:
    loaded = read(offset_record("g", T0, 1), offset_record("g", T0, 5, P1), offset_record("g", T1, 6, P1),
                  StoredMarker(P1, True))
    assert loaded.groups == (LoadedGroup("g", None, {T0: LoadedOffset(2, off(5)), T1: LoadedOffset(3, off(6))}, {}),)


def test_abort_marker_drops_them() -> None:
    loaded = read(offset_record("g", T0, 1), offset_record("g", T0, 5, P1), offset_record("g", T1, 6, P1),
                  StoredMarker(P1, False))
    assert loaded.groups == (LoadedGroup("g", None, {T0: LoadedOffset(1, off(1))}, {}),)


def test_a_later_record_wins_over_a_committed_transaction() -> None:
    """Kafka compares log offsets: COMMIT installs a record only over an older one."""
    loaded = read(
        offset_record("g", T0, 5, P1),
        offset_record("g", T0, 8),  # later than the transactional record
        offset_record("g", T1, 2),
        offset_record("g", T1, 9, P1),  # later than the plain one
        offset_record("g", T0, 20, P2),
        offset_record("g", T1, 21, P2),
        StoredMarker(P2, True),
        StoredMarker(P1, True),  # P1's records are older than P2's: P2's stay
    )
    assert committed_only(loaded) == {"g": {T0: 20, T1: 21}}
    assert loaded.groups[0].committed == {T0: LoadedOffset(5, off(20)), T1: LoadedOffset(6, off(21))}


def test_open_transactions_stay_pending_per_group_and_producer() -> None:
    loaded = read(
        offset_record("g", T0, 1),
        StoredMarker(P1, True),  # an earlier transaction's marker: nothing pending then
        offset_record("g", T0, 5, P1),
        offset_record("txn-only", T0, 7, P1),
        offset_record("g", T1, 3, P2),
        offset_record("g", T1, 4, P2),  # the producer's later record for the partition replaces its earlier one
    )
    assert loaded.groups == (
        LoadedGroup("g", None, {T0: LoadedOffset(1, off(1))},
                    {P1: {T0: LoadedOffset(3, off(5))}, P2: {T1: LoadedOffset(6, off(4))}}),
        LoadedGroup("txn-only", None, {}, {P1: {T0: LoadedOffset(4, off(7))}}),
    )


def test_records_after_a_marker_belong_to_the_next_transaction() -> None:
    loaded = read(
        offset_record("g", T0, 1, P1),
        StoredMarker(P1, False),
        offset_record("g", T0, 2, P1),
        StoredMarker(P1, True),
        offset_record("g", T0, 3, P1),
    )
    assert loaded.groups == (LoadedGroup("g", None, {T0: LoadedOffset(3, off(2))}, {P1: {T0: LoadedOffset(5, off(3))}}),)


def test_a_transactional_tombstone_removes_only_the_pending_entry() -> None:
    loaded = read(
        offset_record("g", T0, 1),
        offset_record("g", T0, 5, P1),
        offset_record("g", T0, None, P1),
        offset_record("g", T1, 6, P1),
        StoredMarker(P1, True),
    )
    assert committed_only(loaded) == {"g": {T0: 1, T1: 6}}


def test_a_plain_tombstone_does_not_cancel_a_pending_commit() -> None:
    """Kafka's loader: the tombstone removes the committed offset; the
    transaction's record, when committed, is installed after it."""
    loaded = read(offset_record("g", T0, 1), offset_record("g", T0, 5, P1), offset_record("g", T0, None),
                  StoredMarker(P1, True))
    assert committed_only(loaded) == {"g": {T0: 5}}


# ============================================================ what is skipped


def test_unreadable_records_are_skipped_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    good = offset_record("g", T0, 4)
    with caplog.at_level(logging.WARNING, logger="onceflow.coordinator.group.loader"):
        loaded = read(
            StoredRecord(b"\x00", b""),  # a key that does not decode
            StoredRecord(b"\x00\x63junk", b"whatever"),  # a key version Kafka does not define
            StoredRecord(good.key, b"\x00"),  # an offset value that does not decode
            StoredRecord(rec.encode_group_metadata_key(rec.GroupMetadataKey("g")), b"\x00"),
            good,
        )
    assert loaded == LoadedPartition((LoadedGroup("g", None, {T0: LoadedOffset(5, off(4))}, {}),), 6)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 4 and all(m.startswith("__consumer_offsets-7: ") for m in messages)
    assert "unknown key version 99" in messages[1]


# ============================================================ properties

plain_or_txn = st.lists(
    st.tuples(st.booleans(), st.sampled_from(["a", "b"]), st.sampled_from([T0, T1]), st.integers(0, 100)),
    max_size=30,
)


def entries_of(ops: list[tuple[bool, str, tuple[str, int], int]], *, txn_as_plain: bool = False) -> list[StoredEntry]:
    return [offset_record(g, tp, o, -1 if txn_as_plain or not is_txn else P1) for is_txn, g, tp, o in ops]


@given(plain_or_txn)
def test_an_aborted_transaction_reads_as_if_never_written(ops: list[tuple[bool, str, tuple[str, int], int]]) -> None:
    with_abort = read(*entries_of(ops), StoredMarker(P1, False))
    without = read(*entries_of([op for op in ops if not op[0]]))
    assert committed_only(with_abort) == committed_only(without)
    assert all(not g.pending_transactional for g in with_abort.groups)


@given(plain_or_txn)
def test_a_committed_transaction_reads_like_plain_records_in_its_place(
    ops: list[tuple[bool, str, tuple[str, int], int]],
) -> None:
    """Without tombstones, COMMIT installs exactly what the same records
    written plain at the same positions would have left."""
    committed = read(*entries_of(ops), StoredMarker(P1, True))
    plain = read(*entries_of(ops, txn_as_plain=True), StoredMarker(P1, True))
    assert {g.group_id: g.committed for g in committed.groups} == {g.group_id: g.committed for g in plain.groups}
    assert committed.end_position == plain.end_position == len(ops) + 2


# ============================================================ build_group


def test_build_group_from_metadata_and_offsets() -> None:
    value = group_value(4, member("m1", assignment=b"a1"), member("m2", "inst"), leader="m2")
    loaded = LoadedGroup("g", value, {T0: LoadedOffset(3, off(5))}, {P1: {T1: LoadedOffset(9, off(6))}})
    group = build_group(0, loaded, now_ms=1_000)
    assert (group.state, group.generation_id, group.protocol_type, group.protocol_name, group.leader_id) == (
        GroupState.STABLE, 4, "consumer", "range", "m2")
    assert list(group.members) == ["m1", "m2"] and group.static_members == {"inst": "m2"}
    assert group.get("m1").assignment == b"a1" and group.get("m1").metadata("range") == SUB
    assert group.current_state_timestamp_ms == 5 and group.subscribed_topics == {"t"}
    assert group.offsets.committed == {T0: off(5)} and group.offsets.committed_seq == {T0: 3}
    pending = group.offsets.pending_transactional[P1][T1]
    assert (pending.offset, pending.seq) == (off(6), 9) and group.active_producers == {P1}


def test_build_group_without_members_or_metadata() -> None:
    empty = build_group(0, LoadedGroup("g", group_value(2, timestamp=-1), {}, {}), now_ms=1_000)
    assert (empty.state, empty.generation_id, empty.protocol_type, empty.current_state_timestamp_ms) == (
        GroupState.EMPTY, 2, "consumer", None)
    simple = build_group(0, LoadedGroup("s", None, {T0: LoadedOffset(1, off(1))}, {}), now_ms=1_000)
    assert (simple.state, simple.generation_id, simple.protocol_type, simple.current_state_timestamp_ms) == (
        GroupState.EMPTY, 0, None, 1_000)
    assert simple.offset(T0) == off(1)


def test_build_group_elects_a_leader_that_is_a_member() -> None:
    group = build_group(0, LoadedGroup("g", group_value(1, member("m1"), member("m2"), leader="gone"), {}, {}), 0)
    assert group.leader_id == "m1"


def test_build_group_with_unusable_metadata_keeps_the_offsets(caplog: pytest.LogCaptureFixture) -> None:
    twice = group_value(3, member("m1"), member("m1"))  # a member listed twice
    with caplog.at_level(logging.ERROR, logger="onceflow.coordinator.group.loader"):
        group = build_group(7, LoadedGroup("g", twice, {T0: LoadedOffset(1, off(8))}, {}), now_ms=1_000)
    assert (group.state, group.generation_id, list(group.members)) == (GroupState.EMPTY, 0, [])
    assert group.offset(T0) == off(8)
    assert "__consumer_offsets-7: unusable metadata for group g" in caplog.text
