"""Admin APIs against Onceflow and Apache Kafka: the same requests through confluent-kafka's
AdminClient, kafka-python's KafkaAdminClient and the raw wire client, the same error codes and
the same describe answers on both.

- CreateTopics: created; an existing name is TOPIC_ALREADY_EXISTS; zero or negative partitions
  INVALID_PARTITIONS; replication factor 0 or more than the one node INVALID_REPLICATION_FACTOR;
  an illegal name INVALID_TOPIC_EXCEPTION; a bad or unknown config INVALID_CONFIG; validate_only
  creates nothing.  DeleteTopics: gone, then UNKNOWN_TOPIC_OR_PARTITION.
- DescribeConfigs / IncrementalAlterConfigs: a topic's retention.ms is the default (source
  DEFAULT_CONFIG, no synonym), set (DYNAMIC_TOPIC_CONFIG with itself as first synonym), deleted
  (back to the default); APPEND to cleanup.policy; bad values and unknown keys INVALID_CONFIG;
  an unknown topic UNKNOWN_TOPIC_OR_PARTITION.
- CreatePartitions: an increase works; the same count or fewer is INVALID_PARTITIONS.
- ListOffsets: earliest, latest, max timestamp, and by timestamp (first offset at or after it;
  none past the last), through both libraries.
- DeleteRecords: the log start offset moves (never down), ListOffsets "earliest" and consumers
  from the beginning follow it, a fetch below it is OFFSET_OUT_OF_RANGE with no offsets; an
  offset past the high watermark or below -1 is OFFSET_OUT_OF_RANGE, a compacted topic
  POLICY_VIOLATION, an internal one INVALID_TOPIC_EXCEPTION, an unknown partition or topic
  UNKNOWN_TOPIC_OR_PARTITION (on the wire: the clients refuse those themselves).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import NewTopic as KPNewTopic
from kafka.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
)
from kafka.structs import TopicPartition as KPTopicPartition
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from tests.support.kafka import consume_all, make_topic
from tests.support.reference import Target
from tests.support.waiting import wait_for
from tests.support.wire import WireClient

TIMEOUT = 30
BASE_TS = 1_700_000_000_000


def admin(target: Target) -> AdminClient:
    return AdminClient({"bootstrap.servers": target.bootstrap_servers})


def outcome(futures: dict[Any, Any]) -> dict[str, str]:
    """Each future's result as "ok" or the error's name."""
    out: dict[str, str] = {}
    for key, future in futures.items():
        try:
            future.result(TIMEOUT)
            out[str(getattr(key, "name", key))] = "ok"
        except KafkaException as exc:
            out[str(getattr(key, "name", key))] = exc.args[0].name()
    return out


def topic_config(target: Target, topic: str) -> dict[str, ConfigEntry]:
    client = admin(target)  # referenced until the answer is in: a destroyed client fails its futures
    return next(iter(client.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values())).result(TIMEOUT)  # type: ignore[no-any-return]


def partitions_of(client: AdminClient, topic: str, expected: list[int]) -> None:
    """Wait until the metadata shows ``topic`` with ``expected`` partitions ([] for no topic):
    Kafka's brokers learn of a change from the controller a moment after it is acknowledged."""
    def seen() -> bool:
        md = client.list_topics(timeout=TIMEOUT).topics.get(topic)
        got = [] if md is None or md.error is not None else sorted(md.partitions)
        return got == expected

    wait_for(seen, interval=0.05, what=f"{topic} with partitions {expected} in the metadata")


def described(entry: ConfigEntry) -> tuple[str | None, ConfigSource, bool, bool, list[tuple[str, str | None, ConfigSource]]]:
    return (entry.value, ConfigSource(entry.source), entry.is_default, entry.is_read_only,
            [(s.name, s.value, ConfigSource(s.source)) for s in entry.synonyms.values()])


def test_create_topics_and_their_errors(target: Target, unique: Callable[[str], str]) -> None:
    name, rf3, rf0, bad_value, unknown_key, dry = (unique(x) for x in ("t", "rf3", "rf0", "badvalue", "unknownkey", "dry"))
    client = admin(target)
    assert outcome(client.create_topics([NewTopic(name, 3, 1, config={"retention.ms": "60000"})])) == {name: "ok"}
    assert outcome(client.create_topics([NewTopic(name, 3, 1)])) == {name: "TOPIC_ALREADY_EXISTS"}
    assert outcome(client.create_topics([
        NewTopic(rf3, 1, 3), NewTopic(rf0, 1, 0), NewTopic("bad/name", 1, 1),
        NewTopic(bad_value, 1, 1, config={"retention.ms": "soon"}), NewTopic(unknown_key, 1, 1, config={"no.such.config": "1"}),
    ])) == {rf3: "INVALID_REPLICATION_FACTOR", rf0: "INVALID_REPLICATION_FACTOR", "bad/name": "TOPIC_EXCEPTION",
            bad_value: "INVALID_CONFIG", unknown_key: "INVALID_CONFIG"}
    assert outcome(client.create_topics([NewTopic(dry, 2, 1)], validate_only=True)) == {dry: "ok"}
    topics = client.list_topics(timeout=TIMEOUT).topics
    assert name in topics and dry not in topics and rf3 not in topics
    assert sorted(topics[name].partitions) == [0, 1, 2]
    assert all(p.replicas == p.isrs == [p.leader] for p in topics[name].partitions.values())

    # kafka-python raises the error class of each code.
    kp = KafkaAdminClient(bootstrap_servers=target.bootstrap_servers)
    try:
        with pytest.raises(TopicAlreadyExistsError):
            kp.create_topics([KPNewTopic(name, 1, 1)])
        with pytest.raises(InvalidReplicationFactorError):
            kp.create_topics([KPNewTopic(unique("rf2"), 1, 2)])
        with pytest.raises(InvalidPartitionsError):
            kp.create_topics([KPNewTopic(unique("zero"), 0, 1)])
    finally:
        kp.close()

    # The exact CreateTopics answer: partitions 0 and -2 are INVALID_PARTITIONS (-1 is "the
    # default"), the configs of a created topic come back with it (v5+).
    zero, negative, made = unique("zero"), unique("neg"), unique("made")
    with WireClient(target.bootstrap_servers) as c:
        response = c.request(CreateTopicsRequest(
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=TIMEOUT)), validate_only=False, topics=(
                CreatableTopic(name=zero, num_partitions=i32(0), replication_factor=i16(1), assignments=(), configs=()),
                CreatableTopic(name=negative, num_partitions=i32(-2), replication_factor=i16(1), assignments=(), configs=()),
                CreatableTopic(name=made, num_partitions=i32(-1), replication_factor=i16(-1), assignments=(), configs=()),
            )))
    by_name = {t.name: t for t in response.topics}
    assert [(by_name[n].error_code, by_name[n].num_partitions, by_name[n].replication_factor) for n in (zero, negative)] == [
        (ErrorCode.invalid_partitions, -1, -1)] * 2
    assert (by_name[made].error_code, by_name[made].num_partitions, by_name[made].replication_factor) == (ErrorCode.none, 1, 1)
    configs = {c.name: (c.value, c.config_source, c.read_only, c.is_sensitive) for c in by_name[made].configs}
    assert configs["retention.ms"] == ("604800000", ConfigSource.DEFAULT_CONFIG.value, False, False)
    assert configs["cleanup.policy"] == ("delete", ConfigSource.DEFAULT_CONFIG.value, False, False)
    assert configs["max.message.bytes"] == ("1048588", ConfigSource.DEFAULT_CONFIG.value, False, False)

    assert outcome(client.delete_topics([name, made])) == {name: "ok", made: "ok"}
    partitions_of(client, name, [])
    assert outcome(client.delete_topics([name])) == {name: "UNKNOWN_TOPIC_OR_PART"}


def test_describe_and_incrementally_alter_a_topic_config(target: Target, unique: Callable[[str], str]) -> None:
    topic = unique("cfg")
    client = admin(target)
    make_topic(target.bootstrap_servers, topic, 1, **{"segment.ms": "100000"})
    entries = topic_config(target, topic)
    # Defaults: source DEFAULT_CONFIG; retention.ms has no broker synonym (log.retention.ms is unset,
    # its default comes from log.retention.hours), cleanup.policy has log.cleanup.policy.
    assert described(entries["retention.ms"]) == ("604800000", ConfigSource.DEFAULT_CONFIG, True, False, [])
    assert described(entries["cleanup.policy"]) == (
        "delete", ConfigSource.DEFAULT_CONFIG, True, False, [("log.cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG)])
    assert described(entries["max.message.bytes"]) == (
        "1048588", ConfigSource.DEFAULT_CONFIG, True, False, [("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG)])
    assert described(entries["segment.ms"]) == (
        "100000", ConfigSource.DYNAMIC_TOPIC_CONFIG, False, False, [("segment.ms", "100000", ConfigSource.DYNAMIC_TOPIC_CONFIG)])

    def alter(*ops: ConfigEntry, name: str = topic) -> str:
        result = outcome(client.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, name, incremental_configs=list(ops))]))
        return next(iter(result.values()))

    assert alter(ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)) == "ok"
    assert described(topic_config(target, topic)["retention.ms"]) == (
        "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG, False, False, [("retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG)])
    assert alter(ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)) == "ok"
    assert described(topic_config(target, topic)["cleanup.policy"]) == (
        "delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG, False, False,
        [("cleanup.policy", "delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG), ("log.cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG)])
    assert alter(ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)) == "ok"
    assert topic_config(target, topic)["cleanup.policy"].value == "compact"

    # Refused: nothing changes.
    assert alter(ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)) == "INVALID_CONFIG"
    assert alter(ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)) == "INVALID_CONFIG"
    assert alter(ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET), name=unique("absent")) == "UNKNOWN_TOPIC_OR_PART"
    assert topic_config(target, topic)["retention.ms"].value == "3600000"

    # DELETE: back to the default.
    assert alter(ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)) == "ok"
    assert described(topic_config(target, topic)["retention.ms"]) == ("604800000", ConfigSource.DEFAULT_CONFIG, True, False, [])
    absent = unique("absent")
    assert outcome(client.describe_configs([ConfigResource(ResourceType.TOPIC, absent)])) == {absent: "UNKNOWN_TOPIC_OR_PART"}


def test_create_partitions_grows_and_refuses_to_shrink(target: Target, unique: Callable[[str], str]) -> None:
    topic = unique("grow")
    client = admin(target)
    make_topic(target.bootstrap_servers, topic, 2)
    assert outcome(client.create_partitions([NewPartitions(topic, 5)], validate_only=True)) == {topic: "ok"}
    assert len(client.list_topics(topic, timeout=TIMEOUT).topics[topic].partitions) == 2
    assert outcome(client.create_partitions([NewPartitions(topic, 5)])) == {topic: "ok"}
    partitions_of(client, topic, [0, 1, 2, 3, 4])
    assert outcome(client.create_partitions([NewPartitions(topic, 5)])) == {topic: "INVALID_PARTITIONS"}
    assert outcome(client.create_partitions([NewPartitions(topic, 3)])) == {topic: "INVALID_PARTITIONS"}
    absent = unique("absent")
    assert outcome(client.create_partitions([NewPartitions(absent, 3)])) == {absent: "UNKNOWN_TOPIC_OR_PART"}
    kp = KafkaAdminClient(bootstrap_servers=target.bootstrap_servers)
    try:
        from kafka.admin import NewPartitions as KPNewPartitions

        with pytest.raises(InvalidPartitionsError):
            kp.create_partitions({topic: KPNewPartitions(4)})
    finally:
        kp.close()
    # A new partition takes records.
    producer = Producer({"bootstrap.servers": target.bootstrap_servers})
    producer.produce(topic, b"x", partition=4)
    assert producer.flush(TIMEOUT) == 0
    assert Consumer({"bootstrap.servers": target.bootstrap_servers, "group.id": unique("g")}).get_watermark_offsets(
        TopicPartition(topic, 4), timeout=TIMEOUT) == (0, 1)


def test_list_offsets_by_timestamp_earliest_and_latest(target: Target, unique: Callable[[str], str]) -> None:
    topic = unique("times")
    make_topic(target.bootstrap_servers, topic, 1)
    producer = Producer({"bootstrap.servers": target.bootstrap_servers, "linger.ms": 0})
    for i, delta in enumerate([1000, 3000, 2000, 5000, 4000]):  # not in time order: offset 3 has the largest
        producer.produce(topic, f"v{i}".encode(), partition=0, timestamp=BASE_TS + delta)
        assert producer.flush(TIMEOUT) == 0
    tp = TopicPartition(topic, 0)
    client = admin(target)

    def listed(spec: OffsetSpec) -> tuple[int, int, int | None]:
        info = client.list_offsets({tp: spec})[tp].result(TIMEOUT)
        return info.offset, info.timestamp, info.leader_epoch

    assert listed(OffsetSpec.earliest()) == (0, -1, 0)
    assert listed(OffsetSpec.latest()) == (5, -1, 0)
    assert listed(OffsetSpec.max_timestamp()) == (3, BASE_TS + 5000, 0)
    assert listed(OffsetSpec.for_timestamp(0)) == (0, BASE_TS + 1000, 0)
    assert listed(OffsetSpec.for_timestamp(BASE_TS + 1500)) == (1, BASE_TS + 3000, 0), "the first offset at or after"
    assert listed(OffsetSpec.for_timestamp(BASE_TS + 4500)) == (3, BASE_TS + 5000, 0)
    assert listed(OffsetSpec.for_timestamp(BASE_TS + 9000)) == (-1, -1, None), "none: offset, timestamp and epoch -1"

    consumer = Consumer({"bootstrap.servers": target.bootstrap_servers, "group.id": unique("g")})
    found = consumer.offsets_for_times([TopicPartition(topic, 0, BASE_TS + 2500)], timeout=TIMEOUT)
    assert [(f.offset, f.error) for f in found] == [(1, None)]
    consumer.close()

    kp = KafkaConsumer(bootstrap_servers=target.bootstrap_servers)
    try:
        ktp = KPTopicPartition(topic, 0)
        assert (kp.beginning_offsets([ktp]), kp.end_offsets([ktp])) == ({ktp: 0}, {ktp: 5})
        at = kp.offsets_for_times({ktp: BASE_TS + 2500})[ktp]
        assert (at.offset, at.timestamp, at.leader_epoch) == (1, BASE_TS + 3000, 0)
        assert kp.offsets_for_times({ktp: BASE_TS + 9000}) == {ktp: None}
    finally:
        kp.close()


def test_delete_records(target: Target, unique: Callable[[str], str]) -> None:
    topic, compacted, group = unique("trim"), unique("trim-compacted"), unique("trim-group")
    make_topic(target.bootstrap_servers, topic, 1)
    make_topic(target.bootstrap_servers, compacted, 1, **{"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": target.bootstrap_servers})
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(TIMEOUT) == 0
    client = admin(target)
    tp = TopicPartition(topic, 0)
    deleted = client.delete_records([TopicPartition(topic, 0, 2)])
    assert [(k.partition, v.result(TIMEOUT).low_watermark) for k, v in deleted.items()] == [(0, 2)]
    assert client.list_offsets({tp: OffsetSpec.earliest()})[tp].result(TIMEOUT).offset == 2
    with pytest.raises(KafkaException) as beyond:
        client.delete_records([TopicPartition(topic, 0, 99)])[tp].result(TIMEOUT)
    assert beyond.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    kp = KafkaAdminClient(bootstrap_servers=target.bootstrap_servers)
    try:
        assert kp.delete_records({KPTopicPartition(topic, 0): 3}) == {
            KPTopicPartition(topic, 0): {"partition_index": 0, "low_watermark": 3, "error_code": 0}}
        assert kp.delete_records({KPTopicPartition(topic, 0): 1}) == {
            KPTopicPartition(topic, 0): {"partition_index": 0, "low_watermark": 3, "error_code": 0}}, "never down"
    finally:
        kp.close()
    assert [(o, v) for _, o, v in consume_all(target.bootstrap_servers, topic, [0], 2)] == [(3, b"v3"), (4, b"v4")]

    # A fetch below the log start: OFFSET_OUT_OF_RANGE, and no offsets with it.
    fetch = FetchRequest(
        replica_id=i32(-1), max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(1), max_bytes=i32(1 << 20),
        isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
            partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(1), last_fetched_epoch=i32(-1),
            log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),)),),
        forgotten_topics_data=(), rack_id="")
    consumer = Consumer({"bootstrap.servers": target.bootstrap_servers, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)  # __consumer_offsets exists now
    consumer.close()
    with WireClient(target.bootstrap_servers) as wire:
        p = wire.request(fetch).responses[0].partitions[0]
        assert (p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset, p.records) == \
            (ErrorCode.offset_out_of_range, -1, -1, -1, b"")

        # On the wire, what the clients refuse themselves, and what nothing refuses before the broker.
        def delete(*entries: tuple[str, int, int]) -> set[tuple[str, int, int, ErrorCode]]:
            body = DeleteRecordsRequest(topics=tuple(
                DeleteRecordsTopic(name=name, partitions=(DeleteRecordsPartition(partition_index=i32(index), offset=i64(offset)),))
                for name, index, offset in entries), timeout=i32Timedelta.parse(datetime.timedelta(seconds=TIMEOUT)))
            answer = wire.request(body)
            return {(t.name, q.partition_index, q.low_watermark, q.error_code) for t in answer.topics for q in t.partitions}

        missing = unique("trim-missing")
        assert delete((topic, 0, -2), (topic, 5, 1), (missing, 0, 1), (compacted, 0, 0), ("__consumer_offsets", 0, 0)) == {
            (topic, 0, -1, ErrorCode.offset_out_of_range),
            (topic, 5, -1, ErrorCode.unknown_topic_or_partition),
            (missing, 0, -1, ErrorCode.unknown_topic_or_partition),
            (compacted, 0, -1, ErrorCode.policy_violation),
            ("__consumer_offsets", 0, -1, ErrorCode.invalid_topic_exception),
        }
        assert delete((topic, 0, 6)) == {(topic, 0, -1, ErrorCode.offset_out_of_range)}, "past the high watermark (5)"
        assert delete((topic, 0, -1)) == {(topic, 0, 5, ErrorCode.none)}, "-1: the high watermark"
    assert client.list_offsets({tp: OffsetSpec.earliest()})[tp].result(TIMEOUT).offset == 5
