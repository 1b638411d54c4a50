"""The classic consumer-group coordinator (Kafka's GroupCoordinator, sans I/O).

Theory of operation
-------------------
Every public method below is called on the broker's event loop thread.  The
coordinator keeps each group's state (``metadata.GroupMetadata``) in memory
and persists through a ``GroupStore``: records appended to the group's
partition of ``__consumer_offsets`` (``partition_for``), acknowledged later
by the store's ``done`` callback.  At start-up ``load_partition`` replays
those records.

``GroupCoordinator`` is the facade the broker calls, and it keeps the
plumbing; the work is done behind it, split the way Kafka splits it
(GroupCoordinator / GroupMetadataManager in Kafka 3; GroupMetadataManager /
OffsetMetadataManager in Kafka 4) and the way ``coordinator/transaction``
is split:

* ``membership.MembershipManager``: JoinGroup, SyncGroup, Heartbeat,
  LeaveGroup, rebalances and sessions;
* ``offsets.OffsetManager``: OffsetCommit, TxnOffsetCommit (KIP-98,
  KIP-447, KIP-890 part 1) and ``complete_transaction``, OffsetFetch,
  OffsetDelete, DeleteGroups, offset expiry and deleted topics;
* ``loader``: ``__consumer_offsets`` entries in, groups and offsets out (a
  pure function); ``load_partition`` installs what it reads.

Both managers share the groups, the timers and the plumbing below through
one ``context.GroupContext``.

Requests that cannot be answered at once are parked as callbacks: JoinGroup
until the join phase ends, SyncGroup until the leader's assignment is
persisted (``membership.py``); OffsetCommit, TxnOffsetCommit, DeleteGroups
and OffsetDelete until the store's ``done`` (``offsets.py``).  How they are
answered -- exactly once, never half-way through a change, NOT_COORDINATOR
at ``shutdown`` -- and how timers fire is the coordinator runtime's
(``coordinator/runtime.py``).  The group timers are the keys of
``context.py``: ``HeartbeatDeadline``, ``PendingMemberDeadline``,
``JoinDeadline`` and ``SyncDeadline`` (sessions, member ids handed out with
MEMBER_ID_REQUIRED, the end of a join phase, SyncGroup deadlines:
``membership.py``) and ``OffsetExpiry`` (every
``offsets.retention.check.interval.ms``: ``offsets.py``).

The Kafka source this follows is GroupCoordinator.scala, GroupMetadata.scala
and GroupMetadataManager.scala of Kafka 3.x; rules that are not obvious cite
their KIP.  Kafka outcomes are ``ErrorCode`` values; exceptions are bugs.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ...clock import Clock
from ...config import BrokerConfig
from ...protocol.errors import ErrorCode
from ..partitioning import partition_for
from ..runtime import CoordinatorRuntime
from . import loader
from .consumer_membership import ConsumerMembershipManager, HeartbeatRequest, HeartbeatResult, TopicPartitions
from .context import (
    ConsumerRebalanceDeadline,
    ConsumerSessionDeadline,
    GroupContext,
    HeartbeatDeadline,
    JoinDeadline,
    OffsetExpiry,
    PendingMemberDeadline,
    Record,
    SyncDeadline,
)
from .membership import JoinRequest, MembershipManager, SyncRequest
from .metadata import GroupMetadata, GroupState
from .offsets import OffsetCommitRequest, OffsetManager, TxnOffsetCommitRequest
from .types import (
    ConsumerGroupDescription,
    ConsumerMemberDescription,
    DescribedPartitions,
    FetchedOffset,
    GroupDescription,
    GroupListing,
    GroupStore,
    JoinResult,
    LeaveMember,
    LeaveResult,
    OffsetAndMetadata,
    StoredEntry,
    SyncResult,
    TopicImage,
    TopicPartition,
)

log = logging.getLogger(__name__)


class GroupCoordinator:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        store: GroupStore,
        *,
        member_id_suffix: Callable[[], str] | None = None,
        on_timer_set: Callable[[int], None] | None = None,
        topics: Callable[[], Mapping[str, TopicImage]] | None = None,
    ) -> None:
        """``topics``: the broker's topics now, by name (KIP-848 groups assign topic ids)."""
        self._config = config
        self._clock = clock
        self._store = store
        self._groups: dict[str, GroupMetadata] = {}
        self._runtime = runtime = CoordinatorRuntime("group coordinator", log, clock, on_timer_set)
        self._ctx = ctx = GroupContext(
            config=config,
            clock=clock,
            groups=self._groups,
            timers=runtime.timers,
            reply=runtime.reply,
            append=self._append,
            register=runtime.register,
            unregister=runtime.unregister,
            is_waiting=runtime.is_waiting,
            is_active=lambda: runtime.active,
            partition_for=self.partition_for,
            topics=topics or dict,
        )
        self._consumers = consumers = ConsumerMembershipManager(ctx)
        self._membership = MembershipManager(ctx, member_id_suffix or (lambda: str(uuid.uuid4())), consumers.is_changing)
        self._offsets = OffsetManager(ctx, self._membership, consumers)
        membership = self._membership
        runtime.on_timer(HeartbeatDeadline, lambda key, _: membership.on_heartbeat_deadline(key.group_id, key.member_id))
        runtime.on_timer(PendingMemberDeadline,
                         lambda key, _: membership.on_pending_member_deadline(key.group_id, key.member_id))
        runtime.on_timer(JoinDeadline, lambda key, _: membership.on_join_deadline(key.group_id))
        runtime.on_timer(SyncDeadline, lambda key, _: membership.on_sync_deadline(key.group_id))
        runtime.on_timer(OffsetExpiry, lambda _, now: self._offsets.expire_offsets(now))
        runtime.on_timer(ConsumerSessionDeadline,
                         lambda key, _: consumers.on_session_deadline(key.group_id, key.member_id))
        runtime.on_timer(ConsumerRebalanceDeadline,
                         lambda key, _: consumers.on_rebalance_deadline(key.group_id, key.member_id))

    # ================================================================ plumbing (coordinator/runtime.py)

    @property
    def _active(self) -> bool:
        return self._runtime.active

    def _api(self) -> Any:
        return self._runtime.api()

    def _reply(self, callback: Callable[[Any], None], result: Any) -> None:
        self._runtime.reply(callback, result)

    def _append(self, partition: int, records: list[Record], done: Callable[[ErrorCode], None],
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
        non-transactional record (the parameter keeps its original name).
        ``loader.read_partition`` reads them (Kafka's loader rules: see
        ``loader.py``); each group it finds is installed unless one of that
        id is already in memory, its open transactions are tracked for
        ``complete_transaction``, and its members' sessions start.
        """
        with self._api():
            loaded = self._offsets.read_partition(partition, records)
            now = self._clock.now_ms()
            for entry in loaded.groups:
                group = loader.build_group(partition, entry, now)
                if group.group_id in self._groups:
                    log.warning("not loading group %s from the log: it is already in memory", group.group_id)
                    continue
                self._offsets.track_loaded(group)
                self._groups[group.group_id] = group
                if group.consumer is not None:
                    log.info("loaded consumer group %s epoch %d with %d member(s), %d offset(s) and pending "
                             "transactional offsets of %d producer(s)", group.group_id, group.consumer.group_epoch,
                             len(group.consumer.members), len(entry.committed), len(group.active_producers))
                else:
                    log.info("loaded group %s generation %d with %d member(s), %d offset(s) and pending transactional "
                             "offsets of %d producer(s)", group.group_id, group.generation_id, group.size,
                             len(entry.committed), len(group.active_producers))
                self._membership.on_group_loaded(group)
                self._consumers.on_group_loaded(group)

    # ================================================================ membership

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
        """``supports_skip_assignment``: JoinGroup v9+ (KIP-814), see membership.py."""
        with self._api():
            self._membership.join_group(JoinRequest(
                group_id=group_id,
                member_id=member_id,
                group_instance_id=group_instance_id,
                protocol_type=protocol_type,
                protocols=tuple(protocols),
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                require_known_member_id=require_known_member_id,
                client_id=client_id,
                client_host=client_host,
                reason=reason or "not provided",
                callback=callback,
                supports_skip_assignment=supports_skip_assignment,
            ))

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
            self._membership.sync_group(SyncRequest(
                group_id=group_id,
                generation_id=generation_id,
                member_id=member_id,
                group_instance_id=group_instance_id,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
                assignments=assignments,
                callback=callback,
            ))

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        with self._api():
            return self._membership.heartbeat(group_id, generation_id, member_id, group_instance_id)

    def leave_group(self, group_id: str, members: list[LeaveMember], reason: str | None = None) -> LeaveResult:
        with self._api():
            return self._membership.leave_group(group_id, members, reason)

    # ================================================================ KIP-848

    def consumer_group_heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        subscribed_topic_names: tuple[str, ...] | None,
        subscribed_topic_regex: str | None,
        server_assignor: str | None,
        owned: TopicPartitions | None,
        client_id: str,
        client_host: str,
        api_version: int,
        callback: Callable[[HeartbeatResult], None],
    ) -> None:
        """ConsumerGroupHeartbeat (KIP-848): see ``consumer_membership.py``."""
        with self._api():
            self._consumers.heartbeat(HeartbeatRequest(
                group_id=group_id, member_id=member_id, member_epoch=member_epoch, instance_id=instance_id,
                rack_id=rack_id, rebalance_timeout_ms=rebalance_timeout_ms,
                subscribed_topic_names=subscribed_topic_names, subscribed_topic_regex=subscribed_topic_regex,
                server_assignor=server_assignor, owned=owned, client_id=client_id, client_host=client_host,
                api_version=api_version, callback=callback))

    def consumer_group_describe(self, group_ids: list[str]) -> list[ConsumerGroupDescription]:
        """ConsumerGroupDescribe (KIP-848)."""
        with self._api():
            names = {t.topic_id: name for name, t in self._ctx.topics().items()}

            def described(*assignments: Mapping[uuid.UUID, Iterable[int]]) -> DescribedPartitions:
                """Kafka's ConsumerGroupMember.asConsumerGroupDescribeMember: topics that no longer
                exist left out; a member's partitions pending revocation are still its own."""
                merged: dict[uuid.UUID, set[int]] = {}
                for assignment in assignments:
                    for t, ps in assignment.items():
                        if t in names:
                            merged.setdefault(t, set()).update(ps)
                return tuple((t, names[t], tuple(sorted(ps))) for t, ps in sorted(merged.items()) if ps)

            out = []
            for group_id in group_ids:
                # Kafka's GroupCoordinatorService: the empty id is INVALID_GROUP_ID here.
                error = self._ctx.validate_group_status(group_id, allow_empty_id=False)
                group = self._groups.get(group_id)
                if error is not None:
                    out.append(ConsumerGroupDescription(group_id, error))
                    continue
                if group is None or group.consumer is None:
                    message = (f"Group {group_id} not found." if group is None
                               else f"Group {group_id} is not a consumer group.")
                    out.append(ConsumerGroupDescription(group_id, ErrorCode.group_id_not_found, message))
                    continue
                c = group.consumer
                out.append(ConsumerGroupDescription(
                    group_id, ErrorCode.none, state=c.state.value, group_epoch=c.group_epoch,
                    assignment_epoch=c.assignment_epoch,
                    assignor_name=c.preferred_assignor() or self._consumers.default_assignor,
                    members=tuple(
                        ConsumerMemberDescription(
                            m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                            m.subscribed_topic_names, m.subscribed_topic_regex,
                            described(m.assigned, m.pending_revocation),
                            described(c.target.get(m.member_id, {})))
                        for m in c.members.values()
                    ),
                ))
            return out

    # ================================================================ Describe / List

    def describe_groups(self, group_ids: list[str]) -> list[GroupDescription]:
        with self._api():
            out = []
            for group_id in group_ids:
                error = self._ctx.validate_group_status(group_id, allow_empty_id=True)
                if error is not None:
                    out.append(GroupDescription(group_id=group_id, error=error, state=""))
                    continue
                group = self._groups.get(group_id)
                # A KIP-848 group is not a classic group: "Dead" (v6+: GROUP_ID_NOT_FOUND), as Kafka answers.
                out.append(GroupDescription(group_id=group_id, error=ErrorCode.none)
                           if group is None or group.consumer is not None else group.describe())
            return out

    def list_groups(self, states: set[str] | None = None, types: set[str] | None = None) -> list[GroupListing]:
        """``states``: Kafka state names, case-insensitive (ListGroups v4+).
        ``types``: group *types* (ListGroups v5, KIP-848), "classic" or "consumer"."""
        with self._api():
            if not self._active:
                return []
            wanted_states = {s.lower() for s in states} if states else None
            wanted_types = {t.lower() for t in types} if types else None
            listed = [g.overview() for g in self._groups.values() if g.state is not GroupState.DEAD]
            return [
                g for g in listed
                if (wanted_states is None or g.state.lower() in wanted_states)
                and (wanted_types is None or g.group_type in wanted_types)
            ]

    # ================================================================ offsets

    def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        callback: Callable[[dict[TopicPartition, ErrorCode]], None],
        api_version: int = 9,
    ) -> None:
        """``generation_id``: the generation, or a KIP-848 member's epoch (OffsetCommit v9+)."""
        with self._api():
            self._offsets.commit_offsets(OffsetCommitRequest(
                group_id=group_id,
                generation_id=generation_id,
                member_id=member_id,
                group_instance_id=group_instance_id,
                offsets=offsets,
                callback=callback,
                api_version=api_version,
            ))

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
        """TxnOffsetCommit (KIP-98, KIP-447); ``verify(offsets_partition)``
        asks the transaction coordinator whether the group's partition is in
        the producer's transaction (KIP-890 part 1).  See
        ``OffsetManager.commit_transactional_offsets``."""
        with self._api():
            self._offsets.commit_transactional_offsets(TxnOffsetCommitRequest(
                group_id=group_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                generation_id=generation_id,
                member_id=member_id,
                group_instance_id=group_instance_id,
                offsets=offsets,
                callback=callback,
                verify=verify,
            ))

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT (``commit``) or ABORT marker of the producer is durable in
        ``__consumer_offsets`` partition ``partition``: the producer's pending
        offsets in that partition's groups are committed or dropped."""
        with self._api():
            self._offsets.complete_transaction(partition, producer_id, commit)

    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool = False,
        member_id: str | None = None, member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict[TopicPartition, FetchedOffset]]:
        """OffsetFetch: committed offsets only; ``require_stable`` (KIP-447)
        answers UNSTABLE_OFFSET_COMMIT where a commit is pending.  ``member_id`` and
        ``member_epoch`` (v9+): a KIP-848 member's fetch is checked against its epoch."""
        with self._api():
            return self._offsets.fetch_offsets(group_id, partitions, require_stable, member_id, member_epoch)

    def delete_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition],
        callback: Callable[[ErrorCode, dict[TopicPartition, ErrorCode]], None],
    ) -> None:
        """OffsetDelete (KIP-496): not for partitions of topics the group consumes."""
        with self._api():
            self._offsets.delete_offsets(group_id, partitions, callback)

    def delete_groups(self, group_ids: list[str], callback: Callable[[dict[str, ErrorCode]], None]) -> None:
        with self._api():
            self._offsets.delete_groups(group_ids, callback)

    def on_topic_deleted(self, topic: str) -> None:
        with self._api():
            self._offsets.on_topic_deleted(topic)

    # ================================================================ timers

    def tick(self) -> None:
        """Run due timers: session expiry, rebalance and initial-delay deadlines, offset expiry."""
        self._runtime.tick()

    def next_deadline_ms(self) -> int | None:
        return self._runtime.next_deadline_ms()

    # ================================================================ shutdown

    def shutdown(self) -> None:
        with self._api():
            # Waiting joins and syncs are answered while the groups still exist.
            if not self._runtime.shut_down(first=self._membership.shutdown):
                return
            self._consumers.shutdown()
            self._groups.clear()
            self._offsets.shutdown()
