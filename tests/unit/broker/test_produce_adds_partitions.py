"""Produce v12+ (transactions v2, KIP-890 part 2) through the Appender: the transactional batches'
partitions are added to the transaction first, then appended; a refused add reaches the client as
Kafka's leader answers it; a request whose transactional batches belong to more than one producer
fails whole, as Kafka's handleProduceAppend does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from onceflow.broker.appender import Appender, TopicResults
from onceflow.protocol.errors import ErrorCode as E
from onceflow.records.builder import build_batch
from tests.unit.broker.context import T0, InMemoryContext


def txn_batch(pid: int, epoch: int = 0, seq: int = 0) -> bytes:
    return build_batch([(None, b"t")], T0, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)


def plain_batch() -> bytes:
    return build_batch([(None, b"p")], T0)


def produce(tmp_path: Path, batches: list[tuple[int, bytes]], answer: Callable[[list[tuple[str, int]]], dict]) -> tuple[
        TopicResults, list[tuple]]:
    ctx = InMemoryContext(tmp_path)
    ctx.create_topic("t", 3, {})
    calls: list[tuple] = []

    def add(tid: str, pid: int, epoch: int, partitions: list[tuple[str, int]], done: Callable) -> None:
        calls.append((tid, pid, epoch, partitions))
        done(answer(partitions))

    appender = Appender(ctx.registry, ctx.config, ctx.clock, ctx.durability, ctx.txns.partition_in_transaction, add)
    out: list[TopicResults] = []

    async def go() -> None:
        appender.append_records([("t", batches)], 1, 1000, out.append, transactional_id="x", adds_partitions=True)

    try:
        asyncio.run(go())
    finally:
        ctx.close()
    return out[0], calls


def errors(results: TopicResults) -> dict[int, E]:
    return {o.index: o.error for _, outs in results for o in outs}


def test_the_transactional_partitions_are_added_then_appended(tmp_path: Path) -> None:
    results, calls = produce(tmp_path, [(0, txn_batch(7)), (1, txn_batch(7)), (2, plain_batch())],
                             lambda parts: dict.fromkeys(parts, E.none))
    assert calls == [("x", 7, 0, [("t", 0), ("t", 1)])]  # the plain batch adds nothing
    assert errors(results) == {0: E.none, 1: E.none, 2: E.none}
    assert [o.base_offset for _, outs in results for o in outs] == [0, 0, 0]


@pytest.mark.parametrize(("coordinator", "client"), [
    (E.producer_fenced, E.invalid_producer_epoch),
    (E.concurrent_transactions, E.concurrent_transactions),  # a v2 client retries it
    (E.not_coordinator, E.not_enough_replicas),  # retriable, no metadata refresh
    (E.coordinator_load_in_progress, E.not_enough_replicas),
    (E.invalid_producer_id_mapping, E.invalid_producer_id_mapping),
    (E.transaction_abortable, E.transaction_abortable),
])
def test_a_refused_add_appends_nothing_and_answers_as_kafka(tmp_path: Path, coordinator: E, client: E) -> None:
    results, _ = produce(tmp_path, [(0, txn_batch(7)), (1, txn_batch(7))],
                         lambda parts: {parts[0]: coordinator, parts[1]: E.none})
    assert errors(results) == {0: client, 1: E.none}
    assert [o.base_offset for _, outs in results for o in outs] == [-1, 0]


def test_batches_of_two_producers_fail_the_whole_request(tmp_path: Path) -> None:
    results, calls = produce(tmp_path, [(0, txn_batch(7)), (1, txn_batch(8)), (2, plain_batch())],
                             lambda parts: dict.fromkeys(parts, E.none))
    assert calls == []
    assert errors(results) == dict.fromkeys((0, 1, 2), E.invalid_producer_id_mapping)
