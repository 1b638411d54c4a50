"""One connection's SASL authentication: KIP-152's order, KIP-368's re-authentication.

Theory of operation: a connection on a SASL_PLAINTEXT or SASL_SSL listener
starts unauthenticated, and ``gate`` decides, for each request before it
reaches a handler, whether it may be served:

* before the handshake only ApiVersions and SaslHandshake (KIP-152: a
  client learns the versions, then names a mechanism);
* after the handshake only SaslAuthenticate, until the mechanism's exchange
  completes (after a v0 handshake, Kafka's first form, the tokens come as bare
  size-prefixed frames instead, and a failure closes the connection without
  an answer);
* once authenticated, everything; the connection's principal is
  ``User:<the mechanism's authorization id>``.

Anything else is what Kafka's SaslServerAuthenticator calls an illegal
state: the connection is closed, with one log line.  A handshake naming a
mechanism that is not enabled answers UNSUPPORTED_SASL_MECHANISM with the
enabled list, and a failed exchange SASL_AUTHENTICATION_FAILED with the
mechanism's message; both then close the connection, as Kafka does.  Until
authenticated, requests are held to ``sasl.server.max.receive.size``
(the server enforces it on the frame size).

KIP-368: with ``connections.max.reauth.ms`` > 0, SaslAuthenticate (v1+)
tells the client its session's lifetime.  Before it ends the client sends
SaslHandshake and SaslAuthenticate again on the same connection, with the
same mechanism and principal; a request other than SaslHandshake after the
session has ended closes the connection ("expired session").

The state machine is data (``_ALLOWED``) and the time is injected (``now_ms``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from ..protocol.apis import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE, api_name
from ..protocol.errors import ErrorCode
from .mechanisms import SaslAuthenticationFailed, SaslServer
from .principal import KafkaPrincipal, user

log = logging.getLogger(__name__)


class State(Enum):
    HANDSHAKE = "waiting for SaslHandshake"
    AUTHENTICATE = "waiting for SaslAuthenticate"
    AUTHENTICATED = "authenticated"
    REAUTHENTICATE = "re-authenticating"
    FAILED = "failed"


#: The requests each state lets through (AUTHENTICATED: all, checked separately).
_ALLOWED: dict[State, frozenset[int]] = {
    State.HANDSHAKE: frozenset({API_VERSIONS, SASL_HANDSHAKE}),
    State.AUTHENTICATE: frozenset({SASL_AUTHENTICATE}),
    State.REAUTHENTICATE: frozenset({SASL_AUTHENTICATE}),
    State.FAILED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a SaslAuthenticate request is answered with."""

    error: ErrorCode
    message: str | None
    reply: bytes
    #: KIP-368: how long the session lasts from now (0: no limit).
    session_lifetime_ms: int = 0
    #: The connection is closed once the answer is sent.
    close: bool = False


class Authenticator:
    def __init__(self, listener: str, mechanisms: Sequence[str], new_server: Callable[[str], SaslServer],
                 reauth_ms: int, now_ms: Callable[[], int], peer: str = "?") -> None:
        self.listener = listener
        self.mechanisms = list(mechanisms)
        self._new_server = new_server
        self._reauth_ms = reauth_ms
        self._now_ms = now_ms
        self.peer = peer
        self.state = State.HANDSHAKE
        self.principal: KafkaPrincipal | None = None
        self.mechanism: str | None = None
        self._server: SaslServer | None = None
        #: When the session ends (KIP-368), None: never.
        self.session_ends_ms: int | None = None
        #: SaslHandshake v0: the tokens follow as bare size-prefixed frames, no Kafka header.
        self.raw_tokens = False

    @property
    def expects_raw_token(self) -> bool:
        """The next frame is a bare SASL token (after a v0 handshake), not a Kafka request."""
        return self.raw_tokens and self.state is State.AUTHENTICATE

    @property
    def authenticated(self) -> bool:
        return self.state is State.AUTHENTICATED

    def gate(self, api_key: int) -> str | None:
        """None if a request of ``api_key`` may be served now, else why the connection is closed."""
        if self.state is State.AUTHENTICATED:
            if (self.session_ends_ms is not None and self._now_ms() >= self.session_ends_ms
                    and api_key != SASL_HANDSHAKE):
                return f"the SASL session of {self.principal} expired (connections.max.reauth.ms); {api_name(api_key)} refused"
            return None
        if api_key in _ALLOWED[self.state]:
            return None
        return f"unexpected {api_name(api_key)} request while {self.state.value} (SASL, listener {self.listener})"

    def handshake(self, mechanism: str, version: int = 1) -> ErrorCode:
        """SaslHandshake: start (or, KIP-368, restart) an exchange with ``mechanism``; after a v0
        handshake the tokens come bare (``expects_raw_token``), after v1 in SaslAuthenticate."""
        if self.state is State.AUTHENTICATED:
            if self._reauth_ms <= 0 or version < 1:
                return ErrorCode.illegal_sasl_state
            if mechanism != self.mechanism:
                log.info("SASL re-authentication from %s switched mechanism %s -> %s; closing", self.peer,
                         self.mechanism, mechanism)
                self.state = State.FAILED
                return ErrorCode.illegal_sasl_state
            self._server = self._new_server(mechanism)
            self.state = State.REAUTHENTICATE
            return ErrorCode.none
        if self.state is not State.HANDSHAKE:
            self.state = State.FAILED
            return ErrorCode.illegal_sasl_state
        if mechanism not in self.mechanisms:
            log.info("SASL handshake from %s names mechanism %r; enabled on %s: %s", self.peer, mechanism,
                     self.listener, ", ".join(self.mechanisms))
            self.state = State.FAILED
            return ErrorCode.unsupported_sasl_mechanism
        self.mechanism = mechanism
        self._server = self._new_server(mechanism)
        self.state = State.AUTHENTICATE
        self.raw_tokens = version == 0
        return ErrorCode.none

    def authenticate(self, token: bytes, version: int) -> Outcome:
        """SaslAuthenticate: one step of the mechanism's exchange."""
        server = self._server
        if server is None or self.state not in (State.AUTHENTICATE, State.REAUTHENTICATE):
            self.state = State.FAILED
            return Outcome(ErrorCode.illegal_sasl_state, "SaslAuthenticate before SaslHandshake", b"", close=True)
        try:
            reply = server.evaluate(token)
        except SaslAuthenticationFailed as exc:  # the client is told str(exc); the log says why
            return self._fail(str(exc), exc.reason)
        if not server.complete:
            return Outcome(ErrorCode.none, None, reply)
        principal = user(server.authorization_id)
        if self.state is State.REAUTHENTICATE and principal != self.principal:
            return self._fail(f"Cannot change principals during re-authentication from {self.principal}: {principal}")
        self.principal = principal
        self.state = State.AUTHENTICATED
        self._server = None
        lifetime = self._reauth_ms if self._reauth_ms > 0 and version >= 1 else 0
        self.session_ends_ms = self._now_ms() + self._reauth_ms if self._reauth_ms > 0 else None
        return Outcome(ErrorCode.none, None, reply, session_lifetime_ms=lifetime)

    def _fail(self, message: str, reason: str | None = None) -> Outcome:
        # The reason may hold what the client sent (a user name): cut, so one client cannot flood the log.
        log.info("SASL %s authentication from %s on listener %s failed: %.200s", self.mechanism, self.peer,
                 self.listener, reason or message)
        self.state = State.FAILED
        self._server = None
        return Outcome(ErrorCode.sasl_authentication_failed, message, b"", close=True)
