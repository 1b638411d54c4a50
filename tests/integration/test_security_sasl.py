"""SASL with real clients: PLAIN and SCRAM-SHA-256/512 over SASL_PLAINTEXT and SASL_SSL.

One embedded broker serves SASL_PLAINTEXT (PLAIN users from an inline JAAS
entry), SASL_SSL (PLAIN users from a JAAS file, Kafka's
``java.security.auth.login.config``), REAUTH (SASL with KIP-368 sessions of
1.5 s) and a PLAINTEXT listener the tests manage SCRAM users through.
Clients are confluent-kafka, kafka-python and aiokafka; the bad-input cases
speak the wire by hand.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from onceflow.broker.embedded import EmbeddedBroker
from onceflow.protocol.errors import ErrorCode
from onceflow.security.certs import CertificateAuthority
from tests.support.waiting import wait_for
from tests.support.wire import WireClient

TIMEOUT_S = 20
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" user_carol="carol-secret";')


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("sasl-pki"))


@pytest.fixture(scope="module")
def broker(ca: CertificateAuthority, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    keystore = ca.issue("broker", "CN=broker.test", hosts=("127.0.0.1",)).keystore
    jaas_file = tmp_path_factory.mktemp("jaas") / "kafka_server_jaas.conf"
    jaas_file.write_text('sasl_ssl.KafkaServer {\n  org.apache.kafka.common.security.plain.PlainLoginModule required\n'
                         '  user_dave="dave-secret";\n};\n')
    settings = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,REAUTH://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,REAUTH:SASL_PLAINTEXT,"
                                          "PLAINTEXT:PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.reauth.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.reauth.connections.max.reauth.ms": 1500,
        "java.security.auth.login.config": str(jaas_file),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "group.initial.rebalance.delay.ms": 0,
        "sasl.server.max.receive.size": 4096,
    }
    with EmbeddedBroker(**settings) as running:
        _add_users(running.listeners["PLAINTEXT"], {"alice": "alice-secret", "bob": "bob-secret"})
        yield running


def _add_users(bootstrap: str, users: dict[str, str], mechanisms: tuple[ScramMechanism, ...] = (
        ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for mechanism in mechanisms:  # Kafka 4 refuses one user twice in a request (DUPLICATE_RESOURCE)
        upserts = [UserScramCredentialUpsertion(name, ScramCredentialInfo(mechanism, 4096), password.encode())
                   for name, password in users.items()]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(TIMEOUT_S)


def _sasl(broker: EmbeddedBroker, listener: str, mechanism: str, user: str, password: str, ca: CertificateAuthority,
          **extra: Any) -> dict[str, Any]:
    conf = {"bootstrap.servers": broker.listeners[listener], "security.protocol": "SASL_SSL" if listener == "SASL_SSL"
            else "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            "socket.timeout.ms": 5000, **extra}
    if listener == "SASL_SSL":
        conf["ssl.ca.location"] = str(ca.location)
    return conf


def _principals(broker: EmbeddedBroker, listener: str) -> set[str]:
    return broker.call(lambda: {str(c.principal) for c in broker.broker.state.connections if c.listener_name == listener})


def _logs_in(conf: dict[str, Any], timeout: float = TIMEOUT_S) -> bool:
    try:
        AdminClient(conf).list_topics(timeout=timeout)
    except KafkaException:
        return False
    return True


@pytest.mark.parametrize("listener,mechanism", [("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
                                                ("SASL_SSL", "SCRAM-SHA-512")])
def test_scram_users_produce_and_consume_as_themselves(broker: EmbeddedBroker, ca: CertificateAuthority, listener: str,
                                                       mechanism: str) -> None:
    conf = _sasl(broker, listener, mechanism, "alice", "alice-secret", ca)
    topic = f"scram-{uuid.uuid4().hex[:8]}"
    producer = Producer(conf | {"transactional.id": f"tx-{topic}"})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"paid")
    producer.commit_transaction(TIMEOUT_S)
    assert _principals(broker, listener) == {"User:alice"}
    consumer = Consumer(conf | {"group.id": f"g-{topic}", "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    message = wait_for(lambda: (m := consumer.poll(0.5)) is not None and m.error() is None and m, TIMEOUT_S, 0, "the record")
    assert message.value() == b"paid"
    consumer.close()


@pytest.mark.parametrize("case", ["wrong password", "unknown user", "mechanism not enabled for the user",
                                  "PLAIN user on SCRAM"])
def test_wrong_credentials_are_refused_and_nothing_stays_connected(broker: EmbeddedBroker, ca: CertificateAuthority,
                                                                   case: str, caplog: pytest.LogCaptureFixture) -> None:
    conf = {
        "wrong password": _sasl(broker, "SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "guess", ca),
        "unknown user": _sasl(broker, "SASL_PLAINTEXT", "SCRAM-SHA-256", "nobody", "guess", ca),
        "mechanism not enabled for the user": _sasl(broker, "SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret", ca),
        "PLAIN user on SCRAM": _sasl(broker, "SASL_PLAINTEXT", "SCRAM-SHA-512", "carol", "carol-secret", ca),
    }[case]
    caplog.set_level(logging.INFO, logger="onceflow.security")
    assert not _logs_in(conf, timeout=1)
    assert not [p for p in _principals(broker, "SASL_PLAINTEXT") if p != "User:alice"]
    assert any("authentication" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records)


def test_plain_users_come_from_an_inline_jaas_entry_or_a_jaas_file(broker: EmbeddedBroker, ca: CertificateAuthority) -> None:
    assert _logs_in(_sasl(broker, "SASL_PLAINTEXT", "PLAIN", "carol", "carol-secret", ca))
    assert _logs_in(_sasl(broker, "SASL_SSL", "PLAIN", "dave", "dave-secret", ca))
    assert not _logs_in(_sasl(broker, "SASL_SSL", "PLAIN", "carol", "carol-secret", ca), timeout=1), "listener's own users"
    assert not _logs_in(_sasl(broker, "SASL_PLAINTEXT", "PLAIN", "carol", "wrong", ca), timeout=1)


def test_a_user_added_at_run_time_logs_in_and_a_deleted_one_no_longer_does(broker: EmbeddedBroker,
                                                                           ca: CertificateAuthority) -> None:
    name = f"u{uuid.uuid4().hex[:6]}"
    conf = _sasl(broker, "SASL_PLAINTEXT", "SCRAM-SHA-256", name, "fresh-secret", ca)
    assert not _logs_in(conf, timeout=1)
    _add_users(broker.listeners["PLAINTEXT"], {name: "fresh-secret"}, (ScramMechanism.SCRAM_SHA_256,))
    assert _logs_in(conf)
    from confluent_kafka.admin import UserScramCredentialDeletion

    admin = AdminClient({"bootstrap.servers": broker.listeners["PLAINTEXT"]})
    for future in admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(name, ScramMechanism.SCRAM_SHA_256)]).values():
        future.result(TIMEOUT_S)
    assert not _logs_in(conf, timeout=1)


def test_kafka_python_and_aiokafka_log_in_with_scram_and_plain(broker: EmbeddedBroker) -> None:
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    topic = f"sasl-other-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=broker.listeners["SASL_PLAINTEXT"], security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="bob", sasl_plain_password="bob-secret",
                             request_timeout_ms=TIMEOUT_S * 1000)
    producer.send(topic, b"kafka-python").get(timeout=TIMEOUT_S)
    producer.close()

    async def aiokafka_send(mechanism: str, user: str, password: str) -> None:
        aio = AIOKafkaProducer(bootstrap_servers=broker.listeners["SASL_PLAINTEXT"], security_protocol="SASL_PLAINTEXT",
                               sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
        await aio.start()
        try:
            await aio.send_and_wait(topic, f"aiokafka {mechanism}".encode())
        finally:
            await aio.stop()

    asyncio.run(aiokafka_send("SCRAM-SHA-256", "bob", "bob-secret"))
    asyncio.run(aiokafka_send("PLAIN", "carol", "carol-secret"))
    consumer = Consumer({"bootstrap.servers": broker.listeners["PLAINTEXT"], "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []

    def three() -> bool:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
        return len(values) >= 3

    wait_for(three, TIMEOUT_S, 0, "three records")
    consumer.close()
    assert sorted(values) == [b"aiokafka PLAIN", b"aiokafka SCRAM-SHA-256", b"kafka-python"]


def test_kip368_sessions_are_renewed_on_the_same_connection(broker: EmbeddedBroker, ca: CertificateAuthority) -> None:
    conf = _sasl(broker, "REAUTH", "PLAIN", "carol", "carol-secret", ca)
    conf["security.protocol"] = "SASL_PLAINTEXT"
    producer = Producer(conf | {"linger.ms": 0})
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    producer.produce(topic, b"0")
    assert producer.flush(TIMEOUT_S) == 0

    def session_ends() -> set[int]:
        return broker.call(lambda: {c.authenticator.session_ends_ms for c in broker.broker.state.connections
                                    if c.listener_name == "REAUTH" and c.authenticator is not None})

    first = session_ends()
    created = broker.call(lambda: broker.broker.state.stats.connections_created)
    # Keep producing across two session lifetimes (1.5 s each): librdkafka re-authenticates in place.
    wait_for(lambda: (producer.produce(topic, b"x"), producer.flush(TIMEOUT_S))[1] == 0 and min(session_ends()) > max(first) + 1500,
             TIMEOUT_S, 0.1, "two re-authentications")
    assert broker.call(lambda: broker.broker.state.stats.connections_created) == created, "no new connection"
    assert _principals(broker, "REAUTH") == {"User:carol"}


# -- bad input on the handshake: that connection only is closed -------------------------------


def _handshake(client: WireClient, mechanism: str) -> Any:
    return client.request(SaslHandshakeRequest(mechanism=mechanism))


def test_requests_out_of_order_are_refused_by_closing_the_connection(broker: EmbeddedBroker) -> None:
    address = broker.listeners["SASL_PLAINTEXT"]
    with WireClient(address) as client:  # Metadata before authenticating
        client.send(MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        assert client.is_closed_by_peer()
    with WireClient(address) as client:  # SaslAuthenticate before SaslHandshake
        client.send(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"))
        assert client.is_closed_by_peer()
    with WireClient(address) as client:  # ApiVersions is allowed first, then a mechanism not enabled
        client.request(ApiVersionsRequest(client_software_name="wire", client_software_version="1"))
        response = _handshake(client, "GSSAPI")
        assert response.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(response.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert client.is_closed_by_peer()
    _assert_still_serving(broker)


@pytest.mark.parametrize("token", [b"", b"\xff" * 64, b"n,,n=alice", b"n,,n=alice,r=", b"p=tls-unique,,n=alice,r=abc",
                                   b"n,,n=al=ZZice,r=abc", b"y,,n=alice,r=abc,e=1", "n,,n=✓,r=✓".encode()])
def test_garbage_scram_tokens_fail_authentication_and_close_the_connection(broker: EmbeddedBroker, token: bytes) -> None:
    with WireClient(broker.listeners["SASL_PLAINTEXT"]) as client:
        assert _handshake(client, "SCRAM-SHA-256").error_code == ErrorCode.none
        response = client.request(SaslAuthenticateRequest(auth_bytes=token))
        assert response.error_code in (ErrorCode.sasl_authentication_failed, ErrorCode.illegal_sasl_state)
        assert client.is_closed_by_peer()
    _assert_still_serving(broker)


def test_a_token_beyond_sasl_server_max_receive_size_closes_the_connection(broker: EmbeddedBroker) -> None:
    with WireClient(broker.listeners["SASL_PLAINTEXT"]) as client:
        assert _handshake(client, "PLAIN").error_code == ErrorCode.none
        client.send(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00" + b"p" * 10_000))
        assert client.is_closed_by_peer()
    with WireClient(broker.listeners["SASL_PLAINTEXT"]) as client:  # a size prefix alone, far too large
        client.send_bytes(b"\x7f\xff\xff\xff")
        assert client.is_closed_by_peer()
    _assert_still_serving(broker)


def test_sasl_requests_on_a_listener_without_sasl_get_illegal_sasl_state(broker: EmbeddedBroker) -> None:
    with WireClient(broker.listeners["PLAINTEXT"]) as client:
        assert _handshake(client, "PLAIN").error_code == ErrorCode.illegal_sasl_state
        client.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False))  # still open


def _assert_still_serving(broker: EmbeddedBroker) -> None:
    assert _logs_in(_sasl(broker, "SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "alice-secret", None))  # type: ignore[arg-type]


def test_scram_credentials_survive_a_restart(tmp_path: Path) -> None:
    settings = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "sasl.enabled.mechanisms": "SCRAM-SHA-256"}
    with EmbeddedBroker(tmp_path / "data", **settings) as first:
        _add_users(first.listeners["PLAINTEXT"], {"erin": "erin-secret"}, (ScramMechanism.SCRAM_SHA_256,))
    assert "erin-secret" not in (tmp_path / "data" / "scram-credentials.json").read_text()
    with EmbeddedBroker(tmp_path / "data", **settings) as second:
        conf = {"bootstrap.servers": second.listeners["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "erin", "sasl.password": "erin-secret"}
        assert _logs_in(conf)


def test_a_broker_whose_every_listener_needs_sasl_is_reached_through_its_first_users(tmp_path: Path) -> None:
    """``scram_users`` (``onceflow broker --add-scram``): the admin exists before anyone could create it."""
    import subprocess
    import sys

    settings = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:admin"}
    with EmbeddedBroker(tmp_path / "data", scram_users={"admin": "admin-secret"}, **settings) as running:
        conf = {"bootstrap.servers": running.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": "admin-secret"}
        admin = AdminClient(conf)
        for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"frank-secret")]).values():
            future.result(TIMEOUT_S)
        assert _logs_in(conf | {"sasl.username": "frank", "sasl.password": "frank-secret"})
    refused = subprocess.run([sys.executable, "-m", "onceflow", "broker", "--data-dir", str(tmp_path / "other"),
                              "--add-scram", "SCRAM-SHA-256=[name=x]"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "password are required" in refused.stderr


def test_idle_and_half_sent_connections_are_closed_after_connections_max_idle_ms() -> None:
    """An unauthenticated client that sends half a frame (the broker holds a buffer for all of it)
    and stops, or nothing at all, loses its connection; a client that keeps talking does not."""
    import socket

    settings = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS, "connections.max.idle.ms": 400}
    with EmbeddedBroker(**settings) as running:
        host, port = running.bootstrap_servers.split(":")
        silent = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        half = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        half.sendall(b"\x00\x07\xff\xf0" + b"x")  # a 500 KiB frame announced, one byte of it sent
        conf = {"bootstrap.servers": running.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": "carol", "sasl.password": "carol-secret"}
        admin = AdminClient(conf)
        for sock in (silent, half):
            assert sock.recv(1) == b"", "closed by the broker"
            sock.close()
        admin.list_topics(timeout=TIMEOUT_S)  # a client that reconnects as it needs goes on
        assert running.call(lambda: running.broker.state.stats.connections_closed) >= 2


def test_a_v0_handshake_takes_bare_tokens_as_kafka_first_did(broker: EmbeddedBroker) -> None:
    """SaslHandshake v0 (advertised from v0, as Kafka 4.3.1 does): the token and its answer are bare
    size-prefixed frames; a wrong one closes the connection without an answer."""
    from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0

    for password, accepted in (("carol-secret", True), ("wrong", False)):
        with WireClient(broker.listeners["SASL_PLAINTEXT"]) as client:
            assert client.request(SaslHandshakeV0(mechanism="PLAIN")).error_code == ErrorCode.none
            token = b"\x00carol\x00" + password.encode()
            client.send_bytes(len(token).to_bytes(4, "big") + token)
            if not accepted:
                assert client.is_closed_by_peer()
                continue
            assert client.read_frame() == b"", "PLAIN's empty answer, bare"
            response = client.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                      include_topic_authorized_operations=False))
            assert response.brokers, "authenticated: served"
