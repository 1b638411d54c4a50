"""The exactly-once sink: one Kafka transaction per (query, micro-batch, task partition), and the I/O of its protocol.

Theory of operation
-------------------
``protocol`` decides; this module talks to Kafka, through confluent-kafka
only.  A write task of micro-batch B, slot (task partition) P, of a scope
(a streaming query, a ``write_exactly_once`` name, a batch job):

1. *Fence.*  Makes sure the scope's progress topic has a partition for P
   (``progress``), then ``init_transactions`` with the transactional id
   ``<prefix>-<query id>-<P>``: every earlier attempt of slot P (a retry, a
   speculative copy, a task of a killed driver) can no longer commit, and
   what it left open is aborted.
2. *Read.*  Only then it reads slot P's record, and (once per Python worker
   and micro-batch) the other slots' records.
3. *Decide* (``protocol.plan``): write, check the rows against what the slot
   already wrote, wait for the slots an earlier run wrote to be confirmed,
   or refuse.
4. *Write.*  Rows and the slot's new record in one transaction, committed
   with retries of retriable errors; or a confirmation (a transaction
   holding only the record); or a refusal (recorded, so that the other
   tasks of the micro-batch refuse too, then raised as ``SinkRefusal``).

A task fenced by a rival attempt of its own slot (speculation) does not
fail: it waits until the rival's record shows the micro-batch written in
this run, and reports that; only if none shows within the transaction
timeout does it fail.

The driver's commit (``finish``) first writes the rows of tasks that
*deferred* (``protocol``: they could not wait longer for an earlier run's
slots to be confirmed), with those slots' transactional ids, through the
same protocol.  Then, the first time it sees a run of a scope, it fences
every slot of the progress topic that no task of that micro-batch fenced:
slots of an earlier run that had more tasks, and tasks that had no rows
(they never open a producer).  So once the first micro-batch after a
restart is committed, no transaction of the query's earlier runs is open,
whatever the task count; a restarted query no longer holds read_committed
readers until ``transaction.timeout.ms``.  ``write_exactly_once`` does the
fencing sooner: on the driver, before the first write of each run.

``deliveryGuarantee=at-least-once`` writes with an idempotent producer and
no transaction (Spark's own Kafka sink): a re-run task writes again.

Batch jobs (``df.write`` outside ``foreachBatch``) run the same protocol
with the job as the scope and micro-batch 0, so a task retried after its
commit skips.  The driver creates the job's progress topic before the
job (a task never does: a late attempt after the job ended finds it gone
and refuses), and fences its slots and deletes it when the job ends.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import logging
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from . import _extra  # noqa: F401  (first: one line naming the spark extra when it is missing)

# isort: split
import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer

from . import faults
from .kafka import ClusterUnanswered, client_config, describe_cluster
from .options import OptionError, SinkOptions
from .progress import ProgressStore, reader_params
from .protocol import (
    DEFAULT_PREFIX,
    Abort,
    Clock,
    Commit,
    Defer,
    Fence,
    Fenced,
    Fingerprint,
    Outcome,
    ReadOthers,
    ReadOwn,
    ReadRows,
    Record,
    Settings,
    SinkRefusal,
    Sleep,
    SlotRecord,
    Step,
    TaskIdentity,
    WriteRows,
    progress_topic,
    task_steps,
    transactional_id,
)

log = logging.getLogger(__name__)

__all__ = ["SinkRefusal", "TaskIdentity", "TaskOutcome", "finish", "task_identity", "write_at_least_once",
           "write_exactly_once"]

#: Bounds on waits that are not the transaction itself.
CLIENT_TIMEOUT_S = 60.0
#: How often a waiting task reads the other slots' records.
WAIT_POLL_S = 0.25
FENCE_PARALLELISM = 8
_T = TypeVar("_T")

#: Errors of a coordinator call that say "try again": the coordinator moved, is loading, or is
#: finishing the previous transaction.  librdkafka retries some itself; the rest are retried here.
_RETRIABLE = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                        KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.CONCURRENT_TRANSACTIONS,
                        KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError.REQUEST_TIMED_OUT,
                        KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND})
_FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


#: A row as the producer takes it: (topic, value, key, partition, headers).
Message = tuple[str, Any, Any, int | None, Any]


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """What one task did; sent back to the driver as its commit message."""

    partition: int
    batch_id: int
    rows: int
    #: written, confirmed (an earlier run wrote the same rows), skipped (written before), empty,
    #: rival (another attempt of the slot wrote it), at-least-once.
    action: str = "written"
    query_id: str | None = None
    name: str | None = None
    run: str | None = None
    transactional_id: str | None = None
    #: The task fenced its slot: no earlier attempt of it can still be open.
    fenced: bool = False
    #: A deferred task's identity and rows, for the driver to write (``finish``).
    task: TaskIdentity | None = None
    deferred: tuple[Message, ...] | None = None

    @property
    def skipped(self) -> bool:
        return self.action in ("confirmed", "skipped", "rival")

    def __repr__(self) -> str:  # the deferred rows would fill a log line
        rows = f", {len(self.deferred)} deferred rows" if self.deferred is not None else ""
        return f"TaskOutcome({self.partition}, batch {self.batch_id}, {self.rows} rows, {self.action}{rows})"


UUID_PATTERN = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_UUID = re.compile(UUID_PATTERN)


#: The local property ``write_exactly_once`` sets on the driver for its write's tasks: the run it found.
RUN_PROPERTY = "onceflow.runId"


def run_id(local_property: Callable[[str], str | None]) -> str | None:
    """One execution of a streaming query, from a task's (or the driver's) local properties, or ``None``.

    Spark sets a streaming query's job group to its run id (new at every
    start) and names it in the job description. A foreachBatch function may
    set its own job group, which replaces both: ``write_exactly_once`` then
    passes the run it found on the driver (``RUN_PROPERTY``); a plain
    ``df.write`` there cannot tell its run, and is refused (``task_identity``)."""
    own = local_property(RUN_PROPERTY)
    if own:
        return own
    group = local_property("spark.jobGroup.id") or ""
    if _UUID.fullmatch(group):
        return group
    found = re.search(r"runId = (" + _UUID.pattern + ")", local_property("spark.job.description") or "")
    return found.group(1) if found else None


def task_identity(query_id: str | None, batch_id: str | int | None, partition: int, attempt: int = 0,
                  run: str | None = None, stage: int = 0, name: str | None = None) -> TaskIdentity:
    if not query_id or batch_id is None:
        raise OptionError("the exactly-once sink needs Spark's streaming query id and batch id; in foreachBatch use "
                          "onceflow.spark.write_exactly_once(df, batch_id, ...)")
    if not run:
        raise SinkRefusal(f"micro-batch {batch_id} of query {query_id}: the sink cannot tell this run of the query "
                          f"from an earlier one (Spark's job group, which holds the run id, was replaced, by a "
                          f"foreachBatch function calling setJobGroup?). Write with onceflow.spark.write_exactly_once "
                          f"there, which finds the run on the driver, or leave the job group alone")
    return TaskIdentity(query_id, int(batch_id), partition, run, attempt, name, stage)


# -- rows -> messages --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rows:
    """One Arrow batch's rows, column by column: the unit the write path loops over (a Python call
    per row costs as much as the produce itself).  ``topic`` is the ``topic`` option, or each row's."""

    topic: str | list[Any]
    values: list[Any]
    keys: list[Any] | None = None
    partitions: list[Any] | None = None
    headers: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.values)

    @property
    def simple(self) -> bool:
        """One topic, partitions left to the partitioner, no headers: the fast path's shape."""
        return isinstance(self.topic, str) and self.partitions is None and self.headers is None

    def messages(self) -> Iterator[Message]:
        n = len(self.values)
        topics = [self.topic] * n if isinstance(self.topic, str) else self.topic
        keys = self.keys if self.keys is not None else [None] * n
        partitions = self.partitions if self.partitions is not None else [None] * n
        headers = self.headers if self.headers is not None else [None] * n
        for i, topic in enumerate(topics):
            if topic is None:
                raise OptionError("a row has a null 'topic' and no 'topic' option is set")
            yield topic, self.values[i], keys[i], partitions[i], headers[i]

    @classmethod
    def of(cls, messages: Iterable[Message]) -> Rows:
        """Rows from messages (the rows a task deferred, written by the driver)."""
        columns = [list(column) for column in zip(*messages, strict=True)]
        if not columns:
            return cls([], [])
        topics, values, keys, partitions, headers = columns
        return cls(topics, values, keys, partitions, headers)


def _rows(batches: Iterable[pa.RecordBatch], topic_option: str | None) -> Iterator[Rows]:
    """Each non-empty batch's columns as Python lists (one C-level conversion per column)."""
    for batch in batches:
        if not batch.num_rows:
            continue
        column = functools.partial(_column, batch)
        headers = column("headers")
        if headers is not None and not any(headers):
            headers = None
        elif headers is not None:
            headers = [[(h["key"], h["value"]) for h in row] if row else None for row in headers]
        topic: str | list[Any] | None = topic_option if topic_option is not None else column("topic")
        if topic is None:
            raise OptionError("a row has a null 'topic' and no 'topic' option is set")
        values = column("value")
        if values is None:
            raise OptionError("the rows have no 'value' column")
        yield Rows(topic, values, column("key"), column("partition"), headers)


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    names = batch.schema.names
    return batch.column(names.index(name)).to_pylist() if name in names else None


def _produce_rows(producer: Producer, rows: Rows, on_delivery: Any = None) -> None:
    """Queue every row (the fast path: no per-row tuple or call besides the produce)."""
    topic = rows.topic
    if not isinstance(topic, str) or not rows.simple:
        for message in rows.messages():
            _produce(producer, message, on_delivery)
        producer.poll(0)
        return
    produce = producer.produce
    keys = rows.keys if rows.keys is not None else [None] * len(rows)
    for value, key in zip(rows.values, keys, strict=True):
        try:
            produce(topic, value, key, -1, on_delivery)
        except BufferError:
            _produce(producer, (topic, value, key, None, None), on_delivery)
    producer.poll(0)  # serve delivery reports: once per batch of rows


def _fingerprint(fingerprint: Fingerprint, rows: Rows) -> None:
    topic = rows.topic
    if isinstance(topic, str) and rows.simple:
        fingerprint.add_columns(topic, rows.keys, rows.values)
    else:
        fingerprint.extend(rows.messages())


def _produce(producer: Producer, message: Message, on_delivery: Any = None) -> None:
    """Queue one message; while the producer's queue is full, wait for it to drain a little (bounded)."""
    topic, value, key, partition, headers = message
    for _ in range(1000):  # bounded: each turn waits up to 50 ms
        try:
            # Positional, and no keyword dict: this is every row's path (0.8 against 1.5 us per row).
            producer.produce(topic, value, key, -1 if partition is None else partition, on_delivery, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)
    raise BufferError("the producer's queue stayed full for 50 s")


# -- Kafka calls -------------------------------------------------------------------------


def _call(call: Callable[[], _T], what: str, timeout_s: float = CLIENT_TIMEOUT_S) -> _T:
    """A transactional or coordinator call, retried on retriable errors within ``timeout_s``; anything
    else (fencing included) propagates."""
    deadline = time.monotonic() + timeout_s
    backoff = 0.05
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0]
            if not isinstance(error, KafkaError):
                raise
            if error.code() in _FENCED:
                raise  # not for retrying: the caller turns it into protocol.Fenced
            retriable = error.retriable() or error.code() in _RETRIABLE
            if not retriable or error.txn_requires_abort() or time.monotonic() + backoff > deadline:
                raise
            log.info("%s: retrying after a retriable error: %s", what, error)
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)


def _producer_config(options: SinkOptions, tid: str) -> dict[str, Any]:
    config = client_config(options.bootstrap_servers, options.kafka_params)
    config.update({"transactional.id": tid, "transaction.timeout.ms": options.transaction_timeout_ms})
    config.setdefault("message.timeout.ms", min(options.transaction_timeout_ms, 300000))
    config.setdefault("linger.ms", 5)
    return config


def _prefix(options: SinkOptions) -> str:
    return options.transactional_id_prefix or DEFAULT_PREFIX


def missing_progress(task: TaskIdentity) -> str | None:
    """Why a task must not create its scope's progress topic, or ``None`` where it may: a batch
    job's topic is created by its driver only (gone, it means the job is over).

    A streaming scope's topic is created wherever it is missing. A deleted one cannot be told
    from one never created (a query's first micro-batches may have had no rows, or no tasks,
    and then nothing created it), so a query restarted after its progress topic was deleted
    writes a partly written micro-batch again: the README says not to delete it. A deletion
    under a running query is refused (``_gone``)."""
    if is_job(task.query_id):
        return (f"the sink's progress topic {task.progress_topic} does not exist: the batch job this task "
                f"belongs to is over (a late attempt), or the topic was deleted")
    return None


def _topic_missing(exc: BaseException) -> bool:
    """A failure that may mean the progress topic is gone (not, say, brokers out of reach)."""
    if isinstance(exc, ProgressGone):
        return True
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.code() in (
        KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION, KafkaError._NOENT)


def _gone(store: ProgressStore, task: TaskIdentity) -> SinkRefusal | None:
    """After a task failed: forget what this process knew of its progress topic, so the next task
    looks afresh; if the topic it knew is gone (deleted under a running query), the refusal to give."""
    known = _room.pop(_room_key(store, task), None) is not None
    for key in [k for k in _snapshots if k[0] == store.topic]:
        del _snapshots[key]
    if not known:
        return None
    try:
        if store.partition_count() > 0:
            return None
    except Exception:  # noqa: BLE001 - the first failure is the one to report
        return None
    return SinkRefusal(f"the sink's progress topic {store.topic} was deleted under {task.describe()}: its records "
                       f"said which rows earlier micro-batches wrote. A retry or a restart creates it afresh, and "
                       f"a micro-batch partly written before the deletion is then written again")


def _store(options: SinkOptions, task: TaskIdentity) -> ProgressStore:
    return ProgressStore(options.bootstrap_servers, options.kafka_params, task.progress_topic)


#: Slots each progress topic is known to have room for, in this process.
_room: dict[tuple[str, str, str], int] = {}


def _room_key(store: ProgressStore, task: TaskIdentity) -> tuple[str, str, str]:
    """Per cluster, topic and run: what one run learnt says nothing of a topic deleted before the next."""
    return store.bootstrap_servers, store.topic, task.run
#: Every slot's record per (progress topic, micro-batch, run, stage), read once per process (``_snapshot``).
_snapshots: OrderedDict[tuple[str, int, str, int], dict[int, SlotRecord]] = OrderedDict()


def _snapshot_key(store: ProgressStore, task: TaskIdentity) -> tuple[str, int, str, int]:
    return store.topic, task.batch_id, task.run, task.stage


def _snapshot(store: ProgressStore, task: TaskIdentity) -> dict[int, SlotRecord]:
    """Every slot's record as this process first read it in this stage (of this run, of this micro-batch).

    Read after the first task here fenced its slot, it is that task's own
    record too.  For the others it is enough for ``plan``: what ``plan``
    takes from other slots is what earlier runs, or earlier stages of this
    run, wrote for this micro-batch, which cannot change while this stage
    runs, and refusals, which only follow a ``Wait`` (read fresh while
    waiting)."""
    key = _snapshot_key(store, task)
    records = _snapshots.get(key)
    if records is None:
        count = store.partition_count()
        if count == 0 and _room_key(store, task) in _room:  # this run made sure of it here: deleted since
            raise ProgressGone(f"the sink's progress topic {store.topic} was deleted under {task.describe()}")
        records = store.read(range(count)) if count else {}  # none yet: a task without rows reads first
        _snapshots[key] = records
        while len(_snapshots) > 32:
            _snapshots.popitem(last=False)
    return records


class ProgressGone(RuntimeError):
    """The progress topic a task's run made sure of is gone (deleted under the running query)."""


class TransactionTimedOut(RuntimeError):
    """A task's transaction outlived ``kafka.transaction.timeout.ms``: the brokers aborted it."""


class KafkaTaskIO:
    """One exactly-once task's Kafka side: carries out the protocol's steps (``protocol.task_steps``) with
    its transactional producer, its scope's progress topic and the task's rows."""

    def __init__(self, task: TaskIdentity, options: SinkOptions, rows: Iterator[Rows]) -> None:
        self.task = task
        self.options = options
        self.rows = rows
        self.tid = transactional_id(options.transactional_id_prefix, task.query_id, task.partition)
        self.store = _store(options, task)
        self.producer: Producer | None = None
        self._open = False
        #: Fatal errors librdkafka reported (a fenced producer's calls then only say _FATAL).
        self._fatal: list[KafkaError] = []
        #: The rows kept for the driver (``Defer``).
        self.deferred: tuple[Message, ...] | None = None
        #: When the transaction not yet committed began (``time.monotonic``; 0: none).
        self._began = 0.0

    def do(self, step: Step) -> Any:
        """Carry out one step; a fenced producer is ``Fenced``."""
        try:
            return self._do(step)
        except KafkaException as exc:
            error = exc.args[0]
            if isinstance(error, KafkaError) and error.code() == KafkaError._FATAL and self._fatal:
                error = self._fatal[0]  # librdkafka answers _FATAL once its producer is fenced: the cause
            if isinstance(error, KafkaError) and error.code() in _FENCED:
                self._open = False
                self._timed_out(error)
                raise Fenced(str(error)) from None
            raise

    def _timed_out(self, error: KafkaError) -> None:
        """A transaction open for longer than its timeout was aborted by the coordinator, which bumped
        the epoch: the producer then looks fenced, but no other attempt of the task exists to wait for."""
        lasted_s = time.monotonic() - self._began
        limit_ms = self.options.transaction_timeout_ms
        if self._began and lasted_s * 1000 >= limit_ms and not self._rival_wrote():
            raise TransactionTimedOut(
                f"{self.tid}: {self.task.describe()}: the transaction was open for {lasted_s:.0f} s, longer than "
                f"kafka.transaction.timeout.ms ({limit_ms}), and the brokers aborted it ({error.str()}). Raise "
                f"kafka.transaction.timeout.ms (up to the brokers' transaction.max.timeout.ms) or make "
                f"micro-batches smaller (maxOffsetsPerTrigger)")

    def _rival_wrote(self) -> bool:
        """Whether a copy of this task (same stage) already wrote its micro-batch: then being fenced
        after the timeout is that copy's doing, and the task takes its outcome (``protocol``)."""
        try:
            own = self.store.read([self.task.partition]).get(self.task.partition)
        except (KafkaException, TimeoutError):
            return False
        w = own.written if own is not None else None
        return w is not None and (w.batch, w.run, w.stage) == (self.task.batch_id, self.task.run, self.task.stage)

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self._fatal.append(error)

    def _do(self, step: Step) -> Any:
        if isinstance(step, Fence):
            return self._fence()
        if isinstance(step, ReadOwn):
            if _snapshot_key(self.store, self.task) not in _snapshots:  # the first task here: read them all
                return _snapshot(self.store, self.task).get(self.task.partition)
            return self.store.read([self.task.partition]).get(self.task.partition)
        if isinstance(step, ReadOthers):
            return self.store.read(range(self.store.partition_count())) if step.fresh else _snapshot(self.store, self.task)
        if isinstance(step, Clock):
            return time.monotonic()
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        if isinstance(step, ReadRows):
            fingerprint = Fingerprint()
            for rows in self.rows:
                _fingerprint(fingerprint, rows)
            return fingerprint.rows, fingerprint.hex
        if isinstance(step, WriteRows):
            return self._write_rows()
        if isinstance(step, Defer):
            self.deferred = tuple(message for rows in self.rows for message in rows.messages())
            fingerprint = Fingerprint()
            fingerprint.extend(self.deferred)
            return fingerprint.rows, fingerprint.hex
        if isinstance(step, Commit):
            return self._commit(step.record)
        if isinstance(step, Abort):
            return self._abort()
        assert isinstance(step, Record)
        return self._record(step.record, step.best_effort)

    def _fence(self) -> None:
        slots = self.task.partition + 1
        if _room.get(_room_key(self.store, self.task), 0) < slots:
            if self.store.ensure(slots, missing=missing_progress(self.task)) and self.task.batch_id > 0:
                log.warning("%s: created the sink's progress topic %s at %s: right if no earlier micro-batch "
                            "wrote rows; if it was deleted, a micro-batch partly written before is written again",
                            self.tid, self.store.topic, self.task.describe())
            _room[_room_key(self.store, self.task)] = slots
        if self.producer is None:
            config = {**_producer_config(self.options, self.tid), "error_cb": self._on_error}
            self.producer = faults.decorate_spark_producer(Producer(config), self.task)
        producer = self.producer
        _call(lambda: producer.init_transactions(CLIENT_TIMEOUT_S), f"{self.tid}: init_transactions")

    def _write_rows(self) -> tuple[int, str]:
        producer = self.producer
        assert producer is not None
        producer.begin_transaction()
        self._open, self._began = True, time.monotonic()
        fingerprint = Fingerprint()
        for rows in self.rows:
            _produce_rows(producer, rows)
            _fingerprint(fingerprint, rows)
        return fingerprint.rows, fingerprint.hex

    def _commit(self, record: SlotRecord) -> None:
        """Produce ``record`` into the open transaction and commit it; on failure the transaction is aborted."""
        producer = self.producer
        assert producer is not None
        try:
            producer.produce(self.store.topic, record.encode(), key=record.key(), partition=record.slot)
            timeout_s = self.options.transaction_timeout_ms / 1000
            _call(lambda: producer.commit_transaction(timeout_s), f"{self.tid}: commit", timeout_s)
            self._open, self._began = False, 0.0
        except BaseException:
            self._abort()
            raise

    def _abort(self) -> None:
        if self.producer is None or not self._open:
            return
        self._open = False
        try:
            self.producer.abort_transaction(CLIENT_TIMEOUT_S)
        except KafkaException as exc:  # fenced or fatal: the next attempt's fence aborts it
            log.info("%s: abort after a failed write did not complete: %s", self.tid, exc)

    def _record(self, record: SlotRecord, best_effort: bool) -> bool:
        try:
            producer = self.producer
            assert producer is not None
            producer.begin_transaction()
            self._open, self._began = True, time.monotonic()
            self._commit(record)
            return True
        except (KafkaException, TimeoutError) as exc:
            if not best_effort:
                raise
            log.info("%s: the record could not be written: %s", self.tid, exc)
            return False

    def close(self) -> None:
        self._abort()
        if self.producer is not None:
            self.producer.flush(1)
            self.producer = None


def drive(steps: Generator[Step, Any, Outcome], do: Callable[[Step], Any]) -> Outcome:
    """Run a task's protocol: each step carried out by ``do``, fencing thrown back in as ``Fenced``."""
    result: Any = None
    fenced: Fenced | None = None
    while True:
        try:
            step = steps.send(result) if fenced is None else steps.throw(fenced)
        except StopIteration as stop:
            outcome: Outcome = stop.value
            return outcome
        fenced = None
        try:
            result = do(step)
        except Fenced as exc:
            result, fenced = None, exc


# -- the exactly-once task ---------------------------------------------------------------


def settings(options: SinkOptions) -> Settings:
    return Settings(_prefix(options), options.accept_changed_replay, options.replay_wait_ms / 1000,
                    rival_timeout_s=options.transaction_timeout_ms / 1000 + CLIENT_TIMEOUT_S, wait_poll_s=WAIT_POLL_S)


def write_exactly_once(batches: Iterable[pa.RecordBatch], task: TaskIdentity, options: SinkOptions) -> TaskOutcome:
    """Write one task's rows exactly once (see the module docstring and ``protocol``)."""
    rows = _rows(batches, options.topic)
    first = next(rows, None)
    return _run(task, options, itertools.chain([first], rows) if first is not None else iter(()), first is not None)


def _run(task: TaskIdentity, options: SinkOptions, rows: Iterator[Rows], has_rows: bool,
         at_driver: bool = False) -> TaskOutcome:
    io = KafkaTaskIO(task, options, rows)
    try:
        outcome = drive(task_steps(task, settings(options), has_rows, at_driver), io.do)
    except SinkRefusal as refusal:
        log.error("%s: refusing to write: %s", io.tid, refusal)
        raise
    except (ProgressGone, KafkaException) as exc:
        gone = _gone(io.store, task) if _topic_missing(exc) else None
        if gone is None:
            raise
        log.error("%s: refusing to write: %s", io.tid, gone)
        raise gone from exc
    finally:
        fenced = io.producer is not None
        io.close()
    if outcome.warning:
        log.warning("%s", outcome.warning)
    if outcome.action == "deferred":
        log.warning("%s: %s: the task partitions an earlier run wrote were not confirmed within %d ms; its %d "
                    "rows go to the driver, which writes them once every task has returned", io.tid,
                    task.describe(), options.replay_wait_ms, outcome.rows)
    elif outcome.action != "written":
        log.info("%s: %s: %s", io.tid, task.describe(), outcome.action)
    return TaskOutcome(task.partition, task.batch_id, outcome.rows, outcome.action, task.query_id, task.name,
                       task.run, io.tid, fenced=fenced or outcome.action == "rival",
                       task=task if io.deferred is not None else None, deferred=io.deferred)


# -- the driver's checks -------------------------------------------------------------------

#: Settings already checked in this process (the driver asks again for every micro-batch).
_checked: set[tuple[Any, ...]] = set()
#: How long the driver may take to learn the brokers' transaction.max.timeout.ms.
BROKER_CHECK_TIMEOUT_S = 10.0
_PROPERTY = re.compile(r'property "?([A-Za-z0-9_.]+)"?')


def check_client_settings(options: SinkOptions, require_cluster: bool = False) -> None:
    """On the driver, before any data moves: the tasks' producer settings as librdkafka will take them
    (a producer is made and dropped, so every setting it would refuse in a task is refused here), and
    the transaction timeout against the brokers' ``transaction.max.timeout.ms``.

    ``require_cluster`` (a batch job): no broker answering within ``kafka.default.api.timeout.ms``
    is an error naming the bootstrap servers.  Otherwise (a streaming query, whose sink PySpark
    makes again at every micro-batch's commit) an unanswered check is only logged: a broker that is
    down for a while must not fail a commit whose rows are written."""
    key = (options.bootstrap_servers, tuple(sorted(options.kafka_params.items())), options.delivery_guarantee,
           require_cluster)
    if key in _checked:
        return
    exactly_once = options.delivery_guarantee == "exactly-once"
    config = _producer_config(options, "onceflow-settings-check") if exactly_once else _at_least_once_config(options)
    problem = _refused(config)
    if problem is not None:
        # Name the user's option: librdkafka names the property, maybe by another of its names
        # (linger.ms is queue.buffering.max.ms); the one whose removal makes the problem go is it.
        culprit = next((k for k in options.kafka_params if k != "bootstrap.servers"
                        and _refused({n: v for n, v in config.items() if n != k}) is None), None)
        match = _PROPERTY.search(problem)
        origins = options.kafka_origins
        option = (f"kafka.{origins.get(culprit, culprit)}" if culprit else
                  f"kafka.{origins.get(match.group(1), match.group(1))}" if match else "kafka.*")
        raise OptionError(f"Option '{option}': the Kafka client refuses the sink's producer settings: {problem}",
                          option)
    cluster = _reachable(options, require_cluster)
    if exactly_once and cluster is not None:
        _check_transaction_timeout(options, cluster)
    _checked.add(key)


def _refused(config: Mapping[str, Any]) -> str | None:
    """What librdkafka says against a producer with ``config``, or None (it is made and dropped)."""
    try:
        Producer(dict(config)).flush(0)
    except (KafkaException, ValueError, TypeError) as exc:
        return str(exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else exc)
    return None


def _reachable(options: SinkOptions, required: bool) -> Any:
    """The cluster's description, or None (logged) when it cannot be had; when ``required`` and no
    broker answers within ``kafka.default.api.timeout.ms``, an OptionError naming the bootstrap servers:
    before any data moves, not after every task has retried its clients for minutes."""
    if not required and options.delivery_guarantee != "exactly-once":
        return None  # nothing to check it against
    timeout_s = options.api_timeout_ms / 1000 if required else BROKER_CHECK_TIMEOUT_S
    try:
        return describe_cluster(options.bootstrap_servers, reader_params(options.kafka_params), timeout_s)
    except ClusterUnanswered as exc:
        if required:
            raise OptionError(f"Option 'kafka.bootstrap.servers': {exc} (kafka.default.api.timeout.ms bounds the wait)",
                              "kafka.bootstrap.servers") from None
        problem: Exception = exc
    except KafkaException as exc:
        problem = exc
    log.warning("could not describe the cluster at %s (%s); the sink's settings are not checked against it",
                options.bootstrap_servers, problem)
    return None


def _check_transaction_timeout(options: SinkOptions, cluster: Any) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient(client_config(options.bootstrap_servers, reader_params(options.kafka_params)))
    try:
        resource = ConfigResource(ResourceType.BROKER, str(cluster.nodes[0].id))
        [future] = admin.describe_configs([resource], request_timeout=BROKER_CHECK_TIMEOUT_S).values()
        entry = future.result(BROKER_CHECK_TIMEOUT_S + 5).get("transaction.max.timeout.ms")
    except (KafkaException, concurrent.futures.TimeoutError, IndexError) as exc:
        log.warning("could not read the brokers' transaction.max.timeout.ms (%s); the transaction timeout "
                    "(%d ms) is not checked against it", exc, options.transaction_timeout_ms)
        return
    if entry is not None and entry.value is not None and options.transaction_timeout_ms > int(entry.value):
        raise OptionError(f"Option 'kafka.transaction.timeout.ms' ({options.transaction_timeout_ms}) is above the "
                          f"brokers' transaction.max.timeout.ms ({entry.value}): every task's producer would be "
                          f"refused. Lower it, or raise transaction.max.timeout.ms on the brokers",
                          "kafka.transaction.timeout.ms")


# -- the driver's commit ------------------------------------------------------------------

#: (progress topic, run) pairs whose earlier transactions this process has fenced.
_cleaned: set[tuple[str, str]] = set()


def finish(outcomes: Iterable[object], options: SinkOptions) -> None:
    """The driver's commit of a micro-batch, once every task returned: write what tasks deferred (a
    refusal raises, and Spark does not commit the micro-batch); then, the first time in a run, fence
    the slots no task fenced."""
    done = [o for o in outcomes if isinstance(o, TaskOutcome) and o.query_id]
    for outcome in done:
        if outcome.task is not None and outcome.deferred is not None:
            written = _run(outcome.task, options, iter([Rows.of(outcome.deferred)]), True, at_driver=True)
            log.info("the driver wrote the %d rows task partition %d deferred (%s)", outcome.rows, outcome.partition,
                     written.action)
    if not done:
        return
    first = done[0]
    topic = progress_topic(first.query_id or "", first.name)
    key = (topic, first.run or "")
    if key in _cleaned:
        return
    fenced = {o.partition for o in done if o.fenced or o.deferred is not None}
    try:
        count = ProgressStore(options.bootstrap_servers, options.kafka_params, topic).partition_count()
        fence(options, [transactional_id(options.transactional_id_prefix, first.query_id or "", s)
                        for s in range(count) if s not in fenced])
    except (KafkaException, TimeoutError, concurrent.futures.TimeoutError) as exc:
        # Nothing is lost: open transactions of earlier runs only hold readers until their timeout.
        log.warning("could not fence the earlier runs' transactional ids of %s (%s); trying again after the "
                    "next micro-batch", topic, exc)
        return
    if count > len(fenced):
        log.info("fenced %d transactional ids of earlier runs that this run's micro-batch %d did not use",
                 count - len(fenced), first.batch_id)
    _cleaned.add(key)


def prefence(options: SinkOptions, query_id: str, name: str | None, run: str) -> None:
    """On the driver, before a run's first write of a scope (``write_exactly_once``): fence every slot
    the scope ever had, so that nothing of an earlier run (a zombie task, a commit in doubt while a
    broker fails over) can land after this run's tasks decided."""
    topic = progress_topic(query_id, name)
    if (topic, run) in _cleaned:
        return
    count = ProgressStore(options.bootstrap_servers, options.kafka_params, topic).partition_count()
    fence(options, [transactional_id(options.transactional_id_prefix, query_id, s) for s in range(count)])
    _cleaned.add((topic, run))


def fence(options: SinkOptions, tids: Iterable[str]) -> None:
    """``init_transactions`` on each id (in parallel): whatever it left open is aborted."""

    def one(tid: str) -> None:
        producer = Producer(_producer_config(options, tid))
        try:
            _call(lambda: producer.init_transactions(CLIENT_TIMEOUT_S), f"{tid}: fence")
        finally:
            producer.flush(0)

    with ThreadPoolExecutor(FENCE_PARALLELISM) as pool:
        for result in pool.map(one, tids):
            del result


def start_job(options: SinkOptions, job_id: str) -> None:
    """Before a batch job's tasks: its progress topic (tasks only add partitions to it)."""
    if options.delivery_guarantee == "exactly-once":
        ProgressStore(options.bootstrap_servers, options.kafka_params, progress_topic(job_id)).ensure(1)


def finish_job(options: SinkOptions, job_id: str, fence_slots: bool = True) -> None:
    """A batch job is over (committed or aborted): fence its slots (a late attempt cannot commit), then
    delete its progress topic (a late attempt that had not started finds it gone and refuses).
    Without ``fence_slots`` (no task wrote in the job's scope) only the topic is deleted."""
    if options.delivery_guarantee != "exactly-once":
        return
    store = ProgressStore(options.bootstrap_servers, options.kafka_params, progress_topic(job_id))
    try:
        count = store.partition_count() if fence_slots else 0
        fence(options, [transactional_id(options.transactional_id_prefix, job_id, s) for s in range(count)])
    except (KafkaException, TimeoutError, concurrent.futures.TimeoutError) as exc:
        log.warning("could not fence the batch job's transactional ids (%s)", exc)
    store.delete()


# -- at-least-once -------------------------------------------------------------------------


def _at_least_once_config(options: SinkOptions) -> dict[str, Any]:
    config = client_config(options.bootstrap_servers, options.kafka_params)
    config.setdefault("enable.idempotence", True)
    config.setdefault("linger.ms", 5)
    return config


def write_at_least_once(batches: Iterable[pa.RecordBatch], options: SinkOptions) -> int:
    """Spark's own Kafka sink semantics: every row is written, a re-run task writes again."""
    producer = Producer(_at_least_once_config(options))
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            errors.append(error)

    count = 0
    for rows in _rows(batches, options.topic):
        _produce_rows(producer, rows, delivered)
        count += len(rows)
    left = producer.flush(options.transaction_timeout_ms / 1000)
    if left or errors:
        raise KafkaException(errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT))
    return count


def new_job_id() -> str:
    return f"{JOB_PREFIX}{uuid.uuid4()}"


JOB_PREFIX = "job-"


def is_job(query_id: str) -> bool:
    """A batch job's scope (Spark's query ids are bare UUIDs)."""
    return query_id.startswith(JOB_PREFIX)


def summarize(messages: Iterable[object]) -> Mapping[str, int]:
    """Totals of the tasks' outcomes, for the driver's log."""
    outcomes = [m for m in messages if isinstance(m, TaskOutcome)]
    totals = {"tasks": len(outcomes), "rows": sum(o.rows for o in outcomes), "skipped": sum(o.skipped for o in outcomes)}
    for action in ("confirmed", "rival", "empty"):
        n = sum(o.action == action for o in outcomes)
        if n:
            totals[action] = n
    return totals
