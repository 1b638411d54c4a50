"""The connector's Kafka I/O, through confluent-kafka and standard Kafka APIs only.

Theory of operation
-------------------
Nothing here knows Spark.  The driver side asks a ``KafkaAdmin`` which
partitions a subscription covers and where each one starts and ends
(ListOffsets with the source's isolation level: for read_committed the end
is the *last stable offset*, so an open transaction is never half read).
Executors read one exact offset range with ``read_range`` into Arrow record
batches: a consumer is assigned at the range's start and reads until it
either sees an offset at or past the range's end, or reaches the end of the
partition at or past it.  Offsets a read_committed consumer never sees
(transaction markers, aborted records, records compacted away) are simply
gaps: the range is over when the position passes its end, not when it has
counted ``end - start`` records, so a range never hangs on a gap and never
reports data loss because of one.  Real loss (the start fell below the log
start offset after retention) is ``DataLossError`` or, without
``failOnDataLoss``, a warning and a jump to the log start.

Every client's librdkafka log goes to Python logging at DEBUG (``ClientLog``), not to the
console, where a client that cannot reach a broker would print every reconnect; errors that
librdkafka words vaguely ("timed out") quote the client's last line, which says why.

Row layout, as Spark's Kafka source has it: key, value (binary), topic,
partition, offset, timestamp, timestampType (0 CreateTime, 1
LogAppendTime), and headers (key, value) with ``includeHeaders``.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from . import _extra  # noqa: F401  (first: one line naming the spark extra when it is missing)

# isort: split
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from .options import Assign, Subscribe, Subscription
from .protocol import PROGRESS_TOPIC_PREFIX

log = logging.getLogger(__name__)

#: A partition as (topic, partition number).
TP = tuple[str, int]


#: Rows per Arrow record batch a reader yields.
ARROW_BATCH_ROWS = 16384
#: How long one poll waits for more messages than the client already holds.  librdkafka's
#: ``consume(n, timeout)`` returns early only with ``n`` messages, so a long wait here idled every
#: task for that long at the end of its range (0.5 s did, issue 18); Arrow batches still fill up to
#: ARROW_BATCH_ROWS across polls.  A range's read is bounded by ``read_timeout_s``.
POLL_S = 0.02
DEFAULT_TIMEOUT_S = 120.0

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of Spark's Kafka source schema."""
    fields = [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(("headers", HEADER_TYPE))
    return pa.schema(fields)


#: Kafka's internal topics (``org.apache.kafka.common.internals.Topic``), which a pattern never matches,
#: as the Java consumer's ``exclude.internal.topics`` has it.  Named here, not imported from the
#: broker's side: the connector is a client of any Kafka.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

SPARK_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                "timestampType int")
SPARK_HEADERS = "headers array<struct<key: string, value: binary>>"


def spark_schema(include_headers: bool) -> str:
    return f"{SPARK_SCHEMA}, {SPARK_HEADERS}" if include_headers else SPARK_SCHEMA


class DataLossError(RuntimeError):
    """Offsets a query still needed are gone (retention, a deleted topic) and failOnDataLoss is on."""


#: Where librdkafka's own log lines go: this Python logger, at DEBUG.  Printed, they flood the
#: console: a client that cannot reach a broker logs every reconnect, about twenty lines a second.
CLIENT_LOG = logging.getLogger("onceflow.spark.librdkafka")


class ClientLog:
    """A client's librdkafka log (its ``logger`` setting): each line goes to ``CLIENT_LOG`` at DEBUG,
    never to the console, and the last is kept for an error to quote (the cause of a failure, such
    as "Connection refused", is often only there).  confluent-kafka hands the lines over inside the
    client's ``poll``/``consume``/``flush``: a client that is never polled keeps them queued."""

    def __init__(self) -> None:
        self.last: str | None = None

    def log(self, level: int, msg: str, *args: Any) -> None:  # confluent-kafka: log(level, "%s [%s] %s", ...)
        line = msg % args if args else msg
        self.last = line.rpartition("]: ")[2] or line
        if CLIENT_LOG.isEnabledFor(logging.DEBUG):
            CLIENT_LOG.debug("%s %s", logging.getLevelName(level), line)

    def quoted(self) -> str:
        """``; the client's last log line: ...``, or nothing when it logged nothing."""
        return f"; the client's last log line: {self.last}" if self.last else ""


def client_config(bootstrap_servers: str, kafka_params: Mapping[str, str]) -> dict[str, Any]:
    """librdkafka settings: the ``kafka.*`` options, bootstrap servers, quiet logs by default, and the
    client's log lines kept off the console (``ClientLog``, under ``logger``)."""
    config: dict[str, Any] = {"log_level": 3, **kafka_params}
    config["bootstrap.servers"] = bootstrap_servers
    config["logger"] = ClientLog()
    return config


def client_log(config: Mapping[str, Any]) -> ClientLog | None:
    """The ``ClientLog`` of a configuration made by ``client_config``."""
    logger = config.get("logger")
    return logger if isinstance(logger, ClientLog) else None


def _isolation(kafka_params: Mapping[str, str]) -> IsolationLevel:
    committed = kafka_params.get("isolation.level", "read_committed") == "read_committed"
    return IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED


@dataclass(frozen=True)
class Listing:
    """What a subscription covers now: its partitions, their topics' ids, and topics with unsettled metadata."""

    partitions: list[TP]
    topic_ids: dict[str, str]
    unsettled: set[str]


class KafkaAdmin:
    """The driver's view of the brokers: partitions of a subscription, and their offsets."""

    def __init__(self, bootstrap_servers: str, kafka_params: Mapping[str, str], timeout_s: float = DEFAULT_TIMEOUT_S,
                 *, name_servers: bool = False) -> None:
        # Consumer and producer settings are ignored by an admin client (librdkafka warns, quietly).
        self._config = client_config(bootstrap_servers, kafka_params)
        #: With ``name_servers`` (the source's driver), an error still there after ``timeout_s`` names the servers.
        self._where = f"kafka.bootstrap.servers={bootstrap_servers}" if name_servers else None
        #: The log of this admin's clients, one after another (``_renew``): what the last one said.
        self._log = client_log(self._config)
        self._admin = AdminClient(self._config)
        self._isolation = _isolation(kafka_params)
        self._timeout_s = timeout_s

    def _renew(self) -> None:
        """A new client for a retry: it starts from fresh metadata.  The old one may go on asking
        a leader that was killed (librdkafka keeps its cached leader until its next metadata
        refresh) or send a stale leader epoch (FENCED_LEADER_EPOCH)."""
        self._admin.poll(0)  # its last log lines, before it goes
        self._admin = AdminClient(self._config)

    def _polled(self, call: Callable[[], _T]) -> Callable[[], _T]:
        """``call``, then the client's queued log lines handed to its ``ClientLog`` (an admin client
        is polled nowhere else, and would keep them)."""
        def attempt() -> _T:
            try:
                return call()
            finally:
                self._admin.poll(0)

        return attempt

    @property
    def client(self) -> AdminClient:
        return self._admin

    def retrying(self, call: Callable[[], _T]) -> _T:
        """``call`` (which uses ``client``), retried on transient errors with a fresh client, within the timeout."""
        return _retrying(self._polled(call), self._timeout_s, self._renew, self._where, self._log)

    def partitions(self, subscription: Subscription) -> list[TP]:
        """The partitions the subscription covers now (new partitions and matching topics included)."""
        return self.listing(subscription).partitions

    def listing(self, subscription: Subscription, with_ids: bool = False) -> Listing:
        """The partitions the subscription covers now, and (``with_ids``) their topics' ids.

        A topic whose metadata has an error other than "does not exist" (being
        created, a leader moving) is *unsettled*: neither listed nor absent."""
        metadata = self.retrying(lambda: self._admin.list_topics(timeout=self._timeout_s))
        assigned = set(subscription.partitions) if isinstance(subscription, Assign) else set()
        out: list[TP] = []
        unsettled: set[str] = set()
        for name, topic in metadata.topics.items():
            if isinstance(subscription, Subscribe):
                if name not in subscription.topics:
                    continue
            elif isinstance(subscription, Assign):
                if not any(t == name for t, _ in assigned):
                    continue
            elif name in INTERNAL_TOPICS or name.startswith(PROGRESS_TOPIC_PREFIX) or not subscription.matches(name):
                # A pattern never matches the internal topics (the Java consumer's exclude.internal.topics),
                # nor the exactly-once sink's progress topics.
                continue
            if topic.error is not None and topic.error.code() != KafkaError.NO_ERROR:
                if topic.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    unsettled.add(name)  # e.g. being created, a leader moving: picked up next time
                continue
            partitions = [(name, p) for p in topic.partitions]
            out.extend(tp for tp in partitions if not assigned or tp in assigned)
        out.sort()
        ids = self._topic_ids({t for t, _ in out}, unsettled) if with_ids and out else {}
        return Listing([tp for tp in out if tp[0] not in unsettled], ids, unsettled)

    def _topic_ids(self, topics: set[str], unsettled: set[str]) -> dict[str, str]:
        """Each topic's id (KIP-516); a topic that cannot be described now joins ``unsettled``."""
        from confluent_kafka import TopicCollection

        futures = self._admin.describe_topics(TopicCollection(sorted(topics)), request_timeout=ATTEMPT_TIMEOUT_S)
        ids: dict[str, str] = {}
        for name, future in futures.items():
            try:
                description = _result(future, ATTEMPT_TIMEOUT_S)
            except KafkaException:
                unsettled.add(name)
                continue
            if description.topic_id is not None:
                ids[name] = str(description.topic_id)
        self._admin.poll(0)  # its log lines (``_polled``)
        return ids

    def earliest(self, partitions: Iterable[TP]) -> dict[TP, int]:
        spec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
        return self._list_offsets(partitions, spec, IsolationLevel.READ_UNCOMMITTED)

    def high_watermarks(self, partitions: Iterable[TP]) -> dict[TP, int]:
        """The high watermarks, whatever the isolation level (the LSO may be behind them)."""
        return self._list_offsets(partitions, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED)  # type: ignore[no-untyped-call]

    def latest(self, partitions: Iterable[TP]) -> dict[TP, int]:
        """The end of each partition a reader may read to: the LSO for read_committed, else the high watermark."""
        return self._list_offsets(partitions, OffsetSpec.latest(), self._isolation)  # type: ignore[no-untyped-call]

    def _list_offsets(self, partitions: Iterable[TP], spec: OffsetSpec, isolation: IsolationLevel) -> dict[TP, int]:
        wanted = {TopicPartition(t, p): spec for t, p in partitions}
        if not wanted:
            return {}

        attempt_s = min(self._timeout_s, ATTEMPT_TIMEOUT_S)

        def call() -> dict[TP, int]:
            futures = self._admin.list_offsets(wanted, isolation_level=isolation, request_timeout=attempt_s)
            offsets = {(tp.topic, tp.partition): _result(future, attempt_s).offset for tp, future in futures.items()}
            unknown = sorted(tp for tp, offset in offsets.items() if offset < 0)
            if unknown:
                # librdkafka answers -1001 (OFFSET_INVALID), with no error, for a partition whose
                # leader did not answer in time (killed, say): unknown, never an offset.
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"no offset for {unknown} (leader unreachable)"))
            return offsets

        return self.retrying(call)

    def commit_group_offsets(self, group_id: str, offsets: Mapping[TP, int]) -> None:
        """Store ``offsets`` as ``group_id``'s committed offsets (commitOffsetsToGroup), for lag tools."""
        from confluent_kafka import ConsumerGroupTopicPartitions

        partitions = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        attempt_s = min(self._timeout_s, ATTEMPT_TIMEOUT_S)

        def call() -> None:  # idempotent: the same offsets again
            futures = self._admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id, partitions)],
                                                               request_timeout=attempt_s)
            for future in futures.values():
                for tp in _result(future, attempt_s).topic_partitions or []:
                    if tp.error is not None:
                        raise KafkaException(tp.error)

        self.retrying(call)


#: How long one try of a driver-side call may wait for an answer.  A request to a leader that was
#: just killed gets none; the next try, after the cluster has elected another, does.
ATTEMPT_TIMEOUT_S = 15.0
#: Errors a broker that is restarting or electing leaders gives for a moment, including those
#: that say the client's metadata is stale because a leader moved (its SIGKILL, its restart, a
#: preferred leader election): Kafka's clients refresh their metadata and retry them.
_TRANSIENT = frozenset({KafkaError._NOENT, KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                        KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                        KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
                        KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.REPLICA_NOT_AVAILABLE,
                        KafkaError.KAFKA_STORAGE_ERROR, KafkaError.REQUEST_TIMED_OUT, KafkaError.OFFSET_NOT_AVAILABLE,
                        KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_COORDINATOR,
                        KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS})
_T = TypeVar("_T")


def _result(future: Any, request_timeout_s: float) -> Any:
    """An admin call's result: librdkafka ends the request after ``request_timeout_s``, and the
    future a little later; a future still not done after a grace period is a timeout too."""
    try:
        return future.result(request_timeout_s + 10)
    except concurrent.futures.TimeoutError:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "no answer from the cluster")) from None


def _retrying(call: Callable[[], _T], timeout_s: float, renew: Callable[[], None] | None = None,
              where: str | None = None, said: ClientLog | None = None) -> _T:
    """Run a driver-side metadata call, retrying transient errors (a broker restarting, leaders
    not known yet or moved) with backoff for up to ``timeout_s``, as Spark's KafkaOffsetReader
    retries.  ``renew`` runs before each retry: a new client, whose metadata is fresh.  A transient
    error still there at the end says ``where`` (the bootstrap servers), how long it waited, and
    what the client last logged (``said``): librdkafka's error ("timed out") seldom says why."""
    deadline = time.monotonic() + timeout_s
    backoff = 0.1
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0]
            transient = isinstance(error, KafkaError) and (error.retriable() or error.code() in _TRANSIENT)
            if not transient or time.monotonic() + backoff > deadline:
                if transient and where is not None:
                    raise KafkaException(KafkaError(error.code(), f"{where}: still failing after {timeout_s:g} s: "
                                                    f"{error.str()}{said.quoted() if said else ''}",
                                                    retriable=error.retriable())) from exc
                raise
            log.info("retrying after a transient error: %s", error)
            time.sleep(backoff)
            backoff = min(backoff * 2, 2.0)
            if renew is not None:
                renew()


class ClusterUnanswered(Exception):
    """No broker answered within the time allowed; the message names the servers and quotes the client."""


def describe_cluster(bootstrap_servers: str, kafka_params: Mapping[str, str], timeout_s: float) -> Any:
    """The cluster's description (its nodes), asked until it answers or ``timeout_s`` has passed.  A
    cluster that never answers (transient errors to the end) is ``ClusterUnanswered``, naming the address
    and quoting the client's last log line (librdkafka's own lines are kept from the console: it would
    print about twenty a second).  Any other error is the client's KafkaException."""
    config = client_config(bootstrap_servers, kafka_params)
    words = client_log(config)
    assert words is not None
    client = [AdminClient(config)]  # emptied before an error leaves: the client goes, not kept by the error
    attempt_s = min(timeout_s, ATTEMPT_TIMEOUT_S)

    def attempt() -> Any:
        try:
            return _result(client[0].describe_cluster(request_timeout=attempt_s), attempt_s)
        finally:
            client[0].poll(0)  # hands the queued log lines to ``words``

    try:
        return _retrying(attempt, timeout_s)
    except KafkaException as exc:
        error = exc.args[0]
        if not isinstance(error, KafkaError) or not (error.retriable() or error.code() in _TRANSIENT):
            raise
        said = f"the client's last log line: {words.last}" if words.last else error.str()
        message = f"no Kafka broker answered at {bootstrap_servers} within {timeout_s:g} s; {said}"
    client.clear()  # the client goes now (it reconnects twenty times a second), not with the error
    raise ClusterUnanswered(message)


def reader_config(bootstrap_servers: str, kafka_params: Mapping[str, str], group_id: str) -> dict[str, Any]:
    """A consumer that only ever reads assigned ranges: no group membership, no commits."""
    config = client_config(bootstrap_servers, kafka_params)
    config.setdefault("group.id", group_id)
    config.setdefault("isolation.level", "read_committed")
    config.update({
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    })
    return config


def reader_group_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


def read_range(bootstrap_servers: str, kafka_params: Mapping[str, str], group_id: str, topic: str, partition: int,
               start: int, end: int, *, include_headers: bool, fail_on_data_loss: bool,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[pa.RecordBatch]:
    """The records of [start, end) of one partition, as Arrow record batches in offset order.

    Bounded: if neither the end nor the partition's end is reached within
    ``timeout_s`` without progress, the read fails (TimeoutError) and Spark
    retries the task.
    """
    if end <= start:
        return
    config = reader_config(bootstrap_servers, kafka_params, group_id)
    consumer = Consumer(config)
    said = client_log(config)
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        builder = _BatchBuilder(topic, partition, include_headers)
        deadline = time.monotonic() + timeout_s
        done = False
        while not done:
            messages = consumer.consume(ARROW_BATCH_ROWS, POLL_S)
            if messages:
                deadline = time.monotonic() + timeout_s
            if [m for m in messages if m.error() is not None]:  # an event (end of partition...) among the records
                data, done, restart = _sort_out(messages, end, lambda reason: _data_loss(
                    KafkaAdmin(bootstrap_servers, kafka_params, timeout_s), topic, partition, start, end,
                    fail_on_data_loss, reason))
                if restart is not None:
                    consumer.assign([TopicPartition(topic, partition, restart)])
            else:
                data = messages
            if data and (data[-1].offset() or 0) >= end:  # the range ends inside this list
                data = [m for m in data if (m.offset() or 0) < end]
                done = True
            elif not done and ((data and (data[-1].offset() or 0) == end - 1)
                               or _position(consumer, topic, partition) >= end):
                # Read up to the end: the last offsets of a transactional range are markers (and maybe
                # aborted records), never delivered, but the client's position moves past them; so the
                # range ends here, without waiting for end of partition (a fetch.wait.max.ms away).
                # The consumer is this read's own: its position holds nothing of another assignment.
                done = True
            builder.extend(data)
            if builder.rows >= ARROW_BATCH_ROWS:
                yield builder.finish()
            if not done and time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}-{partition} [{start}, {end}) from {bootstrap_servers}: no progress "
                                   f"for {timeout_s:.0f} s{said.quoted() if said else ''}")
        if builder.rows:
            yield builder.finish()
    finally:
        consumer.close()


def _position(consumer: Consumer, topic: str, partition: int) -> int:
    """The offset the consumer delivers next (past markers and aborted records it skipped); negative
    (librdkafka's -1001) before the first delivery."""
    return consumer.position([TopicPartition(topic, partition)])[0].offset


def _sort_out(messages: list[Any], end: int, on_lost: Callable[[str], int | None]) -> tuple[list[Any], bool, int | None]:
    """The slow path, for a list holding events: (data messages, range done?, offset to restart at)."""
    data = []
    for message in messages:
        error = message.error()
        if error is None:
            data.append(message)
        elif error.code() == KafkaError._PARTITION_EOF:
            if (message.offset() or 0) >= end:  # the partition ends at or past the range: all read
                return data, True, None
        elif error.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
            restart = on_lost(str(error))
            return data, restart is None, restart
        elif error.fatal() or not error.retriable():
            raise KafkaException(error)
    return data, False, None


def _data_loss(admin: KafkaAdmin, topic: str, partition: int, start: int, end: int, fail: bool,
               reason: str) -> int | None:
    """Offsets below the log start: fail, or continue from the log start (None: nothing left in the range)."""
    message = (f"{topic}-{partition}: offsets from {start} are no longer available ({reason}); some data may have "
               "been lost, e.g. deleted by retention before this query read it")
    if fail:
        raise DataLossError(message + ". Set failOnDataLoss=false to skip the lost offsets instead.")
    log_start = admin.earliest([(topic, partition)])[(topic, partition)]
    log.warning("%s; continuing from offset %d (failOnDataLoss=false)", message, log_start)
    return log_start if log_start < end else None


class _BatchBuilder:
    """Columns of one Arrow record batch, filled message by message (the one per-record step)."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        #: librdkafka's (timestamp type, milliseconds) per message.
        self.timestamps: list[tuple[int, int]] = []
        self.headers: list[list[dict[str, Any]] | None] = []

    @property
    def rows(self) -> int:
        return len(self.offsets)

    def extend(self, messages: list[Any]) -> None:
        """Column by column: one C-level loop per field, no Python call per message."""
        if not messages:
            return
        self.keys += [m.key() for m in messages]
        self.values += [m.value() for m in messages]
        self.offsets += [m.offset() for m in messages]
        self.timestamps += [m.timestamp() for m in messages]
        if self.include_headers:
            self.headers += [[{"key": k, "value": v} for k, v in (m.headers() or ())] for m in messages]

    def finish(self) -> pa.RecordBatch:
        n = self.rows
        kinds, millis = zip(*self.timestamps, strict=True)
        columns = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(self.offsets, pa.int64()),
            pc.multiply(pa.array(millis, pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC")),
            # librdkafka: 1 CreateTime, 2 LogAppendTime; Spark (Java's TimestampType ids): 0, 1
            pc.subtract(pa.array(kinds, pa.int32()), 1),
        ]
        if self.include_headers:
            columns.append(pa.array(self.headers, HEADER_TYPE))
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        self._reset()
        return batch
