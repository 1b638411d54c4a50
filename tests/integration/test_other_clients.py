"""kafka-python and aiokafka: produce and consume round trips with consumer groups."""

from __future__ import annotations

import asyncio
import time

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic as KPNewTopic
from kafka.structs import TopicPartition as KPTopicPartition

from tests.conftest import BrokerProcess

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
    deadline = time.monotonic() + TIMEOUT
    while len(got) < 200 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [r.value for r in records]
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
