"""The classic consumer-group coordinator (Kafka's GroupCoordinator, sans I/O).

Theory of operation
-------------------
Every public method below is called on the broker's event loop thread.  The
coordinator keeps each group's state (``metadata.GroupMetadata``) in memory
and persists through a ``GroupStore``: records appended to the group's
partition of ``__consumer_offsets`` (``partition_for``), acknowledged later
by the store's ``done`` callback.  At start-up ``load_partition`` replays
those records.

Requests that cannot be answered at once are parked as callbacks:

* JoinGroup waits on the member until the *join phase* ends: every known
  member has rejoined, or the rebalance timeout (the largest of the members')
  expires -- members that did not rejoin are then dropped.  The first
  rebalance of an empty group waits ``group.initial.rebalance.delay.ms``
  more for others to arrive, extended while members keep coming, capped by
  the rebalance timeout (Kafka's InitialDelayedJoin).
* SyncGroup waits until the leader's assignment has been persisted.
* OffsetCommit, TxnOffsetCommit, DeleteGroups and OffsetDelete wait for the
  store's ``done``.

Every callback is called exactly once.  Callbacks are never called while
the coordinator is half-way through a change: they are queued and run when
the public method (or ``tick``, or the store's ``done``) is about to return,
so a callback that calls back into the coordinator sees a consistent state.
Immediate errors therefore still arrive before the call returns.  After
``shutdown`` nothing is called any more (pending callbacks are answered
NOT_COORDINATOR by ``shutdown`` itself).

Timers are deadlines in ``onceflow.timers.Timers`` (a heap with lazy
cancellation); the broker calls ``tick`` every few milliseconds and ``tick``
fires the due ones:

* ``hb``      a member's session: no heartbeat (or join/sync/commit) before
              it, the member is removed and the group rebalances.  Members
              parked in a join or sync are not expired by it (the rebalance
              protects them); a *new* member's join times out after
              NEW_MEMBER_JOIN_TIMEOUT_MS instead.
* ``pending`` a member id handed out with MEMBER_ID_REQUIRED (KIP-394) is
              forgotten if not used within the session timeout.
* ``join``    the end of the join phase (rebalance timeout, or the initial delay).
* ``sync``    members that received a join response but send no SyncGroup
              within the rebalance timeout are removed (KAFKA-12890).
* ``expire``  every ``offsets.retention.check.interval.ms``: expired offsets
              are removed (with tombstones), empty groups with no offsets die.

Transactional offset commits (KIP-98, KIP-447)
----------------------------------------------
A transactional producer that consumed records commits the consumer's
offsets inside its transaction (``commit_transactional_offsets``, the
TxnOffsetCommit API).  Their flow:

1. Validation.  An unknown group is created (Empty, as Kafka does).  With a
   member id or generation (TxnOffsetCommit v3+, KIP-447) they are checked
   against the group exactly as for OffsetCommit, so a zombie producer whose
   consumer was rebalanced away is fenced (UNKNOWN_MEMBER_ID,
   FENCED_INSTANCE_ID, ILLEGAL_GENERATION); the group's state does not
   matter otherwise.  Metadata too large: OFFSET_METADATA_TOO_LARGE per
   partition, as for OffsetCommit.
2. Write.  The offsets are appended through the ``GroupStore`` as a
   *transactional batch* of the producer (``producer_id``, ``producer_epoch``,
   ``transactional=True``); the partition log checks the epoch.  From now on
   they sit in the group's slot for that producer
   (``GroupOffsets.pending_transactional``): OffsetFetch does not see them,
   and a fetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for
   those partitions (Kafka 2.5+).  A failed write takes them back (the
   callback gets the mapped error); if the same producer had an earlier
   record for the partition in this transaction, that one is pending again.
   A marker that arrives before a record's acknowledgement (a client that
   does not wait for TxnOffsetCommit before EndTxn) applies when it arrives.
3. Outcome.  The transaction coordinator writes a COMMIT or ABORT marker into
   the group's ``__consumer_offsets`` partition; once it is durable the broker
   calls ``complete_transaction(partition, producer_id, commit)``.  For every
   group of that partition with offsets pending for the producer, COMMIT
   turns them into committed offsets and ABORT drops them.  A commit never
   replaces an offset that came from a *later* record: Kafka compares log
   offsets; since ``done`` reports none, the coordinator numbers the
   acknowledgements (``_ack_seq``), which on one partition come in log order
   (see ``metadata.GroupOffsets``).  So a plain OffsetCommit acknowledged
   after the transactional one wins, one acknowledged before it loses.
4. Restart.  ``load_partition`` replays records and markers in log order
   with the same rules: a transactional record is pending for its producer
   until that producer's marker; a COMMIT installs it unless a later record
   set the partition; offsets of transactions still open at the end stay
   pending (the transaction coordinator writes their markers later).

Offset expiry ignores pending transactional offsets (the committed offset
under them may expire; they keep an Empty group alive).  OffsetDelete and
topic deletion drop them with the committed ones; DeleteGroups drops the
whole group (Kafka tombstones only the committed offsets).  Shutdown answers
unacknowledged TxnOffsetCommits NOT_COORDINATOR like other writes.

The Kafka source this follows is GroupCoordinator.scala, GroupMetadata.scala
and GroupMetadataManager.scala of Kafka 3.x; rules that are not obvious cite
their KIP.  Kafka outcomes are ``ErrorCode`` values; exceptions are bugs.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from ...clock import Clock
from ...config import BrokerConfig
from ...protocol.errors import ErrorCode
from ...timers import Timers
from ..outbox import Outbox
from ..partitioning import partition_for
from . import records as rec
from .metadata import GroupMetadata, GroupState, MemberMetadata, PendingTxnOffset
from .types import (
    FetchedOffset,
    GroupDescription,
    GroupListing,
    GroupStore,
    JoinResult,
    LeaveMember,
    LeaveResult,
    OffsetAndMetadata,
    StoredEntry,
    StoredMarker,
    StoredRecord,
    SyncResult,
    TopicPartition,
)

log = logging.getLogger(__name__)

#: A new member's JoinGroup is dropped if the rebalance has not completed
#: within this time (Kafka's GroupCoordinator.NewMemberJoinTimeoutMs): a
#: client that gave up and retried must not leave a defunct member behind.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

_EXPIRE_KEY = ("expire",)


def _java_string_length(s: str) -> int:
    """Java's ``String.length()``: UTF-16 code units."""
    return len(s.encode("utf-16-le")) // 2


def _offset_from_value(value: rec.OffsetCommitValue) -> OffsetAndMetadata:
    return OffsetAndMetadata(
        offset=value.offset,
        leader_epoch=value.leader_epoch,
        metadata=value.metadata,
        commit_timestamp_ms=value.commit_timestamp_ms,
    )


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


def _map_offset_commit_error(error: ErrorCode) -> ErrorCode:
    """Kafka's GroupMetadataManager.maybeConvertOffsetCommitError."""
    if error is ErrorCode.network_exception:
        return ErrorCode.coordinator_load_in_progress
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.invalid_commit_offset_size
    return error


@dataclass(frozen=True, slots=True)
class _DelayedJoin:
    """The pending end of a join phase (Kafka's DelayedJoin / InitialDelayedJoin)."""

    initial: bool
    delay_ms: int
    remaining_ms: int = 0


class GroupCoordinator:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        store: GroupStore,
        *,
        member_id_suffix: Callable[[], str] | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self._store = store
        self._new_suffix = member_id_suffix or (lambda: str(uuid.uuid4()))
        self._groups: dict[str, GroupMetadata] = {}
        self._timers = Timers()
        self._delayed_joins: dict[str, _DelayedJoin] = {}
        self._sync_generations: dict[str, int] = {}
        self._outbox = Outbox(log, "group coordinator")
        self._active = True
        #: Operations waiting on the store: op id -> how shutdown answers them.
        self._inflight: dict[int, Callable[[], None]] = {}
        self._op_ids = itertools.count()
        #: Acknowledgement sequence of offset commit records (and load
        #: positions): stands in for their log offsets, see metadata.GroupOffsets.
        self._ack_seq = itertools.count(1)
        #: producer id -> ids of the groups that may hold transactional offsets
        #: pending for it (Kafka's openGroupsForProducer; a superset: entries
        #: are checked when the transaction completes).
        self._txn_groups: dict[int, set[str]] = {}
        # Kafka runs the first expiration check at start-up, then periodically.
        self._timers.set(_EXPIRE_KEY, clock.now_ms())

    # ================================================================ plumbing

    @contextmanager
    def _api(self) -> Iterator[None]:
        try:
            yield
        finally:
            self._flush()

    def _reply(self, callback: Callable[[Any], None], result: Any) -> None:
        self._outbox.post(callback, result)

    def _flush(self) -> None:
        self._outbox.flush()

    def _now(self) -> int:
        return self._clock.now_ms()

    def _validate_group_status(self, group_id: str | None, allow_empty_id: bool) -> ErrorCode | None:
        # OffsetCommit/OffsetFetch/DescribeGroups/DeleteGroups accept the
        # empty group id for backwards compatibility; the other APIs do not.
        if group_id is None or (not allow_empty_id and group_id == ""):
            return ErrorCode.invalid_group_id
        if not self._active:
            return ErrorCode.coordinator_not_available
        return None

    def _append(self, partition: int, records: list[tuple[bytes, bytes | None]], done: Callable[[ErrorCode], None],
                *, txn: tuple[int, int] | None = None) -> None:
        """``txn``: (producer id, producer epoch) of a transactional batch."""

        def on_done(error: ErrorCode) -> None:
            with self._api():
                done(error)

        if txn is None:
            self._store.append(partition, records, on_done)
        else:
            producer_id, producer_epoch = txn
            self._store.append(partition, records, on_done, producer_id=producer_id, producer_epoch=producer_epoch,
                               transactional=True)

    def _register(self, on_shutdown: Callable[[], None]) -> int:
        op = next(self._op_ids)
        self._inflight[op] = on_shutdown
        return op

    def _unregister(self, op: int) -> bool:
        """False if the operation was already answered (by shutdown)."""
        return self._inflight.pop(op, None) is not None

    # ================================================================ public API

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of a group (Kafka's Utils.abs(hashCode) % partitions)."""
        return partition_for(group_id, self._store.num_partitions)

    # ---------------------------------------------------------------- read-only helpers

    def group(self, group_id: str) -> GroupMetadata | None:
        """The in-memory group (for inspection only; do not mutate)."""
        return self._groups.get(group_id)

    def group_state(self, group_id: str) -> GroupState | None:
        group = self._groups.get(group_id)
        return None if group is None else group.state

    def group_ids(self) -> list[str]:
        return list(self._groups)

    # ---------------------------------------------------------------- loading

    def load_partition(self, partition: int, records: Iterable[StoredEntry]) -> None:
        """Replay one ``__consumer_offsets`` partition (oldest first) at start-up.

        ``records``: the partition's entries in log order, ``StoredRecord``s
        and ``StoredMarker``s; a plain ``(key, value)`` tuple is a
        non-transactional record (the parameter keeps its original name).  As in
        Kafka's loader, a transactional offset commit is pending for its
        producer until that producer's marker: COMMIT installs it unless the
        committed offset comes from a later record, ABORT drops it; still open
        at the end, it stays pending (the transaction coordinator writes the
        marker later).  Group metadata records count wherever they are.
        """
        with self._api():
            # group -> partition -> (position, offset)
            loaded_offsets: dict[str, dict[TopicPartition, tuple[int, OffsetAndMetadata]]] = {}
            # producer id -> (group, partition) -> (position, offset)
            pending: dict[int, dict[tuple[str, TopicPartition], tuple[int, OffsetAndMetadata]]] = {}
            loaded_groups: dict[str, rec.GroupMetadataValue] = {}
            for entry in records:
                position = next(self._ack_seq)
                if isinstance(entry, StoredMarker):
                    producer_offsets = pending.pop(entry.producer_id, None)
                    if entry.commit and producer_offsets:
                        for (group_id, tp), candidate in producer_offsets.items():
                            group_offsets = loaded_offsets.setdefault(group_id, {})
                            current = group_offsets.get(tp)
                            if current is None or current[0] < candidate[0]:
                                group_offsets[tp] = candidate
                    continue
                if isinstance(entry, StoredRecord):
                    key_bytes, value_bytes = entry.key, entry.value
                    txn_producer = entry.producer_id if entry.transactional else None
                else:
                    key_bytes, value_bytes = entry
                    txn_producer = None
                try:
                    key = rec.decode_key(key_bytes)
                except rec.RecordDecodeError as exc:
                    log.error("__consumer_offsets-%d: skipping a record with an undecodable key: %s", partition, exc)
                    continue
                if isinstance(key, rec.UnknownKey):
                    log.warning(
                        "__consumer_offsets-%d: ignoring a record with unknown key version %d "
                        "(perhaps a leftover of an aborted upgrade)",
                        partition,
                        key.version,
                    )
                    continue
                if isinstance(key, rec.OffsetCommitKey):
                    tp = (key.topic, key.partition)
                    try:
                        value = rec.decode_offset_commit_value(value_bytes)
                    except rec.RecordDecodeError as exc:
                        log.error("__consumer_offsets-%d: skipping offset of %s %s: %s", partition, key.group, tp, exc)
                        continue
                    if txn_producer is not None:
                        producer_offsets = pending.setdefault(txn_producer, {})
                        if value is None:
                            producer_offsets.pop((key.group, tp), None)
                        else:
                            producer_offsets[(key.group, tp)] = (position, _offset_from_value(value))
                        continue
                    group_offsets = loaded_offsets.setdefault(key.group, {})
                    if value is None:
                        group_offsets.pop(tp, None)
                    else:
                        group_offsets[tp] = (position, _offset_from_value(value))
                else:
                    try:
                        group_value = rec.decode_group_metadata_value(value_bytes)
                    except rec.RecordDecodeError as exc:
                        log.error("__consumer_offsets-%d: skipping metadata of group %s: %s", partition, key.group, exc)
                        continue
                    if group_value is None:
                        loaded_groups.pop(key.group, None)
                    else:
                        loaded_groups[key.group] = group_value

            # Transactions still open: group -> producer id -> partition -> (position, offset).
            pending_by_group: dict[str, dict[int, dict[TopicPartition, tuple[int, OffsetAndMetadata]]]] = {}
            for producer_id, producer_offsets in pending.items():
                for (group_id, tp), candidate in producer_offsets.items():
                    pending_by_group.setdefault(group_id, {}).setdefault(producer_id, {})[tp] = candidate

            now = self._now()
            for group_id, group_value in loaded_groups.items():
                offsets = loaded_offsets.pop(group_id, {})
                open_txns = pending_by_group.pop(group_id, {})
                try:
                    group = self._group_from_record(group_id, group_value, now)
                except (RuntimeError, ValueError) as exc:
                    # E.g. a member listed twice: keep the offsets, lose the membership.
                    log.error("__consumer_offsets-%d: unusable metadata for group %s (%s); loading it empty",
                              partition, group_id, exc)
                    group = GroupMetadata(group_id, now)
                self._install_loaded_group(group, offsets, open_txns)
            # Groups that only store offsets (or whose metadata was deleted).
            for group_id in list(loaded_offsets) + [g for g in pending_by_group if g not in loaded_offsets]:
                offsets = loaded_offsets.get(group_id, {})
                open_txns = pending_by_group.get(group_id, {})
                if offsets or open_txns:
                    self._install_loaded_group(GroupMetadata(group_id, now), offsets, open_txns)

    def _group_from_record(self, group_id: str, value: rec.GroupMetadataValue, now: int) -> GroupMetadata:
        state = GroupState.STABLE if value.members else GroupState.EMPTY
        group = GroupMetadata(group_id, now, state)
        group.generation_id = value.generation
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        for m in value.members:
            group.add(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    protocol_type=value.protocol_type,
                    protocols=[(value.protocol or "", m.subscription)],
                    assignment=m.assignment,
                )
            )
        group.protocol_type = value.protocol_type or None  # after add(), which sets it too
        group.current_state_timestamp_ms = None if value.current_state_timestamp_ms == -1 else value.current_state_timestamp_ms
        if group.leader_id is not None and group.leader_id not in group.members:
            group.leader_id = next(iter(group.members), None)
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    def _install_loaded_group(
        self,
        group: GroupMetadata,
        offsets: dict[TopicPartition, tuple[int, OffsetAndMetadata]],
        open_txns: dict[int, dict[TopicPartition, tuple[int, OffsetAndMetadata]]],
    ) -> None:
        if group.group_id in self._groups:
            log.warning("not loading group %s from the log: it is already in memory", group.group_id)
            return
        group.initialize_offsets(offsets, open_txns)
        for producer_id in group.active_producers:
            self._txn_groups.setdefault(producer_id, set()).add(group.group_id)
        self._groups[group.group_id] = group
        log.info("loaded group %s generation %d with %d member(s), %d offset(s) and pending transactional "
                 "offsets of %d producer(s)", group.group_id, group.generation_id, group.size, len(offsets),
                 len(group.active_producers))
        # Kafka's onGroupLoaded.
        if group.size > self._max_size:
            self._prepare_rebalance(group, f"freshly-loaded group is over capacity ({self._max_size})")
        for member in group.members.values():
            self._schedule_heartbeat(group, member)

    # ---------------------------------------------------------------- config

    @property
    def _max_size(self) -> int:
        return int(self._config["group.max.size"])

    @property
    def _initial_delay_ms(self) -> int:
        return int(self._config["group.initial.rebalance.delay.ms"])

    # ================================================================ JoinGroup

    def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        reason: str | None,
        callback: Callable[[JoinResult], None],
        *,
        supports_skip_assignment: bool = False,
    ) -> None:
        """``supports_skip_assignment``: JoinGroup v9+ (KIP-814), see _update_static_member_and_rebalance."""
        with self._api():
            self._join_group(
                group_id, member_id, group_instance_id, protocol_type, list(protocols), session_timeout_ms,
                rebalance_timeout_ms, require_known_member_id, client_id, client_host,
                reason or "not provided", callback, supports_skip_assignment,
            )

    def _join_group(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        reason: str,
        callback: Callable[[JoinResult], None],
        supports_skip: bool,
    ) -> None:
        error = self._validate_group_status(group_id, allow_empty_id=False)
        if error is not None:
            self._reply(callback, JoinResult(error, member_id=member_id))
            return
        if not (
            self._config["group.min.session.timeout.ms"] <= session_timeout_ms <= self._config["group.max.session.timeout.ms"]
        ):
            self._reply(callback, JoinResult(ErrorCode.invalid_session_timeout, member_id=member_id))
            return
        is_unknown_member = member_id == ""
        group = self._groups.get(group_id)
        if group is None:
            # Only a member without an id may create a group.
            if not is_unknown_member:
                self._reply(callback, JoinResult(ErrorCode.unknown_member_id, member_id=member_id))
                return
            group = GroupMetadata(group_id, self._now())
            self._groups[group_id] = group

        if not self._accept_joining_member(group, member_id):
            self._remove_member_silently(group, member_id)
            self._reply(callback, JoinResult(ErrorCode.group_max_size_reached, member_id=""))
        elif is_unknown_member:
            self._new_member_join(group, instance_id, require_known_member_id, supports_skip, client_id,
                                  client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                  protocols, callback, reason)
        else:
            self._current_member_join(group, member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                                      session_timeout_ms, protocol_type, protocols, callback, reason)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

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

    def _new_member_join(
        self,
        group: GroupMetadata,
        instance_id: str | None,
        require_known_member_id: bool,
        supports_skip: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        callback: Callable[[JoinResult], None],
        reason: str,
    ) -> None:
        if group.state is GroupState.DEAD:
            self._reply(callback, JoinResult(ErrorCode.coordinator_not_available, member_id=""))
            return
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            self._reply(callback, JoinResult(ErrorCode.inconsistent_group_protocol, member_id=""))
            return
        new_member_id = f"{instance_id if instance_id is not None else client_id}-{self._new_suffix()}"
        if instance_id is not None:
            old_member_id = group.current_static_member_id(instance_id)
            if old_member_id is not None:
                log.info("static member %s of group %s rejoins with an unknown member id: replacing %s with %s",
                         instance_id, group.group_id, old_member_id, new_member_id)
                self._update_static_member_and_rebalance(group, old_member_id, new_member_id, instance_id, protocols,
                                                         rebalance_timeout_ms, session_timeout_ms, callback, reason,
                                                         supports_skip)
            else:
                self._add_member_and_rebalance(group, new_member_id, instance_id, client_id, client_host,
                                               rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                               callback, reason)
        elif require_known_member_id:
            # KIP-394: hand out the id and make the client come back with it,
            # so a client that retries a timed-out join does not leave ghosts.
            group.add_pending_member(new_member_id)
            self._timers.set(("pending", group.group_id, new_member_id), self._now() + session_timeout_ms)
            self._reply(callback, JoinResult(ErrorCode.member_id_required, member_id=new_member_id))
        else:
            self._add_member_and_rebalance(group, new_member_id, None, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, callback, reason)

    def _validate_current_member(self, group: GroupMetadata, member_id: str, instance_id: str | None) -> ErrorCode | None:
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

    def _current_member_join(
        self,
        group: GroupMetadata,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        callback: Callable[[JoinResult], None],
        reason: str,
    ) -> None:
        if group.state is GroupState.DEAD:
            self._reply(callback, JoinResult(ErrorCode.coordinator_not_available, member_id=member_id))
            return
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            self._reply(callback, JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id))
            return
        if group.is_pending_member(member_id):
            if instance_id is not None:
                # Pending ids are only handed to dynamic members; Kafka fails
                # such a request with an internal error.
                self._reply(callback, JoinResult(ErrorCode.unknown_server_error, member_id=member_id))
                return
            self._timers.cancel(("pending", group.group_id, member_id))
            self._add_member_and_rebalance(group, member_id, None, client_id, client_host, rebalance_timeout_ms,
                                           session_timeout_ms, protocol_type, protocols, callback, reason)
            return
        error = self._validate_current_member(group, member_id, instance_id)
        if error is not None:
            self._reply(callback, JoinResult(error, member_id=member_id))
            return
        member = group.get(member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                              callback, f"member {member_id} joining during {state}; client reason: {reason}")
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # The member probably lost the join response: send it again.
                self._reply(callback, self._join_result_for(group, member_id))
            else:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                                  callback, f"member {member_id} updating metadata during {state}; client reason: {reason}")
        elif state is GroupState.STABLE:
            if group.is_leader(member_id):
                # A leader's join forces a rebalance: it is how it reacts to
                # changes that do not show in its metadata (new partitions...).
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                                  callback, f"leader {member_id} re-joining; client reason: {reason}")
            elif not member.matches(protocols):
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                                  callback, f"member {member_id} updating metadata; client reason: {reason}")
            else:
                self._reply(callback, self._join_result_for(group, member_id, with_members=False))
        else:
            log.warning("member %s rejoins group %s in unexpected state %s", member_id, group.group_id, state)
            self._reply(callback, JoinResult(ErrorCode.unknown_member_id, member_id=member_id))

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

    def _add_member_and_rebalance(
        self,
        group: GroupMetadata,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        callback: Callable[[JoinResult], None],
        reason: str,
    ) -> None:
        member = MemberMetadata(
            member_id=member_id,
            group_instance_id=instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            is_new=True,
        )
        # Lets the initial rebalance of a brand-new group wait a bit longer.
        if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, callback)
        # The session timeout does not protect a new member's join (it has no
        # id to heartbeat with); the join itself times out instead.
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(
            group, f"adding new member {member_id} with group instance id {instance_id}; client reason: {reason}"
        )

    def _update_member_and_rebalance(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: Callable[[JoinResult], None],
        reason: str,
    ) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        self._maybe_prepare_rebalance(group, reason)

    def _update_static_member_and_rebalance(
        self,
        group: GroupMetadata,
        old_member_id: str,
        new_member_id: str,
        instance_id: str,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: Callable[[JoinResult], None],
        reason: str,
        supports_skip: bool,
    ) -> None:
        """A known static member restarted (KIP-345): it takes over its old
        place under a new member id; the old id is fenced."""
        current_leader = group.leader_id
        self._timers.cancel(("hb", group.group_id, old_member_id))
        member, fenced_joins, fenced_syncs = group.replace_static_member(instance_id, old_member_id, new_member_id)
        for cb in fenced_joins:
            self._reply(cb, JoinResult(ErrorCode.fenced_instance_id, member_id=old_member_id))
        for sync_cb in fenced_syncs:
            self._reply(sync_cb, SyncResult(ErrorCode.fenced_instance_id))
        self._schedule_heartbeat(group, member)
        old_protocols = member.protocols
        old_rebalance_timeout = member.rebalance_timeout_ms
        old_session_timeout = member.session_timeout_ms
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)

        state = group.state
        if state is GroupState.STABLE:
            # No rebalance if the group's protocol would stay the same: persist
            # the new member id and hand back the current generation.
            if group.select_protocol() == group.protocol_name:
                generation = group.generation_id
                assignment = {m.member_id: m.assignment for m in group.members.values()}

                def done(error: ErrorCode) -> None:
                    if (
                        not self._active
                        or self._groups.get(group.group_id) is not group
                        or group.state is not GroupState.STABLE
                        or group.generation_id != generation
                        or group.members.get(new_member_id) is not member
                    ):
                        return  # the group moved on; whoever moved it answers the member
                    if error is not ErrorCode.none:
                        error = _map_store_group_error(error)
                        log.warning("failed to persist the new member id of static member %s of group %s: %s",
                                    instance_id, group.group_id, error.name)
                        waiting = group.take_join_callbacks(member)
                        group.update_member(member, old_protocols, old_rebalance_timeout, old_session_timeout, None)
                        self._timers.cancel(("hb", group.group_id, new_member_id))
                        old, more_joins, more_syncs = group.replace_static_member(instance_id, new_member_id, old_member_id)
                        self._schedule_heartbeat(group, old)
                        result = JoinResult(error, generation_id=group.generation_id, protocol_type=group.protocol_type,
                                            protocol_name=group.protocol_name, leader=current_leader or "", member_id="")
                        for cb in waiting + more_joins:
                            self._reply(cb, result)
                        for sync_cb in more_syncs:
                            self._reply(sync_cb, SyncResult(error))
                    elif supports_skip:
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
                           f"joined with other protocols; client reason: {reason}")
        elif state is GroupState.COMPLETING_REBALANCE:
            # The leader may be computing an assignment for the old member id:
            # start over so the new id gets one.
            self._prepare_rebalance(
                group, f"updating metadata of static member {new_member_id} ({instance_id}); client reason: {reason}")
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
        now = self._now()
        if group.state is GroupState.EMPTY:
            delay = self._initial_delay_ms
            op = _DelayedJoin(initial=True, delay_ms=delay, remaining_ms=max(group.rebalance_timeout_ms - delay, 0))
        else:
            op = _DelayedJoin(initial=False, delay_ms=group.rebalance_timeout_ms)
        group.transition_to(GroupState.PREPARING_REBALANCE, now)
        log.info("preparing to rebalance group %s with old generation %d (__consumer_offsets-%d) (reason: %s)",
                 group.group_id, group.generation_id, self.partition_for(group.group_id), reason)
        self._delayed_joins[group.group_id] = op
        self._timers.set(("join", group.group_id), now + op.delay_ms)
        self._try_complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        """Finish the join phase early once everybody is in (not during the initial delay)."""
        op = self._delayed_joins.get(group.group_id)
        if op is None or op.initial:
            return
        if group.has_all_members_joined():
            self._complete_join(group)

    def _on_join_deadline(self, group_id: str) -> None:
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
            self._timers.set(("join", group_id), self._now() + delay)
            return
        self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        """Kafka's onCompleteJoin: the join phase is over."""
        group_id = group.group_id
        self._delayed_joins.pop(group_id, None)
        self._timers.cancel(("join", group_id))
        # Dynamic members that did not rejoin in time are out.  Static members
        # stay (KIP-345): they are expected back under the same instance id.
        gone = [m for m in group.not_yet_rejoined_members() if not m.is_static]
        if gone:
            log.info("group %s removed dynamic members that did not rejoin: %s", group_id, [m.member_id for m in gone])
            for member in gone:
                self._remove_member_silently(group, member.member_id)
        if group.state is GroupState.DEAD:
            return
        now = self._now()
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined are left: wait for
            # them (or for their sessions to expire) another rebalance timeout.
            log.error("group %s could not complete rebalance because no members rejoined", group_id)
            op = _DelayedJoin(initial=False, delay_ms=group.rebalance_timeout_ms)
            self._delayed_joins[group_id] = op
            self._timers.set(("join", group_id), now + op.delay_ms)
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
            self._schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._sync_generations[group_id] = group.generation_id
        self._timers.set(("sync", group_id), now + group.rebalance_timeout_ms)

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.pending_sync_members.clear()
        self._sync_generations.pop(group.group_id, None)
        self._timers.cancel(("sync", group.group_id))

    def _on_sync_deadline(self, group_id: str) -> None:
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
        self._timers.cancel(("hb", group.group_id, member_id))
        self._timers.cancel(("pending", group.group_id, member_id))
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

    def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None) -> None:
        """Reset the member's session: it must show signs of life before the deadline."""
        deadline = self._now() + (member.session_timeout_ms if timeout_ms is None else timeout_ms)
        member.session_deadline_ms = deadline
        self._timers.set(("hb", group.group_id, member.member_id), deadline)

    def _on_heartbeat_deadline(self, group_id: str, member_id: str) -> None:
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

    def _on_pending_member_deadline(self, group_id: str, member_id: str) -> None:
        group = self._groups.get(group_id)
        if group is None or not group.is_pending_member(member_id):
            return
        log.info("pending member %s of group %s removed after session timeout", member_id, group_id)
        self._remove_pending_member_and_update_group(group, member_id)

    # ================================================================ SyncGroup

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        callback: Callable[[SyncResult], None],
    ) -> None:
        with self._api():
            error = self._validate_group_status(group_id, allow_empty_id=False)
            if error is not None:
                self._reply(callback, SyncResult(error))
                return
            group = self._groups.get(group_id)
            if group is None:
                self._reply(callback, SyncResult(ErrorCode.unknown_member_id))
                return
            error = self._validate_sync(group, generation_id, member_id, group_instance_id, protocol_type, protocol_name)
            if error is not None:
                self._reply(callback, SyncResult(error))
                return
            state = group.state
            if state is GroupState.EMPTY:
                self._reply(callback, SyncResult(ErrorCode.unknown_member_id))
            elif state is GroupState.PREPARING_REBALANCE:
                self._reply(callback, SyncResult(ErrorCode.rebalance_in_progress))
            elif state is GroupState.COMPLETING_REBALANCE:
                member = group.get(member_id)
                group.add_sync_callback(member, callback)
                self._remove_pending_sync_member(group, member_id)
                if group.is_leader(member_id):
                    self._on_leader_sync(group, member_id, assignments)
            elif state is GroupState.STABLE:
                member = group.get(member_id)
                self._remove_pending_sync_member(group, member_id)
                self._reply(callback, SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment))
                self._schedule_heartbeat(group, member)
            else:
                raise RuntimeError(f"sync for group {group_id} in unexpected state {state}")

    def _validate_sync(self, group: GroupMetadata, generation_id: int, member_id: str, instance_id: str | None,
                       protocol_type: str | None, protocol_name: str | None) -> ErrorCode | None:
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = self._validate_current_member(group, member_id, instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        # SyncGroup v5+ echoes what the join response said.
        if protocol_type is not None and group.protocol_type != protocol_type:
            return ErrorCode.inconsistent_group_protocol
        if protocol_name is not None and group.protocol_name != protocol_name:
            return ErrorCode.inconsistent_group_protocol
        return None

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._sync_generations.pop(group.group_id, None)
            self._timers.cancel(("sync", group.group_id))

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
            if (
                not self._active
                or self._groups.get(group.group_id) is not group
                or group.state is not GroupState.COMPLETING_REBALANCE
                or group.generation_id != generation
            ):
                return
            if error is not ErrorCode.none:
                self._reset_and_propagate_assignment_error(group, _map_store_group_error(error))
                self._maybe_prepare_rebalance(
                    group, f"error {error.name} when storing group assignment during SyncGroup (member {leader_id})")
            else:
                for member in group.members.values():
                    member.assignment = assignment.get(member.member_id, b"")
                self._propagate_assignment(group, ErrorCode.none)
                group.transition_to(GroupState.STABLE, self._now())

        self._store_group(group, assignment, done)

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
            self._schedule_heartbeat(group, member)

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
        self._append(self.partition_for(group.group_id), [(key, rec.encode_group_metadata_value(value))], done)

    # ================================================================ Heartbeat

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        with self._api():
            error = self._validate_group_status(group_id, allow_empty_id=False)
            if error is not None:
                return error
            group = self._groups.get(group_id)
            if group is None:
                return ErrorCode.unknown_member_id
            if group.state is GroupState.DEAD:
                return ErrorCode.coordinator_not_available
            error = self._validate_current_member(group, member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
            state = group.state
            if state is GroupState.EMPTY:
                return ErrorCode.unknown_member_id
            self._schedule_heartbeat(group, group.get(member_id))
            if state is GroupState.PREPARING_REBALANCE:
                return ErrorCode.rebalance_in_progress
            # CompletingRebalance: a member may heartbeat between its join
            # response and its sync; treat it as a normal heartbeat.
            return ErrorCode.none

    # ================================================================ LeaveGroup

    def leave_group(self, group_id: str, members: list[LeaveMember], reason: str | None = None) -> LeaveResult:
        with self._api():
            error = self._validate_group_status(group_id, allow_empty_id=False)
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
        error = self._validate_current_member(group, member_id, leaving.group_instance_id)
        if error is not None:
            return error
        self._remove_current_member(group, member_id, reason)
        return ErrorCode.none

    def _remove_current_member(self, group: GroupMetadata, member_id: str, reason: str) -> None:
        member = group.get(member_id)
        log.info("member %s has left group %s through LeaveGroup; client reason: %s", member_id, group.group_id, reason)
        self._remove_member_and_update_group(
            group, member, f"removing member {member_id} on LeaveGroup; client reason: {reason}")

    # ================================================================ Describe / List

    def describe_groups(self, group_ids: list[str]) -> list[GroupDescription]:
        with self._api():
            out = []
            for group_id in group_ids:
                error = self._validate_group_status(group_id, allow_empty_id=True)
                if error is not None:
                    out.append(GroupDescription(group_id=group_id, error=error, state=""))
                    continue
                group = self._groups.get(group_id)
                out.append(GroupDescription(group_id=group_id, error=ErrorCode.none) if group is None else group.describe())
            return out

    def list_groups(self, states: set[str] | None = None, types: set[str] | None = None) -> list[GroupListing]:
        """``states``: Kafka state names, case-insensitive (ListGroups v4+).
        ``types``: group *types* (ListGroups v5, KIP-848): every group here is
        a "classic" group, whatever its protocol type."""
        with self._api():
            if not self._active:
                return []
            wanted_states = {s.lower() for s in states} if states else None
            if types and "classic" not in {t.lower() for t in types}:
                return []
            return [
                g.overview()
                for g in self._groups.values()
                if g.state is not GroupState.DEAD and (wanted_states is None or g.state.value.lower() in wanted_states)
            ]

    # ================================================================ DeleteGroups

    def delete_groups(self, group_ids: list[str], callback: Callable[[dict[str, ErrorCode]], None]) -> None:
        with self._api():
            errors: dict[str, ErrorCode] = {}
            tombstones: dict[int, list[tuple[bytes, bytes | None]]] = {}
            deleted_by_partition: dict[int, list[str]] = {}
            for group_id in dict.fromkeys(group_ids):
                error = self._validate_group_status(group_id, allow_empty_id=True)
                if error is not None:
                    errors[group_id] = error
                    continue
                group = self._groups.get(group_id)
                if group is None or group.state is GroupState.DEAD:
                    errors[group_id] = ErrorCode.group_id_not_found
                elif group.state is GroupState.EMPTY:
                    group.transition_to(GroupState.DEAD, self._now())
                    records = self._cleanup_group(group, group.remove_all_offsets())
                    partition = self.partition_for(group_id)
                    tombstones.setdefault(partition, []).extend(records)
                    deleted_by_partition.setdefault(partition, []).append(group_id)
                else:
                    errors[group_id] = ErrorCode.non_empty_group
            if deleted_by_partition:
                log.info("deleted groups %s", [g for gs in deleted_by_partition.values() for g in gs])
            # Groups with nothing to write are deleted at once.
            for partition in [p for p in deleted_by_partition if not tombstones.get(p)]:
                for group_id in deleted_by_partition.pop(partition):
                    errors[group_id] = ErrorCode.none
            if not deleted_by_partition:
                self._reply(callback, errors)
                return

            outstanding = set(deleted_by_partition)
            op = self._register(lambda: self._reply(
                callback, {**errors, **{g: ErrorCode.not_coordinator for gs in deleted_by_partition.values() for g in gs}}))

            def done_for(partition: int) -> Callable[[ErrorCode], None]:
                def done(error: ErrorCode) -> None:
                    if op not in self._inflight:
                        return
                    result = ErrorCode.none if error is ErrorCode.none else _map_offset_commit_error(error)
                    if error is not ErrorCode.none:
                        log.warning("failed to write tombstones of deleted groups %s: %s",
                                    deleted_by_partition[partition], error.name)
                    for group_id in deleted_by_partition[partition]:
                        errors[group_id] = result
                    outstanding.discard(partition)
                    if not outstanding and self._unregister(op):
                        self._reply(callback, errors)

                return done

            for partition in deleted_by_partition:
                self._append(partition, tombstones[partition], done_for(partition))

    def _cleanup_group(self, group: GroupMetadata, removed: dict[TopicPartition, OffsetAndMetadata]) -> list[tuple[bytes, bytes | None]]:
        """Kafka's cleanupGroupMetadata for one group: tombstones for the
        removed offsets; an Empty group left with no offsets dies, and its
        metadata gets a tombstone too (when any was ever written)."""
        group_id = group.group_id
        out: list[tuple[bytes, bytes | None]] = [
            (rec.encode_offset_commit_key(rec.OffsetCommitKey(group_id, topic, partition)), None)
            for topic, partition in removed
        ]
        if group.state is GroupState.EMPTY and not group.has_offsets():
            log.info("group %s transitioned to Dead in generation %d", group_id, group.generation_id)
            group.transition_to(GroupState.DEAD, self._now())
        if group.state is GroupState.DEAD and self._groups.get(group_id) is group:
            self._drop_group(group)
            # Generation 0 groups only ever stored offsets: no metadata record.
            if group.generation_id > 0:
                out.append((rec.encode_group_metadata_key(rec.GroupMetadataKey(group_id)), None))
        return out

    def _drop_group(self, group: GroupMetadata) -> None:
        group_id = group.group_id
        del self._groups[group_id]
        for producer_id in group.active_producers:
            self._forget_txn_group(producer_id, group_id)
        self._delayed_joins.pop(group_id, None)
        self._timers.cancel(("join", group_id))
        self._sync_generations.pop(group_id, None)
        self._timers.cancel(("sync", group_id))
        for member_id in list(group.members) + list(group.pending_members):
            self._timers.cancel(("hb", group_id, member_id))
            self._timers.cancel(("pending", group_id, member_id))

    def _append_tombstones(self, tombstones: dict[int, list[tuple[bytes, bytes | None]]], what: str) -> None:
        """Fire-and-forget: a lost tombstone is written again by the next cleanup."""
        for partition, records in tombstones.items():
            if not records:
                continue

            def done(error: ErrorCode, partition: int = partition, n: int = len(records)) -> None:
                if error is not ErrorCode.none:
                    log.warning("failed to append %d tombstone(s) for %s to __consumer_offsets-%d: %s",
                                n, what, partition, error.name)

            self._append(partition, records, done)

    # ================================================================ OffsetCommit

    def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        callback: Callable[[dict[TopicPartition, ErrorCode]], None],
    ) -> None:
        with self._api():
            error = self._validate_group_status(group_id, allow_empty_id=True)
            if error is not None:
                self._reply(callback, dict.fromkeys(offsets, error))
                return
            group = self._groups.get(group_id)
            if group is None:
                if generation_id >= 0:
                    # A member of a group this coordinator does not know (or
                    # an older generation): reject.
                    self._reply(callback, dict.fromkeys(offsets, ErrorCode.illegal_generation))
                    return
                # Not using group management: the group exists for its offsets only.
                log.info("creating simple consumer group %s via manual offset commit", group_id)
                group = GroupMetadata(group_id, self._now())
                self._groups[group_id] = group
            error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
            if error is not None:
                self._reply(callback, dict.fromkeys(offsets, error))
                return
            state = group.state
            if state is GroupState.EMPTY:
                self._store_offsets(group, offsets, callback)
            elif state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
                # During PreparingRebalance, commits of the current generation
                # are still accepted: the heartbeat tells the member to rejoin.
                self._schedule_heartbeat(group, group.get(member_id))
                self._store_offsets(group, offsets, callback)
            elif state is GroupState.COMPLETING_REBALANCE:
                # The member has its join response but not its assignment yet.
                self._reply(callback, dict.fromkeys(offsets, ErrorCode.rebalance_in_progress))
            else:
                raise RuntimeError(f"commit for group {group_id} in unexpected state {state}")

    def _validate_offset_commit(self, group: GroupMetadata, generation_id: int, member_id: str,
                                instance_id: str | None, *, transactional: bool = False) -> ErrorCode | None:
        """Kafka's validateOffsetCommit, for OffsetCommit and TxnOffsetCommit."""
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.state is GroupState.EMPTY:
            # The admin client, or a consumer without group management.
            return None
        if generation_id >= 0 or member_id != "" or instance_id is not None:
            # KIP-447 (TxnOffsetCommit v3+ carries the consumer's member id
            # and generation): a zombie producer of an older generation is
            # fenced like a consumer's own commit would be.
            error = self._validate_current_member(group, member_id, instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
            return None
        if transactional:
            # TxnOffsetCommit before v3 carries no member id nor generation.
            return None
        # Generation -1 and no member id, but the group has members: only
        # members may commit.
        return ErrorCode.unknown_member_id

    def _metadata_fits(self, metadata: str | None) -> bool:
        return metadata is None or _java_string_length(metadata) <= self._config["offset.metadata.max.bytes"]

    def _store_offsets(
        self,
        group: GroupMetadata,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        callback: Callable[[dict[TopicPartition, ErrorCode]], None],
        *,
        txn: tuple[int, int] | None = None,
    ) -> None:
        """Kafka's storeOffsets.  ``txn``: (producer id, producer epoch) of a
        transactional commit, written as that producer's transactional batch
        and kept pending for it (not committed) once acknowledged."""
        now = self._now()
        valid: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, o in offsets.items():
            if self._metadata_fits(o.metadata):
                valid[tp] = replace(
                    o,
                    metadata=o.metadata if o.metadata is not None else "",
                    commit_timestamp_ms=o.commit_timestamp_ms if o.commit_timestamp_ms >= 0 else now,
                )
        if not valid:
            self._reply(callback, dict.fromkeys(offsets, ErrorCode.offset_metadata_too_large))
            return

        def statuses(error: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: (error if tp in valid else ErrorCode.offset_metadata_too_large) for tp in offsets}

        records: list[tuple[bytes, bytes | None]] = [
            (
                rec.encode_offset_commit_key(rec.OffsetCommitKey(group.group_id, tp[0], tp[1])),
                rec.encode_offset_commit_value(
                    rec.OffsetCommitValue(o.offset, o.leader_epoch, o.metadata or "", o.commit_timestamp_ms)
                ),
            )
            for tp, o in valid.items()
        ]
        entries: dict[TopicPartition, PendingTxnOffset] = {}
        if txn is None:
            group.prepare_offset_commit(valid)
        else:
            entries = group.prepare_txn_offset_commit(txn[0], valid)
            self._txn_groups.setdefault(txn[0], set()).add(group.group_id)
        op = self._register(lambda: self._reply(callback, statuses(ErrorCode.not_coordinator)))

        def done(error: ErrorCode) -> None:
            if not self._unregister(op):
                return
            ok = error is ErrorCode.none
            # Acknowledgements of one partition arrive in log order: the
            # sequence orders this record against the group's other commits.
            seq = next(self._ack_seq) if ok else None
            if group.state is not GroupState.DEAD:
                if txn is None:
                    for tp, o in valid.items():
                        if seq is not None:
                            group.on_offset_commit_append(tp, o, seq=seq)
                        else:
                            group.fail_pending_offset_write(tp, o)
                else:
                    producer_id = txn[0]
                    for tp, entry in entries.items():
                        if seq is not None:
                            group.on_txn_offset_commit_append(producer_id, tp, entry, seq)
                        else:
                            group.fail_pending_txn_offset_commit(producer_id, tp, entry)
                    if not group.has_pending_offset_commits_from_producer(producer_id):
                        self._forget_txn_group(producer_id, group.group_id)
            if not ok:
                log.debug("%soffset commit of group %s failed when appending to the log: %s",
                          "transactional " if txn is not None else "", group.group_id, error.name)
            self._reply(callback, statuses(ErrorCode.none if ok else _map_offset_commit_error(error)))

        self._append(self.partition_for(group.group_id), records, done, txn=txn)

    def _forget_txn_group(self, producer_id: int, group_id: str) -> None:
        group_ids = self._txn_groups.get(producer_id)
        if group_ids is not None:
            group_ids.discard(group_id)
            if not group_ids:
                del self._txn_groups[producer_id]

    # ================================================================ TxnOffsetCommit

    def commit_transactional_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        callback: Callable[[dict[TopicPartition, ErrorCode]], None],
        verify: Callable[[int], ErrorCode] | None = None,
    ) -> None:
        """TxnOffsetCommit (KIP-98; Kafka's handleTxnCommitOffsets).

        The offsets are written as a transactional batch of the producer and
        stay *pending* for it (invisible to OffsetFetch, UNSTABLE_OFFSET_COMMIT
        with require_stable) until ``complete_transaction`` reports the
        transaction's marker.  Unlike OffsetCommit: an unknown group is
        created (Empty) before validation, the group's state does not matter
        (CompletingRebalance included), it is no heartbeat, and without member
        id and generation (before v3) anyone may commit.  With them (v3+,
        KIP-447) they are validated as for OffsetCommit: UNKNOWN_MEMBER_ID,
        FENCED_INSTANCE_ID, ILLEGAL_GENERATION.

        ``verify(offsets_partition)`` asks the transaction coordinator
        whether the group's ``__consumer_offsets`` partition is in the
        producer's ongoing transaction (KIP-890 part 1); anything but NONE is
        the answer, and nothing is written.  Without it, a commit outside any
        transaction (no AddOffsetsToTxn, another producer id, a stale epoch)
        would open a transaction in that partition that no coordinator
        knows and no timeout ends: pending offsets forever, a pinned LSO
        (issue 7).  The producer's epoch is checked again by the partition
        log when the store appends the batch.
        """
        with self._api():
            error = self._validate_group_status(group_id, allow_empty_id=False)
            if error is None and producer_id < 0:
                # Not a transactional producer: the batch could not be one.
                error = ErrorCode.invalid_producer_id_mapping
            if error is None and verify is not None:
                verified = verify(self.partition_for(group_id))
                if verified is not ErrorCode.none:
                    log.info("transactional offset commit of producer %d for group %s refused: %s", producer_id,
                             group_id, verified.name)
                    error = verified
            if error is not None:
                self._reply(callback, dict.fromkeys(offsets, error))
                return
            group = self._groups.get(group_id)
            if group is None:
                log.info("creating group %s via transactional offset commit of producer %d", group_id, producer_id)
                group = GroupMetadata(group_id, self._now())
                self._groups[group_id] = group
            error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id, transactional=True)
            if error is not None:
                self._reply(callback, dict.fromkeys(offsets, error))
                return
            self._store_offsets(group, offsets, callback, txn=(producer_id, producer_epoch))

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT (``commit``) or ABORT marker of the producer is durable in
        ``__consumer_offsets`` partition ``partition`` (Kafka's
        handleTxnCompletion): in every group of that partition the producer's
        pending offsets become committed -- each only if its record is newer
        than the one behind the committed offset -- or are dropped."""
        with self._api():
            if not self._active:
                return
            group_ids = self._txn_groups.get(producer_id)
            if not group_ids:
                return
            for group_id in [g for g in group_ids if self.partition_for(g) == partition]:
                group_ids.discard(group_id)
                group = self._groups.get(group_id)
                if group is None or group.state is GroupState.DEAD:
                    continue
                applied = group.complete_pending_txn_offset_commit(producer_id, commit)
                log.debug("transaction of producer %d %s for group %s (%d offset(s) committed)", producer_id,
                          "committed" if commit else "aborted", group_id, applied)
            if not group_ids:
                del self._txn_groups[producer_id]

    # ================================================================ OffsetFetch

    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool = False
    ) -> tuple[ErrorCode, dict[TopicPartition, FetchedOffset]]:
        """Offsets are returned whatever the group's state: a group may use
        Kafka only to store offsets.  Only committed offsets are returned:
        transactional commits count once their transaction has committed.
        ``require_stable`` (KIP-447): a partition with a commit still in
        flight, or with transactional offsets pending in the group, answers
        UNSTABLE_OFFSET_COMMIT (retriable); without it the committed offset
        is returned."""
        with self._api():
            error = self._validate_group_status(group_id, allow_empty_id=True)
            if error is not None:
                return error, {}
            group = self._groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                return ErrorCode.none, {tp: FetchedOffset(-1) for tp in (partitions or [])}
            wanted = list(group.offsets.committed) if partitions is None else partitions
            out: dict[TopicPartition, FetchedOffset] = {}
            for tp in wanted:
                if require_stable and group.offsets.has_pending(tp):
                    out[tp] = FetchedOffset(-1, error=ErrorCode.unstable_offset_commit)
                    continue
                o = group.offset(tp)
                out[tp] = FetchedOffset(-1) if o is None else FetchedOffset(o.offset, o.leader_epoch, o.metadata)
            return ErrorCode.none, out

    # ================================================================ OffsetDelete

    def delete_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition],
        callback: Callable[[ErrorCode, dict[TopicPartition, ErrorCode]], None],
    ) -> None:
        """OffsetDelete (KIP-496): not for partitions of topics the group consumes."""
        with self._api():
            error = self._validate_group_status(group_id, allow_empty_id=False)
            if error is not None:
                self._reply2(callback, error, {})
                return
            group = self._groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                self._reply2(callback, ErrorCode.group_id_not_found, {})
                return
            partition_errors: dict[TopicPartition, ErrorCode] = {}
            if group.state is GroupState.EMPTY:
                eligible = list(dict.fromkeys(partitions))
            elif group.is_consumer_group:
                eligible = []
                for tp in dict.fromkeys(partitions):
                    if group.is_subscribed_to_topic(tp[0]):
                        partition_errors[tp] = ErrorCode.group_subscribed_to_topic
                    else:
                        eligible.append(tp)
            else:
                self._reply2(callback, ErrorCode.non_empty_group, {})
                return
            for tp in eligible:
                partition_errors[tp] = ErrorCode.none
            records = self._cleanup_group(group, group.remove_offsets(eligible)) if eligible else []
            if not records:
                self._reply2(callback, ErrorCode.none, partition_errors)
                return
            log.info("deleting offsets of group %s: %s", group_id, eligible)
            op = self._register(lambda: self._reply2(callback, ErrorCode.not_coordinator, {}))

            def done(error: ErrorCode) -> None:
                if not self._unregister(op):
                    return
                if error is ErrorCode.none:
                    self._reply2(callback, ErrorCode.none, partition_errors)
                else:
                    log.warning("failed to write offset tombstones of group %s: %s", group_id, error.name)
                    self._reply2(callback, _map_offset_commit_error(error), {})

            self._append(self.partition_for(group_id), records, done)

    def _reply2(self, callback: Callable[[ErrorCode, dict[TopicPartition, ErrorCode]], None],
                error: ErrorCode, partitions: dict[TopicPartition, ErrorCode]) -> None:
        self._reply(lambda args: callback(*args), (error, partitions))

    # ================================================================ timers

    def tick(self) -> None:
        """Run due timers: session expiry, rebalance and initial-delay deadlines, offset expiry."""
        if not self._active:
            return
        with self._api():
            now = self._now()
            while True:
                key = self._timers.pop_due(now)
                if key is None:
                    return
                kind = key[0]
                if kind == "hb":
                    self._on_heartbeat_deadline(key[1], key[2])
                elif kind == "pending":
                    self._on_pending_member_deadline(key[1], key[2])
                elif kind == "join":
                    self._on_join_deadline(key[1])
                elif kind == "sync":
                    self._on_sync_deadline(key[1])
                elif kind == "expire":
                    self._expire_offsets(now)
                else:
                    raise RuntimeError(f"unknown timer {key!r}")

    def next_deadline_ms(self) -> int | None:
        return self._timers.next_deadline() if self._active else None

    def _expire_offsets(self, now: int) -> None:
        retention_ms = int(self._config["offsets.retention.minutes"]) * 60_000
        tombstones: dict[int, list[tuple[bytes, bytes | None]]] = {}
        removed_total = 0
        for group in list(self._groups.values()):
            removed = group.remove_expired_offsets(now, retention_ms)
            removed_total += len(removed)
            records = self._cleanup_group(group, removed)
            if records:
                tombstones.setdefault(self.partition_for(group.group_id), []).extend(records)
        if removed_total:
            log.info("removed %d expired offsets", removed_total)
        self._append_tombstones(tombstones, "expired offsets and groups")
        self._timers.set(_EXPIRE_KEY, now + int(self._config["offsets.retention.check.interval.ms"]))

    # ================================================================ topic deletion / shutdown

    def on_topic_deleted(self, topic: str) -> None:
        with self._api():
            if not self._active:
                return
            tombstones: dict[int, list[tuple[bytes, bytes | None]]] = {}
            for group in list(self._groups.values()):
                tps = [tp for tp in group.offsets.partitions() if tp[0] == topic]
                if not tps:
                    continue
                records = self._cleanup_group(group, group.remove_offsets(tps))
                if records:
                    tombstones.setdefault(self.partition_for(group.group_id), []).extend(records)
            self._append_tombstones(tombstones, f"offsets of deleted topic {topic}")

    def shutdown(self) -> None:
        with self._api():
            if not self._active:
                return
            self._active = False
            now = self._now()
            for group in self._groups.values():
                for member in list(group.members.values()):
                    for cb in group.take_join_callbacks(member):
                        self._reply(cb, JoinResult(ErrorCode.not_coordinator, member_id=member.member_id))
                    for sync_cb in group.take_sync_callbacks(member):
                        self._reply(sync_cb, SyncResult(ErrorCode.not_coordinator))
                group.transition_to(GroupState.DEAD, now)
            inflight = list(self._inflight.values())
            self._inflight.clear()
            for answer in inflight:
                answer()
            self._groups.clear()
            self._txn_groups.clear()
            self._delayed_joins.clear()
            self._sync_generations.clear()
            self._timers.clear()
