"""The aborted-transaction index of one segment (Kafka's TransactionIndex, KIP-98).

Theory of operation
-------------------
A read_committed consumer receives aborted records like any others and drops
them itself, using the list of aborted transactions the fetch response
carries for the range it returns.  That list comes from this index: each
segment has a ``<base:020d>.txnindex`` file with one ``AbortedTxn`` per ABORT
marker written *in that segment* (a transaction may start in an earlier
segment).  Entries are appended in marker order, so their ``last_offset``
(the marker's offset) strictly increases.

Each entry also records the last stable offset at the time of the abort
(``ProducerStateManager.last_stable_offset``): no transaction still open
then started before it.  A fetch that ends at ``upper_bound`` collects
overlapping entries segment by segment, from the segment holding the fetch
offset onwards, and may stop at the first entry whose LSO is at or past
``upper_bound`` (``collect``'s ``complete`` flag): every transaction that
overlaps the fetch and was aborted later started at or after that LSO, so
beyond the fetch range.

The file is created on the first append; most segments never have one.
Entries are also kept in memory (an abort is rare, and a fetch reads the
list without touching the disk).  The file is not fsynced on every append:
after a crash, the active segment's index is rebuilt from the log, as the
offset index is; a rolled segment's index is fsynced with it.

File layout: fixed 34-byte entries, Kafka's ``AbortedTxn`` (big-endian)::

    offset  size  field
    0       2     version            int16, 0
    2       8     producer_id        int64
    10      8     first_offset       int64   first offset of the transaction
    18      8     last_offset        int64   offset of its ABORT marker
    26      8     last_stable_offset int64   LSO when the marker was written
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

from .index import IndexCorrupt

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
CURRENT_VERSION = 0
TXN_INDEX_SUFFIX = ".txnindex"


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(
            CURRENT_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def txn_index_name(base_offset: int) -> str:
    return f"{base_offset:020d}{TXN_INDEX_SUFFIX}"


class TransactionIndex:
    def __init__(self, path: Path, start_offset: int) -> None:
        self.path = path
        self.start_offset = start_offset
        self._entries: list[AbortedTxn] = []
        #: last_offset of each entry, for truncation.
        self._last_offsets: list[int] = []
        self._fd = -1
        # An existing file must be read (``load``) or discarded (``reset``) before
        # use, or its entries would silently be missing from fetches.
        self._loaded = not path.exists()

    def load(self) -> None:
        """Read the entries on disk; raises IndexCorrupt if they are not well formed."""
        entries: list[AbortedTxn] = []
        if self.path.exists():
            data = self.path.read_bytes()
            if len(data) % ENTRY_SIZE:
                raise IndexCorrupt(f"{self.path} has {len(data)} bytes, not a whole number of entries")
            last = None
            for version, pid, first, last_offset, lso in ENTRY.iter_unpack(data):
                if version != CURRENT_VERSION:
                    raise IndexCorrupt(f"{self.path}: entry version {version}, expected {CURRENT_VERSION}")
                # Kafka's TransactionIndex.sanityCheck: a marker in this segment is at or after its base.
                if last_offset < self.start_offset:
                    raise IndexCorrupt(
                        f"{self.path}: aborted transaction ends at {last_offset}, before the segment start {self.start_offset}"
                    )
                if last is not None and last_offset <= last:
                    raise IndexCorrupt(f"{self.path}: entries out of order ({last_offset} after {last})")
                entries.append(AbortedTxn(pid, first, last_offset, lso))
                last = last_offset
        self._entries = entries
        self._last_offsets = [e.last_offset for e in entries]
        self._loaded = True

    def _check_loaded(self) -> None:
        if not self._loaded:
            raise RuntimeError(f"{self.path} exists but was not loaded")

    def append(self, entry: AbortedTxn) -> None:
        self._check_loaded()
        if self._last_offsets and entry.last_offset <= self._last_offsets[-1]:
            raise ValueError(
                f"{self.path}: aborted transactions must be appended in marker order, "
                f"{entry.last_offset} is not after {self._last_offsets[-1]}"
            )
        data = entry.encode()
        fd = self._open()
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(f"{self.path}: short write ({written} of {len(data)} bytes)")
        self._entries.append(entry)
        self._last_offsets.append(entry.last_offset)

    def entries(self) -> list[AbortedTxn]:
        self._check_loaded()
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset), and whether the search is complete.

        Complete means no later segment can hold an aborted transaction that
        overlaps the range (Kafka's collectAbortedTxns).
        """
        self._check_loaded()
        found = []
        for entry in self._entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or after ``offset``."""
        self._check_loaded()
        keep = bisect_left(self._last_offsets, offset)
        if keep == len(self._entries):
            return
        del self._entries[keep:]
        del self._last_offsets[keep:]
        os.ftruncate(self._open(), keep * ENTRY_SIZE)

    def reset(self) -> None:
        """Remove every entry (the file, if any, is emptied)."""
        self._entries = []
        self._last_offsets = []
        if self._fd >= 0 or self.path.exists():
            os.ftruncate(self._open(), 0)
        self._loaded = True

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self._entries = []
        self._last_offsets = []
        self._loaded = True

    def _open(self) -> int:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def __repr__(self) -> str:
        return f"TransactionIndex({self.path.name}, {len(self._entries)} entries)"
