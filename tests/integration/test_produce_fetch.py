"""Produce and fetch through confluent-kafka (librdkafka) against the broker process."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.support.broker import BrokerProcess, segment_sizes
from tests.support.kafka import consume_all, make_topic, produce
from tests.support.waiting import wait_for

TIMEOUT = 30


def test_acks_all_round_trip_keeps_offsets_and_order(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "events", 3)
    values = [f"event-{i}".encode() for i in range(3000)]
    acked = produce(bs, "events", values)
    assert len(acked) == 3000
    got = consume_all(bs, "events", [0, 1, 2], 3000)
    assert sorted(got) == sorted(acked)
    for p in range(3):
        offsets = [o for (part, o, _) in got if part == p]
        assert offsets == list(range(len(offsets))), "offsets are dense and in order"


def test_acks_1_and_0_are_answered_and_stored(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "loose")
    produce(bs, "loose", [b"a1", b"a2"], acks="1", partition=0)
    produce(bs, "loose", [b"z1", b"z2"], acks="0", partition=0)
    got = consume_all(bs, "loose", [0], 4)
    assert [v for _, _, v in got] == [b"a1", b"a2", b"z1", b"z2"]


def test_long_poll_delivers_a_record_produced_while_waiting(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "later")
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "waiter", "fetch.wait.max.ms": 5000})
    consumer.assign([TopicPartition("later", 0, OFFSET_BEGINNING)])
    assert consumer.poll(0.5) is None
    produce(bs, "later", [b"hello"], partition=0)
    msg = wait_for(lambda: consumer.poll(0.2), what="the record")
    assert msg.value() == b"hello"
    consumer.close()


def test_a_batch_larger_than_the_fetch_limits_is_still_delivered(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "big")
    big = bytes(range(256)) * 3000  # 768 KB
    produce(bs, "big", [big, b"small"], partition=0)
    got = consume_all(bs, "big", [0], 2, **{"max.partition.fetch.bytes": 1024, "fetch.max.bytes": 1024, "message.max.bytes": 1024})
    assert [v for _, _, v in got] == [big, b"small"]


def test_watermarks_and_offsets_for_times(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "timed")
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    base = 1_700_000_000_000
    for i in range(10):
        producer.produce("timed", f"v{i}".encode(), partition=0, timestamp=base + i * 1000)
        producer.flush(TIMEOUT)  # one batch per record
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "times"})
    assert consumer.get_watermark_offsets(TopicPartition("timed", 0), timeout=TIMEOUT) == (0, 10)
    found = consumer.offsets_for_times([TopicPartition("timed", 0, base + 3500)], timeout=TIMEOUT)
    assert found[0].offset == 4
    found = consumer.offsets_for_times([TopicPartition("timed", 0, base + 99_000)], timeout=TIMEOUT)
    assert found[0].offset == -1  # no record that late: Kafka answers "end"/-1
    consumer.close()


def test_offsets_for_times_inside_one_batch(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "batched")
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 1000, "batch.num.messages": 100})
    base = 1_700_000_000_000
    for i in range(20):
        producer.produce("batched", f"v{i}".encode(), partition=0, timestamp=base + i * 10)
    producer.flush(TIMEOUT)
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "times"})
    for target, expected in ((base, 0), (base + 55, 6), (base + 190, 19)):
        found = consumer.offsets_for_times([TopicPartition("batched", 0, target)], timeout=TIMEOUT)
        assert found[0].offset == expected, (target, found)
    consumer.close()


def test_log_append_time_topics_stamp_broker_time(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "stamped", **{"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    # No retries: the broker must answer the first Produce (it once failed to build the answer with a
    # log-append time, and the client's retry after 30 s wrote the record a second time).
    producer = Producer({"bootstrap.servers": bs, "retries": 0, "request.timeout.ms": 5000})
    reports: list[tuple[object, object]] = []
    producer.produce("stamped", b"x", partition=0, timestamp=1000, on_delivery=lambda e, m: reports.append((e, m)))
    assert producer.flush(TIMEOUT) == 0
    after = int(time.time() * 1000)
    [(error, delivered)] = reports
    assert error is None, error
    assert delivered.offset() == 0 and delivered.timestamp()[0] == 2  # type: ignore[attr-defined]
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "s"})
    consumer.assign([TopicPartition("stamped", 0, OFFSET_BEGINNING)])
    msg = wait_for(lambda: consumer.poll(0.2), what="the record")
    kind, ts = msg.timestamp()
    assert kind == 2  # TIMESTAMP_LOG_APPEND_TIME
    assert before - 1000 <= ts <= after + 1000
    assert consumer.get_watermark_offsets(TopicPartition("stamped", 0), timeout=TIMEOUT) == (0, 1), "written once"
    consumer.close()


def test_segments_roll_and_retention_deletes_old_ones(make_broker_process) -> None:  # type: ignore[no-untyped-def]
    broker = make_broker_process(**{"log.retention.check.interval.ms": "100"})
    bs = broker.bootstrap_servers
    make_topic(bs, "rolling", **{"segment.bytes": "20000", "retention.bytes": "60000"})
    for _ in range(20):
        produce(bs, "rolling", [b"x" * 5000], partition=0)
    partition_dir = Path(broker.data_dir) / "rolling-0"
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "r"})

    def low_watermark() -> int:
        return consumer.get_watermark_offsets(TopicPartition("rolling", 0), timeout=TIMEOUT)[0]

    def on_disk() -> int:
        return sum(segment_sizes(partition_dir))

    # Retention runs every 100 ms and may need several passes (it never deletes above the
    # high watermark): wait until it has brought the partition within one segment of the limit.
    wait_for(lambda: low_watermark() > 0 and on_disk() < 60000 + 20000, what="retention to delete old segments")
    low, high = consumer.get_watermark_offsets(TopicPartition("rolling", 0), timeout=TIMEOUT)
    assert high == 20
    assert int(sorted(partition_dir.glob("*.log"))[0].stem) == low, "the log starts at the oldest remaining segment"
    got = consume_all(bs, "rolling", [0], high - low)
    assert [o for _, o, _ in got] == list(range(low, high))
    consumer.close()
