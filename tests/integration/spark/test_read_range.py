"""``kafka.read_range``, the source's read of one task's range, without Spark: a range that ends on a
transaction marker, inside or after an aborted transaction, or holds nothing committed, yields exactly
the committed records in it, and ends (issue 18: it ends as soon as the client's position passes the
range, instead of waiting for end of partition)."""

from __future__ import annotations

import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from onceflow.spark.kafka import read_range
from tests.integration.spark.support import new_topic, transactional_writes
from tests.support.broker import BrokerProcess
from tests.support.kafka import produce


def _committed(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every committed record of partition 0, by a plain read_committed consumer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}", "enable.partition.eof": True,
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[tuple[int, bytes]] = []
    try:
        for _ in range(200):  # bounded: 200 polls of up to 0.5 s
            messages = consumer.consume(1000, 0.5)
            if any(m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF for m in messages):
                out += [(m.offset(), m.value()) for m in messages if m.error() is None]
                return out
            out += [(m.offset(), m.value()) for m in messages if m.error() is None]
        raise AssertionError("the check consumer did not reach the end of the partition")
    finally:
        consumer.close()


def test_ranges_ending_on_markers_and_aborted_records_yield_exactly_the_committed(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    topic = new_topic(bs, 1)
    transactional_writes(bs, topic, [([f"a{i}".encode() for i in range(10)], True),
                                     ([f"b{i}".encode() for i in range(10)], False),
                                     ([f"c{i}".encode() for i in range(10)], True),
                                     ([f"d{i}".encode() for i in range(5)], False)], partition=0)
    produce(bs, topic, [b"plain"], partition=0)  # a non-transactional record ends the log
    committed = _committed(bs, topic)
    end = committed[-1][0] + 1
    assert [v for _, v in committed][:10] == [f"a{i}".encode() for i in range(10)] and len(committed) == 21
    cuts = sorted({0, 5, 9, 10, 11, 15, 20, 21, 22, 31, 32, 33, 36, 37, end - 1, end})
    for start in cuts:
        for stop in [c for c in cuts if c > start]:
            batches = read_range(bs, {}, f"rr-{uuid.uuid4()}", topic, 0, start, stop, include_headers=False,
                                 fail_on_data_loss=True, timeout_s=30)
            rows = [(o, v) for b in batches for o, v in zip(b.column("offset").to_pylist(), b.column("value").to_pylist(),
                                                            strict=True)]
            assert rows == [(o, v) for o, v in committed if start <= o < stop], (start, stop)
