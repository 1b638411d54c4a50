"""The one owner of durable writes: this node's Kafka ``ReplicaManager.appendRecords``
(and ``deleteRecords``).

Theory of operation.  Every write to a partition log goes through the
``Appender``, in one of four kinds:

* ``append_records``: a Produce request's batches, one per partition.  Per
  partition: find the log (UNKNOWN_TOPIC_OR_PARTITION if none; internal topics
  are closed to clients: INVALID_TOPIC_EXCEPTION), check a transactional
  batch against its transaction (below), let ``PartitionLog.append_produced``
  validate and append it.  Then, by ``acks``: ``-1`` (all) is answered once
  every appended partition's high watermark covers its batch, i.e. once it is
  fsynced, with ``timeout_ms`` bounding the wait (REQUEST_TIMED_OUT, as Kafka
  answers when replication is too slow; KAFKA_STORAGE_ERROR for a write whose
  fsync failed); ``1`` and ``0`` at once: the data is in the page cache and
  becomes visible to consumers when the next group commit makes it durable.
  A transactions-v2 client's Produce (v12+, KIP-890 part 2) sends no
  AddPartitionsToTxn: its transactional batches' partitions are added to the
  transaction through the coordinator first (``_add_then_append``), and a
  request whose transactional batches belong to more than one producer fails
  whole (INVALID_PRODUCER_ID_MAPPING, as Kafka's handleProduceAppend).
* ``append_coordinator_records``: a coordinator's records to a partition of
  ``__consumer_offsets`` or ``__transaction_state``, created on first use,
  compacted, with their own segment size, as in Kafka.  The coordinator is
  told once they are durable, or (``durable=False``, a record that promises
  nothing: the transaction coordinator's Complete record) once they are in the
  log; they then ride with the partition's next flush (``mark_lazy``).
* ``append_marker``: a COMMIT/ABORT marker to one partition of a transaction.
* ``delete_records``: DeleteRecords (KIP-107), a client moving the log start
  offset of partitions up (``PartitionLog.delete_records``): UNKNOWN_TOPIC_OR_PARTITION
  for a partition that does not exist, INVALID_TOPIC_EXCEPTION for an internal
  topic, as Kafka's ReplicaManager answers.  The new log start is durable when
  the call returns (it writes no record, so group commit has no part in it), and
  with one replica the answer needs no waiting.

Each append marks its partition dirty for group commit
(``group_commit.GroupCommit``: one fsync answers every waiter of the moment),
and its durability waiter is registered here, so that nothing is acknowledged
that is not on disk.  Outcomes are values: callbacks get ``ErrorCode`` s (per
partition for Produce, ``PartitionResult``), never exceptions; a refused
append (a full disk, a failed partition, a fenced producer) wrote nothing.
Callbacks of the coordinator appends are always called later, never inside
the call that appended (the coordinators rely on that).

Transactional batches (KIP-98) must come with the request's transactional id
(else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers) and, with
``transaction.partition.verification.enable`` (KIP-890 part 1), their
partition must already be in that producer's ongoing transaction according to
the transaction coordinator: otherwise INVALID_TXN_STATE (TRANSACTION_ABORTABLE
for clients that know it, Produce v11+), so a late write of an aborted
transaction cannot open a transaction nobody will ever finish.  Coordinator
errors a client would not retry on a produce are answered NOT_ENOUGH_REPLICAS,
as Kafka's AddPartitionsToTxnManager does.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from ..clock import Clock
from ..config import (
    OFFSETS_TOPIC_NUM_PARTITIONS,
    OFFSETS_TOPIC_SEGMENT_BYTES,
    TRANSACTION_PARTITION_VERIFICATION_ENABLE,
    TRANSACTION_STATE_LOG_NUM_PARTITIONS,
    TRANSACTION_STATE_LOG_SEGMENT_BYTES,
    BrokerConfig,
)
from ..coordinator import OFFSETS_TOPIC
from ..log.partition_log import PartitionLog
from ..protocol.errors import ErrorCode
from ..records.batch import HEADER_SIZE, Invalid, read_header
from ..records.builder import build_batch
from .group_commit import Waiter
from .partitions import PartitionRegistry

log = logging.getLogger(__name__)

#: A callback told an append's outcome (ErrorCode.none: durable, or in the log for ``durable=False``).
Done = Callable[[ErrorCode], None]

#: ``TransactionCoordinator.partition_in_transaction(transactional_id, producer_id, producer_epoch, topic, partition)``
Verify = Callable[[str, int, int, str, int], ErrorCode]
#: ``TransactionCoordinator.add_partitions`` for a transactions-v2 client: (transactional_id,
#: producer_id, producer_epoch, partitions, callback(errors per partition)).
AddToTransaction = Callable[[str, int, int, list[tuple[str, int]], Callable[[dict[tuple[str, int], ErrorCode]], None]], None]


class Durability(Protocol):
    """What makes appended data durable (``group_commit.GroupCommit``)."""

    def mark_dirty(self, partition: PartitionLog) -> None: ...

    def mark_lazy(self, partition: PartitionLog) -> None: ...

    def on_durable(self, partition: PartitionLog, offset: int, waiter: Waiter) -> None: ...


class PartitionResult:
    """One partition's outcome of a Produce append (what its response entry says)."""

    __slots__ = ("base_offset", "durable_at", "error", "index", "log", "log_append_time", "log_start_offset", "message")

    def __init__(self, index: int) -> None:
        self.index = index
        self.error = ErrorCode.none
        self.base_offset = -1
        self.log_append_time = -1
        self.log_start_offset = -1
        self.message: str | None = None
        #: The offset the partition's high watermark must reach for the batch to be durable.
        self.durable_at = -1
        #: The partition written, or None if nothing was.
        self.log: PartitionLog | None = None


#: Per topic, in request order: (name, its partitions' results).
TopicResults = list[tuple[str, list[PartitionResult]]]


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """One partition's outcome of DeleteRecords: its new log start offset, or -1 and why not."""

    index: int
    error: ErrorCode
    low_watermark: int


#: Per topic, in request order: (name, its partitions' DeleteRecords outcomes).
DeleteResults = list[tuple[str, list[DeleteResult]]]

#: Coordinator errors a producer would not retry on a produce: answered NOT_ENOUGH_REPLICAS.
_RETRIABLE_VERIFICATION = {
    ErrorCode.concurrent_transactions,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
}


class Appender:
    """Appends to this node's partition logs, and says when what it appended is durable (see above).

    ``durability`` is group commit; ``verify`` asks the transaction coordinator whether a
    partition is in a producer's ongoing transaction (KIP-890), ``add_to_transaction`` adds it
    (transactions v2: a Produce v12+ adds its own partitions)."""

    def __init__(self, registry: PartitionRegistry, config: BrokerConfig, clock: Clock, durability: Durability,
                 verify: Verify, add_to_transaction: AddToTransaction | None = None) -> None:
        self._registry = registry
        self._config = config
        self._clock = clock
        self._durability = durability
        self._verify = verify
        self._add_to_transaction = add_to_transaction

    # -- partitions -----------------------------------------------------------

    def internal_partition(self, topic_name: str, partition: int) -> PartitionLog:
        """A partition of ``__consumer_offsets`` or ``__transaction_state``, creating the topic on
        first use (as Kafka does).  Raises OSError (a full disk) with nothing created, so a
        later call tries again."""
        topic = self._registry.topics.get(topic_name)
        if topic is None:
            count = self.internal_partitions(topic_name)
            if topic_name == OFFSETS_TOPIC:
                segment_bytes = self._config[OFFSETS_TOPIC_SEGMENT_BYTES]
            else:
                segment_bytes = self._config[TRANSACTION_STATE_LOG_SEGMENT_BYTES]
            overrides = {"cleanup.policy": ["compact"], "segment.bytes": segment_bytes}
            topic = self._registry.create_topic(topic_name, count, overrides, self._clock.now_ms(), internal=True)
        return topic.partitions[partition]

    def internal_partitions(self, topic_name: str) -> int:
        """How many partitions an internal topic has (or will have, once created)."""
        if topic_name == OFFSETS_TOPIC:
            return self._config[OFFSETS_TOPIC_NUM_PARTITIONS]
        return self._config[TRANSACTION_STATE_LOG_NUM_PARTITIONS]

    # -- client batches (Produce) ---------------------------------------------

    def append_records(
        self,
        entries: Iterable[tuple[str, Iterable[tuple[int, bytes | None]]]],
        acks: int,
        timeout_ms: int,
        done: Callable[[TopicResults], None],
        *,
        transactional_id: str | None = None,
        generic_txn_errors: bool = True,
        adds_partitions: bool = False,
        client: str = "",
    ) -> None:
        """Append a Produce request's batches, ``entries`` being (topic, (partition, batch)...);
        ``done`` gets every partition's result, in request order: at once for acks 0 and 1
        (and when nothing was written), once durable or at ``timeout_ms`` for acks=-1.
        ``generic_txn_errors``: the client knows TRANSACTION_ABORTABLE (KIP-890);
        ``adds_partitions``: a transactions-v2 client (Produce v12+), whose transactional
        batches add their partitions to the transaction first (``_add_then_append``);
        ``client`` names it in the log."""
        now = self._clock.now_ms()
        topics = self._registry.topics
        verify = self._config[TRANSACTION_PARTITION_VERIFICATION_ENABLE]
        results: TopicResults = []
        waiting: list[PartitionResult] = []
        #: Transactions v2: the transactional batches, appended once their partitions are added.
        to_add: list[tuple[PartitionLog, str, bytes, PartitionResult]] = []
        request = [(name, list(partitions)) for name, partitions in entries]
        if len(_transactional_producers(request)) > 1:
            # Kafka's handleProduceAppend throws InvalidPidMappingException: the whole request fails.
            log.info("produce from %s refused: transactional records of more than one producer id or epoch", client)
            done([(name, [_refused(index, ErrorCode.invalid_producer_id_mapping,
                                   "transactional records of more than one producer id or epoch in one request")
                          for index, _ in partitions]) for name, partitions in request])
            return
        for name, partitions in request:
            topic = topics.get(name)
            outs = []
            for index, records in partitions:
                out = PartitionResult(index)
                outs.append(out)
                if acks not in (-1, 0, 1):
                    out.error = ErrorCode.invalid_required_acks
                elif topic is None or not 0 <= index < len(topic.partitions):
                    out.error = ErrorCode.unknown_topic_or_partition
                elif topic.internal:
                    out.error = ErrorCode.invalid_topic_exception
                    out.message = f"Cannot append to internal topic {name}"
                elif not records:
                    out.error = ErrorCode.corrupt_message
                    out.message = "empty record set"
                elif adds_partitions and transactional_id is not None and _is_transactional(records):
                    to_add.append((topic.partitions[index], name, records, out))
                else:
                    error = self._transaction_check(transactional_id, name, index, records, verify, generic_txn_errors)
                    if error is not None:
                        out.error = error
                    elif self._append_produced(topic.partitions[index], records, now, out, client) and acks == -1:
                        waiting.append(out)
            results.append((name, outs))
        if to_add:
            assert transactional_id is not None
            self._add_then_append(transactional_id, to_add, acks, timeout_ms, results, waiting, done, client)
            return
        self._answer(results, waiting, timeout_ms, done)

    def _answer(self, results: TopicResults, waiting: list[PartitionResult], timeout_ms: int,
                done: Callable[[TopicResults], None]) -> None:
        if waiting:
            when_all_durable(results, waiting, self._durability.on_durable, timeout_ms, done)
            return
        done(results)

    def _add_then_append(self, transactional_id: str, to_add: list[tuple[PartitionLog, str, bytes, PartitionResult]],
                         acks: int, timeout_ms: int, results: TopicResults, waiting: list[PartitionResult],
                         done: Callable[[TopicResults], None], client: str) -> None:
        """Transactions v2 (KIP-890 part 2; Kafka's ReplicaManager with ADD_PARTITION): the
        partitions of a Produce v12+'s transactional batches join the producer's transaction
        through the coordinator (a durable ``__transaction_state`` record the first time), and
        only then are the batches appended.  One producer id per request: a batch of another is
        refused (INVALID_PRODUCER_ID_MAPPING).  The coordinator's refusals reach the client as
        Kafka's do: PRODUCER_FENCED as INVALID_PRODUCER_EPOCH, a coordinator moving or loading as
        NOT_ENOUGH_REPLICAS (retriable, no metadata refresh); CONCURRENT_TRANSACTIONS as itself.
        (``append_records`` has refused a request with more than one producer.)"""
        first = read_header(to_add[0][2])
        producer = (first.producer_id, first.producer_epoch)
        adding = to_add
        if self._add_to_transaction is None:  # no coordinator (some unit tests): nothing can be added
            for *_, out in adding:
                out.error = ErrorCode.coordinator_not_available
            self._answer(results, waiting, timeout_ms, done)
            return

        def added(errors: dict[tuple[str, int], ErrorCode]) -> None:
            now = self._clock.now_ms()
            for partition, name, records, out in adding:
                error = errors.get((name, out.index), ErrorCode.unknown_server_error)
                if error is not ErrorCode.none:
                    out.error = (ErrorCode.not_enough_replicas if error in _RETRIABLE_VERIFICATION - {ErrorCode.concurrent_transactions}
                                 else verification_error(error, True))
                elif self._append_produced(partition, records, now, out, client) and acks == -1:
                    waiting.append(out)
            self._answer(results, waiting, timeout_ms, done)

        self._add_to_transaction(transactional_id, producer[0], producer[1],
                                 list(dict.fromkeys((name, out.index) for _, name, _, out in adding)), added)

    def _transaction_check(self, transactional_id: str | None, topic: str, partition: int, records: bytes,
                           verify: bool, generic_errors: bool) -> ErrorCode | None:
        if len(records) < HEADER_SIZE:
            return None  # the log refuses it with the right error
        header = read_header(records)
        if not header.is_transactional:
            return None
        if transactional_id is None:
            return ErrorCode.transactional_id_authorization_failed
        if not verify:
            return None
        error = self._verify(transactional_id, header.producer_id, header.producer_epoch, topic, partition)
        if error is ErrorCode.none:
            return None
        if error in _RETRIABLE_VERIFICATION:
            return ErrorCode.not_enough_replicas
        return verification_error(error, generic_errors)

    def _append_produced(self, partition: PartitionLog, records: bytes, now: int, out: PartitionResult, client: str) -> bool:
        result = partition.append_produced(records, now)
        if isinstance(result, Invalid):
            out.error = result.error
            out.message = result.reason
            log.info("produce to %s from %s refused: %s (%s)", partition.name, client, result.error.name, result.reason)
            return False
        out.base_offset = result.base_offset
        out.log_append_time = result.log_append_time
        out.log_start_offset = result.log_start_offset
        out.durable_at = result.last_offset + 1
        out.log = partition
        self._durability.mark_dirty(partition)
        return True

    # -- coordinator records ----------------------------------------------------

    def append_coordinator_records(
        self,
        topic: str,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        done: Done,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
        durable: bool = True,
    ) -> None:
        """Append a coordinator's (key, value) records, as one batch, to a partition of an
        internal topic.  ``done`` is told later: NONE once durable (``durable=False``: once in
        the log, before every later record of the partition), or why nothing was written --
        a full disk, a failed partition, a fenced transactional producer -- and then the
        coordinator must not apply the change."""
        now = self._clock.now_ms()
        batch = build_batch(records, now, producer_id=producer_id, producer_epoch=producer_epoch, transactional=transactional)
        try:
            target = self.internal_partition(topic, partition)
            result = target.append_batch(batch, now)
        except OSError as exc:
            log.error("cannot write to %s-%d: %s", topic, partition, exc)
            _later(done, ErrorCode.kafka_storage_error)
            return
        if isinstance(result, Invalid):
            _later(done, result.error)
            return
        if durable:
            self._when_durable(target, target.log_end_offset, done)
            return
        # In the log, before every later record of the partition: the group commit that makes
        # any of them durable makes this one durable first (one file, written in order).  Nobody
        # waits for it, so it needs no flush of its own: it rides with the next one.
        self._durability.mark_lazy(target)
        _later(done, ErrorCode.none)

    # -- markers ----------------------------------------------------------------

    def append_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      commit: bool, durable: Done) -> ErrorCode:
        """Append a COMMIT (``commit``) or ABORT marker to one partition (internal ones included,
        never created here).  NONE: it is in the log, and ``durable`` will be told (later, never
        inside this call) whether it reached the disk; any other outcome: refused, nothing
        written, and ``durable`` is never called."""
        target = self._registry.get(topic, partition)
        if target is None:
            return ErrorCode.unknown_topic_or_partition
        try:
            outcome = target.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, self._clock.now_ms())
        except OSError as exc:
            log.error("cannot write a marker to %s: %s", target.name, exc)
            return ErrorCode.kafka_storage_error
        if isinstance(outcome, Invalid):
            log.info("marker for producer %d refused by %s: %s", producer_id, target.name, outcome.reason)
            return outcome.error
        self._when_durable(target, target.log_end_offset, durable)
        return ErrorCode.none

    # -- DeleteRecords ----------------------------------------------------------

    def delete_records(self, entries: Iterable[tuple[str, Iterable[tuple[int, int]]]]) -> DeleteResults:
        """Move the log start offset of each (topic, (partition, offset)...) in ``entries``; the
        outcome of each partition, grouped by topic in request order.  A partition named twice is
        answered once, for its last offset (Kafka keeps a map of them)."""
        wanted: dict[tuple[str, int], int] = {}
        for name, partitions in entries:
            for index, offset in partitions:
                wanted[(name, index)] = offset
        topics = self._registry.topics
        results: dict[str, list[DeleteResult]] = {}
        for (name, index), offset in wanted.items():
            topic = topics.get(name)
            if topic is None or not 0 <= index < len(topic.partitions):
                outcome = DeleteResult(index, ErrorCode.unknown_topic_or_partition, -1)
            elif topic.internal:
                outcome = DeleteResult(index, ErrorCode.invalid_topic_exception, -1)
            else:
                partition = topic.partitions[index]
                error, low_watermark = partition.delete_records(offset)
                outcome = DeleteResult(index, error, low_watermark)
                if error is not ErrorCode.none:
                    log.info("DeleteRecords of %s to %d refused: %s", partition.name, offset, error.name)
            results.setdefault(name, []).append(outcome)
        return list(results.items())

    # -- durability -------------------------------------------------------------

    def _when_durable(self, partition: PartitionLog, offset: int, done: Done) -> None:
        self._durability.mark_dirty(partition)
        self._durability.on_durable(partition, offset,
                                    lambda error: done(ErrorCode.none if error is None else ErrorCode.kafka_storage_error))


def when_all_durable(results: TopicResults, waiting: list[PartitionResult],
                     on_durable: Callable[[PartitionLog, int, Waiter], None], timeout_ms: int,
                     done: Callable[[TopicResults], None]) -> None:
    """Call ``done(results)`` once every partition written is durable (or failed), or at the
    timeout: REQUEST_TIMED_OUT for a write still waiting, KAFKA_STORAGE_ERROR for one that failed.

    Plain callbacks (no task, future, gather or wait_for): the answer leaves one loop pass
    after the last fsync reports, which is most of what an acks=all produce costs."""
    loop = asyncio.get_running_loop()
    pending = set(range(len(waiting)))
    answered = [False]

    def finish() -> None:
        answered[0] = True
        timer.cancel()
        for i in pending:
            waiting[i].error = ErrorCode.request_timed_out
        done(results)

    def durable(i: int, error: OSError | None) -> None:
        if answered[0] or i not in pending:
            return  # answered already (the timeout)
        pending.discard(i)
        if error is not None:
            waiting[i].error = ErrorCode.kafka_storage_error
            waiting[i].message = "the write could not be made durable"
        if not pending:
            finish()

    def timed_out() -> None:
        if not answered[0]:
            finish()

    timer = loop.call_later(max(timeout_ms, 0) / 1000, timed_out)
    for i, out in enumerate(waiting):
        assert out.log is not None
        on_durable(out.log, out.durable_at, functools.partial(durable, i))


def _is_transactional(records: bytes) -> bool:
    return len(records) >= HEADER_SIZE and read_header(records).is_transactional


def _transactional_producers(entries: list[tuple[str, list[tuple[int, bytes | None]]]]) -> set[tuple[int, int]]:
    """The (producer id, epoch) of every transactional batch that leads a partition's records
    (Kafka reads every batch; a Produce carries one batch per partition)."""
    producers = set()
    for _, partitions in entries:
        for _, records in partitions:
            if records and _is_transactional(records):
                header = read_header(records)
                producers.add((header.producer_id, header.producer_epoch))
    return producers


def _refused(index: int, error: ErrorCode, message: str) -> PartitionResult:
    out = PartitionResult(index)
    out.error = error
    out.message = message
    return out


def verification_error(error: ErrorCode, generic_error_supported: bool) -> ErrorCode:
    """A transaction-verification outcome (``TransactionCoordinator.partition_in_transaction``)
    as the request that asked for it answers it: Kafka's AddPartitionsToTxnManager.

    PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH ("producers expect it
    here"); TRANSACTION_ABORTABLE (KIP-890) reaches only clients that know
    it (Produce v11+, TxnOffsetCommit v4+) and is INVALID_TXN_STATE for the
    others.
    """
    if error is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if error is ErrorCode.transaction_abortable and not generic_error_supported:
        return ErrorCode.invalid_txn_state
    return error


def _later(done: Done, error: ErrorCode) -> None:
    asyncio.get_running_loop().call_soon(done, error)
