"""The exactly-once sink on real Spark against the broker process, verified record by record:
a task that fails after writing part of its rows (by an exception, and by its worker dying),
the driver killed with SIGKILL in the middle of a micro-batch and restarted from its checkpoint
twice, the broker killed and restarted under the query; at-least-once for comparison; the
foreachBatch helper writing several topics; batch jobs; bad options and columns."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.spark.support import (
    TIMEOUT,
    assert_exactly_once,
    checkpoint,
    inputs,
    new_topic,
    open_transaction_in,
    read_topic,
    run_available_now,
    sink_options,
    source,
    uncommitted,
    upper,
)
from tests.support.broker import BrokerProcess
from tests.support.waiting import wait_for

DRIVER = str(Path(__file__).with_name("driver.py"))


@pytest.mark.parametrize("broker_process", [{"metrics.port": "0"}], indirect=True)
def test_a_micro_batch_pipeline_writes_each_committed_record_once(spark: Any, broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    src, dst = new_topic(bs, 3), new_topic(bs, 2)
    committed = inputs(bs, src, 600)
    query = run_available_now(upper(source(spark, bs, src, maxOffsetsPerTrigger="150")), sink_options(bs, dst), checkpoint())
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(batches) >= 4
    assert_exactly_once(read_topic(bs, dst, [0, 1]), committed)
    # The console's Pipelines: the query's progress topic, read by the broker, shows its last micro-batch.
    with urllib.request.urlopen(f"http://127.0.0.1:{broker_process.metrics_port}/api/state",
                                timeout=TIMEOUT) as response:
        pipelines = json.loads(response.read())["pipelines"]
    [pipeline] = [p for p in pipelines if p["query"] == query.id]
    assert pipeline["last_batch"] == batches[-1]["batchId"]
    last = [slot for slot in pipeline["slots"] if slot["batch"] == pipeline["last_batch"]]
    assert last and all(slot["rows"] >= 0 and slot["lag"] == 0 for slot in last)


@pytest.mark.parametrize("action", ["raise", "exit"])
def test_a_task_that_fails_after_writing_part_of_its_rows_is_retried_without_duplicates(
    spark: Any, broker_process: BrokerProcess, arm_fault: Any, action: str
) -> None:
    """The first attempt of every task writes its first row into its transaction, then fails:
    by an exception (the sink aborts), or by its Python worker dying (nothing aborts; the
    retry's init_transactions fences and aborts).  The retry writes everything once."""
    from onceflow.spark.faults import SPARK_FIRST_ATTEMPT as FAULT_POINT

    bs = broker_process.bootstrap_servers
    src, dst = new_topic(bs, 2), new_topic(bs, 1)
    committed = inputs(bs, src, 400)
    arm_fault(FAULT_POINT, action)
    run_available_now(upper(source(spark, bs, src)), sink_options(bs, dst), checkpoint())
    output = read_topic(bs, dst, [0])
    assert_exactly_once(output, committed)
    assert len(uncommitted(bs, dst, [0])) > len(output), "the failed attempts did write part of their rows (aborted)"


class Driver:
    """driver.py as a child process; its stderr goes to ``log_path``."""

    def __init__(self, *args: str, log_path: Path, fault_dir: str | None = None) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        if fault_dir is not None:
            env["ONCEFLOW_FAULT_DIR"] = fault_dir
        self.log_path = log_path
        with open(log_path, "a") as log:
            self.proc = subprocess.Popen([sys.executable, DRIVER, *args], stdout=subprocess.PIPE, stderr=log, text=True,
                                         env=env)

    def tail(self) -> str:
        return "\n".join(self.log_path.read_text().splitlines()[-20:])

    def wait_line(self, prefix: str, timeout: float = 120) -> str:
        stdout = self.proc.stdout
        assert stdout is not None

        def line_with_prefix() -> str | None:
            if not select.select([stdout], [], [], 0.2)[0]:
                return None
            line = stdout.readline()
            if not line:
                raise AssertionError(f"the driver exited (status {self.proc.wait()}) before printing {prefix!r}:\n"
                                     f"{self.tail()}")
            return line.strip() if line.startswith(prefix) else None

        return str(wait_for(line_with_prefix, timeout=timeout, interval=0,
                            what=lambda: f"a {prefix!r} line from the driver:\n{self.tail()}"))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(TIMEOUT)


def test_the_driver_killed_mid_batch_and_restarted_from_its_checkpoint(broker_process: BrokerProcess,
                                                                       tmp_path: Path) -> None:
    """Each task pauses inside its transaction (an armed fault point) so that the driver is
    killed with SIGKILL while a micro-batch is being written: its transactions stay open until
    the restarted query fences them.  (tests/reference/test_spark_sink.py restarts queries in
    every other way, in one Spark session.)"""
    from onceflow.spark.faults import SPARK_FIRST_ATTEMPT as FAULT_POINT

    bs = broker_process.bootstrap_servers
    src, dst = new_topic(bs, 2), new_topic(bs, 2)
    committed = inputs(bs, src, 1200)
    ckpt = checkpoint()
    (tmp_path / FAULT_POINT).write_text("sleep:2")
    args = (bs, src, dst, ckpt, "--max-offsets", "200")
    log = tmp_path / "driver.log"
    driver = Driver(*args, log_path=log, fault_dir=str(tmp_path))
    driver.wait_line("started")
    try:
        wait_for(lambda: open_transaction_in(bs, dst, [0, 1]), timeout=120, interval=0.05,
                 what="a task of a micro-batch to be inside its transaction")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the driver's log ends:\n{driver.tail()}") from None
    driver.kill()
    assert open_transaction_in(bs, dst, [0, 1]), "the killed driver left its transactions open"
    (tmp_path / FAULT_POINT).unlink()
    final = Driver(*args[:4], "--available-now", log_path=log)
    final.wait_line("done", timeout=240)
    assert_exactly_once(read_topic(bs, dst, [0, 1]), committed)
    assert not open_transaction_in(bs, dst, [0, 1]), "the restarted query left nothing open"


def test_the_broker_killed_and_restarted_under_the_query(spark: Any, broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    src, dst = new_topic(bs, 2), new_topic(bs, 2)
    committed = inputs(bs, src, 1000)
    frame = upper(source(spark, bs, src, maxOffsetsPerTrigger="100"))
    writer = frame.writeStream.format("onceflow").option("checkpointLocation", checkpoint())
    for key, value in sink_options(bs, dst).items():
        writer = writer.option(key, value)
    query = writer.trigger(processingTime="100 milliseconds").start()
    try:
        for _ in range(2):
            wait_for(lambda: query.lastProgress is not None and query.lastProgress["batchId"] >= 1, timeout=120,
                     what="the query to be running")
            broker_process.kill()
            broker_process.start()
        def finished() -> bool:
            assert query.exception() is None, query.exception()
            return len(read_topic(bs, dst, [0, 1])) >= len(committed)

        try:
            wait_for(finished, timeout=240, interval=0.5, what="the query to process everything")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; status {query.status}, last progress {query.lastProgress}, "
                                 f"{len(read_topic(bs, dst, [0, 1]))} of {len(committed)} written") from None
    finally:
        query.stop()
    assert_exactly_once(read_topic(bs, dst, [0, 1]), committed)


def test_at_least_once_is_there_for_comparison(spark: Any, broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    src, dst = new_topic(bs, 2), new_topic(bs, 1)
    committed = inputs(bs, src, 200)
    run_available_now(upper(source(spark, bs, src)), sink_options(bs, dst, deliveryGuarantee="at-least-once"), checkpoint())
    assert_exactly_once(read_topic(bs, dst, [0]), committed)
    assert len(uncommitted(bs, dst, [0])) == len(committed), "no transactions, no markers"


def test_foreach_batch_writes_several_topics_atomically_per_task(spark: Any, broker_process: BrokerProcess) -> None:
    """The function sets its own job group, which hides Spark's run id from the tasks, and makes the
    query's clone the active session: the driver still finds the run (from the query's thread) and
    the tasks write under it."""
    import onceflow.spark
    from onceflow.spark.progress import ProgressStore
    from onceflow.spark.protocol import progress_topic

    bs = broker_process.bootstrap_servers
    src, debits, credits = new_topic(bs, 2), new_topic(bs, 1), new_topic(bs, 1)
    committed = inputs(bs, src, 300)

    def split(df: Any, batch_id: int) -> None:
        df.sparkSession.sparkContext.setJobGroup("etl", "the function's own job group")
        df.sparkSession.createDataFrame([(1,)], "a int")  # makes the query's clone the active session
        rows = df.selectExpr("key", "upper(CAST(value AS STRING)) AS value")
        both = rows.selectExpr("key", "value", f"'{debits}' AS topic").unionByName(
            rows.selectExpr("key", "value", f"'{credits}' AS topic"))
        onceflow.spark.write_exactly_once(both, batch_id, bootstrap_servers=bs, name="ledger")

    query = (source(spark, bs, src, maxOffsetsPerTrigger="100").writeStream.foreachBatch(split)
             .option("checkpointLocation", checkpoint()).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    assert_exactly_once(read_topic(bs, debits, [0]), committed)
    assert_exactly_once(read_topic(bs, credits, [0]), committed)
    store = ProgressStore(bs, {}, progress_topic(str(query.id), "ledger"))
    runs = {r.written.run for r in store.read(range(store.partition_count())).values() if r.written}
    assert runs == {str(query.runId)}, f"written under the query's run id, not the job group's: {runs}"


def _first_line(exc: BaseException) -> str:
    """The first line of an error as PySpark raises it (and prints it, after the exception's type)."""
    return str(exc).splitlines()[0]


def _run_to_failure(query: Any) -> None:
    query.awaitTermination(60)  # raises the query's exception
    if query.exception() is not None:
        raise query.exception()


#: PySpark's switch that drops the chain of an exception raised in a data source's planning (load(),
#: a write's start): with it off, the connector's one line comes first there too (``onceflow.spark._errors``).
SIMPLIFIED_TRACEBACK = "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"


def test_bad_options_and_columns_are_named_before_any_data_moves(spark: Any, broker_process: BrokerProcess) -> None:
    from pyspark.errors import PySparkException

    bs = broker_process.bootstrap_servers
    topic = new_topic(bs, 1)
    def base() -> Any:  # a DataStreamReader's option() changes it in place: a new one each time
        return spark.readStream.format("onceflow").option("kafka.bootstrap.servers", bs)

    # A streaming source's error (its reader is made when the query starts) comes first, whatever PySpark's settings.
    with pytest.raises(PySparkException) as caught:
        _run_to_failure(base().option("subscribe", topic).option("endingOffsets", "latest").load()
                        .writeStream.format("noop").option("checkpointLocation", checkpoint()).start())
    assert "OptionError: Option 'endingOffsets' is not valid in streaming queries" in _first_line(caught.value)
    # Planning errors come first too once PySpark keeps their chain (by default it drops it: README).
    spark.conf.set(SIMPLIFIED_TRACEBACK, "false")
    try:
        with pytest.raises(PySparkException) as caught:
            base().option("subscribe", topic).option("startingOffset", "earliest").load()
        assert "Unknown option 'startingoffset' for the onceflow source; did you mean 'startingOffsets'?" \
            in _first_line(caught.value)
        with pytest.raises(PySparkException) as caught:
            spark.createDataFrame([("v",)], "value string").write.format("onceflow") \
                .option("kafka.bootstrap.servers", bs).option("topc", topic).mode("append").save()
        assert "Unknown option 'topc' for the onceflow sink; did you mean 'topic'?" in _first_line(caught.value)
        with pytest.raises(PySparkException) as caught:
            _run_to_failure(source(spark, bs, topic).selectExpr("key").writeStream.format("onceflow")
                            .option("kafka.bootstrap.servers", bs).option("topic", topic)
                            .option("checkpointLocation", checkpoint()).start())
        assert "'value'" in _first_line(caught.value), _first_line(caught.value)
    finally:
        spark.conf.unset(SIMPLIFIED_TRACEBACK)

    with pytest.raises(PySparkException, match="(?i)unknown option 'startingoffset'.*did you mean 'startingOffsets'"):
        base().option("subscribe", topic).option("startingOffset", "earliest").load()
    with pytest.raises(PySparkException, match="startingOffsets"):
        base().option("subscribe", topic).option("startingOffsets", '{"%s": {"0": "x"}}' % topic).load()
    with pytest.raises(PySparkException, match="subscribe, subscribePattern, assign"):
        base().load()
    frame = source(spark, bs, topic).selectExpr("key")
    with pytest.raises(PySparkException, match="'value'"):
        query = frame.writeStream.format("onceflow").option("kafka.bootstrap.servers", bs).option("topic", topic) \
            .option("checkpointLocation", checkpoint()).trigger(availableNow=True).start()
        query.awaitTermination(60)
        if query.exception() is not None:
            raise query.exception()
    rows = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(PySparkException, match="Save mode Overwrite not allowed for onceflow"):
        rows.write.format("onceflow").option("kafka.bootstrap.servers", bs).option("topic", topic).mode("overwrite").save()
    with pytest.raises(PySparkException, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):  # Spark's own rule for Python sources
        rows.write.format("onceflow").option("kafka.bootstrap.servers", bs).option("topic", topic).save()
    with socket.socket() as held:  # bound, not listening: connections refused, named within kafka.default.api.timeout.ms
        held.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{held.getsockname()[1]}"
        with pytest.raises(PySparkException, match=f"no Kafka broker answered at {nobody} within 2 s"):
            rows.write.format("onceflow").option("kafka.bootstrap.servers", nobody).option("topic", topic) \
                .option("kafka.default.api.timeout.ms", "2000").mode("append").save()
        with pytest.raises(PySparkException, match=f"kafka.bootstrap.servers={nobody}: still failing after 4 s"):
            spark.read.format("onceflow").option("kafka.bootstrap.servers", nobody).option("subscribe", topic) \
                .option("kafka.default.api.timeout.ms", "2000").load().count()
    assert read_topic(bs, topic, [0]) == [], "nothing was written"


def test_the_progress_records_outlive_compaction_and_the_sink_keeps_no_consumer_group(make_broker_process: Any) -> None:
    """Without Spark, on a broker whose group offsets would expire within a minute: the slot's records
    are in a compacted topic, whose cleaner keeps each slot's latest; a replay still finds its batch."""
    import pyarrow as pa
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    from onceflow.spark import sink
    from onceflow.spark.options import parse_sink_options
    from onceflow.spark.protocol import TaskIdentity, progress_topic
    from tests.support.broker import cleaned_through, partition_dir

    broker = make_broker_process(**{"offsets.retention.minutes": "1", "log.cleaner.backoff.ms": "100"})
    bs = broker.bootstrap_servers
    dst = new_topic(bs, 1)
    options = parse_sink_options({"kafka.bootstrap.servers": bs, "topic": dst}, streaming=True)
    query = "9f9e8f39-2f7c-4a7e-8a55-1d2c3b4a5f60"

    def write(batch: int, run: str) -> str:
        rows = iter([pa.RecordBatch.from_pydict({"value": [f"b{batch}-{i}" for i in range(5)]})])
        return sink.write_exactly_once(rows, TaskIdentity(query, batch, 0, run, 0, None, batch), options).action

    assert write(0, "r1") == "written"
    admin = AdminClient({"bootstrap.servers": bs})
    resource = ConfigResource("topic", progress_topic(query), incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in (("segment.ms", "100"), ("min.cleanable.dirty.ratio", "0.01"))])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT)
    for batch in range(1, 8):
        assert write(batch, "r1") == "written"
    directory = partition_dir(broker, progress_topic(query))
    wait_for(lambda: cleaned_through(directory, 4), timeout=60, interval=0.2, what="the cleaner to compact the records")
    assert write(7, "r2") == "confirmed", "the latest record survived compaction"
    assert write(8, "r2") == "written"
    assert len(read_topic(bs, dst, [0])) == 9 * 5
    groups = admin.list_consumer_groups().result(TIMEOUT).valid
    assert [g.group_id for g in groups if "onceflow" in g.group_id] == [], "no consumer group to expire"


def test_a_transaction_that_outlives_its_timeout_fails_the_task_naming_the_setting(make_broker_process: Any) -> None:
    """Without Spark: rows arrive slower than kafka.transaction.timeout.ms; the coordinator aborts the
    transaction and bumps the epoch. The task fails at once, naming the setting, instead of waiting
    for a rival attempt that does not exist; a retry writes the rows once."""
    import time

    import pyarrow as pa

    from onceflow.spark import sink
    from onceflow.spark.options import parse_sink_options
    from onceflow.spark.protocol import TaskIdentity

    broker = make_broker_process(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"})
    bs = broker.bootstrap_servers
    dst = new_topic(bs, 1)
    options = parse_sink_options({"kafka.bootstrap.servers": bs, "topic": dst, "kafka.transaction.timeout.ms": "1000",
                                  "kafka.message.timeout.ms": "1000"}, streaming=True)
    task = TaskIdentity("5d1f0c8e-8a77-4c43-9a43-5b0cbb0a3f11", 0, 0, "run", 0, None, 1)

    def slow() -> Any:
        yield pa.RecordBatch.from_pydict({"value": ["a"]})
        # Upstream stalls until the coordinator has aborted the transaction ("a" is in it, then its marker).
        wait_for(lambda: open_transaction_in(bs, dst, [0]), timeout=30, interval=0.05, what="the transaction open")
        wait_for(lambda: not open_transaction_in(bs, dst, [0]), timeout=30, interval=0.05,
                 what="the coordinator to abort the transaction")
        yield pa.RecordBatch.from_pydict({"value": ["b"]})

    started = time.monotonic()
    with pytest.raises(sink.TransactionTimedOut, match=r"kafka\.transaction\.timeout\.ms \(1000\)"):
        sink.write_exactly_once(slow(), task, options)
    assert time.monotonic() - started < 30, "no wait for a rival"
    assert read_topic(bs, dst, [0]) == []
    retry = TaskIdentity(task.query_id, 0, 0, "run", 1, None, 1)
    assert sink.write_exactly_once(iter([pa.RecordBatch.from_pydict({"value": ["a", "b"]})]), retry, options).action \
        == "written"
    assert read_topic(bs, dst, [0]) == [b"a", b"b"]
