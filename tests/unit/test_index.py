"""Offset and time index lookups, persistence and damage detection."""

from __future__ import annotations

from pathlib import Path

import pytest

from onceflow.log.index import IndexCorrupt, OffsetIndex, TimeIndex


def test_offset_index_finds_the_last_entry_at_or_before(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index")
    for rel, pos in ((0, 0), (10, 4096), (25, 8300), (40, 12000)):
        index.append(rel, pos)
    assert index.lookup(0) == (0, 0)
    assert index.lookup(9) == (0, 0)
    assert index.lookup(10) == (10, 4096)
    assert index.lookup(39) == (25, 8300)
    assert index.lookup(10**6) == (40, 12000)
    index.append(30, 99999)  # not after the last entry: ignored
    assert len(index) == 4
    index.close()
    reopened = OffsetIndex(tmp_path / "0.index")
    reopened.load()
    assert reopened.lookup(26) == (25, 8300) and len(reopened) == 4
    reopened.close()


def test_empty_offset_index_points_at_the_segment_start(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index")
    assert index.lookup(123) == (0, 0) and index.last() == (0, 0)
    index.close()


def test_time_index_lookup_is_strictly_before_the_target(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "0.timeindex")
    for ts, rel in ((1000, 0), (2000, 5), (3000, 9)):
        index.maybe_append(ts, rel)
    index.maybe_append(2500, 12)  # timestamps in the index never go backwards
    assert len(index) == 3
    assert index.lookup(500) == 0
    assert index.lookup(2000) == 0, "an entry equal to the target may hide an earlier match"
    assert index.lookup(2001) == 5
    assert index.lookup(10**12) == 9
    assert index.last_timestamp() == 3000
    index.close()


@pytest.mark.parametrize("content", [b"\x00" * 5, b"\x00\x00\x00\x05\x00\x00\x00\x10" + b"\x00\x00\x00\x01\x00\x00\x00\x20"])
def test_damaged_offset_index_is_detected(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "0.index"
    path.write_bytes(content)
    index = OffsetIndex(path)
    with pytest.raises(IndexCorrupt):
        index.load()
    index.close()
