"""The SASL mechanisms' servers (PLAIN, SCRAM-SHA-256/512), JAAS, and the start-up checks.

SCRAM is checked against the RFCs' own examples (RFC 7677 for SHA-256, RFC 5802 for the same
exchange with SHA-1, which only the test defines) and driven end to end by an independent client,
kafka-python's ``ScramClient``.  Every malformed token fails as ``SaslAuthenticationFailed``,
never as another exception.
"""

from __future__ import annotations

import base64
import hmac
import logging
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient

from onceflow.config import BrokerConfig, ConfigError
from onceflow.security import jaas
from onceflow.security.credentials import ScramCredentialStore, ScramUpsertion
from onceflow.security.mechanisms import (
    SUPPORTED_MECHANISMS,
    IllegalSaslState,
    SaslAuthenticationFailed,
    check_mechanisms,
    create_server,
)
from onceflow.security.plain import PlainServer
from onceflow.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    State,
    client_key,
    escape_username,
    make_credential,
    salted_password,
    server_key,
    unescape_username,
)

GENERIC_256 = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"

# -- RFC examples ------------------------------------------------------------------------------

#: RFC 7677, section 3: SCRAM-SHA-256, user "user", password "pencil".
RFC7677 = {
    "salt": "W22ZaJ0SNY7soEsUEjb6gQ==", "client_nonce": "rOprNGfwEbeRWgbNEkqO", "server_nonce": "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    "client_first": b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    "server_first": b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    "client_final": b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    "server_final": b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
}
#: RFC 5802, section 5: the same exchange with SHA-1 (not a Kafka mechanism; the code is generic).
RFC5802 = {
    "salt": "QSXCR+Q6sek8bf92", "client_nonce": "fyko+d2lbbFgONRv9qkxdawL", "server_nonce": "3rfcNHYJY1ZVvWVs7j",
    "client_first": b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
    "server_first": b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
    "client_final": b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
    "server_final": b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
}
SCRAM_SHA_1 = ScramMechanism("SCRAM-SHA-1", 0, "sha1")


def _hi_by_the_rfc(mechanism: ScramMechanism, password: bytes, salt: bytes, iterations: int) -> bytes:
    """RFC 5802, section 2.2, written out: U1 = HMAC(str, salt + INT(1)), Ui = HMAC(str, Ui-1), Hi = U1 XOR ... XOR Ui."""
    u = hmac.digest(password, salt + b"\x00\x00\x00\x01", mechanism.hash_name)
    result = u
    for _ in range(iterations - 1):
        u = hmac.digest(password, u, mechanism.hash_name)
        result = bytes(a ^ b for a, b in zip(result, u, strict=True))
    return result


@pytest.mark.parametrize(("mechanism", "example"), [(SCRAM_SHA_256, RFC7677), (SCRAM_SHA_1, RFC5802)], ids=["rfc7677", "rfc5802"])
def test_the_rfc_example_keys_proof_and_signature(mechanism: ScramMechanism, example: dict[str, object]) -> None:
    salt = base64.b64decode(str(example["salt"]))
    salted = salted_password(mechanism, "pencil", salt, 4096)
    assert salted == _hi_by_the_rfc(mechanism, b"pencil", salt, 4096)
    client_first, server_first, client_final = (bytes(example[k]) for k in ("client_first", "server_first", "client_final"))  # type: ignore[call-overload]
    without_proof, _, proof = client_final.decode().rpartition(",p=")
    auth_message = b",".join([client_first[3:], server_first, without_proof.encode()])
    stored_key = mechanism.hash(client_key(mechanism, salted))
    client_signature = mechanism.hmac(stored_key, auth_message)
    assert bytes(a ^ b for a, b in zip(client_key(mechanism, salted), client_signature, strict=True)) == base64.b64decode(proof)
    assert b"v=" + base64.b64encode(mechanism.hmac(server_key(mechanism, salted), auth_message)) == example["server_final"]
    credential = make_credential(mechanism, "pencil", salt, 4096)
    assert (credential.stored_key, credential.server_key) == (stored_key, server_key(mechanism, salted))


@pytest.mark.parametrize(("mechanism", "example"), [(SCRAM_SHA_256, RFC7677), (SCRAM_SHA_1, RFC5802)], ids=["rfc7677", "rfc5802"])
def test_the_server_answers_the_rfc_example_byte_for_byte(mechanism: ScramMechanism, example: dict[str, object]) -> None:
    credential = make_credential(mechanism, "pencil", base64.b64decode(str(example["salt"])), 4096)
    server = ScramServer(mechanism, {"user": credential}.get, server_nonce=str(example["server_nonce"]))
    assert server.evaluate(bytes(example["client_first"])) == example["server_first"]  # type: ignore[call-overload]
    assert not server.complete
    assert server.evaluate(bytes(example["client_final"])) == example["server_final"]  # type: ignore[call-overload]
    assert server.complete and server.authorization_id == "user"


# -- full exchanges with an independent client ------------------------------------------------


def _store(*users: tuple[str, str, ScramMechanism]) -> dict[tuple[str, str], ScramCredential]:
    return {(user, m.name): make_credential(m, password) for user, password, m in users}


def _server(mechanism: ScramMechanism, credentials: dict[tuple[str, str], ScramCredential]) -> ScramServer:
    return ScramServer(mechanism, lambda user: credentials.get((user, mechanism.name)))


def _login(server: ScramServer, user: str, password: str) -> ScramClient:
    client = ScramClient(user, password, server.mechanism)
    client.process_server_first_message(server.evaluate(client.first_message()))
    client.process_server_final_message(server.evaluate(client.final_message()))  # checks the server's signature
    return client


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512], ids=lambda m: m.name)
def test_a_scram_client_logs_in(mechanism: ScramMechanism) -> None:
    server = _server(mechanism, _store(("alice", "alice-secret", mechanism)))
    _login(server, "alice", "alice-secret")
    assert server.complete and server.authorization_id == "alice" and server.state is State.COMPLETE
    with pytest.raises(IllegalSaslState, match="Unexpected challenge in Sasl server state COMPLETE"):
        server.evaluate(b"n,,n=alice,r=again")


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512], ids=lambda m: m.name)
def test_the_other_mechanisms_credential_does_not_serve(mechanism: ScramMechanism) -> None:
    other = SCRAM_SHA_512 if mechanism is SCRAM_SHA_256 else SCRAM_SHA_256
    server = _server(mechanism, _store(("alice", "alice-secret", other)))
    with pytest.raises(SaslAuthenticationFailed):
        _login(server, "alice", "alice-secret")


def test_escaped_user_names_are_unescaped() -> None:
    assert escape_username("a,b=c") == "a=2Cb=3Dc"
    assert unescape_username("a=2Cb=3Dc") == "a,b=c"
    assert unescape_username("a=2Cb=3Dc=") is None and unescape_username("a=3") is None
    server = _server(SCRAM_SHA_256, _store(("a,b=c", "pw", SCRAM_SHA_256)))
    _login(server, escape_username("a,b=c"), "pw")  # the client sends the escaped form; the auth message uses it
    assert server.authorization_id == "a,b=c"


def test_a_non_ascii_user_name_logs_in() -> None:
    server = _server(SCRAM_SHA_512, _store(("zoë", "pässword", SCRAM_SHA_512)))
    _login(server, "zoë", "pässword")
    assert server.authorization_id == "zoë"


def test_a_wrong_password_fails_at_the_final_message_with_kafkas_generic_text() -> None:
    server = _server(SCRAM_SHA_256, _store(("alice", "alice-secret", SCRAM_SHA_256)))
    client = ScramClient("alice", "not-her-password", "SCRAM-SHA-256")
    client.process_server_first_message(server.evaluate(client.first_message()))
    with pytest.raises(SaslAuthenticationFailed) as failed:
        server.evaluate(client.final_message())
    assert str(failed.value) == GENERIC_256 == failed.value.client_message()
    assert failed.value.client_message(reauthenticating=True) == GENERIC_256.replace("during authentication", "during re-authentication")
    assert "Invalid client credentials" in failed.value.reason and "not-her-password" not in failed.value.reason
    assert server.state is State.FAILED and not server.complete
    with pytest.raises(IllegalSaslState, match="state FAILED"):
        server.evaluate(client.final_message())
    with pytest.raises(RuntimeError, match="not completed"):
        _ = server.authorization_id


def test_an_unknown_user_fails_at_once_and_says_no_more_than_a_wrong_password() -> None:
    server = _server(SCRAM_SHA_256, _store(("alice", "alice-secret", SCRAM_SHA_256)))
    with pytest.raises(SaslAuthenticationFailed) as failed:
        server.evaluate(ScramClient("mallory", "x", "SCRAM-SHA-256").first_message())
    assert str(failed.value) == GENERIC_256
    assert "Invalid user credentials" in failed.value.reason and "mallory" in failed.value.reason
    assert server.state is State.FAILED


SALT = b"0123456789abcdef"


def _first(server: ScramServer, first: bytes = b"n,,n=alice,r=abc") -> str:
    """Send client-first; return the combined nonce."""
    reply = server.evaluate(first).decode()
    return reply.split(",")[0][2:]


def _final_for(password: str, first_bare: str, nonce: str, gs2: str = "n,,") -> bytes:
    """A correct client-final, computed here (for messages kafka-python does not send)."""
    server_first = f"r={nonce},s={base64.b64encode(SALT).decode()},i=4096"
    without_proof = f"c={base64.b64encode(gs2.encode()).decode()},r={nonce}"
    salted = salted_password(SCRAM_SHA_256, password, SALT, 4096)
    key = client_key(SCRAM_SHA_256, salted)
    signature = SCRAM_SHA_256.hmac(SCRAM_SHA_256.hash(key), f"{first_bare},{server_first},{without_proof}".encode())
    proof = bytes(a ^ b for a, b in zip(key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def _alice_server() -> ScramServer:
    credential = make_credential(SCRAM_SHA_256, "pw", SALT, 4096)
    return ScramServer(SCRAM_SHA_256, {"alice": credential}.get)


def test_the_hand_made_client_final_logs_in() -> None:
    server = _alice_server()
    nonce = _first(server)
    assert server.evaluate(_final_for("pw", "n=alice,r=abc", nonce)).startswith(b"v=")
    assert server.authorization_id == "alice"


def test_an_authzid_equal_to_the_user_is_accepted_and_echoed_in_the_channel_binding() -> None:
    server = _alice_server()
    nonce = _first(server, b"n,a=alice,n=alice,r=abc")
    server.evaluate(_final_for("pw", "n=alice,r=abc", nonce, gs2="n,a=alice,"))
    assert server.authorization_id == "alice"


def test_an_authzid_of_another_user_is_refused_with_kafkas_message() -> None:
    with pytest.raises(SaslAuthenticationFailed) as failed:
        _alice_server().evaluate(b"n,a=admin,n=alice,r=abc")
    assert str(failed.value) == "Authentication failed: Client requested an authorization id that is different from username"


def test_a_channel_binding_that_does_not_repeat_the_gs2_header_fails() -> None:
    server = _alice_server()
    nonce = _first(server)
    with pytest.raises(SaslAuthenticationFailed) as failed:
        server.evaluate(_final_for("pw", "n=alice,r=abc", nonce, gs2="y,,"))  # a proof made over c=eSws
    assert "channel binding" in failed.value.reason


@pytest.mark.parametrize("change", ["drop the server's part", "other server nonce", "extra at the end"])
def test_a_final_nonce_other_than_the_server_first_one_fails(change: str) -> None:
    server = _alice_server()
    nonce = _first(server)
    bad = {"drop the server's part": "abc", "other server nonce": "abcXYZ", "extra at the end": nonce + "x"}[change]
    with pytest.raises(SaslAuthenticationFailed) as failed:
        server.evaluate(_final_for("pw", "n=alice,r=abc", bad))
    assert failed.value.reason == "Invalid client nonce in the final client message."


def test_a_delegation_token_login_is_refused_and_other_extensions_ignored() -> None:
    with pytest.raises(SaslAuthenticationFailed) as failed:
        _alice_server().evaluate(b"n,,n=alice,r=abc,tokenauth=true")
    assert "Invalid tokenId" in failed.value.reason and str(failed.value) == GENERIC_256
    server = _alice_server()
    nonce = _first(server, b"n,,n=alice,r=abc,tokenauth=false,x=y")
    server.evaluate(_final_for("pw", "n=alice,r=abc,tokenauth=false,x=y", nonce))
    assert server.authorization_id == "alice"


def test_a_stored_credential_below_the_minimum_iterations_is_refused() -> None:
    weak = make_credential(SCRAM_SHA_256, "pw", SALT, 1024)
    with pytest.raises(SaslAuthenticationFailed) as failed:
        ScramServer(SCRAM_SHA_256, {"alice": weak}.get).evaluate(b"n,,n=alice,r=abc")
    assert "less than the minimum 4096" in failed.value.reason


BAD_CLIENT_FIRST = [
    b"", b"n", b"n,", b"n,,", b"n,,n=alice", b"n,,n=alice,", b"n,,n=alice,r=", b"n,,r=abc,n=alice", b"n,,n=,r=abc",
    b"y,,n=alice,r=abc", b"p=tls-unique,,n=alice,r=abc", b"N,,n=alice,r=abc", b" n,,n=alice,r=abc",
    b"n,a=,n=alice,r=abc", b"n,x=alice,n=alice,r=abc", b"n,a=al=ice,n=alice,r=abc", b"n,,n=al=ice,r=abc", b"n,,n=alice=2,r=abc",
    b"n,,m=ext,n=alice,r=abc", b"n,,n=alice,r=a b", b"n,,n=alice,r=abc\xc3\xa9", b"n,,n=alice,r=a\x00bc", b"n,,n=al\x00ice,r=abc",
    b"n,,n=alice,r=abc,", b"n,,n=alice,r=abc,1=2", b"n,,n=alice,r=abc,tokenauth", b"n,,n=alice,r=abc,tokenauth=",
    b"\xff\xfen,,n=alice,r=abc", b"n,,n=alice\xff,r=abc", b"\x00" * 10, b"n,," + b"x" * 100_000,
]


@pytest.mark.parametrize("token", BAD_CLIENT_FIRST, ids=lambda t: repr(t[:30]))
def test_every_malformed_client_first_fails_as_an_authentication_failure(token: bytes) -> None:
    server = _alice_server()
    with pytest.raises(SaslAuthenticationFailed) as failed:
        server.evaluate(token)
    assert str(failed.value) == GENERIC_256
    assert server.state is State.FAILED


#: Ways to spoil a correct client-final: (good message, combined nonce, its proof) -> bytes.
BAD_CLIENT_FINAL = {
    "empty": lambda good, nonce, proof: b"",
    "channel binding only": lambda good, nonce, proof: b"c=biws",
    "no proof": lambda good, nonce, proof: f"c=biws,r={nonce}".encode(),
    "empty proof": lambda good, nonce, proof: f"c=biws,r={nonce},p=".encode(),
    "proof not base64": lambda good, nonce, proof: f"c=biws,r={nonce},p=!!!!".encode(),
    "proof badly padded": lambda good, nonce, proof: f"c=biws,r={nonce},p={proof[:-1]}".encode(),
    "proof too short": lambda good, nonce, proof: f"c=biws,r={nonce},p={base64.b64encode(b'x' * 31).decode()}".encode(),
    "proof wrong": lambda good, nonce, proof: good[:-4] + b"AAA=",
    "channel binding not base64": lambda good, nonce, proof: f"c=bi,r={nonce},p={proof}".encode(),
    "channel binding of y": lambda good, nonce, proof: good.replace(b"c=biws", b"c=eSws"),
    "empty channel binding": lambda good, nonce, proof: f"c=,r={nonce},p={proof}".encode(),
    "nonce first": lambda good, nonce, proof: f"r={nonce},c=biws,p={proof}".encode(),
    "proof first": lambda good, nonce, proof: f"p={proof},c=biws,r={nonce}".encode(),
    "no nonce": lambda good, nonce, proof: f"c=biws,p={proof}".encode(),
    "empty nonce": lambda good, nonce, proof: f"c=biws,r=,p={proof}".encode(),
    "bare extension": lambda good, nonce, proof: f"c=biws,r={nonce},x,p={proof}".encode(),
    "trailing comma": lambda good, nonce, proof: f"c=biws,r={nonce},p={proof},".encode(),
    "trailing NUL": lambda good, nonce, proof: good + b"\x00",
    "trailing =": lambda good, nonce, proof: good + b"=",
    "not UTF-8": lambda good, nonce, proof: b"\xff" + good,
    "upper case": lambda good, nonce, proof: good.upper(),
}


@pytest.mark.parametrize("spoil", BAD_CLIENT_FINAL.values(), ids=BAD_CLIENT_FINAL.keys())
def test_every_malformed_client_final_fails_as_an_authentication_failure(spoil: Callable[[bytes, str, str], bytes]) -> None:
    server = _alice_server()
    nonce = _first(server)
    good = _final_for("pw", "n=alice,r=abc", nonce)
    bad = spoil(good, nonce, good.decode().rpartition(",p=")[2])
    assert bad != good
    with pytest.raises(SaslAuthenticationFailed) as failed:
        server.evaluate(bad)
    assert str(failed.value) == GENERIC_256
    assert server.state is State.FAILED


@settings(max_examples=300, derandomize=True, deadline=None)
@given(first=st.one_of(st.binary(max_size=80), st.text(max_size=80).map(str.encode),
                       st.from_regex(re.compile(rb"n,(a=[a-z=,]{0,6})?,n=[a-z=,]{0,6},r=[!-~]{0,6}(,[a-z]{0,4}=?[a-z]{0,3})?"), fullmatch=True)),
       final=st.one_of(st.binary(max_size=80),
                       st.from_regex(re.compile(rb"c=[A-Za-z0-9+/=]{0,8},r=[!-~]{0,10}(,[a-z]=[a-z]{0,2})?,p=[A-Za-z0-9+/=]{0,50}"), fullmatch=True)))
def test_random_tokens_never_raise_anything_but_an_authentication_failure(first: bytes, final: bytes) -> None:
    server = _alice_server()
    try:
        server.evaluate(first)
        server.evaluate(final)
    except SaslAuthenticationFailed:
        assert server.state is State.FAILED
    else:  # only a client that knew the password gets here, and random bytes do not
        raise AssertionError(f"{first!r} then {final!r} logged in")


# -- PLAIN -------------------------------------------------------------------------------------

USERS = {"alice": "alice-secret", "bob": "bob-secret"}


def test_plain_logs_in_with_the_right_password() -> None:
    server = PlainServer(USERS)
    assert server.evaluate(b"\x00alice\x00alice-secret") == b""
    assert server.complete and server.authorization_id == "alice" and server.mechanism == "PLAIN"
    with pytest.raises(IllegalSaslState):
        server.evaluate(b"\x00alice\x00alice-secret")


def test_plain_accepts_an_authzid_equal_to_the_user() -> None:
    server = PlainServer(USERS)
    server.evaluate(b"bob\x00bob\x00bob-secret")
    assert server.authorization_id == "bob"


@pytest.mark.parametrize(("token", "message"), [
    (b"\x00alice\x00wrong", "Authentication failed: Invalid username or password"),
    (b"\x00mallory\x00alice-secret", "Authentication failed: Invalid username or password"),
    (b"\x00alice\x00alice-secret\xff", "Authentication failed: Invalid username or password"),
    (b"\x00ALICE\x00alice-secret", "Authentication failed: Invalid username or password"),
    (b"bob\x00alice\x00alice-secret", "Authentication failed: Client requested an authorization id that is different from username"),
    (b"\x00\x00alice-secret", "Authentication failed: username not specified"),
    (b"\x00alice\x00", "Authentication failed: password not specified"),
    (b"", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
    (b"alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
    (b"alice\x00alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (b"\x00alice\x00alice-secret\x00", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
    (b"a\x00b\x00c\x00d\x00e\x00f", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
    (b"\xff\xfe\x00\x80\x00\xc3", "Authentication failed: Invalid username or password"),
], ids=lambda v: repr(v)[:40])
def test_plain_failures_say_what_kafka_says(token: bytes, message: str) -> None:
    server = PlainServer(USERS)
    with pytest.raises(SaslAuthenticationFailed) as failed:
        server.evaluate(token)
    assert str(failed.value) == message == failed.value.client_message(reauthenticating=True)
    assert not server.complete
    with pytest.raises(IllegalSaslState, match="FAILED"):
        server.evaluate(b"\x00alice\x00alice-secret")


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.binary(max_size=60))
def test_plain_random_tokens_fail_cleanly(token: bytes) -> None:
    try:
        PlainServer(USERS).evaluate(token)
    except SaslAuthenticationFailed:
        pass


# -- JAAS --------------------------------------------------------------------------------------

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
INLINE = "listener.name.sasl_plaintext.plain.sasl.jaas.config"


def test_an_inline_entry_parses_with_quotes_comments_and_escapes() -> None:
    [entry] = jaas.parse_entries(
        f'{PLAIN_MODULE} REQUIRED // the broker\'s own login\n username="admin" password=\'ad"min\' /* users: */ '
        r'user_admin="a\"b\\c" user_alice=alice-secret user_x="semi;colon = {brace}";', "sasl.jaas.config")
    assert (entry.module, entry.flag) == (PLAIN_MODULE, "required")
    assert dict(entry.options) == {"username": "admin", "password": 'ad"min', "user_admin": 'a"b\\c',
                                   "user_alice": "alice-secret", "user_x": "semi;colon = {brace}"}
    assert "alice-secret" not in repr(entry)


def test_several_entries_and_every_control_flag() -> None:
    entries = jaas.parse_entries("a required; b Requisite x=1; c sufficient; d optional;", "s")
    assert [(e.module, e.flag) for e in entries] == [("a", "required"), ("b", "requisite"), ("c", "sufficient"), ("d", "optional")]


@pytest.mark.parametrize(("text", "why"), [
    ("", "login module not specified"),
    ("  // only a comment", "login module not specified"),
    (f'{PLAIN_MODULE} required user_a="secret1"', "not terminated by semi-colon"),
    (f"{PLAIN_MODULE};", "control flag not specified"),
    (f'{PLAIN_MODULE} mandatory user_a="secret1";', "invalid login module control flag 'mandatory'"),
    (f"{PLAIN_MODULE} required user_a;", "value not specified for an option"),
    (f"{PLAIN_MODULE} required user_a=;", "value not specified for an option"),
    (f'{PLAIN_MODULE} required user_a="secret1;', "quoted value opened at offset"),
    (f'{PLAIN_MODULE} required /* user_a="secret1";', "unterminated /* comment"),
    (f'{PLAIN_MODULE} required "secret1"="x";', "expected an option name"),
    (f'"{PLAIN_MODULE}" required;', "expected a login module class name"),
    ("{ x required; }", "expected a login module class name"),
])
def test_a_malformed_inline_entry_is_a_config_error_naming_the_setting(text: str, why: str) -> None:
    with pytest.raises(ConfigError) as error:
        jaas.parse_entries(text, INLINE)
    assert str(error.value).startswith(f"Invalid {INLINE}: ") and why in str(error.value)
    assert "secret1" not in str(error.value)


JAAS_FILE = f"""
// Kafka's kafka_server_jaas.conf
KafkaServer {{
    {PLAIN_MODULE} required
        username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="alice-secret";
    {SCRAM_MODULE} required user_scram="not-a-plain-user";
}};
sasl_plaintext.KafkaServer {{
    {PLAIN_MODULE} required user_bob="bob-secret";
}};
"Client" {{ }};
"""


def test_a_jaas_file_parses_into_sections() -> None:
    sections = jaas.parse_file(JAAS_FILE, "f")
    assert list(sections) == ["KafkaServer", "sasl_plaintext.KafkaServer", "Client"]
    assert [e.module for e in sections["KafkaServer"]] == [PLAIN_MODULE, SCRAM_MODULE]
    assert sections["Client"] == ()


@pytest.mark.parametrize(("text", "why"), [
    ("KafkaServer { a required; }", "expected ; after the }"),
    ("KafkaServer { a required; ", "is not closed"),
    ("KafkaServer a required; };", "expected { after section"),
    ("KafkaServer { a required };", "expected an option name, or a semicolon to end the entry"),
    ("A { a required; }; A { b required; };", "multiple entries for 'A'"),
    ("; A { a required; };", "expected a section name"),
])
def test_a_malformed_jaas_file_is_a_config_error(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match="Invalid f: ") as error:
        jaas.parse_file(text, "f")
    assert why in str(error.value)


def _file(tmp_path: Path, text: str = JAAS_FILE) -> str:
    path = tmp_path / "kafka_server_jaas.conf"
    path.write_text(text)
    return str(path)


def test_the_lookup_order_is_kafkas(tmp_path: Path) -> None:
    """Inline mechanism setting, then the file's <listener>.KafkaServer, then KafkaServer (JaasContext.loadServerContext)."""
    path = _file(tmp_path)
    config = BrokerConfig({"java.security.auth.login.config": path})
    assert jaas.plain_users("SASL_PLAINTEXT", config) == {"bob": "bob-secret"}  # the listener's own section
    assert jaas.plain_users("SASL_SSL", config) == {"admin": "admin-secret", "alice": "alice-secret"}  # no scram: other module
    assert jaas.server_entries("SASL_SSL", "PLAIN", config).source == f"{path} section KafkaServer"  # type: ignore[union-attr]
    config.update({INLINE: f'{PLAIN_MODULE} required user_carol="carol-secret";'})
    assert jaas.plain_users("SASL_PLAINTEXT", config) == {"carol": "carol-secret"}
    assert jaas.plain_users("SASL_SSL", config) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert jaas.server_entries("SASL_PLAINTEXT", "SCRAM-SHA-256", config).source.endswith("sasl_plaintext.KafkaServer")  # type: ignore[union-attr]


def test_the_file_is_read_once_per_configuration(tmp_path: Path) -> None:
    path = _file(tmp_path)
    config = BrokerConfig({"java.security.auth.login.config": path})
    assert jaas.plain_users("SASL_PLAINTEXT", config) == {"bob": "bob-secret"}
    Path(path).write_text("broken")
    assert jaas.plain_users("SASL_PLAINTEXT", config) == {"bob": "bob-secret"}, "as Kafka: read at start"
    with pytest.raises(ConfigError, match=r"java\.security\.auth\.login\.config file"):
        jaas.plain_users("SASL_PLAINTEXT", BrokerConfig({"java.security.auth.login.config": path}))


def test_an_unreadable_file_is_a_config_error_naming_the_setting(tmp_path: Path) -> None:
    config = BrokerConfig({"java.security.auth.login.config": str(tmp_path / "missing.conf")})
    with pytest.raises(ConfigError, match=r"Cannot read the JAAS file of java.security.auth.login.config \(.*missing.conf\)"):
        jaas.plain_users("SASL_PLAINTEXT", config)


def test_an_inline_setting_must_hold_one_entry() -> None:
    config = BrokerConfig({INLINE: f'{PLAIN_MODULE} required user_a="1"; {SCRAM_MODULE} required;'})
    with pytest.raises(ConfigError, match=f"Invalid {INLINE}: JAAS config property contains 2 login modules, should be 1 module"):
        jaas.plain_users("SASL_PLAINTEXT", config)


def test_the_first_entry_naming_a_user_wins() -> None:
    sections = {"KafkaServer": f'{PLAIN_MODULE} required user_a="1"; {PLAIN_MODULE} required user_a="2" user_b="3";'}
    text = "".join(f"{name} {{ {body} }};" for name, body in sections.items())
    entries = jaas.parse_file(text, "f")["KafkaServer"]
    assert [dict(e.options) for e in entries] == [{"user_a": "1"}, {"user_a": "2", "user_b": "3"}]


# -- start-up checks and create_server -------------------------------------------------------


def _sasl_config(**settings: str) -> BrokerConfig:
    return BrokerConfig({"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                         INLINE: f'{PLAIN_MODULE} required user_alice="alice-secret";', **settings})


def test_plain_and_scram_with_users_pass_the_checks() -> None:
    check_mechanisms("SASL_PLAINTEXT", _sasl_config())
    check_mechanisms("SASL_SSL", BrokerConfig({"sasl.enabled.mechanisms": "SCRAM-SHA-512"}))  # SCRAM needs no JAAS here


@pytest.mark.parametrize(("settings", "expected"), [
    ({}, r"sasl.enabled.mechanisms \(listener SASL_PLAINTEXT\) enables GSSAPI, Kerberos \(and Kafka's default"),
    ({"sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"}, "enables OAUTHBEARER, OAuth 2 bearer tokens, KIP-255, which Onceflow does not serve"),
    ({"sasl.enabled.mechanisms": "plain"}, "enables 'plain', not a SASL mechanism Onceflow serves .*case-sensitive"),
    ({"sasl.enabled.mechanisms": ""}, "is empty: a SASL listener needs at least one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"sasl.enabled.mechanisms": "PLAIN"}, "enables PLAIN but no user is configured for it: set "
                                           "listener.name.sasl_plaintext.plain.sasl.jaas.config to a"),
    ({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": f'{PLAIN_MODULE} required user_a="1";'},
     r"no user is configured .* \(sasl.jaas.config without the mechanism prefix is ignored on a broker, as in Kafka\)"),
    ({"sasl.enabled.mechanisms": "PLAIN", INLINE: f"{SCRAM_MODULE} required user_a=1;"},
     f"{INLINE} has no user_<name>=\"<password>\" option of {PLAIN_MODULE}"),
    ({"sasl.enabled.mechanisms": "SCRAM-SHA-256", "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": "x"},
     "Invalid listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config: login module control flag not specified"),
], ids=["gssapi-default", "oauthbearer", "case", "empty", "plain-no-users", "unprefixed", "plain-other-module", "bad-scram-jaas"])
def test_a_listener_that_cannot_serve_its_mechanisms_does_not_start(settings: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        check_mechanisms("SASL_PLAINTEXT", BrokerConfig(settings))


def test_per_listener_mechanisms_are_read(caplog: pytest.LogCaptureFixture) -> None:
    config = BrokerConfig({"listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256",
                           "sasl.jaas.config": f'{PLAIN_MODULE} required user_a="1";'})
    with caplog.at_level(logging.WARNING, logger="onceflow.security"):
        check_mechanisms("SASL_SSL", config)
    assert any("should be prefixed with SASL mechanism name" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigError, match="GSSAPI"):
        check_mechanisms("SASL_PLAINTEXT", config)


def test_create_server_serves_each_supported_mechanism(tmp_path: Path) -> None:
    store = ScramCredentialStore(tmp_path)
    config = _sasl_config()
    for mechanism in (SCRAM_SHA_256, SCRAM_SHA_512):
        salt = b"salt-" + mechanism.name.encode()
        [result] = store.alter([], [ScramUpsertion("alice", mechanism.code, 4096, salt, salted_password(mechanism, "scram-pw", salt, 4096))])
        assert result.error == 0
    assert SUPPORTED_MECHANISMS == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    plain = create_server("PLAIN", "SASL_PLAINTEXT", config, store)
    assert plain.evaluate(b"\x00alice\x00alice-secret") == b"" and plain.authorization_id == "alice"
    for name in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        server = create_server(name, "SASL_PLAINTEXT", config, store)
        assert isinstance(server, ScramServer) and server.mechanism == name
        _login(server, "alice", "scram-pw")
        assert server.complete and server.authorization_id == "alice"
    with pytest.raises(ValueError, match="'GSSAPI' is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"):
        create_server("GSSAPI", "SASL_PLAINTEXT", config, store)


def test_a_credential_changed_after_the_server_was_made_serves_the_next_login(tmp_path: Path) -> None:
    store = ScramCredentialStore(tmp_path)
    server = create_server("SCRAM-SHA-256", "SASL_SSL", BrokerConfig({}), store)
    salt = b"0123456789"
    store.alter([], [ScramUpsertion("late", 1, 4096, salt, salted_password(SCRAM_SHA_256, "pw", salt, 4096))])
    _login(server, "late", "pw")  # type: ignore[arg-type]
    assert server.authorization_id == "late"
