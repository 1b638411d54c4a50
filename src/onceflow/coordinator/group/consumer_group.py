"""One group of the KIP-848 consumer protocol: epochs, members, target and current assignments.

Theory of operation
-------------------
KIP-848 moves the rebalance into the coordinator.  A group has three epochs:

* the *group epoch*, bumped whenever what the group must assign changes (a
  member joins, leaves or changes its subscription; a subscribed topic is
  created, deleted or grows);
* the *assignment epoch*: the group epoch the *target assignment* was last
  computed for (by a server-side assignor, ``assignors.py``);
* each member's *member epoch*: the assignment epoch it has caught up with.

A member moves towards its share of the target assignment one heartbeat at
a time (``reconcile``, Kafka's CurrentAssignmentBuilder): partitions it
must give up are first *pending revocation* (it keeps its epoch and state
UNREVOKED_PARTITIONS until a heartbeat no longer lists them as owned);
partitions still owned by another member are *unreleased* (it takes the new
epoch but waits, UNRELEASED_PARTITIONS); only then is it STABLE at the
assignment epoch.  So no partition is ever owned by two members, and an
offset commit carries the member epoch that fences a member left behind.
Every partition of a member keeps the epoch it was assigned at (Kafka 4.3's
assignment epochs), so a commit with an older member epoch is still valid
for a partition the member has owned since.

``ConsumerGroup`` is the state and nothing else.  It changes only by
``replay`` of the group's records (``log_records``: types 3, 5, 6, 7, 8),
the same function for records read back at start-up and for records the
coordinator has just written: a change is prepared as records
(``consumer_membership.py``), written, and applied by replaying them.  The
group's state is derived, as Kafka derives it: Empty (no member), Assigning
(the group epoch is ahead of the assignment epoch), Reconciling (a member has
not caught up), Stable.

The Kafka sources this follows are ConsumerGroup.java, ConsumerGroupMember.java,
CurrentAssignmentBuilder.java and GroupMetadataManager.java of Kafka 4.3.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from ...protocol.errors import ErrorCode
from . import log_records as rec

#: ConsumerGroupHeartbeat's member epochs that mean "leaving" (KIP-848).
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
#: The group and assignment epochs of a group no record has changed yet.
INITIAL_EPOCH = 1

#: topic id -> partition -> the epoch the partition was assigned at.
EpochAssignment = dict[uuid.UUID, dict[int, int]]


class MemberState(enum.IntEnum):
    """Kafka's MemberState; the values are those written in the current-assignment record."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class ConsumerGroupState(enum.Enum):
    """Kafka's ConsumerGroupState (the values are what DescribeGroups and ListGroups say)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class FencedMember(Exception):
    """The member must drop its partitions and rejoin with epoch 0 (FENCED_MEMBER_EPOCH)."""


@dataclass(frozen=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = ""  # Kafka's ConsumerGroupMember default, written as ""
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: EpochAssignment = field(default_factory=dict)
    pending_revocation: EpochAssignment = field(default_factory=dict)

    def is_reconciled_to(self, assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == assignment_epoch

    def with_epoch(self, epoch: int, **changes: object) -> ConsumerMember:
        """A new member epoch; the previous one is remembered (a response with the new one may be lost)."""
        return replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch, **changes)  # type: ignore[arg-type]

    def subscription_value(self) -> rec.ConsumerMemberValue:
        return rec.ConsumerMemberValue(
            instance_id=self.instance_id, rack_id=self.rack_id, client_id=self.client_id, client_host=self.client_host,
            subscribed_topic_names=self.subscribed_topic_names, subscribed_topic_regex=self.subscribed_topic_regex,
            rebalance_timeout_ms=self.rebalance_timeout_ms, server_assignor=self.server_assignor)

    def assignment_value(self) -> rec.CurrentAssignmentValue:
        return rec.CurrentAssignmentValue(self.member_epoch, self.previous_member_epoch, int(self.state),
                                          self.assigned, self.pending_revocation)

    def assignment_epoch(self, topic_id: uuid.UUID, partition: int) -> int | None:
        """The epoch the partition was assigned at, if the member owns it or is giving it up."""
        for assignment in (self.assigned, self.pending_revocation):
            epoch = assignment.get(topic_id, {}).get(partition)
            if epoch is not None:
                return epoch
        return None


class ConsumerGroup:
    """A KIP-848 group's state, changed only by ``replay``."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        # Kafka 4.3 starts a group at epoch 1 with its (empty) target assignment at epoch 1
        # (ModernGroup, TargetAssignmentMetadata.INITIAL): the first member joins at epoch 2.
        self.group_epoch = INITIAL_EPOCH
        self.metadata_hash = 0
        self.assignment_epoch = INITIAL_EPOCH
        self.assignment_timestamp_ms = 0
        self.members: dict[str, ConsumerMember] = {}
        #: member id -> its share of the target assignment.
        self.target: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
        #: group.instance.id -> member id.
        self.static_members: dict[str, str] = {}
        #: (topic id, partition) -> epoch of the member that owns it or is revoking it.
        self._partition_epochs: dict[tuple[uuid.UUID, int], int] = {}

    # ------------------------------------------------------------ derived

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the member owning the partition; -1 if it is free."""
        return self._partition_epochs.get((topic_id, partition), -1)

    def preferred_assignor(self) -> str | None:
        return preferred_assignor(self.members.values())

    # ------------------------------------------------------------ replay

    def replay(self, key: rec.ConsumerGroupKey | rec.ConsumerGroupMemberKey, value: bytes | None) -> None:
        """Apply one of the group's records (``value`` None: a tombstone).  Raises
        ``RecordDecodeError`` on a value that does not decode."""
        if isinstance(key, rec.ConsumerGroupKey):
            if key.record_type == rec.CONSUMER_GROUP_METADATA:
                # A tombstone deletes the whole group: the caller drops it.
                if value is not None:
                    self.group_epoch, self.metadata_hash = rec.decode_consumer_group_epoch(value)
            elif value is None:
                self.assignment_epoch, self.assignment_timestamp_ms = -1, 0  # Kafka's deleted assignment
            else:
                self.assignment_epoch, self.assignment_timestamp_ms = rec.decode_target_assignment_epoch(value)
            return
        member_id = key.member_id
        if key.record_type == rec.CONSUMER_GROUP_MEMBER_METADATA:
            if value is None:
                self._remove_member(member_id)
            else:
                self._put_subscription(member_id, rec.decode_consumer_member(value))
        elif key.record_type == rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                self.target.pop(member_id, None)
            else:
                self.target[member_id] = rec.decode_target_assignment_member(value)
        else:
            member = self.members.get(member_id) or ConsumerMember(member_id)
            if value is None:
                # Kafka's replay: the member leaves its epoch and releases its partitions.
                updated = replace(member, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, previous_member_epoch=member.member_epoch,
                                  state=MemberState.STABLE, assigned={}, pending_revocation={})
            else:
                v = rec.decode_current_assignment(value)
                updated = replace(member, member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch,
                                  state=MemberState.of(v.state), assigned=_copy(v.assigned),
                                  pending_revocation=_copy(v.pending_revocation))
            self._set_member(member, updated)

    def _put_subscription(self, member_id: str, v: rec.ConsumerMemberValue) -> None:
        old = self.members.get(member_id)
        base = old if old is not None else ConsumerMember(member_id)
        updated = replace(base, instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id,
                          client_host=v.client_host, subscribed_topic_names=tuple(v.subscribed_topic_names),
                          subscribed_topic_regex=v.subscribed_topic_regex, rebalance_timeout_ms=v.rebalance_timeout_ms,
                          server_assignor=v.server_assignor)
        self._set_member(old, updated)

    def _set_member(self, old: ConsumerMember | None, new: ConsumerMember) -> None:
        if old is not None:
            self._release(old)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == old.member_id:
                del self.static_members[old.instance_id]
        self.members[new.member_id] = new
        if new.instance_id is not None:
            self.static_members[new.instance_id] = new.member_id
        for assignment in (new.assigned, new.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    self._partition_epochs[(topic_id, p)] = new.member_epoch

    def _release(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    if self._partition_epochs.get((topic_id, p)) == member.member_epoch:
                        del self._partition_epochs[(topic_id, p)]

    def _remove_member(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is None:
            return
        self._release(member)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]


def preferred_assignor(members: Iterable[ConsumerMember]) -> str | None:
    """The assignor most members ask for (Kafka's computePreferredServerAssignor); ties: by name."""
    counts: dict[str, int] = {}
    for m in members:
        if m.server_assignor is not None:
            counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
    return min(counts, key=lambda name: (-counts[name], name)) if counts else None


def _copy(assignment: Mapping[uuid.UUID, Mapping[int, int]]) -> EpochAssignment:
    return {topic_id: dict(partitions) for topic_id, partitions in assignment.items() if partitions}


# ---------------------------------------------------------------- reconciliation


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Mapping[uuid.UUID, frozenset[int]],
    subscribed_topic_ids: frozenset[uuid.UUID],
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: Iterable[tuple[uuid.UUID, Iterable[int]]] | None,
    subscription_changed: bool,
) -> ConsumerMember:
    """Kafka's CurrentAssignmentBuilder.build: the member one step closer to ``target``.

    ``owned``: the partitions the heartbeat says the member still owns (None:
    not sent).  Raises ``FencedMember`` for a member in a state this broker
    does not know that still owns partitions.
    """
    owned_set = None if owned is None else {(t, p) for t, ps in owned for p in ps}

    def owns_any(assignment: Mapping[uuid.UUID, Mapping[int, int]]) -> bool:
        if owned_set is None:
            return True
        return any((t, p) in owned_set for t, ps in assignment.items() for p in ps)

    def next_assignment(epoch: int) -> ConsumerMember:
        return _compute_next(member, epoch, target_epoch, target, subscribed_topic_ids, partition_epoch, owns_any)

    if member.state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return next_assignment(member.member_epoch)
        if subscription_changed:
            return _drop_unsubscribed(member, subscribed_topic_ids, owns_any)
        return member
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(member.pending_revocation):
            return _drop_unsubscribed(member, subscribed_topic_ids, owns_any) if subscription_changed else member
        return next_assignment(member.member_epoch)
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return next_assignment(member.member_epoch)
    if owned_set is None or owned_set:
        raise FencedMember("the consumer group member is in an unknown state")
    return next_assignment(target_epoch)


def _drop_unsubscribed(member: ConsumerMember, subscribed: frozenset[uuid.UUID],
                       owns_any: Callable[[Mapping[uuid.UUID, Mapping[int, int]]], bool]) -> ConsumerMember:
    """Kafka's updateCurrentAssignment: topics no longer subscribed move to pending revocation."""
    dropped = {t: ps for t, ps in member.assigned.items() if t not in subscribed}
    if not dropped:
        return member
    assigned = {t: dict(ps) for t, ps in member.assigned.items() if t in subscribed}
    pending = _copy(member.pending_revocation)
    for t, ps in dropped.items():
        pending.setdefault(t, {}).update(ps)
    if owns_any(pending):
        return member.with_epoch(member.member_epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                                 pending_revocation=pending)
    return member.with_epoch(member.member_epoch, assigned=assigned)


def _compute_next(
    member: ConsumerMember,
    member_epoch: int,
    target_epoch: int,
    target: Mapping[uuid.UUID, frozenset[int]],
    subscribed: frozenset[uuid.UUID],
    partition_epoch: Callable[[uuid.UUID, int], int],
    owns_any: Callable[[Mapping[uuid.UUID, Mapping[int, int]]], bool],
) -> ConsumerMember:
    """Kafka's computeNextAssignment."""
    unreleased = False
    assigned: EpochAssignment = {}
    revoking: EpochAssignment = {}
    to_assign: dict[uuid.UUID, set[int]] = {}
    for topic_id in sorted(set(target) | set(member.assigned)):
        wanted = target.get(topic_id, frozenset()) if topic_id in subscribed else frozenset()
        current = member.assigned.get(topic_id, {})
        kept = {p: e for p, e in current.items() if p in wanted}
        gone = {p: e for p, e in current.items() if p not in kept}
        pending_here = member.pending_revocation.get(topic_id, {})
        new = set()
        for p in wanted:
            if p in kept:
                continue
            # Owned by another member (not this one's own partition pending revocation): wait.
            if partition_epoch(topic_id, p) != -1 and p not in pending_here:
                unreleased = True
            else:
                new.add(p)
        if kept:
            assigned[topic_id] = kept
        if gone:
            revoking[topic_id] = gone
        if new:
            to_assign[topic_id] = new
    # As Kafka's Builder.updateMemberEpoch: the previous epoch is the one
    # before this change, even when the epoch stays.
    if revoking and owns_any(revoking):
        return member.with_epoch(member_epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                                 pending_revocation=revoking)
    for topic_id, partitions in to_assign.items():
        per_topic = assigned.setdefault(topic_id, {})
        for p in partitions:
            per_topic[p] = target_epoch
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=assigned, pending_revocation={})


# ---------------------------------------------------------------- offset commits


def validate_offset_commit(
    group: ConsumerGroup,
    member_id: str,
    instance_id: str | None,
    member_epoch: int,
    partitions: Iterable[tuple[uuid.UUID | None, int]],
    *,
    transactional: bool,
    api_version: int,
) -> ErrorCode | None:
    """Kafka's ConsumerGroup.validateOffsetCommit and its per-partition assignment-epoch check.

    STALE_MEMBER_EPOCH is what the consumer protocol's OffsetCommit answers;
    TxnOffsetCommit turns it into ILLEGAL_GENERATION (its clients do not know
    the new code), as Kafka's OffsetMetadataManager does.
    """
    stale = ErrorCode.illegal_generation if transactional else ErrorCode.stale_member_epoch
    if member_epoch < 0 and not group.members:
        return None  # the admin client, or a consumer without group management
    if transactional and member_epoch == -1 and member_id == "" and instance_id is None:
        return None  # TxnOffsetCommit without the consumer's identity (before v3)
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    if not transactional and api_version < 9:
        return ErrorCode.unsupported_version
    if member_epoch == member.member_epoch:
        return None
    if member_epoch > member.member_epoch:
        return stale
    # An older epoch is valid for partitions the member has owned since then.
    for topic_id, partition in partitions:
        assigned_at = None if topic_id is None else member.assignment_epoch(topic_id, partition)
        if assigned_at is None or member_epoch < assigned_at:
            return stale
    return None


def validate_offset_fetch(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode | None:
    """Kafka's ConsumerGroup.validateOffsetFetch (OffsetFetch v9+): a fetch naming a member must
    carry its current epoch; one without (the admin client) is always served."""
    if member_id is None and member_epoch < 0:
        return None
    member = group.members.get(member_id or "")
    if member is None:
        return ErrorCode.unknown_member_id
    if member_epoch != member.member_epoch:
        return ErrorCode.stale_member_epoch
    return None
