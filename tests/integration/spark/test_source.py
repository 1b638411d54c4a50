"""The onceflow streaming and batch source on real Spark against the broker process: exact
offset ranges across transaction markers, aborted records and compaction gaps, read_committed
up to the last stable offset, maxOffsetsPerTrigger, restarts from the checkpoint, new
partitions, commitOffsetsToGroup, and data loss."""

from __future__ import annotations

import tempfile
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.integration.spark.support import (
    TIMEOUT,
    bootstrap_options,
    checkpoint,
    new_topic,
    run_available_now,
    transactional_writes,
)
from tests.support import SCRATCH
from tests.support.broker import BrokerProcess, cleaned_through, partition_dir
from tests.support.kafka import make_topic, produce, produce_keyed, txn_producer
from tests.support.waiting import wait_for


def stream(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    reader = spark.readStream.format("onceflow").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    reader = reader.option("startingOffsets", options.pop("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


class FileSink:
    """A parquet file sink (Spark's own, exactly-once, restartable from its checkpoint) to read back."""

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix="onceflow-out-", dir=SCRATCH)
        self.checkpoint = checkpoint()

    def run(self, frame: Any) -> Any:
        projected = frame.selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
        return run_available_now(projected, {"path": self.path}, self.checkpoint, fmt="parquet")

    def rows(self, spark: Any) -> list[tuple[Any, ...]]:
        """(value, partition, offset) of every row written, by partition and offset."""
        rows = spark.read.parquet(self.path).collect()
        return sorted(((r.v, r.partition, r.offset) for r in rows), key=lambda r: (r[1], r[2]))


def test_ranges_across_markers_and_aborted_records_hold_exactly_the_committed(spark: Any, broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    topic = new_topic(bs, 2)
    committed = transactional_writes(bs, topic, [([f"t{t}-{i}".encode() for i in range(20)], t % 3 != 1) for t in range(9)])
    out = FileSink()
    query = out.run(stream(spark, bs, topic, maxOffsetsPerTrigger="25"))
    rows = out.rows(spark)
    assert sorted(v.encode() for v, _, _ in rows) == sorted(committed), "exactly the committed records, once each"
    assert all(not v.startswith(("t1-", "t4-", "t7-")) for v, _, _ in rows)
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert len(batches) > 4 and max(batches) <= 25 + 2, f"maxOffsetsPerTrigger=25 splits the work: {batches}"


def test_read_committed_stops_at_an_open_transaction_and_continues_after_it(spark: Any, broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    topic = new_topic(bs, 1)
    produce(bs, topic, [b"before"], partition=0)
    open_txn = txn_producer(bs)
    open_txn.begin_transaction()
    open_txn.produce(topic, b"pending", partition=0)
    open_txn.flush(TIMEOUT)
    produce(bs, topic, [b"after"], partition=0)  # behind the open transaction: not stable yet
    out = FileSink()
    frame = stream(spark, bs, topic)
    out.run(frame)
    assert [v for v, _, _ in out.rows(spark)] == ["before"], "nothing at or past the last stable offset"
    open_txn.commit_transaction(TIMEOUT)
    out.run(frame)  # the same query, restarted from its checkpoint
    assert [v for v, _, _ in out.rows(spark)] == ["before", "pending", "after"]

    # read_uncommitted, for comparison, reads an open transaction's records.
    uncommitted_topic = new_topic(bs, 1)
    open_txn.begin_transaction()
    open_txn.produce(uncommitted_topic, b"uncommitted", partition=0)
    open_txn.flush(TIMEOUT)
    out = FileSink()
    out.run(stream(spark, bs, uncommitted_topic, **{"kafka.isolation.level": "read_uncommitted"}))
    assert [v for v, _, _ in out.rows(spark)] == ["uncommitted"]
    open_txn.abort_transaction(TIMEOUT)


def test_a_restart_from_the_checkpoint_continues_where_the_query_stopped(spark: Any, broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    topic = new_topic(bs, 2)
    first = transactional_writes(bs, topic, [([f"a{i}".encode() for i in range(30)], True)])
    out = FileSink()
    frame = stream(spark, bs, topic)
    out.run(frame)
    second = transactional_writes(bs, topic, [([f"b{i}".encode() for i in range(30)], True)])
    query = out.run(frame)
    assert sum(p["numInputRows"] for p in query.recentProgress) == 30, "only the new records were read"
    assert sorted(v.encode() for v, _, _ in out.rows(spark)) == sorted(first + second)


def test_new_partitions_are_picked_up_from_their_start(spark: Any, broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    topic = new_topic(bs, 1)
    produce(bs, topic, [b"p0-a"], partition=0)
    out = FileSink()
    frame = stream(spark, bs, topic)
    out.run(frame)
    admin = AdminClient({"bootstrap.servers": bs})
    for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
        future.result(TIMEOUT)
    produce(bs, topic, [b"p1-a", b"p1-b"], partition=1)
    produce(bs, topic, [b"p2-a"], partition=2)
    out.run(frame)
    assert out.rows(spark) == [("p0-a", 0, 0), ("p1-a", 1, 0), ("p1-b", 1, 1), ("p2-a", 2, 0)]


def test_compaction_gaps_are_read_to_the_end_of_the_range(spark: Any, make_broker_process: Any) -> None:
    """Offsets the cleaner removed are gaps: each range is read to its end, no hang, no data-loss error."""
    broker = make_broker_process(**{"log.cleaner.backoff.ms": "200"})
    bs = broker.bootstrap_servers
    topic = new_topic(bs, 1, **{"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"})
    last = produce_keyed(bs, topic, [(f"k{i % 5}".encode(), f"v{r}".encode() * 20) for r in range(8) for i in range(5)],
                         **{"batch.num.messages": 1})
    produce_keyed(bs, topic, [(f"tail-{i}".encode(), b"x" * 100) for i in range(12)], **{"batch.num.messages": 1})
    wait_for(lambda: cleaned_through(partition_dir(broker, topic), max(last.values())), what="the cleaner")
    out = FileSink()
    out.run(stream(spark, bs, topic, maxOffsetsPerTrigger="7"))
    rows = out.rows(spark)
    values = [v for v, _, _ in rows]
    assert values[:5] == ["v7" * 20] * 5, "the newest value of each key, once"
    assert len(values) == 5 + 12
    offsets = [o for _, _, o in rows]
    assert offsets == sorted(set(offsets)) and offsets[0] > 0, "gaps where the cleaner removed records"


def test_commit_offsets_to_group_shows_the_pipeline_in_the_group(spark: Any, broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    topic = new_topic(bs, 2)
    transactional_writes(bs, topic, [([f"r{i}".encode() for i in range(10)], True)])
    group = f"lag-{uuid.uuid4().hex[:6]}"
    FileSink().run(stream(spark, bs, topic, commitOffsetsToGroup=group))
    consumer = Consumer({"bootstrap.servers": bs, "group.id": group})
    committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=TIMEOUT)
    consumer.close()
    ends = {tp.partition: tp.offset for tp in committed}
    low_high = [Consumer({"bootstrap.servers": bs, "group.id": "wm", "isolation.level": "read_committed"})
                .get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT) for p in (0, 1)]
    assert ends == {0: low_high[0][1], 1: low_high[1][1]}, "the group's offsets are the end of the last micro-batch"


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_offsets_deleted_by_retention_follow_fail_on_data_loss(spark: Any, make_broker_process: Any,
                                                                fail_on_data_loss: bool) -> None:
    broker = make_broker_process(**{"log.retention.check.interval.ms": "100"})
    bs = broker.bootstrap_servers
    topic = new_topic(bs, 1, **{"segment.bytes": "1024"})
    produce(bs, topic, [f"early-{i}".encode() * 10 for i in range(10)], partition=0, **{"batch.num.messages": 1})
    starting = '{"%s":{"0":0}}' % topic
    frame = stream(spark, bs, topic, startingOffsets=starting, failOnDataLoss=str(fail_on_data_loss).lower())
    admin = AdminClient({"bootstrap.servers": bs})
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.bytes", "1", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT)

    def log_start() -> int:
        probe = Consumer({"bootstrap.servers": bs, "group.id": "wm"})
        low, _ = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT, cached=False)
        probe.close()
        return low

    wait_for(lambda: log_start() > 0, what="retention to delete the first segments")
    out = FileSink()
    if fail_on_data_loss:
        from pyspark.errors import StreamingQueryException

        with pytest.raises(StreamingQueryException, match="no longer available.*failOnDataLoss=false"):
            out.run(frame)
    else:
        out.run(frame)
        rows = out.rows(spark)
        assert rows and rows[0][2] == log_start(), "continued from the log start"


def test_a_batch_read_takes_exact_starting_and_ending_offsets(spark: Any, broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    topic = new_topic(bs, 1)
    produce(bs, topic, [f"r{i}".encode() for i in range(10)], partition=0)
    frame = (spark.read.format("onceflow").options(**bootstrap_options(bs)).option("subscribe", topic)
             .option("startingOffsets", '{"%s":{"0":3}}' % topic).option("endingOffsets", '{"%s":{"0":7}}' % topic)
             .option("includeHeaders", "true").load())
    assert frame.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    rows = frame.selectExpr("CAST(value AS STRING) v", "offset", "timestampType", "size(headers) h").collect()
    assert [(r.v, r.offset, r.timestampType, r.h) for r in rows] == [(f"r{i}", i, 0, 0) for i in range(3, 7)]
    # An empty range plans no partition at all (PySpark then plans one placeholder): no rows, no error.
    empty = (spark.read.format("onceflow").options(**bootstrap_options(bs)).option("subscribe", topic)
             .option("startingOffsets", '{"%s":{"0":5}}' % topic).option("endingOffsets", '{"%s":{"0":5}}' % topic).load())
    assert empty.count() == 0
    # A subscribed topic that does not exist covers no partition: no rows (a pattern matching nothing, too).
    missing = spark.read.format("onceflow").options(**bootstrap_options(bs)).option("subscribe", f"{topic}-nosuch").load()
    assert missing.count() == 0


def test_subscribe_pattern_picks_up_topics_created_later(spark: Any, broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    make_topic(bs, f"{prefix}-a", 1)
    make_topic(bs, f"other{prefix}", 1)
    produce(bs, f"{prefix}-a", [b"a0"], partition=0)
    produce(bs, f"other{prefix}", [b"never"], partition=0)
    out = FileSink()
    frame = (spark.readStream.format("onceflow").option("kafka.bootstrap.servers", bs)
             .option("subscribePattern", f"{prefix}-.*").option("startingOffsets", "earliest").load())
    out.run(frame)
    make_topic(bs, f"{prefix}-b", 2)
    produce(bs, f"{prefix}-b", [b"b0"], partition=1)
    out.run(frame)
    assert sorted(v for v, _, _ in out.rows(spark)) == ["a0", "b0"], "the new matching topic, and nothing else"


def delete_topic(bs: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for future in admin.delete_topics([topic]).values():
        future.result(TIMEOUT)
    wait_for(lambda: topic not in admin.list_topics(timeout=TIMEOUT).topics, what=f"{topic} to be gone")


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_topic_deleted_and_created_again_is_data_loss_never_a_silent_skip(spark: Any, broker_process: BrokerProcess,
                                                                            fail_on_data_loss: bool) -> None:
    """The new topic's offsets may even pass the old ones: its topic id tells it from the one the query read."""
    bs = broker_process.bootstrap_servers
    topic = new_topic(bs, 1)
    produce(bs, topic, [f"old-{i}".encode() for i in range(10)], partition=0)
    out = FileSink()
    frame = stream(spark, bs, topic, failOnDataLoss=str(fail_on_data_loss).lower())
    out.run(frame)
    delete_topic(bs, topic)
    make_topic(bs, topic, 1)
    produce(bs, topic, [f"new-{i}".encode() for i in range(12)], partition=0)  # past offset 10, where the query is
    if fail_on_data_loss:
        from pyspark.errors import StreamingQueryException

        with pytest.raises(StreamingQueryException, match=f"(?s)deleted and created again.*{topic}-0 .read up to offset 10") \
                as caught:
            out.run(frame)
        first = str(caught.value).splitlines()[0]  # the source's own line comes first (onceflow.spark._errors)
        assert "DataLossError: partitions the query was reading changed" in first and f"{topic}-0" in first, first
    else:
        out.run(frame)
        values = sorted(v for v, _, _ in out.rows(spark))
        assert values == sorted([f"old-{i}" for i in range(10)] + [f"new-{i}" for i in range(12)]), \
            "the new topic is read from its start"


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_micro_batch_replayed_after_its_topic_was_created_again_never_reads_the_new_topic_as_the_old(
        broker_process: BrokerProcess, fail_on_data_loss: bool) -> None:
    """Without Spark, as Spark replays a micro-batch after a restart: ``partitions(start, end)`` from the
    offset log, no ``latestOffset`` first. The topic was deleted, created again and refilled meanwhile."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from onceflow.spark.kafka import DataLossError
    from onceflow.spark.options import parse_source_options
    from onceflow.spark.source import OnceflowStreamReader

    bs = broker_process.bootstrap_servers
    topic = new_topic(bs, 1)
    produce(bs, topic, [f"old-{i}".encode() for i in range(10)], partition=0)

    def reader() -> OnceflowStreamReader:
        return OnceflowStreamReader(parse_source_options(
            {"kafka.bootstrap.servers": bs, "subscribe": topic, "startingOffsets": "earliest",
             "failOnDataLoss": str(fail_on_data_loss).lower()}, streaming=True))

    def values(r: OnceflowStreamReader, start: Any, end: Any) -> list[str]:
        return [v.decode() for p in r.partitions(start, end) for b in r.read(p) for v in b.column("value").to_pylist()]

    first = reader()
    start = first.initialOffset()
    end = first.latestOffset(start, ReadAllAvailable())  # micro-batch B, in the offset log; then a crash
    delete_topic(bs, topic)
    make_topic(bs, topic, 1)
    produce(bs, topic, [f"new-{i}".encode() for i in range(25)], partition=0)
    restarted = reader()
    if fail_on_data_loss:
        with pytest.raises(DataLossError, match=f"deleted or created again: {topic}"):
            restarted.partitions(start, end)
        return
    assert values(restarted, start, end) == [], "B's records are gone; the new topic's are not B's"
    following = restarted.latestOffset(end, ReadAllAvailable())
    assert values(restarted, end, following) == [f"new-{i}" for i in range(25)], "read once, from the start"


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_pattern_topic_deleted_fails_or_warns_at_once_never_wedges(spark: Any, broker_process: BrokerProcess,
                                                                     fail_on_data_loss: bool) -> None:
    bs = broker_process.bootstrap_servers
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    for name in ("a", "b"):
        make_topic(bs, f"{prefix}-{name}", 1)
        produce(bs, f"{prefix}-{name}", [f"{name}0".encode()], partition=0)
    out = FileSink()
    frame = (spark.readStream.format("onceflow").option("kafka.bootstrap.servers", bs)
             .option("subscribePattern", f"{prefix}-.*").option("startingOffsets", "earliest")
             .option("failOnDataLoss", str(fail_on_data_loss).lower()).load())
    out.run(frame)
    delete_topic(bs, f"{prefix}-b")
    produce(bs, f"{prefix}-a", [b"a1"], partition=0)
    started = time.monotonic()
    if fail_on_data_loss:
        from pyspark.errors import StreamingQueryException

        with pytest.raises(StreamingQueryException, match=f"deleted: {prefix}-b-0 .read up to offset 1"):
            out.run(frame)
    else:
        out.run(frame)
        assert sorted(v for v, _, _ in out.rows(spark)) == ["a0", "a1", "b0"]
    assert time.monotonic() - started < 60, "no wait for the deleted topic's partitions"
