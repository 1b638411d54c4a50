"""Consumer groups on the wire: FindCoordinator, the membership APIs and offsets.

These handlers only translate: every version of a request into one call on
``GroupCoordinator`` (sans-I/O, callback style), and its result back into
the response of the request's version.  A callback that the coordinator
fires later (a JoinGroup waiting for the rebalance, an OffsetCommit waiting
for its record to be durable) becomes an asyncio future the server awaits
before writing the response in order.

This broker is the coordinator of every group and every transactional id
(it is the only node); the ``__consumer_offsets`` / ``__transaction_state``
partitions are created on first use.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from ...config import GROUP_VERSION
from ...coordinator import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from ...coordinator.group.consumer_membership import HeartbeatResult
from ...coordinator.group.types import (
    GroupDescription,
    JoinResult,
    LeaveMember,
    OffsetAndMetadata,
    SyncResult,
    TopicPartition,
)
from ...protocol import apis
from ...protocol.errors import ErrorCode
from .common import NO_THROTTLE, Request, build, ms, responses, via_callback
from .context import BrokerContext, Connection, Handler

log = logging.getLogger(__name__)


KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


# -- FindCoordinator ----------------------------------------------------------


def handle_find_coordinator(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    if request.api_version >= 4:
        keys = list(body.coordinator_keys)
    else:
        keys = [body.key]
    key_type = getattr(body, "key_type", KEY_TYPE_GROUP)
    answers = [_find_one(broker, conn, key, key_type) for key in keys]
    if request.api_version >= 4:
        coordinators = tuple(
            build(m.Coordinator, key=key, node_id=node, host=host, port=port, error_code=err, error_message=msg)
            for key, (err, msg, node, host, port) in zip(keys, answers, strict=True)
        )
        return build(m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=coordinators)
    err, msg, node, host, port = answers[0]
    return build(m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, error_code=err, error_message=msg,
                 node_id=node, host=host, port=port)


def _find_one(broker: BrokerContext, conn: Connection, key: str, key_type: int) -> tuple[ErrorCode, str | None, int, str, int]:
    if key_type == KEY_TYPE_GROUP:
        if not key:
            return ErrorCode.invalid_request, "The group id must not be empty.", -1, "", -1
        topic, partition = OFFSETS_TOPIC, broker.groups.partition_for(key)
    elif key_type == KEY_TYPE_TRANSACTION:
        if not key:
            return ErrorCode.invalid_request, "The transactional id must not be empty.", -1, "", -1
        topic, partition = TRANSACTION_STATE_TOPIC, broker.txns.partition_for(key)
    else:
        return ErrorCode.invalid_request, f"Unknown coordinator key type {key_type}", -1, "", -1
    try:
        broker.appender.internal_partition(topic, partition)  # created on first use, as Kafka does
    except OSError as exc:  # e.g. a full disk: nothing was created; the client retries
        log.error("cannot create %s: %s", topic, exc)
        return ErrorCode.coordinator_not_available, f"{topic} cannot be created: {exc}", -1, "", -1
    return ErrorCode.none, None, broker.node_id, *broker.advertised_address(conn.listener_name)


# -- Membership ---------------------------------------------------------------


def handle_join_group(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    session_ms = ms(body.session_timeout)
    rebalance_ms = ms(getattr(body, "rebalance_timeout", body.session_timeout))
    if request.api_version == 0:
        rebalance_ms = session_ms

    def respond(r: JoinResult) -> Any:
        return build(
            m.JoinGroupResponse,
            throttle_time=NO_THROTTLE,
            error_code=r.error,
            generation_id=r.generation_id,
            protocol_type=r.protocol_type,
            protocol_name=r.protocol_name if request.api_version >= 7 else (r.protocol_name or ""),
            leader=r.leader,
            skip_assignment=r.skip_assignment,
            member_id=r.member_id,
            members=tuple(
                build(m.JoinGroupResponseMember, member_id=x.member_id, group_instance_id=x.group_instance_id, metadata=x.metadata)
                for x in r.members
            ),
        )

    return via_callback(
        lambda cb: broker.groups.join_group(
            body.group_id,
            body.member_id,
            getattr(body, "group_instance_id", None),
            body.protocol_type,
            [(p.name, bytes(p.metadata)) for p in body.protocols],
            session_ms,
            rebalance_ms,
            request.api_version >= 4,
            request.client_id or "",
            f"/{conn.client_host}",  # as Kafka renders it: Java's InetAddress.toString()
            getattr(body, "reason", None),
            cb,
            supports_skip_assignment=request.api_version >= 9,  # KIP-814
        ),
        respond,
    )


def handle_sync_group(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body

    def respond(r: SyncResult) -> Any:
        return build(m.SyncGroupResponse, throttle_time=NO_THROTTLE, error_code=r.error, protocol_type=r.protocol_type,
                     protocol_name=r.protocol_name, assignment=r.assignment)

    return via_callback(
        lambda cb: broker.groups.sync_group(
            body.group_id,
            body.generation_id,
            body.member_id,
            getattr(body, "group_instance_id", None),
            getattr(body, "protocol_type", None),
            getattr(body, "protocol_name", None),
            {a.member_id: bytes(a.assignment) for a in body.assignments},
            cb,
        ),
        respond,
    )


def handle_heartbeat(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    error = broker.groups.heartbeat(body.group_id, body.generation_id, body.member_id, getattr(body, "group_instance_id", None))
    return build(m.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=error)


def handle_leave_group(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    if request.api_version >= 3:
        members = [LeaveMember(x.member_id, x.group_instance_id) for x in body.members]
        reason = next((x.reason for x in body.members if getattr(x, "reason", None)), None)
    else:
        members = [LeaveMember(body.member_id, None)]
        reason = None
    result = broker.groups.leave_group(body.group_id, members, reason)
    if request.api_version >= 3:
        return build(
            m.LeaveGroupResponse,
            throttle_time=NO_THROTTLE,
            error_code=result.error,
            members=tuple(
                build(m.MemberResponse, member_id=member.member_id, group_instance_id=member.group_instance_id, error_code=err)
                for member, err in result.members
            ),
        )
    error = result.error
    if error is ErrorCode.none and result.members:
        error = result.members[0][1]
    return build(m.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error)


#: DescribeGroups' authorized_operations when asked for (v3+): with no authorizer, Kafka grants
#: every operation a group supports -- READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
#: (AclOperation codes 3, 6, 8, 10, 11 as bits).
GROUP_AUTHORIZED_OPERATIONS = sum(1 << op for op in (3, 6, 8, 10, 11))
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def handle_describe_groups(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    described = broker.groups.describe_groups(list(request.body.groups))
    include_operations = bool(getattr(request.body, "include_authorized_operations", False))
    return build(m.DescribeGroupsResponse, throttle_time=NO_THROTTLE,
                 groups=tuple(_described(m, d, request.api_version, include_operations) for d in described))


def _described(m: Any, d: GroupDescription, version: int, include_operations: bool) -> Any:
    error, message = d.error, None
    if version >= 6 and error is ErrorCode.none and d.state == "Dead":
        # KIP-1043 (v6): a group that does not exist is an error, no longer a "Dead" group.
        error, message = ErrorCode.group_id_not_found, f"Group {d.group_id} not found."
    return build(
        m.DescribedGroup,
        error_code=error,
        error_message=message,
        authorized_operations=(GROUP_AUTHORIZED_OPERATIONS if include_operations and error is ErrorCode.none
                               else AUTHORIZED_OPERATIONS_OMITTED),
        group_id=d.group_id,
        group_state=d.state,
        protocol_type=d.protocol_type,
        protocol_data=d.protocol,
        members=tuple(
            build(m.DescribedGroupMember, member_id=x.member_id, group_instance_id=x.group_instance_id, client_id=x.client_id,
                  client_host=x.client_host, member_metadata=x.metadata, member_assignment=x.assignment)
            for x in d.members
        ),
    )


def handle_list_groups(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    states = set(getattr(body, "states_filter", ()) or ()) or None
    types = set(getattr(body, "types_filter", ()) or ()) or None
    listed = broker.groups.list_groups(states, types)
    return build(
        m.ListGroupsResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        groups=tuple(build(m.ListedGroup, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
                           group_type=g.group_type) for g in listed),
    )


def handle_delete_groups(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    names = list(request.body.groups_names)

    def respond(results: dict[str, ErrorCode]) -> Any:
        return build(m.DeleteGroupsResponse, throttle_time=NO_THROTTLE,
                     results=tuple(build(m.DeletableGroupResult, group_id=g, error_code=results.get(g, ErrorCode.none)) for g in names))

    return via_callback(lambda cb: broker.groups.delete_groups(names, cb), respond)


# -- Offsets ------------------------------------------------------------------


def _known(broker: BrokerContext, tp: TopicPartition) -> bool:
    return broker.registry.get(tp[0], tp[1]) is not None


def handle_offset_commit(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    now = broker.clock.now_ms()
    generation = getattr(body, "generation_id_or_member_epoch", getattr(body, "generation_id", -1))
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    errors: dict[TopicPartition, ErrorCode] = {}
    order: list[tuple[str, list[int]]] = []
    for t in body.topics:
        order.append((t.name, [p.partition_index for p in t.partitions]))
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if not _known(broker, tp):
                errors[tp] = ErrorCode.unknown_topic_or_partition
                continue
            offsets[tp] = OffsetAndMetadata(
                offset=p.committed_offset,
                leader_epoch=getattr(p, "committed_leader_epoch", -1),
                metadata=p.committed_metadata,
                commit_timestamp_ms=now,
            )

    def respond(results: dict[TopicPartition, ErrorCode]) -> Any:
        merged = {**results, **errors}
        return build(
            m.OffsetCommitResponse,
            throttle_time=NO_THROTTLE,
            topics=tuple(
                build(m.OffsetCommitResponseTopic, name=name, partitions=tuple(
                    build(m.OffsetCommitResponsePartition, partition_index=i, error_code=merged.get((name, i), ErrorCode.none))
                    for i in parts))
                for name, parts in order
            ),
        )

    if not offsets:
        return respond({})
    return via_callback(
        lambda cb: broker.groups.commit_offsets(
            body.group_id, generation, body.member_id, getattr(body, "group_instance_id", None), offsets, cb,
            api_version=request.api_version,
        ),
        respond,
    )


def handle_offset_fetch(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    require_stable = bool(getattr(body, "require_stable", False))
    if request.api_version >= 8:
        groups = []
        for g in body.groups:
            error, topics = _fetch_group(m, broker, g.group_id, g.topics, require_stable, "OffsetFetchResponseTopics",
                                         "OffsetFetchResponsePartitions", getattr(g, "member_id", None),
                                         getattr(g, "member_epoch", -1))
            groups.append(build(m.OffsetFetchResponseGroup, group_id=g.group_id, topics=topics, error_code=error))
        return build(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))
    error, topics = _fetch_group(m, broker, body.group_id, body.topics, require_stable, "OffsetFetchResponseTopic",
                                 "OffsetFetchResponsePartition")
    return build(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, topics=topics, error_code=error)


def _fetch_group(m: Any, broker: BrokerContext, group_id: str, topics: Any, require_stable: bool, topic_cls: str,
                 part_cls: str, member_id: str | None = None, member_epoch: int = -1) -> tuple[ErrorCode, tuple[Any, ...]]:
    wanted = None if topics is None else [(t.name, i) for t in topics for i in t.partition_indexes]
    error, fetched = broker.groups.fetch_offsets(group_id, wanted, require_stable, member_id, member_epoch)
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), f in fetched.items():
        by_topic.setdefault(topic, []).append(
            build(getattr(m, part_cls), partition_index=partition, committed_offset=f.offset, committed_leader_epoch=f.leader_epoch,
                  metadata=f.metadata, error_code=f.error)
        )
    return error, tuple(build(getattr(m, topic_cls), name=name, partitions=tuple(parts)) for name, parts in by_topic.items())


def handle_offset_delete(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    order = [(t.name, [p.partition_index for p in t.partitions]) for t in body.topics]
    wanted = [(name, i) for name, parts in order for i in parts]

    def respond(outcome: tuple[ErrorCode, dict[TopicPartition, ErrorCode]]) -> Any:
        error, per_partition = outcome
        return build(
            m.OffsetDeleteResponse,
            error_code=error,
            throttle_time=NO_THROTTLE,
            topics=tuple(
                build(m.OffsetDeleteResponseTopic, name=name, partitions=tuple(
                    build(m.OffsetDeleteResponsePartition, partition_index=i,
                          error_code=per_partition.get((name, i), ErrorCode.none)) for i in parts))
                for name, parts in order
            ) if error is ErrorCode.none else (),
        )

    return via_callback(
        lambda cb: broker.groups.delete_offsets(body.group_id, wanted, lambda err, parts: cb((err, parts))),
        respond,
    )


# -- KIP-848 -------------------------------------------------------------------


def _kip848_off(broker: BrokerContext) -> bool:
    """``group.version`` 0: Kafka lists the KIP-848 APIs and answers them UNSUPPORTED_VERSION."""
    return broker.config[GROUP_VERSION] < 1


def handle_consumer_group_heartbeat(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    if _kip848_off(broker):
        return build(m.ConsumerGroupHeartbeatResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.unsupported_version,
                     error_message=UNSUPPORTED_VERSION_MESSAGE, member_epoch=0,
                     heartbeat_interval=datetime.timedelta(0))

    def respond(r: HeartbeatResult) -> Any:
        assignment = None
        if r.assignment is not None:
            assignment = build(m.Assignment, topic_partitions=tuple(
                build(m.TopicPartitions, topic_id=t, partitions=ps) for t, ps in r.assignment))
        return build(m.ConsumerGroupHeartbeatResponse, throttle_time=NO_THROTTLE, error_code=r.error,
                     error_message=r.error_message, member_id=r.member_id, member_epoch=r.member_epoch,
                     heartbeat_interval=datetime.timedelta(milliseconds=r.heartbeat_interval_ms), assignment=assignment)

    owned = None if body.topic_partitions is None else tuple(
        (t.topic_id, tuple(t.partitions)) for t in body.topic_partitions)
    return via_callback(
        lambda cb: broker.groups.consumer_group_heartbeat(
            body.group_id, body.member_id, body.member_epoch, body.instance_id, body.rack_id,
            ms(body.rebalance_timeout),
            None if body.subscribed_topic_names is None else tuple(body.subscribed_topic_names),
            getattr(body, "subscribed_topic_regex", None), body.server_assignor, owned,
            request.client_id or "", f"/{conn.client_host}", request.api_version, cb),
        respond,
    )


def handle_consumer_group_describe(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    include_operations = bool(request.body.include_authorized_operations)

    def assignment(parts: Any) -> Any:
        return build(m.Assignment, topic_partitions=tuple(
            build(m.TopicPartitions, topic_id=t, topic_name=name, partitions=ps) for t, name, ps in parts))

    if _kip848_off(broker):
        return build(m.ConsumerGroupDescribeResponse, throttle_time=NO_THROTTLE, groups=tuple(
            build(m.DescribedGroup, error_code=ErrorCode.unsupported_version, error_message=UNSUPPORTED_VERSION_MESSAGE,
                  group_id=g, group_state="", group_epoch=0, assignment_epoch=0, assignor_name="", members=())
            for g in request.body.group_ids))
    groups = []
    for d in broker.groups.consumer_group_describe(list(request.body.group_ids)):
        groups.append(build(
            m.DescribedGroup, error_code=d.error, error_message=d.error_message, group_id=d.group_id,
            group_state=d.state, group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch,
            assignor_name=d.assignor_name,
            authorized_operations=(GROUP_AUTHORIZED_OPERATIONS if include_operations and d.error is ErrorCode.none
                                   else AUTHORIZED_OPERATIONS_OMITTED),
            members=tuple(
                build(m.Member, member_id=x.member_id, instance_id=x.instance_id, rack_id=x.rack_id,
                      member_epoch=x.member_epoch, client_id=x.client_id, client_host=x.client_host,
                      subscribed_topic_names=x.subscribed_topic_names, subscribed_topic_regex=x.subscribed_topic_regex,
                      assignment=assignment(x.assignment), target_assignment=assignment(x.target_assignment),
                      member_type=CONSUMER_MEMBER_TYPE)
                for x in d.members),
        ))
    return build(m.ConsumerGroupDescribeResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))


#: Kafka's message for Errors.UNSUPPORTED_VERSION.
UNSUPPORTED_VERSION_MESSAGE = "The version of API is not supported."
#: ConsumerGroupDescribe v1's member type: 1, a member of the consumer protocol (0: classic, -1: unknown).
CONSUMER_MEMBER_TYPE = 1


HANDLERS: dict[int, Handler] = {
    apis.CONSUMER_GROUP_HEARTBEAT: handle_consumer_group_heartbeat,
    apis.CONSUMER_GROUP_DESCRIBE: handle_consumer_group_describe,
    apis.FIND_COORDINATOR: handle_find_coordinator,
    apis.JOIN_GROUP: handle_join_group,
    apis.SYNC_GROUP: handle_sync_group,
    apis.HEARTBEAT: handle_heartbeat,
    apis.LEAVE_GROUP: handle_leave_group,
    apis.DESCRIBE_GROUPS: handle_describe_groups,
    apis.LIST_GROUPS: handle_list_groups,
    apis.DELETE_GROUPS: handle_delete_groups,
    apis.OFFSET_COMMIT: handle_offset_commit,
    apis.OFFSET_FETCH: handle_offset_fetch,
    apis.OFFSET_DELETE: handle_offset_delete,
}
