"""TxnOffsetCommit is verified against the producer's transaction (KIP-890 part 1), at the
protocol level against the real broker process (issue 7, defect 2).

Without AddOffsetsToTxn, with another producer id, or with a stale epoch, a transactional
offset commit must be refused and write nothing: otherwise it opens a transaction in
``__consumer_offsets`` that no coordinator knows of and no timeout ends, so OffsetFetch with
require_stable answers UNSTABLE_OFFSET_COMMIT forever and the partition's LSO is pinned.
"""

from __future__ import annotations

import datetime

from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.txn_offset_commit.v3.request import TxnOffsetCommitRequest as TxnOffsetCommitV3
from kio.schema.txn_offset_commit.v3.request import TxnOffsetCommitRequestPartition as PartitionV3
from kio.schema.txn_offset_commit.v3.request import TxnOffsetCommitRequestTopic as TopicV3
from kio.schema.txn_offset_commit.v4.request import TxnOffsetCommitRequest as TxnOffsetCommitV4
from kio.schema.txn_offset_commit.v4.request import TxnOffsetCommitRequestPartition as PartitionV4
from kio.schema.txn_offset_commit.v4.request import TxnOffsetCommitRequestTopic as TopicV4
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from onceflow.coordinator import OFFSETS_TOPIC
from onceflow.coordinator.partitioning import partition_for
from tests.support.broker import BrokerProcess
from tests.support.kafka import make_topic
from tests.support.waiting import wait_for
from tests.support.wire import WireClient

GROUP = "verified-group"
TXN_ID = "offsets-txn"
OFFSETS_PARTITIONS = 50


def init(client: WireClient, transactional_id: str) -> tuple[int, int]:
    assert client.request(FindCoordinatorRequest(key=transactional_id, key_type=i8(1))).error_code == ErrorCode.none
    response = client.request(InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
        producer_id=i64(-1), producer_epoch=i16(-1)))
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


def txn_commit(client: WireClient, pid: int, epoch: int, offset: int, version: int = 3,
               transactional_id: str = TXN_ID) -> ErrorCode:
    request_cls, topic_cls, partition_cls = (
        (TxnOffsetCommitV3, TopicV3, PartitionV3) if version == 3 else (TxnOffsetCommitV4, TopicV4, PartitionV4))
    response = client.request(request_cls(
        transactional_id=transactional_id, group_id=GROUP, producer_id=i64(pid), producer_epoch=i16(epoch),
        topics=(topic_cls(name="src", partitions=(partition_cls(partition_index=i32(0), committed_offset=i64(offset),
                                                                committed_metadata=""),)),)))
    return response.topics[0].partitions[0].error_code


def offset_fetch_stable(client: WireClient) -> tuple[ErrorCode, int]:
    response = client.request(OffsetFetchRequest(
        group_id=GROUP, topics=(OffsetFetchRequestTopic(name="src", partition_indexes=(i32(0),)),), require_stable=True))
    partition = response.topics[0].partitions[0]
    return partition.error_code, partition.committed_offset


def open_transactions_in_offsets_partition(client: WireClient) -> list[int]:
    partition = partition_for(GROUP, OFFSETS_PARTITIONS)
    response = client.request(DescribeProducersRequest(
        topics=(TopicRequest(name=OFFSETS_TOPIC, partition_indexes=(i32(partition),)),)))
    answer = response.topics[0].partitions[0]
    if answer.error_code == ErrorCode.unknown_topic_or_partition:
        return []
    return [p.producer_id for p in answer.active_producers if p.current_txn_start_offset >= 0]


def test_txn_offset_commit_outside_the_transaction_is_refused_and_leaves_nothing(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "src")
    with WireClient(bs) as client:
        assert client.request(FindCoordinatorRequest(key=GROUP, key_type=i8(0))).error_code == ErrorCode.none
        pid, epoch = init(client, TXN_ID)
        other_pid, _ = init(client, "another-txn")

        # The scenario: no AddOffsetsToTxn.  v3 (pre-KIP-890 clients) gets INVALID_TXN_STATE,
        # v4 gets TRANSACTION_ABORTABLE, as Kafka's AddPartitionsToTxnManager answers them.
        assert txn_commit(client, pid, epoch, 5) == ErrorCode.invalid_txn_state
        assert txn_commit(client, pid, epoch, 5, version=4) == ErrorCode.transaction_abortable
        # A producer id that does not belong to the transactional id, and a stale epoch.
        assert txn_commit(client, other_pid, 0, 5) == ErrorCode.invalid_producer_id_mapping
        assert txn_commit(client, pid, epoch + 1, 5) == ErrorCode.invalid_producer_epoch
        assert txn_commit(client, pid, epoch, 5, transactional_id="never-initialised") == \
            ErrorCode.invalid_producer_id_mapping

        end = client.request(EndTxnRequest(transactional_id=TXN_ID, producer_id=i64(pid), producer_epoch=i16(epoch),
                                           committed=True))
        assert end.error_code == ErrorCode.invalid_txn_state, "no transaction was ever begun"
        assert offset_fetch_stable(client) == (ErrorCode.none, -1), "nothing pending: the group's offsets are stable"
        assert open_transactions_in_offsets_partition(client) == [], "no transaction was opened in __consumer_offsets"

        # The same commit inside the transaction is accepted, and follows the transaction.
        added = client.request(AddOffsetsToTxnRequest(transactional_id=TXN_ID, producer_id=i64(pid),
                                                      producer_epoch=i16(epoch), group_id=GROUP))
        assert added.error_code == ErrorCode.none
        assert txn_commit(client, pid, epoch, 7) == ErrorCode.none
        assert offset_fetch_stable(client)[0] == ErrorCode.unstable_offset_commit
        assert open_transactions_in_offsets_partition(client) == [pid]
        end = client.request(EndTxnRequest(transactional_id=TXN_ID, producer_id=i64(pid), producer_epoch=i16(epoch),
                                           committed=True))
        assert end.error_code == ErrorCode.none

        def settled() -> bool:
            return offset_fetch_stable(client) == (ErrorCode.none, 7) and not open_transactions_in_offsets_partition(client)

        wait_for(settled, what="the committed offset to become stable")
