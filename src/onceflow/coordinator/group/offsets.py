"""Committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch, deletion and expiry.

Theory of operation
-------------------
The offset half of Kafka's group coordinator (GroupMetadataManager.scala's
storeOffsets, getOffsets, cleanupGroupMetadata and handleTxnCompletion in
Kafka 3.x; OffsetMetadataManager in Kafka 4).  The coordinator
(``coordinator.py``) calls it inside its API guard, and lends it the groups,
the timers and the reply/append plumbing (``context.py``); it asks the
membership manager (``membership.py``) whether a committer is a current
member and to restart that member's session.  Each group's offsets live in
``metadata.GroupOffsets``; this module writes their records to
``__consumer_offsets`` and applies them once they are durable.

OffsetCommit, TxnOffsetCommit, DeleteGroups and OffsetDelete are answered
when the store's ``done`` says their records are durable; until then they
are the runtime's waiting writes (``coordinator/runtime.py``), which
``shutdown`` answers NOT_COORDINATOR.

Acknowledgements are numbered (``_next_seq``): on one partition the store
acknowledges appends in log order, so the numbers order a group's records
as Kafka's log offsets do (see ``metadata.GroupOffsets``).  Loading numbers
the entries it reads from the same sequence (``read_partition``).

Transactional offset commits (KIP-98, KIP-447)
----------------------------------------------
A transactional producer that consumed records commits the consumer's
offsets inside its transaction (``commit_transactional_offsets``, the
TxnOffsetCommit API).  Their flow:

1. Validation.  ``verify`` (KIP-890 part 1) asks the transaction
   coordinator whether the group's partition is in the producer's ongoing
   transaction.  An unknown group is created (Empty, as Kafka does).  With a
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
   group of that partition with offsets pending for the producer
   (``_txn_groups``, Kafka's openGroupsForProducer), COMMIT turns them into
   committed offsets and ABORT drops them.  A commit never replaces an
   offset that came from a *later* record: Kafka compares log offsets; here
   the acknowledgement sequence does.  So a plain OffsetCommit acknowledged
   after the transactional one wins, one acknowledged before it loses.
4. Restart.  The loader (``loader.py``) replays records and markers in log
   order with the same rules; offsets of transactions still open at the end
   stay pending (the transaction coordinator writes their markers later).

Offset expiry ignores pending transactional offsets (the committed offset
under them may expire; they keep an Empty group alive).  OffsetDelete and
topic deletion drop them with the committed ones; DeleteGroups drops the
whole group (Kafka tombstones only the committed offsets).  Shutdown answers
unacknowledged TxnOffsetCommits NOT_COORDINATOR like other writes.

Removing offsets writes tombstones (Kafka's cleanupGroupMetadata,
``_cleanup_group``): an Empty group left with no offsets dies, and its
metadata record gets a tombstone too.  The ``OffsetExpiry`` timer runs every
``offsets.retention.check.interval.ms`` (first at start-up, as in Kafka).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from ...config import OFFSET_METADATA_MAX_BYTES, OFFSETS_RETENTION_CHECK_INTERVAL_MS, OFFSETS_RETENTION_MINUTES
from ...protocol.errors import ErrorCode
from .. import OFFSETS_TOPIC
from . import loader
from . import log_records as rec
from .consumer_group import validate_offset_commit, validate_offset_fetch
from .consumer_membership import ConsumerMembershipManager, group_tombstones
from .context import GroupContext, OffsetExpiry, Record
from .membership import MembershipManager, validate_member_generation
from .metadata import GroupMetadata, GroupState, PendingTxnOffset
from .types import FetchedOffset, OffsetAndMetadata, StoredEntry, TopicPartition

log = logging.getLogger(__name__)


PartitionCallback = Callable[[dict[TopicPartition, ErrorCode]], None]
DeleteOffsetsCallback = Callable[[ErrorCode, dict[TopicPartition, ErrorCode]], None]


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    """One OffsetCommit (the fields of Kafka's OffsetCommitRequest, and where the answer goes)."""

    group_id: str
    #: -1 and "" for a client that does not use group management.
    generation_id: int
    member_id: str
    group_instance_id: str | None
    offsets: dict[TopicPartition, OffsetAndMetadata]
    callback: PartitionCallback
    #: OffsetCommit's version: v9+ for KIP-848 members; an unknown group answers GROUP_ID_NOT_FOUND from v9.
    api_version: int = 9


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """One TxnOffsetCommit (the fields of Kafka's TxnOffsetCommitRequest, and where the answer goes)."""

    group_id: str
    producer_id: int
    producer_epoch: int
    #: TxnOffsetCommit v3+ (KIP-447): the consumer's generation and member id,
    #: -1 and "" before.
    generation_id: int
    member_id: str
    group_instance_id: str | None
    offsets: dict[TopicPartition, OffsetAndMetadata]
    callback: PartitionCallback
    #: KIP-890 part 1: ``verify(offsets partition)`` asks the transaction
    #: coordinator whether the partition is in the producer's transaction.
    verify: Callable[[int], ErrorCode] | None = None


def _java_string_length(s: str) -> int:
    """Java's ``String.length()``: UTF-16 code units."""
    return len(s.encode("utf-16-le")) // 2


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


class OffsetManager:
    def __init__(self, ctx: GroupContext, membership: MembershipManager, consumers: ConsumerMembershipManager) -> None:
        self._ctx = ctx
        self._groups = ctx.groups
        self._reply = ctx.reply
        self._membership = membership
        self._consumers = consumers
        #: The next acknowledgement sequence number of an offset commit record
        #: (or load position): stands in for log offsets, see metadata.GroupOffsets.
        self._next_seq = 1
        #: producer id -> ids of the groups that may hold transactional offsets
        #: pending for it (Kafka's openGroupsForProducer; a superset: entries
        #: are checked when the transaction completes).
        self._txn_groups: dict[int, set[str]] = {}
        # Kafka runs the first expiration check at start-up, then periodically.
        ctx.timers.set(OffsetExpiry(), ctx.now())

    def _take_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    # ================================================================ loading

    def read_partition(self, partition: int, records: Iterable[StoredEntry]) -> loader.LoadedPartition:
        """The loader's reading of a partition, its entries numbered in the acknowledgement sequence."""
        loaded = loader.read_partition(partition, records, first_position=self._next_seq)
        self._next_seq = loaded.end_position
        return loaded

    def track_loaded(self, group: GroupMetadata) -> None:
        """A loaded group's open transactions: ``complete_transaction`` will settle them."""
        for producer_id in group.active_producers:
            self._txn_groups.setdefault(producer_id, set()).add(group.group_id)

    # ================================================================ OffsetCommit

    def commit_offsets(self, req: OffsetCommitRequest) -> None:
        """OffsetCommit (Kafka's handleCommitOffsets)."""
        group_id, offsets, callback = req.group_id, req.offsets, req.callback
        error = self._ctx.validate_group_status(group_id, allow_empty_id=True)
        if error is not None:
            self._reply(callback, dict.fromkeys(offsets, error))
            return
        group = self._groups.get(group_id)
        if group is None:
            if req.generation_id >= 0:
                # A member of a group this coordinator does not know: reject.
                # From v9 (KIP-848) Kafka says GROUP_ID_NOT_FOUND, before ILLEGAL_GENERATION.
                error = ErrorCode.group_id_not_found if req.api_version >= 9 else ErrorCode.illegal_generation
                self._reply(callback, dict.fromkeys(offsets, error))
                return
            # Not using group management: the group exists for its offsets only.
            log.info("creating simple consumer group %s via manual offset commit", group_id)
            group = GroupMetadata(group_id, self._ctx.now())
            self._groups[group_id] = group
        if group.consumer is not None:
            error = validate_offset_commit(group.consumer, req.member_id, req.group_instance_id, req.generation_id,
                                           self._topic_ids(offsets), transactional=False, api_version=req.api_version)
            if error is not None:
                self._reply(callback, dict.fromkeys(offsets, error))
            else:
                # KIP-848: commits do not keep a member's session; only heartbeats do.
                self._store_offsets(group, offsets, callback)
            return
        error = self._validate_offset_commit(group, req.generation_id, req.member_id, req.group_instance_id)
        if error is not None:
            self._reply(callback, dict.fromkeys(offsets, error))
            return
        state = group.state
        if state is GroupState.EMPTY:
            self._store_offsets(group, offsets, callback)
        elif state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # During PreparingRebalance, commits of the current generation
            # are still accepted: the heartbeat tells the member to rejoin.
            self._membership.schedule_heartbeat(group, group.get(req.member_id))
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
            return validate_member_generation(group, generation_id, member_id, instance_id)
        if transactional:
            # TxnOffsetCommit before v3 carries no member id nor generation.
            return None
        # Generation -1 and no member id, but the group has members: only
        # members may commit.
        return ErrorCode.unknown_member_id

    def _topic_ids(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> list[tuple[uuid.UUID | None, int]]:
        topics = self._ctx.topics()
        return [(topics[t].topic_id if t in topics else None, p) for t, p in offsets]

    def _metadata_fits(self, metadata: str | None) -> bool:
        return metadata is None or _java_string_length(metadata) <= self._ctx.config[OFFSET_METADATA_MAX_BYTES]

    def _store_offsets(
        self,
        group: GroupMetadata,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        callback: PartitionCallback,
        *,
        txn: tuple[int, int] | None = None,
    ) -> None:
        """Kafka's storeOffsets.  ``txn``: (producer id, producer epoch) of a
        transactional commit, written as that producer's transactional batch
        and kept pending for it (not committed) once acknowledged."""
        now = self._ctx.now()
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

        records: list[Record] = [
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
        op = self._ctx.register(lambda: self._reply(callback, statuses(ErrorCode.not_coordinator)))

        def done(error: ErrorCode) -> None:
            if not self._ctx.unregister(op):
                return
            ok = error is ErrorCode.none
            # Acknowledgements of one partition arrive in log order: the
            # sequence orders this record against the group's other commits.
            seq = self._take_seq() if ok else None
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

        self._ctx.append(self._ctx.partition_for(group.group_id), records, done, txn=txn)

    def _forget_txn_group(self, producer_id: int, group_id: str) -> None:
        group_ids = self._txn_groups.get(producer_id)
        if group_ids is not None:
            group_ids.discard(group_id)
            if not group_ids:
                del self._txn_groups[producer_id]

    # ================================================================ TxnOffsetCommit

    def commit_transactional_offsets(self, req: TxnOffsetCommitRequest) -> None:
        """TxnOffsetCommit (KIP-98; Kafka's handleTxnCommitOffsets).

        The offsets are written as a transactional batch of the producer and
        stay *pending* for it (invisible to OffsetFetch, UNSTABLE_OFFSET_COMMIT
        with require_stable) until ``complete_transaction`` reports the
        transaction's marker.  Unlike OffsetCommit: an unknown group is
        created (Empty) before validation if the commit names no generation (with
        one it is ILLEGAL_GENERATION, as for OffsetCommit), the group's state does not matter
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
        group_id, producer_id = req.group_id, req.producer_id
        error = self._ctx.validate_group_status(group_id, allow_empty_id=False)
        if error is None and producer_id < 0:
            # Not a transactional producer: the batch could not be one.
            error = ErrorCode.invalid_producer_id_mapping
        if error is None and req.verify is not None:
            verified = req.verify(self._ctx.partition_for(group_id))
            if verified is not ErrorCode.none:
                log.info("transactional offset commit of producer %d for group %s refused: %s", producer_id,
                         group_id, verified.name)
                error = verified
        if error is not None:
            self._reply(req.callback, dict.fromkeys(req.offsets, error))
            return
        group = self._groups.get(group_id)
        if group is None and req.generation_id >= 0:
            # A member's commit (KIP-447) for a group this coordinator does not know:
            # Kafka's group coordinator (OffsetMetadataManager.validateTransactionalOffsetCommit)
            # answers ILLEGAL_GENERATION and creates nothing, as for OffsetCommit.
            self._reply(req.callback, dict.fromkeys(req.offsets, ErrorCode.illegal_generation))
            return
        if group is None:
            log.info("creating group %s via transactional offset commit of producer %d", group_id, producer_id)
            group = GroupMetadata(group_id, self._ctx.now())
            self._groups[group_id] = group
        if group.consumer is not None:
            error = validate_offset_commit(group.consumer, req.member_id, req.group_instance_id, req.generation_id,
                                           self._topic_ids(req.offsets), transactional=True, api_version=-1)
        else:
            error = self._validate_offset_commit(group, req.generation_id, req.member_id, req.group_instance_id,
                                                 transactional=True)
        if error is not None:
            self._reply(req.callback, dict.fromkeys(req.offsets, error))
            return
        self._store_offsets(group, req.offsets, req.callback, txn=(producer_id, req.producer_epoch))

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT (``commit``) or ABORT marker of the producer is durable in
        ``__consumer_offsets`` partition ``partition`` (Kafka's
        handleTxnCompletion): in every group of that partition the producer's
        pending offsets become committed -- each only if its record is newer
        than the one behind the committed offset -- or are dropped."""
        if not self._ctx.is_active():
            return
        group_ids = self._txn_groups.get(producer_id)
        if not group_ids:
            return
        for group_id in [g for g in group_ids if self._ctx.partition_for(g) == partition]:
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
        self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool = False,
        member_id: str | None = None, member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict[TopicPartition, FetchedOffset]]:
        """Offsets are returned whatever the group's state: a group may use
        Kafka only to store offsets.  Only committed offsets are returned:
        transactional commits count once their transaction has committed.
        ``require_stable`` (KIP-447): a partition with a commit still in
        flight, or with transactional offsets pending in the group, answers
        UNSTABLE_OFFSET_COMMIT (retriable); without it the committed offset
        is returned."""
        error = self._ctx.validate_group_status(group_id, allow_empty_id=True)
        if error is not None:
            return error, {}
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.none, {tp: FetchedOffset(-1) for tp in (partitions or [])}
        if group.consumer is not None:
            error = validate_offset_fetch(group.consumer, member_id, member_epoch)
            if error is not None:
                return error, {}
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

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition], callback: DeleteOffsetsCallback) -> None:
        """OffsetDelete (KIP-496): not for partitions of topics the group consumes."""
        error = self._ctx.validate_group_status(group_id, allow_empty_id=False)
        if error is not None:
            self._reply2(callback, error, {})
            return
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            self._reply2(callback, ErrorCode.group_id_not_found, {})
            return
        partition_errors: dict[TopicPartition, ErrorCode] = {}
        if group.is_empty():
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
        op = self._ctx.register(lambda: self._reply2(callback, ErrorCode.not_coordinator, {}))

        def done(error: ErrorCode) -> None:
            if not self._ctx.unregister(op):
                return
            if error is ErrorCode.none:
                self._reply2(callback, ErrorCode.none, partition_errors)
            else:
                log.warning("failed to write offset tombstones of group %s: %s", group_id, error.name)
                self._reply2(callback, _map_offset_commit_error(error), {})

        self._ctx.append(self._ctx.partition_for(group_id), records, done)

    def _reply2(self, callback: DeleteOffsetsCallback, error: ErrorCode, partitions: dict[TopicPartition, ErrorCode]) -> None:
        self._reply(lambda args: callback(*args), (error, partitions))

    # ================================================================ DeleteGroups

    def delete_groups(self, group_ids: list[str], callback: Callable[[dict[str, ErrorCode]], None]) -> None:
        """DeleteGroups (Kafka's handleDeleteGroups): only Empty groups; their
        offsets and metadata get tombstones."""
        errors: dict[str, ErrorCode] = {}
        tombstones: dict[int, list[Record]] = {}
        deleted_by_partition: dict[int, list[str]] = {}
        for group_id in dict.fromkeys(group_ids):
            error = self._ctx.validate_group_status(group_id, allow_empty_id=True)
            if error is not None:
                errors[group_id] = error
                continue
            group = self._groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                errors[group_id] = ErrorCode.group_id_not_found
            elif group.is_empty() and not self._consumers.is_changing(group_id):
                records = self._cleanup_group(group, group.remove_all_offsets(), dead=True)
                partition = self._ctx.partition_for(group_id)
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
        op = self._ctx.register(lambda: self._reply(
            callback, {**errors, **{g: ErrorCode.not_coordinator for gs in deleted_by_partition.values() for g in gs}}))

        def done_for(partition: int) -> Callable[[ErrorCode], None]:
            def done(error: ErrorCode) -> None:
                if not self._ctx.is_waiting(op):
                    return
                result = ErrorCode.none if error is ErrorCode.none else _map_offset_commit_error(error)
                if error is not ErrorCode.none:
                    log.warning("failed to write tombstones of deleted groups %s: %s",
                                deleted_by_partition[partition], error.name)
                for group_id in deleted_by_partition[partition]:
                    errors[group_id] = result
                outstanding.discard(partition)
                if not outstanding and self._ctx.unregister(op):
                    self._reply(callback, errors)

            return done

        for partition in deleted_by_partition:
            self._ctx.append(partition, tombstones[partition], done_for(partition))

    # ================================================================ expiry, deleted topics

    def expire_offsets(self, now: int) -> None:
        """The ``OffsetExpiry`` timer (Kafka's cleanupGroupMetadata run by offsets.retention.check.interval.ms)."""
        retention_ms = self._ctx.config[OFFSETS_RETENTION_MINUTES] * 60_000
        tombstones: dict[int, list[Record]] = {}
        removed_total = 0
        for group in list(self._groups.values()):
            removed = group.remove_expired_offsets(now, retention_ms)
            removed_total += len(removed)
            records = self._cleanup_group(group, removed)
            if records:
                tombstones.setdefault(self._ctx.partition_for(group.group_id), []).extend(records)
        if removed_total:
            log.info("removed %d expired offsets", removed_total)
        self._append_tombstones(tombstones, "expired offsets and groups")
        self._ctx.timers.set(OffsetExpiry(), now + self._ctx.config[OFFSETS_RETENTION_CHECK_INTERVAL_MS])

    def on_topic_deleted(self, topic: str) -> None:
        if not self._ctx.is_active():
            return
        tombstones: dict[int, list[Record]] = {}
        for group in list(self._groups.values()):
            tps = [tp for tp in group.offsets.partitions() if tp[0] == topic]
            if not tps:
                continue
            records = self._cleanup_group(group, group.remove_offsets(tps))
            if records:
                tombstones.setdefault(self._ctx.partition_for(group.group_id), []).extend(records)
        self._append_tombstones(tombstones, f"offsets of deleted topic {topic}")

    def _cleanup_group(self, group: GroupMetadata, removed: dict[TopicPartition, OffsetAndMetadata], *,
                       dead: bool = False) -> list[Record]:
        """Kafka's cleanupGroupMetadata for one group: tombstones for the
        removed offsets; an empty group left with no offsets dies (``dead``:
        it is being deleted anyway), and its records get tombstones too: the
        classic metadata (when any was ever written) or every record of a
        KIP-848 group."""
        group_id = group.group_id
        out: list[Record] = [
            (rec.encode_offset_commit_key(rec.OffsetCommitKey(group_id, topic, partition)), None)
            for topic, partition in removed
        ]
        if group.is_empty() and (dead or not group.has_offsets()) and not self._consumers.is_changing(group_id):
            log.info("group %s transitioned to Dead in generation %d", group_id, group.generation_id)
            group.transition_to(GroupState.DEAD, self._ctx.now())
        if group.state is GroupState.DEAD and self._groups.get(group_id) is group:
            self._drop_group(group)
            if group.consumer is not None:
                out.extend(group_tombstones(group_id, group.consumer))
            elif group.generation_id > 0:
                # Generation 0 groups only ever stored offsets: no metadata record.
                out.append((rec.encode_group_metadata_key(rec.GroupMetadataKey(group_id)), None))
        return out

    def _drop_group(self, group: GroupMetadata) -> None:
        del self._groups[group.group_id]
        for producer_id in group.active_producers:
            self._forget_txn_group(producer_id, group.group_id)
        self._membership.forget_group(group)
        self._consumers.forget(group)

    def _append_tombstones(self, tombstones: dict[int, list[Record]], what: str) -> None:
        """Fire-and-forget: a lost tombstone is written again by the next cleanup."""
        for partition, records in tombstones.items():
            if not records:
                continue

            def done(error: ErrorCode, partition: int = partition, n: int = len(records)) -> None:
                if error is not ErrorCode.none:
                    log.warning("failed to append %d tombstone(s) for %s to %s-%d: %s",
                                n, what, OFFSETS_TOPIC, partition, error.name)

            self._ctx.append(partition, records, done)

    # ================================================================ shutdown

    def shutdown(self) -> None:
        self._txn_groups.clear()
