"""Per-partition producer state: idempotence, fencing and open transactions (KIP-98).

Theory of operation
-------------------
Every idempotent or transactional producer that wrote to a partition has a
``ProducerStateEntry`` here: its epoch, the sequence numbers and offsets of
its last five batches, the coordinator epoch of the last transaction marker
it received, and the first offset of its open transaction, if any.  This is
Kafka's ``ProducerStateManager`` + ``ProducerAppendInfo``; the rules below
are Kafka's, in the order Kafka applies them
(``UnifiedLog.analyzeAndValidateProducerState``).

*Validate first, apply after.*  ``prepare_batch`` / ``prepare_marker`` look
at the current state and return either a refusal, a duplicate, or a
``ProducerAppendInfo`` holding the producer's entry as it will be once the
batch is written.  They never change the manager.  The partition log writes
the batch and only then calls ``update(info)``; for a marker that closed a
transaction it then computes ``last_stable_offset(completed)``, writes the
aborted-index entry (aborts only) and calls ``complete_txn(completed)``.
A batch refused or lost to a write error therefore leaves no trace.

Checks on a data batch (origin CLIENT unless stated):

1. Duplicate: the batch has the entry's epoch and exactly the first/last
   sequence of one of the retained batches (at most
   ``NUM_BATCHES_TO_RETAIN`` = 5, the client's
   ``max.in.flight.requests.per.connection`` limit): it is a retry of a
   batch already in the log, and is answered with that batch's offsets.
2. Epoch (CLIENT and COORDINATOR): lower than the entry's epoch is
   INVALID_PRODUCER_EPOCH (since Kafka 2.7 this replaces PRODUCER_FENCED on
   produce, so that the client aborts and retries).
3. Sequence: a new epoch must start at sequence 0 unless the producer has
   no epoch yet; within an epoch the batch must start right after the last
   sequence, wrapping from 2**31-1 to 0.  A producer with no entry (epoch
   -1: never seen, expired, or its data deleted) may start anywhere: KIP-360
   made the broker accept it instead of answering UNKNOWN_PRODUCER_ID.
   Anything else is OUT_OF_ORDER_SEQUENCE_NUMBER.
4. Transactions (CLIENT and COORDINATOR): a non-transactional batch while
   the producer has an open transaction is INVALID_TXN_STATE; the first
   transactional batch opens a transaction at its first offset.

RECOVERY (replaying the log at start-up, Kafka's REPLICATION origin)
applies batches without any check: the log already accepted them.

A marker (``prepare_marker``) is checked for epoch and coordinator epoch
(a lower coordinator epoch is a zombie coordinator:
TRANSACTION_COORDINATOR_FENCED), closes the producer's open transaction and
yields a ``CompletedTxn`` if there was one; a marker for a transaction that
wrote nothing to this partition changes nothing but the epochs.

*Last stable offset.*  A transaction is *ongoing* from its first batch
until its marker is written (``complete_txn``), then *unreplicated* until
the high watermark passes the marker (``on_high_watermark``): until then a
crash could still take the marker away.  ``first_unstable_offset`` is the
smallest first offset of the two sets; the log's LSO is that, or the high
watermark when there is none.

*Expiry.*  A producer with no open transaction whose last write is at least
``producer.id.expiration.ms`` old is forgotten (``remove_expired``); its
next batch is accepted at any sequence (rule 3).

*Snapshots.*  Replaying a whole log at start-up would be slow, so the state
is written to ``<offset:020d>.snapshot`` at segment rolls and at clean
shutdown; ``load`` reads the newest good snapshot and the caller replays the
log from its offset with origin RECOVERY.  As in Kafka, only the newest
batch of each producer is kept in a snapshot, so after a restart only a
retry of a producer's last batch is recognised as a duplicate.

No method reads the clock or does per-record work: callers pass ``now_ms``
and batch headers.
"""

from __future__ import annotations

import enum
import logging
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from ..fileio import atomic_write
from ..protocol.errors import ErrorCode
from ..records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, NO_TIMESTAMP, BatchHeader

log = logging.getLogger(__name__)

#: Retained batches per producer: the client's max.in.flight.requests.per.connection bound for idempotence.
NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1

SNAPSHOT_SUFFIX = ".snapshot"
_TMP_SUFFIX = ".tmp"

# Snapshot file layout (big-endian), version 1:
#
#     offset  size  field
#     0       2     version                   int16, 1
#     2       4     crc                       uint32, CRC32C of every byte from offset 6 to the end
#     6       4     entry count               int32
#     10      46*n  entries, one per producer, sorted by producer id:
#
#         0   8   producer_id                 int64
#         8   2   producer_epoch              int16
#         10  4   last_seq                    int32  (-1: no batch)
#         14  8   last_offset                 int64  (-1: no batch; entry made by a marker only)
#         22  4   offset_delta                int32  (last_offset - first offset of that batch)
#         26  8   timestamp                   int64  (the producer's last timestamp)
#         34  4   coordinator_epoch           int32
#         38  8   current_txn_first_offset    int64  (-1: no open transaction)
#
# The file size must be exactly 10 + 46 * count.  The file is written to
# "<name>.tmp", fsynced, then renamed over "<name>", so a snapshot is either
# whole or absent; a damaged one is deleted at load and the next older used.
_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">hIi")
_SNAPSHOT_CRC_START = 6
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")


#: KIP-664: how far past transaction.max.timeout.ms a transaction must be to count as late
#: (Kafka's ProducerStateManager.LATE_TRANSACTION_BUFFER_MS).
LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000


class AppendOrigin(enum.Enum):
    #: A producer's batch: epoch, sequence and duplicate checks.
    CLIENT = "client"
    #: The broker's own appends (group coordinator's transactional offset commits, markers): epoch checks only.
    COORDINATOR = "coordinator"
    #: Replaying the log at start-up: no validation at all (Kafka's REPLICATION, which only logs).
    RECOVERY = "recovery"


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement`` in the 31-bit sequence space (wraps below 0 to 2**31-1)."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    #: The producer's most recent batches, oldest first; at most NUM_BATCHES_TO_RETAIN, all of ``producer_epoch``.
    batches: tuple[BatchMetadata, ...] = ()
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def _batches_after(self, epoch: int, batch: BatchMetadata | None) -> tuple[BatchMetadata, ...]:
        """The retained batches once ``batch`` (if any) is added at ``epoch``: a new epoch forgets the old ones."""
        kept = self.batches if epoch == self.producer_epoch else ()
        if batch is None:
            return kept
        return (*kept, batch)[-NUM_BATCHES_TO_RETAIN:]


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a batch still in the log: answer with its original offsets, write nothing."""

    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class Refused:
    error: ErrorCode
    reason: str


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    #: Offset of the marker that closed the transaction.
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class ProducerAppendInfo:
    """The outcome of an accepted ``prepare_*``, applied by ``ProducerStateManager.update``."""

    producer_id: int
    #: The producer's entry as it will be after this append.
    entry: ProducerStateEntry
    #: A transaction begins at this offset (this is the producer's first transactional batch since its last marker).
    started_txn_first_offset: int | None
    #: The marker closed a transaction that wrote to this partition.
    completed_txn: CompletedTxn | None


class SnapshotCorrupt(Exception):
    pass


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerStateManager:
    def __init__(self, directory: Path, producer_id_expiration_ms: int) -> None:
        self.directory = directory
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        #: Open transactions: first offset -> producer id.
        self._ongoing: dict[int, int] = {}
        #: Transactions whose marker is written but not yet below the high watermark: first offset -> (producer id, marker offset).
        self._unreplicated: dict[int, tuple[int, int]] = {}
        self._snapshots: list[int] = self._list_snapshots()

    # -- validation (never mutates) -------------------------------------------

    def prepare_batch(
        self, header: BatchHeader, first_offset: int, origin: AppendOrigin
    ) -> ProducerAppendInfo | Duplicate | Refused:
        """Check a data batch of an idempotent/transactional producer that would be written at ``first_offset``."""
        producer_id = header.producer_id
        if producer_id < 0:
            raise ValueError(f"batch at {first_offset} has no producer id")
        if header.is_control:
            raise ValueError(f"control batch at {first_offset} passed to prepare_batch; use prepare_marker")
        epoch = header.producer_epoch
        first_seq = header.base_sequence
        last_seq = header.last_sequence
        last_offset = first_offset + header.last_offset_delta
        current = self._producers.get(producer_id)
        if current is None:
            current = ProducerStateEntry(producer_id)

        if origin is AppendOrigin.CLIENT:
            duplicate = current.find_duplicate(epoch, first_seq, last_seq)
            if duplicate is not None:
                return Duplicate(duplicate.first_offset, duplicate.last_offset, duplicate.timestamp)

        if origin is not AppendOrigin.RECOVERY and epoch < current.producer_epoch:
            return Refused(
                ErrorCode.invalid_producer_epoch,
                f"producer {producer_id} epoch {epoch} at offset {first_offset} is older than the last seen epoch {current.producer_epoch}",
            )
        if origin is AppendOrigin.CLIENT:
            refused = _check_sequence(current, epoch, first_seq, first_offset)
            if refused is not None:
                return refused

        txn_first_offset = current.current_txn_first_offset
        started: int | None = None
        if txn_first_offset is not None and not header.is_transactional:
            if origin is not AppendOrigin.RECOVERY:
                return Refused(
                    ErrorCode.invalid_txn_state,
                    f"non-transactional batch from producer {producer_id} at offset {first_offset} "
                    f"while its transaction from offset {txn_first_offset} is open",
                )
        elif txn_first_offset is None and header.is_transactional:
            started = txn_first_offset = first_offset

        batch = BatchMetadata(last_seq, last_offset, header.last_offset_delta, header.max_timestamp)
        entry = ProducerStateEntry(
            producer_id=producer_id,
            producer_epoch=epoch,
            batches=current._batches_after(epoch, batch),
            coordinator_epoch=current.coordinator_epoch,
            last_timestamp=header.max_timestamp,
            current_txn_first_offset=txn_first_offset,
        )
        return ProducerAppendInfo(producer_id, entry, started, None)

    def prepare_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        is_commit: bool,
        coordinator_epoch: int,
        offset: int,
        timestamp: int,
        origin: AppendOrigin,
    ) -> ProducerAppendInfo | Refused:
        """Check a COMMIT/ABORT marker that would be written at ``offset``."""
        if producer_id < 0:
            raise ValueError(f"marker at {offset} has no producer id")
        current = self._producers.get(producer_id)
        if current is None:
            current = ProducerStateEntry(producer_id)
        if origin is not AppendOrigin.RECOVERY:
            if producer_epoch < current.producer_epoch:
                return Refused(
                    ErrorCode.invalid_producer_epoch,
                    f"marker for producer {producer_id} at offset {offset} has epoch {producer_epoch}, "
                    f"older than the last seen epoch {current.producer_epoch}",
                )
            if coordinator_epoch < current.coordinator_epoch:
                return Refused(
                    ErrorCode.transaction_coordinator_fenced,
                    f"marker for producer {producer_id} at offset {offset} has coordinator epoch {coordinator_epoch} "
                    f"(zombie), the current one is {current.coordinator_epoch}",
                )
        completed = None
        if current.current_txn_first_offset is not None:
            # Only a transaction that wrote here has a CompletedTxn: an empty one
            # affects neither the LSO nor the aborted-transaction index.
            completed = CompletedTxn(producer_id, current.current_txn_first_offset, offset, not is_commit)
        entry = ProducerStateEntry(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            batches=current._batches_after(producer_epoch, None),
            coordinator_epoch=coordinator_epoch,
            last_timestamp=timestamp,
            current_txn_first_offset=None,
        )
        return ProducerAppendInfo(producer_id, entry, None, completed)

    # -- applying --------------------------------------------------------------

    def update(self, info: ProducerAppendInfo) -> None:
        """Apply a prepared append after the batch was written.

        ``info`` must come from the latest ``prepare_*`` for this producer: it
        replaces the producer's entry.  A completed transaction is not closed
        here; the log calls ``complete_txn`` once its aborted-index entry is
        written.
        """
        if info.producer_id < 0 or info.entry.producer_id != info.producer_id:
            raise ValueError(f"invalid producer id in {info}")
        started = info.started_txn_first_offset
        if started is not None:
            if started in self._ongoing or started in self._unreplicated:
                raise RuntimeError(f"a transaction already starts at offset {started}")
            if info.entry.current_txn_first_offset != started:
                raise RuntimeError(f"{info} starts a transaction its entry does not hold")
            self._ongoing[started] = info.producer_id
        self._producers[info.producer_id] = info.entry

    def complete_txn(self, completed: CompletedTxn) -> None:
        """Move a transaction from ongoing to unreplicated (it holds the LSO until the high watermark passes it)."""
        producer_id = self._ongoing.get(completed.first_offset)
        if producer_id != completed.producer_id:
            raise ValueError(f"{completed} was not started")
        del self._ongoing[completed.first_offset]
        self._unreplicated[completed.first_offset] = (completed.producer_id, completed.last_offset)

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is decided: the start of the earliest other open transaction, else past its marker."""
        others = [first for first, pid in self._ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def first_unstable_offset(self) -> int | None:
        candidates = [*self._ongoing, *self._unreplicated]
        return min(candidates) if candidates else None

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is now below the high watermark."""
        done = [first for first, (_, last) in self._unreplicated.items() if last < high_watermark]
        for first in done:
            del self._unreplicated[first]

    # -- queries ----------------------------------------------------------------

    def producer(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def producers(self) -> dict[int, ProducerStateEntry]:
        return dict(self._producers)

    @property
    def producer_id_count(self) -> int:
        """Producer ids with state here (Kafka's ProducerIdCount, KIP-854)."""
        return len(self._producers)

    def oldest_transaction_timestamp(self) -> int | None:
        """The last batch timestamp of the producer whose open transaction is the oldest here
        (Kafka's ``oldestTxnLastTimestamp``); None with no open transaction."""
        if not self._ongoing:
            return None
        entry = self._producers.get(self._ongoing[min(self._ongoing)])
        return None if entry is None else entry.last_timestamp

    def has_late_transaction(self, now_ms: int, max_transaction_timeout_ms: int) -> bool:
        """KIP-664's rule (Kafka's ``hasLateTransaction``): the oldest open transaction's producer
        has been silent longer than ``transaction.max.timeout.ms`` plus five minutes, so no
        coordinator is going to end it: a hanging-transaction candidate."""
        last = self.oldest_transaction_timestamp()
        return last is not None and last > 0 and now_ms - last > max_transaction_timeout_ms + LATE_TRANSACTION_BUFFER_MS

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """(producer id, first offset) of every open transaction, oldest first."""
        return [(pid, first) for first, pid in sorted(self._ongoing.items())]

    def remove_expired(self, now_ms: int) -> list[int]:
        """Forget producers idle for ``producer.id.expiration.ms`` (never one with an open transaction)."""
        expired = sorted(
            pid
            for pid, entry in self._producers.items()
            if entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )
        for pid in expired:
            del self._producers[pid]
        return expired

    # -- snapshots --------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshots)

    def take_snapshot(self, offset: int) -> Path:
        """Write the state as of ``offset`` (the log end).  Older snapshots stay until
        ``retain_snapshots`` says they are no longer needed."""
        if self._snapshots and offset < self._snapshots[-1]:
            raise ValueError(f"snapshot at {offset} is older than the newest one at {self._snapshots[-1]}")
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / snapshot_name(offset)
        atomic_write(path, _encode_snapshot(self._producers.values()), _TMP_SUFFIX)
        if not self._snapshots or self._snapshots[-1] != offset:
            self._snapshots.append(offset)
        return path

    def retain_snapshots(self, log_start: int, keep_from: int, active_base: int) -> None:
        """Delete the snapshots that no restart can need any more.

        After a crash the log replays from the newest snapshot at or below
        the first segment it rebuilt (the active one, or an older one whose
        indexes were damaged); after a clean shutdown, from the newest.  So
        this keeps (Kafka's ``deleteSnapshotsBefore`` with
        ``minSnapshotsOffsetToRetain``, the base of the segment before the
        active one, as ``keep_from``):

        * the newest snapshot at or below ``keep_from``;
        * every snapshot above it up to ``active_base`` (one per roll);
        * above ``active_base``, only the newest (a clean shutdown's);
        * nothing below ``log_start`` (Kafka's ``onLogStartOffsetIncremented``).

        Evicting by count instead lost the snapshot at the active segment's
        base after two clean restarts, and the next crash replayed the whole
        log (issue 7).
        """
        at_or_below = [s for s in self._snapshots if log_start <= s <= keep_from]
        above_active = [s for s in self._snapshots if s > active_base]
        keep = {s for s in self._snapshots if keep_from < s <= active_base}
        keep.update(at_or_below[-1:])
        keep.update(above_active[-1:])
        for offset in [s for s in self._snapshots if s not in keep]:
            self._delete_snapshot(offset)

    def load(self, log_start_offset: int, log_end_offset: int) -> int:
        """Rebuild the state from the newest usable snapshot; returns the offset to replay the log from.

        Snapshots beyond the log end (the log lost its tail) or before the log
        start (the log they describe is gone, and a transaction they show as
        open may have been closed in the deleted part) are deleted.  A damaged
        snapshot is deleted and the next older one tried.
        """
        self._clear_memory()
        if self.directory.is_dir():
            for stale in self.directory.glob(f"*{SNAPSHOT_SUFFIX}{_TMP_SUFFIX}"):
                stale.unlink(missing_ok=True)
        self._snapshots = self._list_snapshots()
        for offset in list(self._snapshots):
            if offset > log_end_offset or offset < log_start_offset:
                self._delete_snapshot(offset)
        while self._snapshots:
            offset = self._snapshots[-1]
            path = self.directory / snapshot_name(offset)
            try:
                entries = _decode_snapshot(path.read_bytes())
            except SnapshotCorrupt as exc:
                log.warning("deleting corrupt producer state snapshot %s: %s", path, exc)
                self._delete_snapshot(offset)
                continue
            for entry in entries:
                self._load_entry(entry, log_start_offset)
            return offset
        return log_start_offset

    def truncate(self) -> None:
        """Forget every producer and delete every snapshot (the log was deleted or reset)."""
        self._clear_memory()
        for offset in list(self._snapshots):
            self._delete_snapshot(offset)
        if self.directory.is_dir():
            for path in self.directory.glob(f"*{SNAPSHOT_SUFFIX}*"):
                path.unlink(missing_ok=True)
        self._snapshots = []

    # -- internals --------------------------------------------------------------

    def _clear_memory(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()

    def _load_entry(self, entry: ProducerStateEntry, log_start_offset: int) -> None:
        txn = entry.current_txn_first_offset
        # The producer's data is gone from the log: forget it (its next batch is then
        # accepted at any sequence, KIP-360).  An entry with an open transaction is
        # kept, or that transaction would never be closed here; an entry made by a
        # marker alone (no batch) is kept for its epoch and coordinator epoch.
        if txn is None and entry.batches and entry.last_data_offset < log_start_offset:
            return
        self._producers[entry.producer_id] = entry
        if txn is not None:
            self._ongoing[txn] = entry.producer_id

    def _list_snapshots(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        offsets = []
        for path in self.directory.iterdir():
            name = path.name
            if name.endswith(SNAPSHOT_SUFFIX) and name[: -len(SNAPSHOT_SUFFIX)].isdigit():
                offsets.append(int(name[: -len(SNAPSHOT_SUFFIX)]))
        return sorted(offsets)

    def _delete_snapshot(self, offset: int) -> None:
        (self.directory / snapshot_name(offset)).unlink(missing_ok=True)
        if offset in self._snapshots:
            self._snapshots.remove(offset)


def _check_sequence(current: ProducerStateEntry, epoch: int, first_seq: int, offset: int) -> Refused | None:
    """Kafka's ProducerAppendInfo.checkSequence for the first batch of an append."""
    pid = current.producer_id
    if epoch != current.producer_epoch:
        if first_seq != 0 and current.producer_epoch != NO_PRODUCER_EPOCH:
            return Refused(
                ErrorCode.out_of_order_sequence_number,
                f"producer {pid} at offset {offset}: new epoch {epoch} must start at sequence 0, "
                f"not {first_seq} (current epoch {current.producer_epoch})",
            )
        return None
    # No epoch yet (the producer's state was expired or its data deleted): any sequence is accepted.
    if current.producer_epoch == NO_PRODUCER_EPOCH:
        return None
    last_seq = current.last_seq
    if not _in_sequence(last_seq, first_seq):
        return Refused(
            ErrorCode.out_of_order_sequence_number,
            f"producer {pid} at offset {offset}: sequence {first_seq} does not follow {last_seq}",
        )
    return None


def _encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    body = bytearray()
    items = sorted(entries, key=lambda e: e.producer_id)
    body += struct.pack(">i", len(items))
    for e in items:
        body += _SNAPSHOT_ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_seq,
            e.last_data_offset,
            e.last_offset_delta,
            e.last_timestamp,
            e.coordinator_epoch,
            -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
        )
    return struct.pack(">hI", _SNAPSHOT_VERSION, crc32c(body)) + bytes(body)


def _decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    if len(data) < _SNAPSHOT_HEADER.size:
        raise SnapshotCorrupt(f"{len(data)} bytes is too short")
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data)
    if version != _SNAPSHOT_VERSION:
        raise SnapshotCorrupt(f"unknown version {version}")
    computed = crc32c(memoryview(data)[_SNAPSHOT_CRC_START:])
    if crc != computed:
        raise SnapshotCorrupt(f"CRC mismatch (stored {crc}, computed {computed})")
    if count < 0 or len(data) != _SNAPSHOT_HEADER.size + count * _SNAPSHOT_ENTRY.size:
        raise SnapshotCorrupt(f"{len(data)} bytes cannot hold {count} entries")
    entries = []
    seen: set[int] = set()
    open_txns: set[int] = set()
    for pid, epoch, last_seq, last_offset, delta, timestamp, coord_epoch, txn_first in _SNAPSHOT_ENTRY.iter_unpack(
        memoryview(data)[_SNAPSHOT_HEADER.size :]
    ):
        if pid < 0 or pid in seen:
            raise SnapshotCorrupt(f"invalid or repeated producer id {pid}")
        seen.add(pid)
        if txn_first >= 0:
            if txn_first in open_txns:
                raise SnapshotCorrupt(f"two open transactions start at offset {txn_first}")
            open_txns.add(txn_first)
        batches = (BatchMetadata(last_seq, last_offset, delta, timestamp),) if last_offset >= 0 else ()
        entries.append(
            ProducerStateEntry(
                producer_id=pid,
                producer_epoch=epoch,
                batches=batches,
                coordinator_epoch=coord_epoch,
                last_timestamp=timestamp,
                current_txn_first_offset=txn_first if txn_first >= 0 else None,
            )
        )
    return entries


__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "AppendOrigin",
    "BatchMetadata",
    "CompletedTxn",
    "Duplicate",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "Refused",
    "SnapshotCorrupt",
]
