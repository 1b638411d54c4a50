"""The PySpark adapter: format ``onceflow`` for readStream, read, writeStream and write.

Theory of operation
-------------------
A thin layer over plain functions.  PySpark's Python Data Source API calls
these classes in Python workers: the driver-side methods (offsets, planning,
commit) in one long-lived worker per query, ``read``/``write`` in executor
workers, each time on an unpickled copy.  So nothing here keeps state a
task needs: every task rebuilds its Kafka clients from the options.

* Options and columns are checked once, when the source or sink is created
  (``options.parse_*``), before any data moves.
* Streaming source: offsets are Spark's Kafka JSON shape,
  ``{"topic": {"partition": offset}}``.  ``latestOffset`` lists the
  subscription's partitions (picking up new partitions and matching topics),
  asks for their ends (the LSO under read_committed) and applies
  ``maxOffsetsPerTrigger`` / ``minOffsetsPerTrigger`` (``ranges``).
  ``partitions`` turns [start, end) into one input partition per Kafka
  partition range, and ``read`` reads it into Arrow (``kafka.read_range``).
  ``commit`` optionally records the end offsets in a consumer group.
* Streaming sink: each task writes exactly once (``sink``); the micro-batch
  id and query id come from the task's local properties.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from . import ranges, sink
from .kafka import TP, DataLossError, KafkaAdmin, read_range, reader_group_id, spark_schema
from .options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    SinkOptions,
    SourceOptions,
    check_sink_columns,
    parse_sink_options,
    parse_source_options,
)

log = logging.getLogger(__name__)

FORMAT = "onceflow"


# -- offsets as Spark keeps them ------------------------------------------------------


def to_spark_offsets(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_spark_offsets(offsets: Mapping[str, Mapping[str, int]]) -> dict[TP, int]:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


def resolve(spec: OffsetSpec, partitions: Sequence[TP], admin: KafkaAdmin) -> dict[TP, int]:
    """Concrete offsets for ``spec``: earliest/latest looked up; specific ones as given
    (-2/-1 looked up too); partitions it does not name start at the earliest."""
    earliest = admin.earliest(partitions)
    if spec.kind == "earliest":
        return earliest
    latest = admin.latest(partitions)
    if spec.kind == "latest":
        return latest
    out = dict(earliest)
    for tp, offset in spec.offsets.items():
        if tp not in earliest:
            continue  # a partition that does not exist (yet): Spark fails later; we wait for it
        out[tp] = earliest[tp] if offset == EARLIEST else latest[tp] if offset == LATEST else offset
    return out


# -- input partitions -----------------------------------------------------------------


@dataclass(frozen=True)
class RangePartition(InputPartition):
    topic: str
    partition: int
    start: int
    end: int


def _plan(start: Mapping[TP, int], end: Mapping[TP, int], options: SourceOptions) -> list[RangePartition]:
    return [RangePartition(r.topic, r.partition, r.start, r.end)
            for r in ranges.plan_ranges(start, end, min_partitions=options.min_partitions)]


def _read(options: SourceOptions, partition: RangePartition, group_id: str) -> Iterator[pa.RecordBatch]:
    yield from read_range(options.bootstrap_servers, options.kafka_params, group_id, partition.topic,
                          partition.partition, partition.start, partition.end,
                          include_headers=options.include_headers, fail_on_data_loss=options.fail_on_data_loss)


def _check_start(start: dict[TP, int], earliest: Mapping[TP, int], options: SourceOptions) -> dict[TP, int]:
    """Offsets below the log start (deleted by retention before they were read): fail, or skip them."""
    lost = {tp: (offset, earliest[tp]) for tp, offset in start.items() if tp in earliest and offset < earliest[tp]}
    if not lost:
        return start
    detail = ", ".join(f"{t}-{p} from {o} (log start {e})" for (t, p), (o, e) in sorted(lost.items()))
    if options.fail_on_data_loss:
        raise DataLossError(f"offsets are no longer available: {detail}; some data may have been lost. "
                            "Set failOnDataLoss=false to skip the lost offsets instead.")
    log.warning("offsets are no longer available: %s; continuing from the log start (failOnDataLoss=false)", detail)
    return {**start, **{tp: e for tp, (_, e) in lost.items()}}


# -- streaming source -------------------------------------------------------------------


class OnceflowStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.group_id = options.group_id or reader_group_id(options.group_id_prefix)
        self._admin: KafkaAdmin | None = None
        self._last_trigger_ms = int(time.time() * 1000)
        #: Trigger.AvailableNow: the ends recorded when the query started; never read past them.
        self._available_now: dict[TP, int] | None = None
        #: What commitOffsetsToGroup last stored.
        self._group_offsets: dict[TP, int] = {}
        for warning in options.warnings:
            log.warning("%s", warning)

    @property
    def admin(self) -> KafkaAdmin:
        if self._admin is None:
            self._admin = KafkaAdmin(self.options.bootstrap_servers, self.options.kafka_params)
        return self._admin

    def initialOffset(self) -> dict[str, Any]:
        partitions = self.admin.partitions(self.options.subscription)
        return to_spark_offsets(resolve(self.options.starting_offsets, partitions, self.admin))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_spark_offsets(start)
        self._commit_to_group(begin)  # ``start`` is the end of the last micro-batch Spark completed
        partitions = self.admin.partitions(self.options.subscription)
        new = [tp for tp in partitions if tp not in begin]
        earliest_new = self.admin.earliest(new) if new else {}
        if new:
            log.info("new partitions %s start at their earliest offsets", new)
        partitions = [tp for tp in partitions if tp in begin or tp in earliest_new]
        latest = self.admin.latest(partitions)
        if self._available_now is not None:
            latest = {tp: min(offset, self._available_now.get(tp, offset)) for tp, offset in latest.items()}
        latest = {tp: max(offset, begin.get(tp, earliest_new.get(tp, 0))) for tp, offset in latest.items()}
        if isinstance(limit, ReadAllAvailable):
            return to_spark_offsets({**begin, **latest})
        now = int(time.time() * 1000)
        available = ranges.total_size({**earliest_new, **begin}, latest)
        if self._available_now is None and not ranges.should_trigger(
                available, self.options.min_offsets_per_trigger, self._last_trigger_ms, now,
                self.options.max_trigger_delay_ms):
            return start
        self._last_trigger_ms = now
        if isinstance(limit, ReadMaxRows):
            latest = ranges.rate_limit(limit.max_rows, begin, latest, earliest_new)
        return to_spark_offsets({**begin, **latest})

    def prepareForTriggerAvailableNow(self) -> None:
        partitions = self.admin.partitions(self.options.subscription)
        self._available_now = self.admin.latest(partitions)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        partitions = self.admin.partitions(self.options.subscription)
        return to_spark_offsets(self.admin.latest(partitions))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, until = from_spark_offsets(start), from_spark_offsets(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(self.admin.earliest(new))
        begin = _check_start(begin, self.admin.earliest(list(until)), self.options)
        return _plan(begin, until, self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from _read(self.options, partition, self.group_id)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_to_group(from_spark_offsets(end))

    def _commit_to_group(self, offsets: dict[TP, int]) -> None:
        """commitOffsetsToGroup: the processed offsets, for lag tools.  Spark calls ``commit``
        only when it builds the next micro-batch, so the start of every ``latestOffset`` (the
        end of the batch it finished) is recorded too; otherwise the last batch of an idle
        stream or an availableNow query would never show."""
        group = self.options.commit_offsets_to_group
        if not group or not offsets or offsets == self._group_offsets:
            return
        self.admin.commit_group_offsets(group, offsets)
        self._group_offsets = dict(offsets)

    def stop(self) -> None:
        self._admin = None


# -- batch source ------------------------------------------------------------------------


class OnceflowBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.group_id = options.group_id or reader_group_id(options.group_id_prefix)
        for warning in options.warnings:
            log.warning("%s", warning)

    def partitions(self) -> Sequence[InputPartition]:
        admin = KafkaAdmin(self.options.bootstrap_servers, self.options.kafka_params)
        partitions = admin.partitions(self.options.subscription)
        start = resolve(self.options.starting_offsets, partitions, admin)
        end = resolve(self.options.ending_offsets or OffsetSpec("latest", {}), partitions, admin)
        start = _check_start(start, admin.earliest(partitions), self.options)
        return _plan(start, {tp: max(end[tp], start[tp]) for tp in start}, self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from _read(self.options, partition, self.group_id)


# -- sinks ---------------------------------------------------------------------------------


@dataclass
class SinkCommit(WriterCommitMessage):
    outcome: sink.TaskOutcome


def _task() -> Any:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the onceflow sink's write() must run in a Spark task")
    return context


class OnceflowStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        context = _task()
        partition = context.partitionId()
        if self.options.delivery_guarantee == "at-least-once":
            batch_id = int(context.getLocalProperty("streaming.sql.batchId") or -1)
            return SinkCommit(sink.TaskOutcome(partition, batch_id, sink.write_at_least_once(iterator, self.options)))
        task = sink.task_identity(context.getLocalProperty("sql.streaming.queryId"),
                                  context.getLocalProperty("streaming.sql.batchId"), partition, context.attemptNumber())
        return SinkCommit(sink.write_exactly_once(iterator, task, self.options))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        outcomes = [m.outcome for m in messages if isinstance(m, SinkCommit)]
        log.info("micro-batch %d written: %s", batchId, sink.summarize(outcomes))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %d aborted by Spark; tasks that committed are kept and skipped on re-run", batchId)


class OnceflowBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.job_id = sink.new_job_id()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        context = _task()
        partition = context.partitionId()
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        query_id = context.getLocalProperty("sql.streaming.queryId")
        if self.options.delivery_guarantee == "exactly-once" and batch_id is not None and query_id:
            # Inside foreachBatch: the micro-batch's identity makes this write exactly-once too.
            task = sink.task_identity(query_id, batch_id, partition, context.attemptNumber())
            return SinkCommit(sink.write_exactly_once(iterator, task, self.options))
        return SinkCommit(sink.write_batch_job(iterator, partition, self.options, self.job_id))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        outcomes = [m.outcome for m in messages if isinstance(m, SinkCommit)]
        log.info("batch write done: %s", sink.summarize(outcomes))


# -- the data source -----------------------------------------------------------------------


class OnceflowDataSource(DataSource):
    """``spark.readStream.format("onceflow")``, ``spark.read``, ``writeStream`` and ``write``.

    Options and columns are Spark's Kafka connector's; see the README.
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        # load() asks for the schema first: bad options fail here, before any query starts.
        # (Streaming-only rules are checked again when the stream reader is made.)
        return spark_schema(parse_source_options(self.options, streaming=False).include_headers)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return OnceflowStreamReader(parse_source_options(self.options, streaming=True))

    def reader(self, schema: StructType) -> DataSourceReader:
        return OnceflowBatchReader(parse_source_options(self.options, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> OnceflowStreamWriter:
        options = parse_sink_options(self.options, streaming=True)
        check_sink_columns(schema.fieldNames(), options.topic)
        return OnceflowStreamWriter(options)

    def writer(self, schema: StructType, overwrite: bool) -> OnceflowBatchWriter:
        options = parse_sink_options(self.options, streaming=False)
        check_sink_columns(schema.fieldNames(), options.topic)
        return OnceflowBatchWriter(options)
