"""The sink's PySpark adapter: format ``onceflow`` for ``writeStream`` and ``write``.

Theory of operation
-------------------
PySpark's Python Data Source API calls ``write`` in executor workers, on an unpickled copy, and
``commit``/``abort`` on the driver's side once every task has returned.  Each task writes exactly
once (``sink.write_exactly_once``, the protocol in ``protocol.py``) or at least once; the
micro-batch id, query id and run come from the task's local properties, and what a task did
returns to the driver as its commit message (``SinkCommit``), whose ``commit`` finishes the
micro-batch (``sink.finish``: rows handed over by deferred tasks are written there).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from . import _extra  # noqa: F401  (first: one line naming the spark extra when it is missing)

# isort: split
import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from . import sink
from ._errors import surfaced
from .options import SinkOptions

log = logging.getLogger(__name__)


@dataclass
class SinkCommit(WriterCommitMessage):
    outcome: sink.TaskOutcome


def _task() -> Any:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the onceflow sink's write() must run in a Spark task")
    return context


def _stream_task(context: Any, options: SinkOptions) -> sink.TaskIdentity:
    run = sink.run_id(context.getLocalProperty)
    if options.delivery_guarantee == "at-least-once":
        run = run or "unknown"  # at-least-once keeps no record of runs
    return sink.task_identity(context.getLocalProperty("sql.streaming.queryId"),
                              context.getLocalProperty("streaming.sql.batchId"), context.partitionId(),
                              context.attemptNumber(), run, context.stageId(), options.name)


def _outcomes(messages: Sequence[WriterCommitMessage | None]) -> list[sink.TaskOutcome]:
    return [m.outcome for m in messages if isinstance(m, SinkCommit)]


class OnceflowStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    @surfaced
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        context = _task()
        task = _stream_task(context, self.options)
        if self.options.delivery_guarantee == "at-least-once":
            rows = sink.write_at_least_once(iterator, self.options)
            return SinkCommit(sink.TaskOutcome(task.partition, task.batch_id, rows, "at-least-once", task.query_id,
                                               task.name, task.run))
        return SinkCommit(sink.write_exactly_once(iterator, task, self.options))

    @surfaced
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        outcomes = _outcomes(messages)
        sink.finish(outcomes, self.options)
        log.info("micro-batch %d written: %s", batchId, sink.summarize(outcomes))

    @surfaced
    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %d aborted by Spark; tasks that committed are kept and skipped on re-run", batchId)


class OnceflowBatchWriter(DataSourceArrowWriter):
    """``df.write``: inside ``foreachBatch`` (the tasks carry a micro-batch's identity) a write of that
    micro-batch; otherwise a batch job, whose own id is its scope."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.job_id = sink.new_job_id()
        if options.name is None:  # may be a batch job (write_exactly_once always names its writes)
            sink.start_job(options, self.job_id)

    @surfaced
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        context = _task()
        partition = context.partitionId()
        in_micro_batch = bool(context.getLocalProperty("streaming.sql.batchId") is not None
                              and context.getLocalProperty("sql.streaming.queryId"))
        if in_micro_batch:
            task = _stream_task(context, self.options)
        else:
            task = sink.TaskIdentity(self.job_id, 0, partition, self.job_id, context.attemptNumber(), None,
                                     context.stageId())
        if self.options.delivery_guarantee == "at-least-once":
            rows = sink.write_at_least_once(iterator, self.options)
            return SinkCommit(sink.TaskOutcome(partition, task.batch_id, rows, "at-least-once", task.query_id,
                                               task.name, task.run))
        return SinkCommit(sink.write_exactly_once(iterator, task, self.options))

    @surfaced
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        outcomes = _outcomes(messages)
        try:
            sink.finish([o for o in outcomes if o.query_id != self.job_id], self.options)
        finally:
            if self.options.name is None:
                # Inside a micro-batch every task wrote in the micro-batch's scope: no id of the job's to fence.
                sink.finish_job(self.options, self.job_id, fence_slots=any(o.query_id == self.job_id for o in outcomes))
        log.info("batch write done: %s", sink.summarize(outcomes))

    @surfaced
    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.name is None:
            sink.finish_job(self.options, self.job_id)
