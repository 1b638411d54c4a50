"""The DeleteRecords handler (KIP-107) against a hand-written context (``context.InMemoryContext``):
every version, each partition's outcome as Kafka's ReplicaManager answers it, and nothing touched
by a refused one."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType
from kio.static.primitive import i32, i32Timedelta, i64

from onceflow.broker.handlers.produce import handle_delete_records
from onceflow.coordinator import OFFSETS_TOPIC
from onceflow.protocol import apis
from onceflow.protocol.errors import ErrorCode
from onceflow.records.builder import build_batch

from .context import T0, Conn, InMemoryContext, request


def delete_request(version: int, *topics: tuple[str, list[tuple[int, int]]]) -> Any:
    m = load_payload_module(apis.DELETE_RECORDS, version, EntityType.request)
    return m.DeleteRecordsRequest(
        topics=tuple(m.DeleteRecordsTopic(name=name, partitions=tuple(
            m.DeleteRecordsPartition(partition_index=i32(p), offset=i64(o)) for p, o in parts)) for name, parts in topics),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)))


def answers(response: Any) -> list[tuple[str, int, int, ErrorCode]]:
    return [(t.name, p.partition_index, p.low_watermark, p.error_code) for t in response.topics for p in t.partitions]


def write_durably(ctx: InMemoryContext, partition: int, count: int) -> None:
    log = ctx.registry.topics["t"].partitions[partition]
    for i in range(count):
        log.append_produced(build_batch([(None, b"%d" % i)], T0), T0)
    ctx.durability.mark_dirty(log)
    ctx.durability.flush()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_each_partition_is_answered_with_its_low_watermark_or_kafkas_error(ctx: InMemoryContext, version: int) -> None:
    write_durably(ctx, 0, 5)
    write_durably(ctx, 1, 3)
    body = delete_request(version, ("t", [(0, 2), (1, -1), (2, 0)]), ("nope", [(0, 1)]))
    assert answers(handle_delete_records(ctx, request(body), Conn())) == [
        ("t", 0, 2, ErrorCode.none),
        ("t", 1, 3, ErrorCode.none),  # -1: the high watermark
        ("t", 2, -1, ErrorCode.unknown_topic_or_partition),
        ("nope", 0, -1, ErrorCode.unknown_topic_or_partition),
    ]
    partitions = ctx.registry.topics["t"].partitions
    assert (partitions[0].log_start_offset, partitions[1].log_start_offset) == (2, 3)


def test_an_offset_out_of_range_touches_nothing(ctx: InMemoryContext) -> None:
    write_durably(ctx, 0, 5)
    log = ctx.registry.topics["t"].partitions[0]
    log.append_produced(build_batch([(None, b"not durable")], T0), T0)
    body = delete_request(2, ("t", [(0, 6), (1, -7)]))
    assert answers(handle_delete_records(ctx, request(body), Conn())) == [
        ("t", 0, -1, ErrorCode.offset_out_of_range), ("t", 1, -1, ErrorCode.offset_out_of_range)]
    assert log.log_start_offset == 0


def test_compacted_and_internal_topics_are_refused(ctx: InMemoryContext) -> None:
    ctx.create_topic("compacted", 1, {"cleanup.policy": ["compact"]})
    ctx.create_topic(OFFSETS_TOPIC, 1, {"cleanup.policy": ["compact"]}, internal=True)
    body = delete_request(2, ("compacted", [(0, 0)]), (OFFSETS_TOPIC, [(0, 0)]))
    assert answers(handle_delete_records(ctx, request(body), Conn())) == [
        ("compacted", 0, -1, ErrorCode.policy_violation), (OFFSETS_TOPIC, 0, -1, ErrorCode.invalid_topic_exception)]


def test_a_partition_named_twice_is_answered_once_for_its_last_offset(ctx: InMemoryContext) -> None:
    write_durably(ctx, 0, 5)
    body = delete_request(2, ("t", [(0, 4), (0, 1)]), ("t", [(0, 3)]))
    assert answers(handle_delete_records(ctx, request(body), Conn())) == [("t", 0, 3, ErrorCode.none)]


def test_an_empty_request_gets_an_empty_answer(ctx: InMemoryContext) -> None:
    assert answers(handle_delete_records(ctx, request(delete_request(1)), Conn())) == []
