"""DescribeAcls, CreateAcls and DeleteAcls (KIP-140; versions 1-3, Kafka 4's), as Kafka's AclApis.

Each first needs its permission on the cluster -- DESCRIBE for DescribeAcls, ALTER for
the other two -- else every result answers CLUSTER_AUTHORIZATION_FAILED.  A broker with
no authorizer answers SECURITY_DISABLED ("No Authorizer is configured").  The work is
the authorizer's (``security/acls.py``): creating checks each binding (an invalid one
fails alone, INVALID_REQUEST with Kafka's message) and writes the new set durably before
it takes effect; deleting answers, per filter, the bindings it removed.

A request holding an UNKNOWN resource type, pattern type, operation or permission
(code 0, or a code Kafka does not know) is one Kafka refuses to parse: the connection
is closed, nothing answered (``CreateAclsRequest.validate`` and its siblings throw
while the request is read).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from ...protocol import apis
from ...protocol.errors import ErrorCode
from ...security.acls import AclBinding, AclBindingFilter, StandardAuthorizer
from ...security.authorizer import AclOperation
from .authz import authorize_cluster
from .common import NO_THROTTLE, Request, build, responses
from .context import BrokerContext, Connection, Handler

log = logging.getLogger(__name__)

#: Kafka's messages when there is no authorizer (AclApis).
NO_AUTHORIZER_DESCRIBE = "No Authorizer is configured on the broker"
NO_AUTHORIZER = "No Authorizer is configured."
#: Errors.CLUSTER_AUTHORIZATION_FAILED's message, which Kafka's error responses carry.
CLUSTER_AUTHORIZATION_FAILED_MESSAGE = "Cluster authorization failed."


def _refuse_unparsable(conn: Connection, what: str) -> None:
    log.info("closing the connection from %s: %s with UNKNOWN elements (Kafka cannot parse it)", conn.peer, what)
    conn.close()


def _standard(broker: BrokerContext) -> StandardAuthorizer | None:
    authorizer = broker.authorizer
    return authorizer if isinstance(authorizer, StandardAuthorizer) else None


def handle_describe_acls(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    acl_filter = AclBindingFilter.of(body.resource_type_filter, body.resource_name_filter, body.pattern_type_filter,
                                     body.principal_filter, body.host_filter, body.operation, body.permission_type)
    if acl_filter.has_unknown():
        _refuse_unparsable(conn, "DescribeAcls")
        return None

    def answer(error: ErrorCode, message: str | None, resources: tuple[Any, ...] = ()) -> Any:
        return build(m.DescribeAclsResponse, throttle_time=NO_THROTTLE, error_code=error, error_message=message,
                     resources=resources)

    if not authorize_cluster(broker, conn, AclOperation.DESCRIBE):
        return answer(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED_MESSAGE)
    authorizer = _standard(broker)
    if authorizer is None:
        return answer(ErrorCode.security_disabled, NO_AUTHORIZER_DESCRIBE)
    by_pattern: dict[tuple[Any, ...], list[AclBinding]] = defaultdict(list)
    for binding in authorizer.acls(acl_filter):
        by_pattern[(binding.resource_type, binding.resource_name, binding.pattern_type)].append(binding)
    resources = tuple(
        build(m.DescribeAclsResource, resource_type=rtype, resource_name=name, pattern_type=ptype, acls=tuple(
            build(m.AclDescription, principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission)
            for b in bindings))
        for (rtype, name, ptype), bindings in by_pattern.items())
    return answer(ErrorCode.none, None, resources)


def handle_create_acls(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    creations = [AclBinding.of(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host, c.operation,
                               c.permission_type) for c in request.body.creations]
    if any(b.has_unknown() for b in creations):
        _refuse_unparsable(conn, "CreateAcls")
        return None

    def answer(results: list[tuple[ErrorCode, str | None]]) -> Any:
        return build(m.CreateAclsResponse, throttle_time=NO_THROTTLE, results=tuple(
            build(m.AclCreationResult, error_code=error, error_message=message) for error, message in results))

    if not authorize_cluster(broker, conn, AclOperation.ALTER):
        return answer([(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED_MESSAGE)] * len(creations))
    authorizer = _standard(broker)
    if authorizer is None:
        return answer([(ErrorCode.security_disabled, NO_AUTHORIZER)] * len(creations))
    results = authorizer.create_acls(creations)
    for binding, result in zip(creations, results, strict=True):
        if result.error is not ErrorCode.none:
            log.info("CreateAcls %s from %s: %s (%s)", binding, conn.principal, result.error.name, result.message)
    return answer([(r.error, r.message) for r in results])


def handle_delete_acls(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    filters = [AclBindingFilter.of(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
                                   f.host_filter, f.operation, f.permission_type) for f in request.body.filters]
    if any(f.has_unknown() for f in filters):
        _refuse_unparsable(conn, "DeleteAcls")
        return None

    def answer(results: list[tuple[ErrorCode, str | None, tuple[AclBinding, ...]]]) -> Any:
        return build(m.DeleteAclsResponse, throttle_time=NO_THROTTLE, filter_results=tuple(
            build(m.DeleteAclsFilterResult, error_code=error, error_message=message, matching_acls=tuple(
                build(m.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None, resource_type=b.resource_type,
                      resource_name=b.resource_name, pattern_type=b.pattern_type, principal=b.principal, host=b.host,
                      operation=b.operation, permission_type=b.permission)
                for b in deleted))
            for error, message, deleted in results))

    if not authorize_cluster(broker, conn, AclOperation.ALTER):
        return answer([(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED_MESSAGE, ())] * len(filters))
    authorizer = _standard(broker)
    if authorizer is None:
        return answer([(ErrorCode.security_disabled, NO_AUTHORIZER, ())] * len(filters))
    return answer([(r.error, r.message, r.deleted) for r in authorizer.delete_acls(filters)])


HANDLERS: dict[int, Handler] = {
    apis.DESCRIBE_ACLS: handle_describe_acls,
    apis.CREATE_ACLS: handle_create_acls,
    apis.DELETE_ACLS: handle_delete_acls,
}
