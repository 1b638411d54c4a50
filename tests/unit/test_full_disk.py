"""A full disk (ENOSPC) on the paths the event loop writes itself: segment rolls, producer-state
snapshots, aborted-transaction index entries, topic metadata (issue 7, defect 7).

Each write is made to fail with a real OSError(ENOSPC) where it happens.  The rule under test:
a write that fails before anything changed is refused with KAFKA_STORAGE_ERROR and tried again
by the next request, so it succeeds once space returns; a write that fails after the in-memory
state moved marks the partition failed (it refuses writes, keeps serving reads, and is recovered
from its files at the next start).  Nothing stored is touched, nothing raises out of the log.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest

from onceflow.broker.partitions import CLEAN_SHUTDOWN_MARKER, TOPICS_FILE, PartitionRegistry
from onceflow.config import BrokerConfig, TopicConfig
from onceflow.log import producer_state, segment
from onceflow.log.aborted_index import TransactionIndex
from onceflow.log.partition_log import PartitionLog, ReadResult
from onceflow.protocol.errors import ErrorCode
from onceflow.records.batch import Invalid, scan
from onceflow.records.builder import build_batch

T0 = 1_700_000_000_000


def enospc(*_: Any, **__: Any) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


def open_log(path: Path, clean: bool = True, **overrides: object) -> PartitionLog:
    return PartitionLog("t", 0, path, TopicConfig(dict(overrides), BrokerConfig()), T0, clean_shutdown=clean)


def flush(log: PartitionLog) -> None:
    point = log.flush_point()
    if point is not None:
        point.segment.flush()
        log.on_flushed(point)


def record(size: int = 100) -> bytes:
    return build_batch([(None, b"r" * size)], T0)


def storage_error(result: object) -> bool:
    return isinstance(result, Invalid) and result.error is ErrorCode.kafka_storage_error


def test_a_roll_that_cannot_create_the_next_segment_refuses_the_batch_and_retries_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 1024})
    while len(log.segments) == 1 and log.segments[0].size + len(record()) <= 1024:
        log.append_produced(record(), T0)
    end, files = log.log_end_offset, sorted(p.name for p in (tmp_path / "t-0").iterdir())
    with monkeypatch.context() as m:
        m.setattr(segment, "TimeIndex", enospc)  # the new segment's second file cannot be created
        assert storage_error(log.append_produced(record(), T0))
        assert storage_error(log.append_batch(record(), T0))
    assert log.log_end_offset == end and len(log.segments) == 1 and not log.failed
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == files, "no half-made segment is left"
    # Space is back: the next append rolls and is written.
    result = log.append_produced(record(), T0)
    assert not isinstance(result, Invalid) and result.base_offset == end and len(log.segments) == 2
    flush(log)
    log.close()


@pytest.mark.parametrize("kind", ["offset", "time"])
def test_an_index_entry_the_disk_refuses_leaves_the_segment_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Before: the segment's size had moved, its next offset had not, and reads returned the
    refused batch as if it were stored (seen on a full tmpfs)."""
    from onceflow.log.index import OffsetIndex, TimeIndex

    log = open_log(tmp_path / "t-0", **{"index.interval.bytes": 1})  # every batch adds index entries
    for i in range(3):
        assert not isinstance(log.append_produced(build_batch([(None, b"r")], T0 + i), T0), Invalid)
    flush(log)
    active = log.segments[-1]
    before = (log.log_end_offset, active.size, active.next_offset, len(active.index), len(active.time_index))
    with monkeypatch.context() as m:
        m.setattr(OffsetIndex if kind == "offset" else TimeIndex, "_write", enospc)
        assert storage_error(log.append_produced(build_batch([(None, b"refused")], T0 + 10), T0))
    if kind == "time":  # the offset entry landed first; it points where the next batch goes
        before = (*before[:3], before[3] + 1, before[4])
    assert (log.log_end_offset, active.size, active.next_offset, len(active.index), len(active.time_index)) == before
    assert not log.failed and log.flush_point() is None
    result = log.read(0, 1 << 20, max_offset=log.log_end_offset + 1)
    assert isinstance(result, ReadResult) and [h.base_offset for _, h in scan(result.records)] == [0, 1, 2]
    # Space is back: the next batch takes that offset and position, and everything reloads cleanly.
    ok = log.append_produced(build_batch([(None, b"accepted")], T0 + 11), T0)
    assert not isinstance(ok, Invalid) and ok.base_offset == 3
    flush(log)
    assert log.flush_all()
    log.close()
    reopened = open_log(tmp_path / "t-0", **{"index.interval.bytes": 1})
    found = reopened.segments[-1].find_batch(3)
    assert found is not None and found[1].base_offset == 3 and reopened.offset_for_timestamp(T0 + 11) == (3, T0 + 11)
    reopened.close()


def test_a_roll_whose_snapshot_cannot_be_written_still_rolls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The snapshot only shortens recovery: without it a crash replays from an older one."""
    log = open_log(tmp_path / "t-0", **{"segment.bytes": 1024})
    monkeypatch.setattr(producer_state, "atomic_write", enospc)
    for seq in range(20):
        result = log.append_produced(build_batch([(None, b"r" * 100)], T0, producer_id=4, producer_epoch=0,
                                                 base_sequence=seq), T0)
        assert not isinstance(result, Invalid), result
    assert len(log.segments) > 2 and log.producer_state.snapshot_offsets() == []
    assert not list((tmp_path / "t-0").glob("*.snapshot*"))
    flush(log)
    assert log.flush_all() is True, "a missing shutdown snapshot does not make the shutdown unclean"
    log.close()
    monkeypatch.undo()
    crashed = open_log(tmp_path / "t-0", clean=False, **{"segment.bytes": 1024})
    assert crashed.producer_state.producer(4).last_seq == 19, "replayed from the log start instead"
    crashed.close()


def test_an_aborted_index_entry_that_cannot_be_written_fails_the_partition_until_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "t-0")
    txn = build_batch([(None, b"aborted")], T0, producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
    assert not isinstance(log.append_produced(txn, T0), Invalid)
    with monkeypatch.context() as m:
        m.setattr(TransactionIndex, "append", enospc)
        assert storage_error(log.append_marker(9, 0, False, 0, T0))
    assert log.failed
    # Every write path refuses now; reads of what is durable go on.
    assert storage_error(log.append_produced(record(), T0))
    assert storage_error(log.append_batch(record(), T0))
    assert storage_error(log.append_marker(9, 0, False, 0, T0))
    assert log.flush_all() is False, "a failed partition cannot be shut down cleanly"
    log.close()
    # The next start recovers it from its files: the marker is there, so is the aborted entry.
    recovered = open_log(tmp_path / "t-0", clean=False)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in recovered.aborted_transactions(0, 10)] == [(9, 0, 1)]
    assert recovered.producer_state.ongoing_transactions() == [] and not recovered.failed
    assert not isinstance(recovered.append_produced(record(), T0), Invalid)
    recovered.close()


def test_topic_changes_the_disk_refuses_leave_memory_and_files_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the topic was added in memory, then topics.json could not be written; after a
    restart it was gone, and until one __consumer_offsets answered NOT_COORDINATOR."""
    from onceflow.broker import partitions

    registry = PartitionRegistry(tmp_path, BrokerConfig())
    registry.open(T0)
    registry.create_topic("kept", 1, {}, T0)

    def topics_file() -> list[tuple[str, int, dict[str, Any]]]:
        return [(e["name"], e["partitions"], e["configs"]) for e in json.loads((tmp_path / TOPICS_FILE).read_text())]

    before = topics_file()
    with monkeypatch.context() as m:
        m.setattr(partitions, "atomic_write", enospc)
        with pytest.raises(OSError):
            registry.create_topic("__consumer_offsets", 3, {}, T0, internal=True)
        with pytest.raises(OSError):
            registry.add_partitions("kept", 2, T0)
        with pytest.raises(OSError):
            registry.set_topic_config("kept", {"retention.ms": 1000})
        with pytest.raises(OSError):
            registry.delete_topic("kept")
    assert set(registry.topics) == {"kept"} and len(registry.topics["kept"].partitions) == 1
    assert registry.topics["kept"].config.overrides == {} and registry.get("kept", 0) is not None
    assert topics_file() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["kept-0"], "no partition directory left behind"
    # Space is back: the same changes succeed without a restart.
    registry.create_topic("__consumer_offsets", 3, {}, T0, internal=True)
    registry.add_partitions("kept", 2, T0)
    assert topics_file() == [("__consumer_offsets", 3, {}), ("kept", 2, {})]
    registry.close()


def test_a_failed_partition_leaves_no_clean_shutdown_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = PartitionRegistry(tmp_path, BrokerConfig())
    registry.open(T0)
    topic = registry.create_topic("t", 2, {}, T0)
    healthy, failing = topic.partitions
    assert not isinstance(healthy.append_produced(record(), T0), Invalid)
    txn = build_batch([(None, b"x")], T0, producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
    failing.append_produced(txn, T0)
    with monkeypatch.context() as m:
        m.setattr(TransactionIndex, "append", enospc)
        assert storage_error(failing.append_marker(9, 0, False, 0, T0))
    registry.close(clean=True)
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists(), "the next start must recover from the files"
    reopened = PartitionRegistry(tmp_path, BrokerConfig())
    reopened.open(T0)
    assert not reopened.clean_start
    assert [p.log_end_offset for p in reopened.topics["t"].partitions] == [1, 2]
    reopened.close()
