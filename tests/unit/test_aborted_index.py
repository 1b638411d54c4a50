"""The per-segment aborted-transaction index (Kafka's TransactionIndex)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from onceflow.log.aborted_index import ENTRY_SIZE, AbortedTxn, TransactionIndex, txn_index_name
from onceflow.log.index import IndexCorrupt

BASE = 100


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / txn_index_name(BASE)


def test_file_name_and_lazy_creation(path: Path) -> None:
    assert path.name == "00000000000000000100.txnindex"
    index = TransactionIndex(path, BASE)
    assert index.entries() == [] and index.collect(0, 10**9) == ([], False)
    index.flush()
    assert not path.exists()
    index.append(AbortedTxn(1, 100, 105, 106))
    assert path.stat().st_size == ENTRY_SIZE == 34
    index.close()


def test_entry_layout_is_kafkas(path: Path) -> None:
    index = TransactionIndex(path, BASE)
    index.append(AbortedTxn(producer_id=7, first_offset=90, last_offset=120, last_stable_offset=95))
    index.close()
    assert path.read_bytes() == struct.pack(">hqqqq", 0, 7, 90, 120, 95)


def test_collect_overlap_and_complete_flag(path: Path) -> None:
    index = TransactionIndex(path, BASE)
    a = AbortedTxn(1, first_offset=95, last_offset=110, last_stable_offset=95)
    b = AbortedTxn(2, first_offset=105, last_offset=120, last_stable_offset=111)
    c = AbortedTxn(3, first_offset=125, last_offset=130, last_stable_offset=131)
    d = AbortedTxn(4, first_offset=140, last_offset=150, last_stable_offset=151)
    for entry in (a, b, c, d):
        index.append(entry)
    # Ends before the fetch offset: a is skipped; b overlaps; b's LSO (111) < 115 keeps looking;
    # c starts past the upper bound, but its LSO 131 >= 115 ends the search (d is not seen).
    assert index.collect(111, 115) == ([b], True)
    # Both bounds: last_offset >= fetch is inclusive, first_offset < upper is exclusive.
    # c (first offset 125) is outside [110, 125), but its LSO 131 >= 125 completes the search.
    assert index.collect(110, 125) == ([a, b], True)
    assert index.collect(120, 125) == ([b], True)  # c's LSO 131 >= 125
    assert index.collect(121, 125) == ([], True)
    assert index.collect(0, 200) == ([a, b, c, d], False)  # nothing's LSO reaches 200: look at later segments
    assert index.collect(151, 300) == ([], False)
    index.close()


def test_collect_stops_at_the_first_entry_whose_lso_reaches_the_upper_bound(path: Path) -> None:
    index = TransactionIndex(path, BASE)
    a = AbortedTxn(1, first_offset=100, last_offset=110, last_stable_offset=111)
    b = AbortedTxn(2, first_offset=100, last_offset=112, last_stable_offset=113)
    index.append(a)
    index.append(b)
    assert index.collect(100, 111) == ([a], True)  # a's LSO 111 >= 111: b (first offset 100 < 111) is not seen
    assert index.collect(100, 112) == ([a, b], True)
    assert index.collect(100, 114) == ([a, b], False)
    index.close()


def test_persistence_round_trip(path: Path) -> None:
    entries = [AbortedTxn(1, 95, 110, 95), AbortedTxn(2, 105, 120, 111), AbortedTxn(-5, 121, 2**40, 2**40 + 1)]
    index = TransactionIndex(path, BASE)
    for entry in entries:
        index.append(entry)
    index.flush()
    index.close()
    reopened = TransactionIndex(path, BASE)
    reopened.load()
    assert reopened.entries() == entries and len(reopened) == 3
    reopened.append(AbortedTxn(3, 2**40 + 2, 2**40 + 5, 2**40 + 6))  # appends after the loaded entries
    reopened.close()
    again = TransactionIndex(path, BASE)
    again.load()
    assert len(again.entries()) == 4
    again.close()


def test_existing_file_must_be_loaded_before_use(path: Path) -> None:
    index = TransactionIndex(path, BASE)
    index.append(AbortedTxn(1, 100, 101, 102))
    index.close()
    unloaded = TransactionIndex(path, BASE)
    with pytest.raises(RuntimeError):
        unloaded.collect(0, 200)
    with pytest.raises(RuntimeError):
        unloaded.append(AbortedTxn(1, 103, 104, 105))
    unloaded.reset()  # discarding it is fine too (rebuild after damage)
    assert unloaded.entries() == [] and path.stat().st_size == 0
    unloaded.close()


def _corrupt(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    index = TransactionIndex(path, BASE)
    with pytest.raises(IndexCorrupt):
        index.load()
    index.close()


def test_partial_entry_is_corrupt(path: Path) -> None:
    _corrupt(path, AbortedTxn(1, 100, 101, 102).encode() + b"\x00" * 10)


def test_wrong_version_is_corrupt(path: Path) -> None:
    _corrupt(path, struct.pack(">hqqqq", 1, 1, 100, 101, 102))


def test_last_offset_before_segment_start_is_corrupt(path: Path) -> None:
    """Kafka's TransactionIndex.sanityCheck: an abort marker of this segment lies at or after its base."""
    _corrupt(path, AbortedTxn(1, 50, 99, 100).encode())


def test_entries_out_of_order_are_corrupt(path: Path) -> None:
    _corrupt(path, AbortedTxn(1, 100, 110, 111).encode() + AbortedTxn(2, 100, 105, 106).encode())


def test_first_offset_before_segment_start_is_fine(path: Path) -> None:
    """A transaction may start in an earlier segment; only its marker must be in this one."""
    path.write_bytes(AbortedTxn(1, 10, 100, 101).encode())
    index = TransactionIndex(path, BASE)
    index.load()
    assert index.entries() == [AbortedTxn(1, 10, 100, 101)]
    index.close()


def test_truncate_to_drops_markers_at_or_after_the_offset(path: Path) -> None:
    index = TransactionIndex(path, BASE)
    entries = [
        AbortedTxn(i, 100 + 10 * i, 105 + 10 * i, 106 + 10 * i) for i in range(4)
    ]  # last offsets 105, 115, 125, 135
    for entry in entries:
        index.append(entry)
    index.truncate_to(200)
    assert index.entries() == entries
    index.truncate_to(125)
    assert index.entries() == entries[:2]
    assert path.stat().st_size == 2 * ENTRY_SIZE
    index.append(AbortedTxn(9, 118, 120, 121))  # appending resumes after the kept entries
    index.close()
    reopened = TransactionIndex(path, BASE)
    reopened.load()
    assert reopened.entries() == [*entries[:2], AbortedTxn(9, 118, 120, 121)]
    reopened.truncate_to(0)
    assert reopened.entries() == [] and path.stat().st_size == 0
    reopened.close()


def test_out_of_order_append_raises(path: Path) -> None:
    index = TransactionIndex(path, BASE)
    index.append(AbortedTxn(1, 100, 110, 111))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 100, 110, 111))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 100, 105, 111))
    assert len(index.entries()) == 1 and path.stat().st_size == ENTRY_SIZE
    index.close()


def test_reset_and_delete(path: Path) -> None:
    index = TransactionIndex(path, BASE)
    index.append(AbortedTxn(1, 100, 110, 111))
    index.reset()
    assert index.entries() == [] and path.stat().st_size == 0
    index.append(AbortedTxn(1, 100, 105, 106))  # order restarts after a reset
    index.delete()
    assert not path.exists() and index.entries() == []
    index.delete()  # idempotent
