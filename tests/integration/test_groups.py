"""Consumer groups through confluent-kafka: subscribe, commit, resume, split, rebalance."""

from __future__ import annotations

import subprocess
import sys
import time

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.broker import BrokerProcess
from tests.support.kafka import make_topic, produce
from tests.support.waiting import wait_for

TIMEOUT = 30


def group_consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        **extra,
    })


def poll_n(consumer: Consumer, n: int) -> list[tuple[int, int, bytes]]:
    """The next ``n`` records, as (partition, offset, value)."""
    got: list[tuple[int, int, bytes]] = []

    def have_n() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset(), msg.value()))
        return len(got) >= n

    wait_for(have_n, timeout=TIMEOUT, interval=0, what=lambda: f"{n} records ({len(got)} arrived)")
    return got


def test_subscribe_commit_restart_resume(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "orders", 3)
    produce(bs, "orders", [f"o{i}".encode() for i in range(300)])

    first = group_consumer(bs, "billing")
    first.subscribe(["orders"])
    got = poll_n(first, 120)
    assert len(got) == 120
    first.commit(asynchronous=False)
    committed = {tp.partition: max(tp.offset, 0)  # -1001: nothing consumed (or committed) there yet
                 for tp in first.committed([TopicPartition("orders", p) for p in range(3)], timeout=TIMEOUT)}
    first.close()
    assert sum(committed.values()) == 120

    # The broker restarts too: committed offsets come back from __consumer_offsets.
    broker_process.restart()
    second = group_consumer(bs, "billing")
    second.subscribe(["orders"])
    rest = poll_n(second, 180)
    assert len(rest) == 180
    for p, offset, _ in rest:
        assert offset >= committed[p], "resumed at the committed offset, not before"
    assert {v for _, _, v in got} | {v for _, _, v in rest} == {f"o{i}".encode() for i in range(300)}
    # Nothing more is to come (instead of waiting a second for records that must not arrive): it
    # read each partition once from the committed offset to its end.
    ends = [second.get_watermark_offsets(TopicPartition("orders", p), timeout=TIMEOUT)[1] for p in range(3)]
    assert sorted((p, offset) for p, offset, _ in rest) == [(p, o) for p in range(3) for o in range(committed[p], ends[p])]
    second.close()


def test_two_consumers_split_partitions_and_rebalance_when_one_leaves(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "jobs", 4)
    assignments: dict[str, list[int]] = {"a": [], "b": []}

    def tracker(name: str):  # type: ignore[no-untyped-def]
        def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            assignments[name] = sorted(tp.partition for tp in partitions)

        def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            assignments[name] = []

        return on_assign, on_revoke

    a = group_consumer(bs, "workers")
    b = group_consumer(bs, "workers")
    a.subscribe(["jobs"], on_assign=tracker("a")[0], on_revoke=tracker("a")[1])
    b.subscribe(["jobs"], on_assign=tracker("b")[0], on_revoke=tracker("b")[1])

    def split() -> bool:
        a.poll(0.1)
        b.poll(0.1)
        return len(assignments["a"]) == 2 and len(assignments["b"]) == 2

    wait_for(split, what="the two consumers to split four partitions")
    assert sorted(assignments["a"] + assignments["b"]) == [0, 1, 2, 3]

    admin = AdminClient({"bootstrap.servers": bs})
    described = admin.describe_consumer_groups(["workers"])["workers"].result(TIMEOUT)
    assert len(described.members) == 2 and described.state.name == "STABLE"

    b.close()  # LeaveGroup: the survivor takes everything

    def survivor_has_all() -> bool:
        a.poll(0.1)
        return assignments["a"] == [0, 1, 2, 3]

    wait_for(survivor_has_all, what="the rebalance after one consumer left")
    produce(bs, "jobs", [f"j{i}".encode() for i in range(40)])
    assert len(poll_n(a, 40)) == 40
    a.close()


CHILD_CONSUMER = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "session.timeout.ms": 6000,
              "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest"})
c.subscribe([sys.argv[3]], on_assign=lambda c, parts: print("assigned", len(parts), flush=True))
while True:
    c.poll(0.1)
"""


def test_a_consumer_that_dies_without_leaving_is_expired_after_its_session_timeout(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "beats", 2)
    owned: list[int] = []
    a = group_consumer(bs, "beats")
    a.subscribe(["beats"], on_assign=lambda c, parts: owned.__setitem__(slice(None), sorted(tp.partition for tp in parts)))
    wait_for(lambda: a.poll(0.1) is None and owned == [0, 1], what="a to own both partitions")
    child = subprocess.Popen([sys.executable, "-c", CHILD_CONSUMER, bs, "beats", "beats"], stdout=subprocess.PIPE, text=True)
    try:
        stdout = child.stdout
        assert stdout is not None

        def child_got_one() -> bool:
            a.poll(0.05)
            return _readable(stdout) and "assigned 1" in stdout.readline()

        wait_for(child_got_one, timeout=TIMEOUT, interval=0, what="the child consumer to join and get one partition")
        wait_for(lambda: a.poll(0.1) is None and len(owned) == 1, what="a to give up one partition")
        child.kill()  # no LeaveGroup: only the session timeout can notice
        killed = time.monotonic()
        wait_for(lambda: a.poll(0.1) is None and owned == [0, 1], timeout=TIMEOUT, what="a to take over after the session expired")
        assert time.monotonic() - killed >= 3, "taken over only once the 6 s session timed out"
    finally:
        child.kill()
        child.wait()
    a.close()


def _readable(stream) -> bool:  # type: ignore[no-untyped-def]
    import select

    return bool(select.select([stream], [], [], 0.05)[0])


def test_list_describe_delete_groups(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "ledger", 1)
    produce(bs, "ledger", [b"x"] * 5)
    c = group_consumer(bs, "auditors")
    c.subscribe(["ledger"])
    assert len(poll_n(c, 5)) == 5
    c.commit(asynchronous=False)
    admin = AdminClient({"bootstrap.servers": bs})
    listed = admin.list_consumer_groups().result(TIMEOUT)
    assert "auditors" in {g.group_id for g in listed.valid}
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("auditors")])
    result = offsets["auditors"].result(TIMEOUT)
    assert [(tp.topic, tp.partition, tp.offset) for tp in result.topic_partitions] == [("ledger", 0, 5)]
    deleting = admin.delete_consumer_groups(["auditors"])["auditors"]
    try:
        deleting.result(TIMEOUT)
        raise AssertionError("a group with members cannot be deleted")
    except Exception as exc:  # noqa: BLE001
        assert "NON_EMPTY_GROUP" in str(exc)
    c.close()
    admin.delete_consumer_groups(["auditors"])["auditors"].result(TIMEOUT)
    assert "auditors" not in {g.group_id for g in admin.list_consumer_groups().result(TIMEOUT).valid}
