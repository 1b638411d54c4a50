"""Group commit: one fsync answers every acks=all waiter of the moment (asyncio, above the log).

Theory of operation.  Appends (``broker/appender.py``) mark their
partition dirty.  Marking schedules a flush for the end of the current
event-loop pass, so every append of the pass joins it.  The flush notes, for each dirty partition, the end of what
has been written (its ``FlushPoint``) and hands the fsyncs to the I/O thread
(``log.writer.fsync_segments``), which runs them after every write
submitted before, then reports back to the loop.  There each partition's
high watermark advances to its flush point and every waiter it now covers
is called.  While one flush runs, new appends pile up and the next flush,
started as soon as the last one reports, covers them all: under load each
fsync answers many requests, and the fsync rate, not the request rate,
bounds the disk's work.

It is callbacks, not tasks or futures, on purpose.  From the fsync's end to
a produce's answer is one loop pass (the report) plus the answer's own: each
extra future or task in the chain would cost a further pass, and on the
transaction path (issue 12) those passes, not the disk, were most of a
request's time.

Waiters are kept per partition in offset order; a produce with acks=-1 waits
for ``on_durable(log, last_offset + 1, callback)``.  If a partition's flush
fails (EIO, disk full), the waiters it would have answered are called with
the error and the broker answers KAFKA_STORAGE_ERROR; nothing is
acknowledged that is not on disk.  Each partition is answered by its own
outcome: a coordinator told its durable record failed would drop a change
its log keeps.  A waiter is never called inside the call that registered it.

A partition marked dirty *lazily* (``mark_lazy``: a record nobody waits for,
the transaction coordinator's Complete record) does not start a flush of
its own: it rides with the next flush that happens anyway, or at the latest
after ``LAZY_FLUSH_MS``.  Its next record usually comes within a
millisecond (the producer's next transaction), and an fsync of its own
would only delay that record's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

from ..log.partition_log import FlushPoint, PartitionLog
from ..log.writer import IoThread, fsync_segments
from ..metrics.stats import FlushStats

log = logging.getLogger(__name__)

#: Called once with None (durable) or the error that kept the data from the disk.
Waiter = Callable[[OSError | None], None]

#: The longest a lazily marked partition waits for a flush to ride with.
LAZY_FLUSH_MS = 50


class GroupCommit:
    def __init__(self, io: IoThread) -> None:
        self._dirty: dict[PartitionLog, None] = {}
        self._lazy: dict[PartitionLog, None] = {}
        self._lazy_timer: asyncio.TimerHandle | None = None
        self._waiters: dict[PartitionLog, deque[tuple[int, Waiter]]] = {}
        self._io = io
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False  # a flush starts at the end of this loop pass
        self._flushing = False  # a flush is on the I/O thread
        self._idle: list[asyncio.Future[None]] = []  # ``stop`` waiting for the flush in flight
        self._stopping = False
        self.flushes = 0
        self.fsyncs = 0
        #: fsync latency and waiters answered per flush, for the metrics endpoint.
        self.stats = FlushStats()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    def mark_dirty(self, partition: PartitionLog) -> None:
        if partition not in self._dirty:
            self._dirty[partition] = None
            self._schedule()

    def mark_lazy(self, partition: PartitionLog) -> None:
        """Flush ``partition`` with the next flush, or within ``LAZY_FLUSH_MS`` (see above)."""
        self._lazy[partition] = None
        if self._lazy_timer is None and self._loop is not None and not self._stopping:
            self._lazy_timer = self._loop.call_later(LAZY_FLUSH_MS / 1000, self._lazy_due)

    def _lazy_due(self) -> None:
        self._lazy_timer = None
        for partition in self._lazy:
            self.mark_dirty(partition)
        self._lazy.clear()

    def on_durable(self, partition: PartitionLog, offset: int, waiter: Waiter) -> None:
        """Call ``waiter`` from the loop, never inside this call, once every offset below
        ``offset`` is on disk (None) or cannot be (the error)."""
        assert self._loop is not None, "GroupCommit.start() first"
        if partition.high_watermark >= offset:
            self._loop.call_soon(waiter, None)
            return
        self._waiters.setdefault(partition, deque()).append((offset, waiter))
        self.mark_dirty(partition)

    def wait_durable(self, partition: PartitionLog, offset: int) -> asyncio.Future[None]:
        """``on_durable`` as a future: resolved once every offset below ``offset`` is on disk."""
        assert self._loop is not None, "GroupCommit.start() first"
        fut: asyncio.Future[None] = self._loop.create_future()

        def settle(error: OSError | None) -> None:
            if fut.done():
                return
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)

        self.on_durable(partition, offset, settle)
        return fut

    def forget(self, partition: PartitionLog) -> None:
        """A partition is going away (topic deleted): fail its waiters."""
        self._dirty.pop(partition, None)
        self._lazy.pop(partition, None)
        error = OSError(f"{partition.name} was deleted")
        for _, waiter in self._waiters.pop(partition, ()):
            _call(waiter, error)

    def _schedule(self) -> None:
        if not self._scheduled and not self._flushing and not self._stopping and self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._start_flush)

    def _start_flush(self) -> None:
        self._scheduled = False
        if self._flushing:
            return
        batch: list[tuple[PartitionLog, FlushPoint]] = []
        if self._lazy and self._dirty:  # they ride with this flush
            self._dirty.update(self._lazy)
            self._lazy.clear()
        for partition in self._dirty:
            point = partition.flush_point()
            if point is not None and not partition.closed:
                batch.append((partition, point))
        self._dirty.clear()
        if not batch:
            self._wake_idle()
            return
        self._flushing = True
        self._io.submit(self._fsync_job, batch)

    def _fsync_job(self, batch: list[tuple[PartitionLog, FlushPoint]]) -> None:
        """On the I/O thread: fsync, then report to the loop."""
        started = time.perf_counter()
        try:
            outcomes = fsync_segments([point.segment for _, point in batch])
        except Exception as exc:  # a bug: report it as a failed flush rather than never answering
            log.exception("group commit: fsync failed unexpectedly")
            outcomes = [OSError(f"fsync failed: {exc!r}") for _ in batch]
        elapsed_ms = (time.perf_counter() - started) * 1000
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(self._flushed, batch, outcomes, elapsed_ms)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more

    def _flushed(self, batch: list[tuple[PartitionLog, FlushPoint]], outcomes: list[OSError | None],
                 elapsed_ms: float = 0.0) -> None:
        self._flushing = False
        self.flushes += 1
        self.fsyncs += len(batch)
        self.stats.fsync_ms.observe(elapsed_ms)
        answered = 0
        for (partition, point), error in zip(batch, outcomes, strict=True):
            if error is None:
                partition.on_flushed(point)
            else:
                log.error("%s: fsync failed: %s", partition.name, error)
            answered += self._settle(partition, point.offset, error)
        self.stats.batch_waiters.observe(answered)
        if self._dirty:
            self._start_flush()  # what piled up meanwhile: at once, it is already waiting
        else:
            self._wake_idle()

    def _settle(self, partition: PartitionLog, offset: int, error: OSError | None) -> int:
        """Answer the waiters ``offset`` covers; returns how many."""
        waiters = self._waiters.get(partition)
        if not waiters:
            return 0
        answered = 0
        while waiters and waiters[0][0] <= offset:
            _, waiter = waiters.popleft()
            _call(waiter, error)
            answered += 1
        if not waiters:
            del self._waiters[partition]
        else:
            self.mark_dirty(partition)
        return answered

    def _wake_idle(self) -> None:
        for fut in self._idle:
            if not fut.done():
                fut.set_result(None)
        self._idle.clear()

    async def flush_now(self) -> None:
        """Make everything written so far durable (used on shutdown)."""
        if self._lazy_timer is not None:
            self._lazy_timer.cancel()
        self._lazy_due()
        pending = [self.wait_durable(p, p.log_end_offset) for p in list(self._dirty)]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def stop(self) -> None:
        await self.flush_now()
        self._stopping = True
        while self._flushing or self._scheduled:
            assert self._loop is not None
            idle = self._loop.create_future()
            self._idle.append(idle)
            await idle


def _call(waiter: Waiter, error: OSError | None) -> None:
    try:
        waiter(error)
    except Exception:  # one waiter's bug must not keep the others unanswered
        log.exception("group commit: a durability waiter failed")
