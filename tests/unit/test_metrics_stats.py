"""The metrics' building blocks: error codes found anywhere in a response, Prometheus-shaped
histograms, the per-request counts, and JSON log lines with the fields a component attached."""

from __future__ import annotations

import datetime
import json
import logging

from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.response import PartitionProduceResponse, ProduceResponse, TopicProduceResponse
from kio.schema.txn_offset_commit.v3.response import (
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from kio.static.primitive import i32, i32Timedelta, i64

from onceflow.logformat import JsonFormatter
from onceflow.metrics.stats import BATCH_BUCKETS, Histogram, RequestStats, error_codes


def _produce_response(*codes: ErrorCode) -> ProduceResponse:
    partitions = tuple(PartitionProduceResponse(index=i32(i), error_code=code, base_offset=i64(0), log_append_time=None,
                                                log_start_offset=i64(0), record_errors=(), error_message=None)
                       for i, code in enumerate(codes))
    return ProduceResponse(responses=(TopicProduceResponse(name="t", partition_responses=partitions),),
                           throttle_time=i32Timedelta.parse(datetime.timedelta(0)))


def test_every_nested_error_code_is_found() -> None:
    response = _produce_response(ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.none)
    assert sorted(error_codes(response)) == sorted([0, int(ErrorCode.not_leader_or_follower), 0])
    txn = TxnOffsetCommitResponse(throttle_time=i32Timedelta.parse(datetime.timedelta(0)), topics=(TxnOffsetCommitResponseTopic(
        name="t", partitions=(TxnOffsetCommitResponsePartition(partition_index=i32(0),
                                                              error_code=ErrorCode.illegal_generation),)),))
    assert list(error_codes(txn)) == [int(ErrorCode.illegal_generation)]


def test_request_stats_count_requests_errors_latency_and_fetch_isolation() -> None:
    stats = RequestStats()
    stats.received(0, 9, 100, "app", "127.0.0.1", None)
    stats.answered(0, _produce_response(ErrorCode.none, ErrorCode.corrupt_message), 1.5, 40)
    assert stats.requests == {(0, 9): 1} and stats.bytes_in == 104 and stats.bytes_out == 40
    assert stats.errors == {(0, 0): 1, (0, int(ErrorCode.corrupt_message)): 1}
    assert stats.latency_ms[0].count == 1 and stats.latency_ms[0].sum == 1.5

    class Fetch:
        isolation_level = 1

    stats.received(1, 11, 50, "reader", "127.0.0.1", Fetch())
    assert stats.fetch_isolation == {("reader", "127.0.0.1"): 1}


def test_histograms_are_cumulative_with_inf_last() -> None:
    hist = Histogram(BATCH_BUCKETS)
    for value in (1, 1, 3, 2000):
        hist.observe(value)
    buckets = dict(hist.cumulative())
    assert buckets["1.0"] == 2 and buckets["2.0"] == 2 and buckets["4.0"] == 3 and buckets["1024.0"] == 3
    assert buckets["+Inf"] == 4 and hist.count == 4 and hist.sum == 2005


def test_json_log_lines_carry_the_fields_a_component_attached() -> None:
    record = logging.LogRecord("onceflow.coordinator", logging.DEBUG, __file__, 1, "txn %r: %s", ("t1", "Ongoing"), None)
    record.transactional_id = "t1"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "txn 't1': Ongoing" and line["transactional_id"] == "t1"
    assert line["level"] == "DEBUG" and line["logger"] == "onceflow.coordinator" and line["time"].endswith("+00:00")
