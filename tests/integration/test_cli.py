"""The operator commands (``onceflow topics|groups|txn``) against the broker process: run as real
subprocesses, and called directly where that is simpler.  The tools use only client libraries
(confluent-kafka, kafka-python); tests/support/wire.py is used here only to make a hanging transaction."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from onceflow.tools import groups, topics, txn
from tests.support.broker import BrokerProcess
from tests.support.kafka import make_topic, produce, read_all, txn_producer
from tests.support.txn_wire import make_hanging_transaction
from tests.support.waiting import wait_for

TIMEOUT = 30


def cli(bootstrap: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``onceflow ARGS --bootstrap-servers BOOTSTRAP`` as a child process."""
    proc = subprocess.run([sys.executable, "-m", "onceflow", *args, "--bootstrap-servers", bootstrap, "--timeout", "20"],
                          capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, f"{args}: exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return proc


def cli_json(bootstrap: str, *args: str) -> Any:
    return json.loads(cli(bootstrap, *args, "--json").stdout)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode != 0, proc
    assert proc.stdout == "", proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# -- topics ----------------------------------------------------------------------


def test_topics_create_list_describe_delete(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    out = cli(bs, "topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=60000",
              "--config", "cleanup.policy=compact").stdout
    lines = out.splitlines()
    assert (lines[0].split(), lines[2:4], lines[5:7]) == (["Topic:", "orders"], ["Partition count:    3", "Replication factor: 1"],
                                                          ["Configs:", "NAME            VALUE    SOURCE"]), out
    assert_one_line_error(cli(bs, "topics", "create", "orders", check=False), "TOPIC_ALREADY_EXISTS")
    cli(bs, "topics", "create", "plain")  # the broker's default partition count
    produce(bs, "orders", [b"a", b"b", b"c"], partition=1)
    committer = Consumer({"bootstrap.servers": bs, "group.id": "probe"})  # a commit creates __consumer_offsets
    committer.commit(offsets=[TopicPartition("orders", 1, 3)], asynchronous=False)
    committer.close()

    table = cli(bs, "topics", "list").stdout.splitlines()
    assert table[0].split() == ["TOPIC", "PARTITION-COUNT", "INTERNAL"]
    assert [line.split() for line in table[1:]] == [["orders", "3", "no"], ["plain", "1", "no"]]
    listed = cli_json(bs, "topics", "list")
    assert listed == [{"topic": "orders", "partition_count": 3, "internal": False},
                      {"topic": "plain", "partition_count": 1, "internal": False}]
    everything = {row["topic"]: row for row in cli_json(bs, "topics", "list", "--all")}
    assert everything["__consumer_offsets"]["internal"] is True
    assert everything["orders"] == listed[0]

    described = cli_json(bs, "topics", "describe", "orders")
    assert described["topic"] == "orders" and described["internal"] is False
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"]) for p in described["partitions"]] == [
        (0, 1, [1], [1]), (1, 1, [1], [1]), (2, 1, [1], [1])]
    assert [(p["low_watermark"], p["high_watermark"]) for p in described["partitions"]] == [(0, 0), (0, 3), (0, 0)]
    assert {c["name"]: (c["value"], c["source"]) for c in described["configs"]} == {
        "retention.ms": ("60000", "DYNAMIC_TOPIC_CONFIG"), "cleanup.policy": ("compact", "DYNAMIC_TOPIC_CONFIG")}
    text = cli(bs, "topics", "describe", "orders").stdout
    assert "LOW-WATERMARK  HIGH-WATERMARK" in text and "retention.ms" in text
    assert topics.describe_topic(bs, "plain")["configs"] == [], "only configs that differ from the defaults"

    produce(bs, "plain", [b"p0", b"p1", b"p2", b"p3"])
    assert cli_json(bs, "topics", "delete-records", "plain", "0=2") == [{"topic": "plain", "partition": 0, "low_watermark": 2}]
    assert cli(bs, "topics", "delete-records", "plain", "0=-1").stdout.splitlines()[1].split() == ["plain", "0", "4"]
    assert_one_line_error(cli(bs, "topics", "delete-records", "plain", "0=9", check=False),
                          "onceflow topics delete-records:", "plain-0:", "OFFSET_OUT_OF_RANGE")
    assert_one_line_error(cli(bs, "topics", "delete-records", "orders", "1=1", check=False),
                          "orders-1:", "POLICY_VIOLATION")

    assert cli_json(bs, "topics", "delete", "orders") == [{"topic": "orders", "deleted": True}]
    wait_for(lambda: [r["topic"] for r in topics.list_topics(bs)] == ["plain"], what="orders to be gone")
    assert_one_line_error(cli(bs, "topics", "describe", "orders", check=False), "onceflow topics describe:", "'orders'")
    assert_one_line_error(cli(bs, "topics", "delete", "orders", check=False), "UNKNOWN_TOPIC")


# -- groups ----------------------------------------------------------------------


def test_groups_list_and_describe_show_members_and_lag(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "clicks", 2)
    produce(bs, "clicks", [f"c{i}".encode() for i in range(10)], partition=0)
    produce(bs, "clicks", [f"d{i}".encode() for i in range(4)], partition=1)
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "dashboard", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "client.id": "dash-1"})
    consumer.subscribe(["clicks"])
    seen: list[tuple[int, int]] = []

    def read_four_of_partition_0() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None and msg.partition() == 0:
            seen.append((msg.partition(), msg.offset()))
        return len(seen) >= 4

    wait_for(read_four_of_partition_0, what="the consumer to read four records")
    consumer.commit(offsets=[TopicPartition("clicks", 0, 4)], asynchronous=False)
    try:
        assert {"group": "dashboard", "type": "classic", "state": "Stable", "simple": False} in cli_json(bs, "groups", "list")
        described = cli_json(bs, "groups", "describe", "dashboard")
        assert (described["group"], described["state"], described["protocol"]) == ("dashboard", "Stable", "range")
        [member] = described["members"]
        assert member["client_id"] == "dash-1" and member["assignment"] == ["clicks-0", "clicks-1"]
        assert [(o["topic"], o["partition"], o["committed_offset"], o["high_watermark"], o["lag"], o["member_id"])
                for o in described["offsets"]] == [
            ("clicks", 0, 4, 10, 6, member["member_id"]),
            ("clicks", 1, None, 4, None, member["member_id"]),  # assigned, nothing committed yet
        ]
        text = cli(bs, "groups", "describe", "dashboard").stdout
        assert "COMMITTED-OFFSET  HIGH-WATERMARK  LAG" in text and "State:" in text
    finally:
        consumer.close()
    after = wait_for(lambda: (d := groups.describe_group(bs, "dashboard"))["state"] == "Empty" and d,
                     what="the group to be empty")
    assert after["members"] == [] and [o["lag"] for o in after["offsets"]] == [6]  # type: ignore[index]
    assert_one_line_error(cli(bs, "groups", "describe", "nobody", check=False), "does not exist")


# -- transactions ----------------------------------------------------------------


def test_txn_list_and_producers_show_an_open_transaction(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "payments", 1)
    produce(bs, "payments", [b"p0", b"p1"], partition=0)
    producer = txn_producer(bs, "payments-app")
    producer.begin_transaction()
    producer.produce("payments", b"t0", partition=0)
    producer.produce("payments", b"t1", partition=0)
    assert producer.flush(TIMEOUT) == 0

    listed = cli_json(bs, "txn", "list")
    assert [(r["transactional_id"], r["state"], r["coordinator"]) for r in listed] == [("payments-app", "Ongoing", 1)]
    pid = listed[0]["producer_id"]
    assert cli_json(bs, "txn", "list", "--state", "Ongoing", "--producer-id", str(pid)) == listed
    assert cli_json(bs, "txn", "list", "--state", "CompleteCommit") == []
    assert cli_json(bs, "txn", "list", "--producer-id", str(pid + 1000)) == []
    assert cli_json(bs, "txn", "list", "--min-duration-ms", "0") == listed  # ListTransactions v1
    assert cli_json(bs, "txn", "list", "--min-duration-ms", "3600000") == []
    assert "payments-app" in cli(bs, "txn", "list").stdout

    [row] = [r for r in cli_json(bs, "txn", "producers", "payments", "0") if r["producer_id"] == pid]
    assert row["current_transaction_start_offset"] == 2, "the open transaction starts after the two plain records"
    assert row["producer_epoch"] == 0 and row["last_sequence"] == 1
    assert "CURRENT-TRANSACTION-START-OFFSET" in cli(bs, "txn", "producers", "payments", "0").stdout
    partition = topics.describe_topic(bs, "payments")["partitions"][0]
    assert (partition["high_watermark"], partition["last_stable_offset"]) == (4, 2)

    producer.commit_transaction(TIMEOUT)
    assert wait_for(lambda: txn.list_transactions(bs, states=["CompleteCommit"]), what="the commit")
    [row] = [r for r in txn.describe_producers(bs, "payments", 0) if r["producer_id"] == pid]
    assert row["current_transaction_start_offset"] is None and row["coordinator_epoch"] is not None
    assert_one_line_error(cli(bs, "txn", "producers", "no-such-topic", "0", check=False), "onceflow txn producers:")


def test_txn_describe_shows_the_coordinator_state(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "ledger", 2)
    producer = txn_producer(bs, "ledger-app")
    producer.begin_transaction()
    producer.produce("ledger", b"x", partition=1)
    assert producer.flush(TIMEOUT) == 0
    described = json.loads(cli(bs, "txn", "describe", "ledger-app", "--json").stdout)
    assert (described["transactional_id"], described["state"], described["coordinator"]) == ("ledger-app", "Ongoing", 1)
    assert described["transaction_timeout_ms"] == 60000 and described["producer_epoch"] == 0
    assert described["partitions"] == [{"topic": "ledger", "partition": 1}]
    assert described["transaction_start_time_ms"] <= time.time() * 1000
    assert "Partitions:" in cli(bs, "txn", "describe", "ledger-app").stdout
    assert txn.find_hanging(bs) == [], "the coordinator covers this open transaction"
    producer.abort_transaction(TIMEOUT)
    assert_one_line_error(cli(bs, "txn", "describe", "nobody", check=False), "not known")


def test_find_hanging_and_abort(make_broker_process: Any) -> None:
    broker = make_broker_process(**{"transaction.partition.verification.enable": "false"})
    bs = broker.bootstrap_servers
    make_topic(bs, "stuck", 1)
    make_topic(bs, "fine", 1)
    pid = make_hanging_transaction(bs, "stuck")
    later = [f"later-{i}".encode() for i in range(3)]
    produce(bs, "stuck", later, partition=0)
    produce(bs, "fine", [b"ok"], partition=0)

    assert read_all(bs, "stuck", [0], "read_committed") == [], "the hanging transaction holds back the LSO"
    assert read_all(bs, "stuck", [0], "read_uncommitted") == [b"ghost-1", b"ghost-2", *later]
    assert txn.list_transactions(bs) == [], "no coordinator knows the transaction"

    [hanging] = txn.find_hanging(bs)
    assert (hanging["topic"], hanging["partition"], hanging["producer_id"], hanging["start_offset"]) == ("stuck", 0, pid, 0)
    assert hanging["transactional_id"] is None and "no coordinator knows" in hanging["reason"]
    [from_cli] = cli_json(bs, "txn", "find-hanging", "--topic", "stuck")
    assert from_cli.pop("duration_ms") >= hanging.pop("duration_ms")
    assert from_cli == hanging
    assert cli_json(bs, "txn", "find-hanging", "--topic", "fine") == []
    assert "no coordinator knows this producer id" in cli(bs, "txn", "find-hanging").stdout
    # An old enough open transaction is hanging by age alone too.
    [by_age] = txn.find_hanging(bs, topics=["stuck"], now_ms=int(time.time() * 1000) + 2 * 900_000)
    assert by_age["reason"].startswith("open longer than the max transaction timeout")

    assert_one_line_error(cli(bs, "txn", "abort", "stuck", "0", str(pid + 1), check=False), "no transaction to abort")
    aborted = cli_json(bs, "txn", "abort", "stuck", "0", str(pid))
    assert aborted == [{"topic": "stuck", "partition": 0, "producer_id": pid, "producer_epoch": 0,
                        "coordinator_epoch": 0, "start_offset": 0, "aborted": True}]

    assert wait_for(lambda: read_all(bs, "stuck", [0], "read_committed") == later, what="the later records to be readable")
    assert cli_json(bs, "txn", "find-hanging") == []
    assert "no hanging transactions" in cli(bs, "txn", "find-hanging").stdout
    [row] = [r for r in txn.describe_producers(bs, "stuck", 0) if r["producer_id"] == pid]
    assert row["current_transaction_start_offset"] is None
    assert_one_line_error(cli(bs, "txn", "abort", "stuck", "0", str(pid), check=False), "has no open transaction")


# -- rendering -------------------------------------------------------------------


def test_tables_are_aligned_and_json_round_trips() -> None:
    """rich's tables in rpk's style: no borders, upper-case headers, numbers right-aligned, no
    trailing blanks; piped, no colour, and nothing wrapped, cut or read as markup."""
    from onceflow.tools.common import render, to_json

    rows = [{"name": "a", "count": 5, "tags": ["x", "y"], "gone": None, "flag": True},
            {"name": "longer-name", "count": 12345, "tags": [], "gone": None, "flag": False}]
    lines = render(rows).splitlines()
    assert lines[0] == "NAME         COUNT  TAGS  GONE  FLAG"
    assert lines[1] == "a                5  x,y   -     yes"
    assert lines[2] == "longer-name  12345  -     -     no"
    assert json.loads(to_json(rows)) == rows
    text = render({"group": "g", "members": [], "offsets": [{"topic": "t", "lag": 1}]})
    assert text.splitlines() == ["Group:   g", "Members: -", "", "Offsets:", "TOPIC  LAG", "t        1"]
    assert render([], empty="no topics") == "no topics\n"
    long_value = "x" * 500 + " and more words to wrap"
    lines = render([{"principal": "User:[bold]eve[/bold]", "note": ":smile:", "config": long_value}]).splitlines()
    assert lines[1].split("  ")[:2] == ["User:[bold]eve[/bold]", ":smile:"] and lines[1].endswith(long_value)
    assert "\x1b" not in render(rows) + text, "no colour unless asked for (a terminal)"
    assert render(rows, color=True).splitlines()[1:] == render(rows).splitlines()[1:]


def test_the_existing_commands_are_still_there() -> None:
    from onceflow.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["broker", "--listen", "127.0.0.1:9999"])
    assert args.listen == ("127.0.0.1", 9999) and args.func.__name__ == "cmd_broker"
    assert parser.parse_args(["demo"]).func.__name__ == "cmd_demo"
    args = parser.parse_args(["topics", "--bootstrap-servers", "h:1", "list", "--json"])
    assert (args.bootstrap_servers, args.json, args.all) == ("h:1", True, False)
    args = parser.parse_args(["txn", "find-hanging", "--topic", "a", "--topic", "b", "c"])
    assert (args.topic, args.max_transaction_timeout_ms, args.bootstrap_servers) == (["a", "b", "c"], 900000, "127.0.0.1:9092")
    args = parser.parse_args(["txn", "list", "--state", "Ongoing", "PrepareCommit", "--producer-id", "7"])
    assert (args.state, args.producer_id, args.min_duration_ms) == (["Ongoing", "PrepareCommit"], [7], None)
    args = parser.parse_args(["topics", "create", "--config", "a=1", "--config", "b=2", "t"])
    assert (args.config, args.topic) == ([("a", "1"), ("b", "2")], "t"), "one KEY=VALUE per --config: the topic can follow"


def test_the_broker_crash_demo_passes_its_own_check() -> None:
    """``onceflow demo broker-crash``: its own broker process, SIGKILLed and restarted; it exits 0
    only if every acknowledged order arrived exactly once."""
    proc = subprocess.run([sys.executable, "-m", "onceflow", "demo", "broker-crash"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
    assert "5. killed the broker with SIGKILL" in proc.stdout
    assert "OK: all 10000 acknowledged orders were delivered exactly once" in proc.stdout


def test_a_broker_that_cannot_bind_its_port_says_so_in_one_line(broker_process: BrokerProcess, tmp_path: Any) -> None:
    proc = subprocess.run([sys.executable, "-m", "onceflow", "broker", "--data-dir", str(tmp_path / "second"),
                           "--listen", broker_process.bootstrap_servers], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "cannot run" in errors[0] and "address already in use" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
