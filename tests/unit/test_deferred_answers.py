"""Answers that come later, which the server waits on: an acks=all Produce, answered
once every partition's write is durable or at the request's timeout (REQUEST_TIMED_OUT for a write
still waiting, KAFKA_STORAGE_ERROR for one whose flush failed, the others as they were), and a
coordinator's answer, once it calls back."""

from __future__ import annotations

import asyncio
from typing import Any

from onceflow.broker.appender import PartitionResult, when_all_durable
from onceflow.broker.handlers.common import via_callback
from onceflow.broker.handlers.produce import _response
from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.framing import parse_request
from onceflow.records.builder import build_batch
from tests.support.wire import encode_request, produce_request


def request() -> Any:
    frame = encode_request(produce_request("t", build_batch([(None, b"v")], 1_700_000_000_000)), 7)
    return parse_request(memoryview(frame)[4:])


def errors(response: Any) -> list[ErrorCode]:
    return [p.error_code for t in response.responses for p in t.partition_responses]


class Waits:
    """Stands in for group commit's ``on_durable``: the test says when each write is durable."""

    def __init__(self) -> None:
        self.waiters: list[Any] = []

    def __call__(self, partition: Any, offset: int, waiter: Any) -> None:
        self.waiters.append(waiter)


def outcomes_of(count: int) -> list[PartitionResult]:
    outcomes = [PartitionResult(i) for i in range(count)]
    for out in outcomes:
        out.log, out.durable_at = object(), 1
    return outcomes


def respond_when_durable(outcomes: list[PartitionResult], waits: Waits, timeout_ms: int) -> Any:
    """The Produce answer as the handler gives it: the Appender's wait, then the response."""
    results = [("t", outcomes)]
    return asyncio.ensure_future(via_callback(lambda done: when_all_durable(results, outcomes, waits, timeout_ms, done),
                                              lambda answered: _response(request(), [(n, None, o) for n, o in answered])))


def test_answered_when_the_last_write_is_durable_each_by_its_own_outcome() -> None:
    async def scenario() -> list[ErrorCode]:
        outcomes, waits = outcomes_of(3), Waits()
        answer = respond_when_durable(outcomes, waits, 30_000)
        waits.waiters[2](None)
        waits.waiters[0](OSError("fsync failed"))
        await asyncio.sleep(0)
        assert not answer.done(), "one write is still waiting"
        waits.waiters[1](None)
        return errors(await asyncio.wait_for(answer, 5))

    assert asyncio.run(scenario()) == [ErrorCode.kafka_storage_error, ErrorCode.none, ErrorCode.none]


def test_a_write_not_durable_by_the_timeout_is_request_timed_out() -> None:
    async def scenario() -> list[ErrorCode]:
        outcomes, waits = outcomes_of(2), Waits()
        answer = respond_when_durable(outcomes, waits, 1)
        waits.waiters[0](None)
        response = await asyncio.wait_for(answer, 5)
        waits.waiters[1](None)  # too late: the answer stands
        await asyncio.sleep(0)
        return errors(response)

    assert asyncio.run(scenario()) == [ErrorCode.none, ErrorCode.request_timed_out]


def test_a_coordinator_answer_is_built_as_it_calls_back() -> None:
    """``via_callback``: answered at once when the coordinator calls back at once; otherwise
    an awaitable the server waits on, answered with the response when it does."""

    async def scenario() -> None:
        assert via_callback(lambda cb: cb(2), lambda n: n * 10) == 20
        later: list[Any] = []
        answer = asyncio.ensure_future(via_callback(later.append, lambda n: n * 10))
        await asyncio.sleep(0)
        assert not answer.done()
        later[0](3)
        assert await asyncio.wait_for(answer, 5) == 30

    asyncio.run(scenario())
