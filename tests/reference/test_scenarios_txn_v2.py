"""Transactions v2 (KIP-890 part 2) on the wire, the same scenario against Onceflow and Apache Kafka
4.3.1 (both finalize ``transaction.version`` 2): a Produce v12 adds its partition to the
transaction (no AddPartitionsToTxn), EndTxn v5 bumps the epoch and answers with it, and the
stragglers of KAFKA-17754 -- an EndTxn and a Produce of transaction 1 that arrive while
transaction 2 is open -- are refused and change nothing; a retried EndTxn is answered as the first."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from kio.schema.end_txn.v5.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v12.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import Records, i16, i32, i32Timedelta, i64

from tests.support.reference import Target
from tests.support.txn_wire import (
    BUSY,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    describe_transaction,
    init_transactional,
    make_ready_topic,
    txn_batch,
    visible_values,
    wait_hw_and_lso,
)
from tests.support.waiting import wait_for
from tests.support.wire import WireClient


def produce_v12(client: WireClient, tid: str, topic: str, records: bytes) -> ErrorCode:
    """A Produce v12 (acks=all) of ``records`` to partition 0; its error, retried while the previous
    transaction completes (CONCURRENT_TRANSACTIONS, which a v2 client retries)."""
    answers: list[ErrorCode] = []

    def attempt() -> bool:
        response = client.request(ProduceRequest(
            transactional_id=tid, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            topic_data=(TopicProduceData(name=topic, partition_data=(
                PartitionProduceData(index=i32(0), records=Records(records)),)),)))
        answers.append(response.responses[0].partition_responses[0].error_code)
        return answers[-1] not in BUSY

    wait_for(attempt, interval=0.05, what=lambda: f"Produce v12: {answers[-1:]}")
    return answers[-1]


def end_txn_v5(client: WireClient, tid: str, pid: int, epoch: int, commit: bool) -> tuple[Any, int, int]:
    """EndTxn v5: (error, producer id, producer epoch), retried while the coordinator is busy."""
    answers: list[Any] = []

    def attempt() -> bool:
        response = client.request(EndTxnRequest(transactional_id=tid, producer_id=i64(pid), producer_epoch=i16(epoch),
                                                committed=commit))
        answers.append((response.error_code, response.producer_id, response.producer_epoch))
        return answers[-1][0] not in BUSY

    wait_for(attempt, interval=0.05, what=lambda: f"EndTxn v5: {answers[-1:]}")
    return answers[-1]  # type: ignore[no-any-return]


def test_each_end_bumps_the_epoch_and_stragglers_of_the_previous_transaction_are_refused(
        target: Target, unique: Callable[[str], str]) -> None:
    topic, tid = unique("txn-v2"), unique("tid")
    make_ready_topic(target.bootstrap_servers, topic)
    with WireClient(target.bootstrap_servers) as client:
        pid, e0 = init_transactional(client, tid)
        # Transaction 1: the Produce adds the partition itself.
        assert produce_v12(client, tid, topic, txn_batch(pid, e0, 0, [b"t1-a"])) == ErrorCode.none
        assert describe_transaction(client, tid).transaction_state == "Ongoing"
        assert end_txn_v5(client, tid, pid, e0, commit=True) == (ErrorCode.none, pid, e0 + 1)
        wait_hw_and_lso(client, topic, (2, 2))  # the record and the COMMIT marker
        # A retry of the same EndTxn (its answer lost) gets the same answer, and changes nothing.
        assert end_txn_v5(client, tid, pid, e0, commit=True) == (ErrorCode.none, pid, e0 + 1)

        # Transaction 2, at the bumped epoch (a new epoch starts its sequences at 0).
        assert produce_v12(client, tid, topic, txn_batch(pid, e0 + 1, 0, [b"t2-a"])) == ErrorCode.none
        # Stragglers of transaction 1, held back in the network until now.
        assert end_txn_v5(client, tid, pid, e0, commit=True) == (ErrorCode.producer_fenced, -1, -1)
        assert produce_v12(client, tid, topic, txn_batch(pid, e0, 1, [b"t1-late"])) == ErrorCode.invalid_producer_epoch
        described = describe_transaction(client, tid)
        assert (described.transaction_state, described.producer_epoch) == ("Ongoing", e0 + 1)
        wait_hw_and_lso(client, topic, (3, 2))  # transaction 2 is still open: nothing committed early

        assert end_txn_v5(client, tid, pid, e0 + 1, commit=False) == (ErrorCode.none, pid, e0 + 2)
        wait_hw_and_lso(client, topic, (4, 4))
        assert visible_values(client, topic, 0, READ_COMMITTED) == [b"t1-a"]
        assert visible_values(client, topic, 0, READ_UNCOMMITTED) == [b"t1-a", b"t2-a"]
        # A v2 abort with nothing in the transaction is allowed (and bumps the epoch).
        assert end_txn_v5(client, tid, pid, e0 + 2, commit=False) == (ErrorCode.none, pid, e0 + 3)


def test_a_v5_txn_offset_commit_without_a_group_id_adds_nothing_to_the_transaction(
        target: Target, unique: Callable[[str], str]) -> None:
    """TxnOffsetCommit v5 adds the group's partition to the transaction itself; an empty group id
    is refused (INVALID_GROUP_ID) before anything is added, on both brokers."""
    from kio.schema.txn_offset_commit.v5.request import (
        TxnOffsetCommitRequest,
        TxnOffsetCommitRequestPartition,
        TxnOffsetCommitRequestTopic,
    )

    topic, tid = unique("txn-v2-group"), unique("tid")
    make_ready_topic(target.bootstrap_servers, topic)
    with WireClient(target.bootstrap_servers) as client:
        pid, epoch = init_transactional(client, tid)
        assert produce_v12(client, tid, topic, txn_batch(pid, epoch, 0, [b"a"])) == ErrorCode.none
        response = client.request(TxnOffsetCommitRequest(
            transactional_id=tid, group_id="", producer_id=i64(pid), producer_epoch=i16(epoch), generation_id=i32(-1),
            member_id="", group_instance_id=None, topics=(TxnOffsetCommitRequestTopic(name=topic, partitions=(
                TxnOffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(1),
                                                committed_leader_epoch=i32(-1), committed_metadata=""),)),)))
        assert [p.error_code for t in response.topics for p in t.partitions] == [ErrorCode.invalid_group_id]
        described = describe_transaction(client, tid)
        assert [t.topic for t in described.topics] == [topic], "no __consumer_offsets partition was added"
        assert end_txn_v5(client, tid, pid, epoch, commit=False)[0] == ErrorCode.none
