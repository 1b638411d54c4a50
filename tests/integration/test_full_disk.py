"""A really full disk under the broker process: its data directory on a 16 MiB tmpfs that the test
fills (issue 7, defect 7).

What must hold: nothing acknowledged is lost; writes get KAFKA_STORAGE_ERROR (never a closed
connection); reads keep working; internal topics that could not be created are created once
space returns, without a restart; a partition whose write failed refuses writes until the broker
restarts, and after the restart nothing is half-written and writes succeed again.

Mounting a tmpfs needs root, which the development and CI machines have; without it the test
fails with the mount's error rather than passing silently.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.static.primitive import i8

from onceflow.records.builder import build_batch
from tests.support.broker import FAST_GROUPS, BrokerProcess
from tests.support.kafka import consume_all, make_topic, produce
from tests.support.wire import WireClient, api_versions_ok, partition_error, produce_request

DISK_BYTES = 16 << 20


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"cannot mount a tmpfs for the full-disk test (root is needed): {done.stderr}"
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path) -> Path:
    """Write a filler file until the disk is full; returns it."""
    filler = disk / "filler"
    chunk = b"\0" * (64 << 10)
    with open(filler, "wb", buffering=0) as f:
        for _ in range(DISK_BYTES // len(chunk) + 1):
            try:
                f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
        else:
            raise AssertionError("the disk never filled up")
    # A few small writes that still fit in a partial page may succeed; take those too.
    with open(filler, "ab", buffering=0) as f:
        for _ in range(4096):
            try:
                f.write(b"\0" * 512)
            except OSError:
                break
    return filler


def find_group_coordinator(bootstrap: str, group: str) -> ErrorCode:
    with WireClient(bootstrap) as client:
        return client.request(FindCoordinatorRequest(key=group, key_type=i8(0))).error_code


def test_a_full_disk_refuses_writes_keeps_reads_and_loses_nothing(small_disk: Path, tmp_path: Path) -> None:
    broker = BrokerProcess(small_disk / "data", FAST_GROUPS)
    broker.log_path = tmp_path / "broker.log"  # not on the full disk
    broker.start()
    try:
        bs = broker.bootstrap_servers
        make_topic(bs, "payments", 1, **{"segment.bytes": "65536"})
        acked = [v for _, _, v in produce(bs, "payments", [f"before-{i:04d}-".encode() + b"p" * 200 for i in range(200)],
                                          partition=0)]
        filler = fill(small_disk)

        # The group's __consumer_offsets cannot be created: a retriable answer, nothing half-made.
        assert find_group_coordinator(bs, "ledger") == ErrorCode.coordinator_not_available

        # Produce until the disk refuses: KAFKA_STORAGE_ERROR, on a connection that stays open.
        errors = []
        with WireClient(bs) as client:
            for i in range(200):
                batch = build_batch([(None, f"during-{i:04d}-".encode() + b"d" * 16000)], 1_700_000_000_000)
                error = partition_error(client.request(produce_request("payments", batch)))
                if error == ErrorCode.none:
                    acked.append(f"during-{i:04d}-".encode() + b"d" * 16000)
                else:
                    errors.append(error)
                    if len(errors) >= 3:
                        break
            assert errors and set(errors) == {ErrorCode.kafka_storage_error}, errors
        assert api_versions_ok(bs), "the broker serves everyone else"
        assert "Traceback" not in broker.log()

        # Reads keep working: exactly what was acknowledged.
        assert [v for _, _, v in sorted(consume_all(bs, "payments", [0], len(acked)))] == acked

        # Space returns: internal topics are created without a restart, offsets can be committed.
        os.unlink(filler)
        assert find_group_coordinator(bs, "ledger") == ErrorCode.none
        consumer = Consumer({"bootstrap.servers": bs, "group.id": "ledger", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition("payments", 0, 7)], asynchronous=False)
        assert consumer.committed([TopicPartition("payments", 0)], timeout=30)[0].offset == 7
        consumer.close()

        # A write refused before anything changed (a roll, an index entry) is simply tried again;
        # a partition whose data write failed refuses writes until the broker restarts (both are
        # documented, and the broker's log says which happened).
        data_write_failed = "refuses writes until the broker restarts" in broker.log()
        with WireClient(bs) as client:
            batch = build_batch([(None, b"after-space-returned")], 1_700_000_000_000)
            error = partition_error(client.request(produce_request("payments", batch)))
        if data_write_failed:
            assert error == ErrorCode.kafka_storage_error
        else:
            assert error == ErrorCode.none
            acked.append(b"after-space-returned")

        broker.restart()
        if data_write_failed:  # a stop that cannot be clean: the start recovers the partition from its files
            assert "recovering active segments" in broker.log()
        acked += [v for _, _, v in produce(bs, "payments", [b"after-restart"], partition=0)]
        seen = sorted(consume_all(bs, "payments", [0], len(acked)))
        assert [v for _, _, v in seen] == acked, "nothing acknowledged lost, nothing half-written, writes work again"
    finally:
        if broker.proc is not None:
            broker.proc.kill()
            broker.proc.wait()
