"""Group commit: one fsync answers every acks=all waiter of the moment (asyncio, above the log).

Theory of operation.  Appends mark their partition dirty.  A single flusher
task repeatedly takes the set of dirty partitions, notes for each the end of
what has been written (its ``FlushPoint``), fsyncs those files on the I/O
thread (``log.writer.fsync_segments``, after every write submitted before
it), and then, back on the event loop, advances each partition's high
watermark to its flush point and resolves every waiter whose offset is now
covered.  While one fsync runs, new appends pile up and are all covered by
the next one, so under load each fsync answers many requests and the fsync
rate, not the request rate, bounds the disk's work.

Waiters are kept per partition in offset order; a produce with acks=-1 waits
for ``wait_durable(log, last_offset + 1)``.  If a partition's flush fails
(EIO, disk full), the waiters it would have answered get the exception and
the broker answers KAFKA_STORAGE_ERROR; nothing is acknowledged that is not
on disk.  Each partition is answered by its own outcome: a coordinator told
its durable record failed would drop a change its log keeps.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from ..log.partition_log import FlushPoint, PartitionLog
from ..log.writer import IoThread, fsync_segments

log = logging.getLogger(__name__)


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
            outcomes = await loop.run_in_executor(self._io.executor, fsync_segments, segments)
            self.flushes += 1
            self.fsyncs += len(segments)
            for (partition, point), error in zip(batch, outcomes, strict=True):
                if error is None:
                    partition.on_flushed(point)
                else:
                    log.error("%s: fsync failed: %s", partition.name, error)
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
