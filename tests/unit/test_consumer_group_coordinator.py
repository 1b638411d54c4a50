"""KIP-848 consumer groups in the group coordinator, driven with a FakeClock and a FakeStore.

ConsumerGroupHeartbeat: joining, epochs, the revoke-before-assign dance,
fencing (session and rebalance timeouts, stale epochs), static members,
bad requests; offset commits with member epochs; the records written,
restored by a second coordinator; conversions between the two protocols.
"""

from __future__ import annotations

import random
import time
import uuid

import pytest

from onceflow.clock import FakeClock
from onceflow.config import BrokerConfig
from onceflow.coordinator.group import log_records as rec
from onceflow.coordinator.group import topic_regex
from onceflow.coordinator.group.consumer_group import ConsumerGroupState, MemberState
from onceflow.coordinator.group.consumer_membership import HeartbeatResult
from onceflow.coordinator.group.coordinator import GroupCoordinator
from onceflow.coordinator.group.types import OffsetAndMetadata, TopicImage
from onceflow.protocol.errors import ErrorCode
from tests.unit.test_group_coordinator import RANGE, Box, FakeStore

E = ErrorCode
T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
SESSION = 45_000


class Harness:
    def __init__(self, *, store: FakeStore | None = None, topics: dict[str, TopicImage] | None = None,
                 **overrides: object) -> None:
        config = {"group.initial.rebalance.delay.ms": 0}
        config.update({k.replace("_", "."): v for k, v in overrides.items()})
        self.clock = FakeClock()
        self.store = FakeStore() if store is None else store
        self.topics = {"t": TopicImage(T, 4)} if topics is None else topics
        self.coord = GroupCoordinator(BrokerConfig(config), self.clock, self.store, topics=lambda: self.topics)
        self.coord.tick()

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.coord.tick()
        self.store.complete_all()

    def hb(self, member_id: str, epoch: int, *, group: str = "g", topics: tuple[str, ...] | None = ("t",),
           owned: dict[uuid.UUID, list[int]] | None = None, instance: str | None = None, regex: str | None = None,
           rebalance: int = 30_000, assignor: str | None = None, version: int = 1, rack: str | None = None,
           complete: bool = True) -> Box:
        box = Box()
        owned_tp = None if owned is None else tuple((t, tuple(ps)) for t, ps in owned.items())
        if epoch == 0 and owned is None:
            owned_tp = ()
        self.coord.consumer_group_heartbeat(group, member_id, epoch, instance, rack, rebalance if epoch == 0 else -1,
                                            topics if epoch == 0 or topics != ("t",) else None, regex, assignor,
                                            owned_tp, "client", "/127.0.0.1", version, box)
        if complete:
            self.store.complete_all()
        return box

    def commit(self, member_id: str, epoch: int, partitions: list[int], *, group: str = "g", version: int = 9) -> Box:
        box = Box()
        self.coord.commit_offsets(group, epoch, member_id, None, {("t", p): OffsetAndMetadata(7) for p in partitions},
                                  box, api_version=version)
        self.store.complete_all()
        return box

    def consumer(self, group: str = "g"):
        g = self.coord.group(group)
        assert g is not None and g.consumer is not None
        return g.consumer


def parts(result: HeartbeatResult, topic: uuid.UUID = T) -> set[int] | None:
    if result.assignment is None:
        return None
    return {p for t, ps in result.assignment if t == topic for p in ps}


def test_a_member_joins_is_assigned_everything_and_is_answered_only_once_written() -> None:
    h = Harness()
    box = h.hb("a", 0, complete=False)
    assert box == []  # not answered before its records are durable
    kinds = [k.record_type for k in h.store.pending_keys()]
    assert kinds == [rec.CONSUMER_GROUP_MEMBER_METADATA, rec.CONSUMER_GROUP_METADATA,
                     rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
                     rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT]
    assert h.coord.group("g") is None  # nothing applied yet
    h.store.complete_all()
    r = box.one
    # A new group is at epoch 1 (Kafka 4.3's ModernGroup): the first member joins at epoch 2.
    assert (r.error, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (E.none, "a", 2, 5000)
    assert parts(r) == {0, 1, 2, 3}
    assert h.consumer().state is ConsumerGroupState.STABLE
    # A steady heartbeat writes nothing and is answered at once, without the assignment.
    steady = h.hb("a", 2, owned={T: [0, 1, 2, 3]}, complete=False)
    assert h.store.pending == [] and steady.one.member_epoch == 2 and steady.one.assignment is None


def test_a_partition_is_revoked_by_its_owner_before_it_is_given_to_another_member() -> None:
    h = Harness()
    h.hb("a", 0)
    b = h.hb("b", 0).one
    # The target moved 2 partitions to b, but a still owns them: b waits at the new epoch.
    assert (b.member_epoch, parts(b)) == (3, set())
    assert h.consumer().members["b"].state is MemberState.UNRELEASED_PARTITIONS
    a = h.hb("a", 2, owned={T: [0, 1, 2, 3]}).one
    kept = parts(a)
    assert a.member_epoch == 2 and kept is not None and len(kept) == 2  # revoke first, same epoch
    assert h.consumer().members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert h.hb("b", 3).one.assignment is None  # still unreleased
    # a says it gave them up: it moves to epoch 3, and b gets them.
    a2 = h.hb("a", 2, owned={T: sorted(kept)}).one
    assert a2.member_epoch == 3
    b2 = h.hb("b", 3).one
    assert parts(b2) == {0, 1, 2, 3} - kept
    assert h.consumer().state is ConsumerGroupState.STABLE


def test_epochs_ahead_or_behind_are_fenced_but_a_lost_bump_is_forgiven() -> None:
    h = Harness()
    h.hb("a", 0)
    assert h.hb("a", 5, owned={T: [0]}).one.error is E.fenced_member_epoch
    h.hb("b", 0)
    h.hb("a", 2, owned={T: [0, 1, 2, 3]})
    a = h.consumer().members["a"]
    h.hb("a", 2, owned={T: sorted(a.assigned[T])})  # revoked: epoch 3, previous 2
    assert h.consumer().members["a"].member_epoch == 3
    # The response with epoch 3 was lost: epoch 2 with a subset of its partitions is accepted.
    again = h.hb("a", 2, owned={T: sorted(h.consumer().members["a"].assigned[T])}).one
    assert (again.error, again.member_epoch) == (E.none, 3)
    # The previous epoch with a partition it does not own: fenced.
    assert h.hb("a", 2, owned={T: [0, 1, 2, 3]}).one.error is E.fenced_member_epoch
    assert h.hb("ghost", 3, owned={}).one.error is E.unknown_member_id
    assert h.hb("x", 1, group="nope", owned={}).one.error is E.group_id_not_found


def test_a_silent_member_is_fenced_after_its_session_and_its_partitions_move() -> None:
    h = Harness()
    h.hb("a", 0)
    h.hb("b", 0)
    h.hb("a", 1, owned={T: [0, 1, 2, 3]})
    h.hb("a", 1, owned={T: sorted(h.consumer().members["a"].assigned[T])})
    for _ in range(10):  # b keeps heartbeating, a goes quiet
        h.advance(SESSION // 10)
        h.hb("b", h.consumer().members["b"].member_epoch,
             owned={T: sorted(h.consumer().members["b"].assigned.get(T, {}))})
    assert "a" not in h.consumer().members
    b = h.consumer().members["b"]
    assert set(b.assigned[T]) == {0, 1, 2, 3} and b.state is MemberState.STABLE


def test_a_member_whose_heartbeat_is_being_written_when_its_session_ends_is_not_fenced() -> None:
    """The session deadline fires while the member's heartbeat waits on the store: the
    fencing step runs after it, and must see that the heartbeat started a new session."""
    h = Harness()
    h.hb("a", 0)
    h.clock.advance(SESSION - 1)
    box = h.hb("a", 2, topics=("t", "other"), complete=False)  # a change: records to write
    h.clock.advance(1)
    h.coord.tick()
    h.store.complete_all()
    assert box.one.error is E.none
    assert "a" in h.consumer().members
    h.advance(SESSION)
    assert "a" not in h.consumer().members  # the new session still ends


def test_fencing_that_could_not_be_written_is_tried_again() -> None:
    """Kafka retries a timer's failed write 500 ms later; a member whose fencing failed
    once must not keep its partitions for ever."""
    h = Harness()
    h.hb("a", 0)
    h.hb("b", 0)
    h.clock.advance(SESSION)
    h.coord.tick()
    h.store.complete_all(E.not_enough_replicas)  # both fencings fail
    assert set(h.consumer().members) == {"a", "b"}
    h.advance(499)
    assert set(h.consumer().members) == {"a", "b"}
    h.advance(1)
    assert h.consumer().members == {}


def test_a_member_that_does_not_revoke_in_time_is_fenced() -> None:
    h = Harness()
    h.hb("a", 0, rebalance=1000)
    h.hb("b", 0)
    h.hb("a", 2, owned={T: [0, 1, 2, 3]})  # asked to revoke
    assert h.consumer().members["a"].state is MemberState.UNREVOKED_PARTITIONS
    h.advance(999)
    assert "a" in h.consumer().members
    h.advance(1)
    assert "a" not in h.consumer().members
    assert h.consumer().group_epoch == 4


def test_a_member_still_revoking_after_a_restart_is_fenced_after_its_rebalance_timeout() -> None:
    """Kafka's onLoaded schedules the rebalance timeout of every UNREVOKED member again;
    without it a member that heartbeats but never revokes keeps b waiting for ever."""
    h = Harness()
    h.hb("a", 0, rebalance=1000)
    h.hb("b", 0)
    h.hb("a", 2, owned={T: [0, 1, 2, 3]})
    assert h.consumer().members["a"].state is MemberState.UNREVOKED_PARTITIONS
    partition = h.coord.partition_for("g")
    fresh = Harness(store=FakeStore())
    fresh.coord.load_partition(partition, h.store.partition_entries(partition))
    fresh.advance(999)  # a keeps its session but never gives its partitions up
    assert fresh.hb("a", 2, owned={T: [0, 1, 2, 3]}).one.error is E.none
    fresh.advance(1)
    assert "a" not in fresh.consumer().members
    b = fresh.hb("b", fresh.consumer().members["b"].member_epoch, owned={}).one
    assert parts(b) == {0, 1, 2, 3}


def test_leaving_frees_the_partitions_at_once() -> None:
    h = Harness()
    h.hb("a", 0)
    h.hb("b", 0)
    left = h.hb("a", -1, topics=None).one
    assert (left.error, left.member_epoch) == (E.none, -1)
    b = h.hb("b", 3, owned={}).one
    assert parts(b) == {0, 1, 2, 3}
    assert h.hb("a", -1, topics=None).one.error is E.unknown_member_id
    gone = h.hb("a", -1, group="nope", topics=None).one
    assert (gone.error, gone.error_message) == (E.group_id_not_found, "Group nope not found.")


def test_a_static_member_keeps_its_partitions_while_away_and_its_successor_takes_them() -> None:
    h = Harness()
    first = h.hb("a", 0, instance="i1").one
    assert parts(first) == {0, 1, 2, 3}
    # Another process with the same instance id while the first is present: refused.
    refused = h.hb("a2", 0, instance="i1").one
    assert (refused.error, refused.error_message) == (E.unreleased_instance_id, (
        "Static member a2 with instance id i1 cannot join the group because the instance id is owned by a member."))
    # The first leaves for now (-2): it keeps its partitions, nobody else gets them.
    away = h.hb("a", -2, instance="i1", topics=None).one
    assert (away.error, away.member_epoch) == (E.none, -2)
    h.hb("b", 0)
    assert parts(h.hb("b", h.consumer().members["b"].member_epoch, owned={}).one) in (None, set())
    back = h.hb("a2", 0, instance="i1").one
    assert back.error is E.none and "a" not in h.consumer().members
    assert parts(back) and parts(back) <= {0, 1, 2, 3}
    # The old process is fenced by its successor.
    assert h.hb("a", 1, instance="i1", owned={}).one.error is E.fenced_instance_id
    assert h.hb("zz", -2, instance="nope", topics=None).one.error is E.unknown_member_id


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"member_id": "", "epoch": 0, "version": 1}, E.invalid_request, "MemberId can't be empty."),
    ({"member_id": "m", "epoch": 0, "group": ""}, E.invalid_request, "GroupId can't be empty."),
    ({"member_id": "m", "epoch": 0, "instance": ""}, E.invalid_request, "InstanceId can't be empty."),
    ({"member_id": "m", "epoch": 0, "rack": ""}, E.invalid_request, "RackId can't be empty."),
    ({"member_id": "m", "epoch": 0, "rebalance": -1}, E.invalid_request,
     "RebalanceTimeoutMs must be provided in first request."),
    ({"member_id": "m", "epoch": 0, "owned": {T: [1]}}, E.invalid_request,
     "TopicPartitions must be empty when (re-)joining."),
    ({"member_id": "m", "epoch": 0, "topics": None}, E.invalid_request,
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    ({"member_id": "m", "epoch": -2, "topics": None}, E.invalid_request, "InstanceId can't be null."),
    ({"member_id": "m", "epoch": -3, "owned": {}}, E.invalid_request, "MemberEpoch is invalid."),
])
def test_bad_heartbeats_get_kafkas_answers_and_write_nothing(kwargs: dict, error: ErrorCode, message: str) -> None:
    h = Harness()
    member_id, epoch = kwargs.pop("member_id"), kwargs.pop("epoch")
    r = h.hb(member_id, epoch, **kwargs).one
    assert (r.error, r.error_message) == (error, message)
    assert h.store.log == []


def test_unknown_assignors_and_bad_regexes_are_refused() -> None:
    h = Harness()
    assert h.hb("m", 0, assignor="sticky").one.error is E.unsupported_assignor
    assert h.hb("m", 0, topics=None, regex="(").one.error is E.invalid_regular_expression
    assert h.store.log == []


@pytest.mark.parametrize("field", ["member_id", "topic", "instance", "rack"])
def test_a_string_too_long_for_a_record_fails_the_heartbeat_but_not_the_group(field: str) -> None:
    """A string over 32767 bytes cannot be written in a record: the heartbeat fails with
    UNKNOWN_SERVER_ERROR (Kafka's answer to an operation that raises; Kafka itself does not
    parse such a request and closes the connection) and the group's next changes still run."""
    h = Harness()
    long = "x" * 40_000
    kwargs: dict = {"topic": {"topics": (long,)}, "instance": {"instance": long}, "rack": {"rack": long}}.get(field, {})
    r = h.hb(long if field == "member_id" else "m", 0, **kwargs).one
    assert r.error is E.unknown_server_error
    assert h.store.log == [] and h.coord.group("g") is None
    assert h.hb("a", 0).one.error is E.none


def test_a_v0_member_without_an_id_is_named_by_the_coordinator() -> None:
    r = Harness().hb("", 0, version=0).one
    assert r.error is E.none and uuid.UUID(r.member_id)


def test_a_regex_subscription_follows_the_topics_that_match() -> None:
    h = Harness(topics={"t": TopicImage(T, 2), "other": TopicImage(U, 2)})
    r = h.hb("a", 0, topics=None, regex="t.*").one
    assert r.assignment == ((T, (0, 1)),)
    h.topics["tt"] = TopicImage(uuid.UUID(int=3), 1)  # a new matching topic: the next heartbeat assigns it
    again = h.hb("a", 2, topics=None, owned={T: [0, 1]}).one
    assert again.member_epoch == 3 and parts(again, uuid.UUID(int=3)) == {0}


def test_a_regex_is_matched_in_linear_time_with_re2_syntax() -> None:
    """Kafka matches with RE2J: ``(.*.*)*x`` against a 14-character name takes
    seconds with a backtracking engine (hours at 25), on the broker's event loop."""
    h = Harness(topics={"a" * 14: TopicImage(T, 1), "ax": TopicImage(U, 1)})
    started = time.monotonic()
    r = h.hb("a", 0, topics=None, regex="(.*.*)*x").one
    assert time.monotonic() - started < 1
    assert (r.error, r.assignment) == (E.none, ((U, (0,)),))
    # RE2's syntax, not Python's: no lookaround, no backreferences.
    for regex in ("(?=t)t", r"(t)\1"):
        bad = h.hb("b", 0, topics=None, regex=regex).one
        assert bad.error is E.invalid_regular_expression, regex
        assert bad.error_message.startswith(f"SubscribedTopicRegex `{regex}` is not a valid regular expression: ")


def test_a_pattern_shared_by_members_is_matched_once_per_topic_and_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every member's subscription is resolved at each heartbeat: 100 members sharing a
    pattern and 1000 topics made 100,000 matches (50 ms) per heartbeat on the event loop."""
    h = Harness(topics={f"t{i}": TopicImage(uuid.UUID(int=i + 1), 1) for i in range(50)})
    for i in range(20):
        h.hb(f"m{i}", 0, topics=None, regex="t1.*")
    calls = []
    real = topic_regex.matches
    monkeypatch.setattr(topic_regex, "matches", lambda regex, topic: calls.append(topic) or real(regex, topic))
    m = h.consumer().members["m5"]
    assert h.hb("m5", m.member_epoch, topics=None, owned={t: sorted(ps) for t, ps in m.assigned.items()}).one.error \
        is E.none
    assert len(calls) == 50


def test_a_topic_that_grows_bumps_the_group_epoch() -> None:
    h = Harness()
    h.hb("a", 0)
    h.topics["t"] = TopicImage(T, 6)
    r = h.hb("a", 2, owned={T: [0, 1, 2, 3]}).one
    assert (r.member_epoch, parts(r)) == (3, {0, 1, 2, 3, 4, 5})


def test_a_failed_write_applies_nothing_and_the_heartbeat_is_told() -> None:
    h = Harness()
    box = h.hb("a", 0, complete=False)
    h.store.complete_all(E.not_enough_replicas)
    assert box.one.error is E.coordinator_not_available
    assert h.coord.group("g") is None
    assert h.hb("a", 0).one.member_epoch == 2  # a retry works from the start


def test_changes_of_one_group_wait_for_the_write_before_them() -> None:
    h = Harness()
    first, second = h.hb("a", 0, complete=False), h.hb("b", 0, complete=False)
    assert len(h.store.pending) == 1  # b's change is prepared only after a's is applied
    h.store.complete_all()
    assert first.one.member_epoch == 2 and second.one.member_epoch == 3


def test_shutdown_answers_the_heartbeats_waiting_for_a_write() -> None:
    h = Harness()
    first, second = h.hb("a", 0, complete=False), h.hb("b", 0, complete=False)
    h.coord.shutdown()
    assert first.one.error is E.not_coordinator  # its write was pending
    assert second.one.error is E.not_coordinator  # it waited for that write
    h.store.complete_all()
    assert len(first) == len(second) == 1


def test_commits_are_checked_against_member_epochs() -> None:
    h = Harness()
    h.hb("a", 0)
    assert h.commit("a", 2, [0]).one == {("t", 0): E.none}
    assert h.commit("a", 3, [0]).one == {("t", 0): E.stale_member_epoch}
    assert h.commit("a", 2, [0], version=8).one == {("t", 0): E.unsupported_version}
    assert h.commit("ghost", 2, [0]).one == {("t", 0): E.unknown_member_id}
    assert h.commit("", -1, [0]).one == {("t", 0): E.unknown_member_id}  # members present: only they commit
    h.hb("b", 0)
    h.hb("a", 2, owned={T: [0, 1, 2, 3]})
    kept = sorted(h.consumer().members["a"].assigned[T])
    h.hb("a", 2, owned={T: kept})  # a is at epoch 3 now, its kept partitions assigned at epoch 2
    assert h.commit("a", 2, kept).one == dict.fromkeys((("t", p) for p in kept), E.none)
    gone = sorted({0, 1, 2, 3} - set(kept))
    assert h.commit("a", 2, gone[:1]).one == {("t", gone[0]): E.stale_member_epoch}
    # TxnOffsetCommit turns STALE_MEMBER_EPOCH into ILLEGAL_GENERATION.
    box = Box()
    h.coord.commit_transactional_offsets("g", 1000, 0, 9, "a", None, {("t", kept[0]): OffsetAndMetadata(3)}, box)
    assert box.one == {("t", kept[0]): E.illegal_generation}
    box = Box()
    h.coord.commit_transactional_offsets("g", 1000, 0, 3, "a", None, {("t", kept[0]): OffsetAndMetadata(3)}, box)
    h.store.complete_all()
    assert box.one == {("t", kept[0]): E.none}


def test_a_restarted_coordinator_restores_the_group_from_its_records() -> None:
    h = Harness()
    h.hb("a", 0, instance="i1", rack="r1")
    h.hb("b", 0)
    h.hb("a", 2, owned={T: [0, 1, 2, 3]}, instance="i1")
    h.commit("b", 3, [])
    before = h.consumer()
    partition = h.coord.partition_for("g")
    fresh = Harness(store=FakeStore())
    fresh.coord.load_partition(partition, h.store.partition_entries(partition))
    after = fresh.consumer()
    assert (after.group_epoch, after.assignment_epoch, after.target) == (before.group_epoch, before.assignment_epoch,
                                                                         before.target)
    assert after.members == before.members and after.static_members == {"i1": "a"}
    assert after.partition_epoch(T, 0) == before.partition_epoch(T, 0)
    # Sessions start again at load: a member that never comes back is fenced.
    fresh.advance(SESSION)
    assert fresh.consumer().members == {}


def test_empty_groups_change_protocol_but_groups_with_members_do_not() -> None:
    h = Harness()
    # A group that only stores offsets becomes a consumer group; its offsets stay.
    h.commit("", -1, [0])
    h.hb("a", 0)
    _, got = h.coord.fetch_offsets("g", [("t", 0)])
    assert got[("t", 0)].offset == 7
    # A classic JoinGroup to it while it has members: refused.
    box = Box()
    h.coord.join_group("g", "", None, "consumer", RANGE, 10_000, 30_000, False, "c", "/h", None, box)
    assert box.one.error is E.inconsistent_group_protocol
    h.hb("a", -1, topics=None)
    # Empty now: a classic JoinGroup turns it classic, with tombstones for its records.
    box = Box()
    h.coord.join_group("g", "", None, "consumer", RANGE, 10_000, 30_000, True, "c", "/h", None, box)
    h.store.complete_all()
    assert box.one.error is E.member_id_required and h.coord.group("g").consumer is None
    tombstoned = {rec.decode_key(k) for p, k, v in h.store.log if v is None}
    assert rec.ConsumerGroupKey(rec.CONSUMER_GROUP_METADATA, "g") in tombstoned
    # A classic group with members refuses the consumer protocol.
    joined = Box()
    h.coord.join_group("c", "", None, "consumer", RANGE, 10_000, 30_000, False, "c", "/h", None, joined)
    h.advance(0)
    assert h.hb("x", 0, group="c").one.error is E.group_id_not_found


def test_delete_groups_and_listing() -> None:
    h = Harness()
    h.hb("a", 0)
    (listed,) = h.coord.list_groups(types={"consumer"})
    assert (listed.group_type, listed.state, listed.protocol_type) == ("consumer", "Stable", "consumer")
    assert h.coord.list_groups(types={"classic"}) == []
    assert h.coord.describe_groups(["g"])[0].state == "Dead"  # not a classic group
    (described,) = h.coord.consumer_group_describe(["g"])
    assert (described.state, described.group_epoch, described.assignor_name) == ("Stable", 2, "uniform")
    assert described.members[0].assignment == ((T, "t", (0, 1, 2, 3)),)
    assert h.coord.consumer_group_describe(["nope"])[0].error is E.group_id_not_found
    h.commit("", -1, [0], group="")  # a group with the empty id exists (OffsetCommit allows it)
    assert h.coord.consumer_group_describe([""])[0].error is E.invalid_group_id
    box = Box()
    h.coord.delete_groups(["g"], box)
    assert box.one == {"g": E.non_empty_group}
    h.hb("a", -1, topics=None)
    box = Box()
    h.coord.delete_groups(["g"], box)
    h.store.complete_all()
    assert box.one == {"g": E.none} and h.coord.group("g") is None
    fresh = Harness(store=FakeStore())
    partition = h.coord.partition_for("g")
    fresh.coord.load_partition(partition, h.store.partition_entries(partition))
    assert fresh.coord.group("g") is None


def test_a_group_being_joined_is_neither_deleted_nor_turned_classic() -> None:
    """A member joins an empty group; while its records are written, DeleteGroups and a
    classic JoinGroup must see a group with a member (Kafka runs them after the join, on
    its uncommitted state): deleting it left a live group that a restart forgot, and a
    classic member in it made the join's records unappliable (the group's queue stuck)."""
    h = Harness()
    h.hb("a", 0)
    h.hb("a", -1, topics=None)
    join = h.hb("b", 0, complete=False)
    deleted = Box()
    h.coord.delete_groups(["g"], deleted)
    classic = Box()
    h.coord.join_group("g", "", None, "consumer", RANGE, 10_000, 30_000, False, "c", "/h", None, classic)
    h.store.complete_all()
    assert deleted.one == {"g": E.non_empty_group}
    assert classic.one.error is E.inconsistent_group_protocol
    assert join.one.error is E.none and set(h.consumer().members) == {"b"}
    fresh = Harness(store=FakeStore())
    partition = h.coord.partition_for("g")
    fresh.coord.load_partition(partition, h.store.partition_entries(partition))
    assert fresh.consumer().members == h.consumer().members
    # A new group: the classic JoinGroup would have created a classic group under the join.
    first = h.hb("x", 0, group="new", complete=False)
    classic = Box()
    h.coord.join_group("new", "", None, "consumer", RANGE, 10_000, 30_000, False, "c", "/h", None, classic)
    h.store.complete_all()
    assert classic.one.error is E.inconsistent_group_protocol and first.one.error is E.none
    assert h.hb("y", 0, group="new").one.error is E.none


def test_offset_expiry_does_not_delete_a_group_being_joined() -> None:
    h = Harness(offsets_retention_minutes=1, offsets_retention_check_interval_ms=1000)
    h.commit("", -1, [0])  # an empty group that only stores an offset
    h.hb("a", 0)
    h.hb("a", -1, topics=None)
    h.clock.advance(60_000)
    join = h.hb("b", 0, topics=("other",), complete=False)
    h.coord.tick()  # the offset expires while b's join is written
    h.store.complete_all()
    assert join.one.error is E.none and set(h.consumer().members) == {"b"}
    fresh = Harness(store=FakeStore())
    partition = h.coord.partition_for("g")
    fresh.coord.load_partition(partition, h.store.partition_entries(partition))
    assert set(fresh.consumer().members) == {"b"}


def test_describe_shows_the_partitions_a_member_is_revoking_and_no_deleted_topic() -> None:
    """Kafka's asConsumerGroupDescribeMember: a member still answers for the partitions it
    is revoking (they were described as nobody's during a rebalance), and a topic gone
    from the metadata is left out (it was listed with an empty name)."""
    h = Harness(topics={"t": TopicImage(T, 4), "u": TopicImage(U, 1)})
    h.hb("a", 0, topics=("t", "u"))
    h.hb("b", 0, topics=("t",))
    h.hb("a", 2, topics=None, owned={T: [0, 1, 2, 3], U: [0]})  # a revokes two of t's partitions
    a = h.consumer().members["a"]
    assert a.state is MemberState.UNREVOKED_PARTITIONS
    (described,) = h.coord.consumer_group_describe(["g"])
    of_a = {m.member_id: m for m in described.members}["a"]
    assert of_a.assignment == ((T, "t", (0, 1, 2, 3)), (U, "u", (0,)))
    del h.topics["u"]
    (described,) = h.coord.consumer_group_describe(["g"])
    of_a = {m.member_id: m for m in described.members}["a"]
    assert of_a.assignment == ((T, "t", (0, 1, 2, 3)),)
    assert of_a.target_assignment == ((T, "t", tuple(sorted(a.assigned[T]))),)


def test_random_rebalances_never_give_one_partition_to_two_members() -> None:
    """Members join, leave and heartbeat in random order, always reporting what they own;
    at no point do two members own a partition, and once quiet everything is assigned."""
    rng = random.Random(848)
    h = Harness(topics={"t": TopicImage(T, 12), "u": TopicImage(U, 5)})
    owned: dict[str, dict[uuid.UUID, list[int]]] = {}
    epochs: dict[str, int] = {}
    next_id = 0

    def beat(mid: str) -> None:
        r = h.hb(mid, epochs[mid], owned=owned[mid], topics=None).one
        assert r.error is E.none, r
        epochs[mid] = r.member_epoch
        if r.assignment is not None:
            owned[mid] = {t: list(ps) for t, ps in r.assignment}

    for _ in range(400):
        action = rng.random()
        if action < 0.15 and len(owned) < 6:
            mid = f"m{next_id}"
            next_id += 1
            r = h.hb(mid, 0, topics=("t", "u") if rng.random() < 0.7 else ("t",)).one
            epochs[mid], owned[mid] = r.member_epoch, {t: list(ps) for t, ps in (r.assignment or ())}
        elif action < 0.22 and owned:
            mid = rng.choice(sorted(owned))
            h.hb(mid, -1, topics=None)
            del owned[mid], epochs[mid]
        elif owned:
            beat(rng.choice(sorted(owned)))
        seen: set[tuple[uuid.UUID, int]] = set()
        for ps in owned.values():
            for t, plist in ps.items():
                for p in plist:
                    assert (t, p) not in seen, "two members own one partition"
                    seen.add((t, p))
    for _ in range(10):
        for mid in sorted(owned):
            beat(mid)
    if owned:
        assert h.consumer().state is ConsumerGroupState.STABLE
        subscribed_u = any(U in m.assigned or "u" in m.subscribed_topic_names for m in h.consumer().members.values())
        total = sum(len(ps) for o in owned.values() for ps in o.values())
        assert total == 12 + (5 if subscribed_u else 0)


def test_a_members_offset_fetch_carries_its_epoch() -> None:
    h = Harness()
    h.hb("a", 0)
    h.commit("a", 2, [0])
    assert h.coord.fetch_offsets("g", [("t", 0)], member_id="a", member_epoch=2)[1][("t", 0)].offset == 7
    assert h.coord.fetch_offsets("g", [("t", 0)], member_id="a", member_epoch=1) == (E.stale_member_epoch, {})
    assert h.coord.fetch_offsets("g", [("t", 0)], member_id="ghost", member_epoch=1) == (E.unknown_member_id, {})
    assert h.coord.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 7  # the admin client: no member
