"""Group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and rebalances.

Theory of operation
-------------------
The membership half of Kafka's GroupCoordinator (GroupCoordinator.scala of
Kafka 3.x; the classic-group part of GroupMetadataManager in Kafka 4).  The
coordinator (``coordinator.py``) calls it inside its API guard, and lends it
the groups, the timers and the reply/append plumbing (``context.py``).
Group state lives in ``metadata.GroupMetadata``; this module decides when it
changes and answers the members.

A JoinGroup travels the join path as one ``JoinRequest`` value.  Requests
that cannot be answered at once are parked on their member as callbacks:

* JoinGroup waits until the *join phase* ends: every known member has
  rejoined, or the rebalance timeout (the largest of the members') expires
  -- members that did not rejoin are then dropped.  The first rebalance of
  an empty group waits ``group.initial.rebalance.delay.ms`` more for others
  to arrive, extended while members keep coming, capped by the rebalance
  timeout (Kafka's InitialDelayedJoin).
* SyncGroup waits until the leader's assignment has been persisted (a group
  metadata record, ``_store_group``).

Static members (KIP-345) keep their place across restarts under their
``group.instance.id``; a member without an id may be handed one with
MEMBER_ID_REQUIRED and made to come back with it (KIP-394).

Timers (keys of ``context.py``, fired by the coordinator runtime's ``tick``,
see ``coordinator/runtime.py``; each calls an ``on_*_deadline`` method):

* ``HeartbeatDeadline``      a member's session: no heartbeat (or
  join/sync/commit) before it, the member is removed and the group
  rebalances.  Members parked in a join or sync are not expired by it (the
  rebalance protects them); a *new* member's join times out after
  NEW_MEMBER_JOIN_TIMEOUT_MS instead.
* ``PendingMemberDeadline``  a member id handed out with MEMBER_ID_REQUIRED
  (KIP-394) is forgotten if not used within the session timeout.
* ``JoinDeadline``           the end of the join phase (rebalance timeout, or
  the initial delay).
* ``SyncDeadline``           members that received a join response but send
  no SyncGroup within the rebalance timeout are removed (KAFKA-12890).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ...config import GROUP_INITIAL_REBALANCE_DELAY_MS, GROUP_MAX_SESSION_TIMEOUT_MS, GROUP_MAX_SIZE, GROUP_MIN_SESSION_TIMEOUT_MS
from ...protocol.errors import ErrorCode
from . import log_records as rec
from .consumer_membership import group_tombstones
from .context import GroupContext, HeartbeatDeadline, JoinDeadline, PendingMemberDeadline, SyncDeadline
from .metadata import GroupMetadata, GroupState, MemberMetadata
from .types import JoinResult, LeaveMember, LeaveResult, SyncResult

log = logging.getLogger(__name__)

#: A new member's JoinGroup is dropped if the rebalance has not completed
#: within this time (Kafka's GroupCoordinator.NewMemberJoinTimeoutMs): a
#: client that gave up and retried must not leave a defunct member behind.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """One JoinGroup as the join path passes it along (the fields of Kafka's
    JoinGroupRequest, and where the answer goes)."""

    group_id: str
    #: "" for a member that has no id yet.
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    #: (protocol name, metadata) in the member's order of preference.
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    #: JoinGroup v4+ (KIP-394): an unknown member gets MEMBER_ID_REQUIRED first.
    require_known_member_id: bool
    client_id: str
    client_host: str
    #: The client's reason (JoinGroup v8+, KIP-800), "not provided" if none.
    reason: str
    callback: Callable[[JoinResult], None]
    #: JoinGroup v9+ (KIP-814), see MembershipManager._update_static_member_and_rebalance.
    supports_skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncRequest:
    """One SyncGroup (the fields of Kafka's SyncGroupRequest, and where the answer goes)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    #: SyncGroup v5+ echoes what the join response said; None before.
    protocol_type: str | None
    protocol_name: str | None
    #: member id -> assignment; only the leader sends them.
    assignments: dict[str, bytes]
    callback: Callable[[SyncResult], None]


@dataclass(frozen=True, slots=True)
class _DelayedJoin:
    """The pending end of a join phase (Kafka's DelayedJoin / InitialDelayedJoin)."""

    initial: bool
    delay_ms: int
    remaining_ms: int = 0


def _validate_current_member(group: GroupMetadata, member_id: str, instance_id: str | None) -> ErrorCode | None:
    """The member exists and, for a static member, holds its instance id (KIP-345)."""
    if instance_id is not None:
        current = group.current_static_member_id(instance_id)
        if current is None:
            return ErrorCode.unknown_member_id
        if current != member_id:
            log.info("member %s of group %s is fenced: instance %s is held by %s",
                     member_id, group.group_id, instance_id, current)
            return ErrorCode.fenced_instance_id
        return None
    if not group.has(member_id):
        return ErrorCode.unknown_member_id
    return None


def validate_member_generation(group: GroupMetadata, generation_id: int, member_id: str,
                               instance_id: str | None) -> ErrorCode | None:
    """A current member of the current generation: SyncGroup, Heartbeat, and
    the commits that name a member (OffsetCommit; TxnOffsetCommit v3+, KIP-447)."""
    error = _validate_current_member(group, member_id, instance_id)
    if error is not None:
        return error
    if generation_id != group.generation_id:
        return ErrorCode.illegal_generation
    return None


def _map_store_group_error(error: ErrorCode) -> ErrorCode:
    """How Kafka's storeGroup reports a failed append of group metadata."""
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error is ErrorCode.request_timed_out:
        return ErrorCode.rebalance_in_progress
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return error


class MembershipManager:
    def __init__(self, ctx: GroupContext, member_id_suffix: Callable[[], str],
                 consumer_changing: Callable[[str], bool] = lambda _: False) -> None:
        """``consumer_changing(group_id)``: a KIP-848 change of the group is being written."""
        self._ctx = ctx
        self._consumer_changing = consumer_changing
        self._groups = ctx.groups
        self._timers = ctx.timers
        self._reply = ctx.reply
        self._new_suffix = member_id_suffix
        self._delayed_joins: dict[str, _DelayedJoin] = {}
        self._sync_generations: dict[str, int] = {}

    # ---------------------------------------------------------------- config

    @property
    def _max_size(self) -> int:
        return self._ctx.config[GROUP_MAX_SIZE]

    @property
    def _initial_delay_ms(self) -> int:
        return self._ctx.config[GROUP_INITIAL_REBALANCE_DELAY_MS]

    # ================================================================ JoinGroup

    def join_group(self, req: JoinRequest) -> None:
        error = self._ctx.validate_group_status(req.group_id, allow_empty_id=False)
        if error is not None:
            self._reply(req.callback, JoinResult(error, member_id=req.member_id))
            return
        config = self._ctx.config
        if not config[GROUP_MIN_SESSION_TIMEOUT_MS] <= req.session_timeout_ms <= config[GROUP_MAX_SESSION_TIMEOUT_MS]:
            self._reply(req.callback, JoinResult(ErrorCode.invalid_session_timeout, member_id=req.member_id))
            return
        is_unknown_member = req.member_id == ""
        if self._consumer_changing(req.group_id):
            # A consumer-protocol member is joining (or changing) the group: as Kafka, which
            # sees that change before this join, the group is a consumer group with members.
            self._reply(req.callback, JoinResult(ErrorCode.inconsistent_group_protocol, member_id=req.member_id))
            return
        group = self._groups.get(req.group_id)
        if group is None:
            # Only a member without an id may create a group.
            if not is_unknown_member:
                self._reply(req.callback, JoinResult(ErrorCode.unknown_member_id, member_id=req.member_id))
                return
            group = GroupMetadata(req.group_id, self._ctx.now())
            self._groups[req.group_id] = group
        elif group.consumer is not None:
            if group.consumer.members:
                # A KIP-848 group with members: Kafka lets classic members join it online
                # (group.consumer.migration.policy); this broker does not.
                self._reply(req.callback, JoinResult(ErrorCode.inconsistent_group_protocol, member_id=req.member_id))
                return
            self._convert_to_classic(group)

        if not self._accept_joining_member(group, req.member_id):
            self._remove_member_silently(group, req.member_id)
            self._reply(req.callback, JoinResult(ErrorCode.group_max_size_reached, member_id=""))
        elif is_unknown_member:
            self._new_member_join(group, req)
        else:
            self._current_member_join(group, req)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _convert_to_classic(self, group: GroupMetadata) -> None:
        """An empty KIP-848 group turns classic (Kafka converts it the same way): its
        records get tombstones, its offsets stay."""
        assert group.consumer is not None
        records = group_tombstones(group.group_id, group.consumer)
        log.info("converting the empty consumer group %s to a classic group", group.group_id)
        group.become_classic_group(self._ctx.now())

        def done(error: ErrorCode) -> None:
            if error is not ErrorCode.none:
                log.warning("failed to write the tombstones of consumer group %s: %s", group.group_id, error.name)

        self._ctx.append(self._ctx.partition_for(group.group_id), records, done)

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        """Kafka's acceptJoiningMember (group.max.size)."""
        state = group.state
        if state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if state is GroupState.PREPARING_REBALANCE:
            # Counting members that already rejoined lets the max size shrink:
            # the last ones to rejoin are turned away.
            return (group.has(member_id) and group.get(member_id).is_awaiting_join) or group.num_awaiting_join < self._max_size
        return group.has(member_id) or group.size < self._max_size

    def _new_member_join(self, group: GroupMetadata, req: JoinRequest) -> None:
        if group.state is GroupState.DEAD:
            self._reply(req.callback, JoinResult(ErrorCode.coordinator_not_available, member_id=""))
            return
        if not group.supports_protocols(req.protocol_type, [name for name, _ in req.protocols]):
            self._reply(req.callback, JoinResult(ErrorCode.inconsistent_group_protocol, member_id=""))
            return
        instance_id = req.group_instance_id
        new_member_id = f"{instance_id if instance_id is not None else req.client_id}-{self._new_suffix()}"
        if instance_id is not None:
            old_member_id = group.current_static_member_id(instance_id)
            if old_member_id is not None:
                log.info("static member %s of group %s rejoins with an unknown member id: replacing %s with %s",
                         instance_id, group.group_id, old_member_id, new_member_id)
                self._update_static_member_and_rebalance(group, req, instance_id, old_member_id, new_member_id)
            else:
                self._add_member_and_rebalance(group, req, new_member_id)
        elif req.require_known_member_id:
            # KIP-394: hand out the id and make the client come back with it,
            # so a client that retries a timed-out join does not leave ghosts.
            group.add_pending_member(new_member_id)
            self._timers.set(PendingMemberDeadline(group.group_id, new_member_id), self._ctx.now() + req.session_timeout_ms)
            self._reply(req.callback, JoinResult(ErrorCode.member_id_required, member_id=new_member_id))
        else:
            self._add_member_and_rebalance(group, req, new_member_id)

    def _current_member_join(self, group: GroupMetadata, req: JoinRequest) -> None:
        member_id = req.member_id
        if group.state is GroupState.DEAD:
            self._reply(req.callback, JoinResult(ErrorCode.coordinator_not_available, member_id=member_id))
            return
        if not group.supports_protocols(req.protocol_type, [name for name, _ in req.protocols]):
            self._reply(req.callback, JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id))
            return
        if group.is_pending_member(member_id):
            if req.group_instance_id is not None:
                # Pending ids are only handed to dynamic members; Kafka fails
                # such a request with an internal error.
                self._reply(req.callback, JoinResult(ErrorCode.unknown_server_error, member_id=member_id))
                return
            self._timers.cancel(PendingMemberDeadline(group.group_id, member_id))
            self._add_member_and_rebalance(group, req, member_id)
            return
        error = _validate_current_member(group, member_id, req.group_instance_id)
        if error is not None:
            self._reply(req.callback, JoinResult(error, member_id=member_id))
            return
        member = group.get(member_id)
        state = group.state
        reason = req.reason
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(
                group, member, req, f"member {member_id} joining during {state}; client reason: {reason}")
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(req.protocols):
                # The member probably lost the join response: send it again.
                self._reply(req.callback, self._join_result_for(group, member_id))
            else:
                self._update_member_and_rebalance(
                    group, member, req, f"member {member_id} updating metadata during {state}; client reason: {reason}")
        elif state is GroupState.STABLE:
            if group.is_leader(member_id):
                # A leader's join forces a rebalance: it is how it reacts to
                # changes that do not show in its metadata (new partitions...).
                self._update_member_and_rebalance(group, member, req, f"leader {member_id} re-joining; client reason: {reason}")
            elif not member.matches(req.protocols):
                self._update_member_and_rebalance(
                    group, member, req, f"member {member_id} updating metadata; client reason: {reason}")
            else:
                self._reply(req.callback, self._join_result_for(group, member_id, with_members=False))
        else:
            log.warning("member %s rejoins group %s in unexpected state %s", member_id, group.group_id, state)
            self._reply(req.callback, JoinResult(ErrorCode.unknown_member_id, member_id=member_id))

    def _join_result_for(self, group: GroupMetadata, member_id: str, with_members: bool = True,
                         leader: str | None = None, skip_assignment: bool = False) -> JoinResult:
        """A successful join response for the current generation (members only for the leader)."""
        members = group.current_member_metadata() if with_members and group.is_leader(member_id) else []
        return JoinResult(
            ErrorCode.none,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=(group.leader_id if leader is None else leader) or "",
            member_id=member_id,
            members=members,
            skip_assignment=skip_assignment,
        )

    def _add_member_and_rebalance(self, group: GroupMetadata, req: JoinRequest, member_id: str) -> None:
        member = MemberMetadata(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=list(req.protocols),
            is_new=True,
        )
        # Lets the initial rebalance of a brand-new group wait a bit longer.
        if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, req.callback)
        # The session timeout does not protect a new member's join (it has no
        # id to heartbeat with); the join itself times out instead.
        self.schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(
            group, f"adding new member {member_id} with group instance id {req.group_instance_id}; client reason: {req.reason}"
        )

    def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata, req: JoinRequest, reason: str) -> None:
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, req.callback)
        self._maybe_prepare_rebalance(group, reason)

    def _update_static_member_and_rebalance(
        self, group: GroupMetadata, req: JoinRequest, instance_id: str, old_member_id: str, new_member_id: str
    ) -> None:
        """A known static member restarted (KIP-345): it takes over its old
        place under a new member id; the old id is fenced."""
        current_leader = group.leader_id
        self._timers.cancel(HeartbeatDeadline(group.group_id, old_member_id))
        member, fenced_joins, fenced_syncs = group.replace_static_member(instance_id, old_member_id, new_member_id)
        for cb in fenced_joins:
            self._reply(cb, JoinResult(ErrorCode.fenced_instance_id, member_id=old_member_id))
        for sync_cb in fenced_syncs:
            self._reply(sync_cb, SyncResult(ErrorCode.fenced_instance_id))
        self.schedule_heartbeat(group, member)
        old_protocols = member.protocols
        old_rebalance_timeout = member.rebalance_timeout_ms
        old_session_timeout = member.session_timeout_ms
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, req.callback)

        state = group.state
        if state is GroupState.STABLE:
            # No rebalance if the group's protocol would stay the same: persist
            # the new member id and hand back the current generation.
            if group.select_protocol() == group.protocol_name:
                generation = group.generation_id
                assignment = {m.member_id: m.assignment for m in group.members.values()}

                def done(error: ErrorCode) -> None:
                    if not self._unchanged(group, GroupState.STABLE, generation) or group.members.get(new_member_id) is not member:
                        return  # the group moved on; whoever moved it answers the member
                    if error is not ErrorCode.none:
                        error = _map_store_group_error(error)
                        log.warning("failed to persist the new member id of static member %s of group %s: %s",
                                    instance_id, group.group_id, error.name)
                        waiting = group.take_join_callbacks(member)
                        group.update_member(member, old_protocols, old_rebalance_timeout, old_session_timeout, None)
                        self._timers.cancel(HeartbeatDeadline(group.group_id, new_member_id))
                        old, more_joins, more_syncs = group.replace_static_member(instance_id, new_member_id, old_member_id)
                        self.schedule_heartbeat(group, old)
                        result = JoinResult(error, generation_id=group.generation_id, protocol_type=group.protocol_type,
                                            protocol_name=group.protocol_name, leader=current_leader or "", member_id="")
                        for cb in waiting + more_joins:
                            self._reply(cb, result)
                        for sync_cb in more_syncs:
                            self._reply(sync_cb, SyncResult(error))
                    elif req.supports_skip_assignment:
                        # KIP-814 (JoinGroup v9+): a returning static leader is
                        # told it leads but must not run the assignor again.
                        is_leader = group.is_leader(new_member_id)
                        result = self._join_result_for(group, new_member_id, with_members=is_leader,
                                                       skip_assignment=is_leader)
                        for cb in group.take_join_callbacks(member):
                            self._reply(cb, result)
                    else:
                        # Before v9: answer with the *old* leader id, so that a
                        # returning leader does not think it leads and does not
                        # compute an assignment a Stable group would ignore.
                        result = self._join_result_for(group, new_member_id, with_members=False,
                                                       leader=current_leader or "")
                        for cb in group.take_join_callbacks(member):
                            self._reply(cb, result)

                self._store_group(group, assignment, done)
            else:
                self._maybe_prepare_rebalance(
                    group, f"group's protocol would change: static member {new_member_id} ({instance_id}) "
                           f"joined with other protocols; client reason: {req.reason}")
        elif state is GroupState.COMPLETING_REBALANCE:
            # The leader may be computing an assignment for the old member id:
            # start over so the new id gets one.
            self._prepare_rebalance(
                group, f"updating metadata of static member {new_member_id} ({instance_id}); client reason: {req.reason}")
        elif state is GroupState.PREPARING_REBALANCE:
            pass
        else:
            raise RuntimeError(f"group {group.group_id} is {state} while static member {instance_id} rejoins")

    # ---------------------------------------------------------------- rebalance

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        # Members waiting for an assignment must rejoin instead.
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._remove_sync_expiration(group)
        now = self._ctx.now()
        if group.state is GroupState.EMPTY:
            delay = self._initial_delay_ms
            op = _DelayedJoin(initial=True, delay_ms=delay, remaining_ms=max(group.rebalance_timeout_ms - delay, 0))
        else:
            op = _DelayedJoin(initial=False, delay_ms=group.rebalance_timeout_ms)
        group.transition_to(GroupState.PREPARING_REBALANCE, now)
        log.info("preparing to rebalance group %s with old generation %d (__consumer_offsets-%d) (reason: %s)",
                 group.group_id, group.generation_id, self._ctx.partition_for(group.group_id), reason)
        self._delayed_joins[group.group_id] = op
        self._timers.set(JoinDeadline(group.group_id), now + op.delay_ms)
        self._try_complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        """Finish the join phase early once everybody is in (not during the initial delay)."""
        op = self._delayed_joins.get(group.group_id)
        if op is None or op.initial:
            return
        if group.has_all_members_joined():
            self._complete_join(group)

    def on_join_deadline(self, group_id: str) -> None:
        group = self._groups.get(group_id)
        op = self._delayed_joins.get(group_id)
        if group is None or op is None:
            return
        if op.initial and group.new_member_added and op.remaining_ms != 0:
            # Kafka's InitialDelayedJoin: someone arrived during the delay, wait again.
            group.new_member_added = False
            delay = min(self._initial_delay_ms, op.remaining_ms)
            remaining = max(op.remaining_ms - op.delay_ms, 0)
            self._delayed_joins[group_id] = _DelayedJoin(initial=True, delay_ms=delay, remaining_ms=remaining)
            self._timers.set(JoinDeadline(group_id), self._ctx.now() + delay)
            return
        self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        """Kafka's onCompleteJoin: the join phase is over."""
        group_id = group.group_id
        self._delayed_joins.pop(group_id, None)
        self._timers.cancel(JoinDeadline(group_id))
        # Dynamic members that did not rejoin in time are out.  Static members
        # stay (KIP-345): they are expected back under the same instance id.
        gone = [m for m in group.not_yet_rejoined_members() if not m.is_static]
        if gone:
            log.info("group %s removed dynamic members that did not rejoin: %s", group_id, [m.member_id for m in gone])
            for member in gone:
                self._remove_member_silently(group, member.member_id)
        if group.state is GroupState.DEAD:
            return
        now = self._ctx.now()
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined are left: wait for
            # them (or for their sessions to expire) another rebalance timeout.
            log.error("group %s could not complete rebalance because no members rejoined", group_id)
            op = _DelayedJoin(initial=False, delay_ms=group.rebalance_timeout_ms)
            self._delayed_joins[group_id] = op
            self._timers.set(JoinDeadline(group_id), now + op.delay_ms)
            return
        group.init_next_generation(now)
        if group.state is GroupState.EMPTY:
            log.info("group %s with generation %d is now empty", group_id, group.generation_id)

            def done(error: ErrorCode) -> None:
                # Harmless if lost: an empty generation has no member to mislead.
                if error is not ErrorCode.none:
                    log.warning("failed to write empty metadata for group %s: %s", group_id, error.name)

            self._store_group(group, {}, done)
            return
        log.info("stabilized group %s generation %d with %d members", group_id, group.generation_id, group.size)
        for member in group.members.values():
            result = self._join_result_for(group, member.member_id)
            for cb in group.take_join_callbacks(member):
                self._reply(cb, result)
            self.schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._sync_generations[group_id] = group.generation_id
        self._timers.set(SyncDeadline(group_id), now + group.rebalance_timeout_ms)

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.pending_sync_members.clear()
        self._sync_generations.pop(group.group_id, None)
        self._timers.cancel(SyncDeadline(group.group_id))

    def on_sync_deadline(self, group_id: str) -> None:
        """Kafka's onExpirePendingSync: drop members that never sent SyncGroup."""
        group = self._groups.get(group_id)
        generation = self._sync_generations.pop(group_id, None)
        if group is None or generation != group.generation_id:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) or not group.pending_sync_members:
            return
        laggards = sorted(group.pending_sync_members)
        for member_id in laggards:
            self._remove_member_silently(group, member_id)
        log.info("group %s removed members that did not send SyncGroup in time: %s", group_id, laggards)
        self._prepare_rebalance(group, f"removing {laggards} on pending sync request expiration")

    # ---------------------------------------------------------------- members leaving

    def _remove_member_silently(self, group: GroupMetadata, member_id: str) -> None:
        """Forget a member (or pending member id) and its timers; any request
        it still has parked is answered UNKNOWN_MEMBER_ID."""
        self._timers.cancel(HeartbeatDeadline(group.group_id, member_id))
        self._timers.cancel(PendingMemberDeadline(group.group_id, member_id))
        member = group.remove(member_id)
        if member is None:
            return
        for cb in group.take_join_callbacks(member):
            self._reply(cb, JoinResult(ErrorCode.unknown_member_id, member_id=""))
        for sync_cb in group.take_sync_callbacks(member):
            self._reply(sync_cb, SyncResult(ErrorCode.unknown_member_id))

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        # A new member may time out while its JoinGroup is parked: answering
        # UNKNOWN_MEMBER_ID makes a still-alive client join again.
        self._remove_member_silently(group, member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _remove_pending_member_and_update_group(self, group: GroupMetadata, member_id: str) -> None:
        self._remove_member_silently(group, member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None) -> None:
        """Reset the member's session: it must show signs of life before the deadline."""
        deadline = self._ctx.now() + (member.session_timeout_ms if timeout_ms is None else timeout_ms)
        member.session_deadline_ms = deadline
        self._timers.set(HeartbeatDeadline(group.group_id, member.member_id), deadline)

    def on_heartbeat_deadline(self, group_id: str, member_id: str) -> None:
        group = self._groups.get(group_id)
        if group is None:
            return
        member = group.members.get(member_id)
        if member is None:
            return
        member.session_deadline_ms = None
        # Members parked in a join or sync count as alive (the rebalance, not
        # the session, bounds their wait) -- except new members.
        if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
            return
        log.info("member %s in group %s has failed (session expired), removing it", member_id, group_id)
        self._remove_member_and_update_group(group, member, f"removing member {member_id} on heartbeat expiration")

    def on_pending_member_deadline(self, group_id: str, member_id: str) -> None:
        group = self._groups.get(group_id)
        if group is None or not group.is_pending_member(member_id):
            return
        log.info("pending member %s of group %s removed after session timeout", member_id, group_id)
        self._remove_pending_member_and_update_group(group, member_id)

    # ================================================================ SyncGroup

    def sync_group(self, req: SyncRequest) -> None:
        error = self._ctx.validate_group_status(req.group_id, allow_empty_id=False)
        if error is not None:
            self._reply(req.callback, SyncResult(error))
            return
        group = self._groups.get(req.group_id)
        if group is None:
            self._reply(req.callback, SyncResult(ErrorCode.unknown_member_id))
            return
        error = self._validate_sync(group, req)
        if error is not None:
            self._reply(req.callback, SyncResult(error))
            return
        member_id = req.member_id
        state = group.state
        if state is GroupState.EMPTY:
            self._reply(req.callback, SyncResult(ErrorCode.unknown_member_id))
        elif state is GroupState.PREPARING_REBALANCE:
            self._reply(req.callback, SyncResult(ErrorCode.rebalance_in_progress))
        elif state is GroupState.COMPLETING_REBALANCE:
            member = group.get(member_id)
            group.add_sync_callback(member, req.callback)
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                self._on_leader_sync(group, member_id, req.assignments)
        elif state is GroupState.STABLE:
            member = group.get(member_id)
            self._remove_pending_sync_member(group, member_id)
            self._reply(req.callback, SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment))
            self.schedule_heartbeat(group, member)
        else:
            raise RuntimeError(f"sync for group {req.group_id} in unexpected state {state}")

    def _validate_sync(self, group: GroupMetadata, req: SyncRequest) -> ErrorCode | None:
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = validate_member_generation(group, req.generation_id, req.member_id, req.group_instance_id)
        if error is not None:
            return error
        # SyncGroup v5+ echoes what the join response said.
        if req.protocol_type is not None and group.protocol_type != req.protocol_type:
            return ErrorCode.inconsistent_group_protocol
        if req.protocol_name is not None and group.protocol_name != req.protocol_name:
            return ErrorCode.inconsistent_group_protocol
        return None

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._sync_generations.pop(group.group_id, None)
            self._timers.cancel(SyncDeadline(group.group_id))

    def _on_leader_sync(self, group: GroupMetadata, leader_id: str, assignments: dict[str, bytes]) -> None:
        missing = [m for m in group.members if m not in assignments]
        if missing:
            log.warning("setting empty assignments for members %s of group %s generation %d",
                        missing, group.group_id, group.generation_id)
        assignment = {m: bytes(assignments.get(m, b"")) for m in group.members}
        generation = group.generation_id
        log.info("assignment received from leader %s for group %s generation %d (%d members)",
                 leader_id, group.group_id, generation, group.size)

        def done(error: ErrorCode) -> None:
            # Another member may have joined (or left) while the write was in
            # flight: only the same generation, still completing, may go Stable.
            if not self._unchanged(group, GroupState.COMPLETING_REBALANCE, generation):
                return
            if error is not ErrorCode.none:
                self._reset_and_propagate_assignment_error(group, _map_store_group_error(error))
                self._maybe_prepare_rebalance(
                    group, f"error {error.name} when storing group assignment during SyncGroup (member {leader_id})")
            else:
                for member in group.members.values():
                    member.assignment = assignment.get(member.member_id, b"")
                self._propagate_assignment(group, ErrorCode.none)
                group.transition_to(GroupState.STABLE, self._ctx.now())

        self._store_group(group, assignment, done)

    def _unchanged(self, group: GroupMetadata, state: GroupState, generation: int) -> bool:
        """Whether a group metadata write may still take effect when it is
        acknowledged: the coordinator is up, and the group is the same one, in
        the same state and generation as when it was written."""
        return (
            self._ctx.is_active()
            and self._groups.get(group.group_id) is group
            and group.state is state
            and group.generation_id == generation
        )

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        ok = error is ErrorCode.none
        for member in group.members.values():
            callbacks = group.take_sync_callbacks(member)
            if not callbacks:
                continue
            result = (
                SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment)
                if ok
                else SyncResult(error)
            )
            for cb in callbacks:
                self._reply(cb, result)
            # The session clock restarts once the member has its answer.
            self.schedule_heartbeat(group, member)

    def _store_group(self, group: GroupMetadata, assignment: dict[str, bytes], done: Callable[[ErrorCode], None]) -> None:
        """Append the group metadata record (members with the given assignment)."""
        protocol = group.protocol_name
        members = []
        for m in group.members.values():
            if protocol is None:
                raise RuntimeError(f"writing non-empty group {group.group_id} with no protocol")
            members.append(
                rec.MemberMetadataValue(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=m.metadata(protocol),
                    assignment=assignment[m.member_id],
                )
            )
        value = rec.GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=protocol,
            leader=group.leader_id,
            current_state_timestamp_ms=(
                group.current_state_timestamp_ms if group.current_state_timestamp_ms is not None else -1
            ),
            members=tuple(members),
        )
        key = rec.encode_group_metadata_key(rec.GroupMetadataKey(group.group_id))
        self._ctx.append(self._ctx.partition_for(group.group_id), [(key, rec.encode_group_metadata_value(value))], done)

    # ================================================================ Heartbeat

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        error = self._ctx.validate_group_status(group_id, allow_empty_id=False)
        if error is not None:
            return error
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = validate_member_generation(group, generation_id, member_id, group_instance_id)
        if error is not None:
            return error
        state = group.state
        if state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        self.schedule_heartbeat(group, group.get(member_id))
        if state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        # CompletingRebalance: a member may heartbeat between its join
        # response and its sync; treat it as a normal heartbeat.
        return ErrorCode.none

    # ================================================================ LeaveGroup

    def leave_group(self, group_id: str, members: list[LeaveMember], reason: str | None = None) -> LeaveResult:
        error = self._ctx.validate_group_status(group_id, allow_empty_id=False)
        if error is not None:
            return LeaveResult(error, [])
        group = self._groups.get(group_id)
        if group is None:
            return LeaveResult(ErrorCode.none, [(m, ErrorCode.unknown_member_id) for m in members])
        if group.state is GroupState.DEAD:
            return LeaveResult(ErrorCode.coordinator_not_available, [])
        why = reason or "not provided"
        results: list[tuple[LeaveMember, ErrorCode]] = []
        for leaving in members:
            results.append((leaving, self._leave_one(group, leaving, why)))
        return LeaveResult(ErrorCode.none, results)

    def _leave_one(self, group: GroupMetadata, leaving: LeaveMember, reason: str) -> ErrorCode:
        member_id = leaving.member_id
        if member_id == "":
            # Administrative removal by group.instance.id (KIP-345).
            current = (
                group.current_static_member_id(leaving.group_instance_id)
                if leaving.group_instance_id is not None
                else None
            )
            if current is None:
                return ErrorCode.unknown_member_id
            self._remove_current_member(group, current, reason)
            return ErrorCode.none
        if group.is_pending_member(member_id):
            self._remove_pending_member_and_update_group(group, member_id)
            log.info("pending member %s has left group %s", member_id, group.group_id)
            return ErrorCode.none
        error = _validate_current_member(group, member_id, leaving.group_instance_id)
        if error is not None:
            return error
        self._remove_current_member(group, member_id, reason)
        return ErrorCode.none

    def _remove_current_member(self, group: GroupMetadata, member_id: str, reason: str) -> None:
        member = group.get(member_id)
        log.info("member %s has left group %s through LeaveGroup; client reason: %s", member_id, group.group_id, reason)
        self._remove_member_and_update_group(
            group, member, f"removing member {member_id} on LeaveGroup; client reason: {reason}")

    # ================================================================ loading, dropping, shutdown

    def on_group_loaded(self, group: GroupMetadata) -> None:
        """Kafka's onGroupLoaded: a group read back from the log starts its
        members' sessions (and rebalances if it is over group.max.size)."""
        if group.size > self._max_size:
            self._prepare_rebalance(group, f"freshly-loaded group is over capacity ({self._max_size})")
        for member in group.members.values():
            self.schedule_heartbeat(group, member)

    def forget_group(self, group: GroupMetadata) -> None:
        """The group is gone: its join phase, sync deadline and sessions with it."""
        group_id = group.group_id
        self._delayed_joins.pop(group_id, None)
        self._timers.cancel(JoinDeadline(group_id))
        self._sync_generations.pop(group_id, None)
        self._timers.cancel(SyncDeadline(group_id))
        for member_id in list(group.members) + list(group.pending_members):
            self._timers.cancel(HeartbeatDeadline(group_id, member_id))
            self._timers.cancel(PendingMemberDeadline(group_id, member_id))

    def shutdown(self) -> None:
        """Answer every parked JoinGroup and SyncGroup NOT_COORDINATOR; every group is Dead."""
        now = self._ctx.now()
        for group in self._groups.values():
            for member in list(group.members.values()):
                for cb in group.take_join_callbacks(member):
                    self._reply(cb, JoinResult(ErrorCode.not_coordinator, member_id=member.member_id))
                for sync_cb in group.take_sync_callbacks(member):
                    self._reply(sync_cb, SyncResult(ErrorCode.not_coordinator))
            group.transition_to(GroupState.DEAD, now)
        self._delayed_joins.clear()
        self._sync_generations.clear()
