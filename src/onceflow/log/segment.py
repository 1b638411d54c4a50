"""One log segment: a ``.log`` file of batches plus its offset, time and transaction indexes.

Theory of operation: a segment is named after its base offset
(``00000000000000000000.log``, ``.index``, ``.timeindex``) and only ever
grows at its end.  ``append`` writes a batch whose offsets the partition log
has already assigned, and every ``index.interval.bytes`` it records an index
entry keyed by that batch's base offset.  ``find_batch`` turns an offset into
a file position with one index lookup and a short forward scan over batch
headers; ``read`` returns stored bytes as they are.

Appends go into space preallocated ahead of the end of the file with
``fallocate(FALLOC_FL_KEEP_SIZE)``: the file's size stays the size of its
data, but the filesystem does not have to allocate blocks page by page as
the file grows.  The chunk doubles with the segment, from 64 KiB up to
4 MiB at a time, so a partition that holds a few records (a sink's progress
topic has one per slot, and may have hundreds) costs kilobytes of disk, not
4 MiB each.  On this project's development machine that is
the difference between 365 MB/s and over 5 GB/s of page-cache writes
(docs/performance.md).  Blocks left past the end are released when the
segment is rolled or closed.

``recover`` rebuilds a segment after a crash: it re-reads every batch,
checks its CRC and offset order, truncates the file at the first batch that
is torn or corrupt, and regenerates both indexes.  ``load`` is the fast path
after a clean shutdown: it trusts the index files and scans only the bytes
after the last index entry.

Replacing segments (log compaction, ``log.compaction``) goes through files
with a suffix, as in Kafka: the cleaner writes ``<base>.log.cleaned`` and
its three indexes with a ``SegmentBuilder`` (off the event loop), then the
partition log renames them ``.cleaned`` -> ``.swap`` (the commit point: the
``.log.swap`` is renamed last), deletes the replaced segments, and renames
``.swap`` -> final names.  ``complete_interrupted_swaps`` runs at start-up
and finishes or undoes what a crash interrupted (see there).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..fileio import fsync_dir
from ..records.batch import HEADER_SIZE, BatchHeader, read_header, scan_until_invalid
from .aborted_index import TransactionIndex
from .index import IndexCorrupt, OffsetIndex, TimeIndex
from .writer import DIRECT, SegmentWriter, pwrite_all

log = logging.getLogger(__name__)

_SCAN_CHUNK = 1 << 20
#: The largest offset relative to a segment's base that its indexes hold (an int32).
_MAX_RELATIVE = 2**31 - 1
_RECOVER_CHUNK = 8 << 20
PREALLOCATE_CHUNK = 4 << 20
#: The first chunk of a segment; each next one is as large as what is allocated so far.
PREALLOCATE_FIRST = 64 << 10
_FALLOC_FL_KEEP_SIZE = 1


def _load_fallocate() -> Any:
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        fn = libc.fallocate
        fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
        fn.restype = ctypes.c_int
        return fn
    except (OSError, AttributeError):
        return None


_fallocate = _load_fallocate()


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


#: The files of one segment, in the order they are renamed: the log last, so that
#: a ``.log`` with a given suffix means the whole set had that suffix.
SEGMENT_FILE_KINDS = (".index", ".timeindex", ".txnindex", ".log")
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


def segment_files(directory: Path, base_offset: int, suffix: str = "") -> list[Path]:
    stem = segment_name(base_offset)
    return [directory / f"{stem}{kind}{suffix}" for kind in SEGMENT_FILE_KINDS]


def rename_segment_files(directory: Path, base_offset: int, old_suffix: str, new_suffix: str) -> None:
    """Rename one segment's files from ``old_suffix`` to ``new_suffix``, the log last."""
    for path in segment_files(directory, base_offset, old_suffix):
        if path.exists():
            os.replace(path, path.with_name(path.name[: len(path.name) - len(old_suffix)] + new_suffix))


def _segment_file_base(name: str) -> tuple[int, str] | None:
    """(base offset, suffix after the kind) of a segment file name, or None for any other file."""
    stem, dot, rest = name.partition(".")
    if not dot or not stem.isdigit():
        return None
    for kind in SEGMENT_FILE_KINDS:
        if ("." + rest).startswith(kind):
            return int(stem), ("." + rest)[len(kind) :]
    return None


def _file_next_offset(path: Path, base_offset: int) -> int:
    """The offset after the last whole batch of a log file (``base_offset`` if it has none)."""
    end = base_offset
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        position = 0
        while position + HEADER_SIZE <= size:
            chunk = os.pread(fd, min(max(_SCAN_CHUNK, HEADER_SIZE), size - position), position)
            batches, _ = scan_until_invalid(chunk, 0, verify_crc=False)
            if not batches:
                header = read_header(chunk, 0)
                if header.magic != 2 or header.size < HEADER_SIZE or position + header.size > size:
                    break
                end = header.next_offset  # one batch larger than the chunk
                position += header.size
                continue
            for _, header in batches:
                end = header.next_offset
            last_pos, last = batches[-1]
            position += last_pos + last.size
    finally:
        os.close(fd)
    return end


def complete_interrupted_swaps(directory: Path) -> list[int]:
    """Finish or undo segment replacements a crash interrupted; returns the swapped-in base offsets.

    Kafka's rules (LogLoader): ``.cleaned`` files are an unfinished cleaning
    and are deleted.  A ``<base>.log.swap`` is a complete, fsynced segment
    that replaces every segment whose base offset lies in [base, its next
    offset): those are deleted and the swap files renamed.  For ``<base>``
    itself, an index kind with a ``.swap`` file means the plain file is the
    old one; without, it was already renamed (the crash came while the
    ``.swap`` files were being renamed, indexes first).  Index ``.swap``
    files without a ``.log.swap`` were never committed and are deleted.
    """
    swaps: set[int] = set()
    orphans: list[Path] = []
    for path in list(directory.iterdir()):
        parsed = _segment_file_base(path.name)
        if parsed is None:
            continue
        base, suffix = parsed
        if suffix == CLEANED_SUFFIX:
            log.info("%s: deleting %s, left by an interrupted cleaning", directory.name, path.name)
            path.unlink(missing_ok=True)
        elif suffix == SWAP_SUFFIX:
            if path.name.endswith(".log" + SWAP_SUFFIX):
                swaps.add(base)
            else:
                orphans.append(path)
    for path in orphans:
        if _segment_file_base(path.name)[0] not in swaps:  # type: ignore[index]
            path.unlink(missing_ok=True)
    for base in sorted(swaps):
        swap_log = segment_files(directory, base, SWAP_SUFFIX)[-1]
        end = _file_next_offset(swap_log, base)
        for path in list(directory.iterdir()):
            parsed = _segment_file_base(path.name)
            if parsed is None or parsed[1] != "":
                continue
            old_base = parsed[0]
            if base < old_base < end or (old_base == base and path.with_name(path.name + SWAP_SUFFIX).exists()):
                log.info("%s: deleting %s, replaced by the interrupted swap of %s", directory.name, path.name, swap_log.name)
                path.unlink()
        rename_segment_files(directory, base, SWAP_SUFFIX, "")
        log.info("%s: completed the interrupted swap of segment %d (up to offset %d)", directory.name, base, end)
    if swaps or orphans:
        fsync_dir(directory)
    return sorted(swaps)


class SegmentCorrupt(Exception):
    pass


class Segment:
    __slots__ = (
        "_allocated",
        "_bytes_since_index",
        "base_offset",
        "created_ms",
        "dir",
        "fd",
        "index",
        "log_path",
        "max_timestamp",
        "next_offset",
        "rolling_timestamp",
        "size",
        "time_index",
        "txn_index",
        "write_error",
        "writer",
    )

    def __init__(self, directory: Path, base_offset: int, now_ms: int, writer: SegmentWriter = DIRECT) -> None:
        self.base_offset = base_offset
        self.dir = directory
        stem = segment_name(base_offset)
        self.log_path = directory / f"{stem}.log"
        created = not self.log_path.exists()
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self.size = os.fstat(self.fd).st_size
            self.index = OffsetIndex(directory / f"{stem}.index")
            self.time_index = TimeIndex(directory / f"{stem}.timeindex")
        except OSError:  # e.g. a full disk while rolling: leave no half-made segment behind
            os.close(self.fd)
            index = getattr(self, "index", None)
            if index is not None:
                index.close()
            if created:
                for path in segment_files(directory, base_offset):
                    path.unlink(missing_ok=True)
            raise
        #: Aborted transactions whose ABORT marker is in this segment (KIP-98).
        self.txn_index = TransactionIndex(directory / f"{stem}.txnindex", base_offset)
        self.next_offset = base_offset
        self.max_timestamp = -1
        #: Max timestamp of the first batch: what segment.ms counts from (as in Kafka).
        self.rolling_timestamp: int | None = None
        self.created_ms = now_ms
        self._bytes_since_index = 0
        #: Bytes of the file backed by preallocated blocks (-1: preallocation unavailable).
        self._allocated = self.size
        self.writer = writer
        #: Set by the I/O thread if a write failed; the partition then refuses appends.
        self.write_error: OSError | None = None

    # -- writing --------------------------------------------------------------

    def append(self, prefix: bytes, body: bytes | memoryview, header: BatchHeader, base_offset: int, index_interval: int) -> int:
        """Write one batch (``prefix`` + ``body``, already stamped with ``base_offset``).

        The bytes reach the file through the segment's writer (perhaps a moment
        later, on the I/O thread); ``size`` and the indexes move now.  Returns
        the file position the batch starts at.
        """
        position = self.size
        total = len(prefix) + len(body)
        relative = base_offset - self.base_offset
        max_timestamp = max(self.max_timestamp, header.max_timestamp)
        bytes_since_index = self._bytes_since_index
        if bytes_since_index >= index_interval:
            # Index files first: if the disk refuses them (full), nothing has changed yet.  An
            # entry that did land points at this position, where the next batch goes anyway.
            self.index.append(relative, position)
            self.time_index.maybe_append(max_timestamp, relative)
            bytes_since_index = 0
        if position + total > self._allocated and self._allocated >= 0:
            self._preallocate(position + total)
        self.writer.write(self, [prefix, body], position)
        self.size = position + total
        if self.rolling_timestamp is None:
            self.rolling_timestamp = header.max_timestamp
        self.max_timestamp = max_timestamp
        self._bytes_since_index = bytes_since_index + total
        self.next_offset = base_offset + header.last_offset_delta + 1
        return position

    def _preallocate(self, needed: int) -> None:
        chunk = min(PREALLOCATE_CHUNK, max(PREALLOCATE_FIRST, self._allocated))
        length = max(chunk, needed - self._allocated)
        if _fallocate is None or _fallocate(self.fd, _FALLOC_FL_KEEP_SIZE, self._allocated, length) != 0:
            self._allocated = -1  # not supported here: plain appends from now on
            return
        self._allocated += length

    def release_preallocated(self) -> None:
        """Give back the blocks preallocated past the end of the data."""
        if self._allocated > self.size:
            try:
                os.ftruncate(self.fd, self.size)
            except OSError as exc:  # a failing disk: the blocks stay allocated, nothing is lost
                log.warning("%s: cannot release preallocated space: %s", self.log_path, exc)
            self._allocated = self.size

    def flush(self) -> None:
        """fsync the log file; raises the segment's write error, old or new.

        A failed fsync marks the segment failed (``write_error``): the kernel may
        have dropped the dirty pages it could not write and reports that only
        once, so a later fsync that succeeds would prove nothing.
        """
        if self.write_error is not None:
            raise self.write_error
        try:
            os.fsync(self.fd)
        except OSError as exc:
            self.write_error = exc
            raise

    def flush_all(self) -> None:
        """fsync the log and both indexes (done when the segment is rolled)."""
        self.release_preallocated()
        self.flush()
        self.index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    # -- reading --------------------------------------------------------------

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def headers_from(self, position: int, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from ``position`` up to ``end`` (default: segment size)."""
        limit = self.size if end is None else end
        while position + HEADER_SIZE <= limit:
            chunk = os.pread(self.fd, min(_SCAN_CHUNK, limit - position), position)
            cursor = 0
            while cursor + HEADER_SIZE <= len(chunk):
                header = read_header(chunk, cursor)
                if header.batch_length <= 0:
                    return  # not written yet (or not a batch): nothing more to scan
                yield position + cursor, header
                cursor += header.size
            if cursor == 0:
                return  # the bytes are not on file yet: stop rather than spin
            position += cursor

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The batch containing ``offset`` (or the first one after it), or None past the end."""
        _, position = self.index.lookup(offset - self.base_offset)
        for pos, header in self.headers_from(position):
            if header.last_offset >= offset:
                return pos, header
        return None

    def find_timestamp(self, timestamp: int, end: int) -> tuple[int, BatchHeader] | None:
        """The first batch before file position ``end`` whose max timestamp is at or after ``timestamp``."""
        relative = self.time_index.lookup(timestamp)
        _, position = self.index.lookup(relative)
        for pos, header in self.headers_from(position, end):
            if header.max_timestamp >= timestamp:
                return pos, header
        return None

    def position_of(self, offset: int) -> int:
        """File position where the batch starting at ``offset`` is (or would be) found."""
        found = self.find_batch(offset)
        return self.size if found is None else found[0]

    # -- start-up -------------------------------------------------------------

    def load(self) -> None:
        """Open after a clean shutdown: trust the indexes, scan only the tail."""
        try:
            self.index.load()
            self.time_index.load()
            self.txn_index.load()
        except IndexCorrupt as exc:
            raise SegmentCorrupt(str(exc)) from None
        _, position = self.index.last()
        if position > self.size:
            raise SegmentCorrupt(f"{self.log_path}: index points past the end of the log")
        self.max_timestamp = self.time_index.last_timestamp()
        self.next_offset = self.base_offset
        if len(self.index):
            first = self.read(0, HEADER_SIZE)
            self.rolling_timestamp = read_header(first).max_timestamp if len(first) == HEADER_SIZE else None
        end = position
        for pos, header in self.headers_from(position):
            if (header.magic != 2 or header.size <= 0 or pos + header.size > self.size
                    or not self.next_offset <= header.base_offset <= header.last_offset <= self.base_offset + _MAX_RELATIVE):
                raise SegmentCorrupt(f"{self.log_path}: bad batch at position {pos}")
            if self.rolling_timestamp is None:
                self.rolling_timestamp = header.max_timestamp
            self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
            self.next_offset = header.next_offset
            end = pos + header.size
        if end != self.size:
            raise SegmentCorrupt(f"{self.log_path}: {self.size - end} bytes after the last batch")
        self._bytes_since_index = self.size - position if len(self.index) else self.size

    def recover(self, index_interval: int) -> int:
        """Rebuild after a crash; returns the number of bytes truncated from the tail.

        Every batch is re-read and its CRC checked.  The valid prefix ends at the
        first batch that is cut off, fails its CRC, has a bad header, or whose
        offsets do not follow the previous batch; everything from there on is
        cut away.  Each pass either advances or reads a larger window, so the
        loop ends.
        """
        self.index.reset()
        self.time_index.reset()
        self.txn_index.reset()  # rebuilt by the partition log's producer-state replay
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.rolling_timestamp = None
        self._bytes_since_index = 0
        self.size = 0
        file_size = os.fstat(self.fd).st_size
        position = 0
        need = 0
        reason: str | None = None
        while position < file_size:
            chunk = os.pread(self.fd, min(max(_RECOVER_CHUNK, need), file_size - position), position)
            batches, stop = scan_until_invalid(chunk, 0, verify_crc=True)
            for pos, header in batches:
                if not self.next_offset <= header.base_offset <= header.last_offset <= self.base_offset + _MAX_RELATIVE:
                    # Before the segment's end, running backwards, or past what its 32-bit
                    # relative offsets (the indexes') can hold: no append writes such a batch.
                    stop = stop._replace(position=pos, reason=f"offsets {header.base_offset}..{header.last_offset} out of order")
                    break
                self.append_recovered(header, position + pos, index_interval)
            position += stop.position
            if stop.reason is None or (stop.position > 0 and "out of order" not in stop.reason):
                need = 0
                continue  # whole chunk consumed, or re-read from the batch the chunk cut
            if len(chunk) >= HEADER_SIZE and "out of order" not in stop.reason:
                head = read_header(chunk, 0)
                if head.magic == 2 and len(chunk) < head.size <= file_size - position and need < head.size:
                    need = head.size  # one batch larger than the window: read it whole
                    continue
            reason = stop.reason
            break
        truncated = file_size - position
        if truncated:
            log.warning(
                "recovery of %s: truncating %d bytes at position %d (%s)",
                self.log_path, truncated, position, reason or "torn tail",
            )
            os.ftruncate(self.fd, position)
            os.fsync(self.fd)
        self.size = position
        return truncated

    def append_recovered(self, header: BatchHeader, position: int, index_interval: int) -> None:
        relative = header.base_offset - self.base_offset
        if self.rolling_timestamp is None:
            self.rolling_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
        if self._bytes_since_index >= index_interval:
            self.index.append(relative, position)
            self.time_index.maybe_append(self.max_timestamp, relative)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        self.next_offset = header.next_offset
        self.size = position + header.size

    # -- lifetime -------------------------------------------------------------

    def close(self) -> None:
        """Close the files; the caller has made sure no write is still pending (``writer.barrier()``)."""
        if self.fd >= 0:
            self.release_preallocated()
            os.close(self.fd)
            self.fd = -1
        self.index.close()
        self.time_index.close()
        self.txn_index.close()

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index.path, self.time_index.path):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        self.txn_index.delete()

    def __repr__(self) -> str:
        return f"Segment({self.log_path.name}, size={self.size}, next_offset={self.next_offset})"


class SegmentBuilder:
    """Writes a new, complete segment under suffixed names (``<base>.log.cleaned`` and its indexes).

    Used off the event loop by the log cleaner: it touches only its own files.
    Index entries follow the same rule as ``Segment.append`` (one every
    ``index.interval.bytes``), so ``Segment.load`` opens the result as it opens
    any rolled segment.  ``finish`` fsyncs every file; ``abandon`` deletes them.
    """

    def __init__(self, directory: Path, base_offset: int, index_interval: int, suffix: str = CLEANED_SUFFIX) -> None:
        self.base_offset = base_offset
        self.paths = segment_files(directory, base_offset, suffix)
        for path in self.paths:
            path.unlink(missing_ok=True)  # a leftover of an earlier attempt
        index_path, time_path, txn_path, log_path = self.paths
        self.fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.index = OffsetIndex(index_path)
        self.time_index = TimeIndex(time_path)
        self.txn_index = TransactionIndex(txn_path, base_offset)
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self._interval = index_interval
        self._bytes_since_index = 0

    def append(self, batch: bytes, header: BatchHeader) -> None:
        """Write one batch (its base offset already final, at or after the last one's next offset)."""
        if header.base_offset < self.next_offset:
            raise ValueError(f"batch at {header.base_offset} is before the segment's end {self.next_offset}")
        position = self.size
        pwrite_all(self.fd, [batch], position)
        self.size += len(batch)
        relative = header.base_offset - self.base_offset
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
        if self._bytes_since_index >= self._interval:
            self.index.append(relative, position)
            self.time_index.maybe_append(self.max_timestamp, relative)
            self._bytes_since_index = 0
        self._bytes_since_index += len(batch)
        self.next_offset = header.next_offset

    def finish(self) -> None:
        """Make every file durable (an empty transaction index file is created too) and close them."""
        txn_path = self.paths[2]
        if not txn_path.exists():
            txn_path.touch()
        os.fsync(self.fd)
        self.index.flush()
        self.time_index.flush()
        fd = os.open(txn_path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.index.close()
        self.time_index.close()
        self.txn_index.close()

    def abandon(self) -> None:
        self.close()
        for path in self.paths:
            path.unlink(missing_ok=True)
