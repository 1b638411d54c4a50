"""One transactional id: its state machine and the prepare/complete protocol.

Theory of operation
-------------------
A transactional id moves through the eight states of ``TransactionState``
(Kafka's TransactionState.scala; the byte of each state is what
``__transaction_state`` stores).  The legal moves are data,
``VALID_PREVIOUS_STATES``, copied from Kafka (drawn in
``docs/state-diagrams.md``), and every move goes through
ONE choke point, ``TransactionMetadata._prepare_transition_to``, which
raises ``IllegalTransactionTransition`` on an illegal move.

A change is made in three steps (Kafka's prepareTransitionTo /
completeTransitionTo):

1. *prepare*: a ``prepare_*`` method computes the target as an immutable
   ``TxnTransitMetadata`` and records the target state in ``pending_state``;
   nothing else of the metadata changes.  While a state is pending, the
   coordinator answers other requests for the id with CONCURRENT_TRANSACTIONS
   (and a second prepare raises: that would be a coordinator bug).
2. *persist*: the coordinator appends the transit to ``__transaction_state``.
3. *complete*: when the append is durable (a Complete record: once it is in
   the log, see ``markers.py``), ``complete_transition`` re-checks
   the invariants Kafka checks (same producer id, epoch either equal or a
   valid bump, partitions only growing while Ongoing, ...) and applies the
   transit; if the append failed, the state manager (``state_manager.py``)
   clears ``pending_state`` instead (unless the append is to be retried, as
   a Complete record's is) and the metadata is exactly as before.

The one exception is Kafka's epoch fence (``prepare_fence_producer_epoch``
followed by ``prepare_abort_after_epoch_fence``): to abort a transaction on
behalf of a new producer instance or a timeout, the bumped epoch takes effect
in memory *before* the PrepareAbort record is written, so that the old
producer is fenced at once and stays fenced even if the write fails (it can
then never commit the transaction it was timed out of).  ``has_failed_epoch_fence``
remembers such a failure so that the retry does not bump a second time;
the bumped epoch is never returned to a client before it is durable.

Epochs are int16.  Kafka never hands a client the epoch Short.MaxValue, so
that the coordinator can always fence: an epoch >= Short.MaxValue - 1 is
*exhausted* and the next InitProducerId allocates a new producer id
(KIP-360).

Transaction versions (Kafka 4.3's TransactionMetadata).  A transition
carries the *client's* transaction version (``client_transaction_version``).
Below 2 (KIP-98 / KIP-360 / KIP-890 part 1) EndTxn keeps the epoch.  At 2
(KIP-890 part 2) every PrepareCommit/PrepareAbort bumps it
(``prepare_abort_or_commit``), so that a Produce or EndTxn delayed from one
transaction is refused in the next (KAFKA-17754); the markers carry the
bumped epoch.  When the bump would reach Short.MaxValue the coordinator
allocates ``next_producer_id`` beforehand, and the Complete record moves the
id to it at epoch 0 (KAFKA-18660).  A TV2 abort may also start from Empty or
Complete* (a producer aborting a transaction it never wrote to).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from ..transitions import IllegalTransition
from ..transitions import check_transition as _check
from .types import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TopicPartition

log = logging.getLogger(__name__)

#: Java's Short.MaxValue: the largest producer epoch.
MAX_PRODUCER_EPOCH = 0x7FFF


class TransactionState(Enum):
    """The states of a transactional id: (byte persisted in the log, Kafka's name)."""

    #: No transaction open: just initialised (InitProducerId), or its epoch bumped.
    #: in:  Empty, CompleteCommit, CompleteAbort (InitProducerId).
    #: out: Ongoing (AddPartitionsToTxn / AddOffsetsToTxn); Empty (InitProducerId);
    #:      Dead (transactional id expired).
    EMPTY = (0, "Empty")

    #: A transaction is open: partitions have been added to it.
    #: in:  Empty, CompleteCommit, CompleteAbort, Ongoing (AddPartitionsToTxn /
    #:      AddOffsetsToTxn).
    #: out: Ongoing (more partitions); PrepareCommit (EndTxn commit);
    #:      PrepareAbort (EndTxn abort, fenced by a new instance or timed out,
    #:      through PrepareEpochFence).
    ONGOING = (1, "Ongoing")

    #: The commit decision is durable; markers are being written.
    #: in:  Ongoing (EndTxn commit).
    #: out: CompleteCommit (all markers written).
    PREPARE_COMMIT = (2, "PrepareCommit")

    #: The abort decision is durable; markers are being written.
    #: in:  Ongoing (EndTxn abort), PrepareEpochFence (abort with a bumped epoch).
    #: out: CompleteAbort (all markers written).
    PREPARE_ABORT = (3, "PrepareAbort")

    #: The transaction is committed: every partition has its COMMIT marker.
    #: in:  PrepareCommit.
    #: out: Ongoing (next transaction); Empty (InitProducerId); Dead (expired).
    COMPLETE_COMMIT = (4, "CompleteCommit")

    #: The transaction is aborted: every partition has its ABORT marker.
    #: in:  PrepareAbort.
    #: out: Ongoing (next transaction); Empty (InitProducerId); Dead (expired).
    COMPLETE_ABORT = (5, "CompleteAbort")

    #: The transactional id is being removed (its tombstone is being written).
    #: Only ever a *pending* state: on success the id leaves the cache.
    #: in:  Empty, CompleteCommit, CompleteAbort (expiration).
    #: out: none.
    DEAD = (6, "Dead")

    #: The epoch is being bumped to fence the current producer before an abort.
    #: Only ever a *pending* state, immediately replaced by PrepareAbort; it is
    #: never written to the log.
    #: in:  Ongoing (InitProducerId from a new instance, transaction timeout).
    #: out: PrepareAbort.
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    def __init__(self, state_id: int, kafka_name: str) -> None:
        self.id = state_id
        self.kafka_name = kafka_name

    def __str__(self) -> str:
        return self.kafka_name

    @property
    def is_expiration_allowed(self) -> bool:
        """Kafka's isExpirationAllowed: an id idle in this state may be forgotten."""
        return self in _EXPIRATION_ALLOWED

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        try:
            return _BY_ID[state_id]
        except KeyError:
            raise ValueError(f"unknown transaction state id {state_id}") from None

    @classmethod
    def from_kafka_name(cls, name: str) -> TransactionState | None:
        """Exact (case-sensitive) match, as Kafka's TransactionState.fromName."""
        return _BY_NAME.get(name)


_BY_ID = {s.id: s for s in TransactionState}
_BY_NAME = {s.kafka_name: s for s in TransactionState}
_EXPIRATION_ALLOWED = frozenset(
    {TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT}
)

_S = TransactionState

#: Kafka's ``validPreviousStates`` (TransactionMetadata.scala), verbatim.
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    # Empty and Complete*: transactions v2 abort a transaction with no partition (Kafka 4).
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_ABORT, _S.COMPLETE_COMMIT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """No more epochs for this producer id: the coordinator keeps MAX for fencing."""
    return producer_epoch >= MAX_PRODUCER_EPOCH - 1


class TransactionStateError(RuntimeError):
    """A broken invariant of the transaction state machine: a coordinator bug."""


class IllegalTransactionTransition(TransactionStateError, IllegalTransition):
    """A state change ``VALID_PREVIOUS_STATES`` forbids."""

    def __init__(self, transactional_id: str, current: TransactionState, target: TransactionState) -> None:
        allowed = ", ".join(sorted(s.kafka_name for s in VALID_PREVIOUS_STATES[target]))
        super().__init__(
            f"transactional id {transactional_id!r} should be in one of [{allowed}] before moving to "
            f"{target.kafka_name}, but it is {current.kafka_name}"
        )
        self.transactional_id = transactional_id
        self.current = current
        self.target = target


def check_transition(transactional_id: str, current: TransactionState, target: TransactionState) -> None:
    """Raise ``IllegalTransactionTransition`` unless ``current -> target`` is legal (the shared
    ``coordinator.transitions.check_transition`` over this machine's table)."""
    _check(VALID_PREVIOUS_STATES, current, target,
           lambda state, wanted: IllegalTransactionTransition(transactional_id, state, wanted))


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The target of a prepared transition: what is written to the log and,
    once durable, applied to the ``TransactionMetadata``."""

    producer_id: int
    #: The producer id before this transition (Kafka's prevProducerId).
    prev_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    #: The producer id the Complete record moves to (TV2, the epoch exhausted); -1: none.
    next_producer_id: int = NO_PRODUCER_ID
    #: The client's transaction version (``TransactionVersion``: 0, 1 or 2).
    client_transaction_version: int = 0


#: Transaction version 2: EndTxn bumps the epoch (KIP-890 part 2).
TV_2 = 2


class TransactionMetadata:
    """The in-memory state of one transactional id (Kafka's TransactionMetadata)."""

    __slots__ = (
        "client_transaction_version",
        "has_failed_epoch_fence",
        "last_producer_epoch",
        "next_producer_id",
        "pending_state",
        "previous_producer_id",
        "producer_epoch",
        "producer_id",
        "state",
        "topic_partitions",
        "transactional_id",
        "txn_last_update_timestamp",
        "txn_start_timestamp",
        "txn_timeout_ms",
    )

    def __init__(
        self,
        transactional_id: str,
        producer_id: int,
        *,
        previous_producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        last_producer_epoch: int = NO_PRODUCER_EPOCH,
        txn_timeout_ms: int,
        state: TransactionState = TransactionState.EMPTY,
        topic_partitions: Iterable[TopicPartition] = (),
        txn_start_timestamp: int = -1,
        txn_last_update_timestamp: int,
        next_producer_id: int = NO_PRODUCER_ID,
        client_transaction_version: int = 0,
    ) -> None:
        self.transactional_id = transactional_id
        #: The producer id in use.
        self.producer_id = producer_id
        #: The producer id before the last transition (after a rotation: the
        #: old id; KIP-360 lets a retry that spans the rotation use it).
        self.previous_producer_id = previous_producer_id
        #: The current epoch (-1: just created, nothing persisted yet).
        self.producer_epoch = producer_epoch
        #: The epoch before the last InitProducerId (KIP-360 retries); -1 when
        #: a new instance took over or after a reload (it is not persisted).
        self.last_producer_epoch = last_producer_epoch
        self.txn_timeout_ms = txn_timeout_ms
        self.state = state
        #: The partitions of the current transaction (shrinks while markers are written).
        self.topic_partitions: set[TopicPartition] = set(topic_partitions)
        #: When the first partition was added to the current transaction (-1: none).
        self.txn_start_timestamp = txn_start_timestamp
        #: When the metadata last changed (expiration counts from it).
        self.txn_last_update_timestamp = txn_last_update_timestamp
        #: The state a prepared, not yet durable, transition leads to.
        self.pending_state: TransactionState | None = None
        #: A PrepareAbort with a bumped epoch failed to persist (see module doc).
        self.has_failed_epoch_fence = False
        #: The producer id the current Prepare record moves to when completed (TV2 overflow); -1: none.
        self.next_producer_id = next_producer_id
        #: The transaction version of the client's last transition (0: v0/v1 clients).
        self.client_transaction_version = client_transaction_version

    def __repr__(self) -> str:
        return (
            f"TransactionMetadata(transactional_id={self.transactional_id!r}, producer_id={self.producer_id}, "
            f"previous_producer_id={self.previous_producer_id}, producer_epoch={self.producer_epoch}, "
            f"last_producer_epoch={self.last_producer_epoch}, txn_timeout_ms={self.txn_timeout_ms}, "
            f"state={self.state}, pending_state={self.pending_state}, "
            f"topic_partitions={sorted(self.topic_partitions)}, txn_start_timestamp={self.txn_start_timestamp}, "
            f"txn_last_update_timestamp={self.txn_last_update_timestamp}, next_producer_id={self.next_producer_id}, "
            f"client_transaction_version={self.client_transaction_version})"
        )

    # ---------------------------------------------------------------- queries

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (TransactionState.ONGOING, TransactionState.PREPARE_ABORT, TransactionState.PREPARE_COMMIT)

    def snapshot(self) -> TxnTransitMetadata:
        """The current values as a transit (no pending state is set; for logs and tests)."""
        return TxnTransitMetadata(
            producer_id=self.producer_id,
            prev_producer_id=self.previous_producer_id,
            producer_epoch=self.producer_epoch,
            last_producer_epoch=self.last_producer_epoch,
            txn_timeout_ms=self.txn_timeout_ms,
            txn_state=self.state,
            topic_partitions=frozenset(self.topic_partitions),
            txn_start_timestamp=self.txn_start_timestamp,
            txn_last_update_timestamp=self.txn_last_update_timestamp,
            next_producer_id=self.next_producer_id,
            client_transaction_version=self.client_transaction_version,
        )

    # ---------------------------------------------------------------- prepare

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Ongoing -> PrepareEpochFence: bump the epoch (unless a previous
        fence already bumped it and failed to persist) to abort the transaction."""
        if self.has_failed_epoch_fence:
            bumped = self.producer_epoch
        else:
            if self.producer_epoch >= MAX_PRODUCER_EPOCH:
                raise TransactionStateError(
                    f"transactional id {self.transactional_id!r}: cannot fence epoch {self.producer_epoch}, "
                    "it would overflow"
                )
            bumped = self.producer_epoch + 1
        return self._prepare_transition_to(
            TransactionState.PREPARE_EPOCH_FENCE,
            self.producer_id,
            bumped,
            NO_PRODUCER_EPOCH,
            self.txn_timeout_ms,
            frozenset(self.topic_partitions),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    def prepare_increment_producer_epoch(
        self, new_txn_timeout_ms: int, expected_producer_epoch: int | None, now_ms: int
    ) -> TxnTransitMetadata | None:
        """-> Empty with the epoch bumped (InitProducerId).  ``None``: the
        expected epoch (KIP-360) is neither the current nor the last one, i.e.
        the caller is fenced (PRODUCER_FENCED)."""
        if self.is_producer_epoch_exhausted:
            raise TransactionStateError(
                f"transactional id {self.transactional_id!r}: no producer epochs left for producer id {self.producer_id}"
            )
        bumped = self.producer_epoch + 1
        if expected_producer_epoch is None:
            # A new instance (or a new producer: epoch -1 -> 0); the last epoch is forgotten.
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_producer_epoch == self.producer_epoch:
            # The producer recovers from an abortable error and nobody took over: bump, remember.
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_producer_epoch == self.last_producer_epoch:
            # A retry of a bump whose response was lost: the same answer again.
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare_transition_to(
            TransactionState.EMPTY, self.producer_id, epoch, last_epoch, new_txn_timeout_ms, frozenset(), -1, now_ms
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, new_txn_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        """-> Empty with a new producer id at epoch 0 (the epochs are exhausted)."""
        if self.has_pending_transaction:
            raise TransactionStateError(
                f"transactional id {self.transactional_id!r}: cannot rotate producer ids while a transaction is open"
            )
        return self._prepare_transition_to(
            TransactionState.EMPTY,
            new_producer_id,
            0,
            self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            new_txn_timeout_ms,
            frozenset(),
            -1,
            now_ms,
        )

    def prepare_add_partitions(self, added: Iterable[TopicPartition], now_ms: int,
                               client_transaction_version: int = 0) -> TxnTransitMetadata:
        """-> Ongoing with more partitions; a new transaction starts its clock now."""
        if self.state in (TransactionState.EMPTY, TransactionState.COMPLETE_ABORT, TransactionState.COMPLETE_COMMIT):
            start = now_ms
        else:
            start = self.txn_start_timestamp
        return self._prepare_transition_to(
            TransactionState.ONGOING,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(self.topic_partitions).union(added),
            start,
            now_ms,
            client_transaction_version=client_transaction_version,
        )

    def prepare_abort_or_commit(self, new_state: TransactionState, now_ms: int, *, client_transaction_version: int = 0,
                                next_producer_id: int = NO_PRODUCER_ID,
                                no_partition_added: bool = False) -> TxnTransitMetadata:
        """-> PrepareCommit / PrepareAbort (EndTxn).  Below TV2 the epoch is unchanged; at TV2 it is
        bumped (the last epoch remembers the one the client used), and ``next_producer_id`` is
        where the Complete record moves the id when the bump exhausted the epochs.  A TV2 abort
        of a transaction with no partition (``no_partition_added``) starts it now."""
        if new_state not in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
            raise TransactionStateError(f"prepare_abort_or_commit to {new_state}")
        if client_transaction_version >= TV_2:
            if self.producer_epoch >= MAX_PRODUCER_EPOCH and new_state is TransactionState.PREPARE_ABORT:
                # Kafka lets such an abort through unbumped, so that a broken state can recover.
                log.error("aborting transactional id %r (producer id %d) at epoch %d, which cannot be bumped",
                          self.transactional_id, self.producer_id, self.producer_epoch)
                epoch = self.producer_epoch
            else:
                epoch = self.producer_epoch + 1
            last_epoch = self.producer_epoch
        else:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        return self._prepare_transition_to(
            new_state,
            self.producer_id,
            epoch,
            last_epoch,
            self.txn_timeout_ms,
            frozenset(self.topic_partitions),
            now_ms if no_partition_added else self.txn_start_timestamp,
            now_ms,
            next_producer_id=next_producer_id,
            client_transaction_version=client_transaction_version,
        )

    def prepare_abort_after_epoch_fence(self, fenced_epoch: int, now_ms: int) -> TxnTransitMetadata:
        """PrepareEpochFence (pending) -> PrepareAbort at the fenced epoch.

        Kafka's epoch fence: the bumped epoch takes effect in memory now,
        before the PrepareAbort record is durable (see the module doc).
        """
        if self.pending_state is not TransactionState.PREPARE_EPOCH_FENCE:
            raise TransactionStateError(
                f"transactional id {self.transactional_id!r}: abort after fence without a pending fence "
                f"(pending {self.pending_state})"
            )
        self.pending_state = None
        self.producer_epoch = fenced_epoch
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        return self.prepare_abort_or_commit(TransactionState.PREPARE_ABORT, now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        """PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort (markers written)."""
        new_state = (
            TransactionState.COMPLETE_COMMIT
            if self.state is TransactionState.PREPARE_COMMIT
            else TransactionState.COMPLETE_ABORT
        )
        # The Prepare record is durable: a failed fence is behind us.
        self.has_failed_epoch_fence = False
        producer_id, epoch = self.producer_id, self.producer_epoch
        if self.client_transaction_version >= TV_2 and self.next_producer_id != NO_PRODUCER_ID:
            producer_id, epoch = self.next_producer_id, 0  # the epochs ran out: the new id, at epoch 0
        return self._prepare_transition_to(
            new_state,
            producer_id,
            epoch,
            self.last_producer_epoch,  # at TV2 the epoch the client used before the bump (MAX-1 on overflow)
            self.txn_timeout_ms,
            frozenset(),
            self.txn_start_timestamp,
            now_ms,
            next_producer_id=NO_PRODUCER_ID,
        )

    def prepare_dead(self) -> TxnTransitMetadata:
        """Empty / CompleteCommit / CompleteAbort -> Dead (expiration; a tombstone is written)."""
        return self._prepare_transition_to(
            TransactionState.DEAD,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    def _prepare_transition_to(
        self,
        state: TransactionState,
        producer_id: int,
        producer_epoch: int,
        last_producer_epoch: int,
        txn_timeout_ms: int,
        topic_partitions: frozenset[TopicPartition],
        txn_start_timestamp: int,
        now_ms: int,
        *,
        next_producer_id: int | None = None,
        client_transaction_version: int | None = None,
    ) -> TxnTransitMetadata:
        """The choke point of every state change (``next_producer_id`` and the client transaction
        version stay as they are unless given, as Kafka's TransitionData)."""
        if self.pending_state is not None:
            raise TransactionStateError(
                f"transactional id {self.transactional_id!r}: preparing a transition to {state} while "
                f"{self.pending_state} is pending"
            )
        if producer_id < 0:
            raise TransactionStateError(f"illegal new producer id {producer_id}")
        if state is not TransactionState.DEAD and producer_epoch < 0:
            raise TransactionStateError(f"illegal new producer epoch {producer_epoch}")
        check_transition(self.transactional_id, self.state, state)
        transit = TxnTransitMetadata(
            producer_id=producer_id,
            prev_producer_id=self.producer_id,
            producer_epoch=producer_epoch,
            last_producer_epoch=last_producer_epoch,
            txn_timeout_ms=txn_timeout_ms,
            txn_state=state,
            topic_partitions=topic_partitions,
            txn_start_timestamp=txn_start_timestamp,
            txn_last_update_timestamp=now_ms,
            next_producer_id=self.next_producer_id if next_producer_id is None else next_producer_id,
            client_transaction_version=(self.client_transaction_version if client_transaction_version is None
                                        else client_transaction_version),
        )
        self.pending_state = state
        return transit

    # ---------------------------------------------------------------- complete

    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """Apply a transit whose record is durable (Kafka 4.3's completeTransitionTo)."""
        to_state = self.pending_state
        if to_state is None:
            raise TransactionStateError(
                f"transactional id {self.transactional_id!r}: completing {transit} without a pending state"
            )
        if to_state is not transit.txn_state:
            self._transition_failure(transit)
        S = TransactionState
        if to_state is S.EMPTY:  # InitProducerId
            if (
                (self.producer_epoch != transit.producer_epoch and not self._valid_epoch_bump(transit))
                or transit.topic_partitions
                or transit.txn_start_timestamp != -1
            ):
                self._transition_failure(transit)
        elif to_state is S.ONGOING:  # AddPartitionsToTxn
            if (
                not self._valid_epoch(transit)
                or not self.topic_partitions <= transit.topic_partitions
                or self.txn_timeout_ms != transit.txn_timeout_ms
            ):
                self._transition_failure(transit)
        elif to_state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):  # EndTxn
            # A TV2 abort may start from Empty or Complete*, its start time being now.
            empty_abort = (to_state is S.PREPARE_ABORT and transit.client_transaction_version >= TV_2
                           and self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT))
            if (
                not self._valid_epoch(transit)
                or self.topic_partitions != transit.topic_partitions
                or self.txn_timeout_ms != transit.txn_timeout_ms
                or (self.txn_start_timestamp != transit.txn_start_timestamp and not empty_abort)
            ):
                self._transition_failure(transit)
        elif to_state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):  # markers written
            if (
                not self._valid_epoch(transit)
                or self.txn_timeout_ms != transit.txn_timeout_ms
                or transit.txn_start_timestamp == -1
            ):
                self._transition_failure(transit)
        else:
            # PrepareEpochFence is replaced by PrepareAbort before anything is
            # written; Dead ends with the id leaving the cache.
            self._transition_failure(transit)
        self.producer_id = transit.producer_id
        self.previous_producer_id = transit.prev_producer_id
        self.next_producer_id = transit.next_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.topic_partitions = set(transit.topic_partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.client_transaction_version = transit.client_transaction_version
        self.pending_state = None
        self.state = to_state

    def _valid_epoch(self, transit: TxnTransitMetadata) -> bool:
        """Kafka's validProducerEpoch: the same id and epoch, or, at TV2, the bump of a Prepare
        record (its last epoch is ours) and the move to the next id at epoch 0 of a Complete one."""
        S = TransactionState
        if transit.client_transaction_version >= TV_2:
            if transit.txn_state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and transit.producer_epoch == 0:
                return transit.last_producer_epoch == self.last_producer_epoch and transit.prev_producer_id == self.producer_id
            if transit.txn_state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                return transit.last_producer_epoch == self.producer_epoch and transit.producer_id == self.producer_id
        return transit.producer_epoch == self.producer_epoch and transit.producer_id == self.producer_id

    def _valid_epoch_bump(self, transit: TxnTransitMetadata) -> bool:
        return transit.producer_epoch == self.producer_epoch + 1 or (
            transit.producer_epoch == 0 and transit.producer_id != self.producer_id
        )

    def _transition_failure(self, transit: TxnTransitMetadata) -> None:
        raise TransactionStateError(
            f"transactional id {self.transactional_id!r}: {self!r} cannot complete the transition to {transit}"
        )

    # ---------------------------------------------------------------- markers

    def remove_partition(self, tp: TopicPartition) -> None:
        """A partition's marker is written (or it no longer exists)."""
        if self.state not in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
            raise TransactionStateError(
                f"transactional id {self.transactional_id!r} is {self.state} (pending {self.pending_state}) "
                f"while removing partition {tp} whose marker was written"
            )
        self.topic_partitions.discard(tp)
