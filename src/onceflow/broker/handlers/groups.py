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

ACLs, as Kafka's KafkaApis, each checked before the coordinator is called:
FindCoordinator needs DESCRIBE on the group or transactional id; JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, OffsetCommit and ConsumerGroupHeartbeat READ on the
group (GROUP_AUTHORIZATION_FAILED for the whole request); OffsetCommit also READ on
each topic, OffsetFetch DESCRIBE on each group and topic (asked for all its offsets, the
topics not describable are left out), OffsetDelete DELETE on the group and READ on each
topic (TOPIC_AUTHORIZATION_FAILED for that topic's partitions, before whether it exists
is said); DescribeGroups and ConsumerGroupDescribe DESCRIBE on each group, and
``authorized_operations`` are what the principal may do; DeleteGroups DELETE on each;
ListGroups lists every group with DESCRIBE on the cluster, else those the principal may
describe.  Kafka 4's newer checks are kept too: a KIP-848 heartbeat naming a topic the
member may not describe answers TOPIC_AUTHORIZATION_FAILED, and ConsumerGroupDescribe
does not describe a group whose assignments hold such a topic.
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
from ...security.authorizer import AclOperation, ResourceType
from .authz import authorize, authorize_cluster, authorized_names, authorized_operations
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
    answers = [_refused_key(broker, conn, key, key_type) or _find_one(broker, conn, key, key_type) for key in keys]
    if request.api_version >= 4:
        coordinators = tuple(
            # A refusal carries no message from v4 (Kafka sets only the code); before, Errors' own.
            build(m.Coordinator, key=key, node_id=node, host=host, port=port, error_code=err,
                  error_message=None if err in _AUTHORIZATION_MESSAGES else msg)
            for key, (err, msg, node, host, port) in zip(keys, answers, strict=True)
        )
        return build(m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=coordinators)
    err, msg, node, host, port = answers[0]
    return build(m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, error_code=err, error_message=msg,
                 node_id=node, host=host, port=port)


#: Errors' default messages, which Kafka's refusals carry where a message is sent.
_AUTHORIZATION_MESSAGES = {
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
}


def _refused_key(broker: BrokerContext, conn: Connection, key: str,
                 key_type: int) -> tuple[ErrorCode, str | None, int, str, int] | None:
    """FindCoordinator's ACL check (Kafka's getCoordinator, before anything else): DESCRIBE on the
    group, or on the transactional id."""
    if key_type == KEY_TYPE_GROUP:
        resource, error = ResourceType.GROUP, ErrorCode.group_authorization_failed
    elif key_type == KEY_TYPE_TRANSACTION:
        resource, error = ResourceType.TRANSACTIONAL_ID, ErrorCode.transactional_id_authorization_failed
    else:
        return None
    if authorize(broker, conn, AclOperation.DESCRIBE, resource, key):
        return None
    return error, _AUTHORIZATION_MESSAGES[error], -1, "", -1


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


def _may_read_group(broker: BrokerContext, conn: Connection, group_id: str) -> bool:
    return authorize(broker, conn, AclOperation.READ, ResourceType.GROUP, group_id)


def handle_join_group(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    if not _may_read_group(broker, conn, body.group_id):  # Kafka's JoinGroupRequest.getErrorResponse
        return build(m.JoinGroupResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                     generation_id=-1, protocol_type=None, protocol_name=None if request.api_version >= 7 else "",
                     leader="", skip_assignment=False, member_id="", members=())
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
    if not _may_read_group(broker, conn, body.group_id):
        return build(m.SyncGroupResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                     protocol_type=None, protocol_name=None, assignment=b"")

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
    if not _may_read_group(broker, conn, body.group_id):
        return build(m.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed)
    error = broker.groups.heartbeat(body.group_id, body.generation_id, body.member_id, getattr(body, "group_instance_id", None))
    return build(m.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=error)


def handle_leave_group(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    if not _may_read_group(broker, conn, body.group_id):
        return build(m.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                     members=())
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
    wanted = list(request.body.groups)
    allowed = authorized_names(broker, conn, AclOperation.DESCRIBE, ResourceType.GROUP, wanted)
    described = iter(broker.groups.describe_groups([g for g in wanted if g in allowed]))
    include_operations = bool(getattr(request.body, "include_authorized_operations", False))
    groups = []
    for group_id in wanted:
        if group_id not in allowed:  # Kafka's DescribeGroupsResponse.groupError
            groups.append(build(m.DescribedGroup, error_code=ErrorCode.group_authorization_failed, error_message=None,
                                authorized_operations=AUTHORIZED_OPERATIONS_OMITTED, group_id=group_id, group_state="",
                                protocol_type="", protocol_data="", members=()))
            continue
        d = next(described)
        operations = (authorized_operations(broker, conn, ResourceType.GROUP, group_id)
                      if include_operations and broker.authorizer is not None else GROUP_AUTHORIZED_OPERATIONS)
        groups.append(_described(m, d, request.api_version, include_operations, operations))
    return build(m.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _described(m: Any, d: GroupDescription, version: int, include_operations: bool,
               operations: int = GROUP_AUTHORIZED_OPERATIONS) -> Any:
    error, message = d.error, None
    if version >= 6 and error is ErrorCode.none and d.state == "Dead":
        # KIP-1043 (v6): a group that does not exist is an error, no longer a "Dead" group.
        error, message = ErrorCode.group_id_not_found, f"Group {d.group_id} not found."
    return build(
        m.DescribedGroup,
        error_code=error,
        error_message=message,
        authorized_operations=operations if include_operations and error is ErrorCode.none else AUTHORIZED_OPERATIONS_OMITTED,
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
    if broker.authorizer is not None and not authorize_cluster(broker, conn, AclOperation.DESCRIBE, log_denied=False):
        # Without DESCRIBE on the cluster, only the groups the principal may describe (not logged).
        listed = [g for g in listed if authorize(broker, conn, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id,
                                                 log_denied=False)]
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
    allowed = authorized_names(broker, conn, AclOperation.DELETE, ResourceType.GROUP, names)
    refused = {g: ErrorCode.group_authorization_failed for g in names if g not in allowed}

    def respond(results: dict[str, ErrorCode]) -> Any:
        merged = {**results, **refused}
        return build(m.DeleteGroupsResponse, throttle_time=NO_THROTTLE,
                     results=tuple(build(m.DeletableGroupResult, group_id=g, error_code=merged.get(g, ErrorCode.none)) for g in names))

    if refused:
        names_allowed = [g for g in names if g in allowed]
        if not names_allowed:
            return respond({})
        return via_callback(lambda cb: broker.groups.delete_groups(names_allowed, cb), respond)
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
    if not _may_read_group(broker, conn, body.group_id):  # every partition refused (OffsetCommitRequest.getErrorResponse)
        errors = {(t.name, p.partition_index): ErrorCode.group_authorization_failed for t in body.topics for p in t.partitions}
    readable = authorized_names(broker, conn, AclOperation.READ, ResourceType.TOPIC, (t.name for t in body.topics)) \
        if not errors else set()
    for t in body.topics:
        order.append((t.name, [p.partition_index for p in t.partitions]))
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if tp in errors:
                continue
            if t.name not in readable:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif not _known(broker, tp):
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
            error, topics = _fetch_group(m, broker, conn, g.group_id, g.topics, require_stable, "OffsetFetchResponseTopics",
                                         "OffsetFetchResponsePartitions", getattr(g, "member_id", None),
                                         getattr(g, "member_epoch", -1))
            groups.append(build(m.OffsetFetchResponseGroup, group_id=g.group_id, topics=topics, error_code=error))
        return build(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))
    error, topics = _fetch_group(m, broker, conn, body.group_id, body.topics, require_stable, "OffsetFetchResponseTopic",
                                 "OffsetFetchResponsePartition", version=request.api_version)
    return build(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, topics=topics, error_code=error)


#: OffsetFetch v2 is the first with a top-level (group) error (Kafka's TOP_LEVEL_ERROR_AND_NULL_TOPICS_MIN_VERSION).
_OFFSET_FETCH_GROUP_ERROR_FROM = 2


def _fetch_group(m: Any, broker: BrokerContext, conn: Connection, group_id: str, topics: Any, require_stable: bool,
                 topic_cls: str, part_cls: str, member_id: str | None = None, member_epoch: int = -1,
                 version: int = 8) -> tuple[ErrorCode, tuple[Any, ...]]:
    def partition(index: int, error: ErrorCode) -> Any:
        return build(getattr(m, part_cls), partition_index=index, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                     error_code=error)

    if not authorize(broker, conn, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        if version >= _OFFSET_FETCH_GROUP_ERROR_FROM or topics is None:
            return ErrorCode.group_authorization_failed, ()
        return ErrorCode.none, tuple(build(getattr(m, topic_cls), name=t.name, partitions=tuple(
            partition(i, ErrorCode.group_authorization_failed) for i in t.partition_indexes)) for t in topics)
    refused: list[Any] = []
    describable: set[str] | None = None
    if broker.authorizer is not None:
        if topics is not None:  # named topics: the others answer TOPIC_AUTHORIZATION_FAILED, not looked up
            describable = authorized_names(broker, conn, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in topics))
            refused = [t for t in topics if t.name not in describable]
            topics = [t for t in topics if t.name in describable]
    wanted = None if topics is None else [(t.name, i) for t in topics for i in t.partition_indexes]
    error, fetched = broker.groups.fetch_offsets(group_id, wanted, require_stable, member_id, member_epoch)
    if broker.authorizer is not None and wanted is None and error is ErrorCode.none:
        # All the group's offsets: those of topics the principal may not describe are left out.
        describable = authorized_names(broker, conn, AclOperation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in fetched))
        fetched = {tp: f for tp, f in fetched.items() if tp[0] in describable}
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition_index), f in fetched.items():
        by_topic.setdefault(topic, []).append(
            build(getattr(m, part_cls), partition_index=partition_index, committed_offset=f.offset,
                  committed_leader_epoch=f.leader_epoch, metadata=f.metadata, error_code=f.error)
        )
    found = [build(getattr(m, topic_cls), name=name, partitions=tuple(parts)) for name, parts in by_topic.items()]
    if error is ErrorCode.none:
        found += [build(getattr(m, topic_cls), name=t.name, partitions=tuple(
            partition(i, ErrorCode.topic_authorization_failed) for i in t.partition_indexes)) for t in refused]
    return error, tuple(found)


def handle_offset_delete(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    order = [(t.name, [p.partition_index for p in t.partitions]) for t in body.topics]
    if not authorize(broker, conn, AclOperation.DELETE, ResourceType.GROUP, body.group_id):
        return build(m.OffsetDeleteResponse, error_code=ErrorCode.group_authorization_failed, throttle_time=NO_THROTTLE,
                     topics=())
    readable = authorized_names(broker, conn, AclOperation.READ, ResourceType.TOPIC, (name for name, _ in order))
    refused = {(name, i): ErrorCode.topic_authorization_failed for name, parts in order if name not in readable for i in parts}
    wanted = [(name, i) for name, parts in order if name in readable for i in parts]

    def respond(outcome: tuple[ErrorCode, dict[TopicPartition, ErrorCode]]) -> Any:
        error, per_partition = outcome
        per_partition = {**per_partition, **refused}
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
    refusal = None
    if not _may_read_group(broker, conn, body.group_id):
        refusal = ErrorCode.group_authorization_failed
    elif body.subscribed_topic_names and broker.authorizer is not None:
        # Kafka 4: every subscribed topic named must be describable (KafkaApis.handleConsumerGroupHeartbeat).
        names = set(body.subscribed_topic_names)
        if authorized_names(broker, conn, AclOperation.DESCRIBE, ResourceType.TOPIC, names) != names:
            refusal = ErrorCode.topic_authorization_failed
    if refusal is not None:
        return build(m.ConsumerGroupHeartbeatResponse, throttle_time=NO_THROTTLE, error_code=refusal, error_message=None,
                     member_id=None, member_epoch=0, heartbeat_interval=datetime.timedelta(0), assignment=None)

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
    wanted = list(request.body.group_ids)
    allowed = authorized_names(broker, conn, AclOperation.DESCRIBE, ResourceType.GROUP, wanted)
    groups = [build(m.DescribedGroup, error_code=ErrorCode.group_authorization_failed, error_message=None, group_id=g,
                    group_state="", group_epoch=0, assignment_epoch=0, assignor_name="", members=())
              for g in wanted if g not in allowed]
    described = broker.groups.consumer_group_describe([g for g in wanted if g in allowed])
    describable: set[str] = set()
    if broker.authorizer is not None:
        # Kafka 4: a group whose assignments hold a topic the principal may not describe is not described.
        names = {name for d in described for x in d.members for part in (x.assignment, x.target_assignment)
                 for _, name, _ in part}
        describable = authorized_names(broker, conn, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    for d in described:
        if broker.authorizer is not None and any(
                name not in describable for x in d.members for part in (x.assignment, x.target_assignment)
                for _, name, _ in part):
            groups.append(build(m.DescribedGroup, error_code=ErrorCode.topic_authorization_failed,
                                error_message="The group has described topic(s) that the client is not authorized to describe.",
                                group_id=d.group_id, group_state="", group_epoch=0, assignment_epoch=0, assignor_name="",
                                members=()))
            continue
        operations = (authorized_operations(broker, conn, ResourceType.GROUP, d.group_id)
                      if include_operations and broker.authorizer is not None else GROUP_AUTHORIZED_OPERATIONS)
        groups.append(build(
            m.DescribedGroup, error_code=d.error, error_message=d.error_message, group_id=d.group_id,
            group_state=d.state, group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch,
            assignor_name=d.assignor_name,
            authorized_operations=(operations if include_operations and d.error is ErrorCode.none
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
