"""The exactly-once sink: one Kafka transaction per (query, micro-batch, task partition).

Theory of operation
-------------------
Spark has no atomic commit across the tasks of a micro-batch, and it re-runs
a task, or a whole micro-batch, after any failure.  So each write task makes
its own output atomic and idempotent, with standard Kafka APIs only:

1. *Identity.*  Task partition P of query Q writes with the transactional id
   ``<prefix>-<Q>-<P>`` and keeps its bookkeeping in the consumer group of the
   same name.  Q is Spark's query id (``sql.streaming.queryId``), stable
   across restarts from the checkpoint and new for a new checkpoint, so ids
   never collide between queries and a fresh checkpoint starts afresh.
2. *Fence.*  ``init_transactions`` bumps the producer epoch of that id:
   every earlier attempt of the task (a zombie, a speculative copy, a task of
   a driver that was killed) can no longer commit, and whatever it left open
   is aborted.
3. *Check.*  Only then the task reads its group's committed offset for the
   bookkeeping key (partition 0 of the sink's topic) with require_stable
   (a read_committed consumer).  ``batch + 1`` there means "micro-batch
   ``batch`` of partition P is written": the task skips its rows.
4. *Write.*  Otherwise it begins a transaction, produces its rows, adds
   ``batch + 1`` for the key to the transaction through
   ``send_offsets_to_transaction`` (Delta Lake's txnAppId/txnVersion idea,
   kept in Kafka itself), and commits.  Output and bookkeeping become
   visible together or not at all.

Why that is exactly-once: two attempts X and Y of the same (Q, batch, P),
with Y fenced in after X.  If X committed before Y's fence, Y's check sees
X's offset (the coordinator completes X's transaction before it lets Y in)
and Y skips.  If not, X's commit fails as fenced and its transaction is
aborted, and only Y's can commit.  Spark's checkpoint replay gives the same
rows to the same (batch, P) only if the query is deterministic, which Spark
itself assumes.

The driver's ``commit`` has nothing left to do (each task committed its
own), so it is idempotent; ``abort`` neither: a failed task aborted its
transaction, and a dead one's is aborted by the next attempt's fence, or by
``transaction.timeout.ms`` if the query is never restarted.

``deliveryGuarantee=at-least-once`` writes with an idempotent producer and
no transaction (Spark's own Kafka sink): a re-run task writes again.

Everything here runs in plain Python with confluent-kafka; the PySpark
adapter (``source.py``) only supplies the batch id, the query id and the
task partition.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from .. import faults
from .kafka import client_config
from .options import OptionError, SinkOptions

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "onceflow-sink"
#: The bookkeeping key's partition in the sink's topic.
BOOKKEEPING_PARTITION = 0
#: Bounds on waits that are not the transaction itself.
CLIENT_TIMEOUT_S = 60.0
#: Retries of a commit that failed with a retriable error (e.g. the broker restarting).
COMMIT_RETRIES = 10
FAULT_POINT = "spark-sink-first-attempt"


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """Which write this is: Spark's query id, micro-batch id and task partition."""

    query_id: str
    batch_id: int
    partition: int
    #: Spark's attempt number of the task (0 first); for logs and fault tests only.
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """What one task did; sent back to the driver as its commit message."""

    partition: int
    batch_id: int
    rows: int
    #: The micro-batch of this partition was already written by an earlier attempt.
    skipped: bool = False
    transactional_id: str | None = None


def transactional_id(prefix: str | None, query_id: str, partition: int) -> str:
    """``<prefix>-<query id>-<partition>``: stable across retries and restarts, unique per query."""
    return f"{prefix or DEFAULT_PREFIX}-{query_id}-{partition}"


def task_identity(query_id: str | None, batch_id: str | int | None, partition: int, attempt: int = 0) -> TaskIdentity:
    if not query_id or batch_id is None:
        raise OptionError("the exactly-once sink needs Spark's streaming query id and batch id; in foreachBatch use "
                          "onceflow.spark.write_exactly_once(df, batch_id, ...)")
    return TaskIdentity(query_id, int(batch_id), partition, attempt)


# -- rows -> messages --------------------------------------------------------------


def _messages(batches: Iterable[pa.RecordBatch], topic_option: str | None) -> Iterator[tuple[str, Any, Any, int | None, Any]]:
    """(topic, value, key, partition, headers) per row, column-wise (no per-row dict)."""
    for batch in batches:
        names = batch.schema.names
        n = batch.num_rows
        values = batch.column(names.index("value")).to_pylist()
        keys = batch.column(names.index("key")).to_pylist() if "key" in names else [None] * n
        if topic_option is not None:
            topics: list[Any] = [topic_option] * n
        else:
            topics = batch.column(names.index("topic")).to_pylist()
        partitions = batch.column(names.index("partition")).to_pylist() if "partition" in names else [None] * n
        if "headers" in names:
            headers: list[Any] = [[(h["key"], h["value"]) for h in row] if row else None
                                  for row in batch.column(names.index("headers")).to_pylist()]
        else:
            headers = [None] * n
        for i, topic in enumerate(topics):
            if topic is None:
                raise OptionError("a row has a null 'topic' and no 'topic' option is set")
            yield topic, values[i], keys[i], partitions[i], headers[i]


def _produce(producer: Producer, message: tuple[str, Any, Any, int | None, Any], on_delivery: Any = None) -> None:
    topic, value, key, partition, headers = message
    kwargs: dict[str, Any] = {"value": value, "key": key}
    if partition is not None:
        kwargs["partition"] = partition
    if headers:
        kwargs["headers"] = headers
    if on_delivery is not None:
        kwargs["on_delivery"] = on_delivery
    for _ in range(1000):  # bounded: each turn waits for the queue to drain a little
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)
    raise BufferError("the producer's queue stayed full for 50 s")


# -- the exactly-once task ---------------------------------------------------------


def write_exactly_once(batches: Iterable[pa.RecordBatch], task: TaskIdentity, options: SinkOptions) -> TaskOutcome:
    """Write one task's rows exactly once (see the module docstring)."""
    rows = iter(_messages(batches, options.topic))
    first = next(rows, None)
    if first is None:
        return TaskOutcome(task.partition, task.batch_id, 0)
    key_topic = options.topic or first[0]
    tid = transactional_id(options.transactional_id_prefix, task.query_id, task.partition)
    producer = Producer(_producer_config(options, tid))
    consumer = Consumer(_bookkeeping_config(options, tid))
    try:
        producer.init_transactions(CLIENT_TIMEOUT_S)  # fences every earlier attempt of this task
        done = _written_batch(consumer, key_topic)
        if done is not None and done >= task.batch_id:
            _drain(rows)
            log.info("%s: micro-batch %d already written (up to %d); skipping", tid, task.batch_id, done)
            return TaskOutcome(task.partition, task.batch_id, 0, skipped=True, transactional_id=tid)
        producer.begin_transaction()
        count = 0
        try:
            _produce(producer, first)
            count = 1
            if task.attempt == 0:
                _fault_point(producer)
            for message in rows:
                _produce(producer, message)
                count += 1
                if count & 0xFFF == 0:
                    producer.poll(0)
            metadata = json.dumps({"query": task.query_id, "batch": task.batch_id, "rows": count})
            bookkeeping = [TopicPartition(key_topic, BOOKKEEPING_PARTITION, task.batch_id + 1, metadata)]
            _retrying(lambda: producer.send_offsets_to_transaction(bookkeeping, consumer.consumer_group_metadata(),
                                                                   CLIENT_TIMEOUT_S))
            _retrying(lambda: producer.commit_transaction(_transaction_timeout_s(options)))
        except BaseException:
            _abort_quietly(producer, tid)
            raise
        return TaskOutcome(task.partition, task.batch_id, count, transactional_id=tid)
    finally:
        consumer.close()
        producer.flush(1)


def _fault_point(producer: Producer) -> None:
    """Test-only (``onceflow.faults``): fail a first attempt once part of its rows is written."""
    action = faults.armed(FAULT_POINT)
    if action is not None:
        producer.flush(CLIENT_TIMEOUT_S)  # the row is in the broker's log, in the open transaction
        faults.act(FAULT_POINT, action)


def _written_batch(consumer: Consumer, key_topic: str) -> int | None:
    """The last micro-batch this task's group recorded as written, or None."""
    [committed] = consumer.committed([TopicPartition(key_topic, BOOKKEEPING_PARTITION)], timeout=CLIENT_TIMEOUT_S)
    if committed.error is not None:
        raise KafkaException(committed.error)
    return committed.offset - 1 if committed.offset >= 0 else None


def _retrying(call: Any) -> None:
    """Repeat a transactional call on retriable errors (a broker restart); anything else propagates."""
    for attempt in range(COMMIT_RETRIES):
        try:
            call()
            return
        except KafkaException as exc:
            error = exc.args[0]
            if not error.retriable() or attempt == COMMIT_RETRIES - 1:
                raise
            log.info("retrying after a retriable error: %s", error)
            time.sleep(min(0.1 * 2 ** attempt, 2.0))


def _abort_quietly(producer: Producer, tid: str) -> None:
    try:
        producer.abort_transaction(CLIENT_TIMEOUT_S)
    except KafkaException as exc:  # fenced or fatal: the next attempt's fence aborts it
        log.info("%s: abort after a failed write did not complete: %s", tid, exc)


def _drain(rows: Iterator[Any]) -> None:
    for _ in rows:
        pass


def _transaction_timeout_s(options: SinkOptions) -> float:
    return options.transaction_timeout_ms / 1000


def _producer_config(options: SinkOptions, tid: str) -> dict[str, Any]:
    config = client_config(options.bootstrap_servers, options.kafka_params)
    config.update({"transactional.id": tid, "transaction.timeout.ms": options.transaction_timeout_ms})
    config.setdefault("message.timeout.ms", min(options.transaction_timeout_ms, 300000))
    config.setdefault("linger.ms", 5)
    return config


def _bookkeeping_config(options: SinkOptions, group_id: str) -> dict[str, Any]:
    params = {k: v for k, v in options.kafka_params.items() if not k.startswith(("transaction", "acks", "linger"))}
    config = client_config(options.bootstrap_servers, params)
    config.update({"group.id": group_id, "isolation.level": "read_committed", "enable.auto.commit": False})
    return config


# -- at-least-once -------------------------------------------------------------------


def write_at_least_once(batches: Iterable[pa.RecordBatch], options: SinkOptions) -> int:
    """Spark's own Kafka sink semantics: every row is written, a re-run task writes again."""
    config = client_config(options.bootstrap_servers, options.kafka_params)
    config.setdefault("enable.idempotence", True)
    config.setdefault("linger.ms", 5)
    producer = Producer(config)
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            errors.append(error)

    count = 0
    for message in _messages(batches, options.topic):
        _produce(producer, message, delivered)
        count += 1
        if count & 0xFFF == 0:
            producer.poll(0)
    left = producer.flush(_transaction_timeout_s(options))
    if left or errors:
        raise KafkaException(errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT))
    return count


# -- batch jobs ------------------------------------------------------------------------


def write_batch_job(batches: Iterable[pa.RecordBatch], partition: int, options: SinkOptions,
                    job_id: str) -> TaskOutcome:
    """``df.write``: each task's rows in one transaction, so a failed attempt leaves nothing.

    There is no micro-batch id to record, so a batch job run twice writes
    twice; ``job_id`` (``transactionalIdPrefix``, else one per job) fences the
    attempts of one task against each other.
    """
    if options.delivery_guarantee == "at-least-once":
        return TaskOutcome(partition, -1, write_at_least_once(batches, options))
    tid = transactional_id(options.transactional_id_prefix, job_id, partition)
    producer = Producer(_producer_config(options, tid))
    try:
        producer.init_transactions(CLIENT_TIMEOUT_S)
        producer.begin_transaction()
        count = 0
        try:
            for message in _messages(batches, options.topic):
                _produce(producer, message)
                count += 1
                if count & 0xFFF == 0:
                    producer.poll(0)
            _retrying(lambda: producer.commit_transaction(_transaction_timeout_s(options)))
        except BaseException:
            _abort_quietly(producer, tid)
            raise
        return TaskOutcome(partition, -1, count, transactional_id=tid)
    finally:
        producer.flush(1)


def new_job_id() -> str:
    return str(uuid.uuid4())


def summarize(messages: Iterable[object]) -> Mapping[str, int]:
    """Totals of the tasks' outcomes, for the driver's log."""
    outcomes = [m for m in messages if isinstance(m, TaskOutcome)]
    return {"tasks": len(outcomes), "rows": sum(o.rows for o in outcomes), "skipped": sum(o.skipped for o in outcomes)}
