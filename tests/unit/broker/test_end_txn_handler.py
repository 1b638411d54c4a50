"""The EndTxn handler against a hand-written context (``context.InMemoryContext``): the
coordinator's outcome passed through as the answer, with Kafka's version quirk."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kio.schema.end_txn.v1.request import EndTxnRequest as EndTxnV1
from kio.schema.end_txn.v3.request import EndTxnRequest as EndTxnV3
from kio.static.primitive import i16, i64

from onceflow.broker.handlers.txn import handle_end_txn
from onceflow.protocol.errors import ErrorCode

from .context import Conn, InMemoryContext, request, settle


def end_txn(ctx: InMemoryContext, body: Any) -> Any:
    return handle_end_txn(ctx, request(body), Conn())


@pytest.mark.parametrize("outcome", [ErrorCode.none, ErrorCode.invalid_txn_state, ErrorCode.concurrent_transactions,
                                     ErrorCode.transaction_abortable, ErrorCode.producer_fenced])
def test_the_coordinators_outcome_is_the_answer(ctx: InMemoryContext, outcome: ErrorCode) -> None:
    ctx.txns.end_outcome = outcome
    response = end_txn(ctx, EndTxnV3(transactional_id="tx", producer_id=i64(7), producer_epoch=i16(3), committed=True))
    assert response.error_code is outcome
    assert ctx.txns.ended == [("tx", 7, 3, True)]


def test_an_outcome_given_later_is_answered_then(ctx: InMemoryContext) -> None:
    ctx.txns.end_later = True
    ctx.txns.end_outcome = ErrorCode.none

    async def scenario() -> ErrorCode:
        answer = asyncio.ensure_future(end_txn(ctx, EndTxnV3(transactional_id="tx", producer_id=i64(7), producer_epoch=i16(3),
                                                             committed=False)))
        await settle()
        assert not answer.done(), "the coordinator has not answered"
        ctx.txns.answer()
        return (await asyncio.wait_for(answer, 5)).error_code

    assert asyncio.run(scenario()) is ErrorCode.none
    assert ctx.txns.ended == [("tx", 7, 3, False)]


def test_producer_fenced_is_invalid_producer_epoch_to_clients_before_v2(ctx: InMemoryContext) -> None:
    ctx.txns.end_outcome = ErrorCode.producer_fenced
    response = end_txn(ctx, EndTxnV1(transactional_id="tx", producer_id=i64(7), producer_epoch=i16(3), committed=True))
    assert response.error_code is ErrorCode.invalid_producer_epoch
