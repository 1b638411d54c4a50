"""KIP-848 consumer groups (``group.protocol=consumer``) through librdkafka, against Onceflow and
Apache Kafka: the same scenario, the same observable outcome on both.

Three members join one by one and the third leaves: the coordinator moves partitions between
them, and at no moment do two members own one partition (a member gives a partition up before
another is handed it).  Describe and list show a group of type "consumer" with the uniform
assignor; commits carry the member epoch; a restarted member resumes from what was committed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.kafka import make_topic, produce
from tests.support.reference import Target
from tests.support.waiting import wait_for

TIMEOUT = 60


class Member:
    """A librdkafka consumer of the KIP-848 protocol that tracks what it owns (incremental assignments)."""

    def __init__(self, target: Target, group: str, topic: str, name: str) -> None:
        self.name = name
        self.consumer = Consumer({
            "bootstrap.servers": target.bootstrap_servers, "group.id": group, "client.id": name,
            "group.protocol": "consumer", "auto.offset.reset": "earliest", "enable.auto.commit": False,
        })
        self.owned: set[int] = set()
        self.records: list[tuple[int, int]] = []
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned |= {tp.partition for tp in partitions}

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned -= {tp.partition for tp in partitions}

    def poll(self) -> None:
        msg = self.consumer.poll(0.02)
        if msg is not None and msg.error() is None:
            self.records.append((msg.partition(), msg.offset()))


def poll_until(members: list[Member], condition: Callable[[], bool], what: str) -> None:
    """Poll every member in turn until ``condition``; after each poll, no partition has two owners."""

    def check() -> bool:
        for m in members:
            m.poll()
            owners: dict[int, str] = {}
            for other in members:
                for p in other.owned:
                    assert p not in owners, f"partition {p} owned by {owners[p]} and {other.name} at once"
                    owners[p] = other.name
        return condition()

    wait_for(check, timeout=TIMEOUT, interval=0, what=what)


def describe(target: Target, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": target.bootstrap_servers})
    return admin.describe_consumer_groups([group])[group].result(TIMEOUT)


def test_three_members_rebalance_without_ever_sharing_a_partition(target: Target, unique: Callable[[str], str]) -> None:
    topic, group = unique("kip848"), unique("g")
    make_topic(target.bootstrap_servers, topic, 6)
    for p in range(6):
        produce(target.bootstrap_servers, topic, [f"{p}-{i}".encode() for i in range(5)], partition=p)

    a = Member(target, group, topic, "a")
    poll_until([a], lambda: a.owned == set(range(6)) and len(a.records) == 30, "one member reading all 30 records")
    a.consumer.commit(offsets=[TopicPartition(topic, p, 5) for p in range(6)], asynchronous=False)
    b = Member(target, group, topic, "b")
    poll_until([a, b], lambda: len(a.owned) == 3 and len(b.owned) == 3, "two members with three partitions each")
    c = Member(target, group, topic, "c")
    members = [a, b, c]
    poll_until(members, lambda: [len(m.owned) for m in members] == [2, 2, 2], "three members with two partitions each")

    described = describe(target, group)
    assert (described.type, described.state, described.is_simple_consumer_group) == (
        ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE, False)
    assert described.partition_assignor == "uniform"
    by_client = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in described.members}
    assert by_client == {m.name: m.owned for m in members}
    admin = AdminClient({"bootstrap.servers": target.bootstrap_servers})
    listed = [(g.group_id, g.type, g.state) for g in admin.list_consumer_groups().result(TIMEOUT).valid if g.group_id == group]
    assert listed == [(group, ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE)]

    # A commit carries the member's epoch; then the third member leaves and the others take its partitions.
    late = min(c.owned)
    c.consumer.commit(offsets=[TopicPartition(topic, late, 5)], asynchronous=False)
    produce(target.bootstrap_servers, topic, [b"late"], partition=late)
    c.consumer.close()
    poll_until([a, b], lambda: sorted(a.owned | b.owned) == list(range(6)) and len(a.owned) == 3,
               "the two members left to take the third's partitions")
    a.consumer.close()
    b.consumer.close()
    empty = describe(target, group)
    assert (empty.type, empty.state, empty.members) == (ConsumerGroupType.CONSUMER, ConsumerGroupState.EMPTY, [])
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(TIMEOUT)
    assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(p, 5) for p in range(6)]

    # A new member resumes from the commits: nothing but the late record is read again.
    again = Member(target, group, topic, "again")
    poll_until([again], lambda: len(again.records) == 1, "the restarted member to read the one new record")
    assert again.records == [(late, 5)]
    again.consumer.close()
