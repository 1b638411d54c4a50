"""kill -9 of the broker process under acks=all load: nothing acknowledged is lost,
offsets and order are kept, torn tails are truncated on restart."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

from confluent_kafka import Producer

from tests.support.broker import BrokerProcess
from tests.support.kafka import consume_all, make_topic
from tests.support.waiting import wait_for

TIMEOUT = 30


def produce_until_killed(broker: BrokerProcess, topic: str, partitions: int, kill_after_acks: int) -> dict[tuple[int, int], bytes]:
    """Stream acks=all records until ``kill_after_acks`` are acknowledged, then SIGKILL the broker
    while the stream goes on.  Returns every acknowledged (partition, offset) -> value."""
    acked: dict[tuple[int, int], bytes] = {}
    lock = threading.Lock()
    producer = Producer({
        "bootstrap.servers": broker.bootstrap_servers,
        "acks": "all",
        "linger.ms": 2,
        "message.timeout.ms": 5000,
        "retries": 0,
        "enable.idempotence": False,
    })

    def report(err: object, msg: object) -> None:
        if err is None:
            with lock:
                acked[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]

    sent = 0
    sent_at_kill: int | None = None

    def killed_and_2000_more_sent() -> bool:
        nonlocal sent, sent_at_kill
        producer.produce(topic, f"record-{sent:08d}".encode() * 8, partition=sent % partitions, on_delivery=report)
        sent += 1
        producer.poll(0)
        if sent_at_kill is None and len(acked) >= kill_after_acks:
            broker.kill()
            sent_at_kill = sent
        if sent_at_kill is not None and sent > sent_at_kill + 2000:
            return True
        if sent % 500 == 0:
            producer.poll(0.001)
        return False

    wait_for(killed_and_2000_more_sent, timeout=60, interval=0,
             what=f"{kill_after_acks} acks, the broker's kill, and 2000 records more sent")
    producer.flush(10)  # whatever was in flight fails: the broker is gone
    producer.purge()
    return acked


def check_acknowledged(broker: BrokerProcess, topic: str, partitions: int, acked: dict[tuple[int, int], bytes]) -> None:
    per_partition_end = {p: max((o for (q, o) in acked if q == p), default=-1) + 1 for p in range(partitions)}
    got = consume_all(broker.bootstrap_servers, topic, list(range(partitions)), sum(per_partition_end.values()))
    stored = {(p, o): v for p, o, v in got}
    missing = [k for k in acked if stored.get(k) != acked[k]]
    assert not missing, f"{len(missing)} acknowledged records lost or changed, e.g. {missing[:3]}"
    for p in range(partitions):
        offsets = [o for (q, o) in sorted(stored) if q == p]
        assert offsets[: per_partition_end[p]] == list(range(per_partition_end[p])), "offsets dense and in order"


def test_kill_9_under_acks_all_loses_nothing_acknowledged(broker_process: BrokerProcess) -> None:
    make_topic(broker_process.bootstrap_servers, "durable", 3)
    acked = produce_until_killed(broker_process, "durable", 3, kill_after_acks=random.randint(2000, 6000))
    assert len(acked) >= 2000
    broker_process.start()
    assert "recovering" in broker_process.log() or "no clean-shutdown marker" in broker_process.log()
    check_acknowledged(broker_process, "durable", 3, acked)


def test_kill_9_then_torn_tail_is_truncated(broker_process: BrokerProcess) -> None:
    make_topic(broker_process.bootstrap_servers, "torn", 1)
    acked = produce_until_killed(broker_process, "torn", 1, kill_after_acks=1000)
    segment = sorted((Path(broker_process.data_dir) / "torn-0").glob("*.log"))[-1]
    size_before = segment.stat().st_size
    # A crash mid-write leaves part of a batch behind: a plausible header, then garbage.
    with open(segment, "ab") as f:
        f.write((10**6).to_bytes(8, "big") + (500).to_bytes(4, "big") + b"\x00\x00\x00\x00\x02" + os.urandom(100))
    broker_process.start()
    wait_for(lambda: "truncating" in broker_process.log(), what="recovery to report the truncation")
    assert segment.stat().st_size == size_before
    check_acknowledged(broker_process, "torn", 1, acked)
    # The partition takes new writes at the right offset after recovery.
    end = max(o for (_, o) in acked) + 1
    producer = Producer({"bootstrap.servers": broker_process.bootstrap_servers, "acks": "all"})
    offsets: list[int] = []
    producer.produce("torn", b"after", partition=0, on_delivery=lambda e, m: offsets.append(m.offset()))
    producer.flush(TIMEOUT)
    assert offsets and offsets[0] >= end


def test_clean_shutdown_restarts_without_recovery(broker_process: BrokerProcess) -> None:
    make_topic(broker_process.bootstrap_servers, "calm", 1)
    producer = Producer({"bootstrap.servers": broker_process.bootstrap_servers, "acks": "all"})
    for i in range(100):
        producer.produce("calm", str(i).encode(), partition=0)
    producer.flush(TIMEOUT)
    assert broker_process.stop() == 0
    assert (Path(broker_process.data_dir) / ".onceflow_cleanshutdown").exists()
    broker_process.start()
    assert "no clean-shutdown marker" not in broker_process.log()
    got = consume_all(broker_process.bootstrap_servers, "calm", [0], 100)
    assert [v for _, _, v in got] == [str(i).encode() for i in range(100)]
