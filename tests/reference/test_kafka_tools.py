"""Kafka's own command-line tools against Onceflow and against Apache Kafka, with the same facts
asserted from both outputs: ``kafka-topics`` (create, list, describe, alter, delete),
``kafka-consumer-groups`` (list, describe with offsets and lag, reset-offsets, delete),
``kafka-transactions`` (list, describe, describe-producers, find-hanging, abort),
``kafka-delete-records`` (low watermarks and errors per partition) and the producer and consumer
performance tools, transactional included.

Each tool runs through its main class on the cached classpath (``run_java``), one JVM per
command, so each test keeps to the commands it needs.  The outputs are parsed, not compared
as text: ids, timestamps and throughput differ between runs and brokers.  The differences these
tests found (the CreatePartitions error text, ``Elr: N/A`` for want of DescribeTopicPartitions)
were fixed in Onceflow; the one left (Kafka lists its cluster-level ``min.insync.replicas`` among
every topic's configs) is asserted as such.
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.static.primitive import i32, i32Timedelta, i64

from onceflow.records.builder import build_batch
from onceflow.reference import run_java
from tests.support.broker import BrokerProcess
from tests.support.kafka import consume_all
from tests.support.reference import SHARED_SETTINGS, Target
from tests.support.waiting import wait_for
from tests.support.wire import WireClient, base_offset, partition_error, produce_request

VERIFICATION = "transaction.partition.verification.enable"


def tool(name: str, target: Target, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """One run of a Kafka tool against ``target``; ``ok`` asserts it exited 0."""
    done = run_java(name, ["--bootstrap-server", target.bootstrap_servers, *args])
    if ok:
        assert done.returncode == 0, f"{name} {' '.join(args)} on {target} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done


def tab_table(stdout: str) -> list[dict[str, str]]:
    """kafka-transactions' tables: a header row and rows of tab-separated, space-padded cells."""
    lines = [line for line in stdout.splitlines() if "\t" in line]
    if not lines:
        return []
    header = [h.strip() for h in lines[0].split("\t")]
    return [dict(zip(header, (c.strip() for c in line.split("\t")), strict=False)) for line in lines[1:]]


def space_table(stdout: str, first: str) -> list[dict[str, str]]:
    """kafka-consumer-groups' tables: columns padded with spaces, the header starting ``first``."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    at = next(i for i, line in enumerate(lines) if line.startswith(first))
    header = lines[at].split()
    return [dict(zip(header, line.split(), strict=True)) for line in lines[at + 1:] if not line.startswith(first)]


def describe_topic(stdout: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """kafka-topics --describe: the topic's line and one per partition, as ``key: value`` cells."""
    def cells(line: str) -> dict[str, str]:
        return {k.strip(): v.strip() for k, _, v in (c.partition(":") for c in line.strip().split("\t"))}
    lines = [line for line in stdout.splitlines() if line.strip()]
    return cells(lines[0]), [cells(line) for line in lines[1:]]


def admin(target: Target) -> AdminClient:
    return AdminClient({"bootstrap.servers": target.bootstrap_servers})


def create_topic(target: Target, topic: str, partitions: int) -> None:
    client = admin(target)
    client.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    wait_for(lambda: len(client.list_topics(topic, timeout=10).topics[topic].partitions) == partitions,
             timeout=30, interval=0.05, what=f"{topic} in metadata")


# -- kafka-topics ----------------------------------------------------------------------------------


def test_kafka_topics_create_list_describe_alter_delete(target: Target, unique: Callable[[str], str]) -> None:
    topic = unique("tools-topic")
    created = tool("kafka-topics", target, "--create", "--topic", topic, "--partitions", "3",
                   "--replication-factor", "1", "--config", "retention.ms=3600000")
    assert created.stdout.strip() == f"Created topic {topic}."
    assert topic in tool("kafka-topics", target, "--list").stdout.split()

    head, parts = describe_topic(tool("kafka-topics", target, "--describe", "--topic", topic).stdout)
    assert (head["Topic"], head["PartitionCount"], head["ReplicationFactor"]) == (topic, "3", "1")
    configs = dict(c.split("=", 1) for c in head["Configs"].split(",") if c)
    # Kafka 4 turns on eligible leader replicas (KIP-966) and with it writes a cluster-level
    # min.insync.replicas (ConfigurationControlManager.maybeGenerateElrSafetyRecords), which every
    # topic then lists as a dynamic cluster default.  Onceflow has no dynamic cluster configs.
    assert configs.pop("min.insync.replicas", None) == ("1" if target.is_kafka else None)
    assert configs == {"retention.ms": "3600000"}
    assert [p["Partition"] for p in parts] == ["0", "1", "2"]
    assert all(p["Leader"] == p["Replicas"] == p["Isr"] and p["Leader"].isdigit() for p in parts), parts
    # Empty, not "N/A": the admin client got them from DescribeTopicPartitions (KIP-966), not Metadata.
    assert {(p["Elr"], p["LastKnownElr"]) for p in parts} == {("", "")}

    assert tool("kafka-topics", target, "--alter", "--topic", topic, "--partitions", "5").returncode == 0
    shrink = tool("kafka-topics", target, "--alter", "--topic", topic, "--partitions", "2", ok=False)
    assert shrink.returncode == 1
    assert (f"Error while executing topic command : The topic {topic} currently has 5 partition(s); "
            "2 would not be an increase.") in shrink.stdout
    head, parts = describe_topic(tool("kafka-topics", target, "--describe", "--topic", topic).stdout)
    assert head["PartitionCount"] == "5" and [p["Partition"] for p in parts] == ["0", "1", "2", "3", "4"]

    assert tool("kafka-topics", target, "--delete", "--topic", topic).stdout.strip() == ""
    client = admin(target)
    wait_for(lambda: topic not in client.list_topics(timeout=10).topics, timeout=30, interval=0.05, what="the deletion")
    assert topic not in tool("kafka-topics", target, "--list").stdout.split()


#: The APIs a Kafka client of either kind needs for everything Onceflow promises: every one must be
#: "usable" to kafka-broker-api-versions (its client and the broker agree on a version).
CORE_APIS = ("Produce", "Fetch", "ListOffsets", "Metadata", "OffsetCommit", "OffsetFetch", "FindCoordinator",
             "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup", "DescribeGroups", "ListGroups", "ApiVersions",
             "CreateTopics", "DeleteTopics", "InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn",
             "TxnOffsetCommit", "DescribeConfigs", "AlterConfigs", "IncrementalAlterConfigs", "CreatePartitions",
             "DescribeCluster", "DescribeProducers", "DescribeTransactions", "ListTransactions", "OffsetDelete")


def test_kafka_configs_get_offsets_api_versions_and_delete_records(target: Target, unique: Callable[[str], str]) -> None:
    topic = unique("tools-more")
    tool("kafka-topics", target, "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1")
    altered = tool("kafka-configs", target, "--entity-type", "topics", "--entity-name", topic, "--alter",
                   "--add-config", "retention.ms=7200000,segment.bytes=1048576")
    assert altered.stdout.strip() == f"Completed updating config for topic {topic}."
    described = tool("kafka-configs", target, "--entity-type", "topics", "--entity-name", topic, "--describe").stdout
    lines = [line.strip() for line in described.splitlines()]
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert "retention.ms=7200000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=7200000}" in lines
    assert ("segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=1048576, "
            "DEFAULT_CONFIG:log.segment.bytes=1073741824}") in lines
    deleted = tool("kafka-configs", target, "--entity-type", "topics", "--entity-name", topic, "--alter",
                   "--delete-config", "segment.bytes")
    assert deleted.returncode == 0
    described = tool("kafka-configs", target, "--entity-type", "topics", "--entity-name", topic, "--describe").stdout
    assert "segment.bytes" not in described and "retention.ms=7200000" in described

    producer = Producer({"bootstrap.servers": target.bootstrap_servers, "acks": "all"})
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    latest = tool("kafka-get-offsets", target, "--topic", topic).stdout.split()
    assert sorted(latest) == [f"{topic}:0:5", f"{topic}:1:5"]
    earliest = tool("kafka-get-offsets", target, "--topic", topic, "--time", "-2").stdout.split()
    assert sorted(earliest) == [f"{topic}:0:0", f"{topic}:1:0"]

    versions = tool("kafka-broker-api-versions", target).stdout
    usable = {m.group(1) for m in re.finditer(r"^\s*(\w+)\(\d+\): .*\[usable: \d+\]", versions, re.M)}
    assert set(CORE_APIS) <= usable, sorted(set(CORE_APIS) - usable)

    offsets_file = f"/tmp/{topic}-delete.json"
    with open(offsets_file, "w") as f:
        f.write(f'{{"partitions": [{{"topic": "{topic}", "partition": 0, "offset": 3}}], "version": 1}}')
    trimmed = tool("kafka-delete-records", target, "--offset-json-file", offsets_file)
    assert "low_watermark: 3" in trimmed.stdout, trimmed.stdout
    assert sorted(tool("kafka-get-offsets", target, "--topic", topic, "--time", "-2").stdout.split()) == \
        [f"{topic}:0:3", f"{topic}:1:0"]


def delete_records_report(stdout: str) -> dict[str, str]:
    """kafka-delete-records' report: partition -> "low_watermark: N" or "error: <exception>: <message>"."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("partition: "):
            partition, _, result = line[len("partition: "):].partition("\t")
            out[partition] = result
    return out


def test_kafka_delete_records(target: Target, unique: Callable[[str], str], tmp_path: Path) -> None:
    """kafka-delete-records with its JSON offsets file: each partition's low watermark or error, the
    same on both brokers, then what ListOffsets and a consumer see.  (Partitions missing from the
    metadata are the admin client's to refuse, after its timeout: left out.)"""
    topic, compacted = unique("tools-trim"), unique("tools-trim-compacted")
    create_topic(target, topic, 4)
    tool("kafka-topics", target, "--create", "--topic", compacted, "--partitions", "1", "--config", "cleanup.policy=compact")
    producer = Producer({"bootstrap.servers": target.bootstrap_servers, "acks": "all"})
    for i in range(40):
        producer.produce(topic, f"v{i}".encode(), partition=i % 4)
    producer.produce(compacted, b"v", key=b"k", partition=0)
    assert producer.flush(30) == 0

    def run(*offsets: tuple[str, int, int]) -> tuple[str, dict[str, str]]:
        path = tmp_path / f"offsets-{target}-{len(offsets)}.json"
        path.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": t, "partition": p, "offset": o} for t, p, o in offsets]}))
        done = tool("kafka-delete-records", target, "--offset-json-file", str(path))
        return done.stdout.splitlines()[0], delete_records_report(done.stdout)

    first, report = run((topic, 0, 4), (topic, 1, -1), (topic, 2, 11), (topic, 3, 0), (compacted, 0, 0))
    assert first == "Executing records delete operation"
    assert report == {
        f"{topic}-0": "low_watermark: 4",
        f"{topic}-1": "low_watermark: 10",  # -1: the high watermark
        f"{topic}-2": "error: org.apache.kafka.common.errors.OffsetOutOfRangeException: "
                      "The requested offset is not within the range of offsets maintained by the server.",
        f"{topic}-3": "low_watermark: 0",
        f"{compacted}-0": "error: org.apache.kafka.common.errors.PolicyViolationException: "
                          "Request parameters do not satisfy the configured policy.",
    }
    _, report = run((topic, 0, 2), (topic, 2, 10))
    assert report == {f"{topic}-0": "low_watermark: 4", f"{topic}-2": "low_watermark: 10"}, "never down; the HW itself"
    assert sorted(tool("kafka-get-offsets", target, "--topic", topic, "--time", "-2").stdout.split()) == \
        [f"{topic}:0:4", f"{topic}:1:10", f"{topic}:2:10", f"{topic}:3:0"]
    assert sorted(tool("kafka-get-offsets", target, "--topic", topic).stdout.split()) == \
        [f"{topic}:0:10", f"{topic}:1:10", f"{topic}:2:10", f"{topic}:3:10"]
    got = consume_all(target.bootstrap_servers, topic, [0, 1, 2], 6)
    assert [(p, o, v) for p, o, v in sorted(got)] == [(0, o, f"v{o * 4}".encode()) for o in range(4, 10)]


# -- kafka-consumer-groups -------------------------------------------------------------------------


def test_kafka_consumer_groups_list_describe_reset_delete(target: Target, unique: Callable[[str], str]) -> None:
    topic, group = unique("tools-groups"), unique("tools-group")
    create_topic(target, topic, 2)
    producer = Producer({"bootstrap.servers": target.bootstrap_servers})
    for i in range(20):
        producer.produce(topic, f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": target.bootstrap_servers, "group.id": group, "client.id": "tools-member",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        wait_for(lambda: consumer.poll(0.2) is None and len(consumer.assignment()) == 2, timeout=60, interval=0,
                 what="both partitions assigned to the member")
        consumer.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 10)], asynchronous=False)

        assert group in tool("kafka-consumer-groups", target, "--list").stdout.split()
        rows = space_table(tool("kafka-consumer-groups", target, "--describe", "--group", group).stdout, "GROUP")
        assert sorted((r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in rows) == [
            ("0", "3", "10", "7"), ("1", "10", "10", "0")]
        assert {(r["GROUP"], r["TOPIC"], r["HOST"], r["CLIENT-ID"]) for r in rows} == {(group, topic, "/127.0.0.1", "tools-member")}
        assert all(r["CONSUMER-ID"].startswith("tools-member-") for r in rows)
    finally:
        consumer.close()

    reset = tool("kafka-consumer-groups", target, "--reset-offsets", "--group", group, "--topic", topic,
                 "--to-earliest", "--execute")
    # The tool prints partitions in no fixed order (from a map): compare them sorted.
    assert sorted((r["PARTITION"], r["NEW-OFFSET"]) for r in space_table(reset.stdout, "GROUP")) == [("0", "0"), ("1", "0")]
    after = tool("kafka-consumer-groups", target, "--describe", "--group", group)
    assert sorted((r["PARTITION"], r["CURRENT-OFFSET"], r["LAG"], r["CONSUMER-ID"]) for r in space_table(after.stdout, "GROUP")) == [
        ("0", "0", "10", "-"), ("1", "0", "10", "-")]
    assert f"Consumer group '{group}' has no active members." in after.stderr

    deleted = tool("kafka-consumer-groups", target, "--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." in deleted.stdout
    assert group not in tool("kafka-consumer-groups", target, "--list").stdout.split()


# -- kafka-transactions ----------------------------------------------------------------------------


@contextmanager
def without_partition_verification(target: Target, make_broker_process: Callable[..., BrokerProcess]) -> Iterator[Target]:
    """A broker that takes transactional writes to partitions never added to the transaction
    (KIP-890 part 1 off), the one way a client can leave a hanging transaction.  Onceflow: a
    broker of the test's own.  Kafka: the shared node, its dynamic broker setting switched off
    for the test and back on after."""
    if not target.is_kafka:
        broker = make_broker_process(**SHARED_SETTINGS, **{VERIFICATION: "false"})
        yield Target("onceflow", broker.bootstrap_servers)
        return
    client = admin(target)

    def setting(value: str | None) -> None:
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry(VERIFICATION, value or "", incremental_operation=op)])
        client.incremental_alter_configs([resource])[resource].result(30)
        want = value or "true"
        probe = ConfigResource(ResourceType.BROKER, "1")
        wait_for(lambda: client.describe_configs([probe])[probe].result(30)[VERIFICATION].value == want,
                 timeout=30, interval=0.1, what=f"{VERIFICATION}={want}")

    setting("false")
    try:
        yield target
    finally:
        setting(None)


def leave_hanging_transaction(bootstrap: str, transactional_id: str, topic: str, partition: int, age_ms: int) -> tuple[int, int, int]:
    """What a client whose AddPartitionsToTxn was lost leaves behind: a transactional batch the
    coordinator does not know was written.  Returns (producer id, epoch, offset)."""
    with WireClient(bootstrap) as client:
        def init() -> object:
            r = client.request(InitProducerIdRequest(transactional_id=transactional_id, producer_id=-1, producer_epoch=-1,
                                                     transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60))))
            return r if r.error_code == ErrorCode.none else None  # COORDINATOR_LOAD_IN_PROGRESS at first
        got: object = wait_for(init, timeout=60, interval=0.1, what="InitProducerId")
        pid, epoch = got.producer_id, got.producer_epoch  # type: ignore[attr-defined]
        records = build_batch([(None, b"hanging")], int(time.time() * 1000) - age_ms, producer_id=pid,
                              producer_epoch=epoch, base_sequence=0, transactional=True)
        response = client.request(produce_request(topic, records, partition=partition, transactional_id=transactional_id))
        assert partition_error(response) == ErrorCode.none, partition_error(response)
        return pid, epoch, base_offset(response)


def last_stable_offset(bootstrap: str, topic: str, partition: int) -> int:
    with WireClient(bootstrap) as client:
        response = client.request(ListOffsetsRequest(replica_id=i32(-1), isolation_level=1, topics=(ListOffsetsTopic(
            name=topic, partitions=(ListOffsetsPartition(partition_index=i32(partition), current_leader_epoch=i32(-1),
                                                         timestamp=i64(-1)),)),)))
        return int(response.topics[0].partitions[0].offset)


def test_kafka_transactions_list_describe_find_hanging_abort(target: Target, unique: Callable[[str], str],
                                                             make_broker_process: Callable[..., BrokerProcess]) -> None:
    """An ongoing transaction on partition 0 and a hanging one (20 minutes old) on partition 1:
    both listed and described; find-hanging reports only the hanging one; abort ends it, and
    read_committed readers of partition 1 move on."""
    topic, open_id, hanging_id = unique("tools-txn"), unique("open-txn"), unique("hanging-txn")
    with without_partition_verification(target, make_broker_process) as broker:
        create_topic(broker, topic, 2)
        ongoing = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": open_id,
                            "transaction.timeout.ms": 600000})
        ongoing.init_transactions(60)
        ongoing.begin_transaction()
        for i in range(3):
            ongoing.produce(topic, f"open{i}".encode(), partition=0)
        assert ongoing.flush(30) == 0
        pid, epoch, start = leave_hanging_transaction(broker.bootstrap_servers, hanging_id, topic, 1, 20 * 60 * 1000)
        plain = Producer({"bootstrap.servers": broker.bootstrap_servers})
        plain.produce(topic, b"after", partition=1)
        assert plain.flush(30) == 0
        assert last_stable_offset(broker.bootstrap_servers, topic, 1) == start == 0, "the hanging batch holds the LSO"
        try:
            listed = {r["TransactionalId"]: r for r in tab_table(tool("kafka-transactions", broker, "list").stdout)}
            assert listed[open_id]["TransactionState"] == "Ongoing"
            assert (listed[hanging_id]["TransactionState"], listed[hanging_id]["ProducerId"]) == ("Empty", str(pid))

            [described] = tab_table(tool("kafka-transactions", broker, "describe", "--transactional-id", open_id).stdout)
            assert (described["TransactionState"], described["TopicPartitions"], described["TransactionTimeoutMs"],
                    described["ProducerEpoch"]) == ("Ongoing", f"{topic}-0", "600000", "0")

            [producer] = tab_table(tool("kafka-transactions", broker, "describe-producers", "--topic", topic,
                                        "--partition", "1").stdout)
            assert (producer["ProducerId"], producer["ProducerEpoch"], producer["LastSequence"],
                    producer["CurrentTransactionStartOffset"]) == (str(pid), str(epoch), "0", "0")

            # --max-transaction-timeout 0: every open transaction is a candidate, and the ongoing one
            # is ruled out only because its coordinator lists the partition.
            hanging = tab_table(tool("kafka-transactions", broker, "find-hanging", "--topic", topic,
                                     "--max-transaction-timeout", "0").stdout)
            assert [(h["Topic"], h["Partition"], h["ProducerId"], h["StartOffset"]) for h in hanging] == [(topic, "1", str(pid), "0")]
            assert int(hanging[0]["Duration(min)"]) >= 20

            aborted = tool("kafka-transactions", broker, "abort", "--topic", topic, "--partition", "1", "--start-offset", "0")
            assert aborted.stdout.strip() == ""
            assert tab_table(tool("kafka-transactions", broker, "find-hanging", "--topic", topic,
                                  "--max-transaction-timeout", "0").stdout) == []
            wait_for(lambda: last_stable_offset(broker.bootstrap_servers, topic, 1) == 3, timeout=30, interval=0.05,
                     what="the LSO past the abort marker")
            got = consume_all(broker.bootstrap_servers, topic, [1], 1, **{"isolation.level": "read_committed"})
            assert [v for _, _, v in got] == [b"after"]
        finally:
            ongoing.abort_transaction(60)


# -- kafka-producer-perf-test and kafka-consumer-perf-test ----------------------------------------


def perf_totals(stdout: str) -> tuple[int, float, float]:
    """(records the summary says were sent, record-send-total, record-error-total) of a
    ``kafka-producer-perf-test --print-metrics`` run."""
    [summary] = [line for line in stdout.splitlines() if re.match(r"^\d+ records sent, .* 99\.9th\.$", line)]

    def metric(name: str) -> float:
        [value] = re.findall(rf"^producer-metrics:{name}:\{{client-id=[^}}]*\}}\s*:\s*([\d.]+)$", stdout, re.M)
        return float(value)
    return int(summary.split()[0]), metric("record-send-total"), metric("record-error-total")


def test_producer_and_consumer_perf_tests(target: Target, unique: Callable[[str], str]) -> None:
    """2000 idempotent records, then 3000 in transactions committed every 100 ms, then the
    consumer perf test reads all 5000 read_committed."""
    topic, txn_id = unique("tools-perf"), unique("perf-txn")
    create_topic(target, topic, 2)
    plain = tool("kafka-producer-perf-test", target, "--topic", topic, "--num-records", "2000", "--record-size", "100",
                 "--throughput", "-1", "--command-property", "acks=all", "--print-metrics")
    assert perf_totals(plain.stdout) == (2000, 2000.0, 0.0)
    txn = tool("kafka-producer-perf-test", target, "--topic", topic, "--num-records", "3000", "--record-size", "100",
               "--throughput", "-1", "--transactional-id", txn_id, "--transaction-duration-ms", "100", "--print-metrics")
    assert perf_totals(txn.stdout) == (3000, 3000.0, 0.0)

    consumed = tool("kafka-consumer-perf-test", target, "--topic", topic, "--num-records", "5000",
                    "--group", unique("perf-group"), "--command-property", "isolation.level=read_committed")
    header, row = [line for line in consumed.stdout.splitlines() if line.strip()][-2:]
    stats = dict(zip((h.strip() for h in header.split(",")), (v.strip() for v in row.split(",")), strict=True))
    assert int(stats["data.consumed.in.nMsg"]) == 5000
    assert float(stats["data.consumed.in.MB"]) == pytest.approx(5000 * 100 / 1024 / 1024, abs=0.001)
    # Every transaction was committed: read_committed sees all 5000, and no more are written.
    probe = Consumer({"bootstrap.servers": target.bootstrap_servers, "group.id": unique("probe"),
                      "isolation.level": "read_committed"})
    try:
        ends = [probe.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(2)]
    finally:
        probe.close()
    assert last_stable_offset(target.bootstrap_servers, topic, 0) == ends[0]
    assert last_stable_offset(target.bootstrap_servers, topic, 1) == ends[1]
