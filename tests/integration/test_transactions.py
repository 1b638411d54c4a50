"""Transactions end to end through confluent-kafka (librdkafka) against the broker process:
read_committed vs read_uncommitted, the last stable offset, zombie fencing, offsets in
transactions."""

from __future__ import annotations

import random

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from tests.support.broker import SEGMENT_SHAPES, BrokerProcess
from tests.support.ctp import Worker
from tests.support.kafka import make_topic, produce, read_all, txn_producer
from tests.support.waiting import wait_for

TIMEOUT = 30

# Every scenario runs with default and with 1 KiB segments (transactions across rolls).
pytestmark = pytest.mark.parametrize("broker_process", SEGMENT_SHAPES, indirect=True)


def test_committed_reach_read_committed_aborted_do_not(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "ledger", 3)
    producer = txn_producer(bs)
    committed, aborted = [], []
    for t in range(20):
        producer.begin_transaction()
        values = [f"t{t}-r{i}".encode() for i in range(10)]
        for i, v in enumerate(values):
            producer.produce("ledger", v, partition=i % 3)
        if t % 2 == 0:
            producer.commit_transaction(TIMEOUT)
            committed += values
        else:
            producer.flush(TIMEOUT)
            producer.abort_transaction(TIMEOUT)
            aborted += values
    rc = read_all(bs, "ledger", [0, 1, 2], "read_committed")
    ru = read_all(bs, "ledger", [0, 1, 2], "read_uncommitted")
    assert sorted(rc) == sorted(committed), "read_committed delivers exactly the committed records"
    assert sorted(ru) == sorted(committed + aborted), "read_uncommitted sees both"


def test_an_open_transaction_holds_back_later_commits(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "shared", 1)
    a = txn_producer(bs, "producer-a")
    b = txn_producer(bs, "producer-b")
    a.begin_transaction()
    a.produce("shared", b"a-1", partition=0)
    a.flush(TIMEOUT)
    b.begin_transaction()
    b.produce("shared", b"b-1", partition=0)
    b.commit_transaction(TIMEOUT)
    assert read_all(bs, "shared", [0], "read_committed") == [], "b's commit sits behind a's open transaction"
    assert read_all(bs, "shared", [0], "read_uncommitted") == [b"a-1", b"b-1"]
    a.commit_transaction(TIMEOUT)
    assert read_all(bs, "shared", [0], "read_committed") == [b"a-1", b"b-1"]

    consumer = Consumer({"bootstrap.servers": bs, "group.id": "lso-probe", "isolation.level": "read_committed"})
    low, high = consumer.get_watermark_offsets(TopicPartition("shared", 0), timeout=TIMEOUT)
    consumer.close()
    assert high == 4, "2 records and 2 markers"


def test_the_holdback_ends_with_an_abort_too(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "shared2", 1)
    a = txn_producer(bs)
    a.begin_transaction()
    a.produce("shared2", b"a-1", partition=0)
    a.flush(TIMEOUT)
    produce(bs, "shared2", [b"plain"], partition=0)  # a non-transactional write after a's first record
    assert read_all(bs, "shared2", [0], "read_committed") == []
    a.abort_transaction(TIMEOUT)
    assert read_all(bs, "shared2", [0], "read_committed") == [b"plain"]


def test_zombie_is_fenced_and_its_records_never_become_visible(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "fenced", 1)
    zombie = txn_producer(bs, "worker-7")
    zombie.begin_transaction()
    zombie.produce("fenced", b"zombie", partition=0)
    zombie.flush(TIMEOUT)
    successor = txn_producer(bs, "worker-7")  # bumps the epoch, aborting the zombie's open transaction
    with pytest.raises(KafkaException) as err:
        zombie.commit_transaction(TIMEOUT)
    assert err.value.args[0].fatal() or "fenced" in str(err.value).lower()
    successor.begin_transaction()
    successor.produce("fenced", b"successor", partition=0)
    successor.commit_transaction(TIMEOUT)
    assert read_all(bs, "fenced", [0], "read_committed") == [b"successor"]


def test_offsets_sent_to_a_transaction_follow_its_outcome(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "src", 1)
    make_topic(bs, "dst", 1)
    produce(bs, "src", [f"in-{i}".encode() for i in range(10)], partition=0)
    group = "transformers"
    consumer = Consumer({"bootstrap.servers": bs, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("src", 0, OFFSET_BEGINNING)])
    msgs = []

    def read_ten() -> bool:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            msgs.append(msg)
        return len(msgs) >= 10

    wait_for(read_ten, interval=0, what="the ten input records")
    producer = txn_producer(bs)

    def committed_offset() -> int:
        return consumer.committed([TopicPartition("src", 0)], timeout=TIMEOUT)[0].offset

    # Aborted: the offsets never become the group's.
    producer.begin_transaction()
    producer.produce("dst", b"out-aborted", partition=0)
    producer.send_offsets_to_transaction([TopicPartition("src", 0, 5)], consumer.consumer_group_metadata(), TIMEOUT)
    producer.abort_transaction(TIMEOUT)
    assert committed_offset() < 0

    # Committed: visible once the transaction commits.
    producer.begin_transaction()
    producer.produce("dst", b"out-committed", partition=0)
    producer.send_offsets_to_transaction([TopicPartition("src", 0, 10)], consumer.consumer_group_metadata(), TIMEOUT)
    producer.commit_transaction(TIMEOUT)
    wait_for(lambda: committed_offset() == 10, what="the transactional offset commit")
    assert read_all(bs, "dst", [0], "read_committed") == [b"out-committed"]
    consumer.close()


def test_idempotent_producer_round_trip(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "idem", 2)
    acked = produce(bs, "idem", [f"i{i}".encode() for i in range(2000)], **{"enable.idempotence": True})
    assert len(acked) == 2000
    assert sorted(read_all(bs, "idem", [0, 1], "read_uncommitted")) == sorted(f"i{i}".encode() for i in range(2000))


def test_consume_transform_produce_is_exactly_once_across_sigkills(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "ctp-in", 3)
    make_topic(bs, "ctp-out", 3)
    inputs = [f"record-{i:05d}".encode() for i in range(3000)]
    produce(bs, "ctp-in", inputs)
    rng = random.Random(20261122)
    phases = ["begin", "produced", "offsets", "committed"]
    kills = 0
    for _ in range(5):
        worker = Worker(bs)
        phase, skip = rng.choice(phases), rng.randint(0, 4)  # kill at the (skip+1)-th line of that phase
        for line in worker.lines():
            if line.startswith(phase):
                if skip == 0:
                    worker.kill()
                    kills += 1
                    break
                skip -= 1
        else:
            worker.kill()
    assert kills == 5
    final = Worker(bs)
    try:
        expected = sorted(v.upper() for v in inputs)
        wait_for(lambda: len(read_all(bs, "ctp-out", [0, 1, 2], "read_committed")) >= len(inputs),
                 timeout=120, interval=0.5, what="the worker to finish the input")
    finally:
        final.kill()
    output = read_all(bs, "ctp-out", [0, 1, 2], "read_committed")
    assert sorted(output) == expected, f"{len(output)} outputs for {len(inputs)} inputs: every input exactly once"


def test_offset_fetch_require_stable_sees_pending_transactional_offsets(broker_process: BrokerProcess) -> None:
    """KIP-447: while a transaction holds offsets for a group, OffsetFetch with require_stable
    answers UNSTABLE_OFFSET_COMMIT for those partitions; without it, the last stable commit."""
    from kio.schema.errors import ErrorCode
    from kio.schema.offset_fetch.v7 import request as fetch7

    from tests.support.wire import WireClient

    bs = broker_process.bootstrap_servers
    make_topic(bs, "stable-src", 1)
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "stable-group", "enable.auto.commit": False})
    producer = txn_producer(bs)
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition("stable-src", 0, 7)], consumer.consumer_group_metadata(), TIMEOUT)

    def offset_fetch(require_stable: bool) -> tuple[ErrorCode, int]:
        with WireClient(bs) as client:
            response = client.request(fetch7.OffsetFetchRequest(
                group_id="stable-group", require_stable=require_stable,
                topics=(fetch7.OffsetFetchRequestTopic(name="stable-src", partition_indexes=(0,)),)))
        partition = response.topics[0].partitions[0]
        return partition.error_code, partition.committed_offset

    assert offset_fetch(True) == (ErrorCode.unstable_offset_commit, -1)
    assert offset_fetch(False) == (ErrorCode.none, -1)
    producer.commit_transaction(TIMEOUT)
    wait_for(lambda: offset_fetch(True) == (ErrorCode.none, 7), what="the committed offset to become stable")
    consumer.close()
