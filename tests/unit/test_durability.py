"""The I/O thread and group commit, on real files: ordering, barriers, one fsync for
many waiters, and write errors that must never be acknowledged."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from onceflow.broker.group_commit import GroupCommit
from onceflow.clock import FakeClock
from onceflow.config import BrokerConfig, TopicConfig
from onceflow.log.partition_log import PartitionLog, ReadResult
from onceflow.log.writer import IoThread
from onceflow.protocol.errors import ErrorCode
from onceflow.records.batch import Invalid, scan
from onceflow.records.builder import build_batch


def open_log(path: Path, io: IoThread) -> PartitionLog:
    return PartitionLog("t", 0, path, TopicConfig({}, BrokerConfig()), FakeClock().now_ms(), writer=io)


def started_commit() -> tuple[IoThread, GroupCommit]:
    """An I/O thread and a started group commit over it (inside a running event loop)."""
    io = IoThread()
    commit = GroupCommit(io)
    commit.start()
    return io, commit


def batch(i: int) -> bytes:
    return build_batch([(None, b"record-%d" % i * 20)], 1_700_000_000_000)


def _break_writes(log: PartitionLog) -> None:
    """Swap the active segment's file for a read-only descriptor: its next write fails (EBADF)."""
    segment = log.segments[-1]
    readonly = os.open(segment.log_path, os.O_RDONLY)
    os.close(segment.fd)
    segment.fd = readonly


def test_writes_land_in_order_and_barrier_waits_for_them(tmp_path: Path) -> None:
    io = IoThread()
    log = open_log(tmp_path / "t-0", io)
    for i in range(200):
        log.append_produced(batch(i), 0)
    io.barrier()
    data = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    assert [h.base_offset for _, h in scan(data, verify_crc=True)] == list(range(200))
    log.close()
    io.shutdown()


def test_group_commit_answers_many_waiters_with_few_fsyncs(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, int, int]:
        io, commit = started_commit()
        log = open_log(tmp_path / "t-0", io)
        waiters = []
        for i in range(300):
            result = log.append_produced(batch(i), 0)
            commit.mark_dirty(log)
            waiters.append(commit.wait_durable(log, result.last_offset + 1))
        await asyncio.wait_for(asyncio.gather(*waiters), 30)
        hw = log.high_watermark
        await commit.stop()
        log.close()
        io.shutdown()
        return hw, commit.flushes, commit.fsyncs

    hw, flushes, fsyncs = asyncio.run(scenario())
    assert hw == 300
    assert flushes < 300 and fsyncs < 300, "one fsync answered many appends"


def test_a_failed_write_is_never_acknowledged_and_stops_appends(tmp_path: Path) -> None:
    async def scenario() -> None:
        io, commit = started_commit()
        log = open_log(tmp_path / "t-0", io)
        ok = log.append_produced(batch(0), 0)
        commit.mark_dirty(log)
        await asyncio.wait_for(commit.wait_durable(log, ok.last_offset + 1), 30)
        _break_writes(log)
        bad = log.append_produced(batch(1), 0)
        commit.mark_dirty(log)
        with pytest.raises(OSError):
            await asyncio.wait_for(commit.wait_durable(log, bad.last_offset + 1), 30)
        assert log.high_watermark == 1, "the failed batch never became visible"
        refused = log.append_produced(batch(2), 0)
        assert isinstance(refused, Invalid) and refused.error is ErrorCode.kafka_storage_error
        visible = log.read(0, 1 << 20)
        assert isinstance(visible, ReadResult)
        assert [h.base_offset for _, h in scan(visible.records)] == [0]
        await commit.stop()
        log.close()
        io.shutdown()

    asyncio.run(scenario())


def test_one_partitions_failed_write_does_not_fail_another_partitions_flush(tmp_path: Path) -> None:
    """Each partition of a group-commit flush is answered by its own outcome.  Before, one
    failed write failed every waiter of the flush, so a coordinator was told that a record its
    log keeps had failed (and the others' segments went unsynced)."""
    async def scenario() -> None:
        io, commit = started_commit()
        good = open_log(tmp_path / "good-0", io)
        bad = open_log(tmp_path / "bad-0", io)
        _break_writes(bad)
        lost = bad.append_produced(batch(0), 0)
        kept = good.append_produced(batch(1), 0)
        waiters = [commit.wait_durable(bad, lost.last_offset + 1), commit.wait_durable(good, kept.last_offset + 1)]
        failed, durable = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 30)
        assert isinstance(failed, OSError) and durable is None
        assert good.high_watermark == 1 and bad.high_watermark == 0
        assert bad.failed and not good.failed
        await commit.stop()
        good.close()
        bad.close()
        io.shutdown()

    asyncio.run(scenario())


def test_a_failed_fsync_fails_the_segment_for_good(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After an fsync error the kernel may have dropped the pages it could not write, and a
    second fsync can succeed without them: the segment stays failed, nothing more is
    acknowledged, and the partition refuses writes until recovery from its files."""
    async def scenario() -> None:
        io, commit = started_commit()
        log = open_log(tmp_path / "t-0", io)
        first = log.append_produced(batch(0), 0)
        real_fsync = os.fsync
        calls = []

        def fsync_once_eio(fd: int) -> None:
            calls.append(fd)
            if len(calls) == 1:
                raise OSError(errno.EIO, "Input/output error")
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync_once_eio)
        with pytest.raises(OSError):
            await asyncio.wait_for(commit.wait_durable(log, first.last_offset + 1), 30)
        with pytest.raises(OSError):  # the fsync would succeed now; the segment says no
            await asyncio.wait_for(commit.wait_durable(log, first.last_offset + 1), 30)
        assert log.high_watermark == 0 and log.failed
        refused = log.append_produced(batch(1), 0)
        assert isinstance(refused, Invalid) and refused.error is ErrorCode.kafka_storage_error
        await commit.stop()
        log.close()
        io.shutdown()

    asyncio.run(scenario())


def test_roll_waits_for_pending_writes_before_fsyncing_the_old_segment(tmp_path: Path) -> None:
    io = IoThread()
    one = len(batch(0))
    log = PartitionLog("t", 0, tmp_path / "t-0", TopicConfig({"segment.bytes": one * 5}, BrokerConfig()), 0, writer=io)
    for i in range(23):
        log.append_produced(batch(i), 0)
    # Rolled segments are complete on disk the moment the roll returns.
    for segment in log.segments[:-1]:
        data = segment.log_path.read_bytes()
        assert len(data) == segment.size
        assert [h.base_offset for _, h in scan(data, verify_crc=True)][-1] == segment.next_offset - 1
    log.close()
    io.shutdown()


def test_a_lazily_marked_partition_rides_with_the_next_flush_or_flushes_within_the_limit(tmp_path: Path) -> None:
    """The transaction coordinator's Complete record: nobody waits for it, so it starts no flush
    of its own; it becomes durable with the next flush, or after LAZY_FLUSH_MS at the latest."""
    from onceflow.broker import group_commit

    async def scenario() -> None:
        io, commit = started_commit()
        lazy, busy = open_log(tmp_path / "lazy-0", io), open_log(tmp_path / "busy-0", io)
        lazy.append_produced(batch(0), 0)
        commit.mark_lazy(lazy)
        await asyncio.sleep(0)
        assert not (commit._scheduled or commit._flushing), "no flush of its own"
        assert (commit.flushes, lazy.high_watermark) == (0, 0)

        written = busy.append_produced(batch(0), 0)
        await asyncio.wait_for(commit.wait_durable(busy, written.last_offset + 1), 30)
        assert lazy.high_watermark == 1, "it rode with the other partition's flush"

        lazy.append_produced(batch(1), 0)
        commit.mark_lazy(lazy)
        flushes = commit.flushes
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while lazy.high_watermark < 2 and loop.time() < deadline:
            await asyncio.sleep(group_commit.LAZY_FLUSH_MS / 1000 / 5)
        assert lazy.high_watermark == 2 and commit.flushes == flushes + 1, "flushed on its own, within the limit"
        await commit.stop()
        for log in (lazy, busy):
            log.close()
        io.shutdown()

    asyncio.run(scenario())


def test_stopping_makes_a_lazily_marked_partition_durable(tmp_path: Path) -> None:
    async def scenario() -> int:
        io, commit = started_commit()
        log = open_log(tmp_path / "t-0", io)
        log.append_produced(batch(0), 0)
        commit.mark_lazy(log)
        await commit.stop()
        hw = log.high_watermark
        log.close()
        io.shutdown()
        return hw

    assert asyncio.run(scenario()) == 1
