"""A KIP-848 group (librdkafka, ``group.protocol=consumer``) across a SIGKILL of the broker
process: the group is read back from ``__consumer_offsets`` (its epochs, members and
assignments, 1 KiB segments so the records span several), its members carry on with the
partitions they had, and what they committed before the crash is where a newcomer starts."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from onceflow.tools.groups import describe_group
from tests.support.broker import SMALL_SEGMENTS, BrokerProcess
from tests.support.kafka import make_topic, produce
from tests.support.waiting import wait_for

TIMEOUT = 60


def _member(bs: str, group: str, topic: str, name: str, owned: dict[str, set[int]]) -> Consumer:
    owned[name] = set()
    consumer = Consumer({"bootstrap.servers": bs, "group.id": group, "client.id": name, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})

    def assigned(_: Consumer, partitions: list[TopicPartition]) -> None:
        owned[name] |= {tp.partition for tp in partitions}

    def revoked(_: Consumer, partitions: list[TopicPartition]) -> None:
        owned[name] -= {tp.partition for tp in partitions}

    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
    return consumer


def _poll(consumers: dict[str, Consumer], seen: dict[str, list[tuple[int, int]]]) -> Callable[[], None]:
    def once() -> None:
        for name, c in consumers.items():
            msg = c.poll(0.02)
            if msg is not None and msg.error() is None:
                seen.setdefault(name, []).append((msg.partition(), msg.offset()))

    return once


def test_a_consumer_group_survives_a_broker_kill(make_broker_process: Callable[..., BrokerProcess]) -> None:
    broker = make_broker_process(**SMALL_SEGMENTS, **{"group.consumer.min.heartbeat.interval.ms": "500",
                                                      "group.consumer.heartbeat.interval.ms": "500"})
    bs = broker.bootstrap_servers
    topic, group = "orders", "kip848-restart"
    make_topic(bs, topic, 4)
    owned: dict[str, set[int]] = {}
    seen: dict[str, list[tuple[int, int]]] = {}
    consumers = {name: _member(bs, group, topic, name, owned) for name in ("a", "b")}
    poll = _poll(consumers, seen)
    wait_for(lambda: (poll(), [len(p) for p in owned.values()] == [2, 2])[1], timeout=TIMEOUT, interval=0,
             what="two members with two partitions each")
    for p in range(4):
        produce(bs, topic, [f"before-{p}".encode()], partition=p)
    wait_for(lambda: (poll(), sum(len(s) for s in seen.values()) == 4)[1], timeout=TIMEOUT, interval=0,
             what="the four records before the kill")
    for name, c in consumers.items():
        c.commit(offsets=[TopicPartition(topic, p, 1) for p in owned[name]], asynchronous=False)
    admin = AdminClient({"bootstrap.servers": bs})
    before = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
    assignment_before = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in before.members}

    broker.kill()
    broker.start()
    admin = AdminClient({"bootstrap.servers": bs})  # a new client: the old one's connection died with the broker
    after = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
    assert {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in after.members} == \
        assignment_before, "the group is read back as it was"
    tool = describe_group(bs, group)  # onceflow groups describe
    assert (tool["type"], tool["state"]) == ("consumer", "Stable")
    assert {m["client_id"]: len(m["assignment"]) for m in tool["members"]} == {"a": 2, "b": 2}
    assert sorted((o["partition"], o["committed_offset"], o["lag"]) for o in tool["offsets"]) == [
        (p, 1, 0) for p in range(4)]

    # The members carry on with their partitions: new records reach their owners, once each.
    for p in range(4):
        produce(bs, topic, [f"after-{p}".encode()], partition=p)
    wait_for(lambda: (poll(), sum(len(s) for s in seen.values()) == 8)[1], timeout=TIMEOUT, interval=0,
             what="the four records after the restart")
    for name, records in seen.items():
        assert {p for p, _ in records} <= owned[name] | assignment_before[name]
    assert sorted(o for records in seen.values() for _, o in records) == [0, 0, 0, 0, 1, 1, 1, 1]
    for c in consumers.values():
        c.close()
    # A newcomer starts at the offsets committed before the kill.
    late: dict[str, set[int]] = {}
    newcomer = _member(bs, group, topic, "c", late)
    got: dict[str, list[tuple[int, int]]] = {}
    poll_new = _poll({"c": newcomer}, got)
    wait_for(lambda: (poll_new(), len(got.get("c", [])) == 4)[1], timeout=TIMEOUT, interval=0,
             what="the newcomer to read the four records after the commits")
    assert sorted(got["c"]) == [(p, 1) for p in range(4)]
    newcomer.close()
