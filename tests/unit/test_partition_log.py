"""PartitionLog and Segment on real files, with an injected clock: append, read, roll,
retention, timestamps, crash recovery and clean restarts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from onceflow.clock import FakeClock
from onceflow.config import BrokerConfig, TopicConfig
from onceflow.log.partition_log import FlushPoint, PartitionLog, ReadResult
from onceflow.protocol.errors import ErrorCode
from onceflow.records.batch import CRC_START, Invalid, read_header, scan
from onceflow.records.builder import build_batch


def config(**overrides: object) -> TopicConfig:
    return TopicConfig(dict(overrides), BrokerConfig())


def open_log(path: Path, clock: FakeClock, clean: bool = True, **overrides: object) -> PartitionLog:
    return PartitionLog("t", 0, path, config(**overrides), clock.now_ms(), clean_shutdown=clean)


def flush(log: PartitionLog) -> None:
    point = log.flush_point()
    if point is not None:
        point.segment.flush()
        log.on_flushed(point)


def batch(n: int, ts: int, size: int = 10, tag: bytes = b"") -> bytes:
    return build_batch([(None, tag + bytes([i % 256]) * size) for i in range(n)], ts)


def offsets_of(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for _, h in scan(data)]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000_000)


def test_append_assigns_consecutive_offsets_and_high_watermark_follows_flush(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    r1 = log.append_produced(batch(3, clock.now_ms()), clock.now_ms())
    r2 = log.append_produced(batch(2, clock.now_ms()), clock.now_ms())
    assert (r1.base_offset, r1.last_offset, r2.base_offset, r2.last_offset) == (0, 2, 3, 4)
    assert log.log_end_offset == 5
    assert log.high_watermark == 0, "nothing is visible before it is durable"
    assert log.read(0, 1 << 20) == ReadResult(b"", 0, 0)
    flush(log)
    assert log.high_watermark == 5
    result = log.read(0, 1 << 20)
    assert isinstance(result, ReadResult)
    assert offsets_of(result.records) == [(0, 2), (3, 4)]
    # Offsets were patched into the stored bytes; the CRC is still valid.
    for _, header in scan(result.records, verify_crc=True):
        assert header.partition_leader_epoch == 0
    log.close()


def test_a_segment_holding_little_takes_little_disk_and_a_growing_one_at_most_twice_its_data(
        tmp_path: Path, clock: FakeClock) -> None:
    """Preallocation grows with the segment: a partition with one record (one of a sink's progress
    topic's hundreds) is not given 4 MiB of blocks."""
    log = open_log(tmp_path / "t-0", clock)
    log.append_produced(batch(1, clock.now_ms()), clock.now_ms())
    flush(log)
    path = next((tmp_path / "t-0").glob("*.log"))
    assert path.stat().st_blocks * 512 <= 128 << 10
    for _ in range(60):
        log.append_produced(batch(16, clock.now_ms(), size=1000), clock.now_ms())
    flush(log)
    data = path.stat().st_size
    assert data > 900_000 and path.stat().st_blocks * 512 <= 2 * data + (64 << 10)
    log.close()


def test_refused_batches_change_nothing(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock, **{"max.message.bytes": 200})
    good = batch(1, clock.now_ms())
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    cases = {
        bytes(bad_crc): ErrorCode.corrupt_message,
        # Kafka's codes for bytes that are not one whole batch (ByteBufferLogInputStream, then
        # ProduceRequest.validateRecords): no whole batch is INVALID_RECORD, a length below the
        # smallest record CORRUPT_MESSAGE.
        good[:40]: ErrorCode.invalid_record,
        good[:5]: ErrorCode.invalid_record,
        b"": ErrorCode.invalid_record,
        bytes(8) + (13).to_bytes(4, "big") + bytes(60): ErrorCode.corrupt_message,
        good + good: ErrorCode.invalid_record,
        good + bytes(5): ErrorCode.invalid_record,  # Kafka drops such a tail silently; we refuse
        batch(1, clock.now_ms(), size=300): ErrorCode.message_too_large,
    }
    old_magic = bytearray(good)
    old_magic[16] = 1
    cases[bytes(old_magic)] = ErrorCode.invalid_record
    for payload, expected in cases.items():
        result = log.append_produced(payload, clock.now_ms())
        assert isinstance(result, Invalid) and result.error is expected, (result, expected)
    assert log.log_end_offset == 0 and log.segments[-1].size == 0
    log.close()


def test_control_and_inconsistent_batches_are_refused(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    control = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], clock.now_ms(), producer_id=1, producer_epoch=0, control=True, transactional=True)
    result = log.append_produced(control, clock.now_ms())
    assert isinstance(result, Invalid) and result.error is ErrorCode.invalid_record
    no_pid = build_batch([(None, b"x")], clock.now_ms(), transactional=True)
    result = log.append_produced(no_pid, clock.now_ms())
    assert isinstance(result, Invalid) and result.error is ErrorCode.invalid_record
    # A producer id without a sequence (issue 7, defect 5): refused as Kafka's LogValidator does,
    # and the producer's state is untouched, so its next batch in sequence is accepted.
    for transactional in (False, True):
        no_seq = build_batch([(None, b"x")], clock.now_ms(), producer_id=5, producer_epoch=0, transactional=transactional)
        result = log.append_produced(no_seq, clock.now_ms())
        assert isinstance(result, Invalid) and result.error is ErrorCode.invalid_record
    assert log.log_end_offset == 0 and log.producer_state.producer(5) is None
    ok = log.append_produced(build_batch([(None, b"x")], clock.now_ms(), producer_id=5, producer_epoch=0, base_sequence=0),
                             clock.now_ms())
    assert not isinstance(ok, Invalid) and ok.base_offset == 0
    log.close()


def test_read_honours_max_bytes_but_returns_one_whole_batch(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    sizes = []
    for _ in range(5):
        b = batch(4, clock.now_ms(), size=100)
        sizes.append(len(b))
        log.append_produced(b, clock.now_ms())
    flush(log)
    tiny = log.read(0, 10)
    assert isinstance(tiny, ReadResult) and len(tiny.records) == sizes[0]
    # Without min_one the bytes are cut at max_bytes, mid-batch, as Kafka's LogSegment.read
    # does; clients drop the incomplete batch.
    partial = log.read(0, 10, min_one=False)
    assert isinstance(partial, ReadResult) and partial.records == tiny.records[:10]
    two = log.read(0, sizes[0] + sizes[1])
    assert offsets_of(two.records) == [(0, 3), (4, 7)]
    # A fetch from the middle of a batch starts at that batch.
    mid = log.read(6, 1 << 20)
    assert offsets_of(mid.records)[0] == (4, 7)
    assert log.read(21, 100) is ErrorCode.offset_out_of_range
    assert log.read(20, 100) == ReadResult(b"", 20, 0)
    # An explicit upper bound (the LSO, later) stops the read at a batch boundary.
    bounded = log.read(0, 1 << 20, max_offset=8)
    assert offsets_of(bounded.records) == [(0, 3), (4, 7)]
    log.close()


def test_segments_roll_by_size_and_reads_cross_into_the_next(tmp_path: Path, clock: FakeClock) -> None:
    one = len(batch(1, 0, size=100))
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": one * 3, "index.interval.bytes": 0})
    for _ in range(10):
        log.append_produced(batch(1, clock.now_ms(), size=100), clock.now_ms())
    flush(log)
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    for offset in range(10):
        got = log.read(offset, 1 << 20)
        assert offsets_of(got.records)[0] == (offset, offset), offset
    log.close()


def test_segments_roll_by_age(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock, **{"segment.ms": 1000})
    log.append_produced(batch(1, clock.now_ms()), clock.now_ms())
    clock.advance(500)
    log.append_produced(batch(1, clock.now_ms()), clock.now_ms())
    assert len(log.segments) == 1
    clock.advance(600)
    log.append_produced(batch(1, clock.now_ms()), clock.now_ms())
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_segment_age_is_counted_in_record_time_as_kafka_does(tmp_path: Path, clock: FakeClock) -> None:
    """Kafka's LogSegment.timeWaitedForRoll: the incoming batch's max timestamp minus the first
    batch's, not the wall clock.  Back-dated records (a replay, a migration) do not roll a segment
    per batch; records a segment.ms apart in record time roll one even when appended at once."""
    log = open_log(tmp_path / "t-0", clock, **{"segment.ms": 1000})
    old = clock.now_ms() - 86_400_000  # a day in the past
    for _ in range(3):
        log.append_produced(batch(1, old), clock.now_ms())
    assert len(log.segments) == 1, "the same (old) record time: no roll"
    log.append_produced(batch(1, old + 1001), clock.now_ms())
    assert [s.base_offset for s in log.segments] == [0, 3]
    log.close()


def test_retention_by_time_and_size(tmp_path: Path, clock: FakeClock) -> None:
    one = len(batch(1, 0, size=100))
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": one, "retention.ms": 10_000})
    for _ in range(4):
        log.append_produced(batch(1, clock.now_ms(), size=100), clock.now_ms())
        clock.advance(4_000)
    flush(log)
    assert len(log.segments) == 4
    # Segments' newest records are 16, 12, 8 and 4 seconds old: the first two are expired.
    assert log.enforce_retention(clock.now_ms()) == 2
    assert log.log_start_offset == 2
    assert log.read(0, 100) is ErrorCode.offset_out_of_range
    assert offsets_of(log.read(2, 1 << 20).records) == [(2, 2)]
    log.config = config(**{"segment.bytes": one, "retention.ms": -1, "retention.bytes": one})
    assert log.enforce_retention(clock.now_ms()) == 1
    assert log.log_start_offset == 3 and log.log_end_offset == 4
    # Once everything is expired the active segment is rolled and deleted too.
    clock.advance(100_000)
    log.config = config(**{"segment.bytes": one, "retention.ms": 1000})
    assert log.enforce_retention(clock.now_ms()) == 1
    assert log.log_start_offset == 4 and log.log_end_offset == 4
    log.close()


def test_retention_never_deletes_above_the_high_watermark(tmp_path: Path, clock: FakeClock) -> None:
    one = len(batch(1, 0, size=100))
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": one, "retention.ms": 1})
    log.append_produced(batch(1, clock.now_ms(), size=100), clock.now_ms())
    log.append_produced(batch(1, clock.now_ms(), size=100), clock.now_ms())
    clock.advance(10)
    assert log.enforce_retention(clock.now_ms()) == 0, "not durable yet"
    flush(log)
    assert log.enforce_retention(clock.now_ms()) == 2
    log.close()


def test_offset_for_timestamp_finds_the_first_record_at_or_after(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock, **{"index.interval.bytes": 0})
    base = 1_000_000
    for b in range(5):  # batch b holds records with timestamps base + 100*b + {0, 10, 20}
        stamps = [base + 100 * b + 10 * i for i in range(3)]
        log.append_produced(build_batch([(None, b"x")] * 3, 0, timestamps=stamps), clock.now_ms())
    flush(log)
    assert log.offset_for_timestamp(0) == (0, base)
    assert log.offset_for_timestamp(base + 10) == (1, base + 10)
    assert log.offset_for_timestamp(base + 15) == (2, base + 20)
    assert log.offset_for_timestamp(base + 21) == (3, base + 100)
    assert log.offset_for_timestamp(base + 420) == (14, base + 420)
    assert log.offset_for_timestamp(base + 421) is None
    assert log.max_timestamp_offset() == (14, base + 420)
    log.close()


def test_clean_restart_reopens_without_rescanning(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, clock, **{"index.interval.bytes": 0})
    for _ in range(10):
        log.append_produced(batch(2, clock.now_ms()), clock.now_ms())
    flush(log)
    log.flush_all()
    log.close()
    # Damage a byte inside the first batch's records: a full scan would notice (CRC),
    # a clean-shutdown open must not read that far.
    with open(path / "00000000000000000000.log", "r+b") as f:
        f.seek(CRC_START + 50)
        byte = f.read(1)
        f.seek(CRC_START + 50)
        f.write(bytes([byte[0] ^ 0xFF]))
    reopened = open_log(path, clock, clean=True, **{"index.interval.bytes": 0})
    assert reopened.log_end_offset == 20 and reopened.high_watermark == 20
    reopened.close()
    # The same file after a crash is recovered: everything from the damaged batch is cut.
    recovered = open_log(path, clock, clean=False, **{"index.interval.bytes": 0})
    assert recovered.log_end_offset == 0
    recovered.close()


@pytest.mark.parametrize("damage", ["partial-header", "partial-batch", "bad-crc", "garbage"])
def test_crash_recovery_truncates_a_torn_tail(tmp_path: Path, clock: FakeClock, damage: str) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, clock, **{"index.interval.bytes": 100})
    for i in range(20):
        log.append_produced(batch(3, clock.now_ms() + i, size=50), clock.now_ms())
    flush(log)
    good = log.read(0, 1 << 30)
    assert isinstance(good, ReadResult)
    log.close()  # no flush_all / marker: as after kill -9
    tail = batch(2, clock.now_ms(), size=50)
    stamped = (60).to_bytes(8, "big") + tail[8:]
    with open(path / "00000000000000000000.log", "ab") as f:
        if damage == "partial-header":
            f.write(stamped[:30])
        elif damage == "partial-batch":
            f.write(stamped[:-5])
        elif damage == "bad-crc":
            broken = bytearray(stamped)
            broken[-3] ^= 0x55
            f.write(broken)
        else:
            f.write(os.urandom(500))
    # Also damage the index, which recovery must rebuild.
    (path / "00000000000000000000.index").write_bytes(b"\x01\x02\x03")
    recovered = open_log(path, clock, clean=False, **{"index.interval.bytes": 100})
    assert recovered.log_end_offset == 60
    assert recovered.read(0, 1 << 30) == ReadResult(good.records, 60, 0)
    for offset in range(60):
        got = recovered.read(offset, 1)
        assert read_header(got.records).base_offset == offset - offset % 3
    # Appending continues at the right offset after recovery.
    assert recovered.append_produced(batch(1, clock.now_ms()), clock.now_ms()).base_offset == 60
    recovered.close()


def test_recovery_handles_batches_larger_than_the_read_window(tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    import onceflow.log.segment as segment_module

    monkeypatch.setattr(segment_module, "_RECOVER_CHUNK", 256)
    path = tmp_path / "t-0"
    log = open_log(path, clock)
    for size in (10, 1000, 10, 3000, 10):
        log.append_produced(batch(1, clock.now_ms(), size=size), clock.now_ms())
    log.close()
    recovered = open_log(path, clock, clean=False)
    assert recovered.log_end_offset == 5
    recovered.close()


def test_flush_point_and_high_watermark_position_bound_reads(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    log.append_produced(batch(1, clock.now_ms()), clock.now_ms())
    point = log.flush_point()
    assert isinstance(point, FlushPoint) and point.offset == 1
    log.append_produced(batch(1, clock.now_ms()), clock.now_ms())
    point.segment.flush()
    log.on_flushed(point)  # only the first batch was covered by that flush
    assert log.high_watermark == 1
    assert offsets_of(log.read(0, 1 << 20).records) == [(0, 0)]
    flush(log)
    assert offsets_of(log.read(0, 1 << 20).records) == [(0, 0), (1, 1)]
    log.close()


def test_an_abort_before_a_mid_segment_snapshot_survives_a_crash(tmp_path: Path, clock: FakeClock) -> None:
    """A clean shutdown snapshots producer state in the middle of the active segment; after a
    later crash that segment's transaction index is rebuilt by replaying it from an older
    snapshot (or the log start), so an abort recorded before the snapshot is not lost."""
    path = tmp_path / "t-0"
    log = open_log(path, clock)
    txn = build_batch([(None, b"aborted")], clock.now_ms(), producer_id=7, producer_epoch=0, base_sequence=0,
                      transactional=True)
    assert not isinstance(log.append_produced(txn, clock.now_ms()), Invalid)
    assert not isinstance(log.append_marker(7, 0, False, 0, clock.now_ms()), Invalid)
    flush(log)
    log.flush_all()  # a clean shutdown: producer snapshot at the log end, inside the active segment
    log.close()
    log = open_log(path, clock, clean=True)
    assert [a.producer_id for a in log.aborted_transactions(0, 10)] == [7]
    log.append_produced(batch(1, clock.now_ms()), clock.now_ms())
    flush(log)
    log.close()  # no flush_all: as after kill -9
    crashed = open_log(path, clock, clean=False)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in crashed.aborted_transactions(0, 10)] == [(7, 0, 1)]
    result = crashed.read(0, 1 << 20, committed=True)
    assert isinstance(result, ReadResult) and [a.producer_id for a in result.aborted or []] == [7]
    crashed.close()


def _txn(producer_id: int, seq: int, value: bytes, ts: int, key: bytes | None = None) -> bytes:
    return build_batch([(key, value)], ts, producer_id=producer_id, producer_epoch=0, base_sequence=seq, transactional=True)


def test_an_abort_several_segments_after_the_fetch_is_listed_for_the_fetch(tmp_path: Path, clock: FakeClock) -> None:
    """Issue 7, defect 1: a transaction open across several rolls and then aborted.  The ABORT's
    index entry sits segments after the one holding the fetch offset; the lookup must still find
    it, or read_committed consumers are handed the aborted record as if it were committed."""
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 1024})
    assert log.append_produced(_txn(7, 0, b"aborted", clock.now_ms()), clock.now_ms()).base_offset == 0
    for _ in range(40):
        log.append_produced(batch(1, clock.now_ms(), size=100), clock.now_ms())
    abort_at = log.append_marker(7, 0, False, 0, clock.now_ms())
    flush(log)
    assert len(log.segments) >= 4 and log.segment_for(abort_at) >= 2, "the marker must land two or more segments on"
    for fetch_offset in (0, 1, log.segments[1].base_offset):
        first_segment_end = log.segments[log.segment_for(fetch_offset)].next_offset
        listed = log.aborted_transactions(fetch_offset, first_segment_end)
        assert [(a.producer_id, a.first_offset, a.last_offset) for a in listed] == [(7, 0, abort_at)], fetch_offset
    result = log.read(0, 1 << 20, committed=True)
    assert isinstance(result, ReadResult) and offsets_of(result.records)[0] == (0, 0)
    assert [a.producer_id for a in result.aborted or []] == [7], "the fetch carrying offset 0 must say it was aborted"
    log.close()


def test_retention_under_an_open_transaction_keeps_the_lso_at_the_log_start(tmp_path: Path, clock: FakeClock) -> None:
    """Issue 7, defect 3: retention deletes the segments where an open transaction began.  The
    last stable offset stays at the log start (Kafka), never below it, so read_committed
    consumers are never sent out of range; the abort then releases it."""
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 1024, "retention.bytes": 2048})
    log.append_produced(_txn(7, 0, b"open", clock.now_ms()), clock.now_ms())
    for _ in range(40):
        log.append_produced(batch(1, clock.now_ms(), size=100), clock.now_ms())
    flush(log)
    assert log.enforce_retention(clock.now_ms()) > 0 and log.log_start_offset > 0
    assert log.last_stable_offset == log.log_start_offset
    empty = log.read(log.last_stable_offset, 1 << 20, committed=True)
    assert isinstance(empty, ReadResult) and empty.records == b""
    log.close()  # as after kill -9: the open transaction is rebuilt from the snapshot at the log start
    log = open_log(tmp_path / "t-0", clock, clean=False, **{"segment.bytes": 1024, "retention.bytes": 2048})
    assert log.producer_state.ongoing_transactions() == [(7, 0)]
    assert log.last_stable_offset == log.log_start_offset > 0
    abort_at = log.append_marker(7, 0, False, 0, clock.now_ms())
    flush(log)
    assert log.last_stable_offset == log.high_watermark == abort_at + 1
    log.close()
    reopened = open_log(tmp_path / "t-0", clock, clean=False)
    assert reopened.last_stable_offset == reopened.high_watermark
    reopened.close()


def test_a_crash_after_two_clean_restarts_replays_only_the_active_segment(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 7, defect 4: roll, clean restart, clean restart, kill -9.  Recovery must find a
    producer-state snapshot at the active segment's base and replay from there, so that restart
    time does not grow with the log."""
    from onceflow.log.producer_state import ProducerStateManager

    path = tmp_path / "t-0"
    settings = {"segment.bytes": 1024}
    log = open_log(path, clock, **settings)
    for seq in range(40):
        log.append_produced(build_batch([(None, b"v" * 100)], clock.now_ms(), producer_id=3, producer_epoch=0,
                                        base_sequence=seq), clock.now_ms())
    flush(log)
    active_base = log.segments[-1].base_offset
    assert active_base > 0
    for _ in range(2):  # two clean restarts, each adding a snapshot at the log end
        log.flush_all()
        log.close()
        log = open_log(path, clock, **settings)
        log.append_produced(build_batch([(None, b"more")], clock.now_ms(), producer_id=3, producer_epoch=0,
                                        base_sequence=log.producer_state.producer(3).last_seq + 1), clock.now_ms())
        flush(log)
    assert log.segments[-1].base_offset == active_base
    log.close()  # kill -9: no snapshot at the end this time

    replayed_from: list[int] = []
    original = ProducerStateManager.load

    def spy(self: ProducerStateManager, start: int, end: int) -> int:
        replayed_from.append(original(self, start, end))
        return replayed_from[-1]

    monkeypatch.setattr(ProducerStateManager, "load", spy)
    crashed = open_log(path, clock, clean=False, **settings)
    assert replayed_from == [active_base], "recovery replays the active segment only"
    assert crashed.producer_state.producer(3).last_seq == 41
    crashed.close()
