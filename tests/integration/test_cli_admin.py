"""The admin commands' rough edges (``onceflow topics|groups|txn|acls|users``), against one broker
process shared by the module: names the parser refuses (text that is not UTF-8 crashed librdkafka),
a missing topic or partition said one way and found before anything changes, ``alter-config
--delete`` of a config that does not exist, ``reset-offsets``' duplicates and Kafka's clamping
warnings, ``groups delete``'s duplicates, and one JSON name for a partition count.  Commands run
in this process (``tests/support/cli.py``), except one that hands the process real non-UTF-8 argv."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.cli import Run, module_broker
from tests.support.kafka import make_topic, produce

#: What Python makes of the byte 0xff in argv (surrogateescape).
NOT_UTF8 = "\udcff"


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from module_broker(tmp_path_factory, "cli-admin")


@pytest.fixture
def onceflow(capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, bootstrap: str) -> Run:
    return Run(capsysbinary, monkeypatch, bootstrap)


def test_names_are_checked_by_the_parser(onceflow: Run, bootstrap: str) -> None:
    topic_rule = "expected a topic name (1 to 249 of a-z, A-Z, 0-9, '.', '_' and '-')"
    bad_topic = f"t{NOT_UTF8}"
    refused = {
        ("topics", "describe", bad_topic): f"argument TOPIC: {topic_rule}",
        ("topics", "delete", bad_topic): f"argument TOPIC: {topic_rule}",
        ("topics", "offsets", bad_topic): f"argument TOPIC: {topic_rule}",
        ("topics", "create", bad_topic): f"argument TOPIC: {topic_rule}",
        ("topics", "add-partitions", bad_topic, "--partitions", "2"): f"argument TOPIC: {topic_rule}",
        ("topics", "delete-records", bad_topic, "0=1"): f"argument TOPIC: {topic_rule}",
        ("topics", "alter-config", "", "--set", "a=1"): f"argument TOPIC: {topic_rule}, got ''",
        ("topics", "alter-config", "t", "--set", f"a{NOT_UTF8}=1"): "argument --set: expected NAME=VALUE in UTF-8 text",
        ("topics", "alter-config", "t", "--set", f"a={NOT_UTF8}"): "argument --set: expected NAME=VALUE in UTF-8 text",
        ("topics", "alter-config", "t", "--delete", ""): "argument --delete: expected a name, got an empty one",
        ("topics", "create", "t", "--partitions", "1000000"): "argument --partitions: expected a partition count from 1 to 100,000",
        ("topics", "add-partitions", "t", "--partitions", "200000"): "argument --partitions: expected a partition count",
        ("topics", "create", "t", "--replication-factor", "10001"): "argument --replication-factor: expected a replication factor",
        ("groups", "describe", f"g{NOT_UTF8}"): "argument GROUP: expected UTF-8 text",
        ("groups", "delete", "g", f"g{NOT_UTF8}"): "argument GROUP: expected UTF-8 text",
        ("groups", "reset-offsets", f"g{NOT_UTF8}", "--all-topics", "--to-earliest"): "argument GROUP: expected UTF-8 text",
        ("groups", "reset-offsets", "g", "--topic", f"{bad_topic}:0", "--to-earliest"): f"argument --topic: {topic_rule}",
        ("groups", "reset-offsets", "g", "--topic", "t", "--shift-by", str(2**63)): "argument --shift-by: expected a whole number that fits",
        ("txn", "describe", NOT_UTF8): "argument TRANSACTIONAL_ID: expected UTF-8 text",
        ("txn", "producers", bad_topic, "0"): f"argument TOPIC: {topic_rule}",
        ("txn", "find-hanging", "--topic", bad_topic): f"argument --topic: {topic_rule}",
        ("acls", "list", "--principal", f"User:{NOT_UTF8}"): "argument --principal: expected UTF-8 text",
        ("acls", "list", "--group", NOT_UTF8): "argument --group: expected UTF-8 text",
        ("acls", "add", "--topic", "t", "--allow-principal", "User:a", "--allow-host", NOT_UTF8, "--operation", "Read"):
            "argument --allow-host: expected UTF-8 text",
        ("users", "list", NOT_UTF8): "argument USER: expected UTF-8 text",
        ("users", "remove", NOT_UTF8): "argument USER: expected UTF-8 text",
        ("users", "add", "u", "--password", f"secret{NOT_UTF8}"): "argument --password: expected UTF-8 text (the password is not shown)",
    }
    for argv, said in refused.items():
        line = onceflow.fails(*argv, status=2)
        assert line.startswith(f"onceflow {argv[0]} {argv[1]}: {said}"), (argv, line)
        assert "secret" not in line
    assert onceflow.fails("users", "add", "u", "--password-stdin", stdin=b"\xff\n", status=2) == (
        "onceflow users add: the password is not UTF-8 text")

    # The bytes themselves, as a shell passes $'t\xff': the process ends with one line, not a crash.
    proc = subprocess.run([sys.executable, "-m", "onceflow", "topics", "describe", b"t\xff", "--bootstrap-servers", bootstrap],
                          capture_output=True, timeout=60)
    assert (proc.returncode, proc.stdout, len(proc.stderr.splitlines())) == (2, b"", 1), proc
    assert proc.stderr.startswith(b"onceflow topics describe: argument TOPIC: expected a topic name"), proc.stderr


def test_a_missing_topic_or_partition_reads_the_same_and_changes_nothing(onceflow: Run, bootstrap: str) -> None:
    missing = "onceflow topics {}: topic 'nosuch': UNKNOWN_TOPIC_OR_PARTITION (code 3): the topic does not exist"
    started = time.monotonic()
    assert onceflow.fails("topics", "delete", "nosuch") == missing.format("delete")
    assert onceflow.fails("topics", "delete-records", "nosuch", "0=1") == missing.format("delete-records")
    make_topic(bootstrap, "trimmed", 2)
    produce(bootstrap, "trimmed", [b"a", b"b", b"c"], partition=0)
    assert onceflow.fails("topics", "delete-records", "trimmed", "0=2", "5=1") == (
        "onceflow topics delete-records: topic 'trimmed' has no partition 5 (it has 2: 0 to 1)")
    assert time.monotonic() - started < 10, "found at once, not after the timeout"
    assert [p["low_watermark"] for p in onceflow.json("topics", "describe", "trimmed")["partitions"]] == [0, 0], "nothing deleted"
    assert onceflow.json("topics", "delete-records", "trimmed", "0=2") == [{"topic": "trimmed", "partition": 0, "low_watermark": 2}]


def test_alter_config_refuses_to_delete_a_config_that_does_not_exist(onceflow: Run) -> None:
    onceflow("topics", "create", "tuned", "--config", "retention.ms=60000")
    assert onceflow.fails("topics", "alter-config", "tuned", "--set", "retention.ms=1000", "--delete", "nosuch.config",
                          "--delete", "segment.ms", "--delete", "other.nosuch") == (
        "onceflow topics alter-config: Invalid config(s): nosuch.config,other.nosuch")  # kafka-configs' words
    described = onceflow.json("topics", "describe", "tuned")
    assert [(c["name"], c["value"]) for c in described["configs"]] == [("retention.ms", "60000")], "nothing changed"
    assert onceflow.fails("topics", "alter-config", "nosuch", "--delete", "segment.ms").endswith(
        "topic 'nosuch': UNKNOWN_TOPIC_OR_PARTITION (code 3): the topic does not exist")
    assert onceflow.json("topics", "alter-config", "tuned", "--delete", "retention.ms", "--delete", "segment.ms") == [
        {"topic": "tuned", "config": name, "operation": "delete", "value": None} for name in ("retention.ms", "segment.ms")]
    assert onceflow.json("topics", "describe", "tuned")["configs"] == []


def test_a_partition_count_is_partition_count_and_add_partitions_answers_as_create(onceflow: Run) -> None:
    created = onceflow.json("topics", "create", "grown", "--partitions", "1")
    assert set(created) == {"topic", "topic_id", "partition_count", "replication_factor", "configs"}
    assert {"topic": "grown", "partition_count": 1, "internal": False} in onceflow.json("topics", "list")
    grown = onceflow.json("topics", "add-partitions", "grown", "--partitions", "3")
    assert grown == {**created, "partition_count_before": 1, "partition_count": 3}
    text = onceflow("topics", "add-partitions", "grown", "--partitions", "4")[0].decode().splitlines()
    assert [line.split(":")[0] for line in text[2:4]] == ["Partition count before", "Partition count"], text


def test_reset_offsets_names_each_partition_once_and_warns_as_kafka_does(onceflow: Run, bootstrap: str) -> None:
    make_topic(bootstrap, "g1t", 2)
    produce(bootstrap, "g1t", [b"%d" % i for i in range(10)], partition=0)
    for group in ("g1", "g2"):
        committer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        committer.commit(offsets=[TopicPartition("g1t", 0, 4), TopicPartition("g1t", 1, 0)], asynchronous=False)
        committer.close()

    out, warned = onceflow("groups", "reset-offsets", "g1", "--topic", "g1t", "--topic", "g1t:0", "--to-offset", "100", "--json")
    assert json.loads(out)["offsets"] == [{"topic": "g1t", "partition": 0, "committed_offset": 4, "new_offset": 10},
                                         {"topic": "g1t", "partition": 1, "committed_offset": 0, "new_offset": 0}]
    assert warned.splitlines() == [
        "New offset (100) is higher than latest offset for topic partition g1t-0. Value will be set to 10",
        "New offset (100) is higher than latest offset for topic partition g1t-1. Value will be set to 0"]
    out, warned = onceflow("groups", "reset-offsets", "g1", "--topic", "g1t:0", "--shift-by", "-6", "--execute")
    assert warned == "New offset (-2) is lower than earliest offset for topic partition g1t-0. Value will be set to 0\n"
    assert out.decode().splitlines()[4:6] == ["TOPIC  PARTITION  COMMITTED-OFFSET  NEW-OFFSET", "g1t            0                 4           0"]
    assert onceflow("groups", "reset-offsets", "g1", "--topic", "g1t:0", "--to-offset", "3")[1] == "", "no warning in range"

    assert onceflow.fails("groups", "delete", "g2", "nope", "g2") == (
        "onceflow groups delete: group 'nope': GROUP_ID_NOT_FOUND (code 69): The group id does not exist (deleted: 'g2')")
    assert onceflow.json("groups", "delete", "g1", "g1") == [{"group": "g1", "deleted": True}]
