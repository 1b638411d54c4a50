"""The group state machine and per-group bookkeeping (metadata.py)."""

from __future__ import annotations

import itertools
import struct

import pytest

from onceflow.coordinator.group.metadata import (
    VALID_PREVIOUS_STATES,
    GroupMetadata,
    GroupState,
    IllegalGroupTransition,
    MemberMetadata,
    decode_consumer_subscription_topics,
)
from onceflow.coordinator.group.types import OffsetAndMetadata

E, P, C, S, D = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)

# Kafka's GroupMetadata.scala, written out independently of the module.
KAFKA_LEGAL = {
    (S, P), (C, P), (E, P),
    (P, C),
    (C, S),
    (S, D), (P, D), (C, D), (E, D), (D, D),
    (P, E),
}


def subscription(*topics: str) -> bytes:
    body = struct.pack(">hi", 0, len(topics))
    for t in topics:
        body += struct.pack(">h", len(t)) + t.encode()
    return body + struct.pack(">i", -1)  # user data: null


def member(member_id: str, protocols: list[tuple[str, bytes]], instance: str | None = None) -> MemberMetadata:
    return MemberMetadata(member_id, instance, "client", "/127.0.0.1", 30000, 10000, "consumer", protocols)


def test_kafka_names() -> None:
    assert [s.kafka_name for s in GroupState] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    assert str(GroupState.COMPLETING_REBALANCE) == "CompletingRebalance"
    assert GroupState.from_kafka_name("preparingrebalance") is P
    with pytest.raises(ValueError):
        GroupState.from_kafka_name("AwaitingSync")


def test_table_is_kafkas() -> None:
    table = {(prev, target) for target, prevs in VALID_PREVIOUS_STATES.items() for prev in prevs}
    assert table == KAFKA_LEGAL
    assert set(VALID_PREVIOUS_STATES) == set(GroupState)


@pytest.mark.parametrize("current,target", list(itertools.product(GroupState, GroupState)))
def test_every_transition(current: GroupState, target: GroupState) -> None:
    group = GroupMetadata("g", now_ms=0, state=current)
    if (current, target) in KAFKA_LEGAL:
        group.transition_to(target, now_ms=42)
        assert group.state is target
        assert group.current_state_timestamp_ms == 42
    else:
        with pytest.raises(IllegalGroupTransition) as info:
            group.transition_to(target, now_ms=42)
        assert info.value.current is current and info.value.target is target
        assert group.state is current
        assert group.current_state_timestamp_ms == 0


def test_can_rebalance_follows_the_table() -> None:
    for state in GroupState:
        assert GroupMetadata("g", 0, state).can_rebalance() == (state in (E, C, S))


def test_protocol_vote() -> None:
    g = GroupMetadata("g", 0)
    g.add(member("a", [("range", b"a"), ("roundrobin", b"a")]))
    g.add(member("b", [("roundrobin", b"b"), ("range", b"b")]))
    g.add(member("c", [("roundrobin", b"c"), ("range", b"c"), ("sticky", b"c")]))
    assert g.candidate_protocols() == {"range", "roundrobin"}
    assert g.select_protocol() == "roundrobin"
    g.remove("c")
    # One vote each: the first voted wins (deterministic tie-break).
    assert g.select_protocol() == "range"


def test_supports_protocols() -> None:
    g = GroupMetadata("g", 0)
    assert not g.supports_protocols("", ["range"])
    assert not g.supports_protocols("consumer", [])
    assert g.supports_protocols("consumer", ["range"])
    g.add(member("a", [("range", b"")]))
    g.transition_to(P, 0)
    assert g.supports_protocols("consumer", ["sticky", "range"])
    assert not g.supports_protocols("consumer", ["sticky"])
    assert not g.supports_protocols("connect", ["range"])


def test_leader_moves_when_removed() -> None:
    g = GroupMetadata("g", 0)
    g.add(member("a", [("range", b"")]))
    g.add(member("b", [("range", b"")]))
    assert g.leader_id == "a"
    g.remove("a")
    assert g.leader_id == "b"
    g.remove("b")
    assert g.leader_id is None


def test_awaiting_join_count_and_static_replace() -> None:
    g = GroupMetadata("g", 0)
    results = []
    g.add(member("a", [("range", b"")], instance="i1"), results.append)
    g.add(member("b", [("range", b"")]))
    assert g.num_awaiting_join == 1 and not g.has_all_members_joined()
    m, fenced_joins, fenced_syncs = g.replace_static_member("i1", "a", "a2")
    assert m.member_id == "a2" and len(fenced_joins) == 1 and fenced_syncs == []
    assert g.static_members == {"i1": "a2"} and g.leader_id == "a2" and g.num_awaiting_join == 0
    g.update_member(g.get("b"), [("range", b"x")], 1, 2, results.append)
    assert g.num_awaiting_join == 1
    assert len(g.take_join_callbacks(g.get("b"))) == 1 and g.num_awaiting_join == 0


def test_matches() -> None:
    m = member("a", [("range", b"x"), ("roundrobin", b"y")])
    assert m.matches([("range", b"x"), ("roundrobin", b"y")])
    assert not m.matches([("roundrobin", b"y"), ("range", b"x")])
    assert not m.matches([("range", b"x")])
    assert not m.matches([("range", b"z"), ("roundrobin", b"y")])


def test_subscription_topics() -> None:
    assert decode_consumer_subscription_topics(subscription("a", "b")) == {"a", "b"}
    assert decode_consumer_subscription_topics(b"\x00") is None
    assert decode_consumer_subscription_topics(struct.pack(">hi", 0, 3)) is None
    g = GroupMetadata("g", 0)
    g.add(member("a", [("range", subscription("t1"))]))
    g.add(member("b", [("range", subscription("t2"))]))
    g.protocol_name = "range"
    assert g.compute_subscribed_topics() == {"t1", "t2"}
    g.get("b").protocols = [("range", b"junk")]
    assert g.compute_subscribed_topics() is None
    g.subscribed_topics = None
    assert g.is_subscribed_to_topic("anything")  # unknown: be safe


def test_commit_append_after_delete_does_not_resurrect() -> None:
    g = GroupMetadata("g", 0)
    tp = ("t", 0)
    o = OffsetAndMetadata(5, commit_timestamp_ms=1)
    g.prepare_offset_commit({tp: o})
    assert g.offsets.has_pending(tp)
    g.remove_offsets([tp])  # OffsetDelete appended after the commit
    g.on_offset_commit_append(tp, o)
    assert g.offset(tp) is None and not g.has_offsets()


def test_commit_appends_in_order() -> None:
    g = GroupMetadata("g", 0)
    tp = ("t", 0)
    first, second = OffsetAndMetadata(1, commit_timestamp_ms=1), OffsetAndMetadata(2, commit_timestamp_ms=2)
    g.prepare_offset_commit({tp: first})
    g.prepare_offset_commit({tp: second})
    g.on_offset_commit_append(tp, first)
    assert g.offset(tp) == first and g.offsets.has_pending(tp)
    g.on_offset_commit_append(tp, second)
    assert g.offset(tp) == second and not g.offsets.has_pending(tp)
    g.prepare_offset_commit({tp: OffsetAndMetadata(3)})
    g.fail_pending_offset_write(tp, OffsetAndMetadata(3))
    assert g.offset(tp) == second and not g.offsets.has_pending(tp)


def test_expiry_rules() -> None:
    day = 86_400_000
    # Empty consumer group: counted from when it became empty.
    g = GroupMetadata("g", 0)
    g.protocol_type = "consumer"
    g.offsets.committed[("t", 0)] = OffsetAndMetadata(1, commit_timestamp_ms=0)
    g.current_state_timestamp_ms = 10 * day
    assert g.remove_expired_offsets(10 * day + day - 1, day) == {}
    assert list(g.remove_expired_offsets(11 * day, day)) == [("t", 0)]
    # Simple group (no protocol type): counted from each commit.
    s = GroupMetadata("s", 0)
    s.offsets.committed[("t", 0)] = OffsetAndMetadata(1, commit_timestamp_ms=0)
    s.offsets.committed[("t", 1)] = OffsetAndMetadata(1, commit_timestamp_ms=day)
    s.offsets.pending[("t", 0)] = OffsetAndMetadata(2)
    assert s.remove_expired_offsets(day + 1, day) == {}  # t-0 has a commit in flight
    del s.offsets.pending[("t", 0)]
    assert list(s.remove_expired_offsets(day + 1, day)) == [("t", 0)]
    # Stable consumer group: only unsubscribed topics expire.
    st = GroupMetadata("st", 0, state=S)
    st.protocol_type = "consumer"
    st.subscribed_topics = frozenset({"in"})
    st.offsets.committed[("in", 0)] = OffsetAndMetadata(1, commit_timestamp_ms=0)
    st.offsets.committed[("out", 0)] = OffsetAndMetadata(1, commit_timestamp_ms=0)
    assert list(st.remove_expired_offsets(day, day)) == [("out", 0)]
    # Other states: nothing expires.
    pr = GroupMetadata("pr", 0, state=P)
    pr.protocol_type = "consumer"
    pr.offsets.committed[("t", 0)] = OffsetAndMetadata(1, commit_timestamp_ms=0)
    assert pr.remove_expired_offsets(100 * day, day) == {}


def test_transactional_offsets_lifecycle() -> None:
    g = GroupMetadata("g", 0)
    tp = ("t", 0)
    g.on_offset_commit_append(tp, OffsetAndMetadata(1), seq=5)  # not pending: ignored
    assert g.offset(tp) is None
    g.prepare_offset_commit({tp: OffsetAndMetadata(1)})
    g.on_offset_commit_append(tp, OffsetAndMetadata(1), seq=5)
    assert g.offset(tp) == OffsetAndMetadata(1) and g.offsets.committed_seq == {tp: 5}
    entries = g.prepare_txn_offset_commit(7, {tp: OffsetAndMetadata(2)})
    assert g.offsets.has_pending(tp) and g.has_pending_offset_commits_from_producer(7)
    assert g.active_producers == {7} and g.offset(tp) == OffsetAndMetadata(1)
    g.on_txn_offset_commit_append(7, tp, entries[tp], 4)  # (an older record than the committed one)
    assert g.complete_pending_txn_offset_commit(7, commit=True) == 0
    assert g.offset(tp) == OffsetAndMetadata(1) and not g.offsets.has_pending(tp)
    entries = g.prepare_txn_offset_commit(7, {tp: OffsetAndMetadata(3)})
    g.on_txn_offset_commit_append(7, tp, entries[tp], 6)
    assert g.complete_pending_txn_offset_commit(7, commit=True) == 1
    assert g.offset(tp) == OffsetAndMetadata(3) and g.offsets.committed_seq == {tp: 6}
    entries = g.prepare_txn_offset_commit(7, {tp: OffsetAndMetadata(4)})
    g.on_txn_offset_commit_append(7, tp, entries[tp], 8)
    assert g.complete_pending_txn_offset_commit(7, commit=False) == 0
    assert g.offset(tp) == OffsetAndMetadata(3) and g.offsets.pending_transactional == {}


def test_failed_transactional_append_falls_back_to_the_superseded_entry() -> None:
    g = GroupMetadata("g", 0)
    tp = ("t", 0)
    first = g.prepare_txn_offset_commit(7, {tp: OffsetAndMetadata(1)})[tp]
    second = g.prepare_txn_offset_commit(7, {tp: OffsetAndMetadata(2)})[tp]
    assert second.replaced is first
    g.on_txn_offset_commit_append(7, tp, first, 1)
    g.fail_pending_txn_offset_commit(7, tp, second)
    assert g.offsets.pending_transactional[7][tp] is first
    g.fail_pending_txn_offset_commit(7, tp, first)  # (cannot happen after its success; still consistent)
    assert g.offsets.pending_transactional == {}


def test_commit_before_acknowledgement_waits_for_it() -> None:
    g = GroupMetadata("g", 0)
    tp = ("t", 0)
    entry = g.prepare_txn_offset_commit(7, {tp: OffsetAndMetadata(1)})[tp]
    assert g.complete_pending_txn_offset_commit(7, commit=True) == 0
    assert g.offsets.has_pending(tp) and g.offsets.partitions() == {tp} and g.has_offsets()
    g.on_txn_offset_commit_append(7, tp, entry, 3)
    assert g.offset(tp) == OffsetAndMetadata(1) and not g.offsets.has_pending(tp)


def test_remove_offsets_drops_transactional_commits() -> None:
    g = GroupMetadata("g", 0)
    a, b = ("t", 0), ("t", 1)
    g.prepare_txn_offset_commit(7, {a: OffsetAndMetadata(1)})
    g.prepare_txn_offset_commit(8, {a: OffsetAndMetadata(2), b: OffsetAndMetadata(3)})
    assert g.offsets.partitions() == {a, b}
    assert g.remove_offsets([a]) == {}
    assert g.offsets.pending_transactional == {8: {b: g.offsets.pending_transactional[8][b]}}
    assert g.remove_all_offsets() == {}  # committed partitions only
    assert g.has_offsets()
    g.remove_offsets([b])
    assert not g.has_offsets()


def test_expiry_ignores_pending_transactional_offsets() -> None:
    day = 86_400_000
    s = GroupMetadata("s", 0)
    tp = ("t", 0)
    s.prepare_offset_commit({tp: OffsetAndMetadata(1, commit_timestamp_ms=0)})
    s.on_offset_commit_append(tp, OffsetAndMetadata(1, commit_timestamp_ms=0), seq=1)
    s.prepare_txn_offset_commit(7, {tp: OffsetAndMetadata(2, commit_timestamp_ms=0)})
    assert list(s.remove_expired_offsets(day, day)) == [tp]
    assert s.offsets.committed_seq == {} and s.has_offsets() and s.offsets.has_pending(tp)
