"""kafka-python and aiokafka: produce and consume round trips with consumer groups."""

from __future__ import annotations

import asyncio
import time

from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KPNewTopic
from kafka.structs import TopicPartition as KPTopicPartition

from tests.support.broker import BrokerProcess
from tests.support.waiting import wait_for

TIMEOUT = 30


def test_kafka_python_round_trip_with_a_group(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    admin = KafkaAdminClient(bootstrap_servers=bs)
    admin.create_topics([KPNewTopic("kp", num_partitions=2, replication_factor=1)])
    assert "kp" in admin.list_topics()
    admin.close()

    producer = KafkaProducer(bootstrap_servers=bs, acks="all", enable_idempotence=False)
    sent = [producer.send("kp", key=str(i).encode(), value=f"kp-{i}".encode()) for i in range(200)]
    producer.flush(TIMEOUT)
    metadata = [f.get(TIMEOUT) for f in sent]
    assert {m.partition for m in metadata} == {0, 1}
    producer.close()

    consumer = KafkaConsumer("kp", bootstrap_servers=bs, group_id="kp-group", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=TIMEOUT * 1000)
    got = []

    def have_200() -> bool:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(r.value for r in records)
        return len(got) >= 200

    wait_for(have_200, timeout=TIMEOUT, interval=0, what=lambda: f"200 records ({len(got)} arrived)")
    assert sorted(got) == sorted(f"kp-{i}".encode() for i in range(200))
    consumer.commit()
    committed = sum(consumer.committed(KPTopicPartition("kp", p)) or 0 for p in (0, 1))
    assert committed == 200
    consumer.close()

    again = KafkaConsumer("kp", bootstrap_servers=bs, group_id="kp-group", auto_offset_reset="earliest",
                          enable_auto_commit=False)
    assert again.poll(timeout_ms=3000) == {}, "resumes after the committed offsets: nothing left"
    again.close()


def test_aiokafka_round_trip_with_a_group(broker_process: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    bs = broker_process.bootstrap_servers

    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bs)
        await admin.start()
        await admin.create_topics([NewTopic("aio", num_partitions=3, replication_factor=1)])
        await admin.close()

        producer = AIOKafkaProducer(bootstrap_servers=bs, acks="all")
        await producer.start()
        try:
            for i in range(150):
                await producer.send("aio", f"aio-{i}".encode(), key=str(i).encode())
            await producer.flush()
        finally:
            await producer.stop()

        consumer = AIOKafkaConsumer("aio", bootstrap_servers=bs, group_id="aio-group", auto_offset_reset="earliest",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            got = []
            async with asyncio.timeout(TIMEOUT):
                while len(got) < 150:
                    batches = await consumer.getmany(timeout_ms=500)
                    for records in batches.values():
                        got += [r.value for r in records]
            await consumer.commit()
        finally:
            await consumer.stop()
        assert sorted(got) == sorted(f"aio-{i}".encode() for i in range(150))

        again = AIOKafkaConsumer("aio", bootstrap_servers=bs, group_id="aio-group", auto_offset_reset="earliest")
        await again.start()
        try:
            leftovers = await again.getmany(timeout_ms=3000)
            assert sum(len(v) for v in leftovers.values()) == 0
        finally:
            await again.stop()

    asyncio.run(scenario())


def _kp_read(bs: str, topic: str, isolation: str, expected: int, group: str) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                             isolation_level=isolation)
    consumer.assign([KPTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got: list[bytes] = []
    quiet_since = time.monotonic()

    def expected_then_quiet() -> bool:
        nonlocal quiet_since
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(r.value for r in records)
            quiet_since = time.monotonic()
        return len(got) >= expected and time.monotonic() - quiet_since >= 1.0

    # Read until the expected records are in and nothing more came for a second.
    try:
        wait_for(expected_then_quiet, timeout=TIMEOUT, interval=0,
                 what=lambda: f"{expected} records of {topic} and then a quiet second ({len(got)} arrived)")
    finally:
        consumer.close()
    return got


def test_kafka_python_transactions(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    admin = KafkaAdminClient(bootstrap_servers=bs)
    admin.create_topics([KPNewTopic("kp-txn", num_partitions=1, replication_factor=1),
                         KPNewTopic("kp-src", num_partitions=1, replication_factor=1)])
    admin.close()
    plain = KafkaProducer(bootstrap_servers=bs)
    for i in range(3):
        plain.send("kp-src", f"s{i}".encode(), partition=0)
    plain.flush(TIMEOUT)
    plain.close()

    producer = KafkaProducer(bootstrap_servers=bs, transactional_id="kp-tid")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("kp-txn", b"kept-1", partition=0)
    producer.send("kp-txn", b"kept-2", partition=0)
    producer.send_offsets_to_transaction({KPTopicPartition("kp-src", 0): OffsetAndMetadata(3, "", -1)},
                                         "kp-txn-group")
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send("kp-txn", b"dropped", partition=0)
    producer.flush(TIMEOUT)
    producer.abort_transaction()
    producer.close()

    assert _kp_read(bs, "kp-txn", "read_committed", 2, "kp-rc") == [b"kept-1", b"kept-2"]
    assert _kp_read(bs, "kp-txn", "read_uncommitted", 3, "kp-ru") == [b"kept-1", b"kept-2", b"dropped"]
    checker = KafkaConsumer(bootstrap_servers=bs, group_id="kp-txn-group", enable_auto_commit=False)
    assert checker.committed(KPTopicPartition("kp-src", 0)) == 3
    checker.close()


def test_aiokafka_transactions(broker_process: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.structs import TopicPartition

    bs = broker_process.bootstrap_servers

    async def read(isolation: str, expected: int) -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bs, isolation_level=isolation, enable_auto_commit=False,
                                    auto_offset_reset="earliest", group_id=None)
        await consumer.start()
        try:
            consumer.assign([TopicPartition("aio-txn", 0)])
            await consumer.seek_to_beginning()
            got: list[bytes] = []
            async with asyncio.timeout(TIMEOUT):
                while len(got) < expected:
                    batches = await consumer.getmany(timeout_ms=300)
                    for records in batches.values():
                        got += [r.value for r in records]
            extra = await consumer.getmany(timeout_ms=1000)
            got += [r.value for records in extra.values() for r in records]
            return got
        finally:
            await consumer.stop()

    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bs)
        await admin.start()
        await admin.create_topics([NewTopic("aio-txn", num_partitions=1, replication_factor=1)])
        await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-tid")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("aio-txn", b"committed", partition=0)
            await producer.begin_transaction()
            await producer.send_and_wait("aio-txn", b"aborted", partition=0)
            await producer.abort_transaction()
        finally:
            await producer.stop()
        assert await read("read_committed", 1) == [b"committed"]
        assert await read("read_uncommitted", 2) == [b"committed", b"aborted"]

    asyncio.run(scenario())
