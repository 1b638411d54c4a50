"""The Produce handler against a hand-written context (``context.InMemoryContext``): the
Appender's outcomes, as the answer carries them, by acks."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from typing import Any

import pytest
from kio.static.primitive import i32Timedelta

from onceflow.broker.handlers.produce import handle_produce
from onceflow.coordinator import OFFSETS_TOPIC
from onceflow.protocol.errors import ErrorCode
from onceflow.records.builder import build_batch
from tests.support.wire import produce_request

from .context import T0, Conn, InMemoryContext, request, settle


def produce(ctx: InMemoryContext, body: Any, conn: Conn | None = None) -> Any:
    """The handler's return: a response, None (acks=0), or an awaitable of a response."""
    return handle_produce(ctx, request(body), conn or Conn())


def outcome(response: Any) -> tuple[ErrorCode, int]:
    p = response.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def record(value: bytes = b"v") -> bytes:
    return build_batch([(None, value)], T0)


def txn_record() -> bytes:
    return build_batch([(None, b"t")], T0, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)


def run(scenario: Any) -> Any:
    return asyncio.run(scenario())


def test_an_unknown_topic_or_partition_is_answered_unknown_topic_or_partition(ctx: InMemoryContext) -> None:
    async def scenario() -> list[tuple[ErrorCode, int]]:
        return [outcome(produce(ctx, produce_request("nope", record()))),
                outcome(produce(ctx, produce_request("t", record(), partition=2)))]

    assert run(scenario) == [(ErrorCode.unknown_topic_or_partition, -1)] * 2
    assert not ctx.durability.dirty, "nothing was written"


def test_an_internal_topic_is_closed_to_clients(ctx: InMemoryContext) -> None:
    ctx.appender.internal_partition(OFFSETS_TOPIC, 0)

    async def scenario() -> Any:
        return produce(ctx, produce_request(OFFSETS_TOPIC, record()))

    p = run(scenario).responses[0].partition_responses[0]
    assert (p.error_code, p.error_message) == (ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {OFFSETS_TOPIC}")


def test_acks_other_than_minus_one_zero_or_one_are_refused(ctx: InMemoryContext) -> None:
    async def scenario() -> tuple[ErrorCode, int]:
        return outcome(produce(ctx, produce_request("t", record(), acks=2)))

    assert run(scenario) == (ErrorCode.invalid_required_acks, -1)


def test_acks_1_is_answered_at_once_before_the_write_is_durable(ctx: InMemoryContext) -> None:
    partition = ctx.registry.topics["t"].partitions[0]

    async def scenario() -> list[tuple[ErrorCode, int]]:
        return [outcome(produce(ctx, produce_request("t", record(), acks=1))) for _ in range(2)]

    assert run(scenario) == [(ErrorCode.none, 0), (ErrorCode.none, 1)]
    assert partition.log_end_offset == 2 and partition.high_watermark == 0, "in the log, not yet durable (nor visible)"
    assert partition in ctx.durability.dirty, "group commit will flush it"


def test_acks_0_is_never_answered_and_a_failure_closes_the_connection(ctx: InMemoryContext) -> None:
    async def scenario() -> tuple[Any, bool, Any, bool]:
        ok, bad = Conn(), Conn()
        written = produce(ctx, produce_request("t", record(), acks=0), ok)
        refused = produce(ctx, produce_request("nope", record(), acks=0), bad)
        return written, ok.closed, refused, bad.closed

    assert run(scenario) == (None, False, None, True)
    assert ctx.registry.topics["t"].partitions[0].log_end_offset == 1


def test_acks_all_is_answered_once_the_write_is_durable(ctx: InMemoryContext) -> None:
    async def scenario() -> tuple[ErrorCode, int]:
        answer = asyncio.ensure_future(produce(ctx, produce_request("t", record())))
        await settle()
        assert not answer.done(), "not on disk yet"
        ctx.durability.flush()
        return outcome(await asyncio.wait_for(answer, 5))

    assert run(scenario) == (ErrorCode.none, 0)
    assert ctx.registry.topics["t"].partitions[0].high_watermark == 1


def test_acks_all_whose_flush_fails_is_a_storage_error(ctx: InMemoryContext) -> None:
    async def scenario() -> tuple[ErrorCode, int]:
        answer = asyncio.ensure_future(produce(ctx, produce_request("t", record())))
        await settle()
        ctx.durability.flush(OSError("EIO"))
        return outcome(await asyncio.wait_for(answer, 5))

    assert run(scenario) == (ErrorCode.kafka_storage_error, -1)


def test_acks_all_not_durable_by_the_request_timeout_is_request_timed_out(ctx: InMemoryContext) -> None:
    body = dataclasses.replace(produce_request("t", record()), timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=5)))

    async def scenario() -> tuple[ErrorCode, int]:
        return outcome(await asyncio.wait_for(produce(ctx, body), 5))

    assert run(scenario) == (ErrorCode.request_timed_out, -1)


def test_a_transactional_batch_needs_the_requests_transactional_id(ctx: InMemoryContext) -> None:
    async def scenario() -> tuple[ErrorCode, int]:
        return outcome(produce(ctx, produce_request("t", txn_record(), acks=1)))

    assert run(scenario) == (ErrorCode.transactional_id_authorization_failed, -1)


@pytest.mark.parametrize(("verdict", "answered"), [
    (ErrorCode.none, ErrorCode.none),
    (ErrorCode.invalid_txn_state, ErrorCode.invalid_txn_state),
    (ErrorCode.transaction_abortable, ErrorCode.invalid_txn_state),  # Produce v9 does not know TRANSACTION_ABORTABLE
    (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch),
    (ErrorCode.concurrent_transactions, ErrorCode.not_enough_replicas),  # retriable, as a produce error
])
def test_a_transactional_batch_is_verified_with_the_coordinator(ctx: InMemoryContext, verdict: ErrorCode,
                                                                 answered: ErrorCode) -> None:
    ctx.txns.verdict = verdict

    async def scenario() -> ErrorCode:
        return outcome(produce(ctx, produce_request("t", txn_record(), acks=1, transactional_id="tx")))[0]

    assert run(scenario) == answered
