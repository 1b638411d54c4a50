"""Spark's own JVM Kafka connector (``spark-sql-kafka-0-10_2.13`` 4.2.0, the newest Maven Central
serves, on the installed Spark 4.3) against Onceflow and against Apache Kafka (issue 10, section 4).

Each run is ``tests/reference/spark_kafka_job.py`` in a process of its own (one SparkContext per
process; the Spark tests' session has no Kafka jars), bounded by a timeout: a batch write with
``format("kafka")`` and a batch read back, then a streaming read with ``startingOffsets=earliest``,
``kafka.isolation.level=read_committed`` and ``failOnDataLoss`` at its default (true) over a topic
whose committed transactions are separated by aborted ones (offset gaps: the aborted records and
every transaction's marker), the last transaction aborted too (invisible offsets at the end).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from onceflow.reference import spark_kafka_classpath
from tests.support.kafka import make_topic
from tests.support.reference import Target

JOB = Path(__file__).with_name("spark_kafka_job.py")
JOB_TIMEOUT_S = 600
TIMEOUT = 30

#: The gap topic's transactions in order: (values, committed?).  One partition, so offsets are
#: the same on every broker: a transaction's records, then its marker.
TRANSACTIONS = [([f"a{i}" for i in range(5)], True), ([f"b{i}" for i in range(4)], False),
                ([f"c{i}" for i in range(3)], True), ([f"d{i}" for i in range(6)], False),
                ([f"e{i}" for i in range(2)], True), ([f"f{i}" for i in range(3)], False)]
COMMITTED = [v for values, commit in TRANSACTIONS if commit for v in values]


def committed_offsets() -> list[list[int]]:
    """Where the committed values sit: each transaction takes its records and one marker."""
    offsets, next_offset = [], 0
    for values, commit in TRANSACTIONS:
        if commit:
            offsets += [[0, next_offset + i] for i in range(len(values))]
        next_offset += len(values) + 1
    return offsets


def fill_gap_topic(bootstrap: str, topic: str) -> None:
    make_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"gaps-{uuid.uuid4()}", "linger.ms": 1})
    producer.init_transactions(TIMEOUT)
    for values, commit in TRANSACTIONS:
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value.encode(), partition=0)
        if commit:
            producer.commit_transaction(TIMEOUT)
        else:
            assert producer.flush(TIMEOUT) == 0  # in the log before the abort marker
            producer.abort_transaction(TIMEOUT)


@pytest.fixture(scope="module")
def spark_runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Target], dict[str, Any]]:
    """``spark_runs(target)``: the job's result against that broker, run once per module."""
    spark_kafka_classpath()  # resolve (Maven) here, not inside the job's timeout
    runs: dict[str, dict[str, Any]] = {}

    def run(target: Target) -> dict[str, Any]:
        if target.name not in runs:
            suffix = uuid.uuid4().hex[:8]
            write_topic, gap_topic = f"spark-jvm-write-{suffix}", f"spark-jvm-gaps-{suffix}"
            make_topic(target.bootstrap_servers, write_topic, 3)
            fill_gap_topic(target.bootstrap_servers, gap_topic)
            checkpoint = tmp_path_factory.mktemp(f"spark-jvm-{target.name}")
            proc = subprocess.Popen([sys.executable, str(JOB), target.bootstrap_servers, write_topic, gap_topic,
                                     str(checkpoint / "stream")],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                out, err = proc.communicate(timeout=JOB_TIMEOUT_S)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
            lines = [line for line in out.splitlines() if line.startswith("{")]
            assert lines, f"the Spark job printed no result (exit {proc.returncode}):\n{out[-2000:]}\n{err[-4000:]}"
            runs[target.name] = json.loads(lines[-1])
        return runs[target.name]

    return run


def test_spark_kafka_batch_write_and_read_back(target: Target, spark_runs: Callable[[Target], dict[str, Any]]) -> None:
    batch = spark_runs(target)["batch"]
    assert "error" not in batch, batch
    assert batch == {"written": 100, "read": 100, "pairs_match": True, "partitions": [0, 1, 2]}


@pytest.mark.parametrize("run", ["stream", "stream_small_batches"])
def test_spark_kafka_streams_read_committed_over_aborted_transactions(
        target: Target, spark_runs: Callable[[Target], dict[str, Any]], run: str) -> None:
    """In one micro-batch, and in micro-batches of at most 3 offsets (maxOffsetsPerTrigger), whose
    ranges start and end inside the gaps."""
    result = spark_runs(target)
    stream = result[run]
    assert "error_class" not in stream, stream
    # failOnDataLoss=true, and still no failure: the gaps are aborted records and markers, which
    # the consumer skips (its position moves past them), not lost data.
    assert stream["finished"] and stream["error"] is None, stream
    assert stream["values"] == COMMITTED
    assert stream["offsets"] == committed_offsets()
    # The end is the last stable offset, past the last (aborted) transaction's marker.
    assert stream["end_offsets"] == {"0": sum(len(values) + 1 for values, _ in TRANSACTIONS)}
    assert sum(stream["batch_rows"]) == len(COMMITTED)
    if run == "stream_small_batches":
        assert len(stream["batch_rows"]) > 5 and 0 in stream["batch_rows"], "some batches hold only gaps"
    assert result["gap_batch"] == {"values": COMMITTED, "offsets": committed_offsets()}


def test_spark_kafka_sees_the_same_on_both_brokers(onceflow_target: Target, kafka_target: Target,
                                                   spark_runs: Callable[[Target], dict[str, Any]]) -> None:
    onceflow, kafka = spark_runs(onceflow_target), spark_runs(kafka_target)
    assert onceflow == kafka
