"""Kafka's own command-line tools against Onceflow and against Apache Kafka, with the same facts
asserted from both outputs: ``kafka-topics`` (create, list, describe, alter, delete),
``kafka-consumer-groups`` (list, describe with offsets and lag, reset-offsets, delete; and a KIP-848
group's members, epochs and assignments, ``--list --type consumer``), ``kafka-transactions`` (list,
describe, describe-producers, find-hanging, abort), ``kafka-delete-records`` (low watermarks and
errors per partition), the producer and consumer performance tools, transactional included, and
``kafka-dump-log --offsets-decoder`` over each broker's own ``__consumer_offsets`` segments.

Each tool runs through its main class on the cached classpath (``run_java``), one JVM per
command, so each test keeps to the commands it needs.  The outputs are parsed, not compared
as text: ids, timestamps and throughput differ between runs and brokers.  The differences these
tests found (the CreatePartitions error text, ``Elr: N/A`` for want of DescribeTopicPartitions; a
KIP-848 group's first epoch, and member records Kafka decoded as a classic member's) were fixed in
Onceflow; those left (Kafka lists its cluster-level ``min.insync.replicas`` among every topic's
configs; it writes offset commits as OffsetCommitValue v4, Onceflow v3) are asserted as such.
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, Producer, TopicCollection, TopicPartition
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

from onceflow.coordinator.partitioning import partition_for
from onceflow.records.builder import build_batch
from onceflow.reference import run_java
from onceflow.reference.tools import TOOL_TIMEOUT_S, TOOLS, java_command
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


def tool_runs(name: str, target: Target, *runs: tuple[str, ...]) -> list[str]:
    """Several runs of a Kafka tool against ``target`` in one JVM (``reference/src/.../ToolRuns.java``:
    the tool's main class once per run): each run's stdout, after checking it wrote no error (a
    failed kafka-consumer-groups command still exits 0)."""
    args = [a for run in runs for a in ("--", "--bootstrap-server", target.bootstrap_servers, *run)]
    done = subprocess.run(java_command("dev.onceflow.reference.ToolRuns", [TOOLS[name], *args]),
                          capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    assert done.returncode == 0, f"{name} on {target} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
    results = json.loads(done.stdout.splitlines()[-1])
    for run, result in zip(runs, results, strict=True):
        assert "Error:" not in result["stderr"], f"{name} {' '.join(run)} on {target}:\n{result['stderr'][-3000:]}"
    return [result["stdout"] for result in results]


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


# -- a KIP-848 group: kafka-consumer-groups and kafka-dump-log ------------------------------------

#: Three librdkafka consumers of ``group.protocol=consumer`` share four partitions.
KIP848_MEMBERS, KIP848_PARTITIONS = 3, 4
#: The group's epoch as Kafka 4.3 counts it: 1 when the group is made, one bump per join and per
#: leave -- 4 with the three members, 5 once one has left, 7 when all have.
EPOCH_WITH_THREE, EPOCH_AFTER_A_LEAVE, EPOCH_AT_THE_END = 4, 5, 7
#: Each member commits partition p at offset 3 + p, of 10 records per partition.
RECORDS_PER_PARTITION = 10

#: The kafka-consumer-groups commands run (in one JVM) against the group while its three members are stable.
KIP848_COMMANDS: dict[str, Callable[[str], tuple[str, ...]]] = {
    "offsets": lambda group: ("--describe", "--group", group),
    "members": lambda group: ("--describe", "--group", group, "--members", "--verbose"),
    "state": lambda group: ("--describe", "--group", group, "--state", "--verbose"),
    "list": lambda group: ("--list", "--type", "consumer", "--state"),
}

#: What kafka-dump-log prints when it cannot decode a record (DumpLogSegments' CoordinatorRecordMessageParser).
DUMP_ERRORS = re.compile(r"Error at offset|Unknown record type|Failed to decode|invalid bytes")
_DUMPED = re.compile(r"^\| offset: (\d+) .* key: (\{.*\}) payload: (.*)$")


@dataclass(frozen=True)
class Kip848Run:
    """A KIP-848 group's life on one broker, and what Kafka's tools said of it."""

    topic: str
    topic_id: str  # as Kafka prints it
    group: str
    member_ids: dict[str, str]  # client id -> member id
    assigned: dict[str, list[int]]  # client id -> its partitions, the three members stable
    leaver: str  # the client id of the member that left first
    reassigned: dict[str, list[int]]  # the two others' partitions, stable again after it left
    tools: dict[str, str]  # KIP848_COMMANDS' outputs
    segments: list[Path]  # the group's __consumer_offsets partition's segments, after the life
    #: kafka-dump-log --offsets-decoder's output for those segments, and the tool's exit code and stderr.
    dump: str = ""
    dump_exit: int | None = None
    dump_stderr: str = ""


def column_table(stdout: str, columns: tuple[str, ...]) -> list[dict[str, str]]:
    """kafka-consumer-groups' tables whose header has a space in it (``COORDINATOR (ID)``): cells
    cut where the header's columns start (the tool pads each column to its widest value)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    at = next(i for i, line in enumerate(lines) if line.startswith(columns[0]))
    starts: list[int] = []
    for column in columns:
        starts.append(lines[at].index(column, starts[-1] + 1 if starts else 0))
    ends = [*starts[1:], None]
    return [{c: line[a:b].strip() for c, a, b in zip(columns, starts, ends, strict=True)} for line in lines[at + 1:]]


def kip848_stable(client: AdminClient, group: str, consumers: dict[str, Consumer]) -> dict[str, list[int]]:
    """Each consumer's partitions once the group is Stable (ConsumerGroupDescribe) and every member
    holds what the coordinator says it holds."""
    def stable() -> dict[str, list[int]] | None:
        for consumer in consumers.values():
            consumer.poll(0.05)
        held = {cid: sorted(tp.partition for tp in c.assignment()) for cid, c in consumers.items()}
        if not all(held.values()) or sorted(p for ps in held.values() for p in ps) != list(range(KIP848_PARTITIONS)):
            return None
        described = client.describe_consumer_groups([group])[group].result(30)
        told = {m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions) for m in described.members}
        return held if described.state == ConsumerGroupState.STABLE and told == held else None
    return wait_for(stable, timeout=90, interval=0, what=f"{group} stable with {sorted(consumers)}")


def kip848_life(target: Target, name: str) -> Kip848Run:
    """Three members join, commit and are described by kafka-consumer-groups; one leaves and the
    two others share its partitions; they leave."""
    assert target.log_dir is not None
    topic, group = f"{name}-topic", f"{name}-group"
    create_topic(target, topic, KIP848_PARTITIONS)
    client = admin(target)
    # librdkafka prints a topic id in standard base64, Kafka (Uuid.toString) in the URL-safe one.
    topic_id = str(client.describe_topics(TopicCollection([topic]))[topic].result(30).topic_id).replace("+", "-").replace("/", "_")
    producer = Producer({"bootstrap.servers": target.bootstrap_servers})
    for i in range(KIP848_PARTITIONS * RECORDS_PER_PARTITION):
        producer.produce(topic, f"v{i}".encode(), partition=i % KIP848_PARTITIONS)
    assert producer.flush(30) == 0
    consumers = {f"{name}-m{i}": Consumer({"bootstrap.servers": target.bootstrap_servers, "group.id": group,
                                           "group.protocol": "consumer", "client.id": f"{name}-m{i}",
                                           "enable.auto.commit": False}) for i in range(KIP848_MEMBERS)}
    try:
        for consumer in consumers.values():
            consumer.subscribe([topic])
        assigned = kip848_stable(client, group, consumers)
        member_ids = {cid: c.memberid() for cid, c in consumers.items()}
        for consumer in consumers.values():
            consumer.commit(offsets=[TopicPartition(topic, tp.partition, 3 + tp.partition) for tp in consumer.assignment()],
                            asynchronous=False)
        tools = dict(zip(KIP848_COMMANDS, tool_runs("kafka-consumer-groups", target,
                                                   *(command(group) for command in KIP848_COMMANDS.values())), strict=True))
        leaver = min(assigned, key=lambda cid: (len(assigned[cid]), cid))
        consumers.pop(leaver).close()
        reassigned = kip848_stable(client, group, consumers)
    finally:
        for consumer in consumers.values():
            consumer.close()
    wait_for(lambda: client.describe_consumer_groups([group])[group].result(30).state == ConsumerGroupState.EMPTY,
             timeout=30, interval=0.05, what=f"{group} empty")
    segments = sorted((target.log_dir / f"__consumer_offsets-{partition_for(group, 50)}").glob("*.log"))
    return Kip848Run(topic, topic_id, group, member_ids, assigned, leaver, reassigned, tools, segments)


@pytest.fixture(scope="module")
def kip848_runs(onceflow_target: Target, kafka_target: Target) -> dict[str, Kip848Run]:
    """The KIP-848 group's life on each broker, made once per module and read by the tests below,
    then one kafka-dump-log over both brokers' segments (a JVM less than one each)."""
    lives = {t.name: kip848_life(t, f"kip848-{t.name}-{uuid.uuid4().hex[:8]}") for t in (onceflow_target, kafka_target)}
    done = run_java("kafka-dump-log", ["--offsets-decoder", "--files",
                                       ",".join(str(path) for life in lives.values() for path in life.segments)])
    # It prints "Dumping <file>" before each file's records.
    owner = {f"Dumping {path}": name for name, life in lives.items() for path in life.segments}
    lines: dict[str, list[str]] = {name: [] for name in lives}
    current = None
    for line in done.stdout.splitlines():
        current = owner.get(line, current)
        if current is not None:
            lines[current].append(line)
    return {name: replace(life, dump="\n".join(lines[name]), dump_exit=done.returncode, dump_stderr=done.stderr)
            for name, life in lives.items()}


def test_kafka_consumer_groups_describes_a_kip848_group(target: Target, kip848_runs: dict[str, Kip848Run]) -> None:
    """--describe (offsets and lag), --members --verbose (member epochs, current and target
    assignments), --state --verbose (group and assignment epochs) and --list --type consumer of a
    Stable group of three: the same facts from both brokers."""
    run = kip848_runs[target.name]
    owner = {p: cid for cid, ps in run.assigned.items() for p in ps}
    rows = space_table(run.tools["offsets"], "GROUP")
    assert sorted((r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in rows) == [
        (str(p), str(3 + p), str(RECORDS_PER_PARTITION), str(RECORDS_PER_PARTITION - 3 - p)) for p in range(KIP848_PARTITIONS)]
    assert {(r["GROUP"], r["TOPIC"], r["HOST"]) for r in rows} == {(run.group, run.topic, "/127.0.0.1")}
    assert {int(r["PARTITION"]): (r["CONSUMER-ID"], r["CLIENT-ID"]) for r in rows} == {
        p: (run.member_ids[cid], cid) for p, cid in owner.items()}

    def listed(partitions: list[int]) -> str:
        return f"{run.topic}:{','.join(map(str, partitions))}"
    members = {r["CLIENT-ID"]: r for r in space_table(run.tools["members"], "GROUP")}
    assert {cid: (r["GROUP"], r["CONSUMER-ID"], r["HOST"], r["#PARTITIONS"], r["CURRENT-EPOCH"], r["CURRENT-ASSIGNMENT"],
                  r["TARGET-EPOCH"], r["TARGET-ASSIGNMENT"]) for cid, r in members.items()} == {
        cid: (run.group, run.member_ids[cid], "/127.0.0.1", str(len(ps)), str(EPOCH_WITH_THREE), listed(ps),
              str(EPOCH_WITH_THREE), listed(ps)) for cid, ps in run.assigned.items()}

    [state] = column_table(run.tools["state"], ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                                                "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"))
    assert state == {"GROUP": run.group, "COORDINATOR (ID)": f"{target.bootstrap_servers}  (1)",
                     "ASSIGNMENT-STRATEGY": "uniform", "STATE": "Stable", "GROUP-EPOCH": str(EPOCH_WITH_THREE),
                     "TARGET-ASSIGNMENT-EPOCH": str(EPOCH_WITH_THREE), "#MEMBERS": str(KIP848_MEMBERS)}

    groups = space_table(run.tools["list"], "GROUP")
    assert {r["TYPE"] for r in groups} == {"Consumer"}, "--type consumer lists KIP-848 groups only"
    assert {r["GROUP"]: r["STATE"] for r in groups}[run.group] == "Stable"

    # The member that left gave its partition to one of the two others, who kept theirs (uniform is sticky).
    assert sorted(p for ps in run.reassigned.values() for p in ps) == list(range(KIP848_PARTITIONS))
    assert all(set(run.assigned[cid]) <= set(ps) for cid, ps in run.reassigned.items()), (run.assigned, run.reassigned)


def dumped(run: Kip848Run) -> list[tuple[int, dict[str, Any], dict[str, Any] | None, str | None]]:
    """The group's records as kafka-dump-log decoded them, in log order: (record type, key data,
    value data or None for a tombstone, value version)."""
    records = []
    for line in run.dump.splitlines():
        match = _DUMPED.match(line)
        if match is None:
            continue
        key = json.loads(match.group(2))
        if run.group not in (key["data"].get("groupId"), key["data"].get("group")):
            continue
        value = None if match.group(3) == "<DELETE>" else json.loads(match.group(3))
        records.append((int(key["type"]), key["data"], value and value["data"], value and value["version"]))
    return records


def targets_by_epoch(records: list[tuple[int, dict[str, Any], dict[str, Any] | None, str | None]]) -> dict[int, dict[str, list[int]]]:
    """The target assignment (member records, type 7) as it stood when each of its epochs was
    written (type 6, after its member records): epoch -> member id -> partitions."""
    target: dict[str, list[int]] = {}
    at: dict[int, dict[str, list[int]]] = {}
    for kind, key, value, _ in records:
        if kind == 7:
            if value is None:
                target.pop(key["memberId"], None)
            else:
                target[key["memberId"]] = sorted(p for t in value["topicPartitions"] for p in t["partitions"])
        elif kind == 6 and value is not None:
            at[value["assignmentEpoch"]] = dict(target)
    return at


def test_kafka_dump_log_decodes_our_kip848_records(target: Target, kip848_runs: dict[str, Kip848Run]) -> None:
    """kafka-dump-log --offsets-decoder (Kafka's own deserializers) reads every record the group's
    life wrote to ``__consumer_offsets`` -- group epochs, members' subscriptions, target
    assignments, current assignments with their assignment epochs, offsets, tombstones -- with the
    group's ids, epochs and partitions, and no decode error."""
    run = kip848_runs[target.name]
    assert run.dump_exit == 0, run.dump_stderr[-3000:]
    assert run.dump.startswith("Dumping ") and "Log starting offset: 0" in run.dump
    assert not DUMP_ERRORS.search(run.dump + run.dump_stderr), DUMP_ERRORS.findall(run.dump)
    records = dumped(run)
    assert {kind for kind, *_ in records} == {1, 3, 5, 6, 7, 8}
    members = {mid: cid for cid, mid in run.member_ids.items()}
    assert {key["memberId"] for kind, key, *_ in records if kind in (5, 7, 8)} == set(members)
    topic_ids = {t["topicId"] for kind, _, value, _ in records if kind in (7, 8) and value
                 for field in ("topicPartitions", "assignedPartitions", "partitionsPendingRevocation") for t in value.get(field, ())}
    assert topic_ids == {run.topic_id}

    # ConsumerGroupMetadata: one epoch a join or a leave; the metadata hash while anyone subscribes.
    epochs = [value for kind, _, value, _ in records if kind == 3 and value is not None]
    assert [v["epoch"] for v in epochs] == list(range(2, EPOCH_AT_THE_END + 1))
    assert all(v.get("metadataHash") for v in epochs[:-1]) and epochs[-1] == {"epoch": EPOCH_AT_THE_END}

    # ConsumerGroupMemberMetadata: each member's subscription, a consumer-protocol member's (classic
    # metadata null), then its tombstone.
    for member_id, cid in members.items():
        [*subscriptions, last] = [value for kind, key, value, _ in records if kind == 5 and key["memberId"] == member_id]
        assert last is None and subscriptions
        assert subscriptions[-1] == {"instanceId": None, "rackId": None, "clientId": cid, "clientHost": "/127.0.0.1",
                                     "subscribedTopicNames": [run.topic], "subscribedTopicRegex": "",
                                     "rebalanceTimeoutMs": 300000, "serverAssignor": None, "classicMemberMetadata": None}
        for kind in (7, 8):
            assert [value for k, key, value, _ in records if k == kind and key["memberId"] == member_id][-1] is None

    # ConsumerGroupTargetAssignmentMetadata/Member: the target of the three, then of the two.
    by_id = {run.member_ids[cid]: ps for cid, ps in run.assigned.items()}
    after = {run.member_ids[cid]: ps for cid, ps in run.reassigned.items()}
    targets = targets_by_epoch(records)
    assert (targets[EPOCH_WITH_THREE], targets[EPOCH_AFTER_A_LEAVE]) == (by_id, after)
    assert all(value["assignmentTimestamp"] > 0 for kind, _, value, _ in records if kind == 6 and value)

    # ConsumerGroupCurrentMemberAssignment: every member caught up with each target, each partition
    # with the epoch it was assigned at (Kafka 4.3's assignment epochs).
    current = {key["memberId"]: value for kind, key, value, _ in records if kind == 8 and value is not None
               and value["memberEpoch"] in (EPOCH_WITH_THREE, EPOCH_AFTER_A_LEAVE)}
    leaver = run.member_ids[run.leaver]
    for member_id, value in current.items():
        assert (value["state"], value["partitionsPendingRevocation"]) == (0, []), value
        [assignment] = value["assignedPartitions"]
        assert len(assignment["assignmentEpochs"]) == len(assignment["partitions"])
        epochs_at = dict(zip(assignment["partitions"], assignment["assignmentEpochs"], strict=True))
        if member_id == leaver:
            assert (value["memberEpoch"], sorted(epochs_at)) == (EPOCH_WITH_THREE, by_id[member_id])
            continue
        assert (value["memberEpoch"], sorted(epochs_at)) == (EPOCH_AFTER_A_LEAVE, after[member_id])
        # The leaver's partition is assigned at the new epoch; the others since the member had them.
        assert {p: e == EPOCH_AFTER_A_LEAVE for p, e in epochs_at.items()} == {
            p: p not in by_id[member_id] for p in after[member_id]}
    assert set(current) == set(members)

    # OffsetCommit: what each member committed.
    offsets = {key["partition"]: value["offset"] for kind, key, value, _ in records if kind == 1 and value}
    assert offsets == {p: 3 + p for p in range(KIP848_PARTITIONS)}


def test_kafka_dump_log_reads_the_same_fields_from_both_brokers(kip848_runs: dict[str, Kip848Run]) -> None:
    """Record for record type, the same key and value fields (tagged ones included: a tagged field
    written or left out decodes differently) from both brokers' logs."""
    def fields(run: Kip848Run) -> dict[int, tuple[set[str], set[str], set[str | None]]]:
        out: dict[int, tuple[set[str], set[str], set[str | None]]] = {}
        for kind, key, value, version in dumped(run):
            keys, values, versions = out.setdefault(kind, (set(), set(), set()))
            keys.update(key)
            versions.add(version)
            for name, field in (value or {}).items():
                values.add(name)
                if isinstance(field, list) and field and isinstance(field[0], dict):
                    values.update(f"{name}.{inner}" for item in field for inner in item)
        return out

    onceflow, kafka = fields(kip848_runs["onceflow"]), fields(kip848_runs["kafka"])
    # The one difference: Kafka 4.3 writes OffsetCommitValue v4 (flexible, with the topic id as a
    # tagged field), Onceflow the v3 that Kafka 3.x wrote; each broker reads both.
    assert (onceflow.pop(1), kafka.pop(1)) == (
        ({"group", "topic", "partition"}, {"offset", "leaderEpoch", "metadata", "commitTimestamp"}, {"3"}),
        ({"group", "topic", "partition"}, {"offset", "leaderEpoch", "metadata", "commitTimestamp", "topicId"}, {"4"}))
    assert onceflow == kafka


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
