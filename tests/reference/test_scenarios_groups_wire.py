"""Classic consumer groups and KIP-447 offset commits at the protocol level, against Onceflow and
Apache Kafka: the exact requests a client sends (JoinGroup, SyncGroup, Heartbeat, TxnOffsetCommit,
DescribeGroups, OffsetFetch), and the exact error codes, generations and group states both
brokers answer.

- Static membership (KIP-345): a member rejoining under its group.instance.id with no member id
  takes the old member's place without a rebalance (same generation, the group stays Stable),
  and the old member id is fenced (FENCED_INSTANCE_ID) from then on.
- TxnOffsetCommit generation checks (KIP-447): the current generation and member commit; a
  stale generation gets ILLEGAL_GENERATION, an unknown member UNKNOWN_MEMBER_ID, a member id
  that does not hold the instance id FENCED_INSTANCE_ID; generation -1 with no member (the
  pre-KIP-447 form) is accepted; a group that does not exist with a generation gets
  ILLEGAL_GENERATION.  Offsets committed this way are visible only once the transaction commits,
  never after an abort.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable
from typing import Any

from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.schema.txn_offset_commit.v3.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from tests.support.kafka import make_topic
from tests.support.reference import Target
from tests.support.waiting import wait_for
from tests.support.wire import WireClient

SESSION = i32Timedelta.parse(datetime.timedelta(seconds=10))
REBALANCE = i32Timedelta.parse(datetime.timedelta(seconds=10))
TXN_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=60))


def subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0: the topics a consumer subscribes to, no user data."""
    name = topic.encode()
    return struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", -1)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    name = topic.encode()
    return (struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", len(partitions))
            + b"".join(struct.pack(">i", p) for p in partitions) + struct.pack(">i", -1))


def wait_coordinator(client: WireClient, key: str, key_type: int) -> None:
    """FindCoordinator until the broker answers NONE (Kafka creates its internal topic on first use)."""
    def ready() -> bool:
        return client.request(FindCoordinatorRequest(key=key, key_type=i8(key_type))).error_code == ErrorCode.none

    wait_for(ready, interval=0.1, what=f"the coordinator of {key}")


def join(client: WireClient, group: str, topic: str, instance: str | None, member_id: str = "") -> Any:
    return client.request(JoinGroupRequest(
        group_id=group, session_timeout=SESSION, rebalance_timeout=REBALANCE, member_id=member_id,
        group_instance_id=instance, protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=subscription(topic)),), reason=None))


def sync(client: WireClient, group: str, generation: int, member_id: str, instance: str | None,
         assignments: tuple[SyncGroupRequestAssignment, ...] = ()) -> Any:
    return client.request(SyncGroupRequest(group_id=group, generation_id=i32(generation), member_id=member_id,
                                           group_instance_id=instance, protocol_type="consumer", protocol_name="range",
                                           assignments=assignments))


def heartbeat(client: WireClient, group: str, generation: int, member_id: str, instance: str | None) -> ErrorCode:
    return client.request(HeartbeatRequest(group_id=group, generation_id=i32(generation), member_id=member_id,  # type: ignore[no-any-return]
                                           group_instance_id=instance)).error_code


def describe(client: WireClient, group: str) -> Any:
    return client.request(DescribeGroupsRequest(groups=(group,), include_authorized_operations=False)).groups[0]


def committed(client: WireClient, group: str, topic: str, require_stable: bool = False) -> list[tuple[int, int, str | None, ErrorCode]]:
    """OffsetFetch of partitions 0 and 1: (partition, offset, metadata, error)."""
    response = client.request(OffsetFetchRequest(group_id=group, require_stable=require_stable, topics=(
        OffsetFetchRequestTopic(name=topic, partition_indexes=(i32(0), i32(1))),)))
    assert response.error_code == ErrorCode.none
    return [(p.partition_index, p.committed_offset, p.metadata, p.error_code) for t in response.topics for p in t.partitions]


class TxnProducer:
    """A transactional producer at the protocol level: InitProducerId, AddOffsetsToTxn, TxnOffsetCommit, EndTxn."""

    def __init__(self, client: WireClient, transactional_id: str) -> None:
        self.client = client
        self.transactional_id = transactional_id
        wait_coordinator(client, transactional_id, 1)

        def init() -> Any:
            # Right after Kafka creates __transaction_state its coordinator may still be loading.
            response = client.request(InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout=TXN_TIMEOUT,
                                                             producer_id=i64(-1), producer_epoch=i16(-1)))
            assert response.error_code in (ErrorCode.none, ErrorCode.coordinator_load_in_progress,
                                           ErrorCode.not_coordinator, ErrorCode.coordinator_not_available), response
            return response if response.error_code == ErrorCode.none else None

        response = wait_for(init, interval=0.1, what="InitProducerId")
        self.producer_id, self.epoch = response.producer_id, response.producer_epoch

    def add_offsets(self, group: str) -> ErrorCode:
        return self.client.request(AddOffsetsToTxnRequest(  # type: ignore[no-any-return]
            transactional_id=self.transactional_id, producer_id=self.producer_id, producer_epoch=self.epoch,
            group_id=group)).error_code

    def commit_offsets(self, group: str, topic: str, offset: int, generation: int = -1, member_id: str = "",
                       instance: str | None = None) -> ErrorCode:
        response = self.client.request(TxnOffsetCommitRequest(
            transactional_id=self.transactional_id, group_id=group, producer_id=self.producer_id,
            producer_epoch=self.epoch, generation_id=i32(generation), member_id=member_id, group_instance_id=instance,
            topics=(TxnOffsetCommitRequestTopic(name=topic, partitions=(
                TxnOffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(offset),
                                                committed_leader_epoch=i32(-1), committed_metadata=f"at {offset}"),)),)))
        return response.topics[0].partitions[0].error_code  # type: ignore[no-any-return]

    def end(self, commit: bool) -> ErrorCode:
        return self.client.request(EndTxnRequest(  # type: ignore[no-any-return]
            transactional_id=self.transactional_id, producer_id=self.producer_id, producer_epoch=self.epoch,
            committed=commit)).error_code


def test_static_member_rejoin_keeps_the_generation_and_fences_the_old_member_id(
        target: Target, unique: Callable[[str], str]) -> None:
    topic, group = unique("static"), unique("g")
    make_topic(target.bootstrap_servers, topic, 2)
    with WireClient(target.bootstrap_servers) as first, WireClient(target.bootstrap_servers) as second:
        wait_coordinator(first, group, 0)
        joined = join(first, group, topic, "instance-a")
        assert joined.error_code == ErrorCode.none
        old_id = joined.member_id
        assert old_id.startswith("instance-a-") and joined.leader == old_id
        assert (joined.generation_id, joined.protocol_type, joined.protocol_name, joined.skip_assignment) == (1, "consumer", "range", False)
        assert [(m.member_id, m.group_instance_id, m.metadata) for m in joined.members] == [(old_id, "instance-a", subscription(topic))]
        synced = sync(first, group, 1, old_id, "instance-a", (SyncGroupRequestAssignment(member_id=old_id, assignment=assignment(topic, [0, 1])),))
        assert (synced.error_code, synced.protocol_type, synced.protocol_name, synced.assignment) == (
            ErrorCode.none, "consumer", "range", assignment(topic, [0, 1]))
        assert heartbeat(first, group, 1, old_id, "instance-a") == ErrorCode.none

        # The same instance restarts: it knows no member id.  No rebalance: the generation stays 1, and the
        # static leader is told to skip the assignment (KIP-814): the group already has one.
        rejoined = join(second, group, topic, "instance-a")
        assert rejoined.error_code == ErrorCode.none
        new_id = rejoined.member_id
        assert new_id != old_id and new_id.startswith("instance-a-") and rejoined.leader == new_id
        assert (rejoined.generation_id, rejoined.protocol_name, rejoined.skip_assignment) == (1, "range", True)
        assert [(m.member_id, m.group_instance_id) for m in rejoined.members] == [(new_id, "instance-a")]
        resynced = sync(second, group, 1, new_id, "instance-a")
        assert (resynced.error_code, resynced.assignment) == (ErrorCode.none, assignment(topic, [0, 1])), "the old assignment"
        described = describe(second, group)
        assert (described.error_code, described.group_state, described.protocol_type, described.protocol_data) == (
            ErrorCode.none, "Stable", "consumer", "range")
        assert [(m.member_id, m.group_instance_id, m.member_assignment) for m in described.members] == [
            (new_id, "instance-a", assignment(topic, [0, 1]))]

        # The old member id no longer holds the instance: it is fenced, whatever it sends.
        assert heartbeat(first, group, 1, old_id, "instance-a") == ErrorCode.fenced_instance_id
        assert sync(first, group, 1, old_id, "instance-a").error_code == ErrorCode.fenced_instance_id
        assert join(first, group, topic, "instance-a", member_id=old_id).error_code == ErrorCode.fenced_instance_id
        assert heartbeat(second, group, 1, new_id, "instance-a") == ErrorCode.none
        # A member id the group never had, and a generation the group is not at.
        assert heartbeat(second, group, 1, "nobody", None) == ErrorCode.unknown_member_id
        assert heartbeat(second, group, 1, "nobody", "instance-z") == ErrorCode.unknown_member_id
        assert heartbeat(second, group, 2, new_id, "instance-a") == ErrorCode.illegal_generation
        assert describe(second, group).group_state == "Stable"


def test_txn_offset_commit_checks_the_consumer_generation_kip_447(target: Target, unique: Callable[[str], str]) -> None:
    topic, group, txn_id = unique("kip447"), unique("g"), unique("txn")
    make_topic(target.bootstrap_servers, topic, 2)
    with WireClient(target.bootstrap_servers) as member, WireClient(target.bootstrap_servers) as txn_client:
        wait_coordinator(member, group, 0)
        joined = join(member, group, topic, "instance-a")
        member_id = joined.member_id
        assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 1)
        assert sync(member, group, 1, member_id, "instance-a",
                    (SyncGroupRequestAssignment(member_id=member_id, assignment=assignment(topic, [0, 1])),)).error_code == ErrorCode.none

        producer = TxnProducer(txn_client, txn_id)
        assert producer.add_offsets(group) == ErrorCode.none
        check = producer.commit_offsets
        assert check(group, topic, 5, 2, member_id, "instance-a") == ErrorCode.illegal_generation
        assert check(group, topic, 5, 0, member_id, "instance-a") == ErrorCode.illegal_generation
        assert check(group, topic, 5, 1, "nobody", None) == ErrorCode.unknown_member_id
        assert check(group, topic, 5, 1, "nobody", "instance-a") == ErrorCode.fenced_instance_id
        assert check(group, topic, 5, 1, member_id, "instance-b") == ErrorCode.unknown_member_id
        assert check(group, topic, 5, 1, member_id, None) == ErrorCode.none
        assert check(group, topic, 6, 1, member_id, "instance-a") == ErrorCode.none
        # Pre-KIP-447 form (generation -1, no member): accepted even though the group has members.
        assert check(group, topic, 7, -1, "", None) == ErrorCode.none
        # A group that does not exist: only generation -1 may commit into it.
        absent = unique("absent")
        assert producer.add_offsets(absent) == ErrorCode.none
        assert check(absent, topic, 3, 1, "nobody", None) == ErrorCode.illegal_generation
        assert check(absent, topic, 3, 0, "", None) == ErrorCode.illegal_generation
        assert check(absent, topic, 3) == ErrorCode.none

        assert committed(member, group, topic) == [(0, -1, "", ErrorCode.none), (1, -1, "", ErrorCode.none)], \
            "nothing is visible before the transaction ends"
        # require_stable (KIP-447): a partition with offsets pending in a transaction is UNSTABLE_OFFSET_COMMIT.
        assert committed(member, group, topic, require_stable=True) == [
            (0, -1, "", ErrorCode.unstable_offset_commit), (1, -1, "", ErrorCode.none)]
        assert producer.end(commit=False) == ErrorCode.none
        assert committed(member, group, topic) == [(0, -1, "", ErrorCode.none), (1, -1, "", ErrorCode.none)], \
            "aborted: nothing was committed"
        assert committed(member, absent, topic) == [(0, -1, "", ErrorCode.none), (1, -1, "", ErrorCode.none)]

        def next_transaction_can_start() -> bool:
            # The abort completes asynchronously (markers); until then AddOffsetsToTxn is CONCURRENT_TRANSACTIONS.
            error = producer.add_offsets(group)
            assert error in (ErrorCode.none, ErrorCode.concurrent_transactions), error
            return error == ErrorCode.none

        wait_for(next_transaction_can_start, interval=0.05, what="the next transaction to start")
        assert check(group, topic, 9, 1, member_id, "instance-a") == ErrorCode.none
        assert producer.end(commit=True) == ErrorCode.none
        # EndTxn returns before the markers are written: the commit becomes visible a moment later.
        wait_for(lambda: committed(member, group, topic, require_stable=True) == [
            (0, 9, "at 9", ErrorCode.none), (1, -1, "", ErrorCode.none)], interval=0.05, what="the committed offset")
