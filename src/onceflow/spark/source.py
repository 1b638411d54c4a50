"""The source's PySpark adapter: format ``onceflow`` for ``readStream`` and ``read``.

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

The sink's adapter is ``writer.py``; the ``DataSource`` that joins them is ``datasource.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import _extra  # noqa: F401  (first: one line naming the spark extra when it is missing)

# isort: split
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from . import ranges
from ._errors import surfaced
from .kafka import TP, DataLossError, KafkaAdmin, Listing, read_range, reader_group_id
from .options import EARLIEST, LATEST, OffsetSpec, SourceOptions, Subscribe

log = logging.getLogger(__name__)


# -- offsets as Spark keeps them ------------------------------------------------------

#: The key of the plan kept beside the offsets in Spark's offset log.  '$' is not legal in a topic
#: name, so it cannot clash with one.
PLAN_KEY = "$onceflow"


@dataclass(frozen=True)
class BatchPlan:
    """What decided a micro-batch's split besides its end offsets, pinned in Spark's offset log, so that a
    replay after a restart splits it the same way whatever the options are now.

    ``min_partitions`` is the ``minPartitions`` it was planned with;
    ``starts`` where partitions new in it (or reset after data loss) start;
    ``topic_ids`` the ids of its topics, to tell a topic deleted and created
    again from the one the query was reading.
    """

    min_partitions: int | None
    starts: dict[TP, int]
    topic_ids: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"minPartitions": self.min_partitions, "starts": to_spark_offsets(self.starts),
                "topicIds": dict(sorted(self.topic_ids.items()))}

    @classmethod
    def from_offsets(cls, offsets: Mapping[str, Any]) -> BatchPlan | None:
        data = offsets.get(PLAN_KEY)
        if not isinstance(data, dict):
            return None  # written before plans were pinned
        return cls(data.get("minPartitions"), from_spark_offsets(data.get("starts", {})), dict(data.get("topicIds", {})))


def to_spark_offsets(offsets: Mapping[TP, int], plan: BatchPlan | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    if plan is not None:
        out[PLAN_KEY] = plan.to_json()
    return out


def from_spark_offsets(offsets: Mapping[str, Any]) -> dict[TP, int]:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() if topic != PLAN_KEY for p, o in parts.items()}


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


def _plan(start: Mapping[TP, int], end: Mapping[TP, int], min_partitions: int | None) -> list[RangePartition]:
    return [RangePartition(r.topic, r.partition, r.start, r.end)
            for r in ranges.plan_ranges(start, end, min_partitions=min_partitions)]


def _admin(options: SourceOptions) -> KafkaAdmin:
    """The driver's client: its calls are retried for twice ``kafka.default.api.timeout.ms`` (120 s by
    default), and an error still there then names the bootstrap servers."""
    return KafkaAdmin(options.bootstrap_servers, options.kafka_params, 2 * options.api_timeout_ms / 1000,
                      name_servers=True)


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
        #: The topic ids ``latestOffset`` last saw: a micro-batch planned from them needs no second look.
        self._ids_seen: dict[str, str] = {}
        for warning in options.warnings:
            log.warning("%s", warning)

    @property
    def admin(self) -> KafkaAdmin:
        if self._admin is None:
            self._admin = _admin(self.options)
        return self._admin

    @surfaced
    def initialOffset(self) -> dict[str, Any]:
        partitions = self.admin.partitions(self.options.subscription)
        return to_spark_offsets(resolve(self.options.starting_offsets, partitions, self.admin))

    @surfaced
    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    @surfaced
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_spark_offsets(start)
        begin_plan = BatchPlan.from_offsets(start)
        listing = self.admin.listing(self.options.subscription, with_ids=True)
        self._ids_seen = dict(listing.topic_ids)
        latest = self.admin.latest(listing.partitions)
        begin, starts = self._reconcile(begin, begin_plan, listing, latest)
        self._commit_to_group({tp: o for tp, o in begin.items() if tp in latest})  # the batch Spark completed
        new = [tp for tp in listing.partitions if tp not in begin and tp not in starts]
        if new:
            log.info("new partitions %s start at their earliest offsets", new)
            starts.update(self.admin.earliest(new))
        effective = {**begin, **starts}
        if self._available_now is not None:
            latest = {tp: min(offset, self._available_now.get(tp, offset)) for tp, offset in latest.items()}
        latest = {tp: max(offset, effective[tp]) for tp, offset in latest.items()}
        kept = {tp: o for tp, o in begin.items() if tp[0] in listing.unsettled}  # no news of them this time
        plan = BatchPlan(self.options.min_partitions, {tp: o for tp, o in starts.items() if tp in latest},
                         {t: i for t, i in listing.topic_ids.items() if any(tp[0] == t for tp in latest)})
        if isinstance(limit, ReadAllAvailable):
            return to_spark_offsets({**kept, **latest}, plan)
        now = int(time.time() * 1000)
        available = ranges.total_size(effective, latest)
        if self._available_now is None and not ranges.should_trigger(
                available, self.options.min_offsets_per_trigger, self._last_trigger_ms, now,
                self.options.max_trigger_delay_ms):
            return start
        self._last_trigger_ms = now
        if isinstance(limit, ReadMaxRows):
            latest = ranges.rate_limit(limit.max_rows, effective, latest, {})
        return to_spark_offsets({**kept, **latest}, plan)

    def _reconcile(self, begin: dict[TP, int], begin_plan: BatchPlan | None, listing: Listing,
                   latest: Mapping[TP, int]) -> tuple[dict[TP, int], dict[TP, int]]:
        """Topics deleted, created again, or offsets gone backwards since the last micro-batch: data loss,
        as in Spark.  With failOnDataLoss the query fails naming them; without, a warning, the deleted
        partitions are dropped, and the others start over at their earliest offset.  Returns the
        begin offsets left and the partitions' new starts."""
        changes = ranges.topic_changes(begin, begin_plan.topic_ids if begin_plan else {}, listing.partitions,
                                       listing.topic_ids, listing.unsettled, latest)
        if changes.backwards:
            # Only the last stable offset went back (an open transaction, after a switch to read_committed):
            # nothing was lost, the data is there; the partition waits for the LSO.  Below the high
            # watermark too, the log was truncated.
            hw = self.admin.high_watermarks(changes.backwards)
            changes = ranges.TopicChanges(changes.deleted, changes.recreated,
                                          {tp: ends for tp, ends in changes.backwards.items() if hw[tp] < ends[0]})
        if not changes:
            return begin, {}
        detail = (f"partitions the query was reading changed: {changes.describe()}; the records between the offsets "
                  "the query reached and the new ones may never be read")
        if self.options.fail_on_data_loss:
            raise DataLossError(f"{detail}. Some data may have been lost. Set failOnDataLoss=false to go on "
                                "(deleted partitions dropped, topics created again read from their start, "
                                "truncated partitions from their new end)")
        log.warning("%s; continuing (failOnDataLoss=false): deleted partitions are dropped, topics created again "
                    "are read from their start, truncated partitions from their new end", detail)
        recreated = list(changes.recreated)
        left = {tp: o for tp, o in begin.items()
                if tp not in changes.deleted and tp not in changes.recreated and tp not in changes.backwards}
        starts = self.admin.earliest(recreated) if recreated else {}
        starts.update({tp: now for tp, (_, now) in changes.backwards.items()})
        return left, starts

    def _replaced_since(self, plan: BatchPlan) -> set[str]:
        """Topics of a micro-batch's plan deleted or created again since it was planned: a replay after
        a restart (Spark then calls no ``latestOffset`` first) would read another topic's records at
        the planned offsets. Data loss, as in ``_reconcile``; without failOnDataLoss they are left
        out of the replay (the next micro-batch reads a re-created topic from its start)."""
        if plan.topic_ids.items() <= self._ids_seen.items():
            return set()
        listing = self.admin.listing(Subscribe(tuple(sorted(plan.topic_ids))), with_ids=True)
        replaced = {t for t, i in plan.topic_ids.items() if t not in listing.unsettled and listing.topic_ids.get(t) != i}
        if not replaced:
            return set()
        detail = (f"the micro-batch being replayed was planned on topics since deleted or created again: "
                  f"{', '.join(sorted(replaced))}; its records there are gone")
        if self.options.fail_on_data_loss:
            raise DataLossError(f"{detail}. Some data may have been lost. Set failOnDataLoss=false to go on "
                                f"without them (a topic created again is then read from its start)")
        log.warning("%s; continuing without them (failOnDataLoss=false)", detail)
        return replaced

    @surfaced
    def prepareForTriggerAvailableNow(self) -> None:
        partitions = self.admin.partitions(self.options.subscription)
        self._available_now = self.admin.latest(partitions)

    @surfaced
    def reportLatestOffset(self) -> dict[str, Any] | None:
        partitions = self.admin.partitions(self.options.subscription)
        return to_spark_offsets(self.admin.latest(partitions))

    @surfaced
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The micro-batch's tasks, from Spark's offset log alone where it holds the plan (``BatchPlan``):
        a replay after a restart is split as it was first, whatever ``minPartitions`` says now."""
        begin, until = from_spark_offsets(start), from_spark_offsets(end)
        plan = BatchPlan.from_offsets(end)
        min_partitions = self.options.min_partitions
        if plan is not None:
            begin.update(plan.starts)
            min_partitions = plan.min_partitions
            replaced = self._replaced_since(plan)
            until = {tp: o for tp, o in until.items() if tp[0] not in replaced}
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(self.admin.earliest(new))  # an offset log written before plans were pinned
        begin = _check_start({tp: o for tp, o in begin.items() if tp in until}, self.admin.earliest(list(until)),
                             self.options)
        return _plan(begin, until, min_partitions)

    @surfaced
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition), partition
        yield from _read(self.options, partition, self.group_id)

    @surfaced
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

    @surfaced
    def partitions(self) -> Sequence[InputPartition]:
        admin = _admin(self.options)
        partitions = admin.partitions(self.options.subscription)
        start = resolve(self.options.starting_offsets, partitions, admin)
        end = resolve(self.options.ending_offsets or OffsetSpec("latest", {}), partitions, admin)
        start = _check_start(start, admin.earliest(partitions), self.options)
        return _plan(start, {tp: max(end[tp], start[tp]) for tp in start}, self.options.min_partitions)

    @surfaced
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if type(partition) is InputPartition and partition.value is None:
            # PySpark plans this one placeholder where a batch read has no partition at all (every
            # range empty, or a subscription covering no partition): no rows.
            return
        assert isinstance(partition, RangePartition), partition
        yield from _read(self.options, partition, self.group_id)


def __getattr__(name: str) -> Any:
    if name == "OnceflowDataSource":  # its home before datasource.py: kept for code that registered it directly
        from .datasource import OnceflowDataSource

        return OnceflowDataSource
    raise AttributeError(name)
