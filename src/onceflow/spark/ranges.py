"""Offset arithmetic for micro-batches: how far a batch reads, and how it is split into tasks.

Theory of operation
-------------------
A micro-batch is a pair of offset maps, (topic, partition) -> offset, where
an offset is Kafka's *next* offset to read (a partition's end is its high
watermark, or its last stable offset under read_committed).  The batch
reads [start, end) of every partition.  Three questions are answered here,
with plain integers and no I/O, the way Spark's Kafka connector answers
them:

* **How far?** ``rate_limit`` caps a batch at ``maxOffsetsPerTrigger``
  offsets (``KafkaMicroBatchStream.rateLimit``): the limit is shared out
  among partitions in proportion to what each has available, rounded down,
  except that a share below one offset is rounded *up*, so small partitions
  are not starved (the total may then exceed the limit by a few offsets).
  No partition goes past its latest offset.  A partition new since the last
  batch starts at its earliest offset, which the caller looked up.
* **Now or later?** ``should_trigger`` implements ``minOffsetsPerTrigger``
  with ``maxTriggerDelay``: run a batch once enough offsets are available,
  or once the delay since the last batch has passed, whichever comes first.
  The clock is an argument.
* **Which tasks?** ``plan_ranges`` turns a batch into one ``OffsetRange``
  per partition that has data; with ``minPartitions`` larger than that, it
  splits the large ranges into contiguous, non-empty parts, in proportion to
  their size (``KafkaOffsetRangeCalculator.getRanges``), so the parts cover
  exactly the batch, with no gap and no overlap.

* **What changed?** ``topic_changes`` finds the partitions a query was
  reading whose topic was deleted, deleted and created again (its topic id
  changed), or whose offsets went backwards: data loss, which the source
  reports as Spark does (``failOnDataLoss``).

Offsets count positions, not records: compaction and transaction markers
leave gaps, so a range of size n holds at most n records.  The work here is
per partition, never per record.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "OffsetRange",
    "PartitionOffsets",
    "TopicChanges",
    "TopicPartition",
    "plan_ranges",
    "rate_limit",
    "should_trigger",
    "topic_changes",
    "total_size",
]

#: A partition as (topic, partition number).
TopicPartition = tuple[str, int]
#: A partition's offset (the next offset to read) by partition.
PartitionOffsets = Mapping[TopicPartition, int]


@dataclass(frozen=True)
class OffsetRange:
    """The offsets [start, end) of one partition: one Spark task's input."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.partition < 0 or self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid offset range {self.topic}-{self.partition} [{self.start}, {self.end})")

    @property
    def size(self) -> int:
        """How many offsets the range spans (an upper bound on its records)."""
        return self.end - self.start

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)


def rate_limit(limit: int, start: PartitionOffsets, latest: PartitionOffsets,
               earliest_for_new: PartitionOffsets) -> dict[TopicPartition, int]:
    """The end offsets of a batch that reads about ``limit`` offsets from ``start`` towards ``latest``.

    As Spark's ``KafkaMicroBatchStream.rateLimit``: every partition of
    ``latest`` gets ``limit * size / total`` offsets, where ``size`` is what it
    has available (``latest - begin``) and ``total`` the sum over partitions
    with something available; the share is floored, or ceiled when below one.
    ``begin`` is ``start``, or ``earliest_for_new`` for a partition missing
    from ``start``.  A partition with nothing available, or with no known
    begin, ends at ``latest``; if less than one offset is available in all,
    the result is ``latest`` unchanged.  The result never passes ``latest``
    and has exactly the partitions of ``latest``.
    """
    if limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    sizes: dict[TopicPartition, int] = {}
    begins: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        begin = start[tp] if tp in start else earliest_for_new.get(tp)
        if begin is None:
            continue  # as Spark: no begin is the data-loss check's business, not the rate limit's
        if end - begin > 0:
            sizes[tp] = end - begin
            begins[tp] = begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    out: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        share = limit * (size / total)
        # Don't completely starve small partitions.
        count = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begins[tp] + count)  # Python ints: no overflow check needed (SPARK-26718)
    return out


def should_trigger(available: int, min_offsets: int | None, last_trigger_ms: int, now_ms: int,
                   max_delay_ms: int) -> bool:
    """Whether to run a batch now, under ``minOffsetsPerTrigger`` (``min_offsets``) and ``maxTriggerDelay``.

    As Spark's ``KafkaMicroBatchStream.delayBatch``: run when ``max_delay_ms``
    or more has passed since ``last_trigger_ms``, or when ``available``
    offsets reach ``min_offsets``; without ``min_offsets``, always.  The
    caller records ``now_ms`` as the last trigger when this returns True (so
    with ``last_trigger_ms`` 0, the first batch runs at once, as in Spark).
    """
    if min_offsets is None:
        return True
    if now_ms - last_trigger_ms >= max_delay_ms:
        return True
    return available >= min_offsets


def _check_offsets(start: PartitionOffsets, end: PartitionOffsets) -> None:
    for tp, offset in end.items():
        if tp not in start:
            raise ValueError(f"partition {tp[0]}-{tp[1]} has an end offset but no start offset")
        if offset < 0 or start[tp] < 0:
            raise ValueError(f"partition {tp[0]}-{tp[1]} has an unresolved offset: start {start[tp]}, end {offset}")


def total_size(start: PartitionOffsets, end: PartitionOffsets) -> int:
    """How many offsets [start, end) spans over the partitions of ``end``; a partition whose end is
    not past its start counts 0.  Equals ``sum(r.size for r in plan_ranges(start, end))``.

    Every partition of ``end`` must be in ``start`` with both offsets resolved (>= 0), else ValueError.
    """
    _check_offsets(start, end)
    return sum(max(0, offset - start[tp]) for tp, offset in end.items())


def _java_round(x: float) -> int:
    """Java's ``Math.round``: half rounds up (Python's ``round`` rounds half to even)."""
    return math.floor(x + 0.5)


def _part_count(size: int, total: int, min_parts: int) -> int:
    return max(_java_round(size / total * min_parts), 1)


def plan_ranges(start: PartitionOffsets, end: PartitionOffsets, *,
                min_partitions: int | None = None) -> list[OffsetRange]:
    """The ranges a batch from ``start`` to ``end`` reads, sorted by (topic, partition, start).

    One range per partition of ``end`` whose end is past its start; the others
    (empty, or gone backwards, which is for the caller's data-loss check) are
    dropped, and partitions only in ``start`` are ignored.  A partition of
    ``end`` missing from ``start``, or an offset still -1/-2, is a caller bug
    (ValueError): resolve them first.

    With ``min_partitions`` above the number of ranges, the ranges are split
    as Spark's ``KafkaOffsetRangeCalculator`` does (SPARK-36576 included):
    ranges whose share of ``min_partitions`` rounds to 1 stay whole; each
    other range gets ``round(size / split_total * (min_partitions - whole))``
    parts of near-equal size, the last part taking the remainder.  The parts
    are contiguous, non-empty and cover each range exactly; their number is
    about ``min_partitions``, more or less by rounding.
    """
    if min_partitions is not None and min_partitions < 1:
        raise ValueError(f"min_partitions must be positive, got {min_partitions}")
    _check_offsets(start, end)
    ranges = [OffsetRange(tp[0], tp[1], start[tp], end[tp]) for tp in sorted(end) if end[tp] > start[tp]]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges

    total = sum(r.size for r in ranges)
    whole = {r.topic_partition for r in ranges if _part_count(r.size, total, min_partitions) == 1}
    split_total = total - sum(r.size for r in ranges if r.topic_partition in whole)
    split_min_partitions = max(min_partitions - len(whole), 1)

    out: list[OffsetRange] = []
    for r in ranges:
        parts = 1 if r.topic_partition in whole else _part_count(r.size, split_total, split_min_partitions)
        remaining = r.size
        offset = r.start
        for part in range(parts):
            count = remaining // (parts - part)  # the last part takes the rounding
            remaining -= count
            if count > 0:
                out.append(OffsetRange(r.topic, r.partition, offset, offset + count))
                offset += count
    return out


@dataclass(frozen=True)
class TopicChanges:
    """What happened to a batch's partitions since the last one, other than new data: each is data loss.

    ``deleted``: partitions gone (their topic deleted), with the offset the
    query had reached; ``recreated``: partitions of a topic whose id changed
    (deleted and created again), with that offset; ``backwards``:
    partitions whose latest offset is now below it, as (reached, latest).
    """

    deleted: Mapping[TopicPartition, int]
    recreated: Mapping[TopicPartition, int]
    backwards: Mapping[TopicPartition, tuple[int, int]]

    def __bool__(self) -> bool:
        return bool(self.deleted or self.recreated or self.backwards)

    def describe(self) -> str:
        parts = []
        if self.deleted:
            parts.append("deleted: " + ", ".join(f"{t}-{p} (read up to offset {o})" for (t, p), o in sorted(self.deleted.items())))
        if self.recreated:
            parts.append("deleted and created again (a new topic id): " + ", ".join(
                f"{t}-{p} (read up to offset {o})" for (t, p), o in sorted(self.recreated.items())))
        if self.backwards:
            parts.append("offsets went backwards: " + ", ".join(
                f"{t}-{p} from {was} to {now}" for (t, p), (was, now) in sorted(self.backwards.items())))
        return "; ".join(parts)


def topic_changes(begin: PartitionOffsets, begin_ids: Mapping[str, str], listed: Iterable[TopicPartition],
                  ids: Mapping[str, str], unsettled: Iterable[str], latest: PartitionOffsets) -> TopicChanges:
    """Compare where the query is (``begin``, and the topic ids it saw) with what the cluster lists now.

    ``listed`` are the partitions the cluster has now, ``ids`` their topics'
    ids, ``unsettled`` topics whose metadata had a transient error (nothing
    is concluded about them), ``latest`` the listed partitions' latest
    offsets.  A topic id missing on either side (an older checkpoint, a
    broker without topic ids) is not compared.
    """
    listed = set(listed)
    unsettled = set(unsettled)
    deleted: dict[TopicPartition, int] = {}
    recreated: dict[TopicPartition, int] = {}
    backwards: dict[TopicPartition, tuple[int, int]] = {}
    for tp, offset in begin.items():
        topic = tp[0]
        if topic in unsettled:
            continue
        if tp not in listed:
            deleted[tp] = offset
        elif topic in begin_ids and topic in ids and begin_ids[topic] != ids[topic]:
            recreated[tp] = offset
        elif tp in latest and latest[tp] < offset:
            backwards[tp] = (offset, latest[tp])
    return TopicChanges(deleted, recreated, backwards)
