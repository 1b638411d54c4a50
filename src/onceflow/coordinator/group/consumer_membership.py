"""KIP-848 membership: ConsumerGroupHeartbeat, leaving, sessions and rebalance timeouts.

Theory of operation
-------------------
A member of a consumer-protocol group only ever sends ConsumerGroupHeartbeat:
epoch 0 to join (or rejoin after being fenced), its current epoch to stay,
-1 to leave, -2 to leave for now as a static member.  Each heartbeat is one
*change*, prepared from the group as it is (Kafka's
GroupMetadataManager.consumerGroupHeartbeat):

1. the member is created or updated; a changed subscription writes its
   ConsumerGroupMemberMetadata record;
2. the group epoch is bumped (a ConsumerGroupMetadata record) when a
   subscription changed or the subscribed topics' metadata did (a topic
   created, deleted or grown: the *metadata hash* differs);
3. when the group epoch is ahead of the assignment epoch, the server-side
   assignor (``assignors.py``) computes a new target assignment: a record per
   member whose share changed and a ConsumerGroupTargetAssignmentMetadata
   record;
4. the member is reconciled one step towards its share
   (``consumer_group.reconcile``): a ConsumerGroupCurrentMemberAssignment
   record if it moved.

The records are written to the group's ``__consumer_offsets`` partition and
*then* applied, by replaying them into the group (``ConsumerGroup.replay``,
the function that also loads the group at start-up), and the heartbeat is
answered.  A change of a group waits while an earlier change of the same
group is being written (``_queues``), so every change is prepared from the
state the previous one left; a failed write applies nothing and the
heartbeat gets the mapped error.  What acts on a group outside those
changes (DeleteGroups, offset clean-up, a classic JoinGroup) treats a group
with a change under way as not empty (``is_changing``), as Kafka, whose
operations see an earlier one's uncommitted state.

Timers: a member that does not heartbeat within
``group.consumer.session.timeout.ms`` is fenced (``ConsumerSessionDeadline``);
a member that keeps partitions it was asked to revoke for longer than its
rebalance timeout is fenced (``ConsumerRebalanceDeadline``).  Fencing removes
the member (tombstones of its three records) and bumps the group epoch.  As
Kafka's CoordinatorTimerImpl: a fencing waits for the group's changes under
way and is dropped if the member's timer was set again meanwhile; one whose
write fails fires again 500 ms later.  A group read back from the log starts
its members' sessions, and the rebalance timeouts of those revoking, anew.

Not implemented, and answered as Kafka answers with
``group.consumer.migration.policy=disabled``: moving a non-empty group
between the classic and the consumer protocol (GROUP_ID_NOT_FOUND here,
INCONSISTENT_GROUP_PROTOCOL to a classic JoinGroup).  Empty groups convert
both ways.  Regular-expression subscriptions are resolved at each heartbeat
with RE2 (``topic_regex``: Kafka's RE2J, full match, linear time); the
resolved topics are not persisted (Kafka's ConsumerGroupRegularExpression
records).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from ...config import (
    GROUP_CONSUMER_ASSIGNORS,
    GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS,
    GROUP_CONSUMER_MAX_SIZE,
    GROUP_CONSUMER_SESSION_TIMEOUT_MS,
)
from ...protocol.errors import ErrorCode
from .. import INTERNAL_TOPICS
from . import log_records as rec
from . import topic_regex
from .assignors import ASSIGNORS, MemberSpec, PartitionAssignorError, TopicSpec
from .consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    FencedMember,
    MemberState,
    preferred_assignor,
    reconcile,
)
from .context import ConsumerRebalanceDeadline, ConsumerSessionDeadline, GroupContext, Record
from .metadata import GroupMetadata
from .types import TopicImage

log = logging.getLogger(__name__)

#: ConsumerGroupHeartbeat v1+ (KIP-1082): the member id is always the client's.
CLIENT_MEMBER_ID_VERSION = 1

#: A session or rebalance timeout whose fencing could not be written fires again after this
#: (Kafka's CoordinatorTimerImpl retry backoff).
TIMER_RETRY_BACKOFF_MS = 500


#: (topic id, partitions) pairs, as the heartbeat carries them.
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    #: None: unchanged since the member last heard it.
    assignment: TopicPartitions | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: TopicPartitions | None
    client_id: str
    client_host: str
    api_version: int
    callback: Callable[[HeartbeatResult], None]


class _Refused(Exception):
    """A heartbeat answered with an error: nothing is written."""

    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass
class _Change:
    """Records prepared for one group, with their decoded keys for the replay."""

    records: list[Record] = field(default_factory=list)
    keys: list[rec.ConsumerGroupKey | rec.ConsumerGroupMemberKey | None] = field(default_factory=list)
    #: Replace the group's classic part (an empty classic group turned into a consumer group).
    converts: bool = False

    def add(self, record_type: int, group_id: str, value: bytes | None, member_id: str | None = None) -> None:
        key: rec.ConsumerGroupKey | rec.ConsumerGroupMemberKey
        if member_id is None:
            key = rec.ConsumerGroupKey(record_type, group_id)
        else:
            key = rec.ConsumerGroupMemberKey(record_type, group_id, member_id)
        self.records.append((rec.encode_consumer_group_key(record_type, group_id, member_id), value))
        self.keys.append(key)

    def add_raw(self, record: Record) -> None:
        self.records.append(record)
        self.keys.append(None)

    def member(self, group_id: str, member: ConsumerMember) -> None:
        self.add(rec.CONSUMER_GROUP_MEMBER_METADATA, group_id, rec.encode_consumer_member(member.subscription_value()),
                 member.member_id)

    def current(self, group_id: str, member: ConsumerMember) -> None:
        self.add(rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, group_id,
                 rec.encode_current_assignment(member.assignment_value()), member.member_id)

    def target(self, group_id: str, member_id: str, assignment: Mapping[uuid.UUID, frozenset[int]]) -> None:
        self.add(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, group_id, rec.encode_target_assignment_member(assignment),
                 member_id)

    def remove_member(self, group_id: str, member_id: str) -> None:
        """Kafka's removeMember: the current assignment, the target, then the subscription."""
        for record_type in (rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                            rec.CONSUMER_GROUP_MEMBER_METADATA):
            self.add(record_type, group_id, None, member_id)


def group_tombstones(group_id: str, group: ConsumerGroup) -> list[Record]:
    """Every record of the group deleted (Kafka's ConsumerGroup.createGroupTombstoneRecords)."""
    change = _Change()
    for member_id in group.members:
        change.remove_member(group_id, member_id)
    change.add(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, group_id, None)
    change.add(rec.CONSUMER_GROUP_METADATA, group_id, None)
    return change.records


def metadata_hash(topics: Mapping[str, TopicImage], names: set[str]) -> int:
    """A signed 64-bit hash of the subscribed topics' names, ids and sizes; 0 for none.

    Kafka hashes more (racks) with its own function; a different value only
    costs one epoch bump after a move between the two brokers."""
    present = sorted(n for n in names if n in topics)
    if not present:
        return 0
    h = hashlib.blake2b(digest_size=8)
    for name in present:
        t = topics[name]
        h.update(f"{name}\0{t.topic_id}\0{t.num_partitions}\n".encode())
    return int.from_bytes(h.digest(), "big", signed=True)


def _map_store_error(error: ErrorCode) -> ErrorCode:
    """How a failed write reaches a heartbeat (Kafka's CoordinatorRuntime error mapping)."""
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                 ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return error


class ConsumerMembershipManager:
    def __init__(self, ctx: GroupContext) -> None:
        self._ctx = ctx
        self._groups = ctx.groups
        self._topics = ctx.topics
        #: group id -> changes waiting for the one being written (the head runs).
        #: Each with how shutdown answers it (None: it answers nobody).
        self._queues: dict[str, deque[tuple[Callable[[], None], Callable[[], None] | None]]] = {}
        #: (group id, member id) -> the epoch its rebalance timeout was set for.
        self._rebalance_epochs: dict[tuple[str, str], int] = {}

    # ================================================================ config

    @property
    def _session_timeout_ms(self) -> int:
        return self._ctx.config[GROUP_CONSUMER_SESSION_TIMEOUT_MS]

    @property
    def _assignors(self) -> list[str]:
        names: list[str] = self._ctx.config[GROUP_CONSUMER_ASSIGNORS]
        return names

    @property
    def default_assignor(self) -> str:
        """The first of group.consumer.assignors (Kafka's default assignor)."""
        return self._assignors[0]

    # ================================================================ serialising a group's changes

    def _run(self, group_id: str, step: Callable[[], None], on_shutdown: Callable[[], None] | None = None) -> None:
        """Run ``step`` now, or after the group's changes already queued (``on_shutdown``
        answers it if the coordinator stops first).  Every step ends by calling
        ``_release`` once: at once, or when its write is done."""
        queue = self._queues.get(group_id)
        if queue is not None:
            queue.append((step, on_shutdown))
            return
        self._queues[group_id] = deque()
        step()

    def is_changing(self, group_id: str) -> bool:
        """A change of the group is being written (or waits for one): what is in memory is
        about to change.  Kafka's other operations on the group see such a change at once
        (they run after it, on its uncommitted state); here they must not act on an empty
        group that is not going to stay empty, or replace a group the change is applied to."""
        return group_id in self._queues

    def _release(self, group_id: str) -> None:
        """The change being made to the group is done: run the next one."""
        queue = self._queues.get(group_id)
        if queue is None:
            return
        if not queue:
            del self._queues[group_id]
            return
        queue.popleft()[0]()

    def _commit(self, group_id: str, change: _Change, applied: Callable[[ErrorCode], None]) -> None:
        """Write the change, replay it once durable, then ``applied(error)``.  Releases the group."""
        if not change.records:
            applied(ErrorCode.none)
            self._release(group_id)
            return
        op = self._ctx.register(lambda: applied(ErrorCode.not_coordinator))

        def done(error: ErrorCode) -> None:
            if self._ctx.unregister(op):
                if error is ErrorCode.none:
                    self._apply(group_id, change)
                else:
                    log.warning("failed to write the records of consumer group %s: %s", group_id, error.name)
                applied(error)
            self._release(group_id)

        self._ctx.append(self._ctx.partition_for(group_id), change.records, done)

    def _apply(self, group_id: str, change: _Change) -> None:
        group = self._groups.get(group_id)
        if group is None:
            group = GroupMetadata(group_id, self._ctx.now())
            self._groups[group_id] = group
        if change.converts or group.consumer is None:
            group.become_consumer_group(ConsumerGroup(group_id), self._ctx.now())
        consumer = group.consumer
        assert consumer is not None
        for (_, value), key in zip(change.records, change.keys, strict=True):
            if key is None:
                continue
            if isinstance(key, rec.ConsumerGroupKey) and key.record_type == rec.CONSUMER_GROUP_METADATA and value is None:
                self.forget(group)
                group.consumer = None
                return
            consumer.replay(key, value)

    # ================================================================ ConsumerGroupHeartbeat

    def heartbeat(self, req: HeartbeatRequest) -> None:
        error = self._validate(req)
        if error is not None:
            self._ctx.reply(req.callback, error)
            return
        member_id = req.member_id or str(uuid.uuid4())  # v0: the coordinator names a joining member
        self._run(req.group_id, lambda: self._heartbeat(replace(req, member_id=member_id)),
                  lambda: self._ctx.reply(req.callback, HeartbeatResult(ErrorCode.not_coordinator)))

    def _validate(self, req: HeartbeatRequest) -> HeartbeatResult | None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        def invalid(message: str) -> HeartbeatResult:
            return HeartbeatResult(ErrorCode.invalid_request, message)

        if not self._ctx.is_active():
            return HeartbeatResult(ErrorCode.coordinator_not_available)
        epoch = req.member_epoch
        if (req.api_version >= CLIENT_MEMBER_ID_VERSION or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH) \
                and not req.member_id:
            return invalid("MemberId can't be empty.")
        if not req.group_id:
            return invalid("GroupId can't be empty.")
        if req.instance_id == "":
            return invalid("InstanceId can't be empty.")
        if req.rack_id == "":
            return invalid("RackId can't be empty.")
        if epoch == 0:
            if req.rebalance_timeout_ms == -1:
                return invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or req.owned:
                return invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                return invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                return invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            return invalid("MemberEpoch is invalid.")
        if req.server_assignor is not None and req.server_assignor not in self._assignors:
            return HeartbeatResult(ErrorCode.unsupported_assignor,
                                   f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                                   f"{', '.join(self._assignors)}.")
        if req.subscribed_topic_regex:
            try:
                topic_regex.validate(req.subscribed_topic_regex)
            except topic_regex.InvalidRegex as exc:
                return HeartbeatResult(ErrorCode.invalid_regular_expression,
                                       f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid regular "
                                       f"expression: {exc}.")
        return None

    def _heartbeat(self, req: HeartbeatRequest) -> None:
        def answer(result: HeartbeatResult) -> None:
            self._ctx.reply(req.callback, result)

        try:
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                change, result, after = self._prepare_leave(req)
            else:
                change, result, after = self._prepare_heartbeat(req)
        except _Refused as refused:
            answer(HeartbeatResult(refused.error, refused.message))
            self._release(req.group_id)
            return
        except Exception:  # a record that cannot be written (a string over 32767 bytes, say)
            # Kafka's handleOperationException: the operation fails, the group carries on.
            log.exception("consumer group %s: the heartbeat of member %s failed", req.group_id, req.member_id[:200])
            answer(HeartbeatResult(ErrorCode.unknown_server_error))
            self._release(req.group_id)
            return

        def applied(error: ErrorCode) -> None:
            if error is not ErrorCode.none:
                answer(HeartbeatResult(_map_store_error(error)))
                return
            after()
            answer(result)

        self._commit(req.group_id, change, applied)

    def _existing(self, group_id: str) -> ConsumerGroup:
        """Kafka's consumerGroup(groupId), with its messages."""
        group = self._groups.get(group_id)
        if group is None or group.consumer is None:
            raise _Refused(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."
                           if group is not None else f"Group {group_id} not found.")
        return group.consumer

    def _prepare_heartbeat(self, req: HeartbeatRequest) -> tuple[_Change, HeartbeatResult, Callable[[], None]]:
        group_id, member_id, epoch = req.group_id, req.member_id, req.member_epoch
        change = _Change()
        joining = epoch == 0
        holder = self._groups.get(group_id)
        if holder is not None and holder.consumer is not None:
            group = holder.consumer
        elif not joining:
            raise _Refused(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."
                           if holder is not None else f"Consumer group {group_id} not found.")
        elif holder is not None and not holder.is_empty():
            # Kafka moves a non-empty classic group online (group.consumer.migration.policy); not here.
            raise _Refused(ErrorCode.group_id_not_found,
                           f"Cannot upgrade classic group {group_id} to consumer group because online upgrade is "
                           f"not supported by this broker.")
        else:
            group = ConsumerGroup(group_id)
            if holder is not None:
                change.converts = True
                if holder.generation_id > 0:
                    change.add_raw((rec.encode_group_metadata_key(rec.GroupMetadataKey(group_id)), None))
                log.info("converting the empty classic group %s to a consumer group", group_id)

        # The member.
        replaced: ConsumerMember | None = None
        if req.instance_id is None:
            member = self._dynamic_member(group, req, joining)
        else:
            member, replaced = self._static_member(group, req, joining)
        if (member_id not in group.members and (replaced is None)
                and len(group.members) >= self._ctx.config[GROUP_CONSUMER_MAX_SIZE]):
            raise _Refused(ErrorCode.group_max_size_reached,
                           f"The consumer group has reached its maximum capacity of "
                           f"{self._ctx.config[GROUP_CONSUMER_MAX_SIZE]} members.")
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(tuple(req.subscribed_topic_names) if req.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(req.subscribed_topic_regex if req.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            client_id=req.client_id,
            client_host=req.client_host,
        )
        if replaced is not None:
            # Kafka's replaceMember: the new member id takes the old one's place and assignment.
            change.remove_member(group_id, replaced.member_id)
            change.member(group_id, updated)
            change.target(group_id, member_id, group.target.get(replaced.member_id, {}))
            change.current(group_id, updated)
        elif updated.subscription_value() != member.subscription_value() or member_id not in group.members:
            change.member(group_id, updated)
        subscription_changed = (set(updated.subscribed_topic_names) != set(member.subscribed_topic_names)
                                or updated.subscribed_topic_regex != member.subscribed_topic_regex)

        # The group epoch.
        topics = _TopicsNow(self._topics())
        members = dict(group.members)
        if replaced is not None:
            members.pop(replaced.member_id, None)
        members[member_id] = updated
        names = self._subscribed_names(members.values(), topics)
        new_hash = metadata_hash(topics, names)
        group_epoch = group.group_epoch
        if subscription_changed or new_hash != group.metadata_hash:
            group_epoch += 1
            change.add(rec.CONSUMER_GROUP_METADATA, group_id, rec.encode_consumer_group_epoch(group_epoch, new_hash))
            log.info("consumer group %s: group epoch %d", group_id, group_epoch)

        # The target assignment.
        target_epoch = group.assignment_epoch
        targets = dict(group.target)
        if replaced is not None:
            targets[member_id] = targets.pop(replaced.member_id, {})
        if group.assignment_epoch < group_epoch:
            assignor = self._choose_assignor(members.values())
            new_targets = self._assign(assignor, members, targets, topics)
            for mid, assignment in sorted(new_targets.items()):
                if mid not in targets or targets[mid] != assignment:
                    change.target(group_id, mid, assignment)
            now = self._ctx.now()
            change.add(rec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, group_id,
                       rec.encode_target_assignment_epoch(group_epoch, now))
            log.info("consumer group %s: new target assignment for epoch %d by the %s assignor", group_id, group_epoch,
                     assignor)
            targets, target_epoch = new_targets, group_epoch

        # Reconciliation.
        reconciled = updated
        if subscription_changed or not updated.is_reconciled_to(target_epoch):
            try:
                reconciled = reconcile(updated, target_epoch, targets.get(member_id, {}),
                                       self._topic_ids(updated, topics), self._partition_epoch(group, replaced),
                                       req.owned, subscription_changed)
            except FencedMember as exc:
                raise _Refused(ErrorCode.fenced_member_epoch, str(exc)) from None
        if reconciled != updated:
            change.current(group_id, reconciled)

        full = (req.rebalance_timeout_ms != -1 and (req.subscribed_topic_names is not None
                                                     or req.subscribed_topic_regex is not None) and req.owned is not None)
        send_assignment = joining or full or set(_flatten(reconciled.assigned)) != set(_flatten(member.assigned))
        result = HeartbeatResult(
            ErrorCode.none,
            member_id=member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self._ctx.config[GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS],
            assignment=_topic_partitions(reconciled.assigned) if send_assignment else None,
        )

        def after() -> None:
            self._ctx.timers.set(ConsumerSessionDeadline(group_id, member_id), self._ctx.now() + self._session_timeout_ms)
            if replaced is not None:
                self._cancel_member_timers(group_id, replaced.member_id)
            if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                if reconciled != updated:
                    self._set_rebalance_deadline(group_id, reconciled)
            else:
                self._rebalance_epochs.pop((group_id, member_id), None)
                self._ctx.timers.cancel(ConsumerRebalanceDeadline(group_id, member_id))

        return change, result, after

    def _dynamic_member(self, group: ConsumerGroup, req: HeartbeatRequest, joining: bool) -> ConsumerMember:
        member = group.members.get(req.member_id)
        if member is None:
            if not joining:
                raise _Refused(ErrorCode.unknown_member_id,
                               f"Member {req.member_id} is not a member of group {req.group_id}.")
            log.info("consumer group %s: member %s joins", req.group_id, req.member_id)
            return ConsumerMember(req.member_id)
        _check_epoch(member, req)
        return member

    def _static_member(self, group: ConsumerGroup, req: HeartbeatRequest,
                       joining: bool) -> tuple[ConsumerMember, ConsumerMember | None]:
        """The member, and the member it replaces (KIP-345 under KIP-848)."""
        assert req.instance_id is not None
        existing_id = group.static_members.get(req.instance_id)
        existing = None if existing_id is None else group.members.get(existing_id)
        if joining:
            if existing is None:
                return ConsumerMember(req.member_id), None
            if existing.member_id == req.member_id:
                # The same member rejoining with epoch 0 (after being fenced): a fresh start.
                return existing, None
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise _Refused(ErrorCode.unreleased_instance_id,
                               f"Static member {req.member_id} with instance id {req.instance_id} cannot join the "
                               f"group because the instance id is owned by {existing.member_id} member.")
            log.info("consumer group %s: static member %s replaces %s", req.group_id, req.member_id, existing.member_id)
            return replace(existing, member_id=req.member_id, member_epoch=0, previous_member_epoch=0), existing
        member = _static_owner(existing, req)
        _check_epoch(member, req)
        return member, None

    # ---------------------------------------------------------------- leaving

    def _prepare_leave(self, req: HeartbeatRequest) -> tuple[_Change, HeartbeatResult, Callable[[], None]]:
        group = self._existing(req.group_id)
        result = HeartbeatResult(ErrorCode.none, member_id=req.member_id, member_epoch=req.member_epoch)
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise _Refused(ErrorCode.unknown_member_id,
                               f"Member {req.member_id} is not a member of group {req.group_id}.")
        else:
            member_id = group.static_members.get(req.instance_id)
            member = _static_owner(None if member_id is None else group.members.get(member_id), req)
            if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # It keeps its partitions for its return, assigned from epoch 0 to whoever comes back.
                change = _Change()
                leaving = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                                  previous_member_epoch=member.member_epoch, pending_revocation={},
                                  assigned={t: dict.fromkeys(ps, 0) for t, ps in member.assigned.items()})
                change.current(req.group_id, leaving)
                log.info("consumer group %s: static member %s (instance %s) leaves for now", req.group_id,
                         member.member_id, req.instance_id)
                return change, result, lambda: None
        log.info("consumer group %s: member %s leaves", req.group_id, member.member_id)
        change = self._fence(group, member)
        return change, result, lambda: self._cancel_member_timers(req.group_id, member.member_id)

    def _fence(self, group: ConsumerGroup, member: ConsumerMember) -> _Change:
        """Kafka's consumerGroupFenceMember: the member's records deleted, the group epoch bumped."""
        change = _Change()
        change.remove_member(group.group_id, member.member_id)
        rest = [m for m in group.members.values() if m.member_id != member.member_id]
        topics = _TopicsNow(self._topics())
        new_hash = metadata_hash(topics, self._subscribed_names(rest, topics))
        change.add(rec.CONSUMER_GROUP_METADATA, group.group_id,
                   rec.encode_consumer_group_epoch(group.group_epoch + 1, new_hash))
        return change

    def _fence_later(self, group_id: str, member_id: str, reason: str,
                     timer: ConsumerSessionDeadline | ConsumerRebalanceDeadline, epoch: int | None = None) -> None:
        """Fence the member once the group's earlier changes are done, unless ``timer`` was set
        again meanwhile (it heartbeated) or, for a rebalance timeout, the member has left the
        revoking ``epoch``: Kafka's CoordinatorTimerImpl drops the operation of a timer that
        was overridden or cancelled while it waited."""
        def step() -> None:
            holder = self._groups.get(group_id)
            group = None if holder is None else holder.consumer
            member = None if group is None else group.members.get(member_id)
            if group is None or member is None or self._ctx.timers.deadline(timer) is not None or (
                    epoch is not None and (member.member_epoch != epoch
                                           or member.state is not MemberState.UNREVOKED_PARTITIONS)):
                self._release(group_id)
                return
            log.info("consumer group %s: member %s fenced because %s", group_id, member_id, reason)

            def applied(error: ErrorCode) -> None:
                if error is ErrorCode.none:
                    self._cancel_member_timers(group_id, member_id)
                elif error is not ErrorCode.not_coordinator and self._ctx.timers.deadline(timer) is None:
                    # Kafka's CoordinatorTimerImpl reschedules a timer whose write failed.
                    if epoch is not None:
                        self._rebalance_epochs[(group_id, member_id)] = epoch
                    self._ctx.timers.set(timer, self._ctx.now() + TIMER_RETRY_BACKOFF_MS)

            self._commit(group_id, self._fence(group, member), applied)

        self._run(group_id, step)

    # ---------------------------------------------------------------- timers

    def on_session_deadline(self, group_id: str, member_id: str) -> None:
        self._fence_later(group_id, member_id, "its session expired", ConsumerSessionDeadline(group_id, member_id))

    def on_rebalance_deadline(self, group_id: str, member_id: str) -> None:
        epoch = self._rebalance_epochs.pop((group_id, member_id), None)
        if epoch is not None:
            self._fence_later(group_id, member_id, f"it did not revoke its partitions of epoch {epoch} in time",
                              ConsumerRebalanceDeadline(group_id, member_id), epoch)

    def _set_rebalance_deadline(self, group_id: str, member: ConsumerMember) -> None:
        """The member must revoke within its rebalance timeout, from now (Kafka's
        scheduleConsumerGroupRebalanceTimeout)."""
        self._rebalance_epochs[(group_id, member.member_id)] = member.member_epoch
        self._ctx.timers.set(ConsumerRebalanceDeadline(group_id, member.member_id),
                             self._ctx.now() + max(member.rebalance_timeout_ms, 0))

    def _cancel_member_timers(self, group_id: str, member_id: str) -> None:
        self._ctx.timers.cancel(ConsumerSessionDeadline(group_id, member_id))
        self._ctx.timers.cancel(ConsumerRebalanceDeadline(group_id, member_id))
        self._rebalance_epochs.pop((group_id, member_id), None)

    def on_group_loaded(self, group: GroupMetadata) -> None:
        """A group read back from the log: its members' sessions start now, and so do the
        rebalance timeouts of those still revoking (Kafka's onLoaded)."""
        if group.consumer is None:
            return
        deadline = self._ctx.now() + self._session_timeout_ms
        for member_id, member in group.consumer.members.items():
            self._ctx.timers.set(ConsumerSessionDeadline(group.group_id, member_id), deadline)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self._set_rebalance_deadline(group.group_id, member)

    def forget(self, group: GroupMetadata) -> None:
        """The group is gone (deleted, expired, converted): its members' timers with it."""
        if group.consumer is not None:
            for member_id in group.consumer.members:
                self._cancel_member_timers(group.group_id, member_id)

    def shutdown(self) -> None:
        """Heartbeats still waiting for an earlier change of their group are answered
        NOT_COORDINATOR, as the runtime answers those waiting on the store."""
        queues, self._queues = self._queues, {}
        for queue in queues.values():
            for _, on_shutdown in queue:
                if on_shutdown is not None:
                    on_shutdown()
        self._rebalance_epochs.clear()

    # ---------------------------------------------------------------- topics and assignors

    def _subscribed_names(self, members: Iterable[ConsumerMember], topics: _TopicsNow) -> set[str]:
        names: set[str] = set()
        for m in members:
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                names.update(topics.resolve(m.subscribed_topic_regex))
        return names

    def _topic_ids(self, member: ConsumerMember, topics: _TopicsNow) -> frozenset[uuid.UUID]:
        return frozenset(topics[n].topic_id for n in self._subscribed_names([member], topics) if n in topics)

    def _partition_epoch(self, group: ConsumerGroup,
                         replaced: ConsumerMember | None) -> Callable[[uuid.UUID, int], int]:
        if replaced is None:
            return group.partition_epoch
        mine = {(t, p) for t, ps in replaced.assigned.items() for p in ps}

        def epoch(topic_id: uuid.UUID, partition: int) -> int:
            # The replaced static member's partitions pass to its successor.
            return -1 if (topic_id, partition) in mine else group.partition_epoch(topic_id, partition)

        return epoch

    def _choose_assignor(self, members: Iterable[ConsumerMember]) -> str:
        return preferred_assignor(members) or self.default_assignor

    def _assign(self, assignor: str, members: Mapping[str, ConsumerMember],
                targets: Mapping[str, Mapping[uuid.UUID, frozenset[int]]],
                topics: _TopicsNow) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
        specs = {
            mid: MemberSpec(subscribed_topic_ids=self._topic_ids(m, topics),
                            assigned={t: frozenset(ps) for t, ps in targets.get(mid, {}).items()},
                            rack_id=m.rack_id, instance_id=m.instance_id)
            for mid, m in members.items()
        }
        wanted: set[uuid.UUID] = set().union(*(s.subscribed_topic_ids for s in specs.values())) if specs else set()
        topic_specs = {t.topic_id: TopicSpec(name, t.num_partitions) for name, t in topics.items() if t.topic_id in wanted}
        try:
            result = ASSIGNORS[assignor].assign(specs, topic_specs)
        except PartitionAssignorError as exc:
            raise _Refused(ErrorCode.unknown_server_error,
                           f"Failed to compute a new target assignment: {exc}") from None
        return {mid: {t: frozenset(ps) for t, ps in result.get(mid, {}).items() if ps} for mid in members}


class _TopicsNow(Mapping[str, TopicImage]):
    """The broker's topics for one change, each regular expression resolved once against
    them (every member's subscription is resolved at each heartbeat: members sharing a
    pattern made it members x topics matches)."""

    def __init__(self, topics: Mapping[str, TopicImage]) -> None:
        self._topics = topics
        self._resolved: dict[str, frozenset[str]] = {}

    def __getitem__(self, name: str) -> TopicImage:
        return self._topics[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._topics)

    def __len__(self) -> int:
        return len(self._topics)

    def resolve(self, regex: str) -> frozenset[str]:
        """The topics ``regex`` matches whole, internal topics left out."""
        found = self._resolved.get(regex)
        if found is None:
            found = self._resolved[regex] = frozenset(
                n for n in self._topics if n not in INTERNAL_TOPICS and topic_regex.matches(regex, n))
        return found


def _static_owner(owner: ConsumerMember | None, req: HeartbeatRequest) -> ConsumerMember:
    """The member holding the request's instance id, if it is the request's member (Kafka's
    throwIfStaticMemberIsUnknown and throwIfInstanceIdIsFenced)."""
    if owner is None:
        raise _Refused(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
    if owner.member_id != req.member_id:
        raise _Refused(ErrorCode.fenced_instance_id,
                       f"Static member {req.member_id} with instance id {req.instance_id} was fenced by member "
                       f"{owner.member_id}.")
    return owner


def _check_epoch(member: ConsumerMember, req: HeartbeatRequest) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid."""
    epoch = req.member_epoch
    if epoch == 0:
        return
    if epoch > member.member_epoch:
        raise _Refused(ErrorCode.fenced_member_epoch,
                       f"The consumer group member has a greater member epoch ({epoch}) than the one known by the "
                       f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and "
                       f"rejoin.")
    if epoch < member.member_epoch:
        owned = {(t, p) for t, ps in (req.owned or ()) for p in ps}
        subset = req.owned is not None and all(p in member.assigned.get(t, {}) for t, p in owned)
        if epoch != member.previous_member_epoch or not subset:
            raise _Refused(ErrorCode.fenced_member_epoch,
                           f"The consumer group member has a smaller member epoch ({epoch}) than the one known by "
                           f"the group coordinator ({member.member_epoch}). The member must abandon all its "
                           f"partitions and rejoin.")


def _flatten(assignment: Mapping[uuid.UUID, Mapping[int, int]]) -> list[tuple[uuid.UUID, int]]:
    return [(t, p) for t, ps in assignment.items() for p in ps]


def _topic_partitions(assignment: Mapping[uuid.UUID, Mapping[int, int]]) -> TopicPartitions:
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(assignment.items()) if ps)
