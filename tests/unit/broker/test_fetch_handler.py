"""The Fetch handler against a hand-written context (``context.InMemoryContext``)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.static.primitive import i32, i32Timedelta, i64

from onceflow.broker.handlers.fetch import handle_fetch
from onceflow.protocol.errors import ErrorCode
from onceflow.records.builder import build_batch

from .context import T0, Conn, InMemoryContext, request, settle


def fetch_request(topic: str, offset: int, partition: int = 0, max_wait_ms: int = 0) -> FetchRequest:
    return FetchRequest(max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)), min_bytes=i32(1),
                        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
                            partition=i32(partition), fetch_offset=i64(offset), partition_max_bytes=i32(1 << 20)),)),),
                        forgotten_topics_data=())


def first(response: Any) -> Any:
    return response.responses[0].partitions[0]


def write_durably(ctx: InMemoryContext, count: int) -> None:
    partition = ctx.registry.topics["t"].partitions[0]
    for i in range(count):
        partition.append_produced(build_batch([(None, b"%d" % i)], T0), T0)
    ctx.durability.mark_dirty(partition)
    ctx.durability.flush()


def test_a_fetch_beyond_the_end_is_offset_out_of_range(ctx: InMemoryContext) -> None:
    write_durably(ctx, 2)
    p = first(handle_fetch(ctx, request(fetch_request("t", 5)), Conn()))
    # As Kafka answers it: no offsets (-1) with the error.
    assert (p.error_code, p.high_watermark, p.log_start_offset, p.records) == (ErrorCode.offset_out_of_range, -1, -1, b"")


def test_an_unknown_topic_or_partition_is_answered_so(ctx: InMemoryContext) -> None:
    assert first(handle_fetch(ctx, request(fetch_request("nope", 0)), Conn())).error_code is ErrorCode.unknown_topic_or_partition
    assert first(handle_fetch(ctx, request(fetch_request("t", 0, partition=2)), Conn())).error_code is ErrorCode.unknown_topic_or_partition


def test_a_fetch_returns_what_is_durable_and_nothing_beyond(ctx: InMemoryContext) -> None:
    write_durably(ctx, 2)
    partition = ctx.registry.topics["t"].partitions[0]
    partition.append_produced(build_batch([(None, b"not yet")], T0), T0)  # in the log, not durable
    p = first(handle_fetch(ctx, request(fetch_request("t", 0)), Conn()))
    assert (p.error_code, p.high_watermark, p.log_start_offset) == (ErrorCode.none, 2, 0)
    assert b"not yet" not in bytes(p.records) and len(p.records) > 0


def test_a_fetch_at_the_end_waits_for_the_high_watermark_to_move(ctx: InMemoryContext) -> None:
    write_durably(ctx, 1)

    async def scenario() -> Any:
        answer = asyncio.ensure_future(handle_fetch(ctx, request(fetch_request("t", 1, max_wait_ms=5_000)), Conn()))
        await settle()
        assert not answer.done(), "nothing to return yet: a long poll"
        write_durably(ctx, 1)
        return first(await asyncio.wait_for(answer, 5))

    p = asyncio.run(scenario())
    assert (p.error_code, p.high_watermark) == (ErrorCode.none, 2) and len(p.records) > 0
