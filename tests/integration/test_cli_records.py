"""The everyday commands (``onceflow topics produce|consume|alter-config|add-partitions|offsets``,
``groups reset-offsets|delete``, ``cluster info``) and the topic commands' rough edges, against one
broker process shared by the module.  Commands run in this process (``onceflow.cli.main``, stdin
and stdout swapped for bytes) except where the process itself is the point: Ctrl-C, and stdout as
a pipe."""

from __future__ import annotations

import base64
import io
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicCollection
from confluent_kafka.admin import AdminClient

from onceflow import cli
from tests.support.broker import FAST_GROUPS, BrokerProcess
from tests.support.cli import TIMEOUT, Run
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc = BrokerProcess(tmp_path_factory.mktemp("cli-records") / "data", FAST_GROUPS).start()
    try:
        yield proc.bootstrap_servers
    finally:
        proc.stop()


@pytest.fixture
def onceflow(capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, bootstrap: str) -> Run:
    return Run(capsysbinary, monkeypatch, bootstrap)


# -- produce and consume ---------------------------------------------------------------------


def test_produce_then_consume_keys_headers_partitions_and_where_to_start(onceflow: Run) -> None:
    onceflow("topics", "create", "lines", "--partitions", "3")
    _, said = onceflow("topics", "produce", "lines", "--header-separator", "|", "--key-separator", r"\t", "-H", "via=cli",
                       stdin=b"h=1|k1\tv1\n|k2\tv2\r\nh=2,bare|k1\tv3\n")
    assert said.startswith("Produced 3 records to lines (partition "), said
    summary = onceflow.json("topics", "produce", "lines", "-p", "2", "-k", "fixed", "--compression", "zstd", "--acks", "1",
                            stdin=b"a\n\nlast without newline")
    assert summary == {"topic": "lines", "records": 3, "acknowledged": 3, "acks": "1", "transactional_id": None,
                       "partitions": [{"partition": 2, "records": 3, "first_offset": summary["partitions"][0]["first_offset"],
                                       "last_offset": summary["partitions"][0]["first_offset"] + 2}]}

    got = onceflow.records("lines", "--from-beginning", "--exit-at-end")
    assert len(got) == 6
    keyed = sorted((r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]], r["partition"]) for r in got
                   if r["key"] != "fixed")
    assert [k[:3] for k in keyed] == [("k1", "v1", [("via", "cli"), ("h", "1")]), ("k1", "v3", [("via", "cli"), ("h", "2"), ("bare", None)]),
                                      ("k2", "v2", [("via", "cli")])]
    assert keyed[0][3] == keyed[1][3], "one key, one partition"
    fixed = [r for r in got if r["key"] == "fixed"]
    assert [(r["partition"], r["value"], r["headers"]) for r in fixed] == [(2, "a", []), (2, "", []), (2, "last without newline", [])]
    assert all(r["topic"] == "lines" and r["timestamp_type"] == "CreateTime" and r["timestamp"] > 0 for r in got)

    out, err = onceflow("topics", "consume", "lines", "-p", "2", "-o", "start", "-e", "-f", r"%p:%o %k=%v [%h]%%\n")
    first = summary["partitions"][0]["first_offset"]
    assert out.decode().splitlines()[-3:] == [f"2:{first} fixed=a []%", f"2:{first + 1} fixed= []%",
                                              f"2:{first + 2} fixed=last without newline []%"]
    assert err == f"Processed a total of {len(out.splitlines())} messages\n", "only records on stdout"
    assert onceflow("topics", "consume", "lines", "-p", "2", "-o", "-2", "-e")[0] == b"\nlast without newline\n"
    assert onceflow("topics", "consume", "lines", "-p", "2", "-o", str(first + 2), "-e")[0] == b"last without newline\n"
    assert onceflow("topics", "consume", "lines", "-p", "2", "-o", "999", "-e")[0] == b"", "an offset past the end is the end"
    assert onceflow("topics", "consume", "lines", "-o", "end", "-e")[0] == b""
    assert len(onceflow("topics", "consume", "lines", "-o", "start", "-n", "4")[0].splitlines()) == 4
    later = max(r["timestamp"] for r in got if r["key"] != "fixed")
    assert sorted(r["value"] for r in onceflow.records("lines", "--timestamp", str(later), "-e")) \
        == sorted(r["value"] for r in got if r["timestamp"] >= later)

    assert onceflow.fails("topics", "produce", "lines", "-p", "3", stdin=b"x\n") == \
        "onceflow topics produce: topic 'lines' has no partition 3 (it has 3: 0 to 2)"
    assert onceflow.fails("topics", "produce", "lines", "--key-separator", ":", stdin=b"a:1\nno separator\n") == \
        "onceflow topics produce: line 2: no key separator ':' (1 record before it produced)"


def test_a_transaction_is_all_or_nothing_and_read_uncommitted_is_the_default(onceflow: Run) -> None:
    onceflow("topics", "create", "txn-lines")
    _, said = onceflow("topics", "produce", "txn-lines", "--transactional-id", "cli-tx", stdin=b"one\ntwo\n")
    assert said == "Produced 2 records to txn-lines in transaction 'cli-tx' (committed) (partition 0: 2 at offsets 0-1)\n"
    assert onceflow.fails("topics", "produce", "txn-lines", "--transactional-id", "cli-tx", "--key-separator", "=",
                          stdin=b"k=three\nfour\n") == ("onceflow topics produce: transaction 'cli-tx' aborted, none of its "
                                                        "1 record written: line 2: no key separator '='")
    assert onceflow("topics", "consume", "txn-lines", "-o", "start", "-e", "--isolation-level", "read_committed")[0] \
        == b"one\ntwo\n"
    assert onceflow("topics", "consume", "txn-lines", "-o", "start", "-e")[0] == b"one\ntwo\nthree\n", \
        "read_uncommitted (the default) shows the aborted record"
    assert onceflow.fails("topics", "produce", "txn-lines", "--transactional-id", "t", "--acks", "1", status=2) == \
        "onceflow topics produce: --transactional-id needs --acks all (a transactional producer is idempotent)"


def test_acks_0_a_partial_failure_in_json_and_a_transaction_longer_than_the_brokers_maximum(
        onceflow: Run, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, bootstrap: str) -> None:
    onceflow("topics", "create", "edges")
    assert onceflow("topics", "produce", "edges", "--acks", "0", stdin=b"a\nb\n")[1] == \
        "Sent 2 records to edges (acks=0: not acknowledged)\n", "acks=0 has no offsets: the records are counted as sent"
    assert onceflow.json("topics", "produce", "edges", "--acks", "0", stdin=b"c\n")["partitions"] == [
        {"partition": 0, "records": 1, "first_offset": None, "last_offset": None}]

    out, err = onceflow("topics", "produce", "edges", "--key-separator", ":", "--json", stdin=b"k:d\nno separator\n", status=1)
    assert err == "onceflow topics produce: line 2: no key separator ':' (1 record before it produced)\n"
    landed = json.loads(out)
    assert (landed["records"], landed["acknowledged"], landed["partitions"]) == (
        1, 1, [{"partition": 0, "records": 1, "first_offset": 3, "last_offset": 3}]), "what landed, for a script"

    # --timeout above the brokers' transaction.max.timeout.ms (15 min): transaction.timeout.ms stays within it
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"e\n")))
    assert cli.main(["topics", "produce", "edges", "--transactional-id", "long", "--timeout", "1h", "--bootstrap-servers",
                     bootstrap]) == 0, capsysbinary.readouterr()
    assert capsysbinary.readouterr().err.decode().startswith("Produced 1 record to edges in transaction 'long' (committed)")
    assert onceflow("topics", "consume", "edges", "-o", "start", "-e", "--isolation-level", "read_committed")[0] == \
        b"a\nb\nc\nd\ne\n"


def test_consume_with_a_group_commits_what_it_printed(onceflow: Run) -> None:
    onceflow("topics", "create", "grouped")
    onceflow("topics", "produce", "grouped", "-p", "0", stdin=b"a\nb\nc\nd\n")
    assert onceflow("topics", "consume", "grouped", "-g", "readers", "--from-beginning", "-n", "3")[0] == b"a\nb\nc\n"
    offsets = onceflow.json("groups", "describe", "readers")["offsets"]
    assert [(o["partition"], o["committed_offset"]) for o in offsets] == [(0, 3)]
    assert onceflow("topics", "consume", "grouped", "-g", "readers", "-e")[0] == b"d\n", "from the committed offset"
    assert onceflow.fails("topics", "consume", "grouped", "-g", "readers", "-p", "0", status=2) == \
        "onceflow topics consume: --partition cannot go with --group (the group assigns the partitions)"


def test_missing_topics_read_the_same_from_every_command(onceflow: Run) -> None:
    line = "topic 'absent': UNKNOWN_TOPIC_OR_PARTITION (code 3): the topic does not exist"
    assert onceflow.fails("topics", "produce", "absent", stdin=b"x\n") == f"onceflow topics produce: {line}"
    assert onceflow.fails("topics", "consume", "absent") == f"onceflow topics consume: {line}"
    assert onceflow.fails("topics", "describe", "absent") == f"onceflow topics describe: {line}"
    assert onceflow.fails("topics", "offsets", "absent") == f"onceflow topics offsets: {line}"
    assert onceflow.fails("topics", "alter-config", "absent", "--set", "retention.ms=1") == f"onceflow topics alter-config: {line}"
    assert onceflow.fails("topics", "add-partitions", "absent", "--partitions", "2") == f"onceflow topics add-partitions: {line}"
    assert onceflow.fails("groups", "reset-offsets", "g", "--topic", "absent", "--to-latest") == f"onceflow groups reset-offsets: {line}"


# -- groups ------------------------------------------------------------------------------------


def test_reset_offsets_plans_executes_and_refuses_a_group_with_members(onceflow: Run, bootstrap: str) -> None:
    onceflow("topics", "create", "resets", "--partitions", "2")
    onceflow("topics", "produce", "resets", "-p", "0", stdin=b"".join(b"%d\n" % i for i in range(10)))
    onceflow("topics", "produce", "resets", "-p", "1", stdin=b"x\ny\n")
    onceflow("topics", "consume", "resets", "-g", "rs", "-o", "start", "-e")

    plan = onceflow.json("groups", "reset-offsets", "rs", "--topic", "resets", "--shift-by", "-4")
    assert plan == {"group": "rs", "executed": False, "offsets": [
        {"topic": "resets", "partition": 0, "committed_offset": 10, "new_offset": 6},
        {"topic": "resets", "partition": 1, "committed_offset": 2, "new_offset": 0}]}, "kept within the earliest offset"
    assert [(o["partition"], o["committed_offset"]) for o in onceflow.json("groups", "describe", "rs")["offsets"]] == [(0, 10), (1, 2)], \
        "a dry run changes nothing"
    out, _ = onceflow("groups", "reset-offsets", "rs", "--topic", "resets:0", "--to-offset", "3", "--execute")
    assert out.decode().splitlines()[:2] == ["Group:    rs", "Executed: yes"]
    assert out.decode().splitlines()[-1].split() == ["resets", "0", "10", "3"]
    assert onceflow.json("groups", "reset-offsets", "rs", "--all-topics", "--to-latest")["offsets"] == [
        {"topic": "resets", "partition": 0, "committed_offset": 3, "new_offset": 10},
        {"topic": "resets", "partition": 1, "committed_offset": 2, "new_offset": 2}]
    assert onceflow.json("groups", "reset-offsets", "rs", "--topic", "resets:1", "--to-datetime", "2000-01-01T00:00:00Z")["offsets"] \
        == [{"topic": "resets", "partition": 1, "committed_offset": 2, "new_offset": 0}]
    assert onceflow.fails("groups", "reset-offsets", "fresh", "--topic", "resets", "--shift-by", "1") == \
        "onceflow groups reset-offsets: cannot shift the offset of resets-0: group 'fresh' has no committed offset there"

    member = Consumer({"bootstrap.servers": bootstrap, "group.id": "rs", "enable.auto.commit": False})
    member.subscribe(["resets"])
    try:
        wait_for(lambda: member.poll(0.2) is None and member.assignment(), interval=0, what="the member's assignment")
        assert onceflow.fails("groups", "reset-offsets", "rs", "--topic", "resets", "--to-earliest", "--execute") == (
            "onceflow groups reset-offsets: Assignments can only be reset if the group 'rs' is inactive, "
            "but the current state is Stable.")
        assert onceflow.fails("groups", "delete", "rs").startswith("onceflow groups delete: group 'rs': NON_EMPTY_GROUP (code 68)")
    finally:
        member.close()
    assert onceflow.fails("groups", "delete", "rs", "never-was") == (
        "onceflow groups delete: group 'never-was': GROUP_ID_NOT_FOUND (code 69): The group id does not exist (deleted: 'rs')")
    assert "rs" not in [g["group"] for g in onceflow.json("groups", "list")]


# -- topics: configs, partitions, offsets; cluster ---------------------------------------------


def test_alter_config_add_partitions_offsets_and_cluster_info(onceflow: Run, bootstrap: str) -> None:
    created = onceflow.json("topics", "create", "--config", "retention.ms=60000", "--config", "cleanup.policy=compact", "shaped")
    described = onceflow.json("topics", "describe", "shaped")
    assert created["configs"] == described["configs"] == [
        {"name": "cleanup.policy", "value": "compact", "source": "DYNAMIC_TOPIC_CONFIG"},
        {"name": "retention.ms", "value": "60000", "source": "DYNAMIC_TOPIC_CONFIG"}], "one shape for configs"
    assert created["topic_id"] == described["topic_id"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_topics(TopicCollection(["shaped"]))["shaped"].result(20)
    raw = base64.urlsafe_b64decode(created["topic_id"] + "==")
    assert int.from_bytes(raw[:8], "big", signed=True) == description.topic_id.get_most_significant_bits()
    assert int.from_bytes(raw[8:], "big", signed=True) == description.topic_id.get_least_significant_bits()
    assert len(created["topic_id"]) == 22 and not set(created["topic_id"]) & set("+/="), "Kafka's Uuid.toString"

    assert onceflow.json("topics", "alter-config", "shaped", "--set", "retention.ms=1000", "--delete", "cleanup.policy") == [
        {"topic": "shaped", "config": "retention.ms", "operation": "set", "value": "1000"},
        {"topic": "shaped", "config": "cleanup.policy", "operation": "delete", "value": None}]
    assert onceflow.json("topics", "describe", "shaped")["configs"] == [
        {"name": "retention.ms", "value": "1000", "source": "DYNAMIC_TOPIC_CONFIG"}]

    grown = onceflow.json("topics", "add-partitions", "shaped", "--partitions", "3")
    assert (grown["topic"], grown["partition_count_before"], grown["partition_count"]) == ("shaped", 1, 3)
    assert onceflow.fails("topics", "add-partitions", "shaped", "--partitions", "2").startswith(
        "onceflow topics add-partitions: topic 'shaped': INVALID_PARTITIONS (code 37)")

    onceflow("topics", "produce", "shaped", "-p", "1", stdin=b"old\n")
    cut = int(time.time() * 1000) + 1
    wait_for(lambda: time.time() * 1000 > cut + 1, interval=0.002, what="the clock to pass the cut")
    onceflow("topics", "produce", "shaped", "-p", "1", stdin=b"new\nnewer\n")
    table, _ = onceflow("topics", "offsets", "shaped", "--timestamp", str(cut))
    assert [line.split() for line in table.decode().splitlines()] == [
        ["TOPIC", "PARTITION", "EARLIEST", "LATEST", "OFFSET-FOR-TIME"],
        ["shaped", "0", "0", "0", "-"], ["shaped", "1", "0", "3", "1"], ["shaped", "2", "0", "0", "-"]]

    info = onceflow.json("cluster", "info")
    host, port = bootstrap.split(":")
    assert info["brokers"] == [{"id": 1, "host": host, "port": int(port), "rack": None}] and info["controller"] == 1
    assert isinstance(info["cluster_id"], str) and len(info["cluster_id"]) == 22
    apis = {row["api"]: (row["min_version"], row["max_version"]) for row in info["api_versions"]}
    assert {"Produce", "Fetch", "ApiVersions", "DescribeCluster"} <= set(apis) and all(lo <= hi for lo, hi in apis.values())
    assert "api_versions" not in onceflow.json("cluster", "info", "--no-api-versions")


# -- usage errors ----------------------------------------------------------------------------------

BAD_VALUES = [
    (("topics", "create", "t", "--partitions", "0"), "argument --partitions"),
    (("topics", "create", "t", "--config", "no-equals"), "argument --config"),
    (("topics", "delete-records", "t", "x=1"), "PARTITION=OFFSET"),
    (("topics", "add-partitions", "t", "--partitions", "-1"), "argument --partitions"),
    (("topics", "offsets", "t", "--timestamp", "yesterday"), "argument --timestamp"),
    (("topics", "alter-config", "t"), "nothing to change"),
    (("topics", "alter-config", "t", "--set", "a=1", "--delete", "a"), "a: both set and deleted"),
    (("topics", "produce", "t", "-p", "-1"), "argument -p/--partition"),
    (("topics", "produce", "t", "--acks", "2"), "argument --acks"),
    (("topics", "produce", "t", "-k", "k", "--key-separator", ":"), "not allowed with argument"),
    (("topics", "produce", "t", "--key-separator", ""), "a separator cannot be empty"),
    (("topics", "consume", "t", "-o", "middle"), "argument -o/--offset"),
    (("topics", "consume", "t", "-o", "start", "--from-beginning"), "not allowed with argument"),
    (("topics", "consume", "t", "-n", "0"), "argument -n/--num"),
    (("topics", "consume", "t", "-f", "%k %q"), "unknown directive %q"),
    (("topics", "consume", "t", "-f", "%v", "--json"), "--json and --format cannot go together"),
    (("topics", "consume", "t", "-g", "g", "-o", "5"), "cannot go with --group"),
    # argv that is not UTF-8 (a terminal's bytes, "\udcff" to Python) is refused here, not by librdkafka (it crashed)
    (("topics", "produce", "t\udcff"), "argument TOPIC: expected a topic name"),
    (("topics", "consume", "t\udcff"), "argument TOPIC: expected a topic name"),
    (("topics", "consume", "t", "-g", "g\udcff"), "argument -g/--group: expected UTF-8"),
    (("topics", "consume", "t", "-g", ""), "argument -g/--group: expected a name"),
    (("topics", "produce", "t", "-k", "k\udcff"), "argument -k/--key: expected UTF-8"),
    (("topics", "produce", "t", "-H", "h=\udcff"), "argument -H/--header: expected UTF-8"),
    (("topics", "produce", "t", "--key-separator", "\udcff"), "argument --key-separator: expected UTF-8"),
    (("topics", "produce", "t", "--header-separator", "\udcff"), "argument --header-separator: expected UTF-8"),
    (("topics", "produce", "t", "--transactional-id", "\udcff"), "argument --transactional-id: expected UTF-8"),
    (("topics", "produce", "t", "--transactional-id", ""), "argument --transactional-id: expected a name"),
    (("topics", "consume", "t", "-f", "%v\udcff"), "argument -f/--format: expected UTF-8"),
    (("topics", "consume", "t", "-f", "%v%"), "a lone '%' at the end"),
    (("topics", "consume", "t", "-f", "%v\\"), "a lone '\\\\' at the end"),
    (("groups", "reset-offsets", "g", "--topic", "t"), "one of the arguments --to-earliest"),
    (("groups", "reset-offsets", "g", "--to-latest"), "one of the arguments --topic --all-topics"),
    (("groups", "reset-offsets", "g", "--topic", "t:x", "--to-latest"), "argument --topic"),
    (("groups", "reset-offsets", "g", "--all-topics", "--to-offset", "-3"), "argument --to-offset"),
    (("groups", "reset-offsets", "g", "--all-topics", "--shift-by", "back"), "argument --shift-by"),
    (("groups", "delete"), "the following arguments are required: GROUP"),
]


def test_bad_values_are_usage_errors(capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused before anything connects (the address is a port nothing listens on): exit status 2, and
    the option named."""
    run = Run(capsysbinary, monkeypatch, "127.0.0.1:1")
    for args, fragment in BAD_VALUES:
        _, err = run(*args, status=2)
        assert fragment in err and "Traceback" not in err, (args, err)


# -- as a process: Ctrl-C, and stdout as a pipe ------------------------------------------------------


def start(bootstrap: str, *args: str) -> subprocess.Popen[bytes]:
    """``onceflow ARGS`` as a child process that takes Ctrl-C (SIGINT) as a terminal would deliver it."""
    return subprocess.Popen([sys.executable, "-m", "onceflow", *args, "--bootstrap-servers", bootstrap, "--timeout", TIMEOUT],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_ctrl_c_ends_a_consumer_cleanly_and_aborts_a_transaction(onceflow: Run, bootstrap: str) -> None:
    onceflow("topics", "create", "stopped")
    onceflow("topics", "produce", "stopped", stdin=b"r1\nr2\nr3\n")
    consumer = start(bootstrap, "topics", "consume", "stopped", "-g", "interrupted", "--from-beginning", "--isolation-level",
                     "read_committed")
    onceflow("topics", "create", "stopped-plain")
    producer = start(bootstrap, "topics", "produce", "stopped", "--transactional-id", "interrupted-tx")
    plain = start(bootstrap, "topics", "produce", "stopped-plain")
    assert consumer.stdout is not None and producer.stdin is not None and plain.stdin is not None
    plain.stdin.write(b"q1\nq2\n")
    plain.stdin.flush()
    assert [consumer.stdout.readline() for _ in range(3)] == [b"r1\n", b"r2\n", b"r3\n"]  # now Ctrl-C is the way out
    producer.stdin.write(b"p1\np2\n")
    producer.stdin.flush()
    wait_for(lambda: onceflow.json("topics", "offsets", "stopped")[0]["latest"] == 5, what="the open transaction's records")

    consumer.send_signal(signal.SIGINT)
    out, err = consumer.communicate(timeout=60)
    assert (consumer.returncode, out, err) == (0, b"", b"Processed a total of 3 messages\n"), \
        "stdout a pipe: records only; no progress line on a piped stderr"
    producer.send_signal(signal.SIGINT)
    _, err = producer.communicate(timeout=60)
    assert (producer.returncode, err.decode()) == (130, "onceflow topics produce: interrupted: transaction 'interrupted-tx' aborted, "
                                                        "none of its 2 records written to stopped\n"), "one line"
    wait_for(lambda: onceflow.json("topics", "offsets", "stopped-plain")[0]["latest"] == 2, what="the records sent")
    plain.send_signal(signal.SIGINT)
    _, err = plain.communicate(timeout=60)
    assert (plain.returncode, err.decode()) == (130, "onceflow topics produce: interrupted after 2 records acknowledged by "
                                                     "stopped-plain (partition 0: 2 at offsets 0-1)\n"), "one line: what landed"
    assert [(o["partition"], o["committed_offset"]) for o in onceflow.json("groups", "describe", "interrupted")["offsets"]] == [(0, 3)]
    assert onceflow("topics", "consume", "stopped", "-o", "start", "-e", "--isolation-level", "read_committed")[0] == b"r1\nr2\nr3\n"
