"""confluent-kafka (librdkafka) helpers: topics, producing, reading back, transactional producers."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 30


def make_topic(bootstrap: str, name: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, partitions, 1, config=config)]).values():
        fut.result(TIMEOUT)


def produce(bootstrap: str, topic: str, values: list[bytes], acks: str = "all", partition: int | None = None,
            **extra: object) -> list[tuple[int, int, bytes]]:
    """Produce and wait; returns (partition, offset, value) of every acknowledged record."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, **extra})
    acked: list[tuple[int, int, bytes]] = []
    errors: list[object] = []

    def report(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))  # type: ignore[attr-defined]

    for value in values:
        if partition is None:
            producer.produce(topic, value, key=value, on_delivery=report)
        else:
            producer.produce(topic, value, partition=partition, on_delivery=report)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    assert not errors, errors
    return acked


def produce_keyed(bootstrap: str, topic: str, items: list[tuple[bytes, bytes | None]], **extra: object) -> dict[bytes, int]:
    """Produce (key, value) pairs to partition 0 in order; returns each key's last acknowledged offset."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True,
                         "batch.num.messages": 20, **extra})
    last: dict[bytes, int] = {}
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            last[msg.key()] = max(last.get(msg.key(), -1), msg.offset())

    for key, value in items:
        producer.produce(topic, value, key=key, partition=0, on_delivery=report)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0 and not errors, errors
    return last


def consume_all(bootstrap: str, topic: str, partitions: list[int], expected: int, **extra: object) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record readable now, at least ``expected`` of them.

    Reads until librdkafka reports end-of-partition for every partition (after its last
    record) and ``expected`` records arrived: a count alone could be reached with one
    partition not read to its end.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "enable.partition.eof": True, **extra})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    got: list[tuple[int, int, bytes]] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + TIMEOUT
    while (len(got) < expected or at_end != set(partitions)) and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error() is not None:
            assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            at_end.add(msg.partition())
            continue
        got.append((msg.partition(), msg.offset(), msg.value()))
        at_end.discard(msg.partition())
    consumer.close()
    assert at_end == set(partitions), f"no end-of-partition for {set(partitions) - at_end} within {TIMEOUT}s"
    return got


def txn_producer(bootstrap: str, transactional_id: str | None = None, **extra: object) -> Producer:
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id or f"txn-{uuid.uuid4()}",
        "transaction.timeout.ms": 60000,
        "linger.ms": 1,
        **extra,
    })
    producer.init_transactions(TIMEOUT)
    return producer


def read_all(bootstrap: str, topic: str, partitions: list[int], isolation: str) -> list[bytes]:
    """Every value readable now (up to the high watermark, or the LSO for read_committed),
    in partition/offset order."""
    got = consume_all(bootstrap, topic, partitions, 0, **{"isolation.level": isolation, "group.id": f"reader-{uuid.uuid4()}"})
    return [v for _, _, v in sorted(got)]
