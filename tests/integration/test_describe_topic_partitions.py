"""DescribeTopicPartitions (KIP-966), which Kafka's admin client prefers to Metadata for
``describeTopics`` (so ``kafka-topics --describe``, found by tests/reference/test_kafka_tools.py):
topics sorted by name from the cursor on, at most the partition limit per answer with a cursor
to the rest, unknown names answered with an error, ELR fields present and empty, as Kafka's
DescribeTopicPartitionsRequestHandler answers."""

from __future__ import annotations

from typing import Any

from kio.schema.describe_topic_partitions.v0.request import Cursor, DescribeTopicPartitionsRequest, TopicRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from tests.support.broker import BrokerProcess
from tests.support.kafka import make_topic
from tests.support.wire import WireClient


def describe(bs: str, names: list[str], limit: int, cursor: tuple[str, int] | None = None) -> Any:
    with WireClient(bs) as client:
        return client.request(DescribeTopicPartitionsRequest(
            topics=tuple(TopicRequest(name=n) for n in names), response_partition_limit=i32(limit),
            cursor=Cursor(topic_name=cursor[0], partition_index=i32(cursor[1])) if cursor else None))


def shape(response: Any) -> list[tuple[str, int, list[int]]]:
    return [(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in response.topics]


def test_pages_through_named_topics_in_name_order(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    for name, count in (("dtp-a", 3), ("dtp-b", 2), ("dtp-c", 1)):
        make_topic(bs, name, count)
    names = ["dtp-c", "dtp-a", "dtp-nosuch", "dtp-b"]

    first = describe(bs, names, 4)
    assert shape(first) == [("dtp-a", ErrorCode.none, [0, 1, 2]), ("dtp-b", ErrorCode.none, [0])]
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == ("dtp-b", 1)
    partition = first.topics[0].partitions[0]
    assert (partition.leader_id, list(partition.replica_nodes), list(partition.isr_nodes)) == (1, [1], [1])
    assert partition.eligible_leader_replicas == () and partition.last_known_elr == ()  # empty, not null: no "N/A"
    assert first.topics[0].topic_id.int != 0 and not first.topics[0].is_internal

    rest = describe(bs, names, 4, ("dtp-b", 1))
    assert shape(rest) == [("dtp-b", ErrorCode.none, [1]), ("dtp-c", ErrorCode.none, [0]),
                           ("dtp-nosuch", ErrorCode.unknown_topic_or_partition, [])]
    assert rest.next_cursor is None

    # The limit counts partitions: exhausted at a topic boundary, the cursor names the next topic.
    exact = describe(bs, names, 3)
    assert shape(exact) == [("dtp-a", ErrorCode.none, [0, 1, 2])]
    assert (exact.next_cursor.topic_name, exact.next_cursor.partition_index) == ("dtp-b", 0)


def test_every_topic_when_none_is_named_and_bad_cursors_refused(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "dtp-x", 2)
    make_topic(bs, "dtp-y", 1)
    every = describe(bs, [], 2000)
    assert shape(every) == [("dtp-x", ErrorCode.none, [0, 1]), ("dtp-y", ErrorCode.none, [0])]
    assert every.next_cursor is None
    assert shape(describe(bs, [], 2000, ("dtp-y", 0))) == [("dtp-y", ErrorCode.none, [0])]
    # Kafka refuses a cursor outside the named topics, or a negative partition: INVALID_REQUEST.
    assert shape(describe(bs, ["dtp-x"], 10, ("dtp-y", 0))) == [("dtp-x", ErrorCode.invalid_request, [])]
    assert shape(describe(bs, ["dtp-x"], 10, ("dtp-x", -1))) == [("dtp-x", ErrorCode.invalid_request, [])]
