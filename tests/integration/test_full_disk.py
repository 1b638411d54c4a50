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
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.static.primitive import i8, i16, i32, i64

from onceflow.broker.embedded import EmbeddedBroker
from onceflow.log import segment
from onceflow.records.builder import build_batch
from tests.support.broker import FAST_GROUPS, BrokerProcess
from tests.support.kafka import consume_all, make_topic, produce
from tests.support.txn_wire import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    add_partitions,
    describe_transaction,
    end_txn,
    init_transactional,
    list_offset,
    make_ready_topic,
    txn_batch,
    visible_values,
    wait_txn_state,
)
from tests.support.txn_wire import produce as produce_wire
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


def enospc(*_: Any, **__: Any) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


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


def test_the_transaction_coordinator_applies_nothing_the_full_disk_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in a chaos campaign: an append to ``__transaction_state`` that the full disk refused
    was reported durable, so the coordinator took the transaction as Ongoing with its partitions
    while its log did not.  After the next restart the coordinator no longer knew the partitions,
    never wrote them an ABORT marker, and a later COMMIT of the same producer made the
    abandoned record visible (a torn transaction).  Now the refused change is answered with a
    retriable error, the coordinator's state stays what its log says, and the change goes
    through once space returns.

    Which write a full disk refuses first depends on the moment (a roll frees the space
    preallocated for the old segment), so the refusal is made certain here: every
    ``__transaction_state`` append rolls, and creating the new segment's time index fails with a
    real ENOSPC, in the broker running in this process."""
    data = tmp_path / "data"
    with EmbeddedBroker(data, **{**FAST_GROUPS, "transaction.state.log.segment.bytes": 14}) as broker:
        bs = broker.bootstrap_servers
        make_ready_topic(bs, "ledger")
        with WireClient(bs) as client:
            pid, epoch = init_transactional(client, "payer")
            assert describe_transaction(client, "payer").transaction_state == "Empty"
            with monkeypatch.context() as disk_full:
                disk_full.setattr(segment, "TimeIndex", enospc)
                refused = client.request(AddPartitionsToTxnRequest(
                    v3_and_below_transactional_id="payer", v3_and_below_producer_id=i64(pid),
                    v3_and_below_producer_epoch=i16(epoch),
                    v3_and_below_topics=(AddPartitionsToTxnTopic(name="ledger", partitions=(i32(0),)),)))
                (errors,) = [[r.partition_error_code for r in t.results_by_partition]
                             for t in refused.results_by_topic_v3_and_below]
                assert errors == [ErrorCode.not_coordinator], "Kafka's answer when the transaction log refuses"
                state = describe_transaction(client, "payer")
                assert (state.transaction_state, list(state.topics)) == ("Empty", []), "nothing applied that is not stored"
                error, _ = produce_wire(client, "ledger", 0, txn_batch(pid, epoch, 0, [b"unregistered"]), "payer")
                assert error == ErrorCode.invalid_txn_state, "KIP-890: the partition is not in the transaction"
            assert add_partitions(client, "payer", pid, epoch, "ledger", [0]) == {0: ErrorCode.none}
            assert produce_wire(client, "ledger", 0, txn_batch(pid, epoch, 0, [b"paid"]), "payer")[0] == ErrorCode.none
            assert end_txn(client, "payer", pid, epoch, commit=True) == ErrorCode.none
            wait_txn_state(client, "payer", "CompleteCommit")
    with EmbeddedBroker(data, **FAST_GROUPS) as broker, WireClient(broker.bootstrap_servers) as client:
        assert describe_transaction(client, "payer").transaction_state == "CompleteCommit"
        assert visible_values(client, "ledger", 0, READ_COMMITTED) == [b"paid"]
        end = list_offset(client, "ledger", 0, READ_UNCOMMITTED)
        assert list_offset(client, "ledger", 0, READ_COMMITTED) == end, "no transaction left open"
