"""One partition on disk: its segments, offsets, high watermark, retention and recovery.

Theory of operation
-------------------
A partition is a directory ``<topic>-<partition>`` of segments ordered by
base offset; only the last one (the active segment) is written.

*Append* (``append_produced``): validate the batch header and CRC
(``records.batch.validate_produced``), assign the next offsets by rewriting
the batch's base offset, roll the active segment if the batch would not fit
(``segment.bytes``), is too old (``segment.ms``) or its index is full, then
write.  Nothing about the partition changes unless the batch is accepted.

*High watermark*: with a single replica, Kafka's high watermark is where
every in-sync replica has the data; here the one "replica" that counts is
the disk.  The high watermark is therefore the end of the fsynced prefix:
``broker.group_commit.GroupCommit`` fsyncs dirty partitions and calls ``on_flushed``.
Consumers never see a record that a crash could still take away, and an
acks=all producer is answered exactly when its data is below the high
watermark.

*Producer state* (``producer_state.ProducerStateManager``, KIP-98): a batch
carrying a producer id is checked before it is written (epoch, sequence,
duplicates: a retried batch already in the log is answered with its
original offsets and not written again) and the producer's state is updated
only after the write.  Transactional batches open a transaction in this
partition at their first offset; a COMMIT/ABORT marker (``append_marker``,
written by the transaction coordinator) closes it.  An ABORT also adds an
entry to the aborted-transaction index of the segment the marker lands in.

*Last stable offset*: the first offset of the oldest transaction still open
(or closed by a marker that is not durable yet), else the high watermark.
read_committed consumers read below it, and get the aborted transactions
overlapping what they read, from the segments' transaction indexes.

*Reads* (``read``) return the stored bytes from the batch holding the fetch
offset up to ``max_bytes`` (at least one whole batch when ``min_one``,
KIP-74), never past the high watermark (the last stable offset for
read_committed), and never across a segment boundary, except past a
segment that compaction left with empty batches only (see
``_read_past_empty_batches``).

*Write failures* (a full disk, EIO): what the event loop writes itself (a
new segment's files, index entries, topic metadata) fails before anything
changes, so the append is refused with KAFKA_STORAGE_ERROR and the next one
tries again.  A failed write of batch data (on the I/O thread), or of an
aborted-index entry after its marker, leaves the in-memory state ahead of
the files: the partition is then *failed* and refuses writes until the
broker restarts and recovers it (``_failed``); reads below the high
watermark go on, and no clean-shutdown marker is left.

*Recovery*: after a clean shutdown segments are opened from their indexes.
After a crash every segment above the recovery point (the active one: older
ones were fsynced, indexes included, when they were rolled) is re-read,
CRC-checked, truncated at the first torn batch, and re-indexed.  Producer
state is loaded from the newest snapshot (one is taken at every roll and at
a clean shutdown) and the batches after it are replayed, which rebuilds open
transactions, the last stable offset and the aborted index of the replayed
segments: restart time depends on the active segment, not on the log's age.

*Retention* (``cleanup.policy=delete``): whole segments, oldest first, while
they are older than ``retention.ms`` or the partition is larger than
``retention.bytes``; never the active segment unless it is expired (it is
rolled first, as Kafka does), never data above the high watermark.

*Log start offset*: the first offset a client may read.  Retention moves it
by whole segments (it is then the first segment's base offset); DeleteRecords
(``delete_records``, KIP-107) moves it to any offset up to the high
watermark, inside a segment too.  That offset is written first, durably, to
``log-start-offset-checkpoint`` in the partition directory (Kafka's file
format; Kafka writes it every minute, here before the client is answered, so
neither a restart nor a crash brings deleted records back), and only then
are the segments wholly below it deleted, as Kafka's retention thread does
later (``deleteLogStartOffsetBreachedSegments``; a crash in between leaves
them to the next retention check).  Reads below it are OFFSET_OUT_OF_RANGE,
ListOffsets "earliest" answers it, a lookup by timestamp skips the records
below it, and the last stable offset is never below it (an open transaction
that began below it holds the LSO at the log start).  The records below it
in its segment stay on disk, unreadable, until the segment is deleted; the
producer state and its snapshots are kept from the first segment's base
offset (what is on disk), so a restart rebuilds a transaction that began
below the log start and is still open.

*Compaction* (``cleanup.policy=compact``, ``log.compaction``): the cleaner
builds replacement files for a run of rolled segments off the event loop,
then ``replace_segments`` swaps them in (``.cleaned`` -> ``.swap`` -> final
names, so that a crash leaves either the old segments or the new one, see
``segment.complete_interrupted_swaps``, which ``_open_segments`` runs first).
Offsets never move: a compacted log simply has gaps.
"""

from __future__ import annotations

import logging
import shutil
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import faults
from ..config import PRODUCER_ID_EXPIRATION_MS, TopicConfig
from ..fileio import fsync_dir, read_partition_checkpoint, write_partition_checkpoint
from ..protocol.errors import ErrorCode
from ..records.batch import (
    BatchHeader,
    Invalid,
    read_header,
    scan,
    stamped_prefix,
    validate_produced,
    with_log_append_time,
)
from ..records.control import build_marker, read_marker
from ..records.records import CorruptRecords, iter_records
from .aborted_index import AbortedTxn, TransactionIndex
from .index import IndexCorrupt
from .producer_state import AppendOrigin, CompletedTxn, Duplicate, ProducerAppendInfo, ProducerStateManager, Refused
from .segment import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    Segment,
    SegmentCorrupt,
    complete_interrupted_swaps,
    rename_segment_files,
    segment_files,
)
from .writer import DIRECT, SegmentWriter

log = logging.getLogger(__name__)

_INDEX_ENTRY = 8
_MAX_RELATIVE = 2**31 - 1

#: Where DeleteRecords' log start offset is kept (Kafka's file name and format, one partition).
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
#: DeleteRecords' offset meaning "the high watermark" (Kafka's DeleteRecordsRequest.HIGH_WATERMARK).
HIGH_WATERMARK = -1


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    #: The timestamp the broker stamped (LogAppendTime topics), else -1.
    log_append_time: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: bytes
    high_watermark: int
    log_start_offset: int
    #: read_committed only: aborted transactions overlapping ``records`` (else None).
    aborted: list[AbortedTxn] | None = None


@dataclass(frozen=True, slots=True)
class FlushPoint:
    """A position in the log to make durable: everything before ``offset``."""

    offset: int
    segment: Segment
    position: int


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def _end_offset(data: bytes) -> int:
    """The offset after the last complete batch in ``data`` (0 if none is complete)."""
    end = 0
    for _, header in scan(data):
        end = header.next_offset
    return end


def _holds_records(data: bytes) -> bool:
    """Whether any complete batch in ``data`` has a record (compaction leaves empty ones)."""
    return any(header.record_count > 0 for _, header in scan(data))


class PartitionLog:
    def __init__(
        self,
        topic: str,
        partition: int,
        directory: Path,
        config: TopicConfig,
        now_ms: int,
        *,
        clean_shutdown: bool = True,
        writer: SegmentWriter = DIRECT,
    ) -> None:
        self.topic = topic
        self.writer = writer
        self.partition = partition
        self.dir = directory
        self.config = config
        self.closed = False
        #: Called (from the event loop) when the high watermark moves.
        self.on_high_watermark: Callable[[PartitionLog], None] | None = None
        #: Why the log cleaner gave up on this partition (Kafka's "uncleanable" partitions), or None.
        self.uncleanable: str | None = None
        directory.mkdir(parents=True, exist_ok=True)
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        #: Base offset of the first segment rebuilt by recovery (its transaction index was reset).
        self._rebuilt_from: int | None = None
        self._open_segments(now_ms, clean_shutdown)
        #: The log start offset DeleteRecords set (``log_start_offset`` is never below the first segment).
        self._log_start = self._load_log_start(now_ms)
        active = self.segments[-1]
        self.high_watermark = active.next_offset
        self._hw_segment = active
        self._hw_position = active.size
        self.producer_state = ProducerStateManager(directory, config.broker[PRODUCER_ID_EXPIRATION_MS])
        self._load_producer_state()

    # -- opening --------------------------------------------------------------

    def _open_segments(self, now_ms: int, clean_shutdown: bool) -> None:
        complete_interrupted_swaps(self.dir)  # .cleaned files deleted, .swap files swapped in
        bases = sorted(int(p.stem) for p in self.dir.glob("*.log") if p.stem.isdigit())
        if not bases:
            self._add_segment(Segment(self.dir, 0, now_ms, self.writer))
            return
        for i, base in enumerate(bases):
            segment = Segment(self.dir, base, now_ms, self.writer)
            is_active = i == len(bases) - 1
            if clean_shutdown or not is_active:
                try:
                    segment.load()
                except SegmentCorrupt as exc:
                    log.warning("%s: %s; rebuilding its indexes from the log", self.name, exc)
                    segment.recover(self.config.index_interval_bytes)
                    self._mark_rebuilt(base)
            else:
                segment.recover(self.config.index_interval_bytes)
                segment.flush()
                self._mark_rebuilt(base)
            if self.segments and segment.base_offset < self.segments[-1].next_offset:
                raise RuntimeError(f"{self.name}: segment {base} overlaps its predecessor")
            self._add_segment(segment)
        # An active segment left empty by a crash just after a roll keeps its base offset.

    def _add_segment(self, segment: Segment) -> None:
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    def _load_log_start(self, now_ms: int) -> int:
        """The log start offset kept by DeleteRecords (``LOG_START_CHECKPOINT``), or 0 if none is.

        A checkpoint past the log end (the files lost data a DeleteRecords had
        seen durable, never by a crash) is handled as Kafka's LogLoader does:
        the segments are deleted and the log restarts empty at the checkpoint,
        so no offset is ever used twice.
        """
        path = self.dir / LOG_START_CHECKPOINT
        path.with_name(path.name + ".tmp").unlink(missing_ok=True)  # a write a crash interrupted
        try:
            stored = read_partition_checkpoint(path)
        except (ValueError, OSError) as exc:
            log.warning("%s: ignoring the unreadable log start checkpoint: %s", path, exc)
            return 0
        if stored is None:
            return 0
        if stored > self.log_end_offset:
            log.warning("%s: the log start checkpoint %d is past the log end %d; deleting the segments and "
                        "starting the log empty at %d", self.name, stored, self.log_end_offset, stored)
            for segment in self.segments:
                segment.delete()
            self.segments.clear()
            self._bases.clear()
            self._rebuilt_from = None
            self._add_segment(Segment(self.dir, stored, now_ms, self.writer))
        return stored

    def _mark_rebuilt(self, base_offset: int) -> None:
        if self._rebuilt_from is None or base_offset < self._rebuilt_from:
            self._rebuilt_from = base_offset

    def _load_producer_state(self) -> None:
        """Load the newest usable producer-state snapshot, then replay the batches after it.

        A segment rebuilt by recovery lost its transaction index, which only the
        replay of its markers can restore: then the snapshot used must be at or
        below that segment's base offset (Kafka reloads producer state the same
        way before recovering a segment), and newer ones are discarded.

        The state is kept from the first segment's base offset, not the log
        start offset: after a DeleteRecords inside a segment, the records below
        the log start are still on disk, and a transaction that began there and
        is still open must be rebuilt (it holds the last stable offset).
        """
        state = self.producer_state
        limit = self.log_end_offset if self._rebuilt_from is None else self._rebuilt_from
        start = state.load(self.segments[0].base_offset, limit)
        for segment in self.segments[self.segment_for(start):]:
            if segment.next_offset <= start:
                continue
            _, position = segment.index.lookup(max(start - segment.base_offset, 0))
            for pos, header in segment.headers_from(position):
                if header.next_offset <= start or not header.has_producer_id:
                    continue
                info: ProducerAppendInfo | Duplicate | Refused
                if header.is_control:
                    try:
                        marker = read_marker(segment.read(pos, header.size), header)
                    except CorruptRecords as exc:  # bytes a clean shutdown's files are trusted with (no CRC check)
                        log.warning("%s: replaying offset %d: the control batch does not decode (%s); skipped",
                                    self.name, header.base_offset, exc)
                        continue
                    if marker is None:
                        continue
                    info = state.prepare_marker(marker.producer_id, marker.producer_epoch, marker.commit,
                                                marker.coordinator_epoch, header.base_offset, header.max_timestamp,
                                                AppendOrigin.RECOVERY)
                else:
                    info = state.prepare_batch(header, header.base_offset, AppendOrigin.RECOVERY)
                if not isinstance(info, ProducerAppendInfo):
                    log.warning("%s: replaying offset %d: %s", self.name, header.base_offset, info)
                    continue
                state.update(info)
                if info.completed_txn is not None:
                    self._complete_txn(info.completed_txn, segment)
        state.on_high_watermark(self.high_watermark)

    def _complete_txn(self, completed: CompletedTxn, segment: Segment) -> None:
        """A marker closed a transaction: index it if it was aborted, then release the LSO."""
        if completed.is_aborted:
            index = segment.txn_index
            entries = index.entries()
            if not entries or entries[-1].last_offset < completed.last_offset:  # replay may meet indexed ones
                lso = self.producer_state.last_stable_offset(completed)
                index.append(AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso))
        self.producer_state.complete_txn(completed)

    # -- offsets --------------------------------------------------------------

    @property
    def name(self) -> str:
        return partition_dir_name(self.topic, self.partition)

    @property
    def log_start_offset(self) -> int:
        """The first readable offset: where DeleteRecords put it, or the first segment's base
        offset once retention has deleted past that."""
        return max(self._log_start, self.segments[0].base_offset)

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def last_stable_offset(self) -> int:
        """First offset a read_committed consumer may not see yet: the oldest open
        transaction's first offset, bounded by the high watermark.

        Retention or DeleteRecords may cut off the start of a transaction that
        is still open: the LSO then stays at the log start offset, never below
        it (Kafka's ``UnifiedLog.maybeIncrementFirstUnstableOffset``), or a
        read_committed consumer reset to "latest" would be sent below the log
        start and loop on OFFSET_OUT_OF_RANGE.
        """
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is None:
            return self.high_watermark
        return min(max(first_unstable, self.log_start_offset), self.high_watermark)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- appending ------------------------------------------------------------

    def append_produced(self, records: bytes, now_ms: int) -> AppendResult | Invalid:
        """Validate and append a client's batch; nothing changes if it is refused.

        A retried idempotent batch that is already in the log is not written
        again: the result carries its original offsets.
        """
        header = validate_produced(records, self.config.max_message_bytes)
        if isinstance(header, Invalid):
            return header
        refused = self._refuse_writes()
        if refused is not None:
            return refused
        append_time = -1
        if self.config.log_append_time:
            records = with_log_append_time(records, header, now_ms)
            header = read_header(records)
            append_time = now_ms
        info = None
        if header.has_producer_id:
            prepared = self.producer_state.prepare_batch(header, self.log_end_offset, AppendOrigin.CLIENT)
            if isinstance(prepared, Duplicate):
                return AppendResult(prepared.first_offset, prepared.last_offset, append_time, self.log_start_offset)
            if isinstance(prepared, Refused):
                return Invalid(prepared.error, prepared.reason)
            info = prepared
        base = self._append(header, records, now_ms)
        if isinstance(base, Invalid):
            return base
        if info is not None:
            self.producer_state.update(info)
        return AppendResult(base, base + header.last_offset_delta, append_time, self.log_start_offset)

    def append_batch(self, batch: bytes, now_ms: int) -> int | Invalid:
        """Append a batch the broker built itself (coordinator records); returns its base offset.

        A transactional batch (a transactional offset commit) is checked against
        its producer's epoch, as Kafka checks appends of COORDINATOR origin.
        """
        refused = self._refuse_writes()
        if refused is not None:
            return refused
        header = read_header(batch)
        info = None
        if header.has_producer_id:
            prepared = self.producer_state.prepare_batch(header, self.log_end_offset, AppendOrigin.COORDINATOR)
            if isinstance(prepared, Refused):
                return Invalid(prepared.error, prepared.reason)
            if isinstance(prepared, ProducerAppendInfo):
                info = prepared
        base = self._append(header, batch, now_ms)
        if isinstance(base, Invalid):
            return base
        if info is not None:
            self.producer_state.update(info)
        return base

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int) -> int | Invalid:
        """Write a COMMIT/ABORT marker for the producer's transaction; returns its offset."""
        if producer_id < 0:  # a WriteTxnMarkers request can name no producer (Kafka: a transactional batch needs one)
            return Invalid(ErrorCode.invalid_record, f"a transaction marker needs a producer id, not {producer_id}")
        refused = self._refuse_writes()
        if refused is not None:
            return refused
        offset = self.log_end_offset
        prepared = self.producer_state.prepare_marker(producer_id, producer_epoch, commit, coordinator_epoch, offset, now_ms,
                                                      AppendOrigin.COORDINATOR)
        if isinstance(prepared, Refused):
            return Invalid(prepared.error, prepared.reason)
        batch = build_marker(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        base = self._append(read_header(batch), batch, now_ms)
        if isinstance(base, Invalid):
            return base
        self.producer_state.update(prepared)
        if prepared.completed_txn is not None:
            segment = self.segments[-1]
            try:
                self._complete_txn(prepared.completed_txn, segment)
            except OSError as exc:  # the aborted-index entry could not be written (full disk)
                return self._failed(segment, exc, "indexing an aborted transaction")
        return base

    def _refuse_writes(self) -> Invalid | None:
        """KAFKA_STORAGE_ERROR once a write of the active segment has failed (see ``_failed``)."""
        if not self.failed:
            return None
        return Invalid(ErrorCode.kafka_storage_error, f"an earlier write failed: {self.segments[-1].write_error}")

    def _failed(self, segment: Segment, exc: OSError, doing: str) -> Invalid:
        """A write failed after the partition's in-memory state moved ahead of its files.

        The segment is marked failed: the partition refuses writes (and no
        waiter is told its data is durable) until the broker restarts and
        recovers it from its files, as Kafka takes a failed log directory
        offline.  Reads below the high watermark go on.
        """
        if segment.write_error is None:
            segment.write_error = exc
        log.error("%s: %s failed: %s; the partition refuses writes until the broker restarts", self.name, doing, exc)
        return Invalid(ErrorCode.kafka_storage_error, f"{doing} failed: {exc}")

    def _append(self, header: BatchHeader, batch: bytes, now_ms: int) -> int | Invalid:
        """Write one batch at the log end; its base offset, or KAFKA_STORAGE_ERROR.

        What the event loop writes itself on a full disk (a new segment's
        files, index entries) fails before anything changed: the batch is
        refused and the next append tries again, so writes resume once space
        returns.  A failed write of the batch itself (on the I/O thread)
        marks the partition failed instead (``writer``).
        """
        if self.closed:
            raise RuntimeError(f"{self.name} is closed")
        base = self.log_end_offset
        prefix = stamped_prefix(base, header)
        try:
            segment = self._maybe_roll(header.size, header.last_offset_delta, header.max_timestamp, now_ms)
            segment.append(prefix, memoryview(batch)[len(prefix) :], header, base, self.config.index_interval_bytes)
        except OSError as exc:
            log.error("%s: cannot append at offset %d: %s; refusing the write", self.name, base, exc)
            return Invalid(ErrorCode.kafka_storage_error, f"cannot append: {exc}")
        return base

    def _maybe_roll(self, size: int, last_offset_delta: int, max_timestamp: int, now_ms: int) -> Segment:
        active = self.segments[-1]
        if active.size == 0:
            return active
        reason = None
        if active.size + size > self.config.segment_bytes:
            reason = "segment.bytes"
        elif self._waited_for_roll(active, max_timestamp, now_ms) > self.config.segment_ms:
            reason = "segment.ms"
        elif (len(active.index) + 1) * _INDEX_ENTRY > self.config.segment_index_bytes:
            reason = "segment.index.bytes"
        elif self.log_end_offset + last_offset_delta - active.base_offset > _MAX_RELATIVE:
            reason = "relative offset overflow"
        if reason is None:
            return active
        return self.roll(now_ms, reason)

    @staticmethod
    def _waited_for_roll(active: Segment, max_timestamp: int, now_ms: int) -> int:
        """How long ``active`` has been waiting to roll by ``segment.ms``, as Kafka's
        LogSegment.timeWaitedForRoll counts it: in record time, from the first batch's max
        timestamp to the incoming batch's (so replayed or back-dated records do not roll a
        segment per batch), or in wall-clock time since it was created when its first batch has
        no timestamp."""
        if active.rolling_timestamp is not None and active.rolling_timestamp >= 0:
            return max_timestamp - active.rolling_timestamp
        return now_ms - active.created_ms

    def roll(self, now_ms: int, reason: str = "requested") -> Segment:
        """Close the active segment for writing (fsyncing it with its indexes) and open a new one."""
        old = self.segments[-1]
        if old.size == 0:
            return old
        # Every segment but the last is complete and fsynced (recovery relies on it):
        # wait for the I/O thread to write what it holds, then fsync.  A roll comes
        # once per segment.bytes, so this rare pause is cheap.
        self.writer.barrier()
        old.flush_all()
        segment = Segment(self.dir, old.next_offset, now_ms, self.writer)  # OSError: nothing changed
        self._add_segment(segment)
        faults.crash_point("segment-roll")  # a new, empty segment; no snapshot at its base yet
        try:
            self.producer_state.take_snapshot(segment.base_offset)  # restart replays from here, not from the start
        except OSError as exc:  # a full disk: a crash would replay from an older snapshot, nothing worse
            log.warning("%s: cannot write the producer-state snapshot at %d: %s", self.name, segment.base_offset, exc)
        else:
            self._retain_snapshots()
        log.debug("%s: rolled to %s (%s)", self.name, segment.log_path.name, reason)
        return segment

    def _retain_snapshots(self) -> None:
        """Drop the producer-state snapshots recovery can no longer need (see ``retain_snapshots``);
        those from the first segment's base offset on are kept (``_load_producer_state``)."""
        keep_from = self.segments[-2].base_offset if len(self.segments) > 1 else self.segments[-1].base_offset
        self.producer_state.retain_snapshots(self.segments[0].base_offset, keep_from, self.segments[-1].base_offset)

    # -- durability and the high watermark ------------------------------------

    def flush_point(self) -> FlushPoint | None:
        """What a flush would make durable now, or None if everything already is."""
        active = self.segments[-1]
        if active.next_offset <= self.high_watermark:
            return None
        return FlushPoint(active.next_offset, active, active.size)

    def on_flushed(self, point: FlushPoint) -> None:
        """Everything before ``point.offset`` is on disk: advance the high watermark."""
        if self.closed or point.offset <= self.high_watermark:
            return
        self.high_watermark = point.offset
        self._hw_segment = point.segment
        self._hw_position = point.position
        self.producer_state.on_high_watermark(point.offset)
        if self.on_high_watermark is not None:
            self.on_high_watermark(self)

    # -- reading --------------------------------------------------------------

    def segment_for(self, offset: int) -> int:
        """Index into ``segments`` of the segment that holds ``offset``."""
        return max(bisect_right(self._bases, offset) - 1, 0)

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None, min_one: bool = True,
             committed: bool = False) -> ReadResult | ErrorCode:
        """Stored batches from the one holding ``offset``, bounded by ``max_offset``
        (default: the high watermark, or the last stable offset when ``committed``).

        ``committed`` (read_committed) also lists the aborted transactions that
        overlap the returned batches.
        """
        if max_offset is not None:
            upper = max_offset
        else:
            upper = self.last_stable_offset if committed else self.high_watermark
        if offset < self.log_start_offset or offset > self.log_end_offset:
            return ErrorCode.offset_out_of_range
        if offset >= upper:
            return ReadResult(b"", self.high_watermark, self.log_start_offset)
        i = self.segment_for(offset)
        while i < len(self.segments):
            segment = self.segments[i]
            found = segment.find_batch(offset)
            if found is not None:
                break
            i += 1  # offset lies past this segment's last batch: the next segment starts it
        else:
            return ReadResult(b"", self.high_watermark, self.log_start_offset)
        position, header = found
        if header.base_offset >= upper:
            return ReadResult(b"", self.high_watermark, self.log_start_offset)
        end = self._position_bound(segment, upper)
        length = min(max_bytes, end - position)
        if length < header.size and min_one:
            length = header.size
        if length <= 0:
            return ReadResult(b"", self.high_watermark, self.log_start_offset)
        data = segment.read(position, length)
        if header.record_count == 0 and not _holds_records(data) and position + len(data) == end == segment.size:
            data += self._read_past_empty_batches(i + 1, upper, max(max_bytes - len(data), 0), min_one)
        if not committed:
            return ReadResult(data, self.high_watermark, self.log_start_offset)
        return ReadResult(data, self.high_watermark, self.log_start_offset, self.aborted_transactions(offset, _end_offset(data)))

    def _read_past_empty_batches(self, i: int, upper: int, budget: int, min_one: bool) -> bytes:
        """What a read continues with after a segment that held only empty batches.

        Compaction keeps a producer's last batch (and a group's last) even when
        all its records are gone, so a segment may hold batches but no record.
        librdkafka takes a fetch answer without any record for a sign that its
        max bytes is too small (it doubles it, then fails with
        MSG_SIZE_TOO_LARGE), so such a read goes on into the following
        segments, within ``max_bytes`` (but with ``min_one`` the empty batches
        do not count: the first batch of each segment is read whole), until it
        holds a record.  Nothing else ever reads across a segment.
        """
        chunks: list[bytes] = []
        while i < len(self.segments):
            segment = self.segments[i]
            i += 1
            if segment.size == 0:
                continue
            if segment.base_offset >= upper:
                break
            first = segment.find_batch(segment.base_offset)
            if first is None or first[1].base_offset >= upper:
                break
            end = self._position_bound(segment, upper)
            length = min(budget, end)
            if length < first[1].size and min_one:
                length = first[1].size
            if length <= 0:
                break
            chunk = segment.read(0, length)
            chunks.append(chunk)
            budget -= len(chunk)
            if _holds_records(chunk) or len(chunk) < segment.size:
                break
        return b"".join(chunks)

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset), from the
        transaction indexes of the segment holding ``fetch_offset`` and those after it.

        An entry lives where its ABORT marker is, and a transaction that starts
        below ``upper_bound_offset`` may be aborted any number of segments
        later, so there is no cut-off by segment base offset: the walk goes on
        until an index reports the search complete (an entry whose LSO is at or
        past the upper bound), or the log ends (Kafka's
        ``LocalLog.collectAbortedTransactions``).
        """
        found: list[AbortedTxn] = []
        for segment in self.segments[self.segment_for(fetch_offset):]:
            entries, complete = segment.txn_index.collect(fetch_offset, upper_bound_offset)
            found.extend(entries)
            if complete:
                break
        return found

    def _position_bound(self, segment: Segment, upper: int) -> int:
        """File position in ``segment`` below which every batch ends before ``upper``."""
        if upper >= segment.next_offset:
            return segment.size
        if upper == self.high_watermark and segment is self._hw_segment:
            return self._hw_position
        return segment.position_of(upper)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp``, below the high watermark.

        The time index finds the batch; the records of that one batch are read
        to find the exact record, as Kafka does.  Records below the log start
        offset (DeleteRecords inside a segment) are skipped, as Kafka's
        ``LogSegment.findOffsetByTimestamp`` skips them.
        """
        start = self.log_start_offset
        for segment in self.segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= start:
                continue
            if segment.base_offset >= self.high_watermark:
                return None
            bound = self._position_bound(segment, self.high_watermark)
            found = segment.find_timestamp(timestamp, bound)
            if found is None:
                continue
            # Usually the batch found holds the record; a batch emptied by compaction
            # keeps its max timestamp but has none, so go on to the next ones.
            for position, header in segment.headers_from(found[0], bound):
                if header.max_timestamp < timestamp or header.record_count == 0 or header.last_offset < start:
                    continue
                try:
                    for record in iter_records(segment.read(position, header.size), header):
                        if record.timestamp >= timestamp and record.offset >= start:
                            return record.offset, record.timestamp
                except CorruptRecords as exc:
                    offset, max_timestamp = self._undecodable(header, exc)
                    return max(offset, start), max_timestamp
        return None

    def _undecodable(self, header: BatchHeader, exc: CorruptRecords) -> tuple[int, int]:
        """The answer for a batch whose records do not decode: its first offset and max timestamp.

        Produce checks a batch's header and CRC, never its records (``validate_produced``), so a
        client can store records that do not decode; a lookup by timestamp then points at the
        batch's start, which misses none of its records, and does not fail.
        """
        log.warning("%s: the records of the batch at offset %d do not decode (%s); answering with its first offset",
                    self.name, header.base_offset, exc)
        return header.base_offset, header.max_timestamp

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp below the high watermark (KIP-734)."""
        best: tuple[int, BatchHeader, Segment, int] | None = None
        for segment in self.segments:
            if segment.max_timestamp < 0 or (best is not None and segment.max_timestamp <= best[1].max_timestamp):
                continue
            if segment.base_offset >= self.high_watermark:
                break
            for position, header in segment.headers_from(0, self._position_bound(segment, self.high_watermark)):
                if best is None or header.max_timestamp > best[1].max_timestamp:
                    best = (header.base_offset, header, segment, position)
        if best is None:
            return None
        _, header, segment, position = best
        try:
            for record in iter_records(segment.read(position, header.size), header):
                if record.timestamp == header.max_timestamp:
                    return record.offset, record.timestamp
        except CorruptRecords as exc:
            return self._undecodable(header, exc)
        return header.base_offset, header.max_timestamp

    # -- retention ------------------------------------------------------------

    def enforce_retention(self, now_ms: int) -> int:
        """Delete the segments wholly below the log start offset (whatever the cleanup policy, as
        Kafka does), then expired segments (cleanup.policy=delete); returns how many were deleted."""
        if self.failed:  # a failed partition waits for recovery as it is
            return 0
        below_start = self._delete_segments_below_log_start()
        if not self.config.delete_enabled:
            return below_start
        retention_ms = self.config.retention_ms
        retention_bytes = self.config.retention_bytes
        deleted = 0
        total = self.size_bytes
        while True:
            oldest = self.segments[0]
            if oldest.size == 0 or oldest.next_offset > self.high_watermark:
                break
            expired_by_time = retention_ms >= 0 and oldest.max_timestamp >= 0 and now_ms - oldest.max_timestamp > retention_ms
            expired_by_size = retention_bytes >= 0 and total - oldest.size >= retention_bytes
            if not (expired_by_time or expired_by_size):
                break
            if len(self.segments) == 1:
                if not expired_by_time:
                    break
                self.roll(now_ms, "retention")  # the active segment is expired: roll, then delete it
            reason = "retention.ms" if expired_by_time else "retention.bytes"
            log.info("%s: deleting segment %s (%s)", self.name, oldest.log_path.name, reason)
            total -= oldest.size
            self.segments.pop(0)
            self._bases.pop(0)
            oldest.delete()
            deleted += 1
        if deleted:
            self._retain_snapshots()
        return below_start + deleted

    # -- DeleteRecords ----------------------------------------------------------

    def delete_records(self, offset: int) -> tuple[ErrorCode, int]:
        """DeleteRecords (KIP-107) on this partition: (error, low watermark).

        Kafka's ``Partition.deleteRecordsOnLeader`` and
        ``UnifiedLog.maybeIncrementLogStartOffset``: POLICY_VIOLATION unless
        ``cleanup.policy`` includes ``delete``; ``offset`` -1 is the high
        watermark; below 0 or above the high watermark is OFFSET_OUT_OF_RANGE.
        The log start offset then moves up to ``offset`` (never down: an offset
        at or below it changes nothing), durably before anything else changes
        (KAFKA_STORAGE_ERROR and nothing changed if that write fails), and the
        segments wholly below it are deleted.  The low watermark answered is
        the log start offset, with a single replica.
        """
        if self.closed or self.failed:
            return ErrorCode.kafka_storage_error, -1
        if not self.config.delete_enabled:
            return ErrorCode.policy_violation, -1
        target = self.high_watermark if offset == HIGH_WATERMARK else offset
        if target < 0 or target > self.high_watermark:
            return ErrorCode.offset_out_of_range, -1
        if target > self.log_start_offset:
            try:
                write_partition_checkpoint(self.dir / LOG_START_CHECKPOINT, self.topic, self.partition, target)
            except OSError as exc:
                log.error("%s: cannot write the log start offset %d: %s; nothing deleted", self.name, target, exc)
                return ErrorCode.kafka_storage_error, -1
            self._log_start = target
            log.info("%s: log start offset moved to %d (DeleteRecords)", self.name, target)
            faults.crash_point("delete-records")  # durable; the segments below it are still there
            self._delete_segments_below_log_start()
        return ErrorCode.none, self.log_start_offset

    def _delete_segments_below_log_start(self) -> int:
        """Delete every segment whose successor starts at or below the log start offset (Kafka's
        ``deleteLogStartOffsetBreachedSegments``; never the active segment); returns how many."""
        deleted = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= self._log_start:
            oldest = self.segments.pop(0)
            self._bases.pop(0)
            log.info("%s: deleting segment %s (below the log start offset %d)", self.name, oldest.log_path.name,
                     self._log_start)
            try:
                oldest.delete()
            except OSError as exc:  # out of the log all the same; after a restart, retention deletes what is left
                log.warning("%s: cannot delete %s: %s", self.name, oldest.log_path.name, exc)
            deleted += 1
        if deleted:
            self._retain_snapshots()
        return deleted

    # -- compaction -----------------------------------------------------------

    def replace_segments(self, old: list[Segment], base_offset: int, now_ms: int) -> Segment | None:
        """Swap the cleaned segment ``<base_offset>.*.cleaned`` in for ``old``.

        ``old`` must still be a run of rolled segments of this log (retention or
        a topic deletion may have removed some since the cleaner planned): if
        not, nothing changes and None is returned (the caller deletes the
        ``.cleaned`` files).  The cleaner has fsynced the new files.  Order,
        each step crash-safe (``segment.complete_interrupted_swaps``):
        ``.cleaned`` -> ``.swap`` (the log last: the commit point), fsync the
        directory; delete the old segments; ``.swap`` -> final names.
        """
        if self.closed or not old:
            return None
        try:
            first = self.segments.index(old[0])
        except ValueError:
            return None
        if self.segments[first : first + len(old)] != old or first + len(old) >= len(self.segments):
            return None  # gone, or would include the active segment
        if old[0].base_offset != base_offset or not all(p.exists() for p in segment_files(self.dir, base_offset, CLEANED_SUFFIX)):
            return None
        rename_segment_files(self.dir, base_offset, CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_dir(self.dir)
        faults.crash_point("compaction-swap")  # committed: recovery finishes the swap
        self.writer.barrier()  # no write or fsync may still target a file about to be closed
        for segment in old:
            segment.delete()
        faults.crash_point("compaction-delete")  # old segments gone, the new one still named .swap
        rename_segment_files(self.dir, base_offset, SWAP_SUFFIX, "")
        fsync_dir(self.dir)
        new = Segment(self.dir, base_offset, now_ms, self.writer)
        try:
            new.load()
        except SegmentCorrupt as exc:
            # Not expected (the cleaner just wrote and fsynced these files).  The
            # aborted-transaction entries cannot be rebuilt from this segment alone:
            # carry them over the rebuild of the other indexes.
            log.warning("%s: cleaned segment %s: %s; rebuilding its indexes", self.name, new.log_path.name, exc)
            kept = TransactionIndex(new.txn_index.path, base_offset)
            try:
                kept.load()
                entries = kept.entries()
            except IndexCorrupt:
                entries = []
            new.recover(self.config.index_interval_bytes)
            for entry in entries:
                new.txn_index.append(entry)
        self.segments[first : first + len(old)] = [new]
        self._bases[first : first + len(old)] = [base_offset]
        if self._hw_segment in old:  # the high watermark is past every cleaned offset
            self._hw_segment = new
            self._hw_position = new.size
        return new

    # -- lifetime -------------------------------------------------------------

    @property
    def failed(self) -> bool:
        """A write failed: the files may lag the in-memory state until recovery (``_failed``)."""
        return self.segments[-1].write_error is not None

    def flush_all(self) -> bool:
        """Make everything durable and snapshot producer state, for a clean shutdown.

        Returns False if that could not be done (a failed write, a failing or
        full disk): the next start must then recover this partition from its
        files, so the caller leaves no clean-shutdown marker.
        """
        self.writer.barrier()
        if self.failed:
            return False
        try:
            for segment in self.segments:
                segment.flush_all()
        except OSError as exc:
            log.error("%s: cannot flush: %s", self.name, exc)
            return False
        try:
            self.producer_state.take_snapshot(self.log_end_offset)
        except OSError as exc:  # restart replays from an older snapshot
            log.warning("%s: cannot write the producer-state snapshot at shutdown: %s", self.name, exc)
        else:
            self._retain_snapshots()
        return True

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.writer.barrier()  # no write may still target a file about to be closed
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return f"PartitionLog({self.name}, start={self.log_start_offset}, end={self.log_end_offset}, hw={self.high_watermark})"
