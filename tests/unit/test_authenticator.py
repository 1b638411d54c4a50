"""The SASL authenticator's state machine (KIP-152 order, KIP-368 sessions), driven by an injected clock."""

from __future__ import annotations

import pytest

from onceflow.clock import FakeClock
from onceflow.protocol import apis
from onceflow.protocol.errors import ErrorCode
from onceflow.security.authenticator import Authenticator, State
from onceflow.security.mechanisms import SaslAuthenticationFailed


class TwoStep:
    """A two-message mechanism: ``hello`` then ``<user>:<secret>``, the secret always ``ok``."""

    mechanism = "TWO-STEP"

    def __init__(self) -> None:
        self._step = 0
        self._user = ""

    def evaluate(self, token: bytes) -> bytes:
        self._step += 1
        if self._step == 1:
            if token != b"hello":
                raise SaslAuthenticationFailed("expected hello")
            return b"challenge"
        name, _, secret = token.decode().partition(":")
        if secret != "ok":
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        self._user = name
        return b""

    @property
    def complete(self) -> bool:
        return bool(self._user)

    @property
    def authorization_id(self) -> str:
        return self._user


def _auth(clock: FakeClock, reauth_ms: int = 0) -> Authenticator:
    return Authenticator("SASL_PLAINTEXT", ["TWO-STEP"], lambda _m: TwoStep(), reauth_ms, clock.now_ms)


def _login(auth: Authenticator, name: str = "alice", version: int = 2) -> None:
    assert auth.handshake("TWO-STEP") is ErrorCode.none
    assert auth.authenticate(b"hello", version).reply == b"challenge"
    outcome = auth.authenticate(f"{name}:ok".encode(), version)
    assert outcome.error is ErrorCode.none and not outcome.close


def test_only_api_versions_and_the_handshake_pass_before_authentication() -> None:
    auth = _auth(FakeClock(0))
    assert auth.gate(apis.API_VERSIONS) is None and auth.gate(apis.SASL_HANDSHAKE) is None
    for key in (apis.METADATA, apis.PRODUCE, apis.SASL_AUTHENTICATE, apis.INIT_PRODUCER_ID):
        assert "unexpected" in (auth.gate(key) or "")
    assert auth.handshake("TWO-STEP") is ErrorCode.none
    assert auth.gate(apis.SASL_AUTHENTICATE) is None and auth.gate(apis.METADATA) is not None
    assert auth.gate(apis.API_VERSIONS) is not None  # Kafka: only SaslAuthenticate once a mechanism is chosen
    auth.authenticate(b"hello", 2)
    auth.authenticate(b"alice:ok", 2)
    assert auth.authenticated and str(auth.principal) == "User:alice"
    assert auth.gate(apis.PRODUCE) is None


def test_an_unknown_mechanism_or_wrong_credentials_fail_and_close() -> None:
    auth = _auth(FakeClock(0))
    assert auth.handshake("GSSAPI") is ErrorCode.unsupported_sasl_mechanism
    assert auth.state is State.FAILED and auth.gate(apis.API_VERSIONS) is not None
    auth = _auth(FakeClock(0))
    auth.handshake("TWO-STEP")
    auth.authenticate(b"hello", 2)
    outcome = auth.authenticate(b"alice:wrong", 2)
    assert (outcome.error, outcome.close) == (ErrorCode.sasl_authentication_failed, True)
    assert outcome.message == "Authentication failed: Invalid username or password"
    assert auth.principal is None and not auth.authenticated
    auth = _auth(FakeClock(0))
    assert auth.authenticate(b"hello", 2).error is ErrorCode.illegal_sasl_state  # before the handshake


def test_a_second_handshake_without_reauthentication_is_an_illegal_state() -> None:
    auth = _auth(FakeClock(0))
    _login(auth)
    assert auth.handshake("TWO-STEP") is ErrorCode.illegal_sasl_state
    assert auth.authenticated, "refused, the session goes on (Kafka's KafkaApis answers ILLEGAL_SASL_STATE)"


@pytest.mark.parametrize("version", [0, 1])
def test_kip368_sessions_end_and_are_renewed_on_the_connection(version: int) -> None:
    clock = FakeClock(1_000)
    auth = _auth(clock, reauth_ms=60_000)
    assert auth.handshake("TWO-STEP") is ErrorCode.none
    auth.authenticate(b"hello", version)
    outcome = auth.authenticate(b"alice:ok", version)
    assert outcome.session_lifetime_ms == (60_000 if version >= 1 else 0)  # v0 cannot carry it
    clock.advance(59_999)
    assert auth.gate(apis.FETCH) is None
    clock.advance(1)
    assert "expired" in (auth.gate(apis.FETCH) or "")
    assert auth.gate(apis.SASL_HANDSHAKE) is None
    _login(auth)  # the same principal again
    assert auth.gate(apis.FETCH) is None and auth.session_ends_ms == 61_000 + 60_000


def test_reauthentication_may_not_change_the_principal_or_the_mechanism() -> None:
    auth = _auth(FakeClock(0), reauth_ms=1000)
    _login(auth, "alice")
    assert auth.handshake("TWO-STEP") is ErrorCode.none
    auth.authenticate(b"hello", 2)
    outcome = auth.authenticate(b"mallory:ok", 2)
    assert outcome.error is ErrorCode.sasl_authentication_failed and outcome.close
    assert "Cannot change principals" in (outcome.message or "")
    auth = _auth(FakeClock(0), reauth_ms=1000)
    auth.mechanisms.append("OTHER")
    _login(auth)
    assert auth.handshake("OTHER") is ErrorCode.illegal_sasl_state


def test_after_a_v0_handshake_the_tokens_come_bare() -> None:
    auth = _auth(FakeClock(0))
    assert auth.handshake("TWO-STEP", version=0) is ErrorCode.none and auth.expects_raw_token
    auth.authenticate(b"hello", 0)
    assert auth.expects_raw_token
    auth.authenticate(b"alice:ok", 0)
    assert auth.authenticated and not auth.expects_raw_token
    reauth = _auth(FakeClock(0), reauth_ms=1000)
    _login(reauth)
    assert reauth.handshake("TWO-STEP", version=0) is ErrorCode.illegal_sasl_state  # KIP-368 needs v1
