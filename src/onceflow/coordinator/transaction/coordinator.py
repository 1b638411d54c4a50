"""The transaction coordinator (Kafka's TransactionCoordinator, sans I/O): the decisions.

Theory of operation
-------------------
A transactional producer talks to the coordinator that owns its
transactional id (``partition_for``: the id's partition of
``__transaction_state``).  The coordinator keeps one ``TransactionMetadata``
per id (``state_manager.TransactionStateManager``) and drives it through
Kafka's state machine (``metadata.TransactionState``; its diagram is in
``docs/state-diagrams.md``).  This module makes the decisions; the state
manager persists them, ``markers.py`` carries out a decided transaction and
``timeouts.py`` runs the periodic sweeps:

* InitProducerId (``init_producer_id``) registers the id (a new producer id,
  epoch 0, Empty) or bumps its epoch, fencing the previous instance.  If the
  previous instance left a transaction Ongoing, it is first aborted with a
  bumped epoch (PrepareEpochFence -> PrepareAbort, markers, CompleteAbort)
  and the new instance is told CONCURRENT_TRANSACTIONS until that is done;
  its retry then bumps the epoch once more.  When the epochs of a producer
  id are exhausted a new producer id is allocated (KIP-360), and a producer
  recovering from an abortable error may pass its current id/epoch to keep
  its identity (KIP-360 retries).
* AddPartitionsToTxn / AddOffsetsToTxn (``add_partitions``, ``add_offsets``)
  make the id Ongoing and record the partitions; the transaction's timeout
  runs from the first partition added.  One that arrives while the previous
  transaction is completing waits for it, briefly (``_park``).
* EndTxn (``end_txn``) persists PrepareCommit/PrepareAbort -- the point of no
  return -- answers the producer, and hands the transaction to
  ``markers.TransactionMarkerChannelManager``, which writes a COMMIT/ABORT
  marker to every partition and then the CompleteCommit/CompleteAbort
  record, retrying until both are written.
* The produce path and TxnOffsetCommit ask ``partition_in_transaction``
  whether a transactional write may be appended to a partition (KIP-890
  part 1 verification).
* ``timeouts.TransactionTimeouts`` aborts the transactions open past their
  timeout (through this module's EndTxn path, with a fenced epoch) and
  expires idle transactional ids.
* DescribeTransactions / ListTransactions (KIP-664) read the cache.

Every change follows prepare -> persist -> complete (``metadata.py``): the
metadata is only changed once the store reports its record durable (a
Complete record: once it is in the log, see ``markers.py``); while a change
is pending other requests for the id get CONCURRENT_TRANSACTIONS.

Loading (``load_partition``) replays a partition and rolls forward what was
decided: a transaction found in PrepareCommit/PrepareAbort gets its markers
(re)written and then its Complete record.  Ongoing transactions just wait for
their timeout.

Every public method, store and marker completion and timer runs on the
coordinator runtime (``coordinator/runtime.py``: callbacks answered exactly
once through the outbox, shutdown answering what waits NOT_COORDINATOR,
typed timers fired by ``tick``).  EndTxn is answered before its markers are
sent, as Kafka does: the markers start as an internal step (``then``),
queued after the answer.

This implements transaction version 0 as Kafka 3.x/4.x serve it to clients
that do not use KIP-890 part 2 (EndTxn does not bump the epoch).  Errors are
Kafka's as the coordinator produces them; the request handlers map
PRODUCER_FENCED to INVALID_PRODUCER_EPOCH for old request versions
(InitProducerId < v4, AddPartitionsToTxn / AddOffsetsToTxn / EndTxn < v2),
as KafkaApis does.  Kafka outcomes are ``ErrorCode`` values; exceptions are
bugs.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ...clock import Clock
from ...config import BrokerConfig
from ...metrics.stats import TxnStats
from ...protocol.errors import ErrorCode
from ..runtime import CoordinatorRuntime
from .markers import TransactionMarkerChannelManager
from .metadata import (
    MAX_PRODUCER_EPOCH,
    TV_2,
    TransactionMetadata,
    TransactionState,
    TransactionStateError,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from .state_manager import TransactionStateManager
from .timeouts import TransactionTimeouts
from .types import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    ListTransactionsResult,
    MarkerWriter,
    ProducerIdAllocator,
    TopicPartition,
    TransactionDescription,
    TxnLogStore,
)

log = logging.getLogger(__name__)

S = TransactionState

#: How long an AddPartitionsToTxn / AddOffsetsToTxn may wait for the id's previous transaction
#: to complete before it is answered CONCURRENT_TRANSACTIONS after all (see ``_park``).
PARKED_MAX_MS = 500
#: At most this many requests of one id wait at once; more are answered at once.
PARKED_MAX_PER_ID = 8


@dataclass(frozen=True, slots=True)
class ParkedExpiry:
    """Timer: the requests parked behind a completing transaction waited long enough."""

    transactional_id: str


@dataclass(frozen=True, slots=True)
class _Parked:
    """A request waiting for its id's previous transaction to complete."""

    retry: Callable[[], None]
    give_up: Callable[[], None]


InitProducerIdCallback = Callable[[ErrorCode, int, int], None]
#: EndTxn's answer: (error, producer id, producer epoch), the id and epoch the producer goes on with.
EndTxnCallback = Callable[[ErrorCode, int, int], None]


class TransactionCoordinator:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        store: TxnLogStore,
        producer_ids: ProducerIdAllocator,
        markers: MarkerWriter,
        *,
        coordinator_epoch: int = 0,
        on_timer_set: Callable[[int], None] | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self._producer_ids = producer_ids
        self._coordinator_epoch = coordinator_epoch
        self._runtime = runtime = CoordinatorRuntime("transaction coordinator", log, clock, on_timer_set)
        self._timers = runtime.timers
        self._state = TransactionStateManager(config, clock, store, guard=runtime.guarded)
        self._markers = TransactionMarkerChannelManager(runtime, self._state, markers, coordinator_epoch,
                                                        on_completed=self._resume_parked)
        #: Requests waiting for their id's transaction to complete (``_park``).
        self._parked: dict[str, list[_Parked]] = {}
        self._timeouts = TransactionTimeouts(
            config, runtime, self._state,
            abort=lambda tid, producer_id, producer_epoch, done: self._end_transaction(
                tid, producer_id, producer_epoch, commit=False, from_client=False,
                client_transaction_version=self._state.transaction_version, done=lambda error, *_: done(error)),
        )
        runtime.on_timer(ParkedExpiry, self._on_parked_expiry)

    @property
    def stats(self) -> TxnStats:
        """Commits, aborts, timeouts, fenced instances, EndTxn -> Complete latency (``metrics``)."""
        return self._state.stats

    # ================================================================ plumbing (coordinator/runtime.py)

    @property
    def _active(self) -> bool:
        return self._runtime.active

    def _api(self) -> Any:
        return self._runtime.api()

    def _reply(self, callback: Callable[..., None], *args: Any) -> None:
        self._runtime.reply(callback, *args)

    def _then(self, action: Callable[[], None]) -> None:
        self._runtime.then(action)

    def _deferred(self, callback: Callable[..., None], *shutdown_args: Any) -> Callable[..., None]:
        return self._runtime.deferred(callback, *shutdown_args)

    def _now(self) -> int:
        return self._clock.now_ms()

    def _allocate_producer_id(self) -> int | ErrorCode:
        try:
            return int(self._producer_ids.allocate())
        except OSError as exc:
            # The next block could not be reserved on disk (full): retriable, as
            # Kafka answers while its ProducerIdManager waits for a new block.
            log.error("cannot reserve producer ids: %s", exc)
            return ErrorCode.coordinator_load_in_progress
        except Exception:
            log.exception("producer id allocation failed")
            return ErrorCode.unknown_server_error

    # ================================================================ inspection

    def partition_for(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition of an id (Kafka: Utils.abs(hashCode) % partitions)."""
        return self._state.partition_for(transactional_id)

    def transaction(self, transactional_id: str) -> TransactionMetadata | None:
        """The in-memory metadata (for inspection only; do not mutate)."""
        return self._state.get(transactional_id)

    def transactions(self) -> list[TransactionMetadata]:
        """Every cached transactional id's metadata (for inspection only; do not mutate)."""
        return self._state.all()

    def transactional_ids(self) -> list[str]:
        return sorted(md.transactional_id for md in self._state.all())

    @property
    def coordinator_epoch(self) -> int:
        return self._coordinator_epoch

    # ================================================================ loading

    def load_partition(self, partition: int, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Replay one ``__transaction_state`` partition (oldest record first), then
        roll forward the transactions found in PrepareCommit / PrepareAbort."""
        with self._api():
            if not self._active:
                log.warning("not loading __transaction_state-%d: the coordinator is shut down", partition)
                return
            self._markers.forget_partition(partition)
            loaded = self._state.load_partition(partition, records)
            for tid in [t for t in self._parked if self.partition_for(t) == partition]:
                self._resume_parked(tid)  # answered from what the load found
            now = self._now()
            for md in loaded:
                if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    commit = md.state is S.PREPARE_COMMIT
                    transit = md.prepare_complete(now)
                    log.info("rolling forward the %s of transactional id %r after loading partition %d",
                             "commit" if commit else "abort", md.transactional_id, partition)
                    self._then(functools.partial(self._markers.start, md.transactional_id, md, transit, commit))

    # ================================================================ InitProducerId

    def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
        callback: InitProducerIdCallback,
    ) -> None:
        """Answer ``callback(error, producer_id, producer_epoch)`` (-1, -1 on error)."""
        with self._api():
            def fail(error: ErrorCode) -> None:
                self._reply(callback, error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)

            if not self._active:
                fail(ErrorCode.coordinator_not_available if transactional_id is None else ErrorCode.not_coordinator)
                return
            # KafkaApis: an id without an epoch (or the reverse) is malformed.
            if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
                fail(ErrorCode.invalid_request)
                return
            if transactional_id is None:
                # Idempotent producer: always a fresh producer id, nothing is kept.
                pid = self._allocate_producer_id()
                if isinstance(pid, ErrorCode):
                    fail(pid)
                else:
                    self._reply(callback, ErrorCode.none, pid, 0)
                return
            if transactional_id == "":
                fail(ErrorCode.invalid_request)
                return
            if not self._state.validate_transaction_timeout_ms(transaction_timeout_ms):
                fail(ErrorCode.invalid_transaction_timeout)
                return
            expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)

            md = self._state.get(transactional_id)
            if md is None:
                pid = self._allocate_producer_id()
                if isinstance(pid, ErrorCode):
                    fail(pid)
                    return
                # As Kafka: the new id enters the cache at once (epoch -1, not
                # persisted); the Empty record below gives it epoch 0.
                md = self._state.put_if_absent(
                    TransactionMetadata(
                        transactional_id,
                        pid,
                        txn_timeout_ms=transaction_timeout_ms,
                        state=S.EMPTY,
                        txn_last_update_timestamp=self._now(),
                    )
                )

            # A new instance (no id and epoch of its own) taking over an initialized id fences the old one.
            takes_over = expected is None and md.producer_epoch >= 0
            result = self._prepare_init_producer_id_transit(md, transaction_timeout_ms, expected)
            if isinstance(result, ErrorCode):
                fail(result)
                return
            answer = self._deferred(callback, ErrorCode.not_coordinator, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            transit = result
            if transit.txn_state is S.PREPARE_EPOCH_FENCE:
                # Abort the previous instance's transaction first; the client
                # retries on CONCURRENT_TRANSACTIONS and its retry bumps again.
                def after_abort(error: ErrorCode, *_: int) -> None:
                    answer(ErrorCode.concurrent_transactions if error is ErrorCode.none else error,
                           NO_PRODUCER_ID, NO_PRODUCER_EPOCH)

                log.info("InitProducerId for %r: aborting the ongoing transaction of producer %d epoch %d first",
                         transactional_id, md.producer_id, md.producer_epoch, extra={"transactional_id": transactional_id})
                # Not the client's abort: the server's transaction version says how (KAFKA-19367).
                self._end_transaction(transactional_id, transit.producer_id, transit.producer_epoch,
                                      commit=False, from_client=False,
                                      client_transaction_version=self._state.transaction_version, done=after_abort)
                return

            def on_appended(error: ErrorCode) -> None:
                if error is ErrorCode.none:
                    log.info("initialized transactional id %r with producer id %d epoch %d%s",
                             transactional_id, transit.producer_id, transit.producer_epoch,
                             " (the previous instance is fenced)" if takes_over else "",
                             extra={"transactional_id": transactional_id})
                    self._state.stats.fenced += takes_over
                    answer(ErrorCode.none, transit.producer_id, transit.producer_epoch)
                else:
                    answer(error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)

            self._state.append_transaction_to_log(transactional_id, transit, on_appended)

    def _is_valid_producer_id(self, md: TransactionMetadata, expected: tuple[int, int]) -> bool:
        """KIP-360: may a producer presenting ``expected`` (id, epoch) re-initialise?"""
        expected_id, expected_epoch = expected
        return (
            # The metadata was just created: a producer recovering from UNKNOWN_PRODUCER_ID.
            md.producer_epoch == NO_PRODUCER_EPOCH
            # Same producer id: the epoch is checked when it is bumped.
            or expected_id == md.producer_id
            # A retry of a bump that rotated the producer id (epochs exhausted).
            or (expected_id == md.previous_producer_id and is_epoch_exhausted(expected_epoch))
        )

    def _prepare_init_producer_id_transit(
        self, md: TransactionMetadata, timeout_ms: int, expected: tuple[int, int] | None
    ) -> TxnTransitMetadata | ErrorCode:
        if md.pending_transition_in_progress:
            return ErrorCode.concurrent_transactions
        if expected is not None and not self._is_valid_producer_id(md, expected):
            return ErrorCode.producer_fenced
        if md.state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return ErrorCode.concurrent_transactions
        if md.state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
            if md.is_producer_epoch_exhausted and (expected is None or expected[1] == md.producer_epoch):
                new_pid = self._allocate_producer_id()
                if isinstance(new_pid, ErrorCode):
                    return new_pid
                log.info("transactional id %r exhausted the epochs of producer id %d; rotating to %d",
                         md.transactional_id, md.producer_id, new_pid)
                return md.prepare_producer_id_rotation(new_pid, timeout_ms, self._now(), expected is not None)
            transit = md.prepare_increment_producer_epoch(
                timeout_ms, None if expected is None else expected[1], self._now()
            )
            return ErrorCode.producer_fenced if transit is None else transit
        if md.state is S.ONGOING:
            # The bumped epoch is never returned: the client gets
            # CONCURRENT_TRANSACTIONS and its retry bumps again (which may
            # rotate the producer id if this bump exhausted the epochs).
            return md.prepare_fence_producer_epoch()
        raise TransactionStateError(
            f"transactional id {md.transactional_id!r} found in state {md.state}, which is never a current state"
        )

    # ================================================================ AddPartitionsToTxn / AddOffsetsToTxn

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        callback: Callable[[dict[TopicPartition, ErrorCode]], None],
        client_transaction_version: int = 0,
    ) -> None:
        """Kafka's handleAddPartitionsToTransaction: one outcome, reported for every partition.

        At transaction version 2 (KIP-890 part 2) the partition leader calls it for a Produce
        v12+ or a TxnOffsetCommit v5+ (``Appender``, the group handler): the client sends no
        AddPartitionsToTxn, so several of its requests may add at once; one that meets another's
        add still being written waits for it (``_park``) instead of CONCURRENT_TRANSACTIONS."""
        with self._api():
            tps = list(dict.fromkeys(partitions))

            def respond(error: ErrorCode) -> None:
                callback(dict.fromkeys(tps, error))

            if not self._active:
                self._reply(respond, ErrorCode.not_coordinator)
                return
            answer = self._deferred(respond, ErrorCode.not_coordinator)
            self._add_partitions(transactional_id, producer_id, producer_epoch, tps, answer,
                                 client_transaction_version=client_transaction_version)

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets_partition: TopicPartition,
        callback: Callable[[ErrorCode], None],
        client_transaction_version: int = 0,
    ) -> None:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the
        transaction, so that the transactional offset commit gets its marker."""
        with self._api():
            if not self._active:
                self._reply(callback, ErrorCode.not_coordinator)
                return
            answer = self._deferred(callback, ErrorCode.not_coordinator)
            self._add_partitions(transactional_id, producer_id, producer_epoch, [offsets_partition], answer,
                                 client_transaction_version=client_transaction_version)

    def _add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        done: Callable[[ErrorCode], None],
        may_park: bool = True,
        *,
        client_transaction_version: int = 0,
    ) -> None:
        if not transactional_id:
            done(ErrorCode.invalid_request)
            return
        md = self._state.get(transactional_id)
        v2 = client_transaction_version >= TV_2
        retry = functools.partial(self._add_partitions, transactional_id, producer_id, producer_epoch, partitions,
                                  done, may_park=False, client_transaction_version=client_transaction_version)
        if md is None:
            done(ErrorCode.invalid_producer_id_mapping)
        elif v2 and md.pending_transition_in_progress:
            # Kafka checks this first at transactions v2: across an exhausted epoch the client
            # already holds the next producer id while the Complete record that moves to it is
            # being written.  Wait for the change (Kafka: CONCURRENT_TRANSACTIONS, retried by the
            # partition leader).
            if may_park:
                self._park(transactional_id, retry, functools.partial(done, ErrorCode.concurrent_transactions))
            else:
                done(ErrorCode.concurrent_transactions)
        elif md.producer_id != producer_id or md.producer_epoch == NO_PRODUCER_EPOCH:
            # (Epoch -1: the id's first InitProducerId never became durable, so
            # this producer id was never handed out.  Kafka would fail the
            # prepare with an exception, i.e. UNKNOWN_SERVER_ERROR.)
            done(ErrorCode.invalid_producer_id_mapping)
        elif md.producer_epoch != producer_epoch:
            done(ErrorCode.producer_fenced)
        elif may_park and md.pending_state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            self._park(transactional_id, retry, functools.partial(done, ErrorCode.concurrent_transactions))
        elif md.pending_transition_in_progress or md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            done(ErrorCode.concurrent_transactions)
        elif md.state is S.ONGOING and md.topic_partitions.issuperset(partitions):
            # Already in the transaction: nothing to write.
            done(ErrorCode.none)
        else:
            transit = md.prepare_add_partitions(partitions, self._now(), client_transaction_version)

            def appended(error: ErrorCode) -> None:
                done(error)
                self._resume_parked(transactional_id)

            self._state.append_transaction_to_log(transactional_id, transit, appended)

    def _park(self, transactional_id: str, retry: Callable[[], None], give_up: Callable[[], None]) -> None:
        """Hold a request until the id's previous transaction completes, then ``retry`` it.

        Kafka answers an AddPartitionsToTxn that arrives while the previous
        transaction's markers are being written CONCURRENT_TRANSACTIONS, and
        the client backs off (librdkafka and the Java client: 20 ms or more)
        although completion takes about a millisecond here.  So the request
        waits, at most ``PARKED_MAX_MS``, and is answered as if it had just
        arrived (the outcome is one Kafka could give); after that, or beyond
        ``PARKED_MAX_PER_ID`` waiting requests, it gets Kafka's answer.
        """
        parked = self._parked.setdefault(transactional_id, [])
        if len(parked) >= PARKED_MAX_PER_ID:
            give_up()
            return
        if not parked:
            self._timers.set(ParkedExpiry(transactional_id), self._now() + PARKED_MAX_MS)
        parked.append(_Parked(retry, give_up))

    def _resume_parked(self, transactional_id: str) -> None:
        """Answer the id's parked requests from its state now, in arrival order (never parking
        them again).  One that writes a change holds the rest back until that is durable, so
        that they do not meet it pending."""
        parked = self._parked.get(transactional_id)
        while parked:
            md = self._state.get(transactional_id)
            if md is not None and md.pending_transition_in_progress:
                return  # resumed again when this change is durable (``_add_partitions``)
            parked.pop(0).retry()
        if parked is not None:
            del self._parked[transactional_id]
            self._timers.cancel(ParkedExpiry(transactional_id))

    def _on_parked_expiry(self, key: ParkedExpiry, now: int) -> None:
        for request in self._parked.pop(key.transactional_id, ()):
            request.give_up()

    # ================================================================ produce-path verification

    def partition_in_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, partition: int
    ) -> ErrorCode:
        """May a transactional write of this producer go to (topic, partition)?

        KIP-890 part 1: Kafka's handleVerifyPartitionsInTransaction (the
        AddPartitionsToTxn v4 ``verifyOnly`` check), asked before a
        transactional Produce and before a TxnOffsetCommit (for the group's
        ``__consumer_offsets`` partition):

        * NONE: the id's producer id and epoch match and the partition is in
          the current transaction;
        * INVALID_PRODUCER_ID_MAPPING: unknown id, or another producer id;
        * PRODUCER_FENCED: another epoch;
        * CONCURRENT_TRANSACTIONS: the transaction is completing;
        * TRANSACTION_ABORTABLE: the partition is not in the transaction;
        * NOT_COORDINATOR after shutdown, INVALID_REQUEST for an empty id.

        Callers translate these for the request version as Kafka's
        AddPartitionsToTxnManager does (``handlers.common.verification_error``).
        The pending state is not checked (Kafka's final check is the append).
        """
        if not self._active:
            return ErrorCode.not_coordinator
        if not transactional_id:
            return ErrorCode.invalid_request
        md = self._state.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if md.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions
        if (topic, partition) in md.topic_partitions:
            return ErrorCode.none
        return ErrorCode.transaction_abortable

    # ================================================================ EndTxn

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        callback: EndTxnCallback,
        client_transaction_version: int = 0,
    ) -> None:
        """Kafka's handleEndTransaction: ``callback(error, producer_id, producer_epoch)`` once the
        Prepare record is durable.  The id and epoch are what the producer goes on with (EndTxn
        v5+, transactions v2: the bumped epoch, or a new id at epoch 0); -1, -1 on an error."""
        with self._api():
            if not self._active:
                self._reply(callback, ErrorCode.not_coordinator, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
                return
            answer = self._deferred(callback, ErrorCode.not_coordinator, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            self._end_transaction(transactional_id, producer_id, producer_epoch, commit, from_client=True,
                                  client_transaction_version=client_transaction_version, done=answer)

    def _end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        from_client: bool,
        client_transaction_version: int,
        done: EndTxnCallback,
    ) -> None:
        if not transactional_id:
            done(ErrorCode.invalid_request, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return
        md = self._state.get(transactional_id)
        if md is None:
            done(ErrorCode.invalid_producer_id_mapping, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return
        is_epoch_fence = md.pending_state is S.PREPARE_EPOCH_FENCE
        v2 = client_transaction_version >= TV_2
        current = (md.producer_id, md.producer_epoch)  # a retry of a completed EndTxn is answered with these
        if v2:
            result = self._prepare_end_transaction_v2(md, producer_id, producer_epoch, commit, from_client,
                                                      client_transaction_version)
        else:
            result = self._prepare_end_transaction(md, producer_id, producer_epoch, commit, from_client)
        if isinstance(result, ErrorCode):
            if md.pending_state is S.PREPARE_EPOCH_FENCE:
                md.pending_state = None  # never leave a fence dangling
            if result is ErrorCode.none:
                done(result, *current)
            else:
                done(result, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return
        transit = result

        def on_appended(error: ErrorCode) -> None:
            if error is not ErrorCode.none:
                if is_epoch_fence and not v2 and self._state.get(transactional_id) is md:
                    # The bumped epoch stays in memory (the old producer stays
                    # fenced); the next fence must not bump again.  (At TV2 the
                    # bump is never applied before it is durable: a retry bumps afresh.)
                    md.has_failed_epoch_fence = True
                    log.warning("persisting the epoch fence of transactional id %r failed (%s); epoch %d kept "
                                "in memory only", transactional_id, error.name, transit.producer_epoch)
                done(error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
                return
            self._on_prepare_persisted(transactional_id, md, producer_id, producer_epoch, commit, done)

        self._state.append_transaction_to_log(transactional_id, transit, on_appended)

    def _prepare_end_transaction(
        self, md: TransactionMetadata, producer_id: int, producer_epoch: int, commit: bool, from_client: bool
    ) -> TxnTransitMetadata | ErrorCode:
        """Transaction versions 0 and 1: the epoch stays."""
        if md.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        # Clients must present the current epoch; internal aborts carry the fenced (higher) one.
        if (from_client and producer_epoch != md.producer_epoch) or producer_epoch < md.producer_epoch:
            return ErrorCode.producer_fenced
        if md.pending_transition_in_progress and md.pending_state is not S.PREPARE_EPOCH_FENCE:
            return ErrorCode.concurrent_transactions
        state = md.state
        if state is S.ONGOING:
            if not commit and md.pending_state is S.PREPARE_EPOCH_FENCE:
                return md.prepare_abort_after_epoch_fence(producer_epoch, self._now())
            return md.prepare_abort_or_commit(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, self._now())
        if state is S.COMPLETE_COMMIT:
            return ErrorCode.none if commit else self._invalid_end_state(md, commit)
        if state is S.COMPLETE_ABORT:
            return ErrorCode.none if not commit else self._invalid_end_state(md, commit)
        if state is S.PREPARE_COMMIT:
            return ErrorCode.concurrent_transactions if commit else self._invalid_end_state(md, commit)
        if state is S.PREPARE_ABORT:
            return ErrorCode.concurrent_transactions if not commit else self._invalid_end_state(md, commit)
        if state is S.EMPTY:
            return self._invalid_end_state(md, commit)
        raise TransactionStateError(
            f"transactional id {md.transactional_id!r} found in state {state}, which is never a current state"
        )

    def _prepare_end_transaction_v2(
        self, md: TransactionMetadata, producer_id: int, producer_epoch: int, commit: bool, from_client: bool,
        client_transaction_version: int,
    ) -> TxnTransitMetadata | ErrorCode:
        """Transactions v2 (KIP-890 part 2, Kafka 4.3's endTransaction): every end bumps the epoch,
        so the same epoch after an end is the *next* transaction's, and a retry of an end that
        was already done carries the epoch one below (or, across an exhausted epoch, the previous
        producer id at Short.MaxValue - 1)."""
        is_epoch_fence = md.pending_state is S.PREPARE_EPOCH_FENCE
        retry_on_overflow = (not is_epoch_fence and md.previous_producer_id == producer_id
                             and producer_epoch == MAX_PRODUCER_EPOCH - 1 and md.producer_epoch == 0)
        retry_on_epoch_bump = not is_epoch_fence and md.producer_epoch == producer_epoch + 1
        is_retry = retry_on_epoch_bump or retry_on_overflow
        state = md.state
        if is_epoch_fence:
            valid_epoch = (not from_client or producer_epoch == md.producer_epoch) and producer_epoch >= md.producer_epoch
        elif state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            valid_epoch = retry_on_epoch_bump
        elif state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            valid_epoch = is_retry or producer_epoch == md.producer_epoch
        else:
            valid_epoch = producer_epoch == md.producer_epoch

        def completion(next_state: TransactionState, no_partition_added: bool) -> TxnTransitMetadata | ErrorCode:
            next_producer_id = NO_PRODUCER_ID
            if md.is_producer_epoch_exhausted:  # the bump reaches Short.MaxValue - 1: a new id for after it
                allocated = self._allocate_producer_id()
                if isinstance(allocated, ErrorCode):
                    return allocated
                next_producer_id = allocated
            if next_state is S.PREPARE_ABORT and is_epoch_fence:
                md.pending_state = None  # the fence makes way for the abort, which bumps the epoch itself
            return md.prepare_abort_or_commit(next_state, self._now(), client_transaction_version=client_transaction_version,
                                              next_producer_id=next_producer_id, no_partition_added=no_partition_added)

        if md.pending_transition_in_progress and not is_epoch_fence:
            # First, so that a pending move to a new producer id completes before the checks below.
            return ErrorCode.concurrent_transactions
        if md.producer_id != producer_id and not retry_on_overflow:
            return ErrorCode.invalid_producer_id_mapping
        if not valid_epoch:
            return ErrorCode.producer_fenced
        if state is S.ONGOING:
            return completion(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, False)
        if state is S.COMPLETE_COMMIT:
            if commit:
                return ErrorCode.none if is_retry else self._invalid_end_state(md, commit)
            return self._invalid_end_state(md, commit) if is_retry else completion(S.PREPARE_ABORT, True)
        if state is S.COMPLETE_ABORT:
            if commit:
                return self._invalid_end_state(md, commit)
            return ErrorCode.none if is_retry else completion(S.PREPARE_ABORT, True)
        if state is S.PREPARE_COMMIT:
            return ErrorCode.concurrent_transactions if commit else self._invalid_end_state(md, commit)
        if state is S.PREPARE_ABORT:
            return ErrorCode.concurrent_transactions if not commit else self._invalid_end_state(md, commit)
        if state is S.EMPTY:
            return completion(S.PREPARE_ABORT, True) if not commit else self._invalid_end_state(md, commit)
        raise TransactionStateError(
            f"transactional id {md.transactional_id!r} found in state {state}, which is never a current state"
        )

    @staticmethod
    def _invalid_end_state(md: TransactionMetadata, commit: bool) -> ErrorCode:
        log.debug("transactional id %r is %s but was asked to %s", md.transactional_id, md.state,
                  "commit" if commit else "abort")
        return ErrorCode.invalid_txn_state

    def _on_prepare_persisted(
        self,
        transactional_id: str,
        md: TransactionMetadata,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        done: EndTxnCallback,
    ) -> None:
        """The Prepare record is durable: answer (with the id and epoch the producer goes on
        with), then write the markers."""
        if md.producer_id != producer_id:
            done(ErrorCode.invalid_producer_id_mapping, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        elif md.producer_epoch not in (producer_epoch, producer_epoch + 1):  # +1: the TV2 bump
            done(ErrorCode.producer_fenced, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        elif md.pending_transition_in_progress:
            done(ErrorCode.concurrent_transactions, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        elif md.state is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
            transit = md.prepare_complete(self._now())
            done(ErrorCode.none, transit.producer_id, transit.producer_epoch)
            self._then(lambda: self._markers.start(transactional_id, md, transit, commit))
        else:
            done(self._invalid_end_state(md, commit), NO_PRODUCER_ID, NO_PRODUCER_EPOCH)

    # ================================================================ KIP-664

    def describe_transactions(self, transactional_ids: list[str]) -> list[TransactionDescription]:
        """Kafka's handleDescribeTransactions, for each id in order."""
        out: list[TransactionDescription] = []
        for tid in transactional_ids:
            if not self._active:
                out.append(TransactionDescription(tid, ErrorCode.coordinator_not_available))
                continue
            if not tid:
                out.append(TransactionDescription(tid, ErrorCode.invalid_request))
                continue
            md = self._state.get(tid)
            if md is None or md.state is S.DEAD:
                out.append(TransactionDescription(tid, ErrorCode.transactional_id_not_found))
                continue
            out.append(
                TransactionDescription(
                    transactional_id=tid,
                    error=ErrorCode.none,
                    state=md.state.kafka_name,
                    producer_id=md.producer_id,
                    producer_epoch=md.producer_epoch,
                    timeout_ms=md.txn_timeout_ms,
                    start_timestamp_ms=md.txn_start_timestamp,
                    partitions=tuple(sorted(md.topic_partitions)),
                )
            )
        return out

    def list_transactions(
        self,
        states: set[str] | None,
        producer_ids: set[int] | None,
        duration_filter_ms: int = -1,
    ) -> ListTransactionsResult:
        """Kafka's handleListTransactions.  Empty/None filters select everything;
        state names are Kafka's (case-sensitive); ``duration_filter_ms`` >= 0
        keeps transactions started more than that long ago (KIP-994; Empty ids,
        whose start is -1, always pass it, as in Kafka)."""
        if not self._active:
            return ListTransactionsResult(error=ErrorCode.coordinator_not_available)
        listings, unknown = self._state.list_transaction_states(producer_ids, states, duration_filter_ms, self._now())
        return ListTransactionsResult(listings, unknown_state_filters=unknown)

    # ================================================================ timers

    def tick(self) -> None:
        """Run due timers: timeout aborts, id expiration, marker and completion retries."""
        self._runtime.tick()

    def next_deadline_ms(self) -> int | None:
        return self._runtime.next_deadline_ms()

    # ================================================================ shutdown

    def shutdown(self) -> None:
        """Answer every waiting request NOT_COORDINATOR and stop; nothing is called afterwards."""
        with self._api():
            if not self._runtime.shut_down():
                return
            self._state.shutdown()
            self._markers.shutdown()
