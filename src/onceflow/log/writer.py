"""Getting log bytes into files: the I/O thread, and the writer a segment appends through.

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

A write or an fsync that fails (EIO, ENOSPC) is recorded on its segment.
The next fsync of that partition (``fsync_segments``) reports it, so no
waiter is told its data is durable, and the partition refuses appends with
KAFKA_STORAGE_ERROR until the broker restarts: the partition's offsets and
producer state already count the lost write, and only recovery from the
files (a CRC scan that truncates what is torn) makes them agree again.
Kafka takes the whole log directory offline in this case.

When data counts as durable (group commit, the high watermark) is decided
above the log, by ``broker.group_commit``; nothing here uses asyncio.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
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
    """One thread for every log write and fsync, performed in submission order.

    A plain queue of jobs, not an executor: a write needs no future, and a
    flush reports back itself (``broker.group_commit``), so each handoff is
    one queue put and, when the thread sleeps, one wake-up.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="onceflow-io", daemon=True)
        self._thread.start()

    def write(self, segment: Segment, buffers: Buffers, position: int) -> None:
        self.submit(_write_job, segment, buffers, position)

    def submit(self, job: Callable[..., Any], *args: Any) -> None:
        """Run ``job(*args)`` on the I/O thread after everything submitted before it."""
        if self._closed:
            raise RuntimeError("the I/O thread is shut down")
        self._jobs.put((job, args))

    def barrier(self) -> None:
        if self._closed or threading.current_thread() is self._thread:
            return  # nothing can be pending, or we are the thread that runs it
        reached = threading.Event()
        self._jobs.put((reached.set, ()))
        reached.wait()

    def shutdown(self) -> None:
        """Finish every job submitted so far, then stop the thread."""
        if self._closed:
            return
        self._closed = True
        self._jobs.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, args = item
            try:
                job(*args)
            except Exception:  # a bug in a job must not stop every later write and fsync
                log.exception("I/O job %s failed", getattr(job, "__qualname__", job))


def _write_job(segment: Segment, buffers: Buffers, position: int) -> None:
    if segment.write_error is not None or segment.fd < 0:
        return
    try:
        pwrite_all(segment.fd, buffers, position)
    except OSError as exc:
        segment.write_error = exc
        log.error("write to %s failed: %s; the partition refuses writes until the broker restarts", segment.log_path, exc)


def fsync_segments(segments: list[Segment]) -> list[OSError | None]:
    """Runs on the I/O thread, after every write submitted before it: each segment's outcome.

    One segment's failure says nothing about the others: each is fsynced and
    answered on its own, so a full disk under one partition neither fails
    another partition's durable appends nor leaves them unsynced.
    """
    return [_fsync(segment) for segment in segments]


def _fsync(segment: Segment) -> OSError | None:
    if segment.fd < 0 and segment.write_error is None:
        return None  # closed (its topic was deleted) meanwhile
    try:
        segment.flush()
    except OSError as exc:
        return exc
    return None
