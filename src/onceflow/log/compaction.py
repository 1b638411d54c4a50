"""Log compaction (``cleanup.policy=compact``): Kafka's LogCleaner, for one broker.

Theory of operation
-------------------
A compacted partition keeps, for every key, at least its newest record.
Each *pass* over a partition has three steps, as in Kafka's ``Cleaner``:

1. **Plan** (``plan_cleaning``, on the event loop).  The *cleaner checkpoint*
   (``cleaner-offset-checkpoint`` in the partition directory) says where the
   last pass stopped: everything before it is *clean* (holds no key twice,
   apart from what arrived since), everything after is *dirty*.  The
   *first uncleanable offset* is the smallest of the active segment's base
   offset, the last stable offset, the high watermark, and the base offset
   of the first dirty segment younger than ``min.compaction.lag.ms``,
   rounded down to a segment boundary: the cleaner reads and replaces only
   whole rolled segments below it, never the active segment and never
   anything a consumer could not read yet or a transaction could still
   change.  The partition is cleaned when its dirty bytes are more than
   ``min.cleanable.dirty.ratio`` of the clean + dirty bytes (strictly more,
   as Kafka's ``grabFilthiestCompactedLog``), or when its oldest dirty
   segment's first batch is older than ``max.compaction.lag.ms``.  The plan
   is a snapshot (file paths, sizes, offsets of the segments, the aborted
   transactions overlapping them, the last batch of every producer with
   state), so the next step needs nothing from the live log.

2. **Build** (``build_cleaned``, in a worker thread).  First the *offset
   map*: key -> offset of its newest record in the dirty section (records of
   aborted transactions are not counted).  Its memory is bounded by
   ``log.cleaner.dedupe.buffer.size``; if the dirty section holds more keys,
   the pass stops mapping at a batch boundary and cleans only that far (the
   next pass goes on from there).  Then every segment from the log start up
   to where the map ends is rewritten, in groups of consecutive segments
   that fit in one segment (``segment.bytes``, ``segment.index.bytes``, a
   31-bit offset range; Kafka's ``groupSegmentsBySize``), each group into one
   ``<base>.log.cleaned`` with its indexes.  Only the immutable files are
   read, through file descriptors of this step's own.

3. **Install** (``install_cleaned``, on the event loop).  Each group's old
   segments must still be in the log (retention or a topic deletion may
   have removed them meanwhile: then the whole pass is thrown away); the
   new files are swapped in by ``PartitionLog.replace_segments`` and the
   checkpoint is moved to where the map ended.

What a pass keeps, batch by batch (Kafka's ``cleanInto`` filter and
``MemoryRecords.filterTo``):

* A data record is kept if it is past the map, or has no key (Kafka drops
  keyless records as invalid; Onceflow keeps them as they are, silently),
  or is the newest record of its key.  A newest record that is a
  *tombstone* (value None) is kept until its batch's *delete horizon*.
* Delete horizon (KIP-534, the rule for magic-v2 batches; not the older
  "segment last modified" rule): the first pass that keeps a tombstone (or
  a marker whose transaction has no data left) stamps the batch with the
  ``delete horizon`` attribute (bit 6) and ``baseTimestamp = now +
  delete.retention.ms``; record timestamp deltas are re-based so that every
  record keeps its absolute timestamp.  A later pass after the horizon
  removes the tombstone (the marker).  A tombstone therefore survives at
  least ``delete.retention.ms`` after the first pass that saw it.
* Transactions: the aborted-transaction indexes say which transactional
  batches were aborted; they are removed.  A COMMIT/ABORT marker is kept
  while this pass still met a data batch of its transaction (an ABORT then
  keeps its aborted-index entry, written to the new segment's index); once
  none is left it is stamped with a delete horizon and removed after it, as
  Kafka does.  Entries of aborted transactions whose data is gone are
  dropped from the new index (harmless either way).
* The batch holding the last data offset of a producer that still has
  state (or, for a producer whose entry has no data, its last marker) is
  never removed: if its records go, it stays as an empty batch with its
  original header (producer id, epoch, base sequence, offsets), so the
  producer's state can be rebuilt from the log after a restart.
* The last batch of a group is kept too (empty if need be) when nothing
  else of the group's last segment is, so that each new segment reaches
  into the last segment it replaces (Kafka keeps the last batch of the
  whole pass; keeping one per group makes "which old segments does a
  ``.swap`` replace" a plain offset range: those whose base offset is
  below the swap segment's next offset).  A new segment may therefore end
  before the next one starts: reads step over such gaps.

A batch that keeps all its records (and needs no horizon stamp) is copied
byte for byte.  Otherwise it is re-encoded (``records.encode_batch``) with
its base offset, last offset delta, producer id/epoch/base sequence,
partition leader epoch, attributes (minus the codec: the new batch is
*uncompressed*) and base timestamp, each kept record's bytes unchanged
(offset delta, timestamp delta, key, value, headers), a max timestamp
recomputed from the kept records for CreateTime batches (as Kafka's
builder does; LogAppendTime keeps it), and a fresh CRC32C.

The broker (``Broker._timers``) runs a pass over every partition that needs
one each ``log.cleaner.backoff.ms`` when ``log.cleaner.enable``, one
partition at a time, and logs one line per cleaned partition.

Where this differs from Kafka, and why:

* Keyless records are kept (Kafka's cleaner drops them): Onceflow does not
  refuse them on produce, so dropping them later would lose data silently.
* The offset map holds the keys themselves, not 16-byte MD5 digests (no
  collisions); its size is charged ``len(key) + 100`` bytes per key against
  ``log.cleaner.dedupe.buffer.size``.
* One cleaner, no I/O throttle; a partition whose data does not parse is
  left alone until restart (Kafka's "uncleanable" partitions).
* Empty batches are kept per group, not per pass (see above); since a
  segment may then hold nothing but empty batches, ``PartitionLog.read``
  reads on past such a segment (librdkafka fails a fetch answer without a
  single record after a few tries).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import LOG_CLEANER_DEDUPE_BUFFER_SIZE
from ..fileio import read_partition_checkpoint, write_partition_checkpoint
from ..records.batch import (
    COMPRESSION_MASK,
    DELETE_HORIZON_FLAG,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    read_header,
)
from ..records.control import ABORT, COMMIT
from ..records.records import encode_batch, encode_record, iter_raw_records
from .aborted_index import AbortedTxn
from .segment import CLEANED_SUFFIX, SegmentBuilder, segment_files

if TYPE_CHECKING:
    from .partition_log import PartitionLog
    from .segment import Segment

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_READ_CHUNK = 1 << 20
_MAX_RELATIVE = 2**31 - 1
_INDEX_ENTRY = 8
_TIME_INDEX_ENTRY = 12
#: What one key of the offset map is charged against log.cleaner.dedupe.buffer.size,
#: besides its bytes (a Python dict entry, the key object and the offset).
_MAP_ENTRY_OVERHEAD = 100


class CleaningAborted(Exception):
    """The broker is stopping: the worker gave up and deleted its files."""


class CleanerError(Exception):
    """The partition cannot be cleaned (a batch or record that does not parse)."""


# -- the checkpoint ---------------------------------------------------------------


def read_checkpoint(directory: Path) -> int | None:
    """The offset the last pass cleaned up to, or None (never cleaned, or an unreadable file).

    Format, Kafka's ``cleaner-offset-checkpoint`` for a single partition
    (``fileio.write_partition_checkpoint``).
    """
    path = directory / CHECKPOINT_FILE
    try:
        return read_partition_checkpoint(path)
    except (ValueError, OSError) as exc:
        log.warning("%s: ignoring unreadable cleaner checkpoint: %s", path, exc)
        return None


def write_checkpoint(directory: Path, topic: str, partition: int, offset: int) -> None:
    """Atomically replace the checkpoint (temp file, fsync, rename, fsync the directory)."""
    write_partition_checkpoint(directory / CHECKPOINT_FILE, topic, partition, offset)


# -- planning (event loop) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentView:
    """What the worker needs of one rolled segment; nothing here changes after the roll."""

    base_offset: int
    next_offset: int
    size: int
    log_path: Path
    index_bytes: int
    time_index_bytes: int


@dataclass(frozen=True, slots=True)
class LastRecord:
    """A producer with state: the offset of its last data batch (None: it has none) and its epoch."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class CleaningPlan:
    topic: str
    partition: int
    directory: Path
    first_dirty: int
    first_uncleanable: int
    #: Every segment below ``first_uncleanable``, oldest first.
    segments: tuple[SegmentView, ...]
    #: Aborted transactions overlapping the segments (from the transaction indexes).
    aborted: tuple[AbortedTxn, ...]
    active_producers: Mapping[int, LastRecord]
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    segment_index_bytes: int
    index_interval_bytes: int
    map_memory_bytes: int
    dirty_ratio: float
    #: Cleaned because max.compaction.lag.ms was exceeded, not for the ratio.
    forced: bool

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class CleanableOffsets:
    first_dirty: int
    #: Rounded down to a segment base offset.
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    #: max.compaction.lag.ms is exceeded by a dirty segment.
    overdue: bool

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanable_offsets(log_: PartitionLog, now_ms: int) -> CleanableOffsets:
    """Where the dirty section starts and the cleanable range ends (Kafka's
    ``cleanableOffsets`` + ``calculateCleanableBytes``), and their sizes."""
    config = log_.config
    segments = log_.segments
    start = log_.log_start_offset
    checkpoint = read_checkpoint(log_.dir)
    first_dirty = start
    if checkpoint is not None:
        if start <= checkpoint <= log_.log_end_offset:
            first_dirty = checkpoint
        elif not (config.delete_enabled and checkpoint < start):
            log.warning("%s: cleaner checkpoint %d is outside the log [%d, %d]; cleaning from the start",
                        log_.name, checkpoint, start, log_.log_end_offset)
    active = segments[-1]
    uncleanable = min(active.base_offset, log_.last_stable_offset, log_.high_watermark)
    now_minus_lag = now_ms - max(config.min_compaction_lag_ms, 0)
    if config.min_compaction_lag_ms > 0:
        for segment in segments[log_.segment_for(first_dirty) : -1]:
            if segment.max_timestamp > now_minus_lag:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    uncleanable = max(first_dirty, uncleanable)
    first_uncleanable = segments[log_.segment_for(uncleanable)].base_offset
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
    dirty_from = segments[log_.segment_for(min(first_dirty, first_uncleanable))].base_offset
    dirty_bytes = sum(s.size for s in segments if dirty_from <= s.base_offset < first_uncleanable) if first_dirty < first_uncleanable else 0
    overdue = False
    max_lag = max(config.max_compaction_lag_ms, 0)
    for segment in segments[log_.segment_for(first_dirty) : -1]:
        first_ts = segment.rolling_timestamp
        if first_ts is not None and first_ts > 0 and first_ts < now_ms - max_lag:
            overdue = True
            break
    return CleanableOffsets(first_dirty, first_uncleanable, clean_bytes, dirty_bytes, overdue)


def needs_cleaning(log_: PartitionLog, now_ms: int) -> CleanableOffsets | None:
    """The cleanable offsets if the partition should be cleaned now, else None."""
    if log_.closed or not log_.config.compact_enabled or len(log_.segments) < 2 or log_.uncleanable is not None:
        return None
    offsets = cleanable_offsets(log_, now_ms)
    if offsets.dirty_bytes <= 0:
        return None
    if offsets.overdue or offsets.dirty_ratio > log_.config.min_cleanable_ratio:
        return offsets
    return None


def plan_cleaning(log_: PartitionLog, now_ms: int, *, force: bool = False) -> CleaningPlan | None:
    """A snapshot of what to clean, or None if the partition does not need it.

    ``force`` ignores the dirty ratio (and re-cleans the clean section even
    with nothing dirty: tombstones and markers past their horizon go).
    """
    if log_.closed or not log_.config.compact_enabled or len(log_.segments) < 2:
        return None
    if force:
        offsets = cleanable_offsets(log_, now_ms)
    else:
        found = needs_cleaning(log_, now_ms)
        if found is None:
            return None
        offsets = found
    views = tuple(
        SegmentView(s.base_offset, s.next_offset, s.size, s.log_path, len(s.index) * _INDEX_ENTRY,
                    len(s.time_index) * _TIME_INDEX_ENTRY)
        for s in log_.segments
        if s.base_offset < offsets.first_uncleanable
    )
    if not views:
        return None
    # From the first segment's base, not the log start (DeleteRecords may have moved it inside a
    # segment): the cleaner rewrites whole segments, the records below the log start included.
    aborted = tuple(log_.aborted_transactions(log_.segments[0].base_offset, offsets.first_uncleanable))
    producers = {
        pid: LastRecord(entry.last_data_offset if entry.last_data_offset >= 0 else None, entry.producer_epoch)
        for pid, entry in log_.producer_state.producers().items()
    }
    config = log_.config
    return CleaningPlan(
        topic=log_.topic,
        partition=log_.partition,
        directory=log_.dir,
        first_dirty=offsets.first_dirty,
        first_uncleanable=offsets.first_uncleanable,
        segments=views,
        aborted=aborted,
        active_producers=producers,
        now_ms=now_ms,
        delete_retention_ms=max(config.delete_retention_ms, 0),
        segment_bytes=config.segment_bytes,
        segment_index_bytes=config.segment_index_bytes,
        index_interval_bytes=config.index_interval_bytes,
        map_memory_bytes=config.broker[LOG_CLEANER_DEDUPE_BUFFER_SIZE],
        dirty_ratio=offsets.dirty_ratio,
        forced=offsets.overdue and not offsets.dirty_ratio > config.min_cleanable_ratio,
    )


# -- building (worker thread) -----------------------------------------------------


@dataclass(slots=True)
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    batches_rewritten: int = 0


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    """One new segment and the old ones it replaces."""

    base_offset: int
    old_bases: tuple[int, ...]
    end_offset: int
    size: int


@dataclass(slots=True)
class CleaningResult:
    plan: CleaningPlan
    #: The new checkpoint: the offset after the last one the map covered.
    end_offset: int
    groups: list[CleanedGroup] = field(default_factory=list)
    stats: CleanerStats = field(default_factory=CleanerStats)

    def cleaned_files(self) -> list[Path]:
        return [p for g in self.groups for p in segment_files(self.plan.directory, g.base_offset, CLEANED_SUFFIX)]


class _TxnTracker:
    """Which transactional batches are aborted, and which markers may go (Kafka's
    ``CleanedTransactionMetadata``), fed batches in offset order."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = deque(sorted(set(aborted), key=lambda t: (t.first_offset, t.last_offset)))
        #: producer id -> [its aborted transaction, whether one of its batches was met].
        self._aborted: dict[int, list[object]] = {}
        self._committed: set[int] = set()
        #: Where the aborted-index entries of kept ABORT markers go (the group's new index).
        self.sink: SegmentBuilder | None = None

    def _consume_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            txn = self._pending.popleft()
            self._aborted.setdefault(txn.producer_id, [txn, False])

    def on_data(self, header: BatchHeader) -> bool:
        """A data batch; True if it belongs to an aborted transaction (it may go)."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        state = self._aborted.get(header.producer_id)
        if state is not None:
            state[1] = True
            return True
        self._committed.add(header.producer_id)
        return False

    def on_control(self, header: BatchHeader, control_type: int | None) -> bool:
        """A control batch; True if no data batch of its transaction was met (it may go, after its horizon)."""
        self._consume_up_to(header.last_offset)
        if control_type is None:
            return True  # emptied by an earlier pass
        if control_type == ABORT:
            state = self._aborted.pop(header.producer_id, None)
            if state is not None and state[1]:
                if self.sink is not None:
                    self.sink.txn_index.append(state[0])  # type: ignore[arg-type]
                return False
            return True
        if control_type == COMMIT:
            if header.producer_id in self._committed:
                self._committed.discard(header.producer_id)
                return False
            return True
        return False  # another kind of control batch: kept


def _control_type(batch: bytes, header: BatchHeader) -> int | None:
    for record in iter_raw_records(batch, header):
        if record.key is None or len(record.key) < 4:
            return -1
        return int.from_bytes(record.key[2:4], "big", signed=True)
    return None


def _read_batches(view: SegmentView, abort: threading.Event | None) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every batch of a rolled segment, read through a descriptor of our own."""
    fd = os.open(view.log_path, os.O_RDONLY)
    try:
        position = 0
        while position < view.size:
            if abort is not None and abort.is_set():
                raise CleaningAborted(view.log_path.name)
            chunk = os.pread(fd, min(_READ_CHUNK, view.size - position), position)
            cursor = 0
            while cursor + HEADER_SIZE <= len(chunk):
                header = read_header(chunk, cursor)
                if header.magic != 2 or header.size < HEADER_SIZE:
                    raise CleanerError(f"{view.log_path}: no valid batch at position {position + cursor}")
                if cursor + header.size > len(chunk):
                    break
                yield header, chunk[cursor : cursor + header.size]
                cursor += header.size
            if cursor == 0:  # one batch larger than the chunk
                if len(chunk) < HEADER_SIZE:
                    raise CleanerError(f"{view.log_path}: {len(chunk)} stray bytes at position {position}")
                header = read_header(chunk, 0)
                data = os.pread(fd, header.size, position)
                if len(data) < header.size:
                    raise CleanerError(f"{view.log_path}: batch at position {position} is cut off")
                yield header, data
                cursor = header.size
            position += cursor
    finally:
        os.close(fd)


def _build_offset_map(plan: CleaningPlan, abort: threading.Event | None) -> tuple[dict[bytes, int], int]:
    """key -> newest offset in the dirty section, and the offset after the last one mapped."""
    start = plan.first_dirty
    latest = start - 1
    offsets: dict[bytes, int] = {}
    budget = plan.map_memory_bytes
    used = 0
    dirty = [v for v in plan.segments if v.next_offset > start]
    # Only the transactions that reach into the dirty section, as Kafka's buildOffsetMap collects
    # them from the dirty start: the map reads no earlier segment, so an older aborted
    # transaction's marker is never met, and its producer's later batches would all look aborted.
    tracker = _TxnTracker(t for t in plan.aborted if t.last_offset >= start)
    for i, view in enumerate(dirty):
        segment_end = dirty[i + 1].base_offset if i + 1 < len(dirty) else plan.first_uncleanable
        for header, batch in _read_batches(view, abort):
            if header.is_control:
                tracker.on_control(header, _control_type(batch, header))
            elif not tracker.on_data(header) and header.last_offset >= start:
                keys = [(r.key, header.base_offset + r.offset_delta) for r in iter_raw_records(batch, header) if r.key is not None]
                cost = sum(len(k) + _MAP_ENTRY_OVERHEAD for k, o in keys if o >= start and k not in offsets)
                if used + cost > budget and offsets:
                    log.info("%s: offset map full at offset %d; cleaning up to there", plan.name, header.base_offset)
                    return offsets, latest + 1
                used += cost
                for key, offset in keys:
                    if offset >= start:
                        offsets[key] = offset
            if header.last_offset >= start:
                latest = max(latest, header.last_offset)
        latest = max(latest, segment_end - 1)  # offsets in gaps count as mapped
    return offsets, latest + 1


def _group_segments(views: list[SegmentView], plan: CleaningPlan) -> list[list[SegmentView]]:
    """Consecutive segments that fit together in one segment (Kafka's ``groupSegmentsBySize``)."""
    groups: list[list[SegmentView]] = []
    i = 0
    while i < len(views):
        group = [views[i]]
        log_size, index_size, time_size = views[i].size, views[i].index_bytes, views[i].time_index_bytes
        i += 1
        while i < len(views):
            nxt = views[i]
            if (log_size + nxt.size > plan.segment_bytes
                    or index_size + nxt.index_bytes > plan.segment_index_bytes
                    or time_size + nxt.time_index_bytes > plan.segment_index_bytes
                    or (nxt.size > 0 and nxt.next_offset - 1 - group[0].base_offset > _MAX_RELATIVE)):
                break
            group.append(nxt)
            log_size += nxt.size
            index_size += nxt.index_bytes
            time_size += nxt.time_index_bytes
            i += 1
        groups.append(group)
    return groups


class _Retention(Enum):
    DELETE = "delete"  # the batch goes, whatever its records
    DELETE_EMPTY = "delete-empty"  # the batch goes if no record is kept
    RETAIN_EMPTY = "retain-empty"  # the batch stays, empty if no record is kept


@dataclass(slots=True)
class _GroupFilter:
    plan: CleaningPlan
    offsets: dict[bytes, int]
    latest: int
    tracker: _TxnTracker
    builder: SegmentBuilder
    #: Base offset and next offset of the group's last old segment.
    last_base: int
    group_end: int
    stats: CleanerStats

    def _is_last_of_producer(self, header: BatchHeader) -> bool:
        last = self.plan.active_producers.get(header.producer_id)
        if last is None:
            return False
        if last.last_data_offset is not None:
            return header.last_offset == last.last_data_offset
        return header.is_control and header.producer_epoch == last.producer_epoch

    def filter(self, header: BatchHeader, batch: bytes) -> bytes | None:
        """The batch to write for ``batch`` (itself, a rewrite, an empty batch), or None to drop it."""
        now = self.plan.now_ms
        horizon = header.base_timestamp if header.attributes & DELETE_HORIZON_FLAG else None
        if header.is_control:
            can_discard = self.tracker.on_control(header, _control_type(batch, header))
            discard_records = can_discard and horizon is not None and horizon <= now
        else:
            can_discard = self.tracker.on_data(header)
            discard_records = can_discard
        if header.has_producer_id and self._is_last_of_producer(header):
            retention = _Retention.RETAIN_EMPTY
        elif header.next_offset == self.group_end and self.builder.next_offset <= self.last_base:
            retention = _Retention.RETAIN_EMPTY  # nothing of the group's last segment is kept: mark its end
        elif discard_records:
            retention = _Retention.DELETE
        else:
            retention = _Retention.DELETE_EMPTY
        self.stats.records_read += header.record_count
        if retention is _Retention.DELETE:
            return None
        kept = []
        tombstones = False
        for record in iter_raw_records(batch, header):
            if discard_records:
                keep = False
            elif header.is_control:
                keep = True
            else:
                keep = self._keep_record(header, record.offset_delta, record.key, record.value, horizon)
            if keep:
                kept.append(record)
                tombstones = tombstones or (record.value is None and not header.is_control)
        self.stats.records_kept += len(kept)
        if kept:
            stamp = horizon is None and (tombstones or (can_discard and header.is_control))
            if len(kept) == header.record_count and not stamp:
                return batch
            self.stats.batches_rewritten += 1
            return _rewrite(header, kept, now + self.plan.delete_retention_ms if stamp else horizon)
        if retention is _Retention.RETAIN_EMPTY:
            self.stats.batches_rewritten += 1
            return _empty_batch(header)
        return None

    def _keep_record(self, header: BatchHeader, offset_delta: int, key: bytes | None, value: bytes | None,
                     horizon: int | None) -> bool:
        offset = header.base_offset + offset_delta
        if offset > self.latest or key is None:
            return True  # past the map; or keyless (Kafka drops those; kept here as they are)
        if offset < self.offsets.get(key, -1):
            return False  # a newer record of this key exists
        return value is not None or horizon is None or self.plan.now_ms < horizon


def _rewrite(header: BatchHeader, kept: list, horizon: int | None) -> bytes:  # type: ignore[type-arg]
    """``header``'s batch holding only ``kept`` (uncompressed), with ``horizon`` stamped if given."""
    attributes = header.attributes & ~COMPRESSION_MASK
    base_timestamp = header.base_timestamp
    log_append_time = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    timestamps = [header.base_timestamp + r.timestamp_delta for r in kept]
    if horizon is not None and not header.attributes & DELETE_HORIZON_FLAG:
        attributes |= DELETE_HORIZON_FLAG
        base_timestamp = horizon  # record timestamps become deltas from the horizon (KIP-534)
        records = [encode_record(r.offset_delta, ts - horizon, r.fields, r.attributes) for r, ts in zip(kept, timestamps, strict=True)]
    else:
        records = [r.encoded for r in kept]
    max_timestamp = header.max_timestamp if log_append_time or header.is_control else max(timestamps)
    return encode_batch(
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        attributes=attributes,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records=records,
        partition_leader_epoch=header.partition_leader_epoch,
    )


def _empty_batch(header: BatchHeader) -> bytes:
    """The batch's header with no records: offsets, producer id, epoch and sequences survive."""
    attributes = header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_FLAG)
    base_timestamp = header.max_timestamp if header.attributes & DELETE_HORIZON_FLAG else header.base_timestamp
    return encode_batch(
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        attributes=attributes,
        base_timestamp=base_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records=[],
        partition_leader_epoch=header.partition_leader_epoch,
    )


def build_cleaned(plan: CleaningPlan, abort: threading.Event | None = None) -> CleaningResult:
    """Write the cleaned segments of ``plan`` (``<base>.*.cleaned``, fsynced); runs in a worker thread.

    Reads only the plan's files; never touches the live log.  On any failure
    (or ``abort``) the files written so far are deleted and the error raised.
    """
    offsets, end_offset = _build_offset_map(plan, abort)
    result = CleaningResult(plan, end_offset)
    views = [v for v in plan.segments if v.base_offset < end_offset]
    tracker = _TxnTracker(plan.aborted)
    builders: list[SegmentBuilder] = []
    try:
        for group in _group_segments(views, plan):
            builder = SegmentBuilder(plan.directory, group[0].base_offset, plan.index_interval_bytes)
            builders.append(builder)
            tracker.sink = builder
            filt = _GroupFilter(plan, offsets, end_offset - 1, tracker, builder, group[-1].base_offset,
                                group[-1].next_offset, result.stats)
            for view in group:
                result.stats.bytes_read += view.size
                for header, batch in _read_batches(view, abort):
                    out = filt.filter(header, batch)
                    if out is not None:
                        builder.append(out, header if out is batch else read_header(out))
            builder.finish()
            result.stats.bytes_written += builder.size
            result.groups.append(
                CleanedGroup(group[0].base_offset, tuple(v.base_offset for v in group), group[-1].next_offset, builder.size)
            )
    except BaseException:
        for builder in builders:
            builder.abandon()
        raise
    return result


# -- installing (event loop) --------------------------------------------------------


def discard_cleaned(result: CleaningResult) -> None:
    for path in result.cleaned_files():
        path.unlink(missing_ok=True)


def install_cleaned(log_: PartitionLog, result: CleaningResult, now_ms: int) -> bool:
    """Swap the cleaned segments in and move the checkpoint; False (files discarded) if the log changed meanwhile."""
    plan = result.plan
    by_base = {s.base_offset: s for s in log_.segments}
    replaced: list[list[Segment]] = []
    if log_.closed or log_.dir != plan.directory:
        discard_cleaned(result)
        return False
    views = {v.base_offset: v for v in plan.segments}
    for group in result.groups:
        old = [by_base[base] for base in group.old_bases if base in by_base]
        if len(old) != len(group.old_bases) or any(
                s.next_offset != views[s.base_offset].next_offset or s.size != views[s.base_offset].size
                or s is log_.segments[-1] for s in old):
            log.info("%s: segments changed while cleaning (retention?); discarding the pass", plan.name)
            discard_cleaned(result)
            return False
        replaced.append(old)
    for group, old in zip(result.groups, replaced, strict=True):
        if log_.replace_segments(old, group.base_offset, now_ms) is None:
            log.warning("%s: could not swap in the cleaned segment %d; discarding the rest of the pass", plan.name,
                        group.base_offset)
            discard_cleaned(result)
            return False
    write_checkpoint(log_.dir, log_.topic, log_.partition, result.end_offset)
    stats = result.stats
    log.info(
        "%s: cleaned offsets %d-%d (%d segment(s) -> %d, dirty ratio %.2f%s): %d -> %d bytes, %d of %d records removed",
        plan.name, plan.segments[0].base_offset, result.end_offset, sum(len(g.old_bases) for g in result.groups),
        len(result.groups), plan.dirty_ratio, ", max.compaction.lag.ms" if plan.forced else "",
        stats.bytes_read, stats.bytes_written, stats.records_read - stats.records_kept, stats.records_read,
    )
    return True


def clean_partition(log_: PartitionLog, now_ms: int, *, force: bool = False) -> CleaningResult | None:
    """Plan, build and install one pass on the caller's thread (tests, tools); None if nothing was done."""
    plan = plan_cleaning(log_, now_ms, force=force)
    if plan is None:
        return None
    result = build_cleaned(plan)
    return result if install_cleaned(log_, result, now_ms) else None
