"""SCRAM credentials: DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554.

Each handler is one call to the broker's ``ScramCredentialStore``
(``security/credentials.py``, where Kafka 4's outcomes are explained), after
Kafka's authorization: with an authorizer, Describe needs DESCRIBE and Alter
needs ALTER on the CLUSTER resource.  A refused Describe answers as Kafka's
``DescribeUserScramCredentialsRequest.getErrorResponse``: the top-level error
CLUSTER_AUTHORIZATION_FAILED and one result with it per user named (user name
left empty, as Kafka leaves it); a refused Alter as
``AlterUserScramCredentialsRequest.getErrorResponse``: each user named, once,
sorted, with CLUSTER_AUTHORIZATION_FAILED.  A refusal changes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from ...protocol import apis
from ...protocol.errors import ErrorCode
from ...security.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from ...security.credentials import ScramDeletion, ScramUpsertion
from .common import NO_THROTTLE, Request, build, responses
from .context import BrokerContext, Connection, Handler

log = logging.getLogger(__name__)


def _authorized(broker: BrokerContext, conn: Connection, operation: AclOperation) -> bool:
    authorizer = broker.authorizer
    return authorizer is None or authorizer.authorize(conn.principal, conn.client_host, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def handle_describe_user_scram_credentials(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    users = request.body.users
    if not _authorized(broker, conn, AclOperation.DESCRIBE):
        refused = ErrorCode.cluster_authorization_failed
        log.info("DescribeUserScramCredentials from %s (%s): %s", conn.peer, conn.principal, refused.name)
        results = tuple(build(m.DescribeUserScramCredentialsResult, user="", error_code=refused, error_message=None, credential_infos=())
                        for _ in users or ())
        return build(m.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE, error_code=refused, error_message=None,
                     results=results)
    described = broker.scram_credentials.describe(None if users is None else [u.name for u in users])
    results = tuple(
        build(m.DescribeUserScramCredentialsResult, user=d.user, error_code=d.error, error_message=d.message,
              credential_infos=tuple(build(m.CredentialInfo, mechanism=c.mechanism.code, iterations=c.iterations) for c in d.credentials))
        for d in described)
    return build(m.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                 results=results)


def handle_alter_user_scram_credentials(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    if not _authorized(broker, conn, AclOperation.ALTER):
        refused = ErrorCode.cluster_authorization_failed
        log.info("AlterUserScramCredentials from %s (%s): %s", conn.peer, conn.principal, refused.name)
        users = sorted({d.name for d in body.deletions} | {u.name for u in body.upsertions})
        return build(m.AlterUserScramCredentialsResponse, throttle_time=NO_THROTTLE, results=tuple(
            build(m.AlterUserScramCredentialsResult, user=user, error_code=refused, error_message=None) for user in users))
    altered = broker.scram_credentials.alter(
        [ScramDeletion(d.name, d.mechanism) for d in body.deletions],
        [ScramUpsertion(u.name, u.mechanism, u.iterations, u.salt, u.salted_password) for u in body.upsertions])
    for result in altered:
        if result.error is not ErrorCode.none:
            log.info("AlterUserScramCredentials %r from %s: %s (%s)", result.user, conn.peer, result.error.name, result.message)
    return build(m.AlterUserScramCredentialsResponse, throttle_time=NO_THROTTLE, results=tuple(
        build(m.AlterUserScramCredentialsResult, user=r.user, error_code=r.error, error_message=r.message) for r in altered))


HANDLERS: dict[int, Handler] = {
    apis.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
    apis.ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
}
