"""What the Spark tests share: topics, transactional producers, reading a topic back, queries, and the
exactly-once checks."""

from __future__ import annotations

import tempfile
import uuid
from collections import Counter
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support import SCRATCH
from tests.support.kafka import consume_all, make_topic, read_all

TIMEOUT = 30
QUERY_TIMEOUT_S = 180


def bootstrap_options(bootstrap: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap}


def transactional_writes(bootstrap: str, topic: str, transactions: list[tuple[list[bytes], bool]],
                         partition: int | None = None) -> list[bytes]:
    """Write each (values, commit?) as one transaction; returns the committed values in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"writer-{uuid.uuid4()}", "linger.ms": 1})
    producer.init_transactions(TIMEOUT)
    committed: list[bytes] = []
    for values, commit in transactions:
        producer.begin_transaction()
        for value in values:
            if partition is None:
                producer.produce(topic, value, key=value)
            else:
                producer.produce(topic, value, key=value, partition=partition)
        if commit:
            producer.commit_transaction(TIMEOUT)
            committed += values
        else:
            producer.flush(TIMEOUT)
            producer.abort_transaction(TIMEOUT)
    return committed


def read_topic(bootstrap: str, topic: str, partitions: list[int]) -> list[bytes]:
    """Every committed value of the topic, read by a plain read_committed consumer."""
    return read_all(bootstrap, topic, partitions, "read_committed")


def new_topic(bootstrap: str, partitions: int = 1, **config: str) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    make_topic(bootstrap, name, partitions, **config)
    return name


def checkpoint() -> str:
    return tempfile.mkdtemp(prefix="onceflow-ckpt-", dir=SCRATCH)


def run_available_now(frame: Any, sink_options: dict[str, str], checkpoint_dir: str, fmt: str = "onceflow") -> Any:
    """Run a streaming query until it has processed what is available now; returns it (stopped)."""
    writer = frame.writeStream.format(fmt).option("checkpointLocation", checkpoint_dir).trigger(availableNow=True)
    for key, value in sink_options.items():
        writer = writer.option(key, value)
    query = writer.start()
    query.awaitTermination(QUERY_TIMEOUT_S)
    if query.isActive:
        query.stop()
        raise AssertionError(f"the query did not finish within {QUERY_TIMEOUT_S} s")
    if query.exception() is not None:
        raise AssertionError(f"the query failed: {query.exception()}")
    return query


def run_query(frame: Any, sink_options: dict[str, str], checkpoint_dir: str, fmt: str = "onceflow") -> Exception | None:
    """Run a streaming query until it has processed what is available now; its exception, if it failed."""
    writer = frame.writeStream.format(fmt).option("checkpointLocation", checkpoint_dir).trigger(availableNow=True)
    for key, value in sink_options.items():
        writer = writer.option(key, value)
    return finished(writer.start())


def finished(query: Any) -> Exception | None:
    """Wait for a query that ends by itself (availableNow); its exception, if it failed."""
    from pyspark.errors import StreamingQueryException

    try:
        query.awaitTermination(QUERY_TIMEOUT_S)
    except StreamingQueryException:
        pass  # returned below
    if query.isActive:
        query.stop()
        raise AssertionError(f"the query did not finish within {QUERY_TIMEOUT_S} s")
    return query.exception()  # type: ignore[no-any-return]


def source(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    reader = (spark.readStream.format("onceflow").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def sink_options(bootstrap: str, topic: str, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "topic": topic, **extra}


def upper(frame: Any) -> Any:
    return frame.selectExpr("key", "upper(CAST(value AS STRING)) AS value")


def inputs(bootstrap: str, topic: str, n: int, per_txn: int = 50, first: int = 0) -> list[bytes]:
    """``n`` unique records written in transactions, every fourth one aborted; the committed ones."""
    transactions = []
    for t in range(first, first + n, per_txn):
        values = [f"rec-{i:06d}".encode() for i in range(t, min(first + n, t + per_txn))]
        transactions.append((values, (t // per_txn) % 4 != 3))
    return transactional_writes(bootstrap, topic, transactions)


def assert_exactly_once(output: list[bytes], committed: list[bytes]) -> None:
    expected = Counter(v.upper() for v in committed)
    got = Counter(output)
    duplicates = {v: c for v, c in got.items() if c > 1}
    missing = expected - got
    extra = got - expected
    assert not duplicates and not missing and not extra, (
        f"{len(duplicates)} duplicated, {sum(missing.values())} missing, {sum(extra.values())} unexpected "
        f"(e.g. {list(duplicates)[:3]} {list(missing)[:3]} {list(extra)[:3]})")


def assert_no_duplicates(output: list[bytes]) -> None:
    duplicates = {v: c for v, c in Counter(output).items() if c > 1}
    assert not duplicates, f"{len(duplicates)} records written more than once, e.g. {list(duplicates)[:3]}"


def uncommitted(bootstrap: str, topic: str, partitions: list[int]) -> list[bytes]:
    got = consume_all(bootstrap, topic, partitions, 0, **{"isolation.level": "read_uncommitted", "group.id": "ru"})
    return [v for _, _, v in got]


def open_transaction_in(bootstrap: str, topic: str, partitions: list[int]) -> bool:
    """Some partition's last stable offset is behind its high watermark: a transaction is open there."""
    committed = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    plain = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw", "isolation.level": "read_uncommitted"})
    try:
        for p in partitions:
            _, lso = committed.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT, cached=False)
            _, hw = plain.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT, cached=False)
            if lso < hw:
                return True
        return False
    finally:
        committed.close()
        plain.close()


def quiet(spark: Any, timeout: float = 60) -> None:
    """Wait until no task runs in the session: a failed query's tasks are killed asynchronously, and one
    still running could commit after its fault point was disarmed."""
    from tests.support.waiting import wait_for

    tracker = spark.sparkContext.statusTracker()
    wait_for(lambda: not tracker.getActiveStageIds() and all(e.numRunningTasks == 0 for e in tracker.getExecutorInfos()),
             timeout=timeout, interval=0.1, what="the failed query's tasks to end")
