"""The sink's plain parts, without Spark or a broker: ids, task identity, rows to messages."""

from __future__ import annotations

import pyarrow as pa
import pytest

from onceflow.pipelines.payments import Generated, Report, rows_by_batch
from onceflow.spark.options import OptionError
from onceflow.spark.sink import TaskIdentity, TaskOutcome, _messages, summarize, task_identity, transactional_id


def test_transactional_ids_are_stable_per_query_and_partition_and_apart_between_queries() -> None:
    assert transactional_id(None, "q-1", 3) == "onceflow-sink-q-1-3"
    assert transactional_id("payments", "q-1", 3) == "payments-q-1-3"
    assert transactional_id(None, "q-1", 3) != transactional_id(None, "q-2", 3)


def test_a_task_without_a_micro_batch_is_refused_with_a_hint() -> None:
    assert task_identity("q", "7", 2, 1) == TaskIdentity("q", 7, 2, 1)
    with pytest.raises(OptionError, match="write_exactly_once"):
        task_identity(None, "7", 0)
    with pytest.raises(OptionError, match="batch id"):
        task_identity("q", None, 0)


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


def test_outcomes_are_summed_for_the_driver_log() -> None:
    outcomes = [TaskOutcome(0, 1, 10), TaskOutcome(1, 1, 0, skipped=True), "not an outcome"]
    assert summarize(outcomes) == {"tasks": 2, "rows": 10, "skipped": 1}


def test_the_payments_checks_count_money_created_or_destroyed() -> None:
    generated = Generated(committed={1: (0, 1, 50), 2: (1, 2, 20)}, aborted={3})
    assert generated.expected_balances() == {0: -50, 1: 30, 2: 20}
    assert Report(2, 1).ok
    broken = Report(2, 1, duplicates=1, missing=2, aborted_seen=1, wrong_balances=3, balance_sum=-5)
    assert not broken.ok and len(broken.problems()) == 5
    lines = [{"query": "ledger", "batch": 0, "rows": 5}, {"query": "ledger", "batch": 0, "rows": 5},
             {"query": "balances", "batch": 0, "rows": 9}, {"event": "started"}]
    assert rows_by_batch(lines, "ledger") == {0: 5}, "a re-run micro-batch replaces its earlier count"
