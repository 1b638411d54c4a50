"""Idempotent produce, the same scenarios against Onceflow and Apache Kafka (issue 10).

At the protocol level (exact batches with a producer id, epoch and sequence, through the raw wire
client): a retried batch is answered with the offset it was first written at and stored once; a
sequence gap, a batch overlapping the last one, and a new epoch not starting at sequence 0 are
refused with OUT_OF_ORDER_SEQUENCE_NUMBER; a brand-new producer may start at any sequence; an
epoch older than the newest seen is refused with INVALID_PRODUCER_EPOCH; DescribeProducers
reports the producer's last sequence.  Then through real clients (librdkafka, kafka-python,
aiokafka) with idempotence on: every record is stored once, at consecutive offsets, under one
producer id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]
from confluent_kafka import Producer
from kafka import KafkaProducer  # type: ignore[import-untyped]
from kio.schema.errors import ErrorCode

from tests.support.reference import Target
from tests.support.txn_wire import READ_UNCOMMITTED, describe_producers, fetch, init_idempotent, make_ready_topic, produce
from tests.support.wire import WireClient, batch

TIMEOUT = 30


def test_a_duplicate_batch_is_answered_with_its_first_offset_and_stored_once(target: Target, unique: Callable[[str], str]) -> None:
    topic = unique("idem-dup")
    make_ready_topic(target.bootstrap_servers, topic)
    with WireClient(target.bootstrap_servers) as client:
        pid, epoch = init_idempotent(client)
        first = batch(pid, epoch, 0, [b"a", b"b", b"c"])
        assert produce(client, topic, 0, first) == (ErrorCode.none, 0)
        assert produce(client, topic, 0, first) == (ErrorCode.none, 0), "the retry is answered with the first offset"
        assert produce(client, topic, 0, batch(pid, epoch, 3, [b"d"])) == (ErrorCode.none, 3)
        assert produce(client, topic, 0, batch(pid, epoch, 4, [b"e", b"f"])) == (ErrorCode.none, 4)
        # Not the newest batch, but among the last five the broker remembers: still a duplicate.
        assert produce(client, topic, 0, first) == (ErrorCode.none, 0)
        assert produce(client, topic, 0, batch(pid, epoch, 3, [b"d"])) == (ErrorCode.none, 3)

        view = fetch(client, topic, 0, READ_UNCOMMITTED)
        assert (view.high_watermark, view.last_stable_offset) == (6, 6)
        assert [(b.base_offset, b.last_offset, b.producer_id, b.values) for b in view.batches] == [
            (0, 2, pid, (b"a", b"b", b"c")), (3, 3, pid, (b"d",)), (4, 5, pid, (b"e", b"f"))]

        state = describe_producers(client, topic, 0)
        assert state.error_code == ErrorCode.none
        assert [(p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset)
                for p in state.active_producers] == [(pid, epoch, 5, -1)]


def test_sequence_gaps_and_overlaps_are_refused_and_nothing_is_written(target: Target, unique: Callable[[str], str]) -> None:
    topic = unique("idem-gap")
    make_ready_topic(target.bootstrap_servers, topic)
    with WireClient(target.bootstrap_servers) as client:
        pid, epoch = init_idempotent(client)
        assert produce(client, topic, 0, batch(pid, epoch, 0, [b"a", b"b"])) == (ErrorCode.none, 0)
        # A gap: sequence 1 was the last, 10 is not the next.
        assert produce(client, topic, 0, batch(pid, epoch, 10, [b"gap"])) == (ErrorCode.out_of_order_sequence_number, -1)
        # Overlapping the last batch without being it (sequence 1 again, two records).
        assert produce(client, topic, 0, batch(pid, epoch, 1, [b"b", b"c"])) == (ErrorCode.out_of_order_sequence_number, -1)
        # The in-sequence batch after the refusals goes through.
        assert produce(client, topic, 0, batch(pid, epoch, 2, [b"c"])) == (ErrorCode.none, 2)

        # A producer the partition has never seen may start at any sequence.
        fresh, fresh_epoch = init_idempotent(client)
        assert produce(client, topic, 0, batch(fresh, fresh_epoch, 7, [b"x"])) == (ErrorCode.none, 3)
        assert produce(client, topic, 0, batch(fresh, fresh_epoch, 9, [b"y"])) == (ErrorCode.out_of_order_sequence_number, -1)
        assert produce(client, topic, 0, batch(fresh, fresh_epoch, 8, [b"y"])) == (ErrorCode.none, 4)

        view = fetch(client, topic, 0, READ_UNCOMMITTED)
        assert view.high_watermark == 5
        assert [v for b in view.batches for v in b.values] == [b"a", b"b", b"c", b"x", b"y"]
        state = describe_producers(client, topic, 0)
        assert sorted((p.producer_id, p.last_sequence) for p in state.active_producers) == sorted([(pid, 2), (fresh, 8)])


def test_an_older_epoch_is_refused_once_a_newer_one_is_known(target: Target, unique: Callable[[str], str]) -> None:
    topic = unique("idem-epoch")
    make_ready_topic(target.bootstrap_servers, topic)
    with WireClient(target.bootstrap_servers) as client:
        pid, epoch = init_idempotent(client)
        assert produce(client, topic, 0, batch(pid, epoch, 0, [b"old-0", b"old-1"])) == (ErrorCode.none, 0)
        # An idempotent producer bumps its epoch itself (KIP-360): the new epoch must start at sequence 0.
        assert produce(client, topic, 0, batch(pid, epoch + 1, 5, [b"new-5"])) == (ErrorCode.out_of_order_sequence_number, -1)
        assert produce(client, topic, 0, batch(pid, epoch + 1, 0, [b"new-0"])) == (ErrorCode.none, 2)
        # The old epoch is stale now, whatever its sequence; so is a retry of its own batch.
        assert produce(client, topic, 0, batch(pid, epoch, 2, [b"old-2"])) == (ErrorCode.invalid_producer_epoch, -1)
        assert produce(client, topic, 0, batch(pid, epoch, 0, [b"old-0", b"old-1"])) == (ErrorCode.invalid_producer_epoch, -1)
        assert produce(client, topic, 0, batch(pid, epoch + 1, 1, [b"new-1"])) == (ErrorCode.none, 3)

        view = fetch(client, topic, 0, READ_UNCOMMITTED)
        assert [(b.base_offset, b.producer_epoch, b.values) for b in view.batches] == [
            (0, epoch, (b"old-0", b"old-1")), (2, epoch + 1, (b"new-0",)), (3, epoch + 1, (b"new-1",))]
        state = describe_producers(client, topic, 0)
        assert [(p.producer_id, p.producer_epoch, p.last_sequence) for p in state.active_producers] == [(pid, epoch + 1, 1)]


def _confluent(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "batch.num.messages": 7})
    offsets: list[int] = []
    for v in values:
        producer.produce(topic, v, partition=0, on_delivery=lambda err, msg: offsets.append(-1 if err else msg.offset()))
    assert producer.flush(TIMEOUT) == 0
    return offsets


def _kafka_python(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=5,
                             batch_size=64)
    try:
        futures = [producer.send(topic, v, partition=0) for v in values]
        producer.flush(TIMEOUT)
        return [f.get(TIMEOUT).offset for f in futures]
    finally:
        producer.close(TIMEOUT)


def _aiokafka(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    async def run() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5, max_batch_size=64)
        await producer.start()
        try:
            futures = [await producer.send(topic, v, partition=0) for v in values]
            return [(await f).offset for f in futures]
        finally:
            await producer.stop()

    return asyncio.run(asyncio.wait_for(run(), TIMEOUT))


def test_idempotent_clients_store_every_record_once_in_order(target: Target, unique: Callable[[str], str]) -> None:
    """Three client libraries with idempotence on, small batches: consecutive offsets, one producer
    id (and epoch 0) each, sequences continuing from batch to batch."""
    topic = unique("idem-clients")
    make_ready_topic(target.bootstrap_servers, topic)
    runs = [("confluent", _confluent), ("kafka-python", _kafka_python), ("aiokafka", _aiokafka)]
    start = 0
    for name, run in runs:
        values = [f"{name}-{i}".encode() for i in range(20)]
        assert run(target.bootstrap_servers, topic, values) == list(range(start, start + 20)), name
        start += 20
    with WireClient(target.bootstrap_servers) as client:
        view = fetch(client, topic, 0, READ_UNCOMMITTED)
        assert view.high_watermark == 60
        assert [v for b in view.batches for v in b.values] == [f"{n}-{i}".encode() for n, _ in runs for i in range(20)]
        producers = [b.producer_id for b in view.batches]
        assert len(set(producers)) == 3 and all(b.producer_id >= 0 and b.producer_epoch == 0 for b in view.batches)
        state = describe_producers(client, topic, 0)
        assert sorted(p.last_sequence for p in state.active_producers) == [19, 19, 19]
