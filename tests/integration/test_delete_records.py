"""DeleteRecords (KIP-107) through confluent-kafka's and kafka-python's admin clients against the
broker process: the answers, what consumers (read_committed and read_uncommitted) read from
"earliest" afterwards, OFFSET_OUT_OF_RANGE for a fetch below the new log start, an open
transaction that began below it, and the log start kept across SIGKILL and across a crash between
the log start's write and the deletion of the segments below it."""

from __future__ import annotations

import datetime
import uuid

import pytest
from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka import KafkaAdminClient
from kafka.structs import TopicPartition as KPTopicPartition
from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from kio.schema.fetch.v12 import request as fetch12
from kio.static.primitive import i16, i32, i32Timedelta, i64

from onceflow.log.partition_log import LOG_START_CHECKPOINT
from onceflow.protocol.errors import ErrorCode
from tests.support.broker import BrokerProcess, partition_dir
from tests.support.kafka import TIMEOUT, make_topic, produce, read_all, txn_producer
from tests.support.waiting import wait_for
from tests.support.wire import WireClient

SMALL_SEGMENTS = {"segment.bytes": "1024"}
#: One record per batch: records of about 100 bytes roll a 1 KiB segment every few records.
ONE_PER_BATCH = {"batch.num.messages": 1}


def plain(i: int) -> bytes:
    return f"plain-{i:02d}-".encode() + b"x" * 90


def admin(bs: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bs})


def list_offset(bs: str, topic: str, partition: int, spec: OffsetSpec,
                isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> int:
    tp = TopicPartition(topic, partition)
    client = admin(bs)  # kept until the answer: a client collected meanwhile never completes its futures
    return client.list_offsets({tp: spec}, isolation_level=isolation, request_timeout=TIMEOUT)[tp].result(TIMEOUT).offset


def delete_records(bs: str, topic: str, partition: int, offset: int) -> int:
    client = admin(bs)
    futures = client.delete_records([TopicPartition(topic, partition, offset)], request_timeout=TIMEOUT)
    (future,) = futures.values()
    return future.result(TIMEOUT).low_watermark  # type: ignore[no-any-return]


def refused(bs: str, topic: str, partition: int, offset: int) -> int:
    """The error code of a DeleteRecords confluent-kafka's admin client reports as failed."""
    with pytest.raises(KafkaException) as failed:
        delete_records(bs, topic, partition, offset)
    return failed.value.args[0].code()  # type: ignore[no-any-return]


def fetch_error(bs: str, topic: str, offset: int) -> tuple[ErrorCode, int]:
    """(error, log start offset) of a raw Fetch v12 at ``offset`` of partition 0."""
    body = fetch12.FetchRequest(
        replica_id=i32(-1), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=0)), min_bytes=i32(1),
        max_bytes=i32(1 << 20), isolation_level=i16(0), session_id=i32(0), session_epoch=i32(-1),
        topics=(fetch12.FetchTopic(topic=topic, partitions=(fetch12.FetchPartition(
            partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(offset), last_fetched_epoch=i32(-1),
            log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),)),),
        forgotten_topics_data=(), rack_id="")
    with WireClient(bs) as client:
        p = client.request(body).responses[0].partitions[0]
    return p.error_code, p.log_start_offset


def consume_from(bs: str, topic: str, offset: int, reset: str, want: int) -> tuple[list[tuple[int, bytes]], list[int]]:
    """A consumer assigned at ``offset`` with ``auto.offset.reset=reset``: the (offset, value) of the
    first ``want`` records and the codes of the errors it reports (stops at the first error)."""
    consumer = Consumer({"bootstrap.servers": bs, "group.id": f"g-{uuid.uuid4()}", "enable.auto.commit": False,
                         "auto.offset.reset": reset, "isolation.level": "read_uncommitted"})
    consumer.assign([TopicPartition(topic, 0, offset)])
    got: list[tuple[int, bytes]] = []
    errors: list[int] = []

    def poll() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is not None:
            errors.append(msg.error().code())
        elif msg is not None:
            got.append((msg.offset(), msg.value()))
        return bool(errors) or len(got) >= want

    wait_for(poll, timeout=TIMEOUT, interval=0, what=f"a consumer from {offset} (reset {reset})")
    consumer.close()
    return got, errors


def log_bases(broker: BrokerProcess, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in partition_dir(broker, topic).glob("*.log"))


def test_delete_records_moves_the_log_start_inside_a_segment_and_survives_sigkill(broker_process: BrokerProcess) -> None:
    """Partition 0: an aborted transaction (wholly below the cut), 20 plain records, the first
    record of a transaction left open (below the cut), 10 plain records; the cut is inside a
    segment, after the open transaction's start."""
    bs = broker_process.bootstrap_servers
    topic = "trim"
    make_topic(bs, topic, 2, **SMALL_SEGMENTS)
    aborted = txn_producer(bs)
    aborted.begin_transaction()
    aborted.produce(topic, b"aborted-a", partition=0)
    aborted.abort_transaction(TIMEOUT)
    acked = produce(bs, topic, [plain(i) for i in range(20)], partition=0, **ONE_PER_BATCH)
    open_txn = txn_producer(bs)
    open_txn.begin_transaction()
    open_txn.produce(topic, b"open-d-1", partition=0)
    open_txn.flush(TIMEOUT)
    acked += produce(bs, topic, [plain(i) for i in range(20, 30)], partition=0, **ONE_PER_BATCH)
    offset_of = {value: offset for _, offset, value in acked}
    txn_start = offset_of[plain(19)] + 1
    cut = offset_of[plain(25)]
    high_watermark = offset_of[plain(29)] + 1
    assert txn_start < cut
    assert list_offset(bs, topic, 0, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED) == txn_start
    bases = log_bases(broker_process, topic)
    assert len(bases) >= 4 and cut not in bases, f"the cut must fall inside a segment: {bases}"

    assert delete_records(bs, topic, 0, cut) == cut
    bases_after = log_bases(broker_process, topic)
    assert bases_after[0] < cut and bases_after == [b for b in bases if b >= max(x for x in bases if x <= cut)], \
        "the segments wholly below the cut are deleted, the one holding it stays"
    assert (partition_dir(broker_process, topic) / LOG_START_CHECKPOINT).read_text() == f"0\n1\n{topic} 0 {cut}\n"
    # kafka-python's admin client, on partition 1 (5 records), and a second call on partition 0
    # below the log start (nothing moves; the answer is the log start).
    produce(bs, topic, [b"p1-%d" % i for i in range(5)], partition=1)
    kp = KafkaAdminClient(bootstrap_servers=bs)
    try:
        assert kp.delete_records({KPTopicPartition(topic, 1): 3, KPTopicPartition(topic, 0): 2}) == {
            KPTopicPartition(topic, 1): {"partition_index": 1, "low_watermark": 3, "error_code": 0},
            KPTopicPartition(topic, 0): {"partition_index": 0, "low_watermark": cut, "error_code": 0}}
    finally:
        kp.close()

    def check_after_the_cut() -> None:
        assert list_offset(bs, topic, 0, OffsetSpec.earliest()) == cut
        assert list_offset(bs, topic, 0, OffsetSpec.latest()) == high_watermark
        # The open transaction began below the log start: the LSO is held at the log start.
        assert list_offset(bs, topic, 0, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED) == cut
        assert fetch_error(bs, topic, cut - 1)[0] is ErrorCode.offset_out_of_range
        assert fetch_error(bs, topic, 0)[0] is ErrorCode.offset_out_of_range
        # A consumer positioned below: an error with auto.offset.reset=error, the new start with earliest.
        got, errors = consume_from(bs, topic, 3, "error", 1)
        assert got == [] and errors == [KafkaError._AUTO_OFFSET_RESET]
        got, errors = consume_from(bs, topic, 3, "earliest", 5)
        assert not errors and got == [(offset_of[plain(i)], plain(i)) for i in range(25, 30)]
        assert read_all(bs, topic, [0], "read_uncommitted") == [plain(i) for i in range(25, 30)]
        assert read_all(bs, topic, [0], "read_committed") == [], "nothing is stable past the open transaction"
        assert list_offset(bs, topic, 1, OffsetSpec.earliest()) == 3

    check_after_the_cut()
    broker_process.kill()
    broker_process.start()
    check_after_the_cut()

    # The open transaction goes on after the restart, across the cut, and is aborted: a
    # read_committed consumer from the log start drops its record above the cut.
    open_txn.produce(topic, b"open-d-2", partition=0)
    assert open_txn.flush(TIMEOUT) == 0  # written before the abort (which would purge it unsent)
    open_txn.abort_transaction(TIMEOUT)
    produce(bs, topic, [b"after"], partition=0)
    assert read_all(bs, topic, [0], "read_uncommitted") == [*(plain(i) for i in range(25, 30)), b"open-d-2", b"after"]
    assert read_all(bs, topic, [0], "read_committed") == [*(plain(i) for i in range(25, 30)), b"after"]
    # -1 is the high watermark.
    end = list_offset(bs, topic, 0, OffsetSpec.latest())
    assert delete_records(bs, topic, 0, -1) == end
    assert read_all(bs, topic, [0], "read_uncommitted") == []


def test_delete_records_errors(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "errs", 1)
    make_topic(bs, "compacted", 1, **{"cleanup.policy": "compact"})
    produce(bs, "errs", [b"a", b"b", b"c"], partition=0)
    assert refused(bs, "errs", 0, 4) == KafkaError.OFFSET_OUT_OF_RANGE
    assert refused(bs, "compacted", 0, 0) == KafkaError.POLICY_VIOLATION
    # librdkafka refuses a partition missing from its metadata itself (_NOENT), sending nothing;
    # the broker's answer to one, on the wire:
    assert refused(bs, "errs", 3, 1) == refused(bs, "missing", 0, 1) == KafkaError._NOENT
    body = DeleteRecordsRequest(topics=(
        DeleteRecordsTopic(name="errs", partitions=(DeleteRecordsPartition(partition_index=i32(3), offset=i64(1)),)),
        DeleteRecordsTopic(name="missing", partitions=(DeleteRecordsPartition(partition_index=i32(0), offset=i64(1)),))),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=TIMEOUT)))
    with WireClient(bs) as client:
        answer = client.request(body)
    assert [(t.name, p.partition_index, p.low_watermark, p.error_code) for t in answer.topics for p in t.partitions] == [
        ("errs", 3, -1, ErrorCode.unknown_topic_or_partition), ("missing", 0, -1, ErrorCode.unknown_topic_or_partition)]
    assert list_offset(bs, "errs", 0, OffsetSpec.earliest()) == 0, "nothing was deleted"
    assert delete_records(bs, "errs", 0, 3) == 3


def test_a_crash_after_the_log_start_is_written_keeps_it_and_retention_deletes_the_segments(
        make_broker_process) -> None:  # type: ignore[no-untyped-def]
    """The ``delete-records`` fault point: the broker dies once the new log start is durable,
    before any segment below it is deleted.  After the restart the log starts there all the same,
    and the next retention check deletes those segments."""
    broker: BrokerProcess = make_broker_process(**{"log.retention.check.interval.ms": "200"})
    bs = broker.bootstrap_servers
    make_topic(bs, "crashy", 1, **SMALL_SEGMENTS)
    acked = produce(bs, "crashy", [plain(i) for i in range(30)], partition=0, **ONE_PER_BATCH)
    cut = acked[20][1]
    bases = log_bases(broker, "crashy")
    broker.stop(keep=True)
    broker.env = {"ONCEFLOW_FAULT": "delete-records"}
    broker.start()
    client = admin(bs)
    futures = client.delete_records([TopicPartition("crashy", 0, cut)], request_timeout=5)
    assert broker.wait_exit() == 137, "the broker died at the crash point"
    with pytest.raises(KafkaException):
        next(iter(futures.values())).result(TIMEOUT)
    assert log_bases(broker, "crashy") == bases, "no segment was deleted before the crash"
    broker.start()
    assert list_offset(bs, "crashy", 0, OffsetSpec.earliest()) == cut
    assert fetch_error(bs, "crashy", cut - 1)[0] is ErrorCode.offset_out_of_range
    keep_from = max(b for b in bases if b <= cut)
    wait_for(lambda: log_bases(broker, "crashy") == [b for b in bases if b >= keep_from], timeout=TIMEOUT,
             what="retention to delete the segments below the log start")
    assert read_all(bs, "crashy", [0], "read_uncommitted") == [plain(i) for i in range(20, 30)]
