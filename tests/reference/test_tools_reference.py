"""The everyday ``onceflow`` commands give the same answers from Onceflow and from Apache Kafka
(``target``): ``topics produce|consume`` (keys, headers, partitions, a transaction all or
nothing, read_committed and read_uncommitted), ``topics offsets --timestamp``, ``groups
reset-offsets`` (planned, executed, refused while the group has a member) and ``groups delete``,
``topics create|alter-config|add-partitions|describe`` and ``cluster info``.  The commands run
in the test's process (``tests/support/cli.py``); they reach both brokers through confluent-kafka
and kafka-python only, which is the claim under test."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer

from tests.support.cli import Run
from tests.support.reference import Target
from tests.support.waiting import wait_for


@pytest.fixture
def onceflow(capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, target: Target) -> Run:
    return Run(capsysbinary, monkeypatch, target.bootstrap_servers)


def test_produce_consume_a_transaction_and_offsets_for_a_time(onceflow: Run, unique: Callable[[str], str]) -> None:
    topic, tid = unique("lines"), unique("tx")
    onceflow("topics", "create", topic, "--partitions", "3")
    onceflow("topics", "produce", topic, "--key-separator", "=", "-H", "via=cli", "--header-separator", "|",
             stdin=b"n=1|k1=v1\n|k2=v2\n|k1=v3\n")
    onceflow("topics", "produce", topic, "-p", "2", "-k", "fixed", stdin=b"a\nb\n")
    got = onceflow.records(topic, "--from-beginning", "--exit-at-end")
    by_key: dict[str | None, list[tuple[int, int, str | None, list[tuple[str, str | None]]]]] = {}
    for r in got:
        by_key.setdefault(r["key"], []).append((r["partition"], r["offset"], r["value"], [(h["key"], h["value"]) for h in r["headers"]]))
    assert [(v, h) for _, _, v, h in sorted(by_key["k1"])] == [("v1", [("via", "cli"), ("n", "1")]), ("v3", [("via", "cli")])]
    assert len({p for p, *_ in by_key["k1"]}) == 1, "one key, one partition"
    assert [(v, h) for _, _, v, h in by_key["k2"]] == [("v2", [("via", "cli")])]
    (p_a, o_a, *_), (p_b, o_b, *_) = by_key["fixed"]
    assert [(v, h) for *_, v, h in by_key["fixed"]] == [("a", []), ("b", [])] and (p_a, p_b, o_b) == (2, 2, o_a + 1)

    cut = int(time.time() * 1000) + 1
    wait_for(lambda: time.time() * 1000 > cut + 1, interval=0.002, what="the clock to pass the cut")
    _, said = onceflow("topics", "produce", topic, "-p", "0", "--transactional-id", tid, stdin=b"t1\nt2\n")
    assert said.startswith(f"Produced 2 records to {topic} in transaction '{tid}' (committed) (partition 0: 2 at offsets "), said
    line = onceflow.fails("topics", "produce", topic, "-p", "0", "--transactional-id", tid, "--key-separator", "=",
                          stdin=b"k=t3\nno separator\n")
    assert line == f"onceflow topics produce: transaction '{tid}' aborted, none of its 1 record written: line 2: no key separator '='"
    committed = [r["value"] for r in onceflow.records(topic, "-p", "0", "--timestamp", str(cut), "-e", "--isolation-level", "read_committed")]
    assert committed == ["t1", "t2"]
    assert [r["value"] for r in onceflow.records(topic, "-p", "0", "--timestamp", str(cut), "-e")] == ["t1", "t2", "t3"], \
        "read_uncommitted, the default, shows the aborted record"

    rows = {r["partition"]: r for r in onceflow.json("topics", "offsets", topic, "--timestamp", str(cut))}
    first_t = min(r["offset"] for r in onceflow.records(topic, "-p", "0", "--timestamp", str(cut), "-e"))
    assert rows[0]["offset_for_time"] == first_t and rows[1]["offset_for_time"] is None and rows[2]["offset_for_time"] is None
    assert all(r["earliest"] == 0 for r in rows.values()) and rows[0]["latest"] == first_t + 5, "t1 t2 commit t3 abort"


def test_reset_offsets_and_delete_a_group(onceflow: Run, unique: Callable[[str], str], target: Target) -> None:
    topic, group = unique("resets"), unique("group")
    onceflow("topics", "create", topic, "--partitions", "2")
    onceflow("topics", "produce", topic, "-p", "0", stdin=b"".join(b"%d\n" % i for i in range(10)))
    onceflow("topics", "produce", topic, "-p", "1", stdin=b"x\ny\n")
    assert len(onceflow("topics", "consume", topic, "-g", group, "-o", "start", "-e")[0].splitlines()) == 12

    out, warned = onceflow("groups", "reset-offsets", group, "--topic", topic, "--topic", f"{topic}:1", "--shift-by", "-4", "--json")
    assert json.loads(out) == {
        "group": group, "executed": False, "offsets": [
            {"topic": topic, "partition": 0, "committed_offset": 10, "new_offset": 6},
            {"topic": topic, "partition": 1, "committed_offset": 2, "new_offset": 0}]}, "each partition once"
    assert warned == f"New offset (-2) is lower than earliest offset for topic partition {topic}-1. Value will be set to 0\n"
    assert onceflow.json("groups", "reset-offsets", group, "--topic", f"{topic}:0", "--to-offset", "3", "--execute")["offsets"] == [
        {"topic": topic, "partition": 0, "committed_offset": 10, "new_offset": 3}]
    described = onceflow.json("groups", "describe", group)
    assert (described["state"], [(o["partition"], o["committed_offset"], o["lag"]) for o in described["offsets"]]) == (
        "Empty", [(0, 3, 7), (1, 2, 0)])
    assert onceflow("topics", "consume", topic, "-g", group, "-p", "0", "-e", status=2)[1].startswith("onceflow topics consume: --partition")
    assert onceflow("topics", "consume", topic, "-g", group, "-n", "1")[0] == b"3\n", "from the reset offsets"

    member = Consumer({"bootstrap.servers": target.bootstrap_servers, "group.id": group, "enable.auto.commit": False})
    member.subscribe([topic])
    try:
        wait_for(lambda: member.poll(0.2) is None and member.assignment(), timeout=60, interval=0, what="the member's assignment")
        assert onceflow.fails("groups", "reset-offsets", group, "--all-topics", "--to-earliest", "--execute") == (
            f"onceflow groups reset-offsets: Assignments can only be reset if the group '{group}' is inactive, "
            "but the current state is Stable.")
        assert onceflow.fails("groups", "delete", group).startswith(f"onceflow groups delete: group '{group}': NON_EMPTY_GROUP (code 68)")
    finally:
        member.close()
    assert onceflow.json("groups", "delete", group, group) == [{"group": group, "deleted": True}], "named twice, deleted once"
    assert onceflow.fails("groups", "delete", group).startswith(f"onceflow groups delete: group '{group}': GROUP_ID_NOT_FOUND (code 69)")


def test_topic_configs_partitions_and_cluster_info(onceflow: Run, unique: Callable[[str], str], target: Target) -> None:
    topic = unique("configs")

    def configs(answer: dict[str, object]) -> dict[str, tuple[object, object]]:
        # Kafka also lists its cluster-level min.insync.replicas among a topic's non-default configs.
        listed = answer["configs"]
        assert isinstance(listed, list)
        return {c["name"]: (c["value"], c["source"]) for c in listed if c["name"] != "min.insync.replicas"}

    created = onceflow.json("topics", "create", "--config", "retention.ms=60000", "--config", "cleanup.policy=compact", topic)
    assert (created["partition_count"], created["replication_factor"]) == (1, 1)
    assert configs(created) == configs(onceflow.json("topics", "describe", topic)) == {
        "retention.ms": ("60000", "DYNAMIC_TOPIC_CONFIG"), "cleanup.policy": ("compact", "DYNAMIC_TOPIC_CONFIG")}
    assert len(created["topic_id"]) == 22 and not set(created["topic_id"]) & set("+/="), "Kafka's Uuid.toString"

    onceflow("topics", "alter-config", topic, "--set", "retention.ms=1000", "--delete", "cleanup.policy")
    assert configs(onceflow.json("topics", "describe", topic)) == {"retention.ms": ("1000", "DYNAMIC_TOPIC_CONFIG")}
    assert onceflow.fails("topics", "alter-config", unique("absent"), "--set", "retention.ms=1").endswith(
        "UNKNOWN_TOPIC_OR_PARTITION (code 3): the topic does not exist")
    # DescribeConfigs lists every topic config, defaults too: a default one can be deleted, an unknown one cannot.
    onceflow("topics", "alter-config", topic, "--delete", "segment.ms")
    assert onceflow.fails("topics", "alter-config", topic, "--set", "retention.ms=5", "--delete", "nosuch.config") == (
        "onceflow topics alter-config: Invalid config(s): nosuch.config")
    assert configs(onceflow.json("topics", "describe", topic)) == {"retention.ms": ("1000", "DYNAMIC_TOPIC_CONFIG")}, "nothing set"

    grown = onceflow.json("topics", "add-partitions", topic, "--partitions", "3")
    assert grown == {"topic": topic, "topic_id": created["topic_id"], "partition_count_before": 1, "partition_count": 3,
                     "replication_factor": 1, "configs": grown["configs"]} and configs(grown) == {
        "retention.ms": ("1000", "DYNAMIC_TOPIC_CONFIG")}, "create's shape"
    assert [p["partition"] for p in onceflow.json("topics", "describe", topic)["partitions"]] == [0, 1, 2]
    assert onceflow.fails("topics", "add-partitions", topic, "--partitions", "2").startswith(
        f"onceflow topics add-partitions: topic '{topic}': INVALID_PARTITIONS (code 37)")
    assert onceflow.fails("topics", "delete-records", topic, "0=0", "5=1") == (
        f"onceflow topics delete-records: topic '{topic}' has no partition 5 (it has 3: 0 to 2)")
    absent = unique("absent")
    for command in (["delete", absent], ["delete-records", absent, "0=1"]):
        assert onceflow.fails("topics", *command) == (
            f"onceflow topics {command[0]}: topic '{absent}': UNKNOWN_TOPIC_OR_PARTITION (code 3): the topic does not exist")

    info = onceflow.json("cluster", "info")
    host, port = target.bootstrap_servers.split(":")
    assert [(b["host"], b["port"], b["rack"]) for b in info["brokers"]] == [(host, int(port), None)]
    assert info["controller"] in [b["id"] for b in info["brokers"]] and isinstance(info["cluster_id"], str)
    apis = {row["api"]: (row["min_version"], row["max_version"]) for row in info["api_versions"]}
    assert {"Produce", "Fetch", "ListOffsets", "ApiVersions", "DescribeCluster", "IncrementalAlterConfigs"} <= set(apis)
    assert {row["broker"] for row in info["api_versions"]} == {b["id"] for b in info["brokers"]}
