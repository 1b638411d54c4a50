"""The sink's protocol without Spark or a broker: ids, records, fingerprints, and each decision of
``protocol.plan`` and ``protocol.judge``, one case at a time (``test_sink_model`` tries them together)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from onceflow.pipelines.payments import Generated, Report, rows_by_batch
from onceflow.spark.options import OptionError, parse_sink_options
from onceflow.spark.protocol import (
    Check,
    Confirm,
    Fingerprint,
    Refuse,
    SinkRefusal,
    Skip,
    SlotRecord,
    TaskIdentity,
    Wait,
    Write,
    Written,
    judge,
    plan,
    progress_topic,
    transactional_id,
)
from onceflow.spark.sink import Message, Rows, TaskOutcome, _rows, summarize, task_identity

PREFIX = "onceflow-sink"


def task(batch: int = 5, slot: int = 0, run: str = "r2", stage: int = 7) -> TaskIdentity:
    return TaskIdentity("q", batch, slot, run, 0, None, stage)


def written(slot: int, batch: int = 5, run: str = "r1", rows: int = 10, fp: str = "f" * 32, prefix: str = PREFIX,
            stage: int = 3) -> SlotRecord:
    return SlotRecord(slot, Written(batch, run, rows, fp, prefix, stage))


def test_ids_and_progress_topics_are_stable_per_query_and_slot_and_apart_between_scopes() -> None:
    assert transactional_id(None, "q-1", 3) == "onceflow-sink-q-1-3"
    assert transactional_id("payments", "q-1", 3) == "payments-q-1-3"
    assert progress_topic("q-1") == "onceflow-progress-q-1"
    assert progress_topic("q-1", "balances") == "onceflow-progress-q-1-balances"
    assert task().progress_topic == "onceflow-progress-q"


def test_a_task_without_a_micro_batch_is_refused_with_a_hint() -> None:
    assert task_identity("q", "7", 2, 1, "run", 4) == TaskIdentity("q", 7, 2, "run", 1, None, 4)
    with pytest.raises(OptionError, match="write_exactly_once"):
        task_identity(None, "7", 0)
    with pytest.raises(OptionError, match="batch id"):
        task_identity("q", None, 0)


class TaskContextLike:
    """What the sink reads of pyspark's TaskContext: local properties and the task's numbers."""

    def __init__(self, **properties: str) -> None:
        self.properties = {"sql.streaming.queryId": "q", "streaming.sql.batchId": "7", **properties}

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802 - pyspark's name
        return self.properties.get(key)

    def partitionId(self) -> int:  # noqa: N802
        return 2

    def attemptNumber(self) -> int:  # noqa: N802
        return 0

    def stageId(self) -> int:  # noqa: N802
        return 4


RUN = "0b7c6e1e-3f7d-4b7e-9d3a-2f6c9a1d4e55"


@pytest.mark.parametrize(("properties", "run"), [
    ({"spark.jobGroup.id": RUN, "spark.job.description": f"q id = x runId = {RUN} batch = 7"}, RUN),  # Spark's own
    ({"spark.jobGroup.id": "etl", "spark.job.description": f"id = x runId = {RUN} batch = 7"}, RUN),
    ({"spark.jobGroup.id": "etl", "spark.job.description": "mine", "onceflow.runId": RUN}, RUN),  # write_exactly_once's
    ({"spark.jobGroup.id": "etl", "spark.job.description": "mine"}, None),  # setJobGroup in foreachBatch
])
def test_a_task_tells_its_run_or_refuses_exactly_once_without_one(properties: dict[str, str], run: str | None) -> None:
    from onceflow.spark.writer import _stream_task

    options = parse_sink_options({"kafka.bootstrap.servers": "x:1", "topic": "t"}, streaming=True)
    context = TaskContextLike(**properties)
    if run is None:
        with pytest.raises(SinkRefusal, match="cannot tell this run"):
            _stream_task(context, options)
    else:
        assert _stream_task(context, options).run == run
    loose = parse_sink_options({"kafka.bootstrap.servers": "x:1", "topic": "t", "deliveryGuarantee": "at-least-once"},
                               streaming=True)
    assert _stream_task(context, loose).batch_id == 7, "at-least-once needs no run"


def _messages(batches: list[pa.RecordBatch], topic_option: str | None) -> Iterator[Message]:
    """Each row as the per-row path produces it."""
    for rows in _rows(batches, topic_option):
        yield from rows.messages()


def test_rows_become_messages_column_by_column() -> None:
    batch = pa.RecordBatch.from_pydict({
        "key": [b"k1", None],
        "value": ["v1", "v2"],
        "topic": ["a", "b"],
        "partition": [3, None],
        "headers": [[{"key": "h", "value": b"x"}], None],
    })
    assert list(_messages([batch], None)) == [("a", "v1", b"k1", 3, [("h", b"x")]), ("b", "v2", None, None, None)]
    only_value = pa.RecordBatch.from_pydict({"value": [b"v"]})
    assert list(_messages([only_value], "fixed")) == [("fixed", b"v", None, None, None)]
    with pytest.raises(OptionError, match="null 'topic'"):
        list(_messages([pa.RecordBatch.from_pydict({"value": [b"v"], "topic": [None]})], None))


def test_the_fast_path_takes_the_same_rows_and_the_same_fingerprint_as_the_per_row_one() -> None:
    """Rows of one topic without partitions or headers are produced and hashed column-wise (issue 18);
    anything else row by row. Both must give what the per-row path gives: progress records keep
    fingerprints across releases and across a replay that takes the other path."""
    batches = [pa.RecordBatch.from_pydict({"key": [b"k1", None, "k3"], "value": [b"v1", b"", None]}),
               pa.RecordBatch.from_pydict({"key": [b"k4"], "value": ["v4"]}),
               pa.RecordBatch.from_pydict({"key": pa.array([], pa.binary()), "value": pa.array([], pa.binary())})]
    rows = list(_rows(batches, "t"))
    assert [len(r) for r in rows] == [3, 1] and all(r.simple for r in rows)
    fast, slow = Fingerprint(), Fingerprint()
    for r in rows:
        fast.add_columns("t", r.keys, r.values)
    slow.extend(_messages(batches, "t"))
    assert (fast.rows, fast.hex) == (slow.rows, slow.hex) == (4, fingerprint(*_messages(batches, "t")))
    with_headers = pa.RecordBatch.from_pydict({"value": [b"v"], "headers": [[{"key": "h", "value": b"x"}]]})
    assert not next(_rows([with_headers], "t")).simple
    empty_headers = pa.RecordBatch.from_pydict({"value": [b"v"], "headers": [[]]})
    assert next(_rows([empty_headers], "t")).simple, "no header on any row: the fast path"
    messages = list(_messages(batches, "t")) + list(_messages([with_headers], "t"))
    assert list(Rows.of(messages).messages()) == messages, "a task's deferred rows, as the driver writes them"
    assert list(Rows.of([]).messages()) == []


def test_outcomes_are_summed_for_the_driver_log() -> None:
    outcomes = [TaskOutcome(0, 1, 10), TaskOutcome(1, 1, 0, "confirmed"), TaskOutcome(2, 1, 0, "empty"), "not one"]
    assert summarize(outcomes) == {"tasks": 3, "rows": 10, "skipped": 1, "confirmed": 1, "empty": 1}


def test_records_round_trip_and_a_foreign_record_is_refused_not_guessed_at() -> None:
    record = written(2).confirm(task()).refuse(task(), "because")
    assert SlotRecord.decode(record.encode(), 2) == record
    assert record.key() == b"slot-2"
    assert SlotRecord.decode(SlotRecord(4).encode(), 4) == SlotRecord(4)
    for value in (b"", b"{", b'{"v":2,"slot":2}', b'{"v":1,"slot":3}', b'{"v":1,"slot":2,"written":{"batch":1}}'):
        with pytest.raises(SinkRefusal, match="does not understand"):
            SlotRecord.decode(value, 2)


def test_a_write_keeps_nothing_of_earlier_confirmations_or_refusals() -> None:
    record = written(1).confirm(task()).refuse(task(), "x").write(task(batch=6), 3, "a" * 32, PREFIX)
    assert record == SlotRecord(1, Written(6, "r2", 3, "a" * 32, PREFIX, 7))


def fingerprint(*messages: tuple[object, ...]) -> str:
    fp = Fingerprint()
    for message in messages:
        fp.add(*message)  # type: ignore[arg-type]
    return fp.hex


def test_a_fingerprint_ignores_order_counts_repeats_and_sees_every_field() -> None:
    a, b = ("t", b"v1", b"k", None, None), ("t", b"v2", b"k", None, None)
    assert fingerprint(a, b) == fingerprint(b, a)
    assert fingerprint(a, a, b) != fingerprint(a, b, b)
    assert fingerprint(a) != fingerprint(a, a)
    assert fingerprint() == "0" * 32
    assert fingerprint(("t", "v", None, None, None)) == fingerprint(("t", b"v", None, None, None)), "str is utf-8"
    variants = [("t", b"v", b"k", None, None), ("u", b"v", b"k", None, None), ("t", b"v", b"", None, None),
                ("t", b"v", None, None, None), ("t", None, b"k", None, None), ("t", b"v", b"k", 0, None),
                ("t", b"v", b"k", None, [("h", b"1")]), ("t", b"vk", None, None, None), ("tv", b"", b"k", None, None)]
    assert len({fingerprint(v) for v in variants}) == len(variants)


def test_a_fingerprint_is_the_same_in_every_version() -> None:
    """Progress records keep fingerprints: a replay compares its rows with one an older release wrote."""
    messages = [("t", b"v", b"k", None, None), ("ledger", b"1,2,-5,debit", b"2", 3, None),
                ("t", None, None, 0, [("h", b"1"), ("h2", None)]), ("t", "str", "k", None, None),
                ("t", bytearray(b"v"), memoryview(b"k"), None, None)]
    assert fingerprint(*messages) == "008fe89515d66f34b68ae40fb7a5f9fa"
    assert fingerprint(*messages[:4]) == "45d2e778808fbe0b04c037f23bb24551"  # computed before issue 18's rewrite


def test_a_fresh_micro_batch_is_written() -> None:
    assert plan(task(), PREFIX, None, {}) == Write()
    older = {0: written(0, batch=4), 1: written(1, batch=4, run="r0")}
    assert plan(task(), PREFIX, older[0], older) == Write()


def test_a_slot_that_wrote_the_micro_batch_checks_its_rows() -> None:
    own = written(0)
    assert plan(task(), PREFIX, own, {0: own}) == Check(own.written, same_run=False, same_stage=False)  # type: ignore[arg-type]
    mine = written(0, run="r2", stage=7)
    assert plan(task(), PREFIX, mine, {}) == Check(mine.written, same_run=True, same_stage=True)  # type: ignore[arg-type]


def test_a_second_write_of_the_same_scope_in_one_micro_batch_is_refused() -> None:
    other_stage = written(1, run="r2", stage=6)
    assert isinstance(plan(task(), PREFIX, None, {1: other_stage}), Refuse)
    decision = plan(task(slot=1), PREFIX, other_stage, {})
    assert isinstance(decision, Refuse) and "twice" in decision.reason


def test_slots_an_earlier_run_wrote_must_confirm_before_the_others_write() -> None:
    others = {1: written(1), 2: written(2), 3: written(3, batch=4)}
    assert plan(task(), PREFIX, None, others) == Wait(frozenset({1, 2}))
    others[1] = others[1].confirm(task())
    assert plan(task(), PREFIX, None, others) == Wait(frozenset({2}))
    others[2] = others[2].confirm(task(run="r9"))  # confirmed by another run: not enough
    assert plan(task(), PREFIX, None, others) == Wait(frozenset({2}))
    others[2] = others[2].confirm(task())
    assert plan(task(), PREFIX, None, others) == Write()
    assert plan(task(), PREFIX, None, {1: written(1)}, accept_changed=5) == Write(), "acceptChangedReplay"
    assert plan(task(), PREFIX, None, {1: written(1, run="r2", stage=7)}) == Write(), "written by this run: no wait"


def test_a_refusal_of_this_run_spreads_and_an_older_one_does_not() -> None:
    others = {1: written(1).refuse(task(), "split changed")}
    assert plan(task(), PREFIX, None, others) == Refuse("split changed")
    others = {1: written(1).refuse(task(run="r1"), "old")}
    assert plan(task(), PREFIX, None, others) == Wait(frozenset({1}))


def test_a_checkpoint_older_than_the_output_is_refused() -> None:
    decision = plan(task(batch=5), PREFIX, None, {2: written(2, batch=6)})
    assert isinstance(decision, Refuse) and "older than the output" in decision.reason
    assert isinstance(plan(task(batch=5), PREFIX, written(0, batch=9), {}), Refuse)


def test_a_changed_transactional_id_prefix_is_refused() -> None:
    decision = plan(task(), "new-prefix", written(0, batch=3), {})
    assert isinstance(decision, Refuse) and "'onceflow-sink'" in decision.reason


def test_judging_rows_against_what_the_slot_wrote() -> None:
    w = written(0).written
    assert w is not None
    earlier = Check(w, same_run=False, same_stage=False)
    assert judge(task(), earlier, 10, "f" * 32) == Confirm()
    refused = judge(task(), earlier, 5, "e" * 32)
    assert isinstance(refused, Refuse)
    assert "split into tasks differently" in refused.reason and "acceptChangedReplay=5" in refused.reason
    same_count = judge(task(), earlier, 10, "e" * 32)
    assert isinstance(same_count, Refuse) and "not deterministic" in same_count.reason
    accepted = judge(task(), earlier, 5, "e" * 32, accept_changed=5)
    assert isinstance(accepted, Skip) and accepted.warning
    assert judge(task(), Check(w, same_run=True, same_stage=True), 10, "f" * 32) == Skip()
    retry = judge(task(), Check(w, same_run=True, same_stage=True), 9, "e" * 32)
    assert isinstance(retry, Skip) and "not deterministic" in (retry.warning or "")
    assert isinstance(judge(task(), Check(w, same_run=True, same_stage=False), 10, "f" * 32), Refuse)


def test_the_payments_checks_count_money_created_or_destroyed() -> None:
    generated = Generated(committed={1: (0, 1, 50), 2: (1, 2, 20)}, aborted={3})
    assert generated.expected_balances() == {0: -50, 1: 30, 2: 20}
    assert Report(2, 1).ok
    broken = Report(2, 1, duplicates=1, missing=2, aborted_seen=1, wrong_balances=3, balance_sum=-5)
    assert not broken.ok and len(broken.problems()) == 5
    lines = [{"query": "ledger", "batch": 0, "rows": 5}, {"query": "ledger", "batch": 0, "rows": 5},
             {"query": "balances", "batch": 0, "rows": 9}, {"event": "started"}]
    assert rows_by_batch(lines, "ledger") == {0: 5}, "a re-run micro-batch replaces its earlier count"


def test_coordinator_calls_retry_what_says_try_again_and_nothing_else() -> None:
    from confluent_kafka import KafkaError, KafkaException

    from onceflow.spark.sink import _call

    for code in (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                 KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.CONCURRENT_TRANSACTIONS):
        failures = [KafkaException(KafkaError(code))] * 3

        def call() -> str:
            if failures:
                raise failures.pop()
            return "done"

        assert _call(call, "test") == "done"
    for code in (KafkaError._FENCED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED):
        def refused(code: int = code) -> None:
            raise KafkaException(KafkaError(code))

        with pytest.raises(KafkaException):
            _call(refused, "test")

    def always() -> None:
        raise KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))

    with pytest.raises(KafkaException):
        _call(always, "test", timeout_s=0.3)


def test_the_plan_kept_in_the_offset_log_round_trips_beside_sparks_offsets() -> None:
    from onceflow.spark.source import BatchPlan, from_spark_offsets, to_spark_offsets

    plan = BatchPlan(4, {("t", 3): 0}, {"t": "id"})
    offsets = to_spark_offsets({("t", 0): 5, ("t", 3): 2}, plan)
    assert list(offsets) == ["t", "$onceflow"]
    assert from_spark_offsets(offsets) == {("t", 0): 5, ("t", 3): 2}
    assert BatchPlan.from_offsets(offsets) == plan
    assert BatchPlan.from_offsets({"t": {"0": 5}}) is None, "an offset log written before plans were pinned"
