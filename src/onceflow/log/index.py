"""Sparse offset and time indexes of one segment.

Theory of operation: every ``index.interval.bytes`` of log the segment adds
one entry to each index; a lookup finds the last entry at or before the key
and the caller scans batch headers forward from there (never more than about
one interval).  Entries are kept in memory (``array``) for lookups and
appended to the index files as they are made, in Kafka's layouts:

* ``.index``: int32 offset relative to the segment's base, int32 file position;
* ``.timeindex``: int64 timestamp, int32 relative offset; an entry is only
  added when the timestamp is larger than the last one (timestamps in the
  index are non-decreasing, as in Kafka's TimeIndex).

Index files are not fsynced on every write: after a crash, the active
segment's indexes are rebuilt from its log; a rolled segment's indexes are
fsynced at the roll.  A file whose size is not a whole number of entries is
treated as damaged and rebuilt.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class IndexCorrupt(Exception):
    pass


class _IndexFile:
    ENTRY: struct.Struct

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)

    def _load(self) -> bytes:
        data = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
        if len(data) % self.ENTRY.size:
            raise IndexCorrupt(f"{self.path} has {len(data)} bytes, not a whole number of entries")
        return data

    def _write(self, *fields: int) -> None:
        os.write(self._fd, self.ENTRY.pack(*fields))

    def _truncate_entries(self, n: int) -> None:
        os.ftruncate(self._fd, n * self.ENTRY.size)

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OffsetIndex(_IndexFile):
    ENTRY = _OFFSET_ENTRY

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.offsets = array("i")
        self.positions = array("i")

    def load(self) -> None:
        """Read entries from disk; raises IndexCorrupt if they are not well formed."""
        data = self._load()
        offsets, positions = array("i"), array("i")
        last_off = last_pos = -1
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
            if rel <= last_off or pos <= last_pos:
                raise IndexCorrupt(f"{self.path}: entries out of order")
            offsets.append(rel)
            positions.append(pos)
            last_off, last_pos = rel, pos
        self.offsets, self.positions = offsets, positions

    def __len__(self) -> int:
        return len(self.offsets)

    def append(self, relative_offset: int, position: int) -> None:
        if self.offsets and relative_offset <= self.offsets[-1]:
            return
        self._write(relative_offset, position)  # the file first: an OSError leaves the entry out of both
        self.offsets.append(relative_offset)
        self.positions.append(position)

    def lookup(self, relative_offset: int) -> tuple[int, int]:
        """(relative offset, position) of the last entry at or before ``relative_offset``; (0, 0) if none."""
        i = bisect_right(self.offsets, relative_offset) - 1
        if i < 0:
            return 0, 0
        return self.offsets[i], self.positions[i]

    def last(self) -> tuple[int, int]:
        if not self.offsets:
            return 0, 0
        return self.offsets[-1], self.positions[-1]

    def reset(self) -> None:
        self.offsets, self.positions = array("i"), array("i")
        self._truncate_entries(0)


class TimeIndex(_IndexFile):
    ENTRY = _TIME_ENTRY

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.timestamps = array("q")
        self.offsets = array("i")

    def load(self) -> None:
        data = self._load()
        timestamps, offsets = array("q"), array("i")
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            if timestamps and (ts < timestamps[-1] or rel < offsets[-1]):
                raise IndexCorrupt(f"{self.path}: entries out of order")
            timestamps.append(ts)
            offsets.append(rel)
        self.timestamps, self.offsets = timestamps, offsets

    def __len__(self) -> int:
        return len(self.timestamps)

    def maybe_append(self, timestamp: int, relative_offset: int) -> None:
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        self._write(timestamp, relative_offset)  # the file first: an OSError leaves the entry out of both
        self.timestamps.append(timestamp)
        self.offsets.append(relative_offset)

    def lookup(self, timestamp: int) -> int:
        """Relative offset of the last entry whose timestamp is before ``timestamp``; 0 if none.

        Strictly before: every batch up to that entry has a max timestamp below
        ``timestamp``, so a forward scan from it cannot miss the first match.
        """
        i = bisect_left(self.timestamps, timestamp) - 1
        if i < 0:
            return 0
        return self.offsets[i]

    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def reset(self) -> None:
        self.timestamps, self.offsets = array("q"), array("i")
        self._truncate_entries(0)
