"""What handlers ask the authorizer, and the one line a refusal is logged in (Kafka's AuthHelper).

Theory of operation.  Every handler that Kafka's ``KafkaApis`` (or, for the APIs a KRaft
broker forwards, ``ControllerApis``) authorizes asks here, *before* anything is changed,
and turns a refusal into Kafka's error value for it (TOPIC_AUTHORIZATION_FAILED,
GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED).  With no authorizer (``broker.authorizer`` is
None: no ``authorizer.class.name``) every question is answered yes at the cost of one
attribute test; the hot paths (Produce, Fetch) ask only when there is an authorizer,
once per request and topic, never per partition.

A refusal of something the client asked for is logged at INFO on the
``onceflow.authorizer`` logger (Kafka's ``kafka.authorizer.logger``) in Kafka's words:
``Principal = User:bob is Denied operation = WRITE from host = 10.0.0.7 on resource =
TransactionalId:LITERAL:tx``; allowed checks at DEBUG.  Questions Kafka asks with
``logIfDenied = false`` -- filtering what a listing shows, computing
``authorized_operations``, a cluster-wide permission tried before per-resource ones --
are not logged when denied.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ...security.acls import SUPPORTED_OPERATIONS, bitfield, resource_type_name
from ...security.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from .context import BrokerContext, Connection

audit = logging.getLogger("onceflow.authorizer")

#: An ``authorized_operations`` field not asked for (Kafka's Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def log_decision(conn: Connection, operation: AclOperation, resource_type: ResourceType, name: str, allowed: bool) -> None:
    if allowed:
        if audit.isEnabledFor(logging.DEBUG):
            audit.debug("Principal = %s is Allowed operation = %s from host = %s on resource = %s:LITERAL:%s",
                        conn.principal, operation.name, conn.client_host, resource_type_name(resource_type), name)
        return
    audit.info("Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s",
               conn.principal, operation.name, conn.client_host, resource_type_name(resource_type), name)


def authorize(broker: BrokerContext, conn: Connection, operation: AclOperation, resource_type: ResourceType, name: str,
              *, log_denied: bool = True) -> bool:
    """May the connection's principal do ``operation`` on the resource?  (True with no authorizer.)"""
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    allowed = authorizer.authorize(conn.principal, conn.client_host, operation, resource_type, name)
    if allowed or log_denied:
        log_decision(conn, operation, resource_type, name, allowed)
    return allowed


def authorize_cluster(broker: BrokerContext, conn: Connection, operation: AclOperation, *, log_denied: bool = True) -> bool:
    return authorize(broker, conn, operation, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=log_denied)


def authorized_names(broker: BrokerContext, conn: Connection, operation: AclOperation, resource_type: ResourceType,
                     names: Iterable[str], *, log_denied: bool = True) -> set[str]:
    """The names (each asked once) the principal may do ``operation`` on (Kafka's filterByAuthorized)."""
    unique = set(names)
    if broker.authorizer is None:
        return unique
    return {n for n in unique if authorize(broker, conn, operation, resource_type, n, log_denied=log_denied)}


def authorize_any(broker: BrokerContext, conn: Connection, operation: AclOperation, resource_type: ResourceType) -> bool:
    """May it do ``operation`` on some resource of the type (Kafka's authorizeByResourceType, KIP-679)?"""
    authorizer = broker.authorizer
    return authorizer is None or authorizer.authorize_any(conn.principal, conn.client_host, operation, resource_type)


def authorized_operations(broker: BrokerContext, conn: Connection, resource_type: ResourceType, name: str) -> int:
    """Kafka's ``authorizedOperations``: the bitfield of the type's operations the principal may
    do on the resource (every one with no authorizer); never logged."""
    operations = SUPPORTED_OPERATIONS[resource_type]
    authorizer = broker.authorizer
    if authorizer is None:
        return bitfield(operations)
    return bitfield(op for op in operations
                    if authorizer.authorize(conn.principal, conn.client_host, op, resource_type, name))
