"""Consumer groups (classic protocol) and KIP-447 through client libraries, against Onceflow and
Apache Kafka: the same scenario, the same observable outcome on both.

- confluent-kafka (librdkafka): a group's first member takes every partition, a second member
  splits them, commits are listed, a restarted consumer resumes from the committed offsets;
  DescribeGroups / ListGroups / ListConsumerGroupOffsets through its AdminClient and through
  kafka-python's KafkaAdminClient (states "Stable" / "Empty", protocol type, assignor, members).
- Static membership (group.instance.id, KIP-345): a member that restarts within its session
  timeout gets its partitions back without a rebalance of the others; a second consumer with the
  same instance id fences the first.
- send_offsets_to_transaction (KIP-447): a transactional producer commits the consumer's offsets
  with its group metadata; they appear only after commit, not after abort; group metadata of an
  older generation is refused.  With confluent-kafka and with aiokafka (which sends the group id
  only, the pre-KIP-447 form).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient

from tests.support.kafka import make_topic, produce, read_all, txn_producer
from tests.support.reference import Target
from tests.support.waiting import wait_for

TIMEOUT = 30
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: nothing committed


class Member:
    """A confluent-kafka group consumer that records what it is assigned."""

    def __init__(self, target: Target, group: str, topic: str, name: str, **extra: object) -> None:
        self.consumer = CKConsumer({
            "bootstrap.servers": target.bootstrap_servers, "group.id": group, "client.id": name,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, **extra,
        })
        self.owned: list[int] = []
        self.assigns = 0
        self.revokes = 0
        self.records: list[tuple[int, int, bytes]] = []
        self.errors: list[KafkaError] = []
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer: CKConsumer, partitions: list[TopicPartition]) -> None:
        self.owned = sorted(tp.partition for tp in partitions)
        self.assigns += 1

    def _revoked(self, consumer: CKConsumer, partitions: list[TopicPartition]) -> None:
        self.owned = []
        self.revokes += 1

    def poll(self) -> None:
        msg = self.consumer.poll(0.05)
        if msg is None:
            return
        if msg.error() is not None:
            self.errors.append(msg.error())
            return
        self.records.append((msg.partition(), msg.offset(), msg.value()))

    def close(self) -> None:
        self.consumer.close()


def poll_until(members: list[Member], condition: Callable[[], bool], what: str) -> None:
    def check() -> bool:
        for m in members:
            m.poll()
        return condition()

    wait_for(check, timeout=TIMEOUT, interval=0, what=what)


def describe(target: Target, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": target.bootstrap_servers})
    return admin.describe_consumer_groups([group])[group].result(TIMEOUT)


def kp_describe(target: Target, group: str) -> dict[str, Any]:
    admin = KafkaAdminClient(bootstrap_servers=target.bootstrap_servers)
    try:
        return admin.describe_groups([group])[group]  # type: ignore[no-any-return]
    finally:
        admin.close()


def listed(target: Target, group: str) -> list[tuple[str, bool, ConsumerGroupState, ConsumerGroupType]]:
    admin = AdminClient({"bootstrap.servers": target.bootstrap_servers})
    result = admin.list_consumer_groups().result(TIMEOUT)
    assert result.errors == []
    return [(g.group_id, g.is_simple_consumer_group, g.state, g.type) for g in result.valid if g.group_id == group]


def committed_offsets(target: Target, group: str) -> list[tuple[str, int, int]]:
    admin = AdminClient({"bootstrap.servers": target.bootstrap_servers})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(TIMEOUT)
    return sorted((tp.topic, tp.partition, tp.offset) for tp in result.topic_partitions)


def test_members_split_partitions_commit_and_a_restart_resumes(target: Target, unique: Callable[[str], str]) -> None:
    topic, group = unique("split"), unique("g")
    make_topic(target.bootstrap_servers, topic, 4)
    produce(target.bootstrap_servers, topic, [f"a{i}".encode() for i in range(8)], partition=0)
    for p in (1, 2, 3):
        produce(target.bootstrap_servers, topic, [f"{p}-{i}".encode() for i in range(4)], partition=p)

    first = Member(target, group, topic, "first")
    poll_until([first], lambda: first.owned == [0, 1, 2, 3] and len(first.records) == 20, "one member reading all 20 records")
    only = describe(target, group)
    assert (only.group_id, only.is_simple_consumer_group, only.state, only.type, only.partition_assignor) == (
        group, False, ConsumerGroupState.STABLE, ConsumerGroupType.CLASSIC, "range")
    assert [(m.client_id, m.group_instance_id, sorted(tp.partition for tp in m.assignment.topic_partitions))
            for m in only.members] == [("first", None, [0, 1, 2, 3])]
    assert only.members[0].member_id.startswith("first-") and only.members[0].host == "/127.0.0.1"

    second = Member(target, group, topic, "second")
    poll_until([first, second], lambda: len(first.owned) == 2 and len(second.owned) == 2, "the two members to split four partitions")
    assert sorted(first.owned + second.owned) == [0, 1, 2, 3]
    # range over two members: the one whose member id sorts first gets 0 and 1.
    both = describe(target, group)
    assert both.state == ConsumerGroupState.STABLE and len(both.members) == 2
    by_client = {m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions) for m in both.members}
    assert by_client == {"first": first.owned, "second": second.owned}
    lower = min(both.members, key=lambda m: m.member_id)
    assert by_client[lower.client_id] == [0, 1]

    raw = kp_describe(target, group)
    assert (raw["error"], raw["group_state"], raw["protocol_type"], raw["protocol_data"]) == (None, "Stable", "consumer", "range")
    assert sorted((m["client_id"], m["client_host"], m["group_instance_id"], m["member_metadata"]["topics"])
                  for m in raw["members"]) == [("first", "/127.0.0.1", None, [topic]), ("second", "/127.0.0.1", None, [topic])]
    assert sorted(p for m in raw["members"] for t in m["member_assignment"]["assigned_partitions"] for p in t["partitions"]) == [0, 1, 2, 3]
    assert listed(target, group) == [(group, False, ConsumerGroupState.STABLE, ConsumerGroupType.CLASSIC)]

    # first read everything before the split; it commits what it read of partition 0 and 1 only.
    first.consumer.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 3, 2)], asynchronous=False)
    assert committed_offsets(target, group) == [(topic, 0, 5), (topic, 3, 2)]
    second.close()
    first.close()

    empty = describe(target, group)
    assert (empty.state, empty.members, empty.partition_assignor, empty.type) == (
        ConsumerGroupState.EMPTY, [], "", ConsumerGroupType.CLASSIC)
    raw = kp_describe(target, group)
    assert (raw["error"], raw["group_state"], raw["protocol_type"], raw["protocol_data"], raw["members"]) == (
        None, "Empty", "consumer", "", [])
    assert listed(target, group) == [(group, False, ConsumerGroupState.EMPTY, ConsumerGroupType.CLASSIC)]

    # A restart: partition 0 resumes at 5, 3 at 2, and the partitions without a commit from the start.
    again = Member(target, group, topic, "again")
    poll_until([again], lambda: len(again.records) == 3 + 4 + 4 + 2, "the restarted member to read the rest")
    assert sorted((p, o) for p, o, _ in again.records) == (
        [(0, o) for o in range(5, 8)] + [(1, o) for o in range(4)] + [(2, o) for o in range(4)] + [(3, 2), (3, 3)])
    again.close()


def test_kafka_python_admin_lists_groups_and_their_offsets(target: Target, unique: Callable[[str], str]) -> None:
    topic, group = unique("kp"), unique("g")
    make_topic(target.bootstrap_servers, topic, 2)
    member = Member(target, group, topic, "kp")
    poll_until([member], lambda: member.owned == [0, 1], "the member's assignment")
    member.consumer.commit(offsets=[TopicPartition(topic, 1, 0, metadata="m1")], asynchronous=False)
    admin = KafkaAdminClient(bootstrap_servers=target.bootstrap_servers)
    try:
        # ListGroups v5 (KIP-848): every group here is a classic group.
        assert [g for g in admin.list_groups() if g["group_id"] == group] == [
            {"group_id": group, "protocol_type": "consumer", "group_state": "Stable", "group_type": "classic"}]
        assert group in [g["group_id"] for g in admin.list_groups(states_filter=["Stable"])]
        assert group not in [g["group_id"] for g in admin.list_groups(states_filter=["Empty"])]
        assert group in [g["group_id"] for g in admin.list_groups(types_filter=["classic"])]
        assert group not in [g["group_id"] for g in admin.list_groups(types_filter=["consumer"])]
        # librdkafka stores commit metadata with a NUL terminator; both brokers hand it back as stored.
        offsets = admin.list_group_offsets(group)[group]
        assert {(tp.topic, tp.partition): (om.offset, om.metadata, om.leader_epoch) for tp, om in offsets.items()} == {
            (topic, 1): (0, "m1\x00", -1)}
        described = admin.describe_groups([group], include_authorized_operations=True)[group]
        # No authorizer: every operation a group supports.
        assert sorted(described["authorized_operations"]) == ["ALTER_CONFIGS", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ"]
        member.close()
        assert [g["group_state"] for g in admin.list_groups() if g["group_id"] == group] == ["Empty"]
        # An Empty group can be deleted; then it is gone (DescribeGroups v6: GROUP_ID_NOT_FOUND).
        assert admin.delete_groups([group]) == {group: "OK"}
        assert [g for g in admin.list_groups() if g["group_id"] == group] == []
        gone = admin.describe_groups([group])[group]
        assert (gone["error"], gone["group_state"], gone["protocol_type"], gone["members"]) == (
            f"[Error 69] GroupIdNotFoundError: Group {group} not found.", "Dead", "", [])
    finally:
        admin.close()


def test_a_static_member_restarting_within_its_session_timeout_causes_no_rebalance(
        target: Target, unique: Callable[[str], str]) -> None:
    topic, group = unique("static"), unique("g")
    make_topic(target.bootstrap_servers, topic, 2)
    a = Member(target, group, topic, "a", **{"group.instance.id": "instance-a"})
    b = Member(target, group, topic, "b", **{"group.instance.id": "instance-b"})
    poll_until([a, b], lambda: len(a.owned) == 1 and len(b.owned) == 1, "the two static members to split two partitions")
    a_partitions, b_assigns, b_revokes = a.owned, b.assigns, b.revokes
    before = describe(target, group)
    assert sorted((m.client_id, m.group_instance_id) for m in before.members) == [("a", "instance-a"), ("b", "instance-b")]

    a.close()  # a static member leaves no LeaveGroup behind (KIP-345): the group waits for it
    still = describe(target, group)
    assert still.state == ConsumerGroupState.STABLE
    assert sorted((m.client_id, m.group_instance_id) for m in still.members) == [("a", "instance-a"), ("b", "instance-b")]

    a2 = Member(target, group, topic, "a2", **{"group.instance.id": "instance-a"})
    poll_until([a2, b], lambda: a2.owned == a_partitions, "the restarted static member to get its partition back")
    after = describe(target, group)
    assert after.state == ConsumerGroupState.STABLE
    # The member keeps its place (and its client id: the group replaced the member id only).
    assert sorted((m.client_id, m.group_instance_id) for m in after.members) == [("a", "instance-a"), ("b", "instance-b")]
    assert {m.member_id for m in after.members}.isdisjoint(m.member_id for m in before.members if m.client_id == "a")
    assert (b.assigns, b.revokes, b.errors) == (b_assigns, b_revokes, []), "b saw no rebalance"

    # A second consumer with the same instance id takes its place; the first is fenced.
    a3 = Member(target, group, topic, "a3", **{"group.instance.id": "instance-a"})
    poll_until([a2, a3, b], lambda: any(e.code() == KafkaError._FATAL for e in a2.errors) and a3.owned == a_partitions,
               "the first holder of instance-a to be fenced")
    # librdkafka turns the broker's FENCED_INSTANCE_ID into a fatal consumer error.
    assert [e.code() for e in a2.errors] == [KafkaError._FATAL]
    assert "Static consumer fenced by other consumer with same group.instance.id" in a2.errors[0].str()
    assert (a3.errors, b.assigns, b.revokes, b.errors) == ([], b_assigns, b_revokes, [])
    last = describe(target, group)
    assert last.state == ConsumerGroupState.STABLE
    assert sorted((m.client_id, m.group_instance_id) for m in last.members) == [("a", "instance-a"), ("b", "instance-b")]
    for m in (a3, b):
        m.close()


def test_send_offsets_to_transaction_commits_only_with_the_transaction(
        target: Target, unique: Callable[[str], str]) -> None:
    source, sink, group = unique("in"), unique("out"), unique("g")
    make_topic(target.bootstrap_servers, source, 1)
    make_topic(target.bootstrap_servers, sink, 1)
    produce(target.bootstrap_servers, source, [f"r{i}".encode() for i in range(10)], partition=0)
    consumer = Member(target, group, source, "eos", **{"isolation.level": "read_committed"})
    poll_until([consumer], lambda: len(consumer.records) == 10, "the ten input records")
    producer = txn_producer(target.bootstrap_servers, unique("txn"))

    def committed() -> list[int]:
        # librdkafka asks with require_stable: it waits out a transaction in flight.
        return [tp.offset for tp in consumer.consumer.committed([TopicPartition(source, 0)], timeout=TIMEOUT)]

    producer.begin_transaction()
    producer.produce(sink, b"aborted", partition=0)
    producer.send_offsets_to_transaction([TopicPartition(source, 0, 4)], consumer.consumer.consumer_group_metadata(), TIMEOUT)
    assert committed_offsets(target, group) == [], "not visible before the transaction ends"
    producer.abort_transaction(TIMEOUT)
    assert committed() == [NO_OFFSET], "aborted"
    assert committed_offsets(target, group) == []

    producer.begin_transaction()
    producer.produce(sink, b"committed", partition=0)
    producer.send_offsets_to_transaction([TopicPartition(source, 0, 10)], consumer.consumer.consumer_group_metadata(), TIMEOUT)
    producer.commit_transaction(TIMEOUT)
    assert committed() == [10]
    assert committed_offsets(target, group) == [(source, 0, 10)]
    assert read_all(target.bootstrap_servers, sink, [0], "read_committed") == [b"committed"]
    consumer.close()


def test_send_offsets_with_group_metadata_of_an_older_generation_is_refused(
        target: Target, unique: Callable[[str], str]) -> None:
    source, group = unique("in"), unique("g")
    make_topic(target.bootstrap_servers, source, 2)
    a = Member(target, group, source, "a")
    poll_until([a], lambda: a.owned == [0, 1], "a to own both partitions")
    stale = a.consumer.consumer_group_metadata()
    b = Member(target, group, source, "b")
    poll_until([a, b], lambda: len(a.owned) == 1 and len(b.owned) == 1, "the rebalance to a new generation")
    producer = txn_producer(target.bootstrap_servers, unique("txn"))
    producer.begin_transaction()
    with pytest.raises(KafkaException) as refused:
        producer.send_offsets_to_transaction([TopicPartition(source, a.owned[0], 0)], stale, TIMEOUT)
    error = refused.value.args[0]
    assert (error.code(), error.txn_requires_abort(), error.fatal()) == (KafkaError.ILLEGAL_GENERATION, True, False)
    producer.abort_transaction(TIMEOUT)
    # The current generation's metadata commits.
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition(source, a.owned[0], 0)], a.consumer.consumer_group_metadata(), TIMEOUT)
    producer.commit_transaction(TIMEOUT)
    assert committed_offsets(target, group) == [(source, a.owned[0], 0)]
    for m in (a, b):
        m.close()


def test_aiokafka_group_commit_and_transactional_offsets(target: Target, unique: Callable[[str], str]) -> None:
    source, group, txn_group = unique("in"), unique("g"), unique("txg")
    make_topic(target.bootstrap_servers, source, 1)
    produce(target.bootstrap_servers, source, [f"r{i}".encode() for i in range(6)], partition=0)
    tp = AioTopicPartition(source, 0)

    async def scenario() -> tuple[list[int], int | None, list[int], int | None, int | None]:
        consumer = AIOKafkaConsumer(source, bootstrap_servers=target.bootstrap_servers, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                                    heartbeat_interval_ms=500)
        await consumer.start()
        try:
            first = await consumer.getmany(timeout_ms=TIMEOUT * 1000, max_records=4)
            offsets = [r.offset for r in first.get(tp, [])]
            while len(offsets) < 4:
                more = await consumer.getmany(timeout_ms=TIMEOUT * 1000, max_records=4 - len(offsets))
                offsets += [r.offset for r in more.get(tp, [])]
            await consumer.commit({tp: 4})
            after_commit = await consumer.committed(tp)
        finally:
            await consumer.stop()
        # Restart: resumes at 4.
        consumer = AIOKafkaConsumer(source, bootstrap_servers=target.bootstrap_servers, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000)
        await consumer.start()
        try:
            rest: list[int] = []
            while len(rest) < 2:
                more = await consumer.getmany(timeout_ms=TIMEOUT * 1000)
                rest += [r.offset for r in more.get(tp, [])]
        finally:
            await consumer.stop()
        # aiokafka's send_offsets_to_transaction carries the group id only (no generation).
        producer = AIOKafkaProducer(bootstrap_servers=target.bootstrap_servers, transactional_id=unique("txn"))
        await producer.start()
        checker = AIOKafkaConsumer(bootstrap_servers=target.bootstrap_servers, group_id=txn_group, enable_auto_commit=False)
        await checker.start()
        try:
            async with producer.transaction():
                await producer.send_offsets_to_transaction({tp: 2}, txn_group)
            await producer.begin_transaction()
            await producer.send_offsets_to_transaction({tp: 3}, txn_group)
            before_end = await checker.committed(tp)
            await producer.abort_transaction()
        finally:
            await producer.stop()
            await checker.stop()
        return offsets, after_commit, rest, before_end

    offsets, after_commit, rest, before_end = asyncio.run(scenario())
    assert (offsets, after_commit, rest) == ([0, 1, 2, 3], 4, [4, 5])
    # The committed transaction's offset 2 is there (the markers are written after EndTxn returns), the
    # aborted one's 3 never.
    assert before_end in (None, 2)
    wait_for(lambda: committed_offsets(target, txn_group) == [(source, 0, 2)], what="the transactional offset commit")
