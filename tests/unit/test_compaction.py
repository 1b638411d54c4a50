"""Log compaction on real files with an injected clock: what a pass keeps and removes, offsets,
tombstones and their delete horizon, transactions and markers, producer state, the swap and its
crash recovery, the dirty-ratio decision and the checkpoint."""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from onceflow.clock import FakeClock
from onceflow.config import BrokerConfig, TopicConfig
from onceflow.log import compaction
from onceflow.log.compaction import (
    build_cleaned,
    clean_partition,
    install_cleaned,
    needs_cleaning,
    plan_cleaning,
    read_checkpoint,
    write_checkpoint,
)
from onceflow.log.partition_log import PartitionLog, ReadResult
from onceflow.log.producer_state import Duplicate, ProducerAppendInfo
from onceflow.log.segment import CLEANED_SUFFIX, SWAP_SUFFIX, segment_files
from onceflow.records.batch import (
    CRC_START,
    DELETE_HORIZON_FLAG,
    HEADER_SIZE,
    BatchHeader,
    read_header,
    scan,
)
from onceflow.records.builder import build_batch
from onceflow.records.control import read_marker
from onceflow.records.records import (
    GZIP,
    encode_batch,
    encode_fields,
    encode_record,
    iter_raw_records,
    iter_records,
)

T0 = 1_700_000_000_000
DAY = 86_400_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def config(broker: dict[str, object] | None = None, **overrides: object) -> TopicConfig:
    topic = {"cleanup.policy": ["compact"], **overrides}
    return TopicConfig(topic, BrokerConfig(broker or {}))


def open_log(path: Path, clock: FakeClock, clean: bool = True, broker: dict[str, object] | None = None,
             **overrides: object) -> PartitionLog:
    return PartitionLog("t", 0, path, config(broker, **overrides), clock.now_ms(), clean_shutdown=clean)


def flush(log: PartitionLog) -> None:
    point = log.flush_point()
    if point is not None:
        point.segment.flush()
        log.on_flushed(point)


def put(log: PartitionLog, clock: FakeClock, *records: tuple[bytes | None, bytes | None], **kw: object) -> int:
    result = log.append_produced(build_batch(list(records), clock.now_ms(), **kw), clock.now_ms())  # type: ignore[arg-type]
    assert not hasattr(result, "error"), result
    return result.base_offset  # type: ignore[union-attr]


def roll(log: PartitionLog, clock: FakeClock) -> None:
    flush(log)
    log.roll(clock.now_ms())
    flush(log)


def batches(log: PartitionLog) -> list[tuple[BatchHeader, bytes]]:
    out = []
    for segment in log.segments:
        data = segment.read(0, segment.size)
        for pos, header in scan(data, verify_crc=True):
            out.append((header, data[pos : pos + header.size]))
        assert sum(h.size for h, _ in out if h.base_offset >= segment.base_offset and h.base_offset < segment.next_offset) == segment.size
    return out


def records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record, in log order."""
    return [(r.offset, r.key, r.value) for h, b in batches(log) if not h.is_control for r in iter_records(b, h)]


def latest_per_key(entries: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, tuple[int, bytes | None]]:
    latest: dict[bytes | None, tuple[int, bytes | None]] = {}
    for offset, key, value in entries:
        latest[key] = (offset, value)
    return latest


def segment_bytes(log: PartitionLog) -> list[bytes]:
    return [s.read(0, s.size) for s in log.segments]


def updates(log: PartitionLog, clock: FakeClock, rounds: int, keys: int = 4, per_batch: int = 2) -> None:
    """``rounds`` values for each of ``keys`` keys, a few records per batch, rolled every round."""
    for r in range(rounds):
        for k in range(0, keys, per_batch):
            put(log, clock, *[(f"k{k + i}".encode(), f"v{r}-{k + i}".encode()) for i in range(per_batch)])
            clock.advance(10)
        roll(log, clock)


# -- the basics ------------------------------------------------------------------------


def test_latest_value_per_key_kept_older_removed_offsets_unchanged(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    updates(log, clock, rounds=6)
    put(log, clock, (b"k0", b"in-the-active-segment"))
    flush(log)
    before = records(log)
    active_before = log.segments[-1].read(0, log.segments[-1].size)
    end_before = log.log_end_offset
    size_before = log.size_bytes

    result = clean_partition(log, clock.now_ms())
    assert result is not None and result.end_offset == log.segments[-1].base_offset

    after = records(log)
    cleaned = [e for e in after if e[0] < log.segments[-1].base_offset]
    expected = latest_per_key([e for e in before if e[0] < log.segments[-1].base_offset])
    assert {k: (o, v) for o, k, v in cleaned} == expected
    assert len(cleaned) == len(expected) == 4
    assert set(after) <= set(before), "survivors keep their offsets and values"
    assert log.segments[-1].read(0, log.segments[-1].size) == active_before, "the active segment is not touched"
    assert (log.log_start_offset, log.log_end_offset) == (0, end_before)
    assert log.size_bytes < size_before
    assert len(log.segments) == 2, "the small cleaned segments were merged into one"
    log.close()


def test_rewritten_batches_have_valid_crcs_keep_offsets_and_decode(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    # One batch of 5 records over 3 keys: offsets 0..4, only 2 (a), 3 (c) and 4 (b) survive.
    put(log, clock, (b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"b", b"2"))
    clock.advance(1000)
    put(log, clock, (b"z", b"1"))
    roll(log, clock)
    original = batches(log)[0]
    clean_partition(log, clock.now_ms())
    header, batch = batches(log)[0]  # scan(verify_crc=True) checked every CRC
    assert (header.base_offset, header.last_offset_delta, header.record_count) == (0, 4, 3)
    assert header.attributes == original[0].attributes and header.base_timestamp == original[0].base_timestamp
    assert [(r.offset, r.key, r.value) for r in iter_records(batch, header)] == [(2, b"a", b"2"), (3, b"c", b"1"), (4, b"b", b"2")]
    kept = {r.offset_delta: r.encoded for r in iter_raw_records(original[1], original[0])}
    assert [r.encoded for r in iter_raw_records(batch, header)] == [kept[2], kept[3], kept[4]], "records re-emitted as they were"
    log.close()


def test_fully_kept_batches_are_copied_byte_for_byte(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    put(log, clock, (b"a", b"1"), (b"b", b"1"))
    put(log, clock, (b"a", b"2"))
    put(log, clock, (b"c", b"1"), (b"d", b"1"))
    roll(log, clock)
    before = batches(log)
    clean_partition(log, clock.now_ms())
    after = batches(log)
    assert after[0][0].record_count == 1 and after[0][1] != before[0][1]
    assert after[1][1] == before[1][1] and after[2][1] == before[2][1]
    log.close()


def _gzip_batch(plain: bytes) -> bytes:
    """``plain`` (uncompressed, from build_batch) with its records gzipped and the codec bit set."""
    header = read_header(plain)
    body = gzip.compress(plain[HEADER_SIZE:])
    out = bytearray(plain[:HEADER_SIZE] + body)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">h", out, 21, header.attributes | GZIP)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def test_compressed_batch_is_rewritten_uncompressed(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    plain = build_batch([(b"a", b"1"), (b"b", b"1"), (b"a", b"2")], clock.now_ms())
    log.append_produced(_gzip_batch(plain), clock.now_ms())
    put(log, clock, (b"c", b"x"))
    roll(log, clock)
    assert batches(log)[0][0].attributes & 0x07 == GZIP
    clean_partition(log, clock.now_ms())
    header, batch = batches(log)[0]
    assert header.attributes & 0x07 == 0 and header.record_count == 2 and header.last_offset_delta == 2
    assert [(r.offset, r.key, r.value) for r in iter_records(batch, header)] == [(1, b"b", b"1"), (2, b"a", b"2")]
    log.close()


def test_keyless_records_are_kept_as_they_are(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    put(log, clock, (None, b"no key 1"), (b"a", b"1"))
    put(log, clock, (None, b"no key 2"), (b"a", b"2"))
    roll(log, clock)
    clean_partition(log, clock.now_ms())
    assert records(log) == [(0, None, b"no key 1"), (2, None, b"no key 2"), (3, b"a", b"2")]
    log.close()


def test_fetch_over_a_compacted_range_returns_valid_batches_with_gaps(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    updates(log, clock, rounds=5, keys=6, per_batch=3)
    put(log, clock, (b"tail", b"x"))
    flush(log)
    clean_partition(log, clock.now_ms())
    survivors = [o for o, _, _ in records(log)]
    assert survivors != list(range(len(survivors))), "the compacted log has gaps"
    # Read the whole partition the way a consumer does: one batch at a time from the next offset.
    seen = []
    offset = 0
    while offset < log.high_watermark:
        result = log.read(offset, 1)
        assert isinstance(result, ReadResult) and result.records
        for _, header in scan(result.records, verify_crc=True):
            assert header.last_offset >= offset
            seen += [r.offset for r in iter_records(result.records, header) if r.offset >= offset]
            offset = header.next_offset
    assert seen == survivors
    # A fetch from an offset that was compacted away starts at the next batch.
    gap = next(o for o in range(log.high_watermark) if o not in survivors)
    result = log.read(gap, 1 << 20)
    assert isinstance(result, ReadResult)
    first = read_header(result.records)
    assert first.last_offset >= gap and first.base_offset <= min(o for o in survivors if o > gap)
    log.close()


def test_a_read_steps_over_segments_left_with_empty_batches_only(tmp_path: Path, clock: FakeClock) -> None:
    one = len(build_batch([(b"k", b"v0")], clock.now_ms()))
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": one + 10})  # one batch per segment, no merging
    for r in range(12):
        put(log, clock, (b"k", f"v{r}".encode()))
    put(log, clock, (b"tail", b"x"))
    flush(log)
    clean_partition(log, clock.now_ms())
    headers = [h for h, _ in batches(log)]
    assert [h.record_count for h in headers] == [0] * 11 + [1, 1], "each emptied segment keeps its end as an empty batch"
    assert len(log.segments) == 13
    # librdkafka takes an answer without a single record for a too-small max bytes: the read goes on.
    for max_bytes in (1, 1 << 20):
        result = log.read(0, max_bytes)
        assert isinstance(result, ReadResult)
        found = [h for _, h in scan(result.records, verify_crc=True)]
        assert found[-1].record_count == 1 and found[-1].base_offset == 11
        assert all(h.record_count == 0 for h in found[:-1])
    # An ordinary read still stops at its segment.
    assert [h.base_offset for _, h in scan(log.read(11, 1 << 20).records)] == [11]  # type: ignore[union-attr]


# -- tombstones -------------------------------------------------------------------------


def test_tombstones_survive_until_the_delete_horizon(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock, **{"delete.retention.ms": 60_000})
    put(log, clock, (b"gone", b"v1"), (b"kept", b"v1"))
    clock.advance(1000)
    put(log, clock, (b"gone", None))
    ts_tombstone = clock.now_ms()
    roll(log, clock)
    put(log, clock, (b"other", b"x"))
    roll(log, clock)

    first_clean = clock.now_ms()
    clean_partition(log, first_clean)
    assert records(log) == [(1, b"kept", b"v1"), (2, b"gone", None), (3, b"other", b"x")]
    header, batch = next((h, b) for h, b in batches(log) if h.base_offset == 2)
    assert header.attributes & DELETE_HORIZON_FLAG and header.base_timestamp == first_clean + 60_000
    assert [r.timestamp for r in iter_records(batch, header)] == [ts_tombstone], "record timestamps survive the horizon stamp"
    assert header.max_timestamp == ts_tombstone

    clock.advance(59_999)  # not yet
    clean_partition(log, clock.now_ms(), force=True)
    assert (2, b"gone", None) in records(log)
    clock.advance(1)  # the horizon: the tombstone goes
    clean_partition(log, clock.now_ms(), force=True)
    assert records(log) == [(1, b"kept", b"v1"), (3, b"other", b"x")]
    log.close()


def test_a_newer_value_after_a_tombstone_wins(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    put(log, clock, (b"k", b"1"))
    put(log, clock, (b"k", None))
    put(log, clock, (b"k", b"2"))
    roll(log, clock)
    clean_partition(log, clock.now_ms())
    assert records(log) == [(2, b"k", b"2")]
    log.close()


# -- bounds ----------------------------------------------------------------------------


def test_nothing_at_or_above_the_last_stable_offset_is_touched(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    updates(log, clock, rounds=2)
    # An open transaction from here on: its segment and everything after stay as they are.
    put(log, clock, (b"k0", b"txn"), producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
    roll(log, clock)
    updates(log, clock, rounds=2)
    flush(log)
    lso = log.last_stable_offset
    assert lso < log.high_watermark
    held = log.segments[log.segment_for(lso)].base_offset
    frozen = [s.read(0, s.size) for s in log.segments if s.base_offset >= held]
    clean_partition(log, clock.now_ms(), force=True)
    assert [s.read(0, s.size) for s in log.segments if s.base_offset >= held] == frozen
    assert read_checkpoint(log.dir) == held
    assert [e for e in records(log) if e[0] < held] == [(4, b"k0", b"v1-0"), (5, b"k1", b"v1-1"), (6, b"k2", b"v1-2"), (7, b"k3", b"v1-3")]
    log.close()


def test_nothing_above_the_high_watermark_is_touched(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    updates(log, clock, rounds=2)
    put(log, clock, (b"k0", b"not durable"))
    log.roll(clock.now_ms())  # rolled but the high watermark is still before it
    put(log, clock, (b"k0", b"newer"))
    assert log.high_watermark == 8
    clean_partition(log, clock.now_ms(), force=True)
    assert (8, b"k0", b"not durable") in records(log)
    assert read_checkpoint(log.dir) == 8
    log.close()


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock, **{"min.compaction.lag.ms": 10_000})
    updates(log, clock, rounds=2)
    clock.advance(20_000)
    updates(log, clock, rounds=2)  # younger than the lag
    plan = plan_cleaning(log, clock.now_ms(), force=True)
    assert plan is not None and plan.first_uncleanable == 8
    clock.advance(20_000)
    plan = plan_cleaning(log, clock.now_ms(), force=True)
    assert plan is not None and plan.first_uncleanable == log.segments[-1].base_offset
    log.close()


# -- transactions ------------------------------------------------------------------------


def txn_put(log: PartitionLog, clock: FakeClock, pid: int, seq: int, *recs: tuple[bytes, bytes | None]) -> int:
    return put(log, clock, *recs, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)


def test_aborted_records_removed_committed_kept_markers_kept_while_needed(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock, **{"delete.retention.ms": 1000})
    a, b = 100, 200
    txn_put(log, clock, a, 0, (b"x", b"aborted-1"), (b"y", b"aborted-1"))  # 0-1
    txn_put(log, clock, b, 0, (b"z", b"committed"))  # 2
    txn_put(log, clock, a, 2, (b"x", b"aborted-2"))  # 3
    abort_at = log.append_marker(a, 0, False, 0, clock.now_ms())  # 4
    commit_at = log.append_marker(b, 0, True, 0, clock.now_ms())  # 5
    roll(log, clock)
    txn_put(log, clock, a, 3, (b"w", b"committed-a"))  # 6: a's last data batch from now on
    a_commit = log.append_marker(a, 0, True, 0, clock.now_ms())  # 7
    put(log, clock, (b"plain", b"1"))  # 8
    roll(log, clock)
    assert (abort_at, commit_at, a_commit) == (4, 5, 7)
    assert [t.first_offset for t in log.aborted_transactions(0, 10)] == [0]

    clean_partition(log, clock.now_ms())
    assert records(log) == [(2, b"z", b"committed"), (6, b"w", b"committed-a"), (8, b"plain", b"1")]
    markers = [h.base_offset for h, _ in batches(log) if h.is_control]
    assert markers == [4, 5, 7], "every marker stays in the pass that removed its transaction's data"
    # The ABORT's index entry moved with it into the cleaned segment.
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in log.aborted_transactions(0, 10)] == [(a, 0, 4)]

    # Next pass: the aborted transaction has no data left, so its marker gets a delete horizon...
    clean_partition(log, clock.now_ms(), force=True)
    stamped = {h.base_offset: h for h, _ in batches(log) if h.is_control}
    assert set(stamped) == {4, 5, 7} and stamped[4].attributes & DELETE_HORIZON_FLAG
    assert not stamped[5].attributes & DELETE_HORIZON_FLAG, "b's commit marker still guards b's data"
    assert log.aborted_transactions(0, 10) == [], "an index entry for data that is gone may go"
    # ... and goes once the horizon passes.
    clock.advance(1000)
    clean_partition(log, clock.now_ms(), force=True)
    assert [h.base_offset for h, _ in batches(log) if h.is_control] == [5, 7]
    assert records(log) == [(2, b"z", b"committed"), (6, b"w", b"committed-a"), (8, b"plain", b"1")]

    # read_committed reads of the compacted range see no aborted records and no open transaction.
    assert log.last_stable_offset == log.high_watermark
    result = log.read(0, 1 << 20, committed=True)
    assert isinstance(result, ReadResult) and result.aborted == []
    log.close()


def test_a_pass_after_an_earlier_abort_maps_the_same_producers_committed_records(tmp_path: Path, clock: FakeClock) -> None:
    """The offset map of a pass covers only the dirty section, so only aborted transactions that
    reach into it may count (Kafka's buildOffsetMap collects them from the dirty start).  Found by
    test_compaction.py's transactional test: one producer's abort cleaned in an earlier pass made
    every later transactional batch of that producer look aborted to the map, so a later pass
    deduplicated nothing."""
    log = open_log(tmp_path / "t-0", clock)
    pid = 7
    txn_put(log, clock, pid, 0, (b"k", b"aborted"))  # 0
    log.append_marker(pid, 0, False, 0, clock.now_ms())  # 1: ABORT
    txn_put(log, clock, pid, 1, (b"k", b"v1"))  # 2
    log.append_marker(pid, 0, True, 0, clock.now_ms())  # 3: COMMIT
    roll(log, clock)
    clean_partition(log, clock.now_ms())
    assert read_checkpoint(log.dir) == 4
    txn_put(log, clock, pid, 2, (b"k", b"v2"))  # 4
    log.append_marker(pid, 0, True, 0, clock.now_ms())  # 5: COMMIT
    put(log, clock, (b"other", b"x"))  # 6
    roll(log, clock)

    clean_partition(log, clock.now_ms(), force=True)
    assert read_checkpoint(log.dir) == 7
    assert [(o, k, v) for o, k, v in records(log)] == [(4, b"k", b"v2"), (6, b"other", b"x")], \
        "the committed v2 in the dirty section replaces v1 in the clean section"
    log.close()


def test_a_committed_transaction_whose_data_was_compacted_loses_its_marker(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock, **{"delete.retention.ms": 0})
    txn_put(log, clock, 5, 0, (b"k", b"in-txn"))  # 0
    log.append_marker(5, 0, True, 0, clock.now_ms())  # 1
    put(log, clock, (b"k", b"newer"))  # 2
    log.producer_state.remove_expired(clock.now_ms() + 10 * DAY)  # producer 5 has no state left
    roll(log, clock)
    clean_partition(log, clock.now_ms())  # data of the transaction removed; marker kept (data met)
    assert [h.base_offset for h, _ in batches(log)] == [1, 2]
    clean_partition(log, clock.now_ms(), force=True)  # no data: horizon stamped (0 ms retention)
    clean_partition(log, clock.now_ms(), force=True)  # horizon passed: gone
    assert [h.base_offset for h, _ in batches(log)] == [2]
    log.close()


def test_producer_last_batch_survives_empty_and_state_reloads(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, clock)
    pid = 42
    put(log, clock, (b"k", b"1"), producer_id=pid, producer_epoch=3, base_sequence=0)  # 0
    put(log, clock, (b"k", b"2"), (b"j", b"1"), producer_id=pid, producer_epoch=3, base_sequence=1)  # 1-2
    put(log, clock, (b"k", b"3"), (b"j", b"2"))  # 3-4: someone else supersedes both keys
    roll(log, clock)
    put(log, clock, (b"tail", b"x"))
    flush(log)
    clean_partition(log, clock.now_ms())
    kept = [h for h, _ in batches(log)]
    assert records(log) == [(3, b"k", b"3"), (4, b"j", b"2"), (5, b"tail", b"x")]
    empty = next(h for h in kept if h.producer_id == pid)
    assert (empty.base_offset, empty.last_offset_delta, empty.record_count) == (1, 1, 0)
    assert (empty.producer_epoch, empty.base_sequence, empty.last_sequence) == (3, 1, 2)
    assert all(h.base_offset != 0 for h in kept), "older batches of the producer go"
    log.flush_all()
    log.close()

    for drop_snapshots in (False, True):
        if drop_snapshots:
            for snap in path.glob("*.snapshot"):
                snap.unlink()
        log = open_log(path, clock)
        entry = log.producer_state.producer(pid)
        assert entry is not None and (entry.producer_epoch, entry.last_seq, entry.last_data_offset) == (3, 2, 2)
        retry = build_batch([(b"k", b"2"), (b"j", b"1")], clock.now_ms(), producer_id=pid, producer_epoch=3, base_sequence=1)
        assert isinstance(log.producer_state.prepare_batch(read_header(retry), log.log_end_offset, _client()), Duplicate)
        nxt = build_batch([(b"k", b"4")], clock.now_ms(), producer_id=pid, producer_epoch=3, base_sequence=3)
        assert isinstance(log.producer_state.prepare_batch(read_header(nxt), log.log_end_offset, _client()), ProducerAppendInfo)
        log.close()


def test_offset_for_timestamp_looks_past_an_empty_batch(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    put(log, clock, (b"a", b"1"), producer_id=8, producer_epoch=0, base_sequence=0)  # 0: will be emptied
    clock.advance(1000)
    put(log, clock, (b"a", b"2"))  # 1
    roll(log, clock)
    clock.advance(1000)
    put(log, clock, (b"tail", b"x"))  # 2
    flush(log)
    clean_partition(log, clock.now_ms())
    assert [(h.base_offset, h.record_count) for h, _ in batches(log)] == [(0, 0), (1, 1), (2, 1)]
    assert log.offset_for_timestamp(T0) == (1, T0 + 1000)
    log.close()


def _client():  # type: ignore[no-untyped-def]
    from onceflow.log.producer_state import AppendOrigin

    return AppendOrigin.CLIENT


def test_aborted_last_batch_of_a_producer_stays_empty_with_its_marker(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, clock, **{"delete.retention.ms": 0})
    txn_put(log, clock, 7, 0, (b"k", b"aborted"))  # 0: the producer's last data batch
    log.append_marker(7, 0, False, 0, clock.now_ms())  # 1
    roll(log, clock)
    put(log, clock, (b"tail", b"x"))
    flush(log)
    for _ in range(3):
        clean_partition(log, clock.now_ms(), force=True)
    headers = [h for h, _ in batches(log)]
    assert [(h.base_offset, h.record_count, h.is_control) for h in headers] == [(0, 0, False), (1, 1, True), (2, 1, False)]
    assert log.aborted_transactions(0, 3)[0].first_offset == 0
    log.flush_all()
    log.close()
    for snap in path.glob("*.snapshot"):
        snap.unlink()
    log = open_log(path, clock)
    assert log.last_stable_offset == log.high_watermark == 3, "no transaction is left open by the replay"
    assert log.producer_state.producer(7).last_data_offset == 0  # type: ignore[union-attr]
    log.close()


def test_a_cleaned_segment_with_a_damaged_index_keeps_its_aborted_entries(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    txn_put(log, clock, 7, 0, (b"k", b"aborted"))  # 0: the producer's last data batch, kept empty
    log.append_marker(7, 0, False, 0, clock.now_ms())  # 1
    put(log, clock, (b"j", b"x"))  # 2
    roll(log, clock)
    put(log, clock, (b"tail", b"x"))
    flush(log)
    result = build_cleaned(plan_cleaning(log, clock.now_ms(), force=True))  # type: ignore[arg-type]
    index = segment_files(log.dir, 0, CLEANED_SUFFIX)[0]
    index.write_bytes(b"\x00\x00\x00")  # not a whole entry: load fails, the indexes are rebuilt
    assert install_cleaned(log, result, clock.now_ms())
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in log.aborted_transactions(0, 3)] == [(7, 0, 1)]
    assert records(log) == [(2, b"j", b"x"), (3, b"tail", b"x")]
    log.close()


# -- swapping and crashes -----------------------------------------------------------------


def _dirty_log(path: Path, clock: FakeClock) -> PartitionLog:
    """Four small rolled segments of updates to two keys (one group for the cleaner), and an active one."""
    log = open_log(path, clock, **SMALL)
    for r in range(8):
        put(log, clock, (b"a", f"a{r}".encode()), (b"b", f"b{r}".encode()))
        clock.advance(10)
        if r % 2:
            roll(log, clock)
    put(log, clock, (b"tail", b"x"))
    flush(log)
    assert len(log.segments) == 5
    return log


SMALL = {"segment.bytes": 4096}


def _segment_listing(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.suffix in (".log", ".cleaned", ".swap"))


def test_crash_before_the_swap_keeps_the_old_segments(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "t-0"
    log = _dirty_log(path, clock)
    before = records(log)
    result = build_cleaned(plan_cleaning(log, clock.now_ms(), force=True))  # type: ignore[arg-type]
    assert all(p.exists() for p in result.cleaned_files())
    log.close()  # crash: the .cleaned files are left behind
    log = open_log(path, clock, clean=False, **SMALL)
    assert not any(p.name.endswith(CLEANED_SUFFIX) for p in path.iterdir())
    assert records(log) == before
    log.close()


@pytest.mark.parametrize("renamed_indexes", [0, 1, 3])
def test_crash_after_the_commit_point_completes_the_swap(tmp_path: Path, clock: FakeClock, renamed_indexes: int) -> None:
    path = tmp_path / "t-0"
    reference = _dirty_log(tmp_path / "ref-0", clock)
    clean_partition(reference, clock.now_ms(), force=True)
    expected = records(reference)
    reference.close()

    log = _dirty_log(path, clock)
    result = build_cleaned(plan_cleaning(log, clock.now_ms(), force=True))  # type: ignore[arg-type]
    assert len(result.groups) == 1
    base = result.groups[0].base_offset
    old_bases = result.groups[0].old_bases
    log.close()
    # The crash came after .cleaned -> .swap (the log last) and, for some cases, part of
    # the deletion of the old segments and of the renaming back.
    for p in segment_files(path, base, CLEANED_SUFFIX):
        os.replace(p, str(p)[: -len(CLEANED_SUFFIX)] + SWAP_SUFFIX)
    if renamed_indexes:
        for old in old_bases:
            for p in segment_files(path, old):
                p.unlink(missing_ok=True)
        for p in segment_files(path, base, SWAP_SUFFIX)[:renamed_indexes]:
            os.replace(p, str(p)[: -len(SWAP_SUFFIX)])
    log = open_log(path, clock, clean=False, **SMALL)
    assert not any(p.name.endswith((SWAP_SUFFIX, CLEANED_SUFFIX)) for p in path.iterdir())
    assert records(log) == expected
    assert [s.base_offset for s in log.segments] == [base, log.segments[-1].base_offset]
    log.close()


def test_uncommitted_index_swaps_are_discarded(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "t-0"
    log = _dirty_log(path, clock)
    before = records(log)
    result = build_cleaned(plan_cleaning(log, clock.now_ms(), force=True))  # type: ignore[arg-type]
    log.close()
    base = result.groups[0].base_offset
    for p in segment_files(path, base, CLEANED_SUFFIX)[:2]:  # crashed before the .log was renamed
        os.replace(p, str(p)[: -len(CLEANED_SUFFIX)] + SWAP_SUFFIX)
    log = open_log(path, clock, clean=False, **SMALL)
    assert not any(p.name.endswith((SWAP_SUFFIX, CLEANED_SUFFIX)) for p in path.iterdir())
    assert records(log) == before
    log.close()


def test_clean_restart_after_compaction_loads_the_cleaned_segments(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "t-0"
    log = _dirty_log(path, clock)
    clean_partition(log, clock.now_ms(), force=True)
    expected = records(log)
    hw = log.high_watermark
    log.flush_all()
    log.close()
    log = open_log(path, clock, **SMALL)
    assert records(log) == expected and log.high_watermark == hw
    assert log.offset_for_timestamp(0) == (expected[0][0], T0 + 70)
    log.close()


def test_retention_during_cleaning_discards_the_pass(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock, **{"cleanup.policy": ["compact", "delete"], "retention.bytes": 300})
    updates(log, clock, rounds=4)
    flush(log)
    before_first = log.segments[0].base_offset
    plan = plan_cleaning(log, clock.now_ms(), force=True)
    result = build_cleaned(plan)  # type: ignore[arg-type]
    assert log.enforce_retention(clock.now_ms()) > 0 and log.log_start_offset > before_first
    survivors = records(log)
    assert not install_cleaned(log, result, clock.now_ms())
    assert not any(p.name.endswith(CLEANED_SUFFIX) for p in log.dir.iterdir())
    assert records(log) == survivors
    # The next pass starts from the new log start.
    clean_partition(log, clock.now_ms(), force=True)
    assert {k for _, k, _ in records(log)} == {b"k0", b"k1", b"k2", b"k3"}
    log.close()


def test_abort_deletes_the_worker_files(tmp_path: Path, clock: FakeClock) -> None:
    import threading

    log = _dirty_log(tmp_path / "t-0", clock)
    abort = threading.Event()
    abort.set()
    with pytest.raises(compaction.CleaningAborted):
        build_cleaned(plan_cleaning(log, clock.now_ms(), force=True), abort)  # type: ignore[arg-type]
    assert not any(p.name.endswith(CLEANED_SUFFIX) for p in log.dir.iterdir())
    log.close()


# -- the decision, the checkpoint, the offset map -----------------------------------------


def test_dirty_ratio_decides_and_max_compaction_lag_forces(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock, **{"min.cleanable.dirty.ratio": 0.5})
    assert needs_cleaning(log, clock.now_ms()) is None, "nothing rolled yet"
    updates(log, clock, rounds=3)
    found = needs_cleaning(log, clock.now_ms())
    assert found is not None and found.dirty_ratio == 1.0
    clean_partition(log, clock.now_ms())
    assert needs_cleaning(log, clock.now_ms()) is None, "everything is clean"
    clean_size = sum(s.size for s in log.segments[:-1])
    # Dirty bytes below half of the total: not yet.
    put(log, clock, (b"k0", b"late"))
    roll(log, clock)
    offsets = compaction.cleanable_offsets(log, clock.now_ms())
    assert offsets.dirty_bytes < clean_size and needs_cleaning(log, clock.now_ms()) is None
    # Strictly more dirty than clean bytes: clean.
    while compaction.cleanable_offsets(log, clock.now_ms()).dirty_ratio <= 0.5:
        put(log, clock, (b"k1", b"later"))
        roll(log, clock)
    assert needs_cleaning(log, clock.now_ms()) is not None
    clean_partition(log, clock.now_ms())
    # max.compaction.lag.ms: a dirty segment older than the lag is cleaned whatever the ratio.
    log.config = config(**{"min.cleanable.dirty.ratio": 0.99, "max.compaction.lag.ms": 60_000})
    put(log, clock, (b"k2", b"old"))
    roll(log, clock)
    assert needs_cleaning(log, clock.now_ms()) is None
    clock.advance(60_001)
    forced = plan_cleaning(log, clock.now_ms())
    assert forced is not None and forced.forced
    log.close()


def test_checkpoint_round_trip(tmp_path: Path, clock: FakeClock) -> None:
    assert read_checkpoint(tmp_path) is None
    write_checkpoint(tmp_path, "orders", 3, 12345)
    assert read_checkpoint(tmp_path) == 12345
    assert (tmp_path / compaction.CHECKPOINT_FILE).read_text() == "0\n1\norders 3 12345\n"
    write_checkpoint(tmp_path, "orders", 3, 99)
    assert read_checkpoint(tmp_path) == 99 and not (tmp_path / (compaction.CHECKPOINT_FILE + ".tmp")).exists()
    (tmp_path / compaction.CHECKPOINT_FILE).write_text("garbage")
    assert read_checkpoint(tmp_path) is None

    log = open_log(tmp_path / "t-0", clock)
    updates(log, clock, rounds=2)
    clean_partition(log, clock.now_ms())
    assert read_checkpoint(log.dir) == log.segments[-1].base_offset
    assert plan_cleaning(log, clock.now_ms()) is None, "a second pass has nothing dirty to map"
    log.close()


def test_checkpoint_beyond_the_log_is_reset_to_the_start(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path / "t-0", clock)
    updates(log, clock, rounds=2)
    write_checkpoint(log.dir, "t", 0, 10_000)
    assert compaction.cleanable_offsets(log, clock.now_ms()).first_dirty == 0
    log.close()


def test_a_full_offset_map_cleans_over_several_passes(tmp_path: Path, clock: FakeClock) -> None:
    broker = {"log.cleaner.dedupe.buffer.size": 1 << 16}  # about 600 keys per pass
    log = open_log(tmp_path / "t-0", clock, broker=broker)
    for r in range(2):
        for start in range(0, 1000, 50):
            put(log, clock, *[(f"key-{i:04d}".encode(), f"{r}".encode()) for i in range(start, start + 50)])
        roll(log, clock)
    first = clean_partition(log, clock.now_ms())
    assert first is not None and first.end_offset < log.segments[-1].base_offset
    assert read_checkpoint(log.dir) == first.end_offset
    while clean_partition(log, clock.now_ms(), force=True) is not None and read_checkpoint(log.dir) != log.segments[-1].base_offset:
        pass
    assert read_checkpoint(log.dir) == log.segments[-1].base_offset
    assert sorted(v for _, _, v in records(log)) == [b"1"] * 1000
    log.close()


def test_encode_batch_builds_what_iter_records_reads() -> None:
    recs = [encode_record(0, 0, encode_fields(b"k", b"v")), encode_record(5, -7, encode_fields(None, None, [("h", b"x")]))]
    batch = encode_batch(base_offset=100, last_offset_delta=9, attributes=0x10, base_timestamp=T0, max_timestamp=T0,
                         producer_id=3, producer_epoch=1, base_sequence=20, records=recs)
    header = next(h for _, h in scan(batch, verify_crc=True))
    assert (header.base_offset, header.last_offset, header.record_count, header.last_sequence) == (100, 109, 2, 29)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(batch, header)] == [
        (100, T0, b"k", b"v", ()),
        (105, T0 - 7, None, None, (("h", b"x"),)),
    ]
    empty = encode_batch(base_offset=7, last_offset_delta=2, attributes=0x30, base_timestamp=T0, max_timestamp=T0,
                         producer_id=3, producer_epoch=1, base_sequence=-1, records=[])
    header = next(h for _, h in scan(empty, verify_crc=True))
    assert header.size == HEADER_SIZE and header.record_count == 0 and read_marker(empty, header) is None


def test_an_aborted_value_whose_abort_is_segments_later_never_replaces_the_committed_one(tmp_path: Path, clock: FakeClock) -> None:
    """Issue 7, defect 1 under compaction: K's committed value, then an aborted value of K in a
    transaction that stays open across several rolls.  Another producer's transaction, still
    open, holds the LSO (so the cleanable range) a segment after the aborted record; the ABORT
    marker lands further on.  The cleaner must still see the abort and keep the committed value:
    K must never vanish."""
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 1024, "delete.retention.ms": 0})
    put(log, clock, (b"K", b"committed"))  # 0
    txn_put(log, clock, 9, 0, (b"K", b"aborted"))  # 1
    for i in range(12):
        put(log, clock, (f"a-{i}".encode(), b"x" * 100))
    open_at = txn_put(log, clock, 10, 0, (b"L", b"open"))  # holds the LSO from here
    for i in range(24):
        put(log, clock, (f"b-{i}".encode(), b"x" * 100))
    abort_at = log.append_marker(9, 0, False, 0, clock.now_ms())
    roll(log, clock)
    assert log.last_stable_offset == open_at
    assert log.segment_for(abort_at) >= log.segment_for(open_at) + 2 and log.segment_for(open_at) >= 1
    for _ in range(2):  # the first pass, then one that could drop what the first left
        clean_partition(log, clock.now_ms(), force=True)
        assert latest_per_key(records(log))[b"K"] == (0, b"committed")
    log.append_marker(10, 0, True, 0, clock.now_ms())
    roll(log, clock)  # everything is cleanable now
    for _ in range(2):
        clean_partition(log, clock.now_ms(), force=True)
        assert latest_per_key(records(log))[b"K"] == (0, b"committed")
    log.close()
