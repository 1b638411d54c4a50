"""Transactional offset commits (TxnOffsetCommit, KIP-98 / KIP-447) in the group coordinator.

Driven like test_group_coordinator.py: a FakeClock, and a FakeStore whose
appends the test acknowledges (or fails) explicitly.  ``Harness.end_txn``
plays the broker after a COMMIT/ABORT marker became durable in the group's
``__consumer_offsets`` partition.
"""

from __future__ import annotations

import pytest

from onceflow.coordinator.group import log_records as rec
from onceflow.coordinator.group.metadata import GroupState
from onceflow.coordinator.group.types import (
    FetchedOffset,
    OffsetAndMetadata,
    StoredMarker,
    StoredRecord,
)
from onceflow.protocol.errors import ErrorCode

from .test_group_coordinator import Box, Harness

E = ErrorCode
O = OffsetAndMetadata
T0, T1, T2, T3 = ("t", 0), ("t", 1), ("t", 2), ("t", 3)
P1, P2 = 1000, 2000
UNSTABLE = FetchedOffset(-1, error=E.unstable_offset_commit)
NONE = FetchedOffset(-1)
TXN = {"producer_id": P1, "producer_epoch": 0, "transactional": True}


def committed(h: Harness, group: str = "g") -> dict:
    error, got = h.coord.fetch_offsets(group, None)
    assert error is E.none
    return {tp: f.offset for tp, f in got.items()}


# ============================================================ the basic flow


def test_pending_until_the_transaction_commits() -> None:
    h = Harness()
    plain = h.commit({T0: O(5)})
    h.store.complete_all()
    assert plain.one == {T0: E.none}
    assert h.store.append_kwargs == [{}]  # plain commits: the store's original signature

    box = h.txn_commit({T0: O(10, 3, "x"), T1: O(7)}, producer_id=P1, epoch=4)
    assert not box
    # One transactional batch of the producer, with ordinary offset records.
    assert h.store.pending_kwargs == [{"producer_id": P1, "producer_epoch": 4, "transactional": True}]
    assert h.store.pending_keys() == [rec.OffsetCommitKey("g", "t", 0), rec.OffsetCommitKey("g", "t", 1)]
    assert h.store.pending[0][0] == h.coord.partition_for("g")
    value = rec.decode_offset_commit_value(h.store.pending[0][1][0][1])
    assert (value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms) == (10, 3, "x", h.clock.now_ms())
    # Unstable from the moment it is accepted.
    assert h.fetch(T0) == FetchedOffset(5) and h.fetch(T0, require_stable=True) == UNSTABLE

    h.store.complete_all()
    assert box.one == {T0: E.none, T1: E.none}
    # Durable, but the transaction has not committed: invisible.
    assert h.fetch(T0) == FetchedOffset(5) and h.fetch(T1) == NONE
    assert committed(h) == {T0: 5}
    _, stable = h.coord.fetch_offsets("g", [T0, T1, T2], require_stable=True)
    assert stable == {T0: UNSTABLE, T1: UNSTABLE, T2: NONE}  # only partitions with pending offsets
    assert h.coord.fetch_offsets("g", None, require_stable=True)[1] == {T0: UNSTABLE}

    h.end_txn(P1, commit=True)
    assert h.fetch(T0, require_stable=True) == FetchedOffset(10, 3, "x")
    assert h.fetch(T1, require_stable=True) == FetchedOffset(7)
    assert h.coord.group("g").offsets.pending_transactional == {}
    assert not h.store.pending  # completing writes nothing: the marker is the record


def test_abort_drops_the_pending_offsets() -> None:
    h = Harness()
    h.commit({T0: O(5)})
    h.store.complete_all()
    box = h.txn_commit({T0: O(10), T1: O(7)})
    h.store.complete_all()
    assert box.one == {T0: E.none, T1: E.none}
    h.end_txn(P1, commit=False)
    assert h.fetch(T0, require_stable=True) == FetchedOffset(5)
    assert h.fetch(T1, require_stable=True) == NONE
    assert h.coord.group("g").offsets.pending_transactional == {}
    # A second marker for the same producer (a resent one) changes nothing.
    h.end_txn(P1, commit=True)
    assert committed(h) == {T0: 5}


def test_offset_metadata_too_large_per_partition() -> None:
    h = Harness(offset_metadata_max_bytes=3)
    box = h.txn_commit({T0: O(1, metadata="abc"), T1: O(2, metadata="abcd")})
    assert h.store.pending_keys() == [rec.OffsetCommitKey("g", "t", 0)]
    h.store.complete_all()
    assert box.one == {T0: E.none, T1: E.offset_metadata_too_large}
    assert h.fetch(T1, require_stable=True) == NONE
    too_large = h.txn_commit({T2: O(1, metadata="abcd")})
    assert too_large.one == {T2: E.offset_metadata_too_large} and not h.store.pending
    h.end_txn(P1)
    assert committed(h) == {T0: 1}


def test_request_validation() -> None:
    h = Harness()
    assert h.txn_commit({T0: O(1)}, group="").one == {T0: E.invalid_group_id}
    assert h.txn_commit({T0: O(1)}, producer_id=-1).one == {T0: E.invalid_producer_id_mapping}
    assert h.coord.group("g") is None and not h.store.pending
    assert h.txn_commit({}).one == {}


def test_a_commit_the_transaction_coordinator_does_not_verify_writes_nothing() -> None:
    """Issue 7, defect 2: the group's offsets partition must be in the producer's transaction
    (KIP-890 part 1).  Whatever the verification answers is the answer, and nothing is written,
    so no transaction nobody knows of is opened in __consumer_offsets."""
    h = Harness()
    asked: list[int] = []
    for refusal in (E.invalid_txn_state, E.invalid_producer_id_mapping, E.invalid_producer_epoch,
                    E.concurrent_transactions, E.transaction_abortable):
        box = h.txn_commit({T0: O(5), T1: O(6)}, verify=lambda p, r=refusal: asked.append(p) or r)  # type: ignore[func-returns-value]
        assert box.one == {T0: refusal, T1: refusal}
        assert not h.store.pending and h.coord.group("g") is None
        assert h.fetch(T0, require_stable=True) == NONE, "nothing pending, nothing unstable"
    assert set(asked) == {h.coord.partition_for("g")}
    box = h.txn_commit({T0: O(5)}, verify=lambda p: E.none)
    h.store.complete_all()
    assert box.one == {T0: E.none} and h.fetch(T0, require_stable=True) == UNSTABLE


# ============================================================ KIP-447 fencing


def test_generation_and_member_are_validated() -> None:
    h = Harness()
    a, b = h.stable_group()
    assert a.generation_id == 1
    assert h.txn_commit({T0: O(1)}, generation=1, member_id="ghost").one == {T0: E.unknown_member_id}
    assert h.txn_commit({T0: O(1)}, generation=2, member_id=a.member_id).one == {T0: E.illegal_generation}
    assert h.txn_commit({T0: O(1)}, generation=0, member_id=b.member_id).one == {T0: E.illegal_generation}
    # A member id without a generation is a member's request of generation -1.
    assert h.txn_commit({T0: O(1)}, member_id=a.member_id).one == {T0: E.illegal_generation}
    assert h.txn_commit({T0: O(1)}, generation=1, member_id=a.member_id, instance="nope").one == {
        T0: E.unknown_member_id}
    assert not h.store.pending
    # The current generation commits.
    ok = h.txn_commit({T0: O(1)}, generation=1, member_id=a.member_id)
    h.store.complete_all()
    assert ok.one == {T0: E.none}
    # Before v3 (no member id, no generation) anyone may commit, even to a
    # group with members -- unlike OffsetCommit.
    assert h.commit({T1: O(1)}).one == {T1: E.unknown_member_id}
    old_client = h.txn_commit({T1: O(2)}, producer_id=P2)
    h.store.complete_all()
    assert old_client.one == {T1: E.none}
    h.end_txn(P1)
    h.end_txn(P2)
    assert committed(h) == {T0: 1, T1: 2}


def test_transactional_commits_do_not_heartbeat_and_ignore_the_rebalance() -> None:
    h = Harness()
    (m,) = h.stable_group(n=1)
    h.join(member_id=m.member_id)  # the leader rejoins: a rebalance, then CompletingRebalance
    assert h.coord.group_state("g") is GroupState.COMPLETING_REBALANCE
    generation = h.coord.group("g").generation_id
    assert h.commit({T0: O(1)}, generation=generation, member_id=m.member_id).one == {T0: E.rebalance_in_progress}
    box = h.txn_commit({T0: O(1)}, generation=generation, member_id=m.member_id)
    h.store.complete_all()
    assert box.one == {T0: E.none}
    deadline = h.coord.group("g").get(m.member_id).session_deadline_ms
    h.clock.advance(1000)
    h.txn_commit({T1: O(1)}, generation=generation, member_id=m.member_id)
    assert h.coord.group("g").get(m.member_id).session_deadline_ms == deadline


def test_fenced_static_member() -> None:
    h = Harness()
    first = h.join(client_id="a", instance="i1")
    h.coord.tick()
    old = first.one
    h.sync(old, assignments={old.member_id: b"A"})
    h.store.complete_all()
    again = h.join(instance="i1", client_id="a")  # the instance restarts with a new member id
    h.store.complete_all()
    new = again.one
    assert new.member_id != old.member_id
    fenced = h.txn_commit({T0: O(1)}, generation=1, member_id=old.member_id, instance="i1")
    assert fenced.one == {T0: E.fenced_instance_id}
    ok = h.txn_commit({T0: O(1)}, generation=1, member_id=new.member_id, instance="i1")
    h.store.complete_all()
    assert ok.one == {T0: E.none}


def test_commit_to_a_group_that_does_not_exist() -> None:
    h = Harness(offsets_retention_check_interval_ms=1000)
    box = h.txn_commit({T0: O(3)}, group="new")
    assert h.coord.group_state("new") is GroupState.EMPTY  # created at once, as Kafka does
    h.store.complete_all()
    assert box.one == {T0: E.none}
    assert h.fetch(T0, group="new") == NONE
    h.end_txn(P1, group="new")
    assert h.fetch(T0, group="new") == FetchedOffset(3)
    # A KIP-447 commit (a generation) for an unknown group: ILLEGAL_GENERATION, as
    # OffsetCommit before v9, and no group is created (Kafka 4's OffsetMetadataManager).
    for generation, member_id in ((3, "m"), (0, "")):
        fenced = h.txn_commit({T0: O(1)}, group="other", generation=generation, member_id=member_id)
        assert fenced.one == {T0: E.illegal_generation}
    assert h.coord.group("other") is None and not h.store.pending
    assert h.commit({T0: O(1)}, group="third", generation=3, member_id="m", api_version=8).one == {
        T0: E.illegal_generation}
    # Generation -1 with a member id: the group is created (Empty), and an Empty group
    # takes commits of generation -1.
    anyone = h.txn_commit({T0: O(1)}, group="fourth", member_id="m")
    assert h.coord.group_state("fourth") is GroupState.EMPTY
    h.store.complete_all()
    assert anyone.one == {T0: E.none}
    # An empty group with no offsets goes with the next expiration check.
    h.end_txn(P1, commit=False, group="fourth")
    h.advance(1000)
    assert h.coord.group("fourth") is None
    assert h.coord.group("new") is not None


# ============================================================ failures


@pytest.mark.parametrize(
    ("store_error", "reported"),
    [
        (E.not_leader_or_follower, E.not_coordinator),
        (E.not_enough_replicas, E.coordinator_not_available),
        (E.invalid_producer_epoch, E.invalid_producer_epoch),  # the log fenced the producer
        (E.producer_fenced, E.producer_fenced),
    ],
)
def test_store_error_leaves_nothing_pending(store_error: ErrorCode, reported: ErrorCode) -> None:
    h = Harness()
    h.commit({T0: O(5)})
    h.store.complete_all()
    box = h.txn_commit({T0: O(10), T1: O(11)})
    h.store.complete_all(store_error)
    assert box.one == {T0: reported, T1: reported}
    group = h.coord.group("g")
    assert group.offsets.pending_transactional == {} and not group.offsets.has_pending(T0)
    assert h.fetch(T0, require_stable=True) == FetchedOffset(5)
    h.end_txn(P1)
    assert committed(h) == {T0: 5}


def test_store_error_on_a_new_group_leaves_it_to_expire() -> None:
    h = Harness(offsets_retention_check_interval_ms=1000)
    box = h.txn_commit({T0: O(1)}, group="s")
    h.store.complete_all(E.kafka_storage_error)
    assert box.one == {T0: E.not_coordinator}
    assert not h.coord.group("s").has_offsets()
    h.advance(1000)
    assert h.coord.group("s") is None


def test_a_failed_append_brings_back_the_superseded_commit() -> None:
    """Deviation from Kafka: Kafka forgets the partition; the earlier record
    of the same transaction is in the log, so it still counts (and counts
    after a restart)."""
    h = Harness()
    h.txn_commit({T0: O(5)})
    h.store.complete_all()
    box = h.txn_commit({T0: O(6)})
    h.store.complete_all(E.kafka_storage_error)
    assert box.one == {T0: E.not_coordinator}
    assert h.fetch(T0, require_stable=True) == UNSTABLE
    h.end_txn(P1)
    assert h.fetch(T0) == FetchedOffset(5)
    fresh = Harness()
    fresh.coord.load_partition(h.coord.partition_for("g"), h.store.partition_entries(h.coord.partition_for("g")))
    assert fresh.fetch(T0) == FetchedOffset(5)


def test_superseded_commits_in_flight() -> None:
    h = Harness()
    h.txn_commit({T0: O(1)})
    h.txn_commit({T0: O(2)})
    h.txn_commit({T0: O(3)})
    h.store.complete_next()  # 1 is in the log
    h.store.complete_next(E.kafka_storage_error)  # 2 is not
    h.store.complete_next(E.kafka_storage_error)  # 3 is not: back to 1
    h.end_txn(P1)
    assert h.fetch(T0) == FetchedOffset(1)


# ============================================================ several producers, ordering


def test_two_producers_are_independent() -> None:
    h = Harness()
    one = h.txn_commit({T0: O(10)}, producer_id=P1)
    two = h.txn_commit({T0: O(20), T1: O(21)}, producer_id=P2)
    h.store.complete_all()
    assert one.one == {T0: E.none} and two.one == {T0: E.none, T1: E.none}
    assert set(h.coord.group("g").active_producers) == {P1, P2}
    h.end_txn(P1, commit=False)
    # P2's offsets are still pending: T0 stays unstable.
    assert h.fetch(T0, require_stable=True) == UNSTABLE and h.fetch(T0) == NONE
    h.end_txn(P2, commit=True)
    assert committed(h) == {T0: 20, T1: 21}
    assert h.coord.fetch_offsets("g", [T0, T1], require_stable=True)[1] == {T0: FetchedOffset(20), T1: FetchedOffset(21)}


def test_the_later_record_wins_whatever_order_transactions_end_in() -> None:
    h = Harness()
    h.txn_commit({T0: O(10)}, producer_id=P1)
    h.txn_commit({T0: O(20)}, producer_id=P2)
    h.store.complete_all()  # P1's record first, then P2's
    h.end_txn(P2)
    assert h.fetch(T0) == FetchedOffset(20)
    h.end_txn(P1)  # committed later, but its record is older
    assert h.fetch(T0) == FetchedOffset(20)


def test_a_later_plain_commit_is_not_overwritten_by_an_earlier_transactional_one() -> None:
    h = Harness()
    h.txn_commit({T0: O(10), T1: O(11)})
    h.store.complete_all()
    h.commit({T0: O(20)})  # acknowledged after the transactional record
    h.store.complete_all()
    assert h.fetch(T0) == FetchedOffset(20)
    h.end_txn(P1)
    assert committed(h) == {T0: 20, T1: 11}


def test_a_later_transactional_commit_overwrites_an_earlier_plain_one() -> None:
    h = Harness()
    h.commit({T0: O(20)})
    h.txn_commit({T0: O(10)})
    h.store.complete_all()  # plain first, then transactional
    h.end_txn(P1)
    assert h.fetch(T0) == FetchedOffset(10)


def test_plain_commit_acknowledged_between_transactional_append_and_marker() -> None:
    h = Harness()
    h.txn_commit({T0: O(10)})
    plain = h.commit({T0: O(20)})
    h.store.complete_next()  # the transactional record
    assert h.fetch(T0, require_stable=True) == UNSTABLE
    h.store.complete_next()  # the plain one, later in the log
    assert plain.one == {T0: E.none}
    h.end_txn(P1)
    assert h.fetch(T0) == FetchedOffset(20)


def test_completion_only_touches_groups_of_the_marker_partition() -> None:
    h = Harness()
    g1, g2 = "g", "group-b"
    assert h.coord.partition_for(g1) != h.coord.partition_for(g2)
    h.txn_commit({T0: O(1)}, group=g1)
    h.txn_commit({T0: O(2)}, group=g2)
    h.store.complete_all()
    h.end_txn(P1, group=g1)
    assert h.fetch(T0, group=g1) == FetchedOffset(1)
    assert h.fetch(T0, group=g2) == NONE and h.fetch(T0, group=g2, require_stable=True) == UNSTABLE
    h.end_txn(P1, group=g2)
    assert h.fetch(T0, group=g2) == FetchedOffset(2)


def test_the_next_transaction_of_the_same_producer() -> None:
    h = Harness()
    h.txn_commit({T0: O(1)})
    h.store.complete_all()
    h.end_txn(P1)
    h.txn_commit({T0: O(2)}, epoch=1)
    h.store.complete_all()
    assert h.store.append_kwargs[-1] == {**TXN, "producer_epoch": 1}
    assert h.fetch(T0) == FetchedOffset(1)
    h.end_txn(P1, commit=False)
    assert h.fetch(T0, require_stable=True) == FetchedOffset(1)


# ============================================================ marker before the acknowledgement


def test_commit_marker_before_the_acknowledgement() -> None:
    """Not something a well-behaved client causes (it waits for TxnOffsetCommit
    before EndTxn); the record precedes the marker in the log, so it counts."""
    h = Harness()
    box = h.txn_commit({T0: O(10)})
    h.end_txn(P1, commit=True)
    assert h.fetch(T0) == NONE and h.fetch(T0, require_stable=True) == UNSTABLE
    h.store.complete_all()
    assert box.one == {T0: E.none}
    assert h.fetch(T0, require_stable=True) == FetchedOffset(10)


def test_commit_marker_before_a_failed_append() -> None:
    h = Harness()
    h.txn_commit({T0: O(10)})
    h.end_txn(P1, commit=True)
    h.store.complete_all(E.kafka_storage_error)
    assert h.fetch(T0, require_stable=True) == NONE
    assert not h.coord.group("g").has_offsets()


def test_abort_marker_before_the_acknowledgement() -> None:
    h = Harness()
    box = h.txn_commit({T0: O(10)})
    h.end_txn(P1, commit=False)
    assert h.fetch(T0, require_stable=True) == NONE
    h.store.complete_all()
    assert box.one == {T0: E.none}
    assert h.fetch(T0, require_stable=True) == NONE
    # The producer's next transaction starts afresh.
    h.txn_commit({T0: O(11)}, epoch=1)
    h.store.complete_all()
    h.end_txn(P1)
    assert h.fetch(T0) == FetchedOffset(11)


# ============================================================ expiry, deletion, shutdown


def test_expiry_leaves_pending_transactional_offsets_alone() -> None:
    h = Harness(offsets_retention_minutes=1, offsets_retention_check_interval_ms=1000)
    h.commit({T0: O(1)}, group="s")
    h.store.complete_all()
    h.txn_commit({T0: O(2), T1: O(3)}, group="s")
    h.store.complete_all()
    h.store.log.clear()
    h.advance(60_000)
    # The committed offset expired (Kafka only spares partitions with a
    # *plain* commit in flight); the pending ones keep the group alive.
    assert h.coord.group("s") is not None and committed(h, "s") == {}
    h.store.complete_all()
    assert [(rec.decode_key(k), v) for _, k, v in h.store.log] == [(rec.OffsetCommitKey("s", "t", 0), None)]
    assert h.fetch(T0, group="s", require_stable=True) == UNSTABLE
    h.advance(600_000)
    assert h.coord.group("s") is not None
    h.end_txn(P1, group="s")
    assert committed(h, "s") == {T0: 2, T1: 3}


def test_offset_delete_drops_pending_transactional_offsets() -> None:
    h = Harness()
    h.commit({T1: O(1)}, group="s")
    h.txn_commit({T0: O(2), T1: O(3)}, group="s")
    h.store.complete_all()
    box = Box()
    h.coord.delete_offsets("s", [T0], box)
    assert not h.store.pending  # nothing committed to tombstone
    assert box.one == (E.none, {T0: E.none})
    assert h.fetch(T0, group="s", require_stable=True) == NONE
    assert h.fetch(T1, group="s", require_stable=True) == UNSTABLE
    h.end_txn(P1, group="s")
    assert committed(h, "s") == {T1: 3}
    # A group held only by pending transactional offsets dies with them.
    h.txn_commit({T2: O(1)}, group="only-txn")
    h.store.complete_all()
    h.coord.delete_offsets("only-txn", [T2], Box())
    assert h.coord.group("only-txn") is None
    h.end_txn(P1, group="only-txn")
    assert h.coord.group("only-txn") is None


def test_delete_groups_drops_pending_transactional_offsets() -> None:
    h = Harness()
    h.commit({T0: O(1)}, group="s")
    h.txn_commit({T0: O(2), T1: O(3)}, group="s")
    h.store.complete_all()
    box = Box()
    h.coord.delete_groups(["s"], box)
    assert h.coord.group("s") is None
    # Kafka writes tombstones for the committed offsets only.
    assert h.store.pending_keys() == [rec.OffsetCommitKey("s", "t", 0)]
    h.store.complete_all()
    assert box.one == {"s": E.none}
    h.end_txn(P1, group="s")
    assert h.coord.group("s") is None
    assert h.fetch(T1, group="s", require_stable=True) == NONE


def test_delete_groups_with_only_pending_transactional_offsets() -> None:
    h = Harness()
    h.txn_commit({T0: O(2)}, group="s")
    h.store.complete_all()
    box = Box()
    h.coord.delete_groups(["s"], box)
    assert box.one == {"s": E.none} and h.coord.group("s") is None
    # The same producer commits to a new group of the same name.
    h.txn_commit({T0: O(5)}, group="s")
    h.store.complete_all()
    h.end_txn(P1, group="s")
    assert h.fetch(T0, group="s") == FetchedOffset(5)


def test_topic_deletion_drops_pending_transactional_offsets() -> None:
    h = Harness()
    h.txn_commit({T0: O(1), ("kept", 0): O(2)}, group="s")
    h.store.complete_all()
    h.coord.on_topic_deleted("t")
    assert h.fetch(T0, group="s", require_stable=True) == NONE
    assert not h.store.pending  # nothing was committed
    h.end_txn(P1, group="s")
    assert committed(h, "s") == {("kept", 0): 2}


def test_shutdown_answers_pending_transactional_commits() -> None:
    h = Harness()
    box = h.txn_commit({T0: O(1)})
    h.coord.shutdown()
    assert box.one == {T0: E.not_coordinator}
    h.store.complete_all()  # late acknowledgement: ignored
    assert len(box) == 1
    h.coord.complete_transaction(h.coord.partition_for("g"), P1, True)  # ignored too
    assert h.txn_commit({T0: O(1)}).one == {T0: E.coordinator_not_available}


# ============================================================ loading


def offset_record(group: str, tp, offset: int | None, producer_id: int = -1) -> StoredRecord:
    key = rec.encode_offset_commit_key(rec.OffsetCommitKey(group, tp[0], tp[1]))
    value = None if offset is None else rec.encode_offset_commit_value(rec.OffsetCommitValue(offset, -1, "", 1))
    return StoredRecord(key, value, producer_id, producer_id >= 0)


def loaded(entries) -> Harness:
    """A coordinator that loaded ``entries`` (as the partition of group "g")."""
    h = Harness()
    h.coord.load_partition(h.coord.partition_for("g"), entries)
    return h


def test_load_committed_transaction() -> None:
    h = loaded([
        (rec.encode_offset_commit_key(rec.OffsetCommitKey("g", "t", 0)),
         rec.encode_offset_commit_value(rec.OffsetCommitValue(1, -1, "", 1))),  # a plain tuple
        offset_record("g", T0, 5, P1),
        offset_record("g", T1, 6, P1),
        StoredMarker(P1, True),
    ])
    assert committed(h) == {T0: 5, T1: 6}
    assert h.coord.group("g").offsets.pending_transactional == {}


def test_load_aborted_transaction() -> None:
    h = loaded([
        offset_record("g", T0, 1),
        offset_record("g", T0, 5, P1),
        offset_record("g", T1, 6, P1),
        StoredMarker(P1, False),
    ])
    assert committed(h) == {T0: 1}
    assert h.fetch(T0, require_stable=True) == FetchedOffset(1)


def test_load_later_plain_record_wins() -> None:
    h = loaded([
        offset_record("g", T0, 5, P1),
        offset_record("g", T0, 8),  # later in the log than the transactional record
        offset_record("g", T1, 2),
        offset_record("g", T1, 9, P1),  # later than the plain one
        StoredMarker(P1, True),
    ])
    assert committed(h) == {T0: 8, T1: 9}


def test_load_two_producers_interleaved() -> None:
    h = loaded([
        offset_record("g", T0, 10, P1),
        offset_record("g", T0, 20, P2),
        offset_record("g", T1, 11, P1),
        StoredMarker(P2, True),
        StoredMarker(P1, True),  # P1's T0 record is older than P2's: P2's stays
    ])
    assert committed(h) == {T0: 20, T1: 11}


def test_load_open_transaction_stays_pending() -> None:
    h = loaded([
        offset_record("g", T0, 1),
        StoredMarker(P1, True),  # a marker of an earlier transaction: nothing pending then
        offset_record("g", T0, 5, P1),
        offset_record("txn-only", T0, 7, P1),
        offset_record("g", T1, 3, P2),
        StoredMarker(P2, False),
    ])
    assert committed(h) == {T0: 1}
    assert h.fetch(T0, require_stable=True) == UNSTABLE and h.fetch(T1, require_stable=True) == NONE
    # A group with only pending offsets is loaded (Empty, like a simple group).
    assert h.coord.group_state("txn-only") is GroupState.EMPTY
    assert h.fetch(T0, group="txn-only") == NONE
    assert h.fetch(T0, group="txn-only", require_stable=True) == UNSTABLE
    # The transaction coordinator writes the marker later.
    h.end_txn(P1, group="g")
    assert committed(h) == {T0: 5}
    assert committed(h, "txn-only") == {}  # another partition's marker
    h.end_txn(P1, group="txn-only")
    assert committed(h, "txn-only") == {T0: 7}


def test_load_open_transaction_then_abort() -> None:
    h = loaded([offset_record("g", T0, 1), offset_record("g", T0, 5, P1)])
    h.end_txn(P1, commit=False)
    assert h.fetch(T0, require_stable=True) == FetchedOffset(1)


def test_load_open_transaction_then_a_later_plain_commit() -> None:
    h = Harness()
    partition = h.coord.partition_for("g")
    h.coord.load_partition(partition, [offset_record("g", T0, 5, P1)])
    h.commit({T0: O(8)})
    h.store.complete_all()
    h.coord.complete_transaction(partition, P1, True)
    assert h.fetch(T0) == FetchedOffset(8)  # the live record is newer than the loaded one


def test_load_transactional_tombstone() -> None:
    h = loaded([
        offset_record("g", T0, 1),
        offset_record("g", T0, 5, P1),
        offset_record("g", T0, None, P1),  # removes the pending one, not the committed one
        offset_record("g", T1, 6, P1),
        StoredMarker(P1, True),
    ])
    assert committed(h) == {T0: 1, T1: 6}


def test_load_plain_tombstone_does_not_cancel_a_pending_commit() -> None:
    """Kafka's loader: a tombstone removes the *committed* offset; the
    transaction's record, when committed, is installed after it."""
    h = loaded([
        offset_record("g", T0, 1),
        offset_record("g", T0, 5, P1),
        offset_record("g", T0, None),
        StoredMarker(P1, True),
    ])
    assert committed(h) == {T0: 5}


def test_load_group_metadata_with_pending_offsets() -> None:
    members = (rec.MemberMetadataValue("m1", None, "c1", "/h", 30_000, 10_000, b"\x00\x00\x00\x00\x00\x00", b""),)
    h = loaded([
        StoredRecord(rec.encode_group_metadata_key(rec.GroupMetadataKey("g")),
                     rec.encode_group_metadata_value(rec.GroupMetadataValue("consumer", 3, "range", "m1", 5, members))),
        offset_record("g", T0, 5, P1),
    ])
    group = h.coord.group("g")
    assert group.state is GroupState.STABLE and group.generation_id == 3
    assert h.fetch(T0, require_stable=True) == UNSTABLE
    h.end_txn(P1)
    assert committed(h) == {T0: 5}


def test_marker_order_in_the_load() -> None:
    """Records of a producer after its marker belong to its next transaction."""
    h = loaded([
        offset_record("g", T0, 1, P1),
        StoredMarker(P1, False),
        offset_record("g", T0, 2, P1),
        StoredMarker(P1, True),
        offset_record("g", T0, 3, P1),
    ])
    assert committed(h) == {T0: 2}
    assert h.fetch(T0, require_stable=True) == UNSTABLE
    h.end_txn(P1, commit=False)
    assert h.fetch(T0, require_stable=True) == FetchedOffset(2)


def test_restart_roundtrip_through_the_log() -> None:
    h = Harness()
    h.commit({T0: O(1), T1: O(1)})
    h.txn_commit({T0: O(5), T2: O(5)}, producer_id=P1)
    h.store.complete_all()
    h.commit({T2: O(9)})  # later than P1's record
    h.store.complete_all()
    h.end_txn(P1, commit=True)
    h.txn_commit({T1: O(6)}, producer_id=P2)
    h.txn_commit({T3: O(7)}, producer_id=P1, epoch=1)
    h.store.complete_all()
    h.end_txn(P2, commit=False)
    # P1's second transaction is still open.
    assert committed(h) == {T0: 5, T1: 1, T2: 9}
    partition = h.coord.partition_for("g")
    entries = h.store.partition_entries(partition)
    assert any(isinstance(e, StoredRecord) and e.transactional and e.producer_id == P2 for e in entries)

    fresh = Harness()
    for p in range(h.store.num_partitions):
        fresh.coord.load_partition(p, h.store.partition_entries(p))
    assert committed(fresh) == {T0: 5, T1: 1, T2: 9}
    assert fresh.fetch(T3, require_stable=True) == UNSTABLE
    fresh.coord.complete_transaction(partition, P1, True)
    assert committed(fresh) == {T0: 5, T1: 1, T2: 9, T3: 7}
