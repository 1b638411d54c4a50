"""The exactly-once sink's guarantees on real Spark, against Onceflow and against Apache Kafka (issue 17).

Each scenario leaves a micro-batch partly written, the way a crash would: a fault point fails one task
partition on every attempt before its commit (Spark gives up on the micro-batch and the query stops,
the other tasks' transactions committed), or kills every attempt's Python worker with its transaction
open.  Then the query is restarted from its checkpoint, changed the ways users change queries, and the
output is read back record by record:

* a source option that decides the split (``minPartitions``) changed, or partitions added to the input:
  the source's plan is pinned in the offset log, so the replay is split as before: exactly once;
* ``repartition(n)`` changed: refused before anything more is written, naming the micro-batch; with
  ``repartition(n)`` restored, exactly once;
* fewer tasks and tasks without rows: the earlier run's open transactions are fenced once the first
  micro-batch commits, so read_committed readers move on within seconds (``transaction.timeout.ms`` at
  its default, 10 minutes);
* a batch write whose task dies after its commit: the retry skips;
* the same ``write_exactly_once`` name twice in one micro-batch, and a checkpoint older than the output,
  a changed ``transactionalIdPrefix``, a progress topic that would expire: refused, naming the cause;
* two attempts of one task at once (speculation), without Spark: the fenced one reports its rival's
  outcome instead of failing.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, ResourceType

from onceflow.spark import sink
from onceflow.spark.faults import SPARK_AFTER_COMMIT, SPARK_BEFORE_COMMIT
from onceflow.spark.options import parse_sink_options
from onceflow.spark.progress import ProgressStore
from onceflow.spark.protocol import TaskIdentity, progress_topic
from onceflow.spark.ranges import plan_ranges
from tests.integration.spark.support import (
    TIMEOUT,
    assert_exactly_once,
    assert_no_duplicates,
    checkpoint,
    finished,
    inputs,
    new_topic,
    open_transaction_in,
    quiet,
    read_topic,
    run_query,
    sink_options,
    source,
    transactional_writes,
    uncommitted,
    upper,
)
from tests.support.reference import Target
from tests.support.waiting import wait_for

Arm = Callable[[str, str], None]


@pytest.fixture(params=["onceflow", pytest.param("kafka", marks=pytest.mark.long)])
def sink_target(request: pytest.FixtureRequest) -> Target:
    """``target`` for the longer Spark scenarios: against Apache Kafka only in ``make reference-suite``
    (``make test`` runs them against Onceflow, and the others against both)."""
    return request.getfixturevalue(f"{request.param}_target")  # type: ignore[no-any-return]


def failing_partly(spark: Any, bs: str, frame: Any, dst: str, ckpt: str, arm: Arm, slot: int, **extra: str) -> list[bytes]:
    """Run the query with task partition ``slot`` failing on every attempt before its commit: the query
    stops with micro-batch 0 partly written.  Returns what it wrote."""
    arm(SPARK_BEFORE_COMMIT, f"raise slot={slot} batch=0")
    error = run_query(frame, sink_options(bs, dst, **extra), ckpt)
    quiet(spark)
    arm(SPARK_BEFORE_COMMIT, "")
    assert error is not None and "fault injected" in str(error), f"the query was to fail: {error}"
    return read_topic(bs, dst, [0, 1])


def test_a_replay_is_split_as_first_written_after_its_options_and_input_partitions_changed(spark: Any, sink_target: Target,
                                                                                         arm_fault: Arm) -> None:
    """minPartitions back at its default would split micro-batch 0 into 2 tasks, and the input gained
    partitions: the replay is still the 4 tasks of the plan in the offset log; what follows is new."""
    bs = sink_target.bootstrap_servers
    src, dst = new_topic(bs, 2), new_topic(bs, 2)
    committed = inputs(bs, src, 200)
    ckpt = checkpoint()
    partial = failing_partly(spark, bs, upper(source(spark, bs, src, minPartitions="4")), dst, ckpt, arm_fault, slot=3)
    assert 0 < len(partial) < len(committed)
    admin = AdminClient({"bootstrap.servers": bs})
    for future in admin.create_partitions([NewPartitions(src, 4)]).values():
        future.result(TIMEOUT)
    committed += inputs(bs, src, 200, first=200)  # spread over the four partitions
    assert run_query(upper(source(spark, bs, src)), sink_options(bs, dst), ckpt) is None
    assert_exactly_once(read_topic(bs, dst, [0, 1]), committed)


def test_a_replay_whose_waiting_tasks_hold_every_core_hands_their_rows_to_the_driver(spark: Any, sink_target: Target,
                                                                                   arm_fault: Arm) -> None:
    """Only task partition 3 of 4 was written (an earlier run on more cores): the replay's first tasks
    (0, 1) wait for it to be confirmed, holding both cores, so 3 cannot start.  After replayWaitMs they
    hand their rows to the driver; 2 and 3 start, 3 confirms, and the driver writes the deferred rows.

    Spark retries a failed task before it starts the next one, so the earlier run's partial write is
    made here by hand: the query's first run fails every task, then partition 3's task is run with the
    sink's own code, on the rows Spark gives it (its offset range, upper-cased)."""
    bs = sink_target.bootstrap_servers
    src, dst = new_topic(bs, 1), new_topic(bs, 2)
    committed = transactional_writes(bs, src, [([f"r{t}-{i}".encode() for i in range(50)], True) for t in range(4)])
    ckpt = checkpoint()
    frame = upper(source(spark, bs, src, minPartitions="4"))
    arm_fault(SPARK_BEFORE_COMMIT, "raise batch=0")
    assert run_query(frame, sink_options(bs, dst), ckpt) is not None
    quiet(spark)
    arm_fault(SPARK_BEFORE_COMMIT, "")
    query_id = json.loads(open(os.path.join(ckpt, "metadata")).read())["id"]
    end = int(json.loads(open(os.path.join(ckpt, "offsets", "0")).read().splitlines()[2])[src]["0"])
    last = plan_ranges({(src, 0): 0}, {(src, 0): end}, min_partitions=4)[3]
    rows = (spark.read.format("onceflow").option("kafka.bootstrap.servers", bs).option("subscribe", src)
            .option("startingOffsets", json.dumps({src: {"0": last.start}}))
            .option("endingOffsets", json.dumps({src: {"0": last.end}})).load()
            .selectExpr("key", "upper(CAST(value AS STRING)) AS value").toArrow())
    options = parse_sink_options(sink_options(bs, dst), streaming=True)
    earlier = sink.write_exactly_once(rows.to_batches(), TaskIdentity(query_id, 0, 3, "earlier-run", 0, None, 0), options)
    assert earlier.action == "written" and 0 < earlier.rows < len(committed)
    assert run_query(frame, sink_options(bs, dst, replayWaitMs="1000"), ckpt) is None
    assert_exactly_once(read_topic(bs, dst, [0, 1]), committed)
    records = ProgressStore(bs, {}, progress_topic(query_id)).read(range(4))
    by_driver = [records[s].written.by_driver for s in range(4)]  # type: ignore[union-attr]
    assert by_driver[:2] == [True, True] and not by_driver[3], f"0 and 1 deferred (2 may have waited): {by_driver}"
    assert records[3].confirmed is not None, "3 confirmed its rows"


def test_a_replay_with_repartition_changed_is_refused_before_anything_is_written(spark: Any, sink_target: Target,
                                                                                 arm_fault: Arm) -> None:
    bs = sink_target.bootstrap_servers
    src, dst = new_topic(bs, 1), new_topic(bs, 2)
    committed = inputs(bs, src, 300)
    ckpt = checkpoint()

    def query(n: int) -> Any:
        return upper(source(spark, bs, src).repartition(n))

    partial = failing_partly(spark, bs, query(4), dst, ckpt, arm_fault, slot=3)
    assert 0 < len(partial) < len(committed)
    for n in (2,):
        error = run_query(query(n), sink_options(bs, dst), ckpt)
        assert error is not None, f"repartition({n}) was accepted"
        message = str(error)
        assert "micro-batch 0" in message and "acceptChangedReplay=0" in message, message
        assert "split into tasks differently" in message or "fewer tasks" in message, message
        assert sorted(read_topic(bs, dst, [0, 1])) == sorted(partial), "nothing more was written"
    assert run_query(query(4), sink_options(bs, dst), ckpt) is None
    assert_exactly_once(read_topic(bs, dst, [0, 1]), committed)


def test_a_restart_with_fewer_tasks_and_empty_ones_leaves_no_transaction_open(spark: Any, sink_target: Target,
                                                                              arm_fault: Arm) -> None:
    """Every task of the first run dies inside its transaction; the second run has one task with rows, one
    without, and none for the first run's partitions 2 and 3."""
    bs = sink_target.bootstrap_servers
    src, dst = new_topic(bs, 1), new_topic(bs, 2)
    committed = inputs(bs, src, 200)
    ckpt = checkpoint()
    arm_fault(SPARK_BEFORE_COMMIT, "exit batch=0")
    assert run_query(upper(source(spark, bs, src).repartition(4)), sink_options(bs, dst), ckpt) is not None
    quiet(spark)
    arm_fault(SPARK_BEFORE_COMMIT, "")
    assert open_transaction_in(bs, dst, [0, 1]), "the dead tasks' transactions are open"
    one_key = upper(source(spark, bs, src)).selectExpr("'k' AS key", "value").repartition(2, "key")
    error = run_query(one_key, sink_options(bs, dst), ckpt)
    assert error is None, str(error)[:3000]
    finished = time.monotonic()
    wait_for(lambda: not open_transaction_in(bs, dst, [0, 1]), timeout=10, interval=0.2,
             what="the output's last stable offset to reach its high watermark")
    assert time.monotonic() - finished < 10
    assert_exactly_once(read_topic(bs, dst, [0, 1]), committed)


def test_a_batch_write_retried_after_its_commit_writes_once(spark: Any, sink_target: Target, arm_fault: Arm) -> None:
    bs = sink_target.bootstrap_servers
    dst = new_topic(bs, 1)
    arm_fault(SPARK_AFTER_COMMIT, "exit attempt=0")
    frame = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(90)], "key string, value string").repartition(3)
    frame.write.format("onceflow").mode("append").option("kafka.bootstrap.servers", bs).option("topic", dst).save()
    assert sorted(read_topic(bs, dst, [0])) == sorted(f"v{i}".encode() for i in range(90))
    assert len(uncommitted(bs, dst, [0])) == 90, "each task's rows in one transaction, none aborted"
    topics = AdminClient({"bootstrap.servers": bs}).list_topics(timeout=TIMEOUT).topics
    assert not [t for t in topics if t.startswith("onceflow-progress-job-")], "the job's progress topic is deleted"


def test_foreach_batch_refuses_a_second_write_under_the_same_name(spark: Any, sink_target: Target) -> None:
    import onceflow.spark

    bs = sink_target.bootstrap_servers
    src, debits, credits = new_topic(bs, 1), new_topic(bs, 1), new_topic(bs, 1)
    inputs(bs, src, 40, per_txn=40)

    def same_name(df: Any, batch_id: int) -> None:
        onceflow.spark.write_exactly_once(upper(df), batch_id, bootstrap_servers=bs, topic=debits, name="ledger")
        onceflow.spark.write_exactly_once(upper(df), batch_id, bootstrap_servers=bs, topic=credits, name="ledger")

    def unnamed_twice(df: Any, batch_id: int) -> None:
        for dst in (debits, credits):
            upper(df).write.format("onceflow").mode("append").option("kafka.bootstrap.servers", bs).option("topic", dst).save()

    for function, why in ((same_name, "called twice with name 'ledger'"), (unnamed_twice, "written twice")):
        error = finished(source(spark, bs, src).writeStream.foreachBatch(function)
                         .option("checkpointLocation", checkpoint()).trigger(availableNow=True).start())
        assert error is not None and why in str(error), str(error)[:6000]
    assert len(read_topic(bs, debits, [0])) == 2 * 40, "each query's first write went through"
    assert read_topic(bs, credits, [0]) == [], "no second write did"


def test_a_checkpoint_older_than_the_output_is_refused(spark: Any, sink_target: Target) -> None:
    """Micro-batches 1 and 2 taken out of the checkpoint (as if restored from a copy made after 0): the
    restarted query plans a micro-batch 1 of its own, while the sink already wrote 2."""
    bs = sink_target.bootstrap_servers
    src, dst = new_topic(bs, 1), new_topic(bs, 1)
    batches = [[f"b{t}-{i}".encode() for i in range(40)] for t in range(3)]
    committed = transactional_writes(bs, src, [(values, True) for values in batches])
    ckpt = checkpoint()
    assert run_query(upper(source(spark, bs, src, maxOffsetsPerTrigger="41")), sink_options(bs, dst), ckpt) is None
    assert_exactly_once(read_topic(bs, dst, [0]), committed)
    for log in ("offsets", "commits"):
        for batch in ("1", "2"):
            os.unlink(os.path.join(ckpt, log, batch))
            os.unlink(os.path.join(ckpt, log, f".{batch}.crc"))
    error = run_query(upper(source(spark, bs, src)), sink_options(bs, dst), ckpt)
    assert error is not None and "older than the output" in str(error), error
    assert_exactly_once(read_topic(bs, dst, [0]), committed)


def test_a_progress_topic_that_would_expire_is_refused(target: Target) -> None:
    """Run without Spark: a task's Kafka side against a progress topic someone set to delete old records."""
    from onceflow.spark import progress
    from onceflow.spark.protocol import SinkRefusal

    bs = target.bootstrap_servers
    dst = new_topic(bs, 1)
    options = parse_sink_options({"kafka.bootstrap.servers": bs, "topic": dst}, streaming=True)
    query = str(uuid.uuid4())

    def write(batch: int) -> Any:
        return sink.write_exactly_once(iter([pa.RecordBatch.from_pydict({"value": [f"b{batch}"]})]),
                                       TaskIdentity(query, batch, 0, "run", 0, None, batch), options)

    assert write(0).action == "written"
    admin = AdminClient({"bootstrap.servers": bs})
    resource = ConfigResource(ResourceType.TOPIC, progress_topic(query), incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT)
    # Kafka applies a topic's config through its metadata log: DescribeConfigs may show the old
    # policy for a moment after AlterConfigs has answered.
    described = ConfigResource(ResourceType.TOPIC, progress_topic(query))
    wait_for(lambda: admin.describe_configs([described])[described].result(TIMEOUT)["cleanup.policy"].value == "delete",
             timeout=TIMEOUT, interval=0.1, what="cleanup.policy=delete described")
    progress._compacted.clear()  # as in a new worker
    sink._room.clear()
    with pytest.raises(SinkRefusal, match="cleanup.policy=delete"):
        write(1)
    assert read_topic(bs, dst, [0]) == [b"b0"]


# -- without Spark ------------------------------------------------------------------------------


def slow_rows(values: list[str], gate: threading.Event) -> Iterator[pa.RecordBatch]:
    """The task's rows, the second half only once ``gate`` opens."""
    half = len(values) // 2
    yield pa.RecordBatch.from_pydict({"value": values[:half]})
    assert gate.wait(60)
    yield pa.RecordBatch.from_pydict({"value": values[half:]})


@pytest.mark.parametrize("rival_stage", [1, 2], ids=["a-copy", "another-write"])
def test_a_speculative_copy_fenced_by_its_rival_reports_the_rivals_outcome(sink_target: Target, rival_stage: int) -> None:
    """A copy of the task (same stage) takes its rival's outcome; a task of another write of the same
    sink in the micro-batch (another stage, running beside it) is refused, not taken for a copy."""
    from onceflow.spark.protocol import SinkRefusal

    bs = sink_target.bootstrap_servers
    dst = new_topic(bs, 1)
    options = parse_sink_options({"kafka.bootstrap.servers": bs, "topic": dst}, streaming=True)
    query = str(uuid.uuid4())
    values = [f"v{i}" for i in range(100)]
    outcomes: dict[int, Any] = {}
    errors: list[BaseException] = []
    gate = threading.Event()

    def attempt(number: int, rows: Iterator[pa.RecordBatch]) -> None:
        try:
            outcomes[number] = sink.write_exactly_once(rows, TaskIdentity(query, 0, 0, "run", number, None, 1), options)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    first = threading.Thread(target=attempt, args=(0, slow_rows(values, gate)))
    first.start()
    wait_for(lambda: open_transaction_in(bs, dst, [0]), timeout=60, interval=0.05, what="the first attempt writing")
    # fences the first, writes, commits
    outcomes[1] = sink.write_exactly_once(iter([pa.RecordBatch.from_pydict({"value": values})]),
                                          TaskIdentity(query, 0, 0, "run", 1, None, rival_stage), options)
    gate.set()
    first.join(120)
    assert outcomes[1].action == "written"
    if rival_stage == 2:
        assert len(errors) == 1 and isinstance(errors[0], SinkRefusal) and "written twice" in str(errors[0]), errors
    else:
        assert not errors, errors
        assert outcomes[0].action == "rival", outcomes
    assert sorted(read_topic(bs, dst, [0])) == sorted(v.encode() for v in values)
    assert_no_duplicates(read_topic(bs, dst, [0]))


@pytest.mark.parametrize("setting", ["kafka.transaction.timeout.ms=1000000", "kafka.max.in.flight=6",
                                     "kafka.message.timeout.ms=700000", "kafka.enable.idempotence=nope",
                                     "kafka.linger.ms=soon", "deliveryGuarantee="])
def test_producer_settings_every_task_would_refuse_are_refused_before_any_data_moves(setting: str, target: Target) -> None:
    from onceflow.spark.options import OptionError

    name, _, value = setting.partition("=")
    options = {"kafka.bootstrap.servers": target.bootstrap_servers, "topic": "t", name: value}
    with pytest.raises(OptionError, match=name.replace(".", r"\.")):
        sink.check_client_settings(parse_sink_options(options, streaming=True))


def task_rows(values: list[tuple[str, str]]) -> Iterator[pa.RecordBatch]:
    """One task's rows: (topic, value) pairs, a ``topic`` column."""
    yield pa.RecordBatch.from_pydict({"topic": [t for t, _ in values], "value": [v for _, v in values]})


def test_a_replay_with_the_same_rows_in_another_order_and_topics_per_row_writes_nothing_twice(sink_target: Target) -> None:
    """Without Spark: the slot's record holds no topic of its own, and the rows' fingerprint no order."""
    bs = sink_target.bootstrap_servers
    a, b = new_topic(bs, 1), new_topic(bs, 1)
    options = parse_sink_options({"kafka.bootstrap.servers": bs}, streaming=True)
    query = str(uuid.uuid4())
    rows = [(a if i % 3 else b, f"v{i}") for i in range(10)]
    first = sink.write_exactly_once(task_rows(rows), TaskIdentity(query, 0, 0, "run-1", 0, None, 1), options)
    again = sink.write_exactly_once(task_rows(rows[::-1]), TaskIdentity(query, 0, 0, "run-2", 0, None, 1), options)
    assert (first.action, again.action) == ("written", "confirmed")
    assert sorted(read_topic(bs, a, [0]) + read_topic(bs, b, [0])) == sorted(v.encode() for _, v in rows)


def test_a_progress_topic_deleted_under_a_running_query_is_refused_and_a_late_first_write_creates_it(
        sink_target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Spark: a task that finds its progress topic deleted since it knew it refuses (its
    records, which rows were written, are gone); a restart creates it afresh, as does a query whose
    first micro-batches wrote nothing (no rows, or no tasks: nothing created it)."""
    from onceflow.spark import progress
    from onceflow.spark.protocol import SinkRefusal

    monkeypatch.setattr(progress, "TIMEOUT_S", 5.0)  # how long a read of the deleted topic is retried
    bs = sink_target.bootstrap_servers
    dst = new_topic(bs, 1)
    query = str(uuid.uuid4())

    def write(batch: int, run: str, query: str = query) -> Any:
        options = parse_sink_options({"kafka.bootstrap.servers": bs, "topic": dst}, streaming=True)
        return sink.write_exactly_once(iter([pa.RecordBatch.from_pydict({"value": [f"b{batch}"]})]),
                                       TaskIdentity(query, batch, 0, run, 0, None, batch), options)

    admin = AdminClient({"bootstrap.servers": bs})

    def delete_progress() -> None:
        for future in admin.delete_topics([progress_topic(query)]).values():
            future.result(TIMEOUT)
        wait_for(lambda: ProgressStore(bs, {}, progress_topic(query)).partition_count() == 0, timeout=TIMEOUT,
                 what="the progress topic to be gone")

    assert write(0, "r1").action == "written"
    delete_progress()
    with pytest.raises(SinkRefusal, match="was deleted under micro-batch 1 "):
        write(1, "r1")
    assert ProgressStore(bs, {}, progress_topic(query)).partition_count() == 0, "not created by a refusing task"
    assert write(1, "r2").action == "written", "a restart (in the same process) creates it"
    delete_progress()
    assert write(2, "r3").action == "written", "deleted between runs: created, whatever this process knew"
    assert write(3, "r1", query=str(uuid.uuid4())).action == "written", "a first write at micro-batch 3"
    assert read_topic(bs, dst, [0]) == [b"b0", b"b1", b"b2", b"b3"]


def test_tasks_without_rows_end_empty_before_anything_created_the_progress_topic(sink_target: Target) -> None:
    """Without Spark: a first micro-batch whose tasks have no rows (a filter, an aggregation that
    emits nothing yet), and a name's first write of an empty DataFrame, find no progress topic."""
    bs = sink_target.bootstrap_servers
    dst = new_topic(bs, 1)
    options = parse_sink_options({"kafka.bootstrap.servers": bs, "topic": dst}, streaming=True)
    query = str(uuid.uuid4())
    for identity in (TaskIdentity(query, 0, 0, "run", 0, None, 1), TaskIdentity(query, 0, 1, "run", 0, None, 1),
                     TaskIdentity(query, 3, 0, "run", 0, "named", 7)):
        assert sink.write_exactly_once(iter(()), identity, options).action == "empty"
    rows = iter([pa.RecordBatch.from_pydict({"value": ["b1"]})])
    assert sink.write_exactly_once(rows, TaskIdentity(query, 1, 0, "run", 0, None, 2), options).action == "written"
    assert read_topic(bs, dst, [0]) == [b"b1"]
