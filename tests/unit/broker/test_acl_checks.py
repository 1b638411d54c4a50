"""Handlers' ACL checks against the hand-written context: a refusal is Kafka's error value, comes
before anything is written, and the ACL APIs' odd cases (no authorizer, UNKNOWN elements)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from onceflow.broker.handlers.acls import handle_create_acls
from onceflow.broker.handlers.produce import handle_delete_records, handle_produce
from onceflow.broker.handlers.txn import handle_write_txn_markers
from onceflow.protocol.errors import ErrorCode
from onceflow.records.builder import build_batch
from onceflow.security.acls import AclBinding, StandardAuthorizer
from onceflow.security.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType
from tests.support.wire import TIMEOUT, produce_request

from .context import T0, Conn, InMemoryContext, request


def deny(rtype: ResourceType, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(rtype, name, PatternType.LITERAL, "User:ANONYMOUS", "*", op, AclPermissionType.DENY)


def secure(ctx: InMemoryContext, *bindings: AclBinding) -> None:
    ctx.authorizer = StandardAuthorizer(None, allow_if_no_acl_found=True)
    assert all(r.error is ErrorCode.none for r in ctx.authorizer.create_acls(list(bindings)))


def answered(response: Any) -> Any:
    return asyncio.run(_await(response))


async def _await(response: Any) -> Any:
    return await response if asyncio.isfuture(response) or asyncio.iscoroutine(response) else response


def test_a_transactional_produce_needs_write_on_its_transactional_id(ctx: InMemoryContext) -> None:
    secure(ctx, deny(ResourceType.TRANSACTIONAL_ID, "tx", AclOperation.WRITE))
    batch = build_batch([(None, b"t")], T0, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    response = answered(handle_produce(ctx, request(produce_request("t", batch, transactional_id="tx")), Conn()))
    p = response.responses[0].partition_responses[0]
    assert (p.error_code, p.base_offset, p.error_message) == (
        ErrorCode.transactional_id_authorization_failed, -1, "Transactional Id authorization failed.")
    assert ctx.registry.get("t", 0).log_end_offset == 0  # type: ignore[union-attr]


def test_a_produce_to_a_topic_it_may_not_write_writes_nothing(ctx: InMemoryContext) -> None:
    secure(ctx, deny(ResourceType.TOPIC, "t", AclOperation.WRITE))
    response = answered(handle_produce(ctx, request(produce_request("t", build_batch([(None, b"v")], T0))), Conn()))
    assert response.responses[0].partition_responses[0].error_code is ErrorCode.topic_authorization_failed
    response = answered(handle_produce(ctx, request(produce_request("absent", build_batch([(None, b"v")], T0))), Conn()))
    assert response.responses[0].partition_responses[0].error_code is ErrorCode.unknown_topic_or_partition  # no ACL on it
    assert not ctx.durability.dirty
    conn = Conn()
    assert handle_produce(ctx, request(produce_request("t", build_batch([(None, b"v")], T0), acks=0)), conn) is None
    assert conn.closed  # acks=0: the producer notices by the connection closing, as for any error


def test_delete_records_needs_delete_on_the_topic(ctx: InMemoryContext) -> None:
    secure(ctx, deny(ResourceType.TOPIC, "t", AclOperation.DELETE))
    body = DeleteRecordsRequest(topics=(DeleteRecordsTopic(name="t", partitions=(
        DeleteRecordsPartition(partition_index=i32(0), offset=i64(0)),
        DeleteRecordsPartition(partition_index=i32(0), offset=i64(0)))),), timeout=i32Timedelta.parse(TIMEOUT))
    response = handle_delete_records(ctx, request(body), Conn())
    assert [(p.partition_index, p.error_code, p.low_watermark) for t in response.topics for p in t.partitions] == [
        (0, ErrorCode.topic_authorization_failed, -1)]


def test_write_txn_markers_needs_alter_or_cluster_action_on_the_cluster(ctx: InMemoryContext) -> None:
    secure(ctx, deny(ResourceType.CLUSTER, "kafka-cluster", AclOperation.ALL))
    body = WriteTxnMarkersRequest(markers=(WritableTxnMarker(
        producer_id=i64(7), producer_epoch=i16(0), transaction_result=False,
        topics=(WritableTxnMarkerTopic(name="t", partition_indexes=(i32(0), i32(1))),), coordinator_epoch=i32(0)),))
    response = answered(handle_write_txn_markers(ctx, request(body), Conn()))
    assert {p.error_code for m in response.markers for t in m.topics for p in t.partitions} == {
        ErrorCode.cluster_authorization_failed}
    assert ctx.marker_writer.asked == []


def _creation(resource_type: int) -> Any:
    return CreateAclsRequest(creations=(AclCreation(
        resource_type=i8(resource_type), resource_name="t", resource_pattern_type=i8(3), principal="User:a", host="*",
        operation=i8(3), permission_type=i8(3)),))


def test_create_acls_without_an_authorizer_is_security_disabled(ctx: InMemoryContext) -> None:
    response = handle_create_acls(ctx, request(_creation(2)), Conn())
    assert [(r.error_code, r.error_message) for r in response.results] == [
        (ErrorCode.security_disabled, "No Authorizer is configured.")]


def test_acl_requests_with_unknown_elements_close_the_connection(ctx: InMemoryContext) -> None:
    secure(ctx)
    conn = Conn()
    assert handle_create_acls(ctx, request(_creation(0)), conn) is None  # resource type UNKNOWN
    assert conn.closed and ctx.authorizer.acls() == []
