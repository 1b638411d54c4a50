"""ApiVersions, Metadata and DescribeCluster: what the cluster is and what it speaks.

ApiVersions also lists the features (KIP-584), each finalized at the broker setting of the same
name, Kafka 4's levels by default: ``transaction.version`` 2 (a client that sees it uses
transactions v2, KIP-890 part 2, if it can) and ``group.version`` 1 (the KIP-848 consumer group
protocol: at 0, ConsumerGroupHeartbeat and ConsumerGroupDescribe answer UNSUPPORTED_VERSION, as
Kafka's do).

This broker is a one-node cluster: it is every partition's leader, its only
replica and the controller.  Leader epochs are 0.  Metadata auto-creates
topics the way Kafka does (``auto.create.topics.enable`` and the request's
``allow_auto_topic_creation``, never for internal or illegal names); the
topic is created before the answer is built, so the client sees it at once.

ACLs, as Kafka's KafkaApis (``handleTopicMetadataRequest``) and
DescribeTopicPartitionsRequestHandler: a topic needs DESCRIBE.  Asked for every
topic, the client is shown only those it may describe (the others are not even
mentioned); naming one it may not, it gets TOPIC_AUTHORIZATION_FAILED with no topic
id, before whether the topic exists is looked at.  Auto-creation also needs CREATE,
on the cluster or on the topic (TOPIC_AUTHORIZATION_FAILED otherwise, nothing
created).  ``topic_authorized_operations`` and ``cluster_authorized_operations``, when
asked for, are what the principal may do (the cluster's 0 without DESCRIBE on it).
DescribeCluster asks the same of the cluster; ApiVersions asks nothing.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any

from kio.schema.api_versions.v0 import response as api_versions_v0

from ...config import AUTO_CREATE_TOPICS_ENABLE, GROUP_VERSION, NUM_PARTITIONS, TRANSACTION_VERSION
from ...protocol import apis
from ...protocol.errors import ErrorCode
from ...security.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from ..partitions import Topic, topic_name_error
from .authz import authorize, authorize_cluster, authorized_operations
from .common import NO_THROTTLE, Request, build, responses
from .context import BrokerContext, Connection, Handler

log = logging.getLogger(__name__)

ZERO_UUID = uuid.UUID(int=0)
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
#: The features this broker knows (ApiVersions v3+, KIP-584) and their highest levels:
#: ``transaction.version`` 2 (transactions v2, KIP-890 part 2) and ``group.version`` 1 (KIP-848),
#: each finalized at the broker setting of its name.  They can only change across a restart, so
#: their epoch is when this process started (ms): a client connected across a restart adopts
#: finalized features only with a higher epoch.
MAX_TRANSACTION_VERSION = 2
FEATURES = ((GROUP_VERSION, 1), (TRANSACTION_VERSION, MAX_TRANSACTION_VERSION))
FINALIZED_FEATURES_EPOCH = time.time_ns() // 1_000_000
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


def _api_keys(module: Any) -> tuple[Any, ...]:
    return tuple(
        build(module.ApiVersion, api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in ((key, apis.advertised(key)) for key in sorted(apis.SUPPORTED))
    )


def handle_api_versions(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    error = ErrorCode.none
    if request.api_version >= 3 and not (
        _SOFTWARE.match(body.client_software_name) and _SOFTWARE.match(body.client_software_version)
    ):
        error = ErrorCode.invalid_request
        log.info("ApiVersions from %s: invalid client software name/version %r %r", conn.peer,
                 body.client_software_name, body.client_software_version)
    features: dict[str, Any] = {}
    if request.api_version >= 3:
        # Kafka omits a feature whose lowest supported level is 0 from ApiVersions v3's list.
        supported = () if request.api_version < 4 else tuple(
            build(m.SupportedFeatureKey, name=feature.name, min_version=0, max_version=top) for feature, top in FEATURES)
        levels = [(feature.name, broker.config[feature]) for feature, _ in FEATURES]
        finalized = tuple(build(m.FinalizedFeatureKey, name=name, min_version_level=level, max_version_level=level)
                          for name, level in levels if level > 0)
        features = {"supported_features": supported, "finalized_features": finalized,
                    "finalized_features_epoch": FINALIZED_FEATURES_EPOCH}
    return build(m.ApiVersionsResponse, error_code=error, api_keys=_api_keys(m), throttle_time=NO_THROTTLE, **features)


def unknown_api_versions_response() -> Any:
    """KIP-511: a v0 answer to an ApiVersions version we do not know: UNSUPPORTED_VERSION and, as
    Kafka's ApiVersionsRequest.getErrorResponse does, the versions of ApiVersions alone (the
    client retries with one of them and learns the rest then)."""
    m = api_versions_v0
    lo, hi = apis.SUPPORTED[apis.API_VERSIONS]
    return m.ApiVersionsResponse(error_code=ErrorCode.unsupported_version,
                                 api_keys=(build(m.ApiVersion, api_key=apis.API_VERSIONS, min_version=lo, max_version=hi),))


def partition_metadata(m: Any, broker: BrokerContext, topic: Topic) -> tuple[Any, ...]:
    node = broker.node_id
    return tuple(
        build(
            m.MetadataResponsePartition,
            error_code=ErrorCode.none,
            partition_index=p.partition,
            leader_id=node,
            leader_epoch=0,
            replica_nodes=(node,),
            isr_nodes=(node,),
            offline_replicas=(),
        )
        for p in topic.partitions
    )


def handle_metadata(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    registry = broker.registry
    version = request.api_version
    allow_create = bool(getattr(body, "allow_auto_topic_creation", True)) and broker.config[AUTO_CREATE_TOPICS_ENABLE]
    secured = broker.authorizer is not None
    if body.topics is None:
        wanted: list[tuple[str | None, uuid.UUID | None]] = [
            (t.name, None) for t in registry.topics.values()
            # Every topic: only those the principal may describe, the others not mentioned (not logged).
            if not secured or authorize(broker, conn, AclOperation.DESCRIBE, ResourceType.TOPIC, t.name, log_denied=False)]
    else:
        wanted = [(t.name, getattr(t, "topic_id", None)) for t in body.topics]
    include_ops = bool(getattr(body, "include_topic_authorized_operations", False))
    topics = []
    if version < 12 and any(name is None for name, _ in wanted):
        # Kafka refuses a null topic name before v12 ("Topic name can not be null for version N",
        # KafkaApis) as MetadataRequest.getErrorResponse answers: every topic INVALID_REQUEST, a
        # null name as "" (a response of these versions cannot carry a null name).
        wanted = []
        topics = [build(m.MetadataResponseTopic, error_code=ErrorCode.invalid_request, name=t.name or "",
                        topic_id=getattr(t, "topic_id", ZERO_UUID), is_internal=False, partitions=(),
                        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED) for t in body.topics]
    for name, topic_id in wanted:
        topic = None
        error = ErrorCode.none
        if secured and body.topics is not None:
            refusal = _metadata_refusal(m, broker, conn, name, topic_id, allow_create)
            if refusal is not None:
                topics.append(refusal)
                continue
        if name is None:
            topic = registry.by_id.get(topic_id) if topic_id else None
            if topic is None:
                error = ErrorCode.unknown_topic_id
        else:
            topic = registry.topics.get(name)
            if topic is None:
                if topic_name_error(name):
                    error = ErrorCode.invalid_topic_exception
                elif allow_create and not name.startswith("__"):
                    try:
                        topic = broker.create_topic(name, broker.config[NUM_PARTITIONS], {})
                    except OSError as exc:  # e.g. a full disk: nothing was created; the client retries
                        log.error("cannot auto-create topic %s: %s", name, exc)
                        error = ErrorCode.leader_not_available
                else:
                    error = ErrorCode.unknown_topic_or_partition
        topics.append(
            build(
                m.MetadataResponseTopic,
                error_code=error,
                name=topic.name if topic else name,
                topic_id=topic.topic_id if topic else ZERO_UUID,
                is_internal=topic.internal if topic else False,
                partitions=partition_metadata(m, broker, topic) if topic else (),
                topic_authorized_operations=_topic_operations(broker, conn, topic.name if topic else name) if include_ops
                else AUTHORIZED_OPERATIONS_OMITTED,
            )
        )
    host, port = broker.advertised_address(conn.listener_name)
    fields: dict[str, Any] = {
        "throttle_time": NO_THROTTLE,
        "brokers": (build(m.MetadataResponseBroker, node_id=broker.node_id, host=host, port=port, rack=None),),
        "cluster_id": registry.cluster_id,
        "controller_id": broker.node_id,
        "topics": tuple(topics),
    }
    if 8 <= version <= 10:
        include_cluster = bool(getattr(body, "include_cluster_authorized_operations", False))
        fields["cluster_authorized_operations"] = _cluster_operations(broker, conn) if include_cluster else AUTHORIZED_OPERATIONS_OMITTED
    return build(m.MetadataResponse, **fields)


def _metadata_refusal(m: Any, broker: BrokerContext, conn: Connection, name: str | None, topic_id: uuid.UUID | None,
                      allow_create: bool) -> Any:
    """A named topic's TOPIC_AUTHORIZATION_FAILED entry (Kafka's), or None if it may go on: DESCRIBE
    on it, and, for one that auto-creation would create, CREATE on the cluster or on it."""
    registry = broker.registry
    if name is None:  # by id (v12): an unknown id says so; a known one is no secret (Kafka answers its id)
        topic = registry.by_id.get(topic_id) if topic_id else None
        if topic is None or authorize(broker, conn, AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name):
            return None
        return build(m.MetadataResponseTopic, error_code=ErrorCode.topic_authorization_failed, name=None, topic_id=topic.topic_id,
                     is_internal=False, partitions=(), topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
    if authorize(broker, conn, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
        if not allow_create or name in registry.topics:
            return None
        if (authorize_cluster(broker, conn, AclOperation.CREATE, log_denied=False)
                or authorize(broker, conn, AclOperation.CREATE, ResourceType.TOPIC, name)):
            return None
        internal = name.startswith("__")  # Kafka's isInternal(topic) for the auto-creation refusal
    else:
        internal = False
    return build(m.MetadataResponseTopic, error_code=ErrorCode.topic_authorization_failed, name=name, topic_id=ZERO_UUID,
                 is_internal=internal, partitions=(), topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)


def _topic_operations(broker: BrokerContext, conn: Connection, name: str | None) -> int:
    """A topic's ``topic_authorized_operations`` when asked for: every operation with no
    authorizer, else what the principal may do (omitted for a topic known by no name)."""
    if broker.authorizer is None:
        return _ALL_TOPIC_OPERATIONS
    if name is None:
        return AUTHORIZED_OPERATIONS_OMITTED
    return authorized_operations(broker, conn, ResourceType.TOPIC, name)


def _cluster_operations(broker: BrokerContext, conn: Connection) -> int:
    """``cluster_authorized_operations`` when asked for (Metadata v8-10, DescribeCluster): 0 without
    DESCRIBE on the cluster, as Kafka answers."""
    if broker.authorizer is None:
        return _ALL_CLUSTER_OPERATIONS
    if not authorize_cluster(broker, conn, AclOperation.DESCRIBE):
        return 0
    return authorized_operations(broker, conn, ResourceType.CLUSTER, CLUSTER_NAME)


#: Kafka's ``max.request.partition.size.limit``: at most this many partitions per
#: DescribeTopicPartitions answer, whatever the request's own limit says.
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000


def handle_describe_topic_partitions(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    """KIP-966's paged Metadata, which Kafka's admin client (``describeTopics``, so
    ``kafka-topics --describe``) prefers.  As Kafka's DescribeTopicPartitionsRequestHandler: the
    named topics, or every topic, from the cursor on, sorted by name; at most the partition
    limit per answer, and then a cursor where the next answer starts.  Unknown names answer
    UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION if illegal) unless every topic was
    asked for.  Eligible leader replicas are empty lists: one replica, always in sync."""
    m = responses(request)
    body = request.body
    registry = broker.registry
    cursor = body.cursor
    start_name = cursor.topic_name if cursor is not None else ""
    every_topic = not body.topics
    names = set(registry.topics) if every_topic else {t.name for t in body.topics}
    names = {n for n in names if n >= start_name}
    if cursor is not None and (cursor.partition_index < 0 or (not every_topic and cursor.topic_name not in names)):
        # Kafka throws InvalidRequestException: every requested topic answers INVALID_REQUEST.
        return build(m.DescribeTopicPartitionsResponse, throttle_time=NO_THROTTLE, next_cursor=None, topics=tuple(
            build(m.DescribeTopicPartitionsResponseTopic, error_code=ErrorCode.invalid_request, name=t.name, topic_id=ZERO_UUID,
                  is_internal=False, partitions=(), topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
            for t in body.topics))
    remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, body.response_partition_limit), 1)
    node = broker.node_id
    topics: list[Any] = []
    refused: list[Any] = []
    secured = broker.authorizer is not None
    next_cursor = None
    for name in sorted(names):
        # DESCRIBE on each topic, asked as Kafka's handler asks it: lazily, in name order, until the
        # page is full (a refused topic takes no room; named, it is answered at the end).
        if secured and not authorize(broker, conn, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            if not every_topic:
                refused.append(build(m.DescribeTopicPartitionsResponseTopic, error_code=ErrorCode.topic_authorization_failed,
                                     name=name, topic_id=ZERO_UUID, is_internal=False, partitions=(),
                                     topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        if remaining == 0:
            next_cursor = build(m.Cursor, topic_name=name, partition_index=0)
            break
        topic = registry.topics.get(name)
        if topic is None:
            if not every_topic:
                error = ErrorCode.invalid_topic_exception if topic_name_error(name) else ErrorCode.unknown_topic_or_partition
                topics.append(build(m.DescribeTopicPartitionsResponseTopic, error_code=error, name=name, topic_id=ZERO_UUID,
                                    is_internal=name.startswith("__"), partitions=(),
                                    topic_authorized_operations=_topic_operations(broker, conn, name) if secured
                                    else AUTHORIZED_OPERATIONS_OMITTED))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        upper = min(len(topic.partitions), first + remaining)
        partitions = tuple(
            build(m.DescribeTopicPartitionsResponsePartition, error_code=ErrorCode.none, partition_index=index,
                  leader_id=node, leader_epoch=0, replica_nodes=(node,), isr_nodes=(node,), eligible_leader_replicas=(),
                  last_known_elr=(), offline_replicas=())
            for index in range(first, upper))
        topics.append(build(m.DescribeTopicPartitionsResponseTopic, error_code=ErrorCode.none, name=name,
                            topic_id=topic.topic_id, is_internal=topic.internal, partitions=partitions,
                            topic_authorized_operations=_topic_operations(broker, conn, name)))
        if upper < len(topic.partitions):
            next_cursor = build(m.Cursor, topic_name=name, partition_index=upper)
            break
        remaining -= len(partitions)
    return build(m.DescribeTopicPartitionsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics + refused),
                 next_cursor=next_cursor)


def handle_describe_cluster(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    endpoint_type = getattr(body, "endpoint_type", 1)
    if endpoint_type != 1:
        return build(
            m.DescribeClusterResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.unsupported_endpoint_type,
            error_message="Only the broker endpoint type is served", endpoint_type=endpoint_type,
            cluster_id=broker.registry.cluster_id, controller_id=-1, brokers=(),
        )
    host, port = broker.advertised_address(conn.listener_name)
    return build(
        m.DescribeClusterResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,
        cluster_id=broker.registry.cluster_id,
        controller_id=broker.node_id,
        brokers=(build(m.DescribeClusterBroker, broker_id=broker.node_id, host=host, port=port, rack=None),),
        cluster_authorized_operations=_cluster_operations(broker, conn) if body.include_cluster_authorized_operations
        else AUTHORIZED_OPERATIONS_OMITTED,
    )


def _bits(*ops: int) -> int:
    out = 0
    for op in ops:
        out |= 1 << op
    return out


# AclOperation codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
# DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12. No authorizer: everything is allowed.
_ALL_TOPIC_OPERATIONS = _bits(3, 4, 5, 6, 7, 8, 10, 11)
_ALL_CLUSTER_OPERATIONS = _bits(5, 7, 8, 9, 10, 11, 12)

HANDLERS: dict[int, Handler] = {
    apis.API_VERSIONS: handle_api_versions,
    apis.METADATA: handle_metadata,
    apis.DESCRIBE_CLUSTER: handle_describe_cluster,
    apis.DESCRIBE_TOPIC_PARTITIONS: handle_describe_topic_partitions,
}
