"""Transactions that outlive segment rolls and retention, through confluent-kafka against the
broker process (issue 7, defects 1 and 3).

None of the earlier tests had a transaction open across a roll; with 1 KiB segments a few
plain records are enough to put its ABORT marker several segments after its first record, and
retention can delete the segment where it began while it is still open.
"""

from __future__ import annotations

import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, IsolationLevel, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, OffsetSpec, ResourceType

from tests.support.broker import BrokerProcess, partition_dir, segment_sizes
from tests.support.kafka import TIMEOUT, make_topic, produce, read_all, txn_producer
from tests.support.waiting import wait_for

SMALL_SEGMENTS = {"segment.bytes": "1024"}
#: One record per batch, so that 40 records of about 100 bytes roll a 1 KiB segment several times.
ONE_PER_BATCH = {"batch.num.messages": 1}


def list_offsets(bootstrap: str, topic: str, spec: OffsetSpec, isolation: IsolationLevel) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets({TopicPartition(topic, 0): spec}, isolation_level=isolation, request_timeout=TIMEOUT)
    return futures[TopicPartition(topic, 0)].result(TIMEOUT).offset


def test_an_abort_segments_after_the_record_hides_it_from_read_committed(broker_process: BrokerProcess) -> None:
    """The issue's scenario: one transactional record at offset 0 left open, 40 plain records of
    about 100 bytes (several rolls), then the abort.  A read_committed consumer from offset 0
    must not receive the aborted record."""
    bs = broker_process.bootstrap_servers
    make_topic(bs, "rolled", 1, **SMALL_SEGMENTS)
    txn = txn_producer(bs)
    txn.begin_transaction()
    txn.produce("rolled", b"aborted", partition=0)
    txn.flush(TIMEOUT)
    plain = [f"plain-{i:02d}-".encode() + b"x" * 90 for i in range(40)]
    produce(bs, "rolled", plain, partition=0, **ONE_PER_BATCH)
    txn.abort_transaction(TIMEOUT)
    committed = read_all(bs, "rolled", [0], "read_committed")
    assert b"aborted" not in committed, "an aborted record reached a read_committed consumer"
    assert committed == plain
    assert read_all(bs, "rolled", [0], "read_uncommitted") == [b"aborted", *plain]


def test_retention_under_an_open_transaction_keeps_the_lso_at_the_log_start(make_broker_process) -> None:  # type: ignore[no-untyped-def]
    """Retention deletes the segments where an open transaction began: the last stable offset
    must stay at the log start, so that a read_committed consumer resetting to latest is not
    sent out of range; the abort then releases everything."""
    broker: BrokerProcess = make_broker_process(**{"log.retention.check.interval.ms": "100"})
    bs = broker.bootstrap_servers
    make_topic(bs, "retained", 1, **SMALL_SEGMENTS, **{"retention.bytes": "2048"})
    txn = txn_producer(bs)
    txn.begin_transaction()
    txn.produce("retained", b"open", partition=0)
    txn.flush(TIMEOUT)
    produce(bs, "retained", [f"plain-{i:02d}-".encode() + b"x" * 90 for i in range(40)], partition=0, **ONE_PER_BATCH)

    def log_start() -> int:
        return list_offsets(bs, "retained", OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED)

    def retention_done() -> bool:
        # Kafka's size rule: a segment goes while the rest still holds retention.bytes.  Once
        # the oldest segment can no longer go, the log start stays put (nothing more is written
        # until the abort below).
        sizes = segment_sizes(partition_dir(broker, "retained"))
        return bool(sizes) and sum(sizes) - sizes[0] < 2048

    wait_for(retention_done, what="retention to delete the first segments")
    start = log_start()
    assert start > 1
    latest_committed = list_offsets(bs, "retained", OffsetSpec.latest(), IsolationLevel.READ_COMMITTED)
    assert latest_committed == start, "the LSO is held at the log start, not below it"
    # The abort and the last record below must not make retention move the log start again.
    alter = ConfigResource(ResourceType.TOPIC, "retained",
                           incremental_configs=[ConfigEntry("retention.bytes", "-1", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bs})
    admin.incremental_alter_configs([alter])[alter].result(TIMEOUT)

    # A read_committed consumer starting at "latest" is in range: with auto.offset.reset=error
    # an out-of-range position would surface as an error instead of a silent reset loop.  It
    # waits there until the abort releases the records from the log start on.
    consumer = Consumer({"bootstrap.servers": bs, "group.id": f"late-{uuid.uuid4()}", "isolation.level": "read_committed",
                         "auto.offset.reset": "error", "enable.auto.commit": False})
    consumer.assign([TopicPartition("retained", 0, latest_committed)])
    errors: list[KafkaError] = []
    got: list[bytes] = []

    def poll() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is not None:
            errors.append(msg.error())
        elif msg is not None:
            got.append(msg.value())
        return bool(errors) or (bool(got) and got[-1] == b"after")

    txn.abort_transaction(TIMEOUT)
    produce(bs, "retained", [b"after"], partition=0)
    wait_for(poll, what="the records after the log start")
    consumer.close()
    assert not errors, errors
    assert got[0].startswith(b"plain-") and got[-1] == b"after" and b"open" not in got


def test_a_read_committed_fetch_from_inside_a_long_aborted_transaction(broker_process: BrokerProcess) -> None:
    """A consumer positioned in the middle of an aborted transaction that spans segments (its
    fetch starts in a segment with neither the transaction's first record nor its marker)."""
    bs = broker_process.bootstrap_servers
    make_topic(bs, "middle", 1, **SMALL_SEGMENTS)
    txn = txn_producer(bs)
    txn.begin_transaction()
    for i in range(30):
        txn.produce("middle", f"aborted-{i:02d}-".encode() + b"y" * 90, partition=0)
        txn.flush(TIMEOUT)  # one batch each, so they spread over several segments
    txn.abort_transaction(TIMEOUT)
    produce(bs, "middle", [b"committed"], partition=0)
    consumer = Consumer({"bootstrap.servers": bs, "group.id": f"mid-{uuid.uuid4()}", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    for start in (OFFSET_BEGINNING, 12, 25):
        consumer.assign([TopicPartition("middle", 0, start)])
        values: list[bytes] = []

        def read() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            return bool(values) and values[-1] == b"committed"

        wait_for(read, what=f"the committed record, reading from {start}")
        assert values == [b"committed"], f"from offset {start}: {values[:3]}..."
    consumer.close()
