"""SaslHandshake and SaslAuthenticate (KIP-152): the handlers of a connection's authentication.

The exchange itself is the connection's ``Authenticator``
(``security/authenticator.py``); these handlers turn its outcomes into
responses.  On a listener without SASL both answer ILLEGAL_SASL_STATE, as
Kafka's KafkaApis does.  A refused handshake or a failed exchange is answered,
then the connection is closed (``Connection.close_after_response``).
"""

from __future__ import annotations

import datetime
from typing import Any

from ...protocol import apis
from ...protocol.errors import ErrorCode
from .common import Request, build, responses
from .context import BrokerContext, Connection, Handler


def handle_sasl_handshake(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    auth = conn.authenticator
    if auth is None:
        return build(m.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    error = auth.handshake(request.body.mechanism, request.api_version)
    if error is not ErrorCode.none:
        conn.close_after_response()
    return build(m.SaslHandshakeResponse, error_code=error, mechanisms=tuple(auth.mechanisms))


def handle_sasl_authenticate(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    auth = conn.authenticator
    if auth is None:
        return build(m.SaslAuthenticateResponse, error_code=ErrorCode.illegal_sasl_state,
                     error_message="SaslAuthenticate on a listener without SASL", auth_bytes=b"",
                     session_lifetime=datetime.timedelta(0))
    outcome = auth.authenticate(bytes(request.body.auth_bytes), request.api_version)
    if outcome.close:
        conn.close_after_response()
    elif auth.authenticated and auth.principal is not None:
        conn.on_authenticated(auth.principal)
    return build(m.SaslAuthenticateResponse, error_code=outcome.error, error_message=outcome.message,
                 auth_bytes=outcome.reply, session_lifetime=datetime.timedelta(milliseconds=outcome.session_lifetime_ms))


HANDLERS: dict[int, Handler] = {
    apis.SASL_HANDSHAKE: handle_sasl_handshake,
    apis.SASL_AUTHENTICATE: handle_sasl_authenticate,
}
