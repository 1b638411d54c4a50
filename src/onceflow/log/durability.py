"""Getting log data onto disk: the I/O thread, and group-committed fsync.

Theory of operation.  The event loop never copies log data into the page
cache itself: ``Segment.append`` hands the bytes to a ``SegmentWriter``.  In
the broker that is ``IoThread``, one thread that performs every log write
and every fsync in the order they were submitted.  Parsing the next request
and copying the last one into the page cache then overlap, and the FIFO
gives the ordering durability needs for free: an fsync submitted after a
write runs after it.  Anything that must see the file complete (rolling a
segment, closing or deleting a log) first calls ``barrier()``.  Tests and
start-up recovery use ``DirectWriter``, which writes at once on the
caller's thread.

A write that fails (EIO, ENOSPC) is recorded on its segment.  The next fsync
of that partition reports it, so no waiter is told its data is durable, and
the partition refuses further appends with KAFKA_STORAGE_ERROR until the
broker restarts: the partition's offsets and producer state already count
the lost write, and only recovery from the files (a CRC scan that truncates
what is torn) makes them agree again.  Kafka takes the whole log directory
offline in this case.

Group commit: appends mark their partition dirty.  A single flusher task repeatedly takes the set of dirty partitions,
notes for each the end of what has been written (its ``FlushPoint``),
fsyncs those files in a worker thread, and then, back on the event loop,
advances each partition's high watermark to its flush point and resolves
every waiter whose offset is now covered.  While one fsync runs, new appends
pile up and are all covered by the next one, so under load each fsync
answers many requests (group commit) and the fsync rate, not the request
rate, bounds the disk's work.

Waiters are kept per partition in offset order; a produce with acks=-1 waits
for ``wait_durable(log, last_offset + 1)``.  If a flush fails (EIO, disk
full), the waiters it would have answered get the exception and the broker
answers KAFKA_STORAGE_ERROR; nothing is acknowledged that is not on disk.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .partition_log import FlushPoint, PartitionLog
    from .segment import Segment

log = logging.getLogger(__name__)

Buffers = list[bytes | memoryview]


def pwrite_all(fd: int, buffers: Buffers, position: int) -> None:
    """Write every buffer at ``position``, retrying short writes."""
    total = sum(len(b) for b in buffers)
    written = os.pwritev(fd, buffers, position)
    if written < total:
        rest = b"".join(bytes(b) for b in buffers)[written:]
        while rest:
            n = os.pwrite(fd, rest, position + written)
            written += n
            rest = rest[n:]


class SegmentWriter(Protocol):
    def write(self, segment: Segment, buffers: Buffers, position: int) -> None:
        """Write ``buffers`` at ``position`` of ``segment``'s log file (maybe later)."""
        ...

    def barrier(self) -> None:
        """Return once every write submitted so far has been performed."""
        ...


class DirectWriter:
    """Writes at once, on the caller's thread (unit tests, start-up recovery)."""

    def write(self, segment: Segment, buffers: Buffers, position: int) -> None:
        pwrite_all(segment.fd, buffers, position)

    def barrier(self) -> None:
        pass


DIRECT = DirectWriter()


class IoThread:
    """One thread for every log write and fsync, performed in submission order."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="onceflow-io")

    def write(self, segment: Segment, buffers: Buffers, position: int) -> None:
        self.executor.submit(_write_job, segment, buffers, position)

    def barrier(self) -> None:
        self.executor.submit(_nothing).result()

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True)


def _write_job(segment: Segment, buffers: Buffers, position: int) -> None:
    if segment.write_error is not None or segment.fd < 0:
        return
    try:
        pwrite_all(segment.fd, buffers, position)
    except OSError as exc:
        segment.write_error = exc
        log.error("write to %s failed: %s; the partition refuses writes until the broker restarts", segment.log_path, exc)


def _nothing() -> None:
    pass


class GroupCommit:
    def __init__(self, io: IoThread) -> None:
        self._dirty: dict[PartitionLog, None] = {}
        self._waiters: dict[PartitionLog, deque[tuple[int, asyncio.Future[None]]]] = {}
        self._wake = asyncio.Event()
        self._io = io
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.flushes = 0
        self.fsyncs = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="onceflow-group-commit")

    def mark_dirty(self, partition: PartitionLog) -> None:
        if partition not in self._dirty:
            self._dirty[partition] = None
            self._wake.set()

    def wait_durable(self, partition: PartitionLog, offset: int) -> asyncio.Future[None]:
        """A future resolved once every offset below ``offset`` is on disk."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if partition.high_watermark >= offset:
            fut.set_result(None)
            return fut
        self._waiters.setdefault(partition, deque()).append((offset, fut))
        self.mark_dirty(partition)
        return fut

    def forget(self, partition: PartitionLog) -> None:
        """A partition is going away (topic deleted): fail its waiters."""
        self._dirty.pop(partition, None)
        for _, fut in self._waiters.pop(partition, ()):
            if not fut.done():
                fut.set_exception(OSError(f"{partition.name} was deleted"))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            if not self._dirty:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch: list[tuple[PartitionLog, FlushPoint]] = []
            for partition in self._dirty:
                point = partition.flush_point()
                if point is not None and not partition.closed:
                    batch.append((partition, point))
            self._dirty.clear()
            if not batch:
                continue
            segments = [point.segment for _, point in batch]
            error: OSError | None = None
            try:
                await loop.run_in_executor(self._io.executor, _fsync_all, segments)
            except OSError as exc:
                error = exc
                log.error("fsync failed: %s", exc)
            self.flushes += 1
            self.fsyncs += len(segments)
            for partition, point in batch:
                if error is None:
                    partition.on_flushed(point)
                self._settle(partition, point.offset, error)

    def _settle(self, partition: PartitionLog, offset: int, error: OSError | None) -> None:
        waiters = self._waiters.get(partition)
        if not waiters:
            return
        while waiters and waiters[0][0] <= offset:
            _, fut = waiters.popleft()
            if fut.done():
                continue
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)
        if not waiters:
            del self._waiters[partition]
        else:
            self.mark_dirty(partition)

    async def flush_now(self) -> None:
        """Make everything written so far durable (used on shutdown)."""
        pending = [self.wait_durable(p, p.log_end_offset) for p in list(self._dirty)]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def stop(self) -> None:
        await self.flush_now()
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            await self._task


def _fsync_all(segments: list[Segment]) -> None:
    """Runs on the I/O thread, after every write submitted before it."""
    for segment in segments:
        if segment.write_error is not None:
            raise segment.write_error
        if segment.fd < 0:
            continue  # closed (its topic was deleted) meanwhile
        os.fsync(segment.fd)
