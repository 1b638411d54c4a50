"""Producer ids are unique, also across restarts and crashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from onceflow.broker.producer_ids import ProducerIdBlocks


def test_ids_are_consecutive_within_a_run(tmp_path: Path) -> None:
    ids = ProducerIdBlocks(tmp_path, block_size=10)
    assert [ids.allocate() for _ in range(25)] == list(range(25))


def test_a_restart_never_reuses_an_id(tmp_path: Path) -> None:
    first = ProducerIdBlocks(tmp_path, block_size=10)
    used = [first.allocate() for _ in range(13)]  # block [10, 20) reserved, 10..12 used
    # No clean shutdown is needed: the reservation was written before the ids were used.
    second = ProducerIdBlocks(tmp_path, block_size=10)
    more = [second.allocate() for _ in range(5)]
    assert min(more) == 20 and not set(used) & set(more)


def test_a_damaged_reservation_file_stops_the_broker(tmp_path: Path) -> None:
    (tmp_path / "producer_ids").write_text("garbage")
    with pytest.raises(RuntimeError):
        ProducerIdBlocks(tmp_path)
