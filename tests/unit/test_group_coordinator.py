"""The classic group coordinator, driven with a FakeClock and a FakeStore."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from typing import Any

import pytest

from onceflow.clock import FakeClock
from onceflow.config import BrokerConfig
from onceflow.coordinator.group import log_records as rec
from onceflow.coordinator.group.coordinator import GroupCoordinator
from onceflow.coordinator.group.metadata import GroupState
from onceflow.coordinator.group.types import (
    FetchedOffset,
    JoinResult,
    LeaveMember,
    OffsetAndMetadata,
    StoredMarker,
    StoredRecord,
    SyncResult,
)
from onceflow.coordinator.partitioning import java_string_hashcode
from onceflow.protocol.errors import ErrorCode

E = ErrorCode
SESSION = 10_000
REBALANCE = 30_000


def subscription(*topics: str) -> bytes:
    body = struct.pack(">hi", 0, len(topics))
    for t in topics:
        body += struct.pack(">h", len(t)) + t.encode()
    return body + struct.pack(">i", -1)


RANGE = [("range", subscription("t"))]


class FakeStore:
    """Records appends; the test decides when (and how) they complete.

    ``log`` has the (partition, key, value) of every durable record;
    ``entries`` the same as the coordinator reads them back at start-up
    (``StoredRecord`` with the producer of transactional batches, and the
    ``StoredMarker``s written with ``write_marker``).
    """

    def __init__(self, num_partitions: int = 50) -> None:
        self._num_partitions = num_partitions
        self.log: list[tuple[int, bytes, bytes | None]] = []
        self.entries: list[tuple[int, StoredRecord | StoredMarker]] = []
        self.pending: list[tuple[int, list[tuple[bytes, bytes | None]], Callable[[ErrorCode], None]]] = []
        #: The keyword arguments of each pending append (parallel to ``pending``).
        self.pending_kwargs: list[dict[str, Any]] = []
        #: The keyword arguments of every append, in order.
        self.append_kwargs: list[dict[str, Any]] = []

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def append(self, partition, records, done, **kwargs) -> None:
        assert set(kwargs) <= {"producer_id", "producer_epoch", "transactional"}, kwargs
        self.pending.append((partition, list(records), done))
        self.pending_kwargs.append(kwargs)
        self.append_kwargs.append(kwargs)

    def complete_next(self, error: ErrorCode = ErrorCode.none) -> None:
        partition, records, done = self.pending.pop(0)
        kwargs = self.pending_kwargs.pop(0)
        if error is ErrorCode.none:
            self.log.extend((partition, k, v) for k, v in records)
            producer_id, transactional = kwargs.get("producer_id", -1), kwargs.get("transactional", False)
            self.entries.extend((partition, StoredRecord(k, v, producer_id, transactional)) for k, v in records)
        done(error)

    def complete_all(self, error: ErrorCode = ErrorCode.none) -> int:
        n = 0
        while self.pending:
            self.complete_next(error)
            n += 1
        return n

    def write_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker became durable (the test then tells the coordinator)."""
        self.entries.append((partition, StoredMarker(producer_id, commit)))

    def partition_log(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        return [(k, v) for p, k, v in self.log if p == partition]

    def partition_entries(self, partition: int) -> list[StoredRecord | StoredMarker]:
        return [e for p, e in self.entries if p == partition]

    def pending_keys(self) -> list[object]:
        return [rec.decode_key(k) for _, records, _ in self.pending for k, _ in records]


class Box(list):
    """Collects a callback's results; ``one`` asserts it was called exactly once."""

    def __call__(self, *args) -> None:
        self.append(args[0] if len(args) == 1 else args)

    @property
    def one(self):
        assert len(self) == 1, f"expected exactly one result, got {list(self)}"
        return self[0]


class Harness:
    def __init__(self, *, store: FakeStore | None = None, **overrides) -> None:
        config = {"group.initial.rebalance.delay.ms": 0}
        config.update({k.replace("_", "."): v for k, v in overrides.items()})
        self.clock = FakeClock()
        self.store = FakeStore() if store is None else store
        ids = itertools.count(1)
        self.coord = GroupCoordinator(BrokerConfig(config), self.clock, self.store, member_id_suffix=lambda: f"id{next(ids)}")
        self.coord.tick()  # the start-up expiration check

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.coord.tick()

    def join(self, group="g", member_id="", instance=None, protocols=None, session=SESSION, rebalance=REBALANCE,
             require_known=False, client_id="c", protocol_type="consumer", **kw) -> Box:
        box = Box()
        self.coord.join_group(group, member_id, instance, protocol_type, RANGE if protocols is None else protocols,
                              session, rebalance, require_known, client_id, "/127.0.0.1", None, box, **kw)
        return box

    def sync(self, member: JoinResult | str, generation: int | None = None, assignments=None, group="g",
             instance=None, protocol_type=None, protocol_name=None) -> Box:
        box = Box()
        if isinstance(member, JoinResult):
            member_id, generation = member.member_id, member.generation_id if generation is None else generation
        else:
            member_id = member
        self.coord.sync_group(group, generation, member_id, instance, protocol_type, protocol_name, assignments or {}, box)
        return box

    def commit(self, offsets, group="g", generation=-1, member_id="", instance=None, api_version=9) -> Box:
        box = Box()
        self.coord.commit_offsets(group, generation, member_id, instance, offsets, box, api_version=api_version)
        return box

    def txn_commit(self, offsets, producer_id=1000, epoch=0, group="g", generation=-1, member_id="",
                   instance=None, verify=None) -> Box:
        box = Box()
        self.coord.commit_transactional_offsets(group, producer_id, epoch, generation, member_id, instance, offsets, box,
                                                verify)
        return box

    def end_txn(self, producer_id=1000, commit=True, group="g") -> None:
        """The transaction's marker is durable in the group's partition."""
        partition = self.coord.partition_for(group)
        self.store.write_marker(partition, producer_id, commit)
        self.coord.complete_transaction(partition, producer_id, commit)

    def fetch(self, tp, group="g", require_stable=False) -> FetchedOffset:
        error, got = self.coord.fetch_offsets(group, [tp], require_stable)
        assert error is ErrorCode.none
        return got[tp]

    def stable_group(self, n=2, group="g", **join_kw) -> list[JoinResult]:
        """n dynamic members through join and sync; returns their join results (leader first)."""
        boxes = [self.join(group, client_id=f"m{i}", **join_kw) for i in range(n)]
        self.coord.tick()
        results = [b.one for b in boxes]
        leader = results[0]
        assert leader.leader == leader.member_id
        syncs = [self.sync(r, group=group) for r in results[1:]]
        syncs.insert(0, self.sync(leader, group=group, assignments={r.member_id: r.member_id.encode() for r in results}))
        self.store.complete_all()
        for r, s in zip(results, syncs):
            assert s.one.assignment == r.member_id.encode()
        assert self.coord.group_state(group) is GroupState.STABLE
        return results


# ============================================================ partition_for


def test_java_hashcode_and_partition_for() -> None:
    assert java_string_hashcode("group") == 98629247
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("Aa") == java_string_hashcode("BB") == 2112
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert java_string_hashcode("\U0001F600") == 0xD83D * 31 + 0xDE00  # a surrogate pair: two UTF-16 units
    h = Harness()
    assert h.coord.partition_for("group") == 98629247 % 50
    assert h.coord.partition_for("") == 0
    assert h.coord.partition_for("Aa") == h.coord.partition_for("BB")
    assert h.coord.partition_for("polygenelubricants") == 0  # Utils.abs(MIN_VALUE) == 0
    negative = next(g for g in (f"group-{i}" for i in range(1000)) if java_string_hashcode(g) < 0)
    assert h.coord.partition_for(negative) == -java_string_hashcode(negative) % 50  # Utils.abs, not & 0x7fffffff


# ============================================================ join / sync


def test_join_validations() -> None:
    h = Harness(group_max_size=1)
    assert h.join(group="").one.error is E.invalid_group_id
    assert h.join(session=5999).one.error is E.invalid_session_timeout
    assert h.join(session=1_800_001).one == JoinResult(E.invalid_session_timeout)
    assert h.join(member_id="ghost").one == JoinResult(E.unknown_member_id, member_id="ghost")
    assert h.join(protocol_type="").one.error is E.inconsistent_group_protocol
    assert h.join(protocols=[]).one.error is E.inconsistent_group_protocol
    first = h.join()
    h.coord.tick()
    assert first.one.error is E.none
    assert h.join(protocols=[("sticky", b"")]).one.error is E.group_max_size_reached  # full is checked first
    assert h.join(member_id="ghost").one.error is E.group_max_size_reached


def test_two_members_one_generation_and_sync_waits_for_the_store() -> None:
    h = Harness()
    a = h.join(client_id="a", protocols=[("range", b"A")])
    b = h.join(client_id="b", protocols=[("range", b"B")])
    assert not a and not b and h.coord.group_state("g") is GroupState.PREPARING_REBALANCE
    h.coord.tick()
    ra, rb = a.one, b.one
    assert (ra.error, rb.error) == (E.none, E.none)
    assert ra.member_id == "a-id1" and rb.member_id == "b-id2"
    assert ra.generation_id == rb.generation_id == 1
    assert ra.leader == rb.leader == "a-id1"
    assert ra.protocol_type == "consumer" and ra.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in ra.members] == [("a-id1", b"A"), ("b-id2", b"B")]
    assert rb.members == []
    assert h.coord.group_state("g") is GroupState.COMPLETING_REBALANCE
    # A heartbeat between join and sync is a normal heartbeat.
    assert h.coord.heartbeat("g", 1, "b-id2", None) is E.none

    sb = h.sync(rb)
    assert not sb
    sa = h.sync(ra, assignments={"a-id1": b"pa", "b-id2": b"pb"})
    assert not sa and not sb  # nothing until the assignment is durable
    assert h.store.pending_keys() == [rec.GroupMetadataKey("g")]
    assert h.store.pending[0][0] == h.coord.partition_for("g")
    h.store.complete_all()
    assert sa.one == SyncResult(E.none, "consumer", "range", b"pa")
    assert sb.one == SyncResult(E.none, "consumer", "range", b"pb")
    assert h.coord.group_state("g") is GroupState.STABLE
    # The persisted record describes the generation.
    value = rec.decode_group_metadata_value(h.store.log[-1][2])
    assert (value.generation, value.protocol, value.leader) == (1, "range", "a-id1")
    assert [(m.member_id, m.subscription, m.assignment) for m in value.members] == [
        ("a-id1", b"A", b"pa"), ("b-id2", b"B", b"pb")]
    # Stable: a sync is answered at once.
    assert h.sync(rb).one.assignment == b"pb"


def test_leader_sync_missing_members_get_empty_assignment() -> None:
    h = Harness()
    a, b = h.join(client_id="a"), h.join(client_id="b")
    h.coord.tick()
    sb = h.sync(b.one)
    h.sync(a.one, assignments={"a-id1": b"x"})
    h.store.complete_all()
    assert sb.one == SyncResult(E.none, "consumer", "range", b"")


def test_sync_storage_error_fails_waiters_and_rebalances() -> None:
    h = Harness()
    a, b = h.join(client_id="a"), h.join(client_id="b")
    h.coord.tick()
    sb = h.sync(b.one)
    sa = h.sync(a.one, assignments={})
    h.store.complete_all(E.unknown_topic_or_partition)
    assert sa.one == sb.one == SyncResult(E.coordinator_not_available)
    assert h.coord.group_state("g") is GroupState.PREPARING_REBALANCE
    assert h.coord.heartbeat("g", 1, "a-id1", None) is E.rebalance_in_progress
    # Kafka's mapping of other append errors.
    ra, rb = h.join(member_id="a-id1"), h.join(member_id="b-id2")
    assert ra.one.generation_id == rb.one.generation_id == 2
    s = h.sync(ra.one)
    h.store.complete_all(E.not_leader_or_follower)
    assert s.one.error is E.not_coordinator


def test_sync_errors() -> None:
    h = Harness()
    a, b = h.stable_group()
    assert h.sync("x", 1, group="nope").one.error is E.unknown_member_id
    assert h.sync("x", 1).one.error is E.unknown_member_id
    assert h.sync(a.member_id, 7).one.error is E.illegal_generation
    assert h.sync(a.member_id, 1, protocol_type="connect").one.error is E.inconsistent_group_protocol
    assert h.sync(a.member_id, 1, protocol_name="roundrobin").one.error is E.inconsistent_group_protocol
    assert h.sync(a.member_id, 1, protocol_type="consumer", protocol_name="range").one.error is E.none
    assert h.sync(a.member_id, 1, group="").one.error is E.invalid_group_id
    h.join(client_id="new")
    assert h.sync(b).one.error is E.rebalance_in_progress


def test_third_member_triggers_rebalance() -> None:
    h = Harness()
    a, b = h.stable_group()
    c = h.join(client_id="c")
    assert not c and h.coord.group_state("g") is GroupState.PREPARING_REBALANCE
    assert h.coord.heartbeat("g", 1, a.member_id, None) is E.rebalance_in_progress
    assert h.coord.heartbeat("g", 1, b.member_id, None) is E.rebalance_in_progress
    # Commits of the current generation are still accepted while preparing.
    commit = h.commit({("t", 0): OffsetAndMetadata(3)}, generation=1, member_id=a.member_id)
    h.store.complete_all()
    assert commit.one == {("t", 0): E.none}
    ra = h.join(member_id=a.member_id)
    assert not ra
    rb = h.join(member_id=b.member_id)  # the last one in completes the phase at once
    for box in (ra, rb, c):
        assert box.one.error is E.none and box.one.generation_id == 2
    assert ra.one.leader == a.member_id and len(ra.one.members) == 3


def test_rejoin_in_stable() -> None:
    h = Harness()
    a, b = h.stable_group()
    # A follower with unchanged metadata just gets the current generation.
    r = h.join(member_id=b.member_id).one
    assert (r.error, r.generation_id, r.leader, r.members) == (E.none, 1, a.member_id, [])
    assert h.coord.group_state("g") is GroupState.STABLE
    # The leader's join always rebalances.
    ra = h.join(member_id=a.member_id)
    assert not ra and h.coord.group_state("g") is GroupState.PREPARING_REBALANCE


def test_rejoin_in_completing_rebalance_resends_the_response() -> None:
    h = Harness()
    a, b = h.join(client_id="a"), h.join(client_id="b")
    h.coord.tick()
    again = h.join(member_id=a.one.member_id).one
    assert again.generation_id == 1 and len(again.members) == 2
    assert h.coord.group_state("g") is GroupState.COMPLETING_REBALANCE
    # New metadata forces a rebalance; a parked sync is told to rejoin.
    sb = h.sync(b.one)
    h.join(member_id=b.one.member_id, protocols=[("range", b"other")])
    assert sb.one.error is E.rebalance_in_progress
    assert h.coord.group_state("g") is GroupState.PREPARING_REBALANCE


def test_member_id_required_flow() -> None:
    h = Harness()
    first = h.join(require_known=True).one
    assert first == JoinResult(E.member_id_required, member_id="c-id1")
    assert h.coord.group("g").pending_members == {"c-id1"}
    second = h.join(member_id="c-id1", require_known=True)
    h.coord.tick()
    assert second.one.error is E.none and second.one.member_id == "c-id1" and second.one.generation_id == 1
    assert h.coord.group("g").pending_members == set()


def test_pending_member_expires_after_session_timeout() -> None:
    h = Harness()
    h.stable_group()
    r = h.join(require_known=True, session=SESSION).one
    assert r.error is E.member_id_required and h.coord.group("g").is_pending_member(r.member_id)
    h.advance(SESSION - 1)
    assert h.coord.group("g").is_pending_member(r.member_id)
    h.advance(1)
    assert not h.coord.group("g").is_pending_member(r.member_id)
    assert h.join(member_id=r.member_id).one.error is E.unknown_member_id


def test_pending_member_blocks_join_phase_until_it_expires() -> None:
    h = Harness()
    a, b = h.stable_group()
    pending = h.join(require_known=True).one
    ra = h.join(member_id=a.member_id)  # leader rejoin -> rebalance
    rb = h.join(member_id=b.member_id)
    assert not ra and not rb  # waiting for the pending member
    h.advance(SESSION)
    assert ra.one.generation_id == rb.one.generation_id == 2
    assert pending.member_id not in {m.member_id for m in ra.one.members}


def test_protocol_selection_by_vote_and_inconsistent_protocol() -> None:
    h = Harness()
    a = h.join(client_id="a", protocols=[("range", b"a"), ("roundrobin", b"a")])
    b = h.join(client_id="b", protocols=[("roundrobin", b"b"), ("range", b"b")])
    c = h.join(client_id="c", protocols=[("sticky", b"c"), ("roundrobin", b"c"), ("range", b"c")])
    bad = h.join(client_id="d", protocols=[("sticky", b"d")])
    assert bad.one == JoinResult(E.inconsistent_group_protocol)
    assert h.join(client_id="e", protocol_type="connect").one.error is E.inconsistent_group_protocol
    h.coord.tick()
    assert a.one.protocol_name == b.one.protocol_name == c.one.protocol_name == "roundrobin"
    assert {m.member_id: m.metadata for m in a.one.members} == {"a-id1": b"a", "b-id2": b"b", "c-id3": b"c"}


def test_heartbeat_errors() -> None:
    h = Harness()
    a, b = h.stable_group()
    assert h.coord.heartbeat("nope", 1, "x", None) is E.unknown_member_id
    assert h.coord.heartbeat("g", 1, "x", None) is E.unknown_member_id
    assert h.coord.heartbeat("g", 2, a.member_id, None) is E.illegal_generation
    assert h.coord.heartbeat("g", 1, a.member_id, "not-static") is E.unknown_member_id
    assert h.coord.heartbeat("", 1, a.member_id, None) is E.invalid_group_id
    assert h.coord.heartbeat("g", 1, a.member_id, None) is E.none


# ============================================================ timers


def test_session_expiry_removes_member_and_rebalances() -> None:
    h = Harness()
    a, b = h.stable_group()
    h.advance(SESSION // 2)
    assert h.coord.heartbeat("g", 1, a.member_id, None) is E.none
    h.advance(SESSION // 2 - 1)
    assert h.coord.heartbeat("g", 1, a.member_id, None) is E.none
    assert h.coord.group_state("g") is GroupState.STABLE
    h.advance(1)  # b never heartbeat: expired SESSION after its sync
    assert h.coord.group_state("g") is GroupState.PREPARING_REBALANCE
    assert not h.coord.group("g").has(b.member_id)
    assert h.coord.heartbeat("g", 1, b.member_id, None) is E.unknown_member_id
    assert h.coord.heartbeat("g", 1, a.member_id, None) is E.rebalance_in_progress
    ra = h.join(member_id=a.member_id)
    assert ra.one.generation_id == 2 and [m.member_id for m in ra.one.members] == [a.member_id]


def test_last_member_expiring_leaves_group_empty() -> None:
    h = Harness()
    h.stable_group(n=1)
    h.store.log.clear()
    h.advance(SESSION)
    g = h.coord.group("g")
    assert g.state is GroupState.EMPTY and g.generation_id == 2
    h.store.complete_all()
    value = rec.decode_group_metadata_value(h.store.log[-1][2])
    assert value.generation == 2 and value.members == () and value.protocol is None


def test_session_deadline_tracks_heartbeats_and_next_deadline() -> None:
    h = Harness()
    a, _ = h.stable_group()
    member = h.coord.group("g").get(a.member_id)
    assert member.session_deadline_ms == h.clock.now_ms() + SESSION
    h.clock.advance(1000)
    h.coord.heartbeat("g", 1, a.member_id, None)
    assert member.session_deadline_ms == h.clock.now_ms() + SESSION
    assert h.coord.next_deadline_ms() is not None and h.coord.next_deadline_ms() <= member.session_deadline_ms


def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    h = Harness()
    a, b = h.stable_group(session=45_000, rebalance=20_000)
    c = h.join(client_id="c", session=45_000, rebalance=20_000)
    ra = h.join(member_id=a.member_id, session=45_000, rebalance=20_000)
    for _ in range(3):  # b stays alive but never rejoins
        h.advance(5000)
        assert h.coord.heartbeat("g", 1, b.member_id, None) is E.rebalance_in_progress
    assert not ra and not c
    h.advance(5000)
    assert ra.one.generation_id == c.one.generation_id == 2
    assert {m.member_id for m in ra.one.members} == {a.member_id, c.one.member_id}
    assert h.coord.heartbeat("g", 2, b.member_id, None) is E.unknown_member_id


def test_joined_member_not_expired_by_session_during_join_phase() -> None:
    h = Harness()
    a, b = h.stable_group(session=6000, rebalance=60_000)
    ra = h.join(member_id=a.member_id, session=6000, rebalance=60_000)
    # b keeps heartbeating but does not rejoin; a is parked in its join.
    for _ in range(8):
        h.advance(5000)
        assert h.coord.heartbeat("g", 1, b.member_id, None) is E.rebalance_in_progress
    assert h.coord.group("g").has(a.member_id) and not ra
    h.advance(20_000)
    assert ra.one.error is E.none and [m.member_id for m in ra.one.members] == [a.member_id]


def test_initial_rebalance_delay_extends_and_is_capped() -> None:
    h = Harness(group_initial_rebalance_delay_ms=3000)
    start = h.clock.now_ms()
    boxes = [h.join(client_id="a", rebalance=10_000)]
    assert h.coord.next_deadline_ms() == start + 3000
    h.advance(2000)
    boxes.append(h.join(client_id="b", rebalance=10_000))
    h.advance(1000)  # t=3000: someone arrived, wait another delay
    assert not any(boxes) and h.coord.next_deadline_ms() == start + 6000
    h.advance(2000)
    boxes.append(h.join(client_id="c", rebalance=10_000))
    h.advance(1000)  # t=6000: remaining 1000ms of the 10s rebalance timeout
    assert not any(boxes)
    h.advance(2000)
    boxes.append(h.join(client_id="d", rebalance=10_000))
    h.advance(1000)  # t=9000: last (shortened) delay up to 10000
    assert not any(boxes) and h.coord.next_deadline_ms() == start + 10_000
    h.advance(500)
    boxes.append(h.join(client_id="e", rebalance=10_000))
    h.advance(499)
    assert not any(boxes)
    h.advance(1)  # capped at the rebalance timeout
    assert [b.one.generation_id for b in boxes] == [1] * 5


def test_initial_rebalance_delay_without_newcomers() -> None:
    h = Harness(group_initial_rebalance_delay_ms=3000)
    a = h.join()
    h.advance(2999)
    assert not a
    h.advance(1)
    assert a.one.generation_id == 1


def test_initial_delay_does_not_complete_early_when_all_joined() -> None:
    h = Harness(group_initial_rebalance_delay_ms=3000)
    a = h.join(client_id="a")
    b = h.join(client_id="b")
    h.advance(1)
    assert not a and not b  # both "joined", but the initial delay is not short-circuited


def test_members_that_do_not_sync_are_removed() -> None:
    h = Harness()
    a, b = h.join(client_id="a"), h.join(client_id="b")
    h.coord.tick()
    sa = h.sync(a.one, assignments={})
    h.store.complete_all()
    assert sa.one.error is E.none
    # b never syncs, but heartbeats: removed after the rebalance timeout.
    for _ in range(REBALANCE // 5000):
        h.advance(5000)
        h.coord.heartbeat("g", 1, b.one.member_id, None)
        h.coord.heartbeat("g", 1, a.one.member_id, None)
    assert not h.coord.group("g").has(b.one.member_id)
    assert h.coord.group_state("g") is GroupState.PREPARING_REBALANCE


def test_new_member_join_times_out() -> None:
    h = Harness()
    a, b = h.stable_group(session=6000, rebalance=600_000)
    # A new member joins; the others never rejoin but keep heartbeating.
    c = h.join(client_id="c", rebalance=600_000)
    for _ in range(300_000 // 5000):
        h.advance(5000)
        h.coord.heartbeat("g", 1, a.member_id, None)
        h.coord.heartbeat("g", 1, b.member_id, None)
    assert c.one == JoinResult(E.unknown_member_id)
    assert h.coord.group("g").size == 2


# ============================================================ leave / static membership


def test_leave_group_batched_and_by_instance_id() -> None:
    h = Harness()
    boxes = [h.join(client_id="a"), h.join(client_id="b"), h.join(client_id="c", instance="i3")]
    h.coord.tick()
    a, b, c = (x.one for x in boxes)
    h.sync(a, assignments={})
    h.store.complete_all()
    result = h.coord.leave_group("g", [
        LeaveMember(a.member_id, None),
        LeaveMember("", "i3"),
        LeaveMember("ghost", None),
        LeaveMember("", "unknown-instance"),
    ], reason="bye")
    assert result.error is E.none
    assert [err for _, err in result.members] == [E.none, E.none, E.unknown_member_id, E.unknown_member_id]
    assert h.coord.group_state("g") is GroupState.PREPARING_REBALANCE
    rb = h.join(member_id=b.member_id)
    assert rb.one.generation_id == 2 and rb.one.leader == b.member_id
    assert [m.member_id for m in rb.one.members] == [b.member_id]


def test_leave_errors() -> None:
    h = Harness()
    boxes = [h.join(client_id="a", instance="i1"), h.join(client_id="b")]
    h.coord.tick()
    a = boxes[0].one
    unknown = h.coord.leave_group("nope", [LeaveMember("x", None)])
    assert unknown.error is E.none and unknown.members == [(LeaveMember("x", None), E.unknown_member_id)]
    assert h.coord.leave_group("", [LeaveMember("x", None)]).error is E.invalid_group_id
    fenced = h.coord.leave_group("g", [LeaveMember("old-id", "i1")])
    assert fenced.members[0][1] is E.fenced_instance_id
    ok = h.coord.leave_group("g", [LeaveMember(a.member_id, "i1")])
    assert ok.members[0][1] is E.none


def test_last_member_leaving_empties_group() -> None:
    h = Harness()
    (a,) = h.stable_group(n=1)
    assert h.coord.leave_group("g", [LeaveMember(a.member_id, None)]).members[0][1] is E.none
    assert h.coord.group_state("g") is GroupState.EMPTY


def test_static_member_rejoin_fences_old_member_id() -> None:
    h = Harness()
    boxes = [h.join(client_id="a", instance="i1"), h.join(client_id="b")]
    h.coord.tick()
    a, b = (x.one for x in boxes)
    assert a.member_id == "i1-id1"
    h.sync(b)
    h.sync(a, assignments={a.member_id: b"A", b.member_id: b"B"})
    h.store.complete_all()
    # The static leader restarts: new member id, no rebalance.
    again = h.join(instance="i1", client_id="a")
    assert not again  # waits for the new member id to be persisted
    assert h.store.pending_keys() == [rec.GroupMetadataKey("g")]
    h.store.complete_all()
    r = again.one
    assert r.error is E.none and r.member_id == "i1-id3" and r.generation_id == 1
    assert r.leader == a.member_id  # the old id: the returning leader must not re-assign (pre-KIP-814)
    assert r.members == [] and not r.skip_assignment
    assert h.coord.group_state("g") is GroupState.STABLE
    assert h.sync(r.member_id, 1, instance="i1").one.assignment == b"A"
    # The old member id is fenced everywhere.
    assert h.coord.heartbeat("g", 1, a.member_id, "i1") is E.fenced_instance_id
    assert h.sync(a.member_id, 1, instance="i1").one.error is E.fenced_instance_id
    assert h.commit({("t", 0): OffsetAndMetadata(1)}, generation=1, member_id=a.member_id,
                    instance="i1").one == {("t", 0): E.fenced_instance_id}
    assert h.join(member_id=a.member_id, instance="i1").one.error is E.fenced_instance_id
    assert h.coord.heartbeat("g", 1, r.member_id, "i1") is E.none
    assert h.coord.group("g").leader_id == r.member_id


def test_static_leader_rejoin_with_skip_assignment() -> None:
    h = Harness()
    boxes = [h.join(client_id="a", instance="i1"), h.join(client_id="b")]
    h.coord.tick()
    a, b = (x.one for x in boxes)
    h.sync(a, assignments={})
    h.store.complete_all()
    again = h.join(instance="i1", client_id="a", supports_skip_assignment=True)
    h.store.complete_all()
    r = again.one
    assert r.leader == r.member_id and r.skip_assignment and len(r.members) == 2


def test_static_member_rejoin_with_new_protocol_rebalances() -> None:
    h = Harness()
    boxes = [h.join(client_id="a", instance="i1", protocols=[("range", b""), ("roundrobin", b"")]),
             h.join(client_id="b", protocols=[("roundrobin", b""), ("range", b"")])]
    h.coord.tick()
    assert boxes[0].one.protocol_name == "range"  # one vote each: the first voted wins
    h.sync(boxes[0].one, assignments={})
    h.store.complete_all()
    # Now both prefer roundrobin: the group's protocol would change.
    again = h.join(instance="i1", protocols=[("roundrobin", b""), ("range", b"")])
    assert not again and h.coord.group_state("g") is GroupState.PREPARING_REBALANCE


def test_static_member_store_failure_reverts() -> None:
    h = Harness()
    boxes = [h.join(client_id="a", instance="i1"), h.join(client_id="b")]
    h.coord.tick()
    a = boxes[0].one
    h.sync(a, assignments={})
    h.store.complete_all()
    again = h.join(instance="i1")
    h.store.complete_all(E.kafka_storage_error)
    assert again.one.error is E.not_coordinator and again.one.member_id == ""
    assert h.coord.group("g").static_members == {"i1": a.member_id}
    assert h.coord.heartbeat("g", 1, a.member_id, "i1") is E.none


def test_static_replacement_fences_parked_join() -> None:
    h = Harness()
    boxes = [h.join(client_id="a", instance="i1"), h.join(client_id="b")]
    h.coord.tick()
    a, b = (x.one for x in boxes)
    h.sync(a, assignments={})
    h.store.complete_all()
    old_join = h.join(member_id=a.member_id, instance="i1")  # leader rejoin: parked
    assert not old_join
    new_join = h.join(instance="i1")
    assert old_join.one == JoinResult(E.fenced_instance_id, member_id=a.member_id)
    h.join(member_id=b.member_id)
    assert new_join.one.error is E.none and new_join.one.generation_id == 2


def test_static_member_not_rejoining_stays_in_the_group() -> None:
    h = Harness()
    boxes = [h.join(client_id="a"), h.join(client_id="s", instance="i1", session=60_000)]
    h.coord.tick()
    a, s = (x.one for x in boxes)
    h.sync(s)
    h.sync(a, assignments={})
    h.store.complete_all()
    ra = h.join(member_id=a.member_id, session=60_000)
    h.advance(REBALANCE)
    # KIP-345: a static member is not dropped by the rebalance timeout.
    assert {m.member_id for m in ra.one.members} == {a.member_id, s.member_id}


def test_group_max_size() -> None:
    h = Harness(group_max_size=2)
    h.stable_group(n=2)
    assert h.join(client_id="x").one == JoinResult(E.group_max_size_reached)


def test_group_max_size_shrunk_turns_away_the_last_to_rejoin() -> None:
    h = Harness(group_max_size=2)
    a, b = h.stable_group(n=2)
    h.coord._config.update({"group.max.size": 1})
    ra = h.join(member_id=a.member_id)
    rb = h.join(member_id=b.member_id)
    assert rb.one == JoinResult(E.group_max_size_reached)
    assert ra.one.generation_id == 2 and [m.member_id for m in ra.one.members] == [a.member_id]


# ============================================================ offsets


def test_commit_and_fetch_simple_group() -> None:
    h = Harness()
    box = h.commit({("t", 0): OffsetAndMetadata(42, 7, "meta"), ("t", 1): OffsetAndMetadata(5, metadata=None)})
    assert not box
    assert h.coord.group_state("g") is GroupState.EMPTY
    assert h.coord.fetch_offsets("g", [("t", 0)]) == (E.none, {("t", 0): FetchedOffset(-1)})
    unstable = h.coord.fetch_offsets("g", [("t", 0), ("u", 0)], require_stable=True)[1]
    assert unstable[("t", 0)].error is E.unstable_offset_commit and unstable[("u", 0)] == FetchedOffset(-1)
    assert len(h.store.pending) == 1 and h.store.pending[0][0] == h.coord.partition_for("g")
    h.store.complete_all()
    assert box.one == {("t", 0): E.none, ("t", 1): E.none}
    err, got = h.coord.fetch_offsets("g", None, require_stable=True)
    assert err is E.none
    assert got == {("t", 0): FetchedOffset(42, 7, "meta"), ("t", 1): FetchedOffset(5, -1, "")}
    key, value = h.store.log[0][1], h.store.log[0][2]
    assert rec.decode_key(key) == rec.OffsetCommitKey("g", "t", 0)
    decoded = rec.decode_offset_commit_value(value)
    assert (decoded.offset, decoded.leader_epoch, decoded.metadata, decoded.commit_timestamp_ms) == (
        42, 7, "meta", h.clock.now_ms())


def test_fetch_unknown_group() -> None:
    h = Harness()
    assert h.coord.fetch_offsets("nope", [("t", 0)]) == (E.none, {("t", 0): FetchedOffset(-1)})
    assert h.coord.fetch_offsets("nope", None) == (E.none, {})


def test_offset_metadata_too_large() -> None:
    h = Harness(offset_metadata_max_bytes=5)
    box = h.commit({("t", 0): OffsetAndMetadata(1, metadata="12345"), ("t", 1): OffsetAndMetadata(1, metadata="123456")})
    assert [rec.decode_key(k) for k in h.store.pending_keys() and [r[0] for r in h.store.pending[0][1]]] == [
        rec.OffsetCommitKey("g", "t", 0)]
    h.store.complete_all()
    assert box.one == {("t", 0): E.none, ("t", 1): E.offset_metadata_too_large}
    too_large = h.commit({("t", 2): OffsetAndMetadata(1, metadata="x" * 6)})
    assert too_large.one == {("t", 2): E.offset_metadata_too_large} and not h.store.pending


def test_storage_error_on_commit_keeps_committed_offsets() -> None:
    h = Harness()
    h.commit({("t", 0): OffsetAndMetadata(5)})
    h.store.complete_all()
    box = h.commit({("t", 0): OffsetAndMetadata(10)})
    h.store.complete_all(E.not_leader_or_follower)
    assert box.one == {("t", 0): E.not_coordinator}
    assert h.coord.fetch_offsets("g", [("t", 0)], require_stable=True)[1][("t", 0)].offset == 5


def test_member_commit_validation() -> None:
    h = Harness()
    tp = {("t", 0): OffsetAndMetadata(1)}
    # An unknown group: OffsetCommit v9+ (KIP-848) says so, older versions say ILLEGAL_GENERATION.
    assert h.commit(tp, group="nope", generation=3, member_id="x").one == {("t", 0): E.group_id_not_found}
    assert h.commit(tp, group="nope", generation=3, member_id="x", api_version=8).one == {("t", 0): E.illegal_generation}
    a, b = h.stable_group()
    assert h.commit(tp, generation=1, member_id="ghost").one == {("t", 0): E.unknown_member_id}
    assert h.commit(tp, generation=2, member_id=a.member_id).one == {("t", 0): E.illegal_generation}
    assert h.commit(tp).one == {("t", 0): E.unknown_member_id}  # not a member, group not empty
    ok = h.commit(tp, generation=1, member_id=a.member_id)
    h.store.complete_all()
    assert ok.one == {("t", 0): E.none}
    # Committing counts as a heartbeat.
    h.clock.advance(SESSION - 1)
    h.commit(tp, generation=1, member_id=b.member_id)
    h.store.complete_all()
    h.advance(2)
    assert h.coord.group("g").has(b.member_id) and not h.coord.group("g").has(a.member_id)


def test_commit_in_completing_rebalance() -> None:
    h = Harness()
    a = h.join()
    h.coord.tick()
    box = h.commit({("t", 0): OffsetAndMetadata(1)}, generation=1, member_id=a.one.member_id)
    assert box.one == {("t", 0): E.rebalance_in_progress}


def test_delete_groups() -> None:
    h = Harness()
    h.stable_group(group="busy")
    (m,) = h.stable_group(n=1, group="done")
    c = h.commit({("t", 0): OffsetAndMetadata(1), ("t", 1): OffsetAndMetadata(2)}, group="done",
                 generation=1, member_id=m.member_id)
    h.coord.leave_group("done", [LeaveMember(m.member_id, None)])
    h.store.complete_all()
    assert c.one == {("t", 0): E.none, ("t", 1): E.none}
    assert h.coord.group_state("done") is GroupState.EMPTY
    box = Box()
    h.coord.delete_groups(["busy", "missing", "done"], box)
    assert not box
    assert sorted(map(repr, h.store.pending_keys())) == sorted(map(repr, [
        rec.OffsetCommitKey("done", "t", 0), rec.OffsetCommitKey("done", "t", 1), rec.GroupMetadataKey("done")]))
    assert all(v is None for _, records, _ in h.store.pending for _, v in records)
    assert h.coord.group("done") is None  # gone at once: later requests see a fresh group
    h.store.complete_all()
    assert box.one == {"busy": E.non_empty_group, "missing": E.group_id_not_found, "done": E.none}
    assert h.coord.describe_groups(["done"])[0].state == "Dead"
    assert h.coord.fetch_offsets("done", [("t", 0)])[1][("t", 0)].offset == -1


def test_delete_groups_immediate_when_nothing_to_write() -> None:
    h = Harness()
    box = Box()
    h.coord.delete_groups(["missing"], box)
    assert box.one == {"missing": E.group_id_not_found}


def test_offsets_expire_after_group_is_empty_for_retention() -> None:
    h = Harness(offsets_retention_minutes=1, offsets_retention_check_interval_ms=1000)
    (m,) = h.stable_group(n=1)
    h.commit({("t", 0): OffsetAndMetadata(1)}, generation=1, member_id=m.member_id)
    h.store.complete_all()
    h.advance(120_000)  # heartbeats absent: expired, group empty (but offsets count from now)
    h.store.complete_all()
    assert h.coord.group_state("g") is GroupState.EMPTY
    # The commit is old, but the group has only just become empty.
    assert h.coord.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 1
    h.store.log.clear()
    h.advance(59_000)
    assert h.coord.group("g") is not None
    h.advance(1_000)
    assert h.coord.group("g") is None
    h.store.complete_all()
    assert [rec.decode_key(k) for _, k, v in h.store.log] == [rec.OffsetCommitKey("g", "t", 0), rec.GroupMetadataKey("g")]
    assert all(v is None for _, _, v in h.store.log)


def test_simple_group_offsets_expire_from_commit_time() -> None:
    h = Harness(offsets_retention_minutes=1, offsets_retention_check_interval_ms=1000)
    h.commit({("t", 0): OffsetAndMetadata(1)}, group="s")
    h.store.complete_all()
    h.advance(30_000)
    h.commit({("t", 1): OffsetAndMetadata(1)}, group="s")
    h.store.complete_all()
    h.advance(30_000)
    assert list(h.coord.fetch_offsets("s", None)[1]) == [("t", 1)]
    h.advance(30_000)
    assert h.coord.group("s") is None
    # A generation-0 group never wrote metadata: no group tombstone.
    h.store.complete_all()
    assert rec.GroupMetadataKey("s") not in [rec.decode_key(k) for _, k, _ in h.store.log]


def test_delete_offsets() -> None:
    h = Harness()
    results = [h.join(client_id=f"m{i}", protocols=[("range", subscription("in"))]) for i in range(2)]
    h.coord.tick()
    h.sync(results[0].one, assignments={})
    h.store.complete_all()
    h.commit({("in", 0): OffsetAndMetadata(1), ("out", 0): OffsetAndMetadata(2)}, generation=1,
             member_id=results[0].one.member_id)
    h.store.complete_all()
    box = Box()
    h.coord.delete_offsets("g", [("in", 0), ("out", 0)], box)
    assert not box and h.store.pending_keys() == [rec.OffsetCommitKey("g", "out", 0)]
    h.store.complete_all()
    assert box.one == (E.none, {("in", 0): E.group_subscribed_to_topic, ("out", 0): E.none})
    assert h.coord.fetch_offsets("g", [("out", 0)])[1][("out", 0)].offset == -1
    missing = Box()
    h.coord.delete_offsets("nope", [("t", 0)], missing)
    assert missing.one == (E.group_id_not_found, {})


def test_delete_offsets_of_empty_group_kills_it() -> None:
    h = Harness()
    h.commit({("t", 0): OffsetAndMetadata(1)}, group="s")
    h.store.complete_all()
    box = Box()
    h.coord.delete_offsets("s", [("t", 0)], box)
    assert h.coord.group("s") is None
    h.store.complete_all()
    assert box.one == (E.none, {("t", 0): E.none})


def test_on_topic_deleted() -> None:
    h = Harness()
    h.commit({("gone", 0): OffsetAndMetadata(1), ("kept", 0): OffsetAndMetadata(2)}, group="s")
    h.store.complete_all()
    h.coord.on_topic_deleted("gone")
    assert list(h.coord.fetch_offsets("s", None)[1]) == [("kept", 0)]
    assert h.store.pending_keys() == [rec.OffsetCommitKey("s", "gone", 0)]


# ============================================================ describe / list


def test_describe_and_list() -> None:
    h = Harness()
    a, b = h.stable_group()
    h.commit({("t", 0): OffsetAndMetadata(1)}, group="simple")
    h.store.complete_all()
    d = h.coord.describe_groups(["g", "nope"])
    assert (d[0].state, d[0].protocol_type, d[0].protocol, d[0].error) == ("Stable", "consumer", "range", E.none)
    assert [(m.member_id, m.client_id, m.metadata, m.assignment) for m in d[0].members] == [
        (a.member_id, "m0", RANGE[0][1], a.member_id.encode()), (b.member_id, "m1", RANGE[0][1], b.member_id.encode())]
    assert (d[1].state, d[1].error, d[1].members) == ("Dead", E.none, [])
    h.join(client_id="x")
    d = h.coord.describe_groups(["g"])[0]
    assert d.state == "PreparingRebalance" and d.protocol == ""
    assert all(m.metadata == b"" and m.assignment == b"" for m in d.members)
    listing = {(x.group_id, x.protocol_type, x.state) for x in h.coord.list_groups()}
    assert listing == {("g", "consumer", "PreparingRebalance"), ("simple", "", "Empty")}
    assert [x.group_id for x in h.coord.list_groups(states={"empty"})] == ["simple"]
    assert [x.group_id for x in h.coord.list_groups(states={"PREPARINGREBALANCE", "Stable"})] == ["g"]
    assert len(h.coord.list_groups(types={"Classic"})) == 2
    assert h.coord.list_groups(types={"consumer"}) == []  # KIP-848 groups only; these are classic


# ============================================================ loading


def test_load_partition_last_wins_and_tombstones() -> None:
    h = Harness()
    ok = rec.encode_offset_commit_key
    ov = rec.encode_offset_commit_value
    gk = rec.encode_group_metadata_key
    members = (
        rec.MemberMetadataValue("m1", None, "c1", "/h", REBALANCE, SESSION, subscription("t"), b"a1"),
        rec.MemberMetadataValue("m2", "inst", "c2", "/h", REBALANCE, SESSION, subscription("u"), b"a2"),
    )
    records = [
        (ok(rec.OffsetCommitKey("g1", "t", 0)), ov(rec.OffsetCommitValue(1, -1, "", 10))),
        (ok(rec.OffsetCommitKey("g1", "t", 0)), ov(rec.OffsetCommitValue(2, 3, "m", 11))),
        (ok(rec.OffsetCommitKey("g1", "t", 1)), ov(rec.OffsetCommitValue(9, -1, "", 11))),
        (ok(rec.OffsetCommitKey("g1", "t", 1)), None),
        (b"\x00\x63junk", b"whatever"),  # unknown key version: skipped
        (gk(rec.GroupMetadataKey("g2")), rec.encode_group_metadata_value(
            rec.GroupMetadataValue("consumer", 4, "range", "m2", 5, members))),
        (ok(rec.OffsetCommitKey("g2", "t", 0)), ov(rec.OffsetCommitValue(7, -1, "", 12))),
        (gk(rec.GroupMetadataKey("g3")), rec.encode_group_metadata_value(
            rec.GroupMetadataValue("consumer", 2, None, None, 5, ()))),
        (ok(rec.OffsetCommitKey("g3", "t", 0)), ov(rec.OffsetCommitValue(3, -1, "", 12))),
        (gk(rec.GroupMetadataKey("g3")), None),
        (gk(rec.GroupMetadataKey("g4")), rec.encode_group_metadata_value(
            rec.GroupMetadataValue("consumer", 1, None, None, 5, ()))),
        (gk(rec.GroupMetadataKey("g4")), None),
    ]
    h.coord.load_partition(0, records)
    assert h.coord.fetch_offsets("g1", None) == (E.none, {("t", 0): FetchedOffset(2, 3, "m")})
    g2 = h.coord.group("g2")
    assert (g2.state, g2.generation_id, g2.protocol_name, g2.leader_id) == (GroupState.STABLE, 4, "range", "m2")
    assert g2.static_members == {"inst": "m2"} and g2.subscribed_topics == {"t", "u"}
    box = Box()
    h.coord.sync_group("g2", 4, "m1", None, None, None, {}, box)
    assert box.one.assignment == b"a1"
    g3 = h.coord.group("g3")
    assert g3.state is GroupState.EMPTY and g3.generation_id == 0 and g3.protocol_type is None
    assert h.coord.fetch_offsets("g3", None)[1] == {("t", 0): FetchedOffset(3)}
    assert h.coord.group("g4") is None
    # Loaded members must heartbeat within their session.
    h.advance(SESSION - 1)
    assert h.coord.heartbeat("g2", 4, "m2", "inst") is E.none
    h.advance(1)  # m1 never heartbeat: the session it got at load time expires
    assert h.coord.heartbeat("g2", 4, "m2", "inst") is E.rebalance_in_progress


def test_restart_roundtrip_through_the_log() -> None:
    h = Harness()
    a, b = h.stable_group()
    h.commit({("t", 0): OffsetAndMetadata(11, metadata="x")}, generation=1, member_id=a.member_id)
    h.store.complete_all()
    h.commit({("t", 3): OffsetAndMetadata(4)}, group="simple")
    h.store.complete_all()
    fresh = Harness()
    for p in range(h.store.num_partitions):
        fresh.coord.load_partition(p, h.store.partition_log(p))
    g = fresh.coord.group("g")
    assert g.state is GroupState.STABLE and g.generation_id == 1 and list(g.members) == [a.member_id, b.member_id]
    assert fresh.coord.fetch_offsets("g", None)[1] == {("t", 0): FetchedOffset(11, -1, "x")}
    assert fresh.coord.fetch_offsets("simple", None)[1] == {("t", 3): FetchedOffset(4)}
    assert fresh.coord.heartbeat("g", 1, b.member_id, None) is E.none


# ============================================================ shutdown / callbacks


def test_shutdown_answers_everything_once() -> None:
    h = Harness()
    a, b = h.stable_group()
    commit = h.commit({("t", 0): OffsetAndMetadata(1)}, generation=1, member_id=a.member_id)
    c = h.join(client_id="c")  # parked (rebalance in progress)
    h.coord.shutdown()
    assert c.one == JoinResult(E.not_coordinator, member_id="c-id3")
    assert commit.one == {("t", 0): E.not_coordinator}
    h.store.complete_all()  # late acknowledgements are ignored
    assert len(commit) == 1
    assert h.coord.next_deadline_ms() is None
    assert h.coord.heartbeat("g", 1, a.member_id, None) is E.coordinator_not_available
    assert h.join().one.error is E.coordinator_not_available


def test_shutdown_answers_parked_sync() -> None:
    h = Harness()
    _, b = h.join(client_id="a"), h.join(client_id="b")
    h.coord.tick()
    sb = h.sync(b.one)
    h.coord.shutdown()
    assert sb.one == SyncResult(E.not_coordinator)


def test_callbacks_run_after_state_is_consistent() -> None:
    h = Harness()
    seen = []

    def reentrant(result: JoinResult) -> None:
        # A callback may call back in: the group is already in its new state.
        seen.append((result.error, h.coord.group_state("g"), h.coord.heartbeat("g", 1, result.member_id, None)))

    h.coord.join_group("g", "", None, "consumer", RANGE, SESSION, REBALANCE, False, "c", "/h", None, reentrant)
    h.coord.tick()
    assert seen == [(E.none, GroupState.COMPLETING_REBALANCE, E.none)]


def test_tick_is_cheap_and_next_deadline() -> None:
    h = Harness()
    assert h.coord.next_deadline_ms() == h.clock.now_ms() + 600_000  # only the expiration check
    a = h.join()
    assert h.coord.next_deadline_ms() == h.clock.now_ms()
    h.coord.tick()
    assert a.one.error is E.none
    for _ in range(1000):
        h.coord.tick()


@pytest.mark.parametrize("duplicate", ["join", "sync"])
def test_retried_request_gets_an_answer_too(duplicate: str) -> None:
    h = Harness()
    a, b = h.stable_group()
    if duplicate == "join":
        first, second = h.join(member_id=a.member_id), h.join(member_id=a.member_id)
        h.join(member_id=b.member_id)
        assert first.one == second.one and first.one.generation_id == 2
    else:
        h.join(member_id=a.member_id)
        rb = h.join(member_id=b.member_id).one
        first, second = h.sync(rb), h.sync(rb)
        h.sync(a.member_id, 2, assignments={b.member_id: b"B"})
        h.store.complete_all()
        assert first.one == second.one and first.one.assignment == b"B"
