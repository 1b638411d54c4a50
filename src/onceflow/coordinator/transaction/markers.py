"""Carrying out a decided transaction: its markers, then its Complete record.

Theory of operation (Kafka's TransactionMarkerChannelManager and its
TransactionMarkerRequestCompletionHandler, for a single node)
-------------------------------------------------------------------------
Once a transaction's PrepareCommit / PrepareAbort record is durable its
outcome is decided: the coordinator (``coordinator.py``) has answered EndTxn
and hands the transaction here (``start``), with its CompleteCommit /
CompleteAbort transition already prepared.  Nothing here decides anything;
it writes what was decided until it is written:

1. **Markers.**  A COMMIT or ABORT marker goes to every partition of the
   transaction, in one ``MarkerWriter.write_markers`` call carrying the
   producer id and epoch and the coordinator epoch.  Each partition's
   outcome is one of: done (``_MARKER_DONE``: written, or the partition is
   gone or could not hold the producer's data either), and the partition
   leaves the transaction; obsolete (``_MARKER_OBSOLETE``), and the whole
   round stops, as Kafka's completion handler stops (a reload of the
   partition completes the transaction); anything else, and the partitions
   left are written again after ``MARKER_RETRY_BACKOFF_MS`` (the
   ``MarkerRetry`` timer).
2. **Completion.**  When no partition is left, the Complete record is
   appended (``_append_completion``); it is applied once it is in the log,
   not once it is durable, for the reasons given there, and appended again
   every ``COMPLETION_RETRY_BACKOFF_MS`` (the ``CompletionRetry`` timer)
   until it is.  Then ``on_completed(transactional_id)`` tells the
   coordinator, which answers the requests parked behind the transaction.

The work belongs to one ``TransactionMetadata`` object: when the cache no
longer holds that object (the partition was reloaded), the work is dropped
and the load rolls the transaction forward again (``forget_partition``, at
the start of every load, is Kafka's onElection).  Marker and store
completions come in through the coordinator runtime's guard and the timers
fire from its ``tick``: see ``coordinator/runtime.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ...protocol.errors import ErrorCode
from ..runtime import CoordinatorRuntime
from .metadata import TransactionMetadata, TxnTransitMetadata
from .state_manager import TransactionStateManager
from .types import MarkerWriter, TopicPartition

log = logging.getLogger(__name__)

#: Back-off before markers that failed are written again (Kafka's marker
#: sender retries on its next poll, after the network client's back-off).
MARKER_RETRY_BACKOFF_MS = 100
#: Back-off before a Complete record whose append failed retriably is appended again.
COMPLETION_RETRY_BACKOFF_MS = 100


@dataclass(frozen=True, slots=True)
class MarkerRetry:
    """Timer: write the markers of a completing transaction again."""

    transactional_id: str


@dataclass(frozen=True, slots=True)
class CompletionRetry:
    """Timer: append the Complete record of a transaction again."""

    transactional_id: str


#: Marker outcomes after which the partition needs no marker any more.
_MARKER_DONE = frozenset(
    {
        ErrorCode.none,
        # The partition is gone (Kafka: no leader any more -> "likely deleted").
        ErrorCode.unknown_topic_or_partition,
        # Kafka: the producer could not have written there either.
        ErrorCode.unsupported_for_message_format,
        ErrorCode.unsupported_version,
    }
)
#: Marker outcomes that make the whole marker round obsolete (Kafka stops sending).
_MARKER_OBSOLETE = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})


@dataclass(eq=False)
class _PendingCompletion:
    """A transaction whose Prepare record is durable, on its way to Complete
    (Kafka's PendingCompleteTxn)."""

    transactional_id: str
    metadata: TransactionMetadata
    #: The prepared CompleteCommit / CompleteAbort transition.
    transit: TxnTransitMetadata
    commit: bool


class TransactionMarkerChannelManager:
    def __init__(
        self,
        runtime: CoordinatorRuntime,
        state: TransactionStateManager,
        writer: MarkerWriter,
        coordinator_epoch: int,
        on_completed: Callable[[str], None],
    ) -> None:
        self._runtime = runtime
        self._timers = runtime.timers
        self._state = state
        self._writer = writer
        self._coordinator_epoch = coordinator_epoch
        self._on_completed = on_completed
        #: Transactions whose markers are being written (Kafka's transactionsWithPendingMarkers).
        self._pending_markers: dict[str, _PendingCompletion] = {}
        #: Complete records waiting to be appended again.
        self._completion_retries: dict[str, _PendingCompletion] = {}
        runtime.on_timer(MarkerRetry, self._on_marker_retry)
        runtime.on_timer(CompletionRetry, self._on_completion_retry)

    def forget_partition(self, partition: int) -> None:
        """Kafka's onElection: forget marker work left from an earlier load of the partition."""
        for pending_map, timer in ((self._pending_markers, MarkerRetry), (self._completion_retries, CompletionRetry)):
            for tid in [t for t in pending_map if self._state.partition_for(t) == partition]:
                del pending_map[tid]
                self._timers.cancel(timer(tid))

    def start(self, transactional_id: str, md: TransactionMetadata, transit: TxnTransitMetadata,
              commit: bool) -> None:
        """Write the markers of a decided transaction, then ``transit`` (its Complete record)."""
        if not self._runtime.active or self._state.get(transactional_id) is not md:
            return
        pending = _PendingCompletion(transactional_id, md, transit, commit)
        previous = self._pending_markers.get(transactional_id)
        if previous is not None:
            log.info("replacing pending markers of transactional id %r", transactional_id)
        self._pending_markers[transactional_id] = pending
        self._timers.cancel(MarkerRetry(transactional_id))
        self._send_markers(pending)

    def shutdown(self) -> None:
        self._pending_markers.clear()
        self._completion_retries.clear()

    # ================================================================ markers

    def _send_markers(self, pending: _PendingCompletion) -> None:
        md = pending.metadata
        partitions = frozenset(md.topic_partitions)
        if not partitions:
            self._maybe_write_completion(pending)
            return
        log.debug("writing %s markers of transactional id %r (producer %d epoch %d) to %s",
                  "COMMIT" if pending.commit else "ABORT", pending.transactional_id, md.producer_id,
                  md.producer_epoch, sorted(partitions), extra={"transactional_id": pending.transactional_id})
        self._writer.write_markers(
            md.producer_id,
            md.producer_epoch,
            self._coordinator_epoch,
            pending.commit,
            partitions,
            lambda results: self._runtime.guarded(lambda: self._on_markers_written(pending, partitions, results)),
        )

    def _on_markers_written(
        self,
        pending: _PendingCompletion,
        sent: frozenset[TopicPartition],
        results: dict[TopicPartition, ErrorCode],
    ) -> None:
        tid = pending.transactional_id
        if not self._runtime.active or self._pending_markers.get(tid) is not pending:
            return  # cancelled (reload, shutdown)
        md = pending.metadata
        if self._state.get(tid) is not md:
            del self._pending_markers[tid]
            return
        retry: list[TopicPartition] = []
        obsolete: ErrorCode | None = None
        for tp in sorted(sent):
            error = results.get(tp)
            if error is None:
                log.warning("marker outcome for %s of transactional id %r missing; retrying it", tp, tid)
                retry.append(tp)
            elif error in _MARKER_DONE:
                if error is not ErrorCode.none:
                    log.info("marker for %s of transactional id %r: %s; the partition no longer needs it",
                             tp, tid, error.name)
                md.remove_partition(tp)
            elif error in _MARKER_OBSOLETE:
                obsolete = error
            else:
                log.info("marker for %s of transactional id %r failed: %s; retrying", tp, tid, error.name)
                retry.append(tp)
        if obsolete is not None:
            # Kafka's TransactionMarkerRequestCompletionHandler: the markers are
            # obsolete; stop sending (a reload of the partition completes it).
            log.error("markers of transactional id %r failed permanently (%s); no more markers are sent",
                      tid, obsolete.name)
            del self._pending_markers[tid]
            return
        if retry:
            self._timers.set(MarkerRetry(tid), self._runtime.now() + MARKER_RETRY_BACKOFF_MS)
            return
        self._maybe_write_completion(pending)

    def _on_marker_retry(self, key: MarkerRetry, now: int) -> None:
        pending = self._pending_markers.get(key.transactional_id)
        if pending is not None and self._state.get(key.transactional_id) is pending.metadata:
            self._send_markers(pending)

    # ================================================================ completion

    def _maybe_write_completion(self, pending: _PendingCompletion) -> None:
        if pending.metadata.topic_partitions:
            return
        tid = pending.transactional_id
        if self._pending_markers.get(tid) is pending:
            del self._pending_markers[tid]
        self._append_completion(pending)

    def _append_completion(self, pending: _PendingCompletion) -> None:
        """Append the Complete record; retried until it is in the log.

        It is applied once it is in the log, not once it is durable
        (``durable=False``): it promises nothing to anyone.  The outcome was
        promised when the Prepare record became durable, and every marker is
        durable before Complete is written, so a crash that loses Complete
        only makes the next load roll the transaction forward again (the
        markers are written twice; partitions accept that).  Whatever the
        coordinator does next that promises something -- the next
        transaction's Ongoing, an epoch bump, a tombstone -- is a later record
        of the same partition, and the fsync that makes it durable makes
        Complete durable first.  This takes one fsync round off the path from
        one transaction to the next, the path a producer committing in a loop
        waits on.  (Kafka applies Complete once it is replicated; it never
        waits for a disk.)

        Kafka retries COORDINATOR_NOT_AVAILABLE and gives up on NOT_COORDINATOR
        (the broker that loads the partition next rolls the transaction
        forward).  A single node has no such successor: as long as the cache
        still holds this metadata we keep retrying every error (a reload of
        the partition replaces the metadata and takes over).
        """
        tid = pending.transactional_id
        if not self._runtime.active or self._state.get(tid) is not pending.metadata:
            return

        def on_appended(error: ErrorCode) -> None:
            if error is ErrorCode.none:
                log.debug("completed the transaction of transactional id %r: %s", tid, pending.transit.txn_state,
                          extra={"transactional_id": tid})
                self._on_completed(tid)
                return
            if self._state.get(tid) is not pending.metadata:
                log.info("transactional id %r was reloaded while appending %s; the load completes it",
                         tid, pending.transit.txn_state)
                return
            level = logging.INFO if error is ErrorCode.coordinator_not_available else logging.WARNING
            log.log(level, "appending %s for transactional id %r failed (%s); retrying",
                    pending.transit.txn_state, tid, error.name)
            self._completion_retries[tid] = pending
            self._timers.set(CompletionRetry(tid), self._runtime.now() + COMPLETION_RETRY_BACKOFF_MS)

        self._state.append_transaction_to_log(tid, pending.transit, on_appended, retry_on_error=lambda error: True,
                                              durable=False)

    def _on_completion_retry(self, key: CompletionRetry, now: int) -> None:
        pending = self._completion_retries.pop(key.transactional_id, None)
        if pending is not None:
            self._append_completion(pending)
