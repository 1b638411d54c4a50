"""DeleteRecords (KIP-107) on a PartitionLog, on real files: the log start offset moves inside a
segment, whole segments below it go, reads below it are OFFSET_OUT_OF_RANGE, the last stable
offset and the aborted-transaction index stay right, and the new start survives a clean restart
and a crash (Kafka's ``Partition.deleteRecordsOnLeader``, ``UnifiedLog.maybeIncrementLogStartOffset``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onceflow.clock import FakeClock
from onceflow.config import BrokerConfig, TopicConfig
from onceflow.log import partition_log as partition_log_module
from onceflow.log.compaction import clean_partition
from onceflow.log.partition_log import LOG_START_CHECKPOINT, PartitionLog, ReadResult
from onceflow.protocol.errors import ErrorCode
from onceflow.records.batch import Invalid, scan
from onceflow.records.builder import build_batch

T0 = 1_700_000_000_000
#: Three records of 10 bytes: a batch of 3 offsets.
BATCH = len(build_batch([(None, b"x" * 10)] * 3, T0))
#: Two such batches per segment: segments of 6 offsets.
SMALL = {"segment.bytes": 2 * BATCH}


def open_log(path: Path, clock: FakeClock, clean: bool = True, **overrides: object) -> PartitionLog:
    config = TopicConfig(dict(SMALL) | dict(overrides), BrokerConfig())
    return PartitionLog("t", 0, path, config, clock.now_ms(), clean_shutdown=clean)


def flush(log: PartitionLog) -> None:
    point = log.flush_point()
    if point is not None:
        point.segment.flush()
        log.on_flushed(point)


def batch(ts: int) -> bytes:
    return build_batch([(None, b"x" * 10)] * 3, ts)


def txn(producer_id: int, seq: int, ts: int) -> bytes:
    return build_batch([(None, b"t" * 10)], ts, producer_id=producer_id, producer_epoch=0, base_sequence=seq,
                       transactional=True)


def offsets_of(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for _, h in scan(data)]


def append(log: PartitionLog, records: bytes, clock: FakeClock) -> int:
    result = log.append_produced(records, clock.now_ms())
    assert not isinstance(result, Invalid), result
    return result.base_offset


def abort(log: PartitionLog, producer_id: int, clock: FakeClock) -> int:
    offset = log.append_marker(producer_id, 0, False, 0, clock.now_ms())
    assert not isinstance(offset, Invalid), offset
    return offset


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def five_batches(tmp_path: Path, clock: FakeClock, **overrides: object) -> PartitionLog:
    """Offsets 0-14 in batches of 3, timestamps T0, T0+1000...; segments [0,6) [6,12) [12,15)."""
    log = open_log(tmp_path / "t-0", clock, **overrides)
    for i in range(5):
        append(log, batch(T0 + 1000 * i), clock)
    flush(log)
    assert [s.base_offset for s in log.segments] == [0, 6, 12] and log.high_watermark == 15
    return log


def test_the_log_start_moves_inside_a_segment_and_whole_segments_below_it_are_deleted(
        tmp_path: Path, clock: FakeClock) -> None:
    log = five_batches(tmp_path, clock)
    assert log.delete_records(8) == (ErrorCode.none, 8)
    assert log.log_start_offset == 8
    assert [s.base_offset for s in log.segments] == [6, 12], "[0,6) is wholly below 8; [6,12) holds 8"
    assert not (log.dir / f"{0:020d}.log").exists()
    assert log.read(7, 1 << 20) is ErrorCode.offset_out_of_range
    assert log.read(0, 1 << 20) is ErrorCode.offset_out_of_range
    at_start = log.read(8, 1 << 20)
    # The batch holding the log start is returned whole, as Kafka does; the client skips below it.
    assert isinstance(at_start, ReadResult) and offsets_of(at_start.records) == [(6, 8), (9, 11)]
    assert at_start.log_start_offset == 8
    # Never down: an offset at or below the log start changes nothing and answers the log start.
    assert log.delete_records(5) == (ErrorCode.none, 8)
    assert log.delete_records(8) == (ErrorCode.none, 8)
    # An offset at a segment boundary deletes the segment before it, never the active one.
    assert log.delete_records(12) == (ErrorCode.none, 12)
    assert [s.base_offset for s in log.segments] == [12]
    # -1 is the high watermark: everything goes, the active segment stays (empty of readable records).
    assert log.delete_records(-1) == (ErrorCode.none, 15)
    assert [s.base_offset for s in log.segments] == [12] and log.log_end_offset == 15
    assert log.read(14, 1 << 20) is ErrorCode.offset_out_of_range
    empty = log.read(15, 1 << 20)
    assert isinstance(empty, ReadResult) and empty.records == b""
    # Appends go on from the log end.
    assert append(log, batch(T0 + 9000), clock) == 15
    flush(log)
    assert log.delete_records(16) == (ErrorCode.none, 16)
    log.close()


def test_bad_offsets_and_policies_get_kafkas_errors_and_change_nothing(tmp_path: Path, clock: FakeClock) -> None:
    log = five_batches(tmp_path, clock)
    append(log, batch(T0), clock)  # 15-17 written, not durable: above the high watermark
    assert (log.high_watermark, log.log_end_offset) == (15, 18)
    for offset in (16, 18, 1 << 40, -2, -100):
        assert log.delete_records(offset) == (ErrorCode.offset_out_of_range, -1), offset
    assert log.log_start_offset == 0 and not (log.dir / LOG_START_CHECKPOINT).exists()
    assert log.delete_records(15) == (ErrorCode.none, 15), "the high watermark itself is allowed"
    log.close()
    compacted = open_log(tmp_path / "c-0", clock, **{"cleanup.policy": ["compact"]})
    append(compacted, build_batch([(b"k", b"v")] * 3, T0), clock)
    flush(compacted)
    for offset in (1, -1, 99):  # the policy is checked first, as Kafka does
        assert compacted.delete_records(offset) == (ErrorCode.policy_violation, -1)
    assert compacted.log_start_offset == 0 and not (compacted.dir / LOG_START_CHECKPOINT).exists()
    compacted.close()
    both = open_log(tmp_path / "b-0", clock, **{"cleanup.policy": ["compact", "delete"]})
    append(both, build_batch([(b"k", b"v")] * 3, T0), clock)
    flush(both)
    assert both.delete_records(2) == (ErrorCode.none, 2)
    both.close()


def test_a_failed_checkpoint_write_changes_nothing(tmp_path: Path, clock: FakeClock,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    log = five_batches(tmp_path, clock)

    def full_disk(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(partition_log_module, "write_partition_checkpoint", full_disk)
    assert log.delete_records(8) == (ErrorCode.kafka_storage_error, -1)
    assert log.log_start_offset == 0 and [s.base_offset for s in log.segments] == [0, 6, 12]
    monkeypatch.undo()
    assert log.delete_records(8) == (ErrorCode.none, 8)
    log.close()


@pytest.mark.parametrize("clean", [True, False], ids=["clean-restart", "crash"])
def test_the_log_start_survives_a_restart(tmp_path: Path, clock: FakeClock, clean: bool) -> None:
    log = five_batches(tmp_path, clock)
    assert log.delete_records(8) == (ErrorCode.none, 8)
    assert (log.dir / LOG_START_CHECKPOINT).read_text() == "0\n1\nt 0 8\n"
    if clean:
        assert log.flush_all()
    log.close()  # without flush_all: as after kill -9
    log = open_log(tmp_path / "t-0", clock, clean=clean)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (8, 15, 15)
    assert log.read(7, 1 << 20) is ErrorCode.offset_out_of_range
    assert offsets_of(log.read(8, 1 << 20).records)[0] == (6, 8)  # type: ignore[union-attr]
    log.close()


def test_a_crash_before_the_segments_were_deleted_keeps_the_log_start_and_retention_deletes_them(
        tmp_path: Path, clock: FakeClock) -> None:
    """The ``delete-records`` fault point's state: the checkpoint is durable, no segment deleted.
    The next retention check deletes them, whatever the cleanup policy (Kafka's
    ``deleteLogStartOffsetBreachedSegments``)."""
    log = five_batches(tmp_path, clock, **{"retention.ms": -1})
    log.close()
    (tmp_path / "t-0" / LOG_START_CHECKPOINT).write_text("0\n1\nt 0 13\n")
    log = open_log(tmp_path / "t-0", clock, clean=False, **{"retention.ms": -1})
    assert [s.base_offset for s in log.segments] == [0, 6, 12] and log.log_start_offset == 13
    assert log.read(12, 1 << 20) is ErrorCode.offset_out_of_range
    assert log.enforce_retention(clock.now_ms()) == 2
    assert [s.base_offset for s in log.segments] == [12] and log.log_start_offset == 13
    log.close()


def test_a_checkpoint_past_the_log_end_restarts_the_log_empty_there(tmp_path: Path, clock: FakeClock) -> None:
    """Only lost files can do this (the checkpoint is never past the durable high watermark); as
    Kafka's LogLoader, the log restarts at the checkpoint, so no offset is used twice."""
    log = five_batches(tmp_path, clock)
    log.close()
    (tmp_path / "t-0" / LOG_START_CHECKPOINT).write_text("0\n1\nt 0 40\n")
    log = open_log(tmp_path / "t-0", clock, clean=False)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (40, 40, 40)
    assert [s.base_offset for s in log.segments] == [40]
    assert append(log, batch(T0), clock) == 40
    log.close()


def test_an_unreadable_checkpoint_is_ignored(tmp_path: Path, clock: FakeClock) -> None:
    log = five_batches(tmp_path, clock)
    log.close()
    (tmp_path / "t-0" / LOG_START_CHECKPOINT).write_text("garbage")
    log = open_log(tmp_path / "t-0", clock)
    assert log.log_start_offset == 0
    log.close()


def test_a_lookup_by_timestamp_skips_the_records_below_the_log_start(tmp_path: Path, clock: FakeClock) -> None:
    log = five_batches(tmp_path, clock)
    assert log.offset_for_timestamp(T0) == (0, T0)
    assert log.delete_records(8) == (ErrorCode.none, 8)
    # The batch [6,8] has timestamp T0+2000: its record 8 is the first at or after T0 still readable.
    assert log.offset_for_timestamp(T0) == (8, T0 + 2000)
    assert log.offset_for_timestamp(T0 + 2000) == (8, T0 + 2000)
    assert log.offset_for_timestamp(T0 + 3000) == (9, T0 + 3000)
    log.close()


def test_retention_after_delete_records(tmp_path: Path, clock: FakeClock) -> None:
    log = five_batches(tmp_path, clock, **{"retention.bytes": BATCH})
    assert log.delete_records(8) == (ErrorCode.none, 8)
    assert log.enforce_retention(clock.now_ms()) == 1, "[6,12) goes by size: [12,15) alone is the limit"
    assert log.log_start_offset == 12 and [s.base_offset for s in log.segments] == [12]
    log.close()
    log = open_log(tmp_path / "t-0", clock, clean=False)
    assert log.log_start_offset == 12, "the stale checkpoint (8) is below the first segment: ignored"
    log.close()


# -- transactions ----------------------------------------------------------------------------------


def test_aborted_transactions_below_the_cut_are_no_longer_listed_and_those_across_it_are(
        tmp_path: Path, clock: FakeClock) -> None:
    """Producer 7's transaction [0, 1] is aborted below the cut; producer 8's begins below it (2)
    and is aborted after it (marker 7): a read_committed fetch from the new start must still be
    told to drop producer 8's records at 6, and is not told about producer 7."""
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 1 << 20})
    assert append(log, txn(7, 0, T0), clock) == 0
    assert abort(log, 7, clock) == 1
    assert append(log, txn(8, 0, T0), clock) == 2
    assert append(log, batch(T0), clock) == 3  # 3-5
    assert append(log, txn(8, 1, T0), clock) == 6
    assert abort(log, 8, clock) == 7
    assert append(log, batch(T0), clock) == 8  # 8-10
    flush(log)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in log.aborted_transactions(0, 11)] == [
        (7, 0, 1), (8, 2, 7)]
    assert log.delete_records(4) == (ErrorCode.none, 4)
    assert log.last_stable_offset == log.high_watermark == 11
    result = log.read(4, 1 << 20, committed=True)
    assert isinstance(result, ReadResult)
    assert [(a.producer_id, a.first_offset) for a in result.aborted or []] == [(8, 2)]
    assert log.delete_records(8) == (ErrorCode.none, 8)
    result = log.read(8, 1 << 20, committed=True)
    assert isinstance(result, ReadResult) and result.aborted == [], "both aborts are wholly below 8"
    log.close()


@pytest.mark.parametrize("segment_bytes", [2 * BATCH, 1 << 20], ids=["its-segment-deleted", "one-segment"])
@pytest.mark.parametrize("clean", [True, False], ids=["clean-restart", "crash"])
def test_an_open_transaction_across_the_cut_holds_the_lso_at_the_log_start(
        tmp_path: Path, clock: FakeClock, clean: bool, segment_bytes: int) -> None:
    """Producer 9's transaction begins at 3 and is still open when the log start moves to 8: in
    the next segment (the first, where it began, is deleted), or in the same one.  The LSO is the
    log start (Kafka: the first unstable offset, bounded below by the log start offset), not 3 and
    not the high watermark, also after a restart (with one segment, only a replay of the records
    below the log start can rebuild the transaction); the abort then releases it and is listed for
    a read_committed fetch from 8."""
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": segment_bytes})
    append(log, batch(T0), clock)  # 0-2
    assert append(log, txn(9, 0, T0), clock) == 3
    for _ in range(3):
        append(log, batch(T0), clock)  # 4-6, 7-9, 10-12
    flush(log)
    small = segment_bytes == 2 * BATCH
    assert [s.base_offset for s in log.segments] == ([0, 4, 10] if small else [0])
    assert log.last_stable_offset == 3
    assert log.delete_records(8) == (ErrorCode.none, 8)
    assert [s.base_offset for s in log.segments] == ([4, 10] if small else [0])
    assert log.last_stable_offset == 8 < log.high_watermark
    empty = log.read(8, 1 << 20, committed=True)
    assert isinstance(empty, ReadResult) and empty.records == b""
    if clean:
        assert log.flush_all()
    log.close()
    log = open_log(tmp_path / "t-0", clock, clean=clean, **{"segment.bytes": segment_bytes})
    assert log.producer_state.ongoing_transactions() == [(9, 3)], "rebuilt although it began below the log start"
    assert (log.log_start_offset, log.last_stable_offset) == (8, 8)
    marker = abort(log, 9, clock)
    flush(log)
    assert log.last_stable_offset == log.high_watermark == marker + 1
    result = log.read(8, 1 << 20, committed=True)
    assert isinstance(result, ReadResult) and [(a.producer_id, a.first_offset) for a in result.aborted or []] == [(9, 3)]
    log.close()


def test_an_open_transaction_above_the_cut_keeps_its_lso(tmp_path: Path, clock: FakeClock) -> None:
    log = five_batches(tmp_path, clock)
    assert append(log, txn(5, 0, T0), clock) == 15
    append(log, batch(T0), clock)
    flush(log)
    assert log.delete_records(10) == (ErrorCode.none, 10)
    assert log.last_stable_offset == 15
    log.close()


def test_compaction_after_delete_records_keeps_the_log_start(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock, **{"cleanup.policy": ["compact", "delete"]})
    for i in range(6):
        append(log, build_batch([(f"k{i % 2}".encode(), b"v" * 10)] * 3, T0 + i), clock)
    flush(log)
    assert len(log.segments) >= 3
    assert log.delete_records(7) == (ErrorCode.none, 7)
    clean_partition(log, clock.now_ms(), force=True)
    assert log.log_start_offset == 7
    assert log.read(6, 1 << 20) is ErrorCode.offset_out_of_range
    log.close()
