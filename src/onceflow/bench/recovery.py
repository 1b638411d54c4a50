"""``onceflow bench recovery`` and ``restart``: how long a partition, and a whole broker, take to
come back.

``restart`` is the broker process (``onceflow.broker.process``): it is started on a temporary
data directory, timed from its start to its ``ready`` line once empty, then filled with
``--log-mib`` of acks=all records spread over ``--partitions`` partitions of one topic, and
timed again after a clean stop (SIGTERM: snapshots and the clean-shutdown marker written) and
after a SIGKILL (recovery CRC-checks every partition's active segment and replays producer
state from its newest snapshot).  What should stay flat as the log grows is the restart, not
the fill.

``recovery``, one partition alone, without a broker:

No broker and no client: the benchmark writes one partition's log with
``PartitionLog`` on real files in a temporary directory (one idempotent
producer, 100-record batches), then does what issue 7 found slow: two clean
restarts (each leaves a producer-state snapshot at the log end) and a crash
(the log is closed without its shutdown work).  It times the crash-recovery
open, which CRC-checks the active segment and rebuilds producer state from
the newest snapshot at or below that segment's base.  The figure should
depend on the active segment, not on the size of the log.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from ..broker.process import FAST_GROUPS, BrokerProcess
from ..config import BrokerConfig, TopicConfig
from ..log.partition_log import PartitionLog
from ..records.builder import build_batch
from .workloads import Result, bench_produce, create_topic

_NOW = 1_700_000_000_000
_PRODUCER_ID = 1
_RECORDS_PER_BATCH = 100


def bench_recovery(log_mib: int, segment_mib: int, record_size: int) -> Result:
    directory = Path(tempfile.mkdtemp(prefix="onceflow-bench-recovery-"))
    try:
        config = TopicConfig({"segment.bytes": segment_mib << 20}, BrokerConfig())
        records = [(None, b"x" * record_size)] * _RECORDS_PER_BATCH
        sequence = 0

        def append(log: PartitionLog) -> None:
            nonlocal sequence
            batch = build_batch(records, _NOW, producer_id=_PRODUCER_ID, producer_epoch=0, base_sequence=sequence)
            log.append_produced(batch, _NOW)
            sequence += _RECORDS_PER_BATCH

        log = PartitionLog("bench", 0, directory, config, _NOW)
        while log.size_bytes < log_mib << 20:
            append(log)
        for _ in range(2):  # two clean restarts
            log.flush_all()
            log.close()
            log = PartitionLog("bench", 0, directory, config, _NOW)
            append(log)
        log.close()  # a crash: no shutdown snapshot, no clean-shutdown marker
        start = time.perf_counter()
        recovered = PartitionLog("bench", 0, directory, config, _NOW, clean_shutdown=False)
        seconds = time.perf_counter() - start
        segments = len(recovered.segments)
        recovered.close()
        return Result(f"crash recovery of a {log_mib} MiB log ({segments} segments of {segment_mib} MiB)",
                      records=sequence, bytes=sequence * record_size, seconds=seconds,
                      extra={"recovery ms": round(seconds * 1000, 1)})
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def bench_restart(log_mib: int, partitions: int, record_size: int, segment_mib: int) -> list[Result]:
    """The broker's restart times, empty and then with ``log_mib`` of data: clean and after SIGKILL."""
    directory = Path(tempfile.mkdtemp(prefix="onceflow-bench-restart-"))
    broker = BrokerProcess(directory / "data", {**FAST_GROUPS, "log.segment.bytes": str(segment_mib << 20)},
                           log_path=directory / "broker.log", log_level="WARNING")
    results: list[Result] = []
    try:
        broker.start()
        results.append(_timed_restart(broker, "clean restart, empty", 0, clean=True))
        create_topic(broker.bootstrap_servers, "restart", partitions)
        written = 0
        while written < log_mib << 20:
            seconds = max(1.0, ((log_mib << 20) - written) / 250e6)
            written += bench_produce(broker.bootstrap_servers, "restart", record_size, seconds, "all", 5).bytes
        shape = f"{written / 2**20:,.0f} MiB in {partitions} partitions"
        results.append(_timed_restart(broker, f"clean restart, {shape}", written, clean=True))
        results.append(_timed_restart(broker, f"restart after SIGKILL, {shape}", written, clean=False))
    finally:
        broker.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return results


def _timed_restart(broker: BrokerProcess, name: str, size: int, clean: bool) -> Result:
    if clean:
        broker.stop(keep=True)
    else:
        broker.kill()
    start = time.perf_counter()
    broker.start(timeout=1800)
    seconds = time.perf_counter() - start
    return Result(name, records=0, bytes=size, seconds=seconds, rated=False)
