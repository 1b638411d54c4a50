"""Producer state: idempotence, fencing, transactions, the LSO, expiry and snapshots (Kafka's ProducerStateManager)."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from onceflow.log.producer_state import (
    INT32_MAX,
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    Duplicate,
    ProducerAppendInfo,
    ProducerStateEntry,
    ProducerStateManager,
    Refused,
)
from onceflow.protocol.errors import ErrorCode
from onceflow.records.batch import CONTROL_FLAG, TRANSACTIONAL_FLAG, BatchHeader

CLIENT = AppendOrigin.CLIENT
COORDINATOR = AppendOrigin.COORDINATOR
RECOVERY = AppendOrigin.RECOVERY
EXPIRATION_MS = 60_000
PID = 1000


def header(
    pid: int = PID, epoch: int = 0, seq: int = 0, count: int = 1, ts: int = 1, txn: bool = False, control: bool = False
) -> BatchHeader:
    attributes = (TRANSACTIONAL_FLAG if txn else 0) | (CONTROL_FLAG if control else 0)
    return BatchHeader(
        base_offset=0,  # not assigned yet: prepare_batch must ignore it
        batch_length=100,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=attributes,
        last_offset_delta=count - 1,
        base_timestamp=ts,
        max_timestamp=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        record_count=count,
    )


class Log:
    """A minimal stand-in for the partition log: assigns offsets and drives the manager as the log will."""

    def __init__(self, manager: ProducerStateManager, next_offset: int = 0) -> None:
        self.m = manager
        self.next_offset = next_offset
        self.aborted: list[tuple[CompletedTxn, int]] = []

    def append(self, h: BatchHeader, origin: AppendOrigin = CLIENT) -> ProducerAppendInfo | Duplicate | Refused:
        result = self.m.prepare_batch(h, self.next_offset, origin)
        if isinstance(result, ProducerAppendInfo):
            self.next_offset += h.last_offset_delta + 1
            self.m.update(result)
        return result

    def marker(
        self,
        pid: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int = 0,
        ts: int = 1,
        origin: AppendOrigin = COORDINATOR,
    ) -> ProducerAppendInfo | Refused:
        result = self.m.prepare_marker(pid, epoch, commit, coordinator_epoch, self.next_offset, ts, origin)
        if isinstance(result, ProducerAppendInfo):
            self.next_offset += 1
            self.m.update(result)
            if result.completed_txn is not None:
                lso = self.m.last_stable_offset(result.completed_txn)
                if result.completed_txn.is_aborted:
                    self.aborted.append((result.completed_txn, lso))
                self.m.complete_txn(result.completed_txn)
        return result


@pytest.fixture
def m(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path, EXPIRATION_MS)


@pytest.fixture
def lg(m: ProducerStateManager) -> Log:
    return Log(m)


def refused(result: object, error: ErrorCode) -> bool:
    return isinstance(result, Refused) and result.error == error


# -- batch metadata -------------------------------------------------------------


def test_batch_metadata_first_seq_wraps_like_kafka() -> None:
    assert BatchMetadata(last_seq=9, last_offset=109, offset_delta=9, timestamp=0).first_seq == 0
    assert BatchMetadata(last_seq=9, last_offset=109, offset_delta=9, timestamp=0).first_offset == 100
    # A batch whose sequences wrap: first seq INT32_MAX - 1, last seq 1.
    assert BatchMetadata(last_seq=1, last_offset=3, offset_delta=3, timestamp=0).first_seq == INT32_MAX - 1
    entry = ProducerStateEntry(PID)
    assert entry.is_empty and entry.first_seq == -1 and entry.last_seq == -1 and entry.last_data_offset == -1


# -- idempotence --------------------------------------------------------------


def test_in_order_sequences_are_accepted_and_offsets_come_from_the_caller(lg: Log) -> None:
    info = lg.append(header(seq=0, count=3, ts=10))
    assert isinstance(info, ProducerAppendInfo)
    assert info.entry.batches == (BatchMetadata(2, 2, 2, 10),)
    assert lg.append(header(seq=3, count=2, ts=11)).entry.last_seq == 4  # type: ignore[union-attr]
    entry = lg.m.producer(PID)
    assert entry is not None
    assert (entry.producer_epoch, entry.first_seq, entry.last_seq, entry.last_data_offset, entry.last_timestamp) == (
        0,
        0,
        4,
        4,
        11,
    )


def test_sequence_gap_is_out_of_order(lg: Log) -> None:
    lg.append(header(seq=0, count=2))
    assert refused(lg.append(header(seq=3)), ErrorCode.out_of_order_sequence_number)
    assert refused(lg.append(header(seq=1)), ErrorCode.out_of_order_sequence_number)  # overlaps, not a duplicate
    assert isinstance(lg.append(header(seq=2)), ProducerAppendInfo)


def test_sequence_wraps_at_int32_max(lg: Log) -> None:
    lg.append(header(seq=INT32_MAX - 2, count=3))  # unknown producer: any first sequence
    assert lg.m.producer(PID).last_seq == INT32_MAX  # type: ignore[union-attr]
    assert refused(lg.append(header(seq=1)), ErrorCode.out_of_order_sequence_number)
    info = lg.append(header(seq=0, count=2))
    assert isinstance(info, ProducerAppendInfo) and info.entry.last_seq == 1
    # A batch that itself wraps: seqs INT32_MAX-1 .. 1.
    m2 = ProducerStateManager(lg.m.directory / "other", EXPIRATION_MS)
    log2 = Log(m2)
    log2.append(header(seq=INT32_MAX - 5, count=4))
    wrapping = header(seq=INT32_MAX - 1, count=4)
    assert wrapping.last_sequence == 1
    assert isinstance(log2.append(wrapping), ProducerAppendInfo)
    dup = log2.append(wrapping)
    assert dup == Duplicate(first_offset=4, last_offset=7, timestamp=1)
    assert isinstance(log2.append(header(seq=2)), ProducerAppendInfo)


def test_each_of_the_last_five_batches_is_a_duplicate_with_its_original_offsets(lg: Log) -> None:
    for i in range(6):
        lg.append(header(seq=2 * i, count=2, ts=100 + i))
    # The oldest (seq 0-1 at offsets 0-1) fell out of the retained window.
    entry = lg.m.producer(PID)
    assert entry is not None and len(entry.batches) == 5 and entry.first_seq == 2
    for i in range(1, 6):
        assert lg.append(header(seq=2 * i, count=2, ts=999)) == Duplicate(2 * i, 2 * i + 1, 100 + i)
    assert refused(lg.append(header(seq=0, count=2)), ErrorCode.out_of_order_sequence_number)
    assert lg.next_offset == 12


def test_duplicate_needs_the_exact_sequence_range_and_epoch(lg: Log) -> None:
    lg.append(header(seq=0, count=3))
    assert refused(lg.append(header(seq=0, count=2)), ErrorCode.out_of_order_sequence_number)
    # Same sequences at a higher epoch: a new epoch must start at 0, and this one does.
    assert isinstance(lg.append(header(epoch=1, seq=0, count=3)), ProducerAppendInfo)
    # At the old epoch it is now fenced rather than a duplicate.
    assert refused(lg.append(header(epoch=0, seq=0, count=3)), ErrorCode.invalid_producer_epoch)


def test_duplicates_are_detected_for_client_appends_only(lg: Log) -> None:
    lg.append(header(seq=0, count=1, txn=False))
    result = lg.m.prepare_batch(header(seq=0), 1, COORDINATOR)
    assert isinstance(result, ProducerAppendInfo)  # coordinator appends skip the duplicate and sequence checks


def test_lower_epoch_is_refused(lg: Log) -> None:
    lg.append(header(epoch=3, seq=0))
    assert refused(lg.append(header(epoch=2, seq=1)), ErrorCode.invalid_producer_epoch)
    assert refused(lg.m.prepare_batch(header(epoch=2, seq=1), 1, COORDINATOR), ErrorCode.invalid_producer_epoch)


def test_new_epoch_must_restart_at_zero_and_forgets_old_batches(lg: Log) -> None:
    lg.append(header(epoch=0, seq=0, count=5))
    assert refused(lg.append(header(epoch=1, seq=5)), ErrorCode.out_of_order_sequence_number)
    info = lg.append(header(epoch=1, seq=0, count=2))
    assert isinstance(info, ProducerAppendInfo)
    assert info.entry.producer_epoch == 1 and len(info.entry.batches) == 1 and info.entry.first_seq == 0


def test_unknown_producer_may_start_at_any_sequence(lg: Log) -> None:
    info = lg.append(header(epoch=7, seq=42))
    assert isinstance(info, ProducerAppendInfo) and info.entry.last_seq == 42
    assert refused(lg.append(header(epoch=7, seq=44)), ErrorCode.out_of_order_sequence_number)
    assert isinstance(lg.append(header(epoch=7, seq=43)), ProducerAppendInfo)


def test_producer_known_by_a_marker_only_must_start_at_zero(lg: Log) -> None:
    lg.marker(PID, epoch=2, commit=True)
    entry = lg.m.producer(PID)
    assert entry is not None and entry.producer_epoch == 2 and entry.is_empty
    assert refused(lg.append(header(epoch=2, seq=5)), ErrorCode.out_of_order_sequence_number)
    assert isinstance(lg.append(header(epoch=2, seq=0)), ProducerAppendInfo)


def test_prepare_does_not_mutate(m: ProducerStateManager) -> None:
    """Kafka's testPrepareUpdateDoesNotMutate: validation alone changes nothing."""
    lg = Log(m)
    lg.append(header(seq=0, count=2))
    lg.append(header(pid=PID + 1, txn=True))
    before = (m.producers(), m.ongoing_transactions(), m.first_unstable_offset())
    prepared = [
        m.prepare_batch(header(seq=2), 3, CLIENT),
        m.prepare_batch(header(epoch=1, seq=0, txn=True), 3, CLIENT),
        m.prepare_batch(header(pid=PID + 2, seq=9, txn=True), 3, CLIENT),
        m.prepare_batch(header(seq=0, count=2), 3, CLIENT),  # duplicate
        m.prepare_batch(header(seq=7), 3, CLIENT),  # refused
        m.prepare_marker(PID + 1, 0, False, 5, 3, 1, COORDINATOR),
        m.prepare_marker(PID + 3, 0, True, 5, 3, 1, COORDINATOR),
    ]
    assert [type(p).__name__ for p in prepared] == ["ProducerAppendInfo"] * 3 + ["Duplicate", "Refused"] + [
        "ProducerAppendInfo"
    ] * 2
    assert (m.producers(), m.ongoing_transactions(), m.first_unstable_offset()) == before
    assert m.producer(PID + 2) is None and m.producer(PID + 3) is None
    assert m.producer(PID).batches == (BatchMetadata(1, 1, 1, 1),)  # type: ignore[union-attr]


def test_producers_is_a_copy(m: ProducerStateManager) -> None:
    Log(m).append(header())
    view = m.producers()
    view.clear()
    assert PID in m.producers()


def test_batches_without_producer_id_or_control_batches_are_caller_bugs(m: ProducerStateManager) -> None:
    with pytest.raises(ValueError):
        m.prepare_batch(header(pid=-1), 0, CLIENT)
    with pytest.raises(ValueError):
        m.prepare_batch(header(control=True, txn=True), 0, CLIENT)


# -- transactions -------------------------------------------------------------


def test_transactions_of_several_producers_and_the_first_unstable_offset(lg: Log) -> None:
    m = lg.m
    lg.append(header(pid=1, seq=0))  # offset 0, idempotent only
    assert m.first_unstable_offset() is None
    info = lg.append(header(pid=2, seq=0, txn=True))  # offset 1: starts txn of 2
    assert isinstance(info, ProducerAppendInfo) and info.started_txn_first_offset == 1
    info = lg.append(header(pid=3, seq=0, count=2, txn=True))  # offsets 2-3: txn of 3
    assert isinstance(info, ProducerAppendInfo) and info.started_txn_first_offset == 2
    info = lg.append(header(pid=2, seq=1, txn=True))  # offset 4: same txn continues
    assert isinstance(info, ProducerAppendInfo) and info.started_txn_first_offset is None
    assert info.entry.current_txn_first_offset == 1
    assert m.ongoing_transactions() == [(2, 1), (3, 2)]
    assert m.first_unstable_offset() == 1

    # 3 commits first: 2's transaction still holds the LSO at 1.
    result = lg.marker(3, 0, commit=True)  # offset 5
    assert isinstance(result, ProducerAppendInfo)
    assert result.completed_txn == CompletedTxn(3, 2, 5, is_aborted=False)
    assert m.ongoing_transactions() == [(2, 1)]
    assert m.first_unstable_offset() == 1
    assert m.producer(3).current_txn_first_offset is None  # type: ignore[union-attr]

    result = lg.marker(2, 0, commit=False)  # offset 6
    assert isinstance(result, ProducerAppendInfo)
    assert result.completed_txn == CompletedTxn(2, 1, 6, is_aborted=True)
    assert lg.aborted == [(CompletedTxn(2, 1, 6, True), 7)]
    assert m.ongoing_transactions() == []
    # Both decided, but their markers are not below the high watermark yet.
    assert m.first_unstable_offset() == 1
    m.on_high_watermark(6)  # 3's marker (5) is below, 2's (6) is not
    assert m.first_unstable_offset() == 1
    m.on_high_watermark(7)
    assert m.first_unstable_offset() is None


def test_lso_bookkeeping_unreplicated_txn_before_an_ongoing_one(lg: Log) -> None:
    m = lg.m
    lg.append(header(pid=1, txn=True))  # 0
    lg.append(header(pid=2, txn=True))  # 1
    lg.marker(1, 0, commit=True)  # 2
    assert m.ongoing_transactions() == [(2, 1)]
    assert m.first_unstable_offset() == 0  # 1's txn is decided but not replicated
    m.on_high_watermark(3)
    assert m.first_unstable_offset() == 1  # now the ongoing one holds it
    lg.append(header(pid=1, seq=1, txn=True))  # 3: a new transaction of producer 1
    assert m.ongoing_transactions() == [(2, 1), (1, 3)]
    lg.marker(2, 0, commit=False)  # 4
    assert m.first_unstable_offset() == 1
    m.on_high_watermark(5)
    assert m.first_unstable_offset() == 3


def test_last_stable_offset_of_a_completed_txn_skips_its_own_producer(lg: Log) -> None:
    m = lg.m
    lg.append(header(pid=1, txn=True))  # 0
    lg.append(header(pid=2, txn=True))  # 1
    info = m.prepare_marker(1, 0, False, 0, 2, 1, COORDINATOR)
    assert isinstance(info, ProducerAppendInfo) and info.completed_txn is not None
    m.update(info)
    # Producer 1's own transaction is still in the ongoing set (complete_txn not yet called): it is skipped.
    assert m.last_stable_offset(info.completed_txn) == 1
    m.complete_txn(info.completed_txn)
    info2 = m.prepare_marker(2, 0, False, 0, 3, 1, COORDINATOR)
    assert isinstance(info2, ProducerAppendInfo) and info2.completed_txn is not None
    m.update(info2)
    assert m.last_stable_offset(info2.completed_txn) == 4  # no other open txn: just past its marker


def test_complete_txn_of_an_unknown_transaction_raises(m: ProducerStateManager) -> None:
    with pytest.raises(ValueError):
        m.complete_txn(CompletedTxn(PID, 0, 5, True))


def test_non_transactional_batch_during_a_transaction_is_invalid_txn_state(lg: Log) -> None:
    lg.append(header(seq=0, txn=True))
    assert refused(lg.append(header(seq=1, txn=False)), ErrorCode.invalid_txn_state)
    assert refused(lg.m.prepare_batch(header(seq=1, txn=False), 1, COORDINATOR), ErrorCode.invalid_txn_state)
    assert isinstance(lg.append(header(seq=1, txn=True)), ProducerAppendInfo)


def test_empty_transaction_marker_completes_nothing(lg: Log) -> None:
    lg.append(header(seq=0))  # idempotent batch, no transaction
    result = lg.marker(PID, 0, commit=False, coordinator_epoch=3, ts=50)
    assert isinstance(result, ProducerAppendInfo) and result.completed_txn is None
    entry = lg.m.producer(PID)
    assert entry is not None
    assert (entry.coordinator_epoch, entry.last_timestamp, len(entry.batches)) == (3, 50, 1)
    assert lg.aborted == []


def test_marker_with_lower_epoch_is_refused(lg: Log) -> None:
    lg.append(header(epoch=5, txn=True))
    assert refused(lg.marker(PID, 4, commit=True), ErrorCode.invalid_producer_epoch)
    assert lg.m.ongoing_transactions() == [(PID, 0)]


def test_marker_with_a_higher_epoch_closes_the_txn_and_forgets_batches(lg: Log) -> None:
    """KIP-890 part 2 coordinators write markers at a bumped epoch."""
    lg.append(header(epoch=5, seq=0, txn=True))
    result = lg.marker(PID, 6, commit=False)
    assert isinstance(result, ProducerAppendInfo) and result.completed_txn == CompletedTxn(PID, 0, 1, True)
    entry = lg.m.producer(PID)
    assert entry is not None and entry.producer_epoch == 6 and entry.is_empty
    assert refused(lg.append(header(epoch=5, seq=1, txn=True)), ErrorCode.invalid_producer_epoch)


def test_zombie_coordinator_is_fenced(lg: Log) -> None:
    lg.append(header(txn=True))
    lg.marker(PID, 0, commit=True, coordinator_epoch=4)
    lg.append(header(seq=1, txn=True))
    assert refused(lg.marker(PID, 0, commit=False, coordinator_epoch=3), ErrorCode.transaction_coordinator_fenced)
    assert lg.m.ongoing_transactions() == [(PID, 2)]
    assert isinstance(lg.marker(PID, 0, commit=False, coordinator_epoch=4), ProducerAppendInfo)


def test_recovery_origin_applies_without_validation(lg: Log) -> None:
    m = lg.m
    lg.append(header(epoch=5, seq=10, txn=True), RECOVERY)  # 0: starts a txn
    assert m.ongoing_transactions() == [(PID, 0)]
    # Gap, lower epoch, non-transactional during a txn: all applied as they come.
    info = lg.append(header(epoch=5, seq=99, txn=True), RECOVERY)  # 1
    assert isinstance(info, ProducerAppendInfo) and info.entry.last_seq == 99
    info = lg.append(header(epoch=4, seq=3, txn=False), RECOVERY)  # 2
    assert isinstance(info, ProducerAppendInfo)
    assert info.entry.producer_epoch == 4 and info.entry.current_txn_first_offset == 0
    # Fenced coordinator epoch and lower producer epoch on a marker: applied too.
    lg.marker(PID, 9, commit=True, coordinator_epoch=7, origin=RECOVERY)  # 3
    result = lg.append(header(epoch=9, seq=0, txn=True), RECOVERY)  # 4
    assert isinstance(result, ProducerAppendInfo) and result.started_txn_first_offset == 4
    result = lg.marker(PID, 8, commit=False, coordinator_epoch=2, origin=RECOVERY)  # 5
    assert isinstance(result, ProducerAppendInfo) and result.completed_txn == CompletedTxn(PID, 4, 5, True)
    assert m.producer(PID).coordinator_epoch == 2  # type: ignore[union-attr]
    # Recovery never reports duplicates either.
    again = m.prepare_batch(header(epoch=8, seq=0), 6, RECOVERY)
    assert isinstance(again, ProducerAppendInfo)


def test_coordinator_origin_skips_sequence_checks_but_not_epoch(lg: Log) -> None:
    lg.append(header(epoch=2, seq=0, txn=True))
    # Transactional offset commits carry no sequence numbers.
    result = lg.append(header(epoch=2, seq=-1, txn=True), COORDINATOR)
    assert isinstance(result, ProducerAppendInfo) and result.started_txn_first_offset is None
    assert result.entry.last_seq == -1
    assert isinstance(lg.append(header(epoch=3, seq=-1, txn=True), COORDINATOR), ProducerAppendInfo)
    assert refused(lg.append(header(epoch=2, seq=-1, txn=True), COORDINATOR), ErrorCode.invalid_producer_epoch)


# -- expiry ---------------------------------------------------------------------


def test_idle_producers_expire_but_not_inside_a_transaction(lg: Log) -> None:
    m = lg.m
    lg.append(header(pid=1, ts=1_000))
    lg.append(header(pid=2, ts=1_000, txn=True))
    lg.append(header(pid=3, ts=30_000))
    assert m.remove_expired(1_000 + EXPIRATION_MS - 1) == []
    assert m.remove_expired(1_000 + EXPIRATION_MS) == [1]
    assert set(m.producers()) == {2, 3}
    assert m.remove_expired(10**9) == [3]  # 2 stays while its transaction is open
    lg.marker(2, 0, commit=True, ts=500_000)
    assert m.remove_expired(500_000 + EXPIRATION_MS) == [2]
    # An expired producer is unknown again: any sequence, any epoch.
    assert isinstance(lg.append(header(pid=1, epoch=0, seq=77)), ProducerAppendInfo)


# -- snapshots ------------------------------------------------------------------


def _populate(lg: Log) -> None:
    lg.append(header(pid=1, epoch=0, seq=0, count=3, ts=100))  # 0-2
    lg.append(header(pid=1, epoch=0, seq=3, count=2, ts=101))  # 3-4
    lg.append(header(pid=2, epoch=4, seq=10, ts=102, txn=True))  # 5: open txn
    lg.append(header(pid=3, epoch=1, seq=0, ts=103, txn=True))  # 6
    lg.marker(3, 1, commit=True, coordinator_epoch=9, ts=104)  # 7
    lg.marker(4, 2, commit=False, coordinator_epoch=1, ts=105)  # 8: marker-only producer
    lg.append(header(pid=5, epoch=0, seq=0, ts=106, txn=True))  # 9: open txn


def test_snapshot_round_trip_with_ongoing_transactions(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path, EXPIRATION_MS)
    lg = Log(m)
    _populate(lg)
    path = m.take_snapshot(lg.next_offset)
    assert path == tmp_path / "00000000000000000010.snapshot"
    assert m.snapshot_offsets() == [10]

    loaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    assert loaded.snapshot_offsets() == [10]
    assert loaded.load(0, 10) == 10
    assert loaded.ongoing_transactions() == [(2, 5), (5, 9)]
    assert loaded.first_unstable_offset() == 5
    before, after = m.producers(), loaded.producers()
    assert set(before) == set(after) == {1, 2, 3, 4, 5}
    for pid in before:
        b, a = before[pid], after[pid]
        assert (
            a.producer_epoch,
            a.last_seq,
            a.last_data_offset,
            a.coordinator_epoch,
            a.last_timestamp,
            a.current_txn_first_offset,
        ) == (
            b.producer_epoch,
            b.last_seq,
            b.last_data_offset,
            b.coordinator_epoch,
            b.last_timestamp,
            b.current_txn_first_offset,
        )
    # Only each producer's newest batch is kept (as in Kafka).
    assert after[1].batches == (BatchMetadata(4, 4, 1, 101),)
    assert after[4].is_empty and after[4].coordinator_epoch == 1
    # The restored state validates like the original.
    lg2 = Log(loaded, 10)
    assert lg2.append(header(pid=1, seq=3, count=2)) == Duplicate(3, 4, 101)
    assert refused(lg2.append(header(pid=1, seq=0, count=3)), ErrorCode.out_of_order_sequence_number)
    assert isinstance(lg2.append(header(pid=1, seq=5)), ProducerAppendInfo)
    assert refused(lg2.marker(3, 1, commit=True, coordinator_epoch=8), ErrorCode.transaction_coordinator_fenced)
    result = lg2.marker(2, 4, commit=False, coordinator_epoch=9)
    assert isinstance(result, ProducerAppendInfo) and result.completed_txn == CompletedTxn(2, 5, 11, True)


def test_snapshot_layout(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path, EXPIRATION_MS)
    Log(m).append(header(pid=7, epoch=3, seq=5, count=2, ts=42, txn=True))
    data = m.take_snapshot(2).read_bytes()
    assert len(data) == 10 + 46
    assert struct.unpack_from(">hxxxxi", data) == (1, 1)
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (7, 3, 6, 1, 1, 42, -1, 0)


def test_load_without_snapshot_replays_from_log_start(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path / "missing", EXPIRATION_MS)
    assert m.load(17, 40) == 17
    assert m.producers() == {} and m.snapshot_offsets() == []


def test_corrupt_snapshot_is_deleted_and_the_older_one_used(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    m = ProducerStateManager(tmp_path, EXPIRATION_MS)
    lg = Log(m)
    lg.append(header(pid=1, seq=0))
    m.take_snapshot(1)
    lg.append(header(pid=2, seq=0))
    newest = m.take_snapshot(2)
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0xFF  # a flipped bit in an entry: CRC mismatch
    newest.write_bytes(bytes(data))

    loaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    with caplog.at_level(logging.WARNING, logger="onceflow.log.producer_state"):
        assert loaded.load(0, 2) == 1
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "CRC" in caplog.records[0].getMessage()
    assert not newest.exists() and loaded.snapshot_offsets() == [1]
    assert set(loaded.producers()) == {1}


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d[:-3],  # truncated: length does not match the count
        lambda d: struct.pack(">h", 2) + d[2:],  # unknown version
        lambda d: d[:6] + struct.pack(">i", 5) + d[10:],  # count changed: CRC mismatch
        lambda d: b"\x00",  # too short for the header
        lambda d: b"",
    ],
)
def test_every_kind_of_damage_falls_back(tmp_path: Path, damage) -> None:  # type: ignore[no-untyped-def]
    m = ProducerStateManager(tmp_path, EXPIRATION_MS)
    lg = Log(m)
    lg.append(header(pid=1, seq=0))
    m.take_snapshot(1)
    lg.append(header(pid=2, seq=0))
    newest = m.take_snapshot(2)
    newest.write_bytes(damage(newest.read_bytes()))
    loaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    assert loaded.load(0, 2) == 1
    assert not newest.exists()
    assert set(loaded.producers()) == {1}


def test_all_snapshots_corrupt_replays_from_log_start(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path, EXPIRATION_MS)
    Log(m).append(header())
    m.take_snapshot(1).write_bytes(b"garbage")
    loaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    assert loaded.load(0, 1) == 0
    assert loaded.snapshot_offsets() == [] and loaded.producers() == {}


def test_snapshots_above_the_log_end_are_deleted(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path, EXPIRATION_MS)
    lg = Log(m)
    lg.append(header(pid=1, seq=0))
    m.take_snapshot(1)
    lg.append(header(pid=2, seq=0))
    m.take_snapshot(2)
    # A crash took offset 1 away: the log ends at 1.
    loaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    assert loaded.load(0, 1) == 1
    assert loaded.snapshot_offsets() == [1]
    assert not (tmp_path / "00000000000000000002.snapshot").exists()
    assert set(loaded.producers()) == {1}


def test_load_drops_producers_whose_data_is_below_the_log_start(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path, EXPIRATION_MS)
    lg = Log(m)
    lg.append(header(pid=1, seq=0))  # 0
    lg.append(header(pid=2, seq=0, txn=True))  # 1: open txn, kept
    lg.marker(3, 0, commit=True)  # 2: marker only, kept for its epochs
    lg.append(header(pid=4, seq=0))  # 3
    lg.append(header(pid=5, seq=0))  # 4
    m.take_snapshot(5)
    loaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    assert loaded.load(4, 5) == 5
    assert set(loaded.producers()) == {2, 3, 5}
    assert loaded.ongoing_transactions() == [(2, 1)]


def test_snapshots_before_the_log_start_are_deleted(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path, EXPIRATION_MS)
    lg = Log(m)
    lg.append(header(pid=1, seq=0, txn=True))
    m.take_snapshot(1)
    loaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    assert loaded.load(3, 9) == 3
    assert loaded.snapshot_offsets() == [] and loaded.ongoing_transactions() == []


def test_snapshots_are_kept_while_a_restart_may_need_them(tmp_path: Path) -> None:
    """Kept: the newest at or below ``keep_from`` (the segment before the active one), every one
    from there to the active segment's base, and above that only the newest (issue 7, defect 4:
    evicting by count dropped the one a crash needs after two clean restarts)."""
    m = ProducerStateManager(tmp_path, EXPIRATION_MS)
    lg = Log(m)
    for i in range(9):
        lg.append(header(seq=i))
        m.take_snapshot(lg.next_offset)
    assert m.snapshot_offsets() == list(range(1, 10)), "taking a snapshot deletes nothing"
    m.retain_snapshots(log_start=0, keep_from=4, active_base=6)
    assert m.snapshot_offsets() == [4, 5, 6, 9]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{o:020d}.snapshot" for o in (4, 5, 6, 9)]
    m.retain_snapshots(log_start=0, keep_from=3, active_base=7)  # none at or below 3: all up to the active base stay
    assert m.snapshot_offsets() == [4, 5, 6, 9]
    m.retain_snapshots(log_start=0, keep_from=8, active_base=8)  # no snapshot at 8: 6 is the newest at or below it
    assert m.snapshot_offsets() == [6, 9]
    m.retain_snapshots(log_start=7, keep_from=8, active_base=8)  # retention moved the log start past 6
    assert m.snapshot_offsets() == [9]
    m.take_snapshot(9)  # same offset again: replaced in place
    assert m.snapshot_offsets() == [9]
    with pytest.raises(ValueError):
        m.take_snapshot(2)


def test_load_ignores_stray_files_and_removes_leftover_tmp(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path, EXPIRATION_MS)
    Log(m).append(header())
    m.take_snapshot(1)
    (tmp_path / "00000000000000000005.snapshot.tmp").write_bytes(b"half written")
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "notes.snapshot").write_bytes(b"")
    loaded = ProducerStateManager(tmp_path, EXPIRATION_MS)
    assert loaded.load(0, 1) == 1
    assert not (tmp_path / "00000000000000000005.snapshot.tmp").exists()
    assert (tmp_path / "00000000000000000000.log").exists()


def test_load_replaces_in_memory_state(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path, EXPIRATION_MS)
    lg = Log(m)
    lg.append(header(pid=1, txn=True))
    m.take_snapshot(1)
    lg.append(header(pid=2, txn=True))
    lg.marker(1, 0, commit=True)
    assert m.load(0, 3) == 1
    assert set(m.producers()) == {1}
    assert m.ongoing_transactions() == [(1, 0)]
    assert m.first_unstable_offset() == 0


def test_truncate_forgets_everything(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path, EXPIRATION_MS)
    lg = Log(m)
    lg.append(header(pid=1, txn=True))
    lg.append(header(pid=2, txn=True))
    lg.marker(2, 0, commit=True)
    m.take_snapshot(3)
    m.truncate()
    assert m.producers() == {} and m.ongoing_transactions() == [] and m.first_unstable_offset() is None
    assert m.snapshot_offsets() == [] and list(tmp_path.iterdir()) == []
    assert m.load(0, 0) == 0
