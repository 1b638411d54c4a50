"""TLS listeners with real clients: encryption, client certificates as principals, and refusals.

One embedded broker serves four listeners at once: PLAINTEXT, TLS (server
certificate only), MTLS (client certificates required, subjects mapped by
``ssl.principal.mapping.rules``, a per-listener setting) and a second
PLAINTEXT one advertised under another name.  Clients are confluent-kafka,
kafka-python and aiokafka; certificates come from ``onceflow.security.certs``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from onceflow.broker.embedded import EmbeddedBroker
from onceflow.config import BrokerConfig, ConfigError
from onceflow.security import listeners, tls
from onceflow.security.certs import CertificateAuthority, IssuedCertificate
from tests.support.waiting import wait_for

TIMEOUT_S = 20


class Pki:
    def __init__(self, directory: Path) -> None:
        self.ca = CertificateAuthority(directory / "ca")
        self.other_ca = CertificateAuthority(directory / "other-ca", "CN=Someone else's CA")
        self.broker = self.ca.issue("broker", "CN=broker.test", hosts=("127.0.0.1", "localhost"))
        self.alice = self.ca.issue("alice", "CN=Alice,OU=Payments,O=Acme")
        self.expired = self.ca.issue("expired", "CN=Mallory,OU=Payments,O=Acme", expired=True)
        self.stranger = self.other_ca.issue("stranger", "CN=Stranger,OU=Payments,O=Acme")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(pki: Pki) -> Iterator[EmbeddedBroker]:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,TLS://127.0.0.1:0,MTLS://127.0.0.1:0,OUTSIDE://127.0.0.1:0",
        "advertised.listeners": "OUTSIDE://proxy.example:19092",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,TLS:SSL,MTLS:SSL,OUTSIDE:PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca.location),
        "listener.name.mtls.ssl.client.auth": "required",
        "group.initial.rebalance.delay.ms": 0,
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=Payments,.*$/$1/L,DEFAULT",
    }
    with EmbeddedBroker(**settings) as running:
        yield running


def _tls(broker: EmbeddedBroker, listener: str, pki: Pki, client: IssuedCertificate | None = None,
         ca: Path | None = None, **extra: Any) -> dict[str, Any]:
    conf = {"bootstrap.servers": broker.listeners[listener], "security.protocol": "SSL",
            "ssl.ca.location": str(ca or pki.ca.location), "socket.timeout.ms": 5000, **extra}
    if client is not None:
        conf |= {"ssl.certificate.location": str(client.certificate), "ssl.key.location": str(client.key)}
    return conf


def _principals(broker: EmbeddedBroker, listener: str) -> set[str]:
    return broker.call(lambda: {str(c.principal) for c in broker.broker.state.connections if c.listener_name == listener})


def _principal_of(broker: EmbeddedBroker, listener: str, conf: dict[str, Any]) -> str:
    """The principal the broker gives a client with ``conf`` (seen while its connection is open)."""
    admin = AdminClient(conf)
    admin.list_topics(timeout=TIMEOUT_S)
    principals = _principals(broker, listener)
    assert len(principals) == 1, principals
    del admin
    return principals.pop()


def _round_trip(conf: dict[str, Any], topic: str) -> list[bytes]:
    producer = Producer(conf | {"enable.idempotence": True})
    for i in range(3):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer(conf | {"group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    wait_for(lambda: _poll_into(consumer, values) >= 3, TIMEOUT_S, 0, "the records over TLS")
    consumer.close()
    return values


def _poll_into(consumer: Consumer, values: list[bytes]) -> int:
    message = consumer.poll(0.5)
    if message is not None and message.error() is None:
        values.append(message.value())
    return len(values)


def test_tls_carries_produce_and_consume_and_advertises_the_listener_it_came_in_on(broker: EmbeddedBroker,
                                                                                     pki: Pki) -> None:
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    assert _round_trip(_tls(broker, "TLS", pki), topic) == [b"v0", b"v1", b"v2"]
    assert _principal_of(broker, "TLS", _tls(broker, "TLS", pki)) == "User:ANONYMOUS"
    for name in ("TLS", "PLAINTEXT"):  # each client is told the address of its own listener
        conf = _tls(broker, name, pki) if name == "TLS" else {"bootstrap.servers": broker.listeners[name]}
        brokers = AdminClient(conf).list_topics(timeout=TIMEOUT_S).brokers
        assert [f"{b.host}:{b.port}" for b in brokers.values()] == [broker.listeners[name]]
    outside = AdminClient({"bootstrap.servers": broker.listeners["OUTSIDE"]}).list_topics(timeout=TIMEOUT_S)
    assert [f"{b.host}:{b.port}" for b in outside.brokers.values()] == ["proxy.example:19092"]


def test_a_client_certificate_becomes_the_principal_through_the_mapping_rules(broker: EmbeddedBroker, pki: Pki) -> None:
    topic = f"mtls-{uuid.uuid4().hex[:8]}"
    assert _round_trip(_tls(broker, "MTLS", pki, pki.alice), topic) == [b"v0", b"v1", b"v2"]
    assert _principal_of(broker, "MTLS", _tls(broker, "MTLS", pki, pki.alice)) == "User:alice"


@pytest.mark.parametrize("case", ["no certificate", "expired certificate", "certificate from another CA",
                                  "client trusts another CA"])
def test_refused_tls_clients_fail_cleanly_and_the_broker_keeps_serving(broker: EmbeddedBroker, pki: Pki,
                                                                       case: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="onceflow.broker.server")
    conf = {
        "no certificate": _tls(broker, "MTLS", pki),
        "expired certificate": _tls(broker, "MTLS", pki, pki.expired),
        "certificate from another CA": _tls(broker, "MTLS", pki, pki.stranger),
        "client trusts another CA": _tls(broker, "TLS", pki, ca=pki.other_ca.location),
    }[case]
    admin = AdminClient(conf)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=1.5)
    assert not {p for p in _principals(broker, "MTLS") if p != "User:alice"}, "a refused client has no connection"
    assert any(r.getMessage().startswith("TLS handshake from 127.0.0.1:") for r in caplog.records), "one line each"
    AdminClient(_tls(broker, "TLS", pki)).list_topics(timeout=TIMEOUT_S)  # others are still served


def test_garbage_and_truncated_tls_records_close_that_connection_only(broker: EmbeddedBroker, pki: Pki) -> None:
    host, port = broker.listeners["TLS"].split(":")
    hello = _client_hello(pki)
    truncated = hello[: len(hello) // 2]
    for payload in (b"\x00" * 64, b"GET / HTTP/1.1\r\n\r\n", b"\x16\x03\x01\xff\xff" + b"A" * 100, truncated + b"\x00" * 4096):
        with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
            sock.sendall(payload)
            assert _read_to_eof(sock), f"{payload[:16]!r}: the broker must close the connection"
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(truncated)  # and then nothing: held open meanwhile, while others are served
        # Plaintext Kafka on the TLS port, and TLS on the plaintext port: refused; both ports still serve.
        with pytest.raises(KafkaException):
            AdminClient({"bootstrap.servers": broker.listeners["TLS"], "socket.timeout.ms": 1000}).list_topics(timeout=1.5)
        with pytest.raises(KafkaException):
            AdminClient(_tls(broker, "TLS", pki) | {"bootstrap.servers": broker.listeners["PLAINTEXT"]}).list_topics(timeout=1.5)
        AdminClient(_tls(broker, "TLS", pki)).list_topics(timeout=TIMEOUT_S)
        AdminClient({"bootstrap.servers": broker.listeners["PLAINTEXT"]}).list_topics(timeout=TIMEOUT_S)


def _client_hello(pki: Pki) -> bytes:
    """The first flight of a real TLS handshake, captured from an ssl.SSLObject."""
    context = ssl.create_default_context(cafile=str(pki.ca.location))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls_object = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls_object.do_handshake()
    return outgoing.read()


def _read_to_eof(sock: socket.socket) -> bool:
    for _ in range(1000):
        try:
            if not sock.recv(4096):
                return True
        except ConnectionResetError:
            return True
    return False


def test_kafka_python_and_aiokafka_speak_tls_to_it(broker: EmbeddedBroker, pki: Pki) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    from kafka import KafkaProducer

    topic = f"tls-other-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=broker.listeners["MTLS"], security_protocol="SSL",
                             ssl_cafile=str(pki.ca.location), ssl_certfile=str(pki.alice.certificate),
                             ssl_keyfile=str(pki.alice.key), request_timeout_ms=TIMEOUT_S * 1000)
    producer.send(topic, b"from kafka-python").get(timeout=TIMEOUT_S)
    producer.close()

    async def aiokafka_send() -> None:
        context = create_ssl_context(cafile=str(pki.ca.location), certfile=str(pki.alice.certificate),
                                     keyfile=str(pki.alice.key))
        aio = AIOKafkaProducer(bootstrap_servers=broker.listeners["MTLS"], security_protocol="SSL", ssl_context=context)
        await aio.start()
        try:
            await aio.send_and_wait(topic, b"from aiokafka")
        finally:
            await aio.stop()

    asyncio.run(aiokafka_send())
    consumer = Consumer(_tls(broker, "MTLS", pki, pki.alice) | {"group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    wait_for(lambda: _poll_into(consumer, values) >= 2, TIMEOUT_S, 0, "both clients records")
    consumer.close()
    assert sorted(values) == [b"from aiokafka", b"from kafka-python"]


def test_tls_settings_that_cannot_work_fail_at_start_naming_the_setting(pki: Pki, tmp_path: Path) -> None:
    base = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker.keystore)}
    cases = {
        "ssl.keystore.type=JKS": {**base, "ssl.keystore.type": "JKS"},
        "has no key": {"listeners": "SSL://127.0.0.1:0"},
        "No such file": {**base, "ssl.keystore.location": str(tmp_path / "missing.pem")},
        "needs CA certificates": {**base, "ssl.client.auth": "required"},
        "no security protocol for listener WEIRD": {"listeners": "WEIRD://127.0.0.1:0"},
        "listener SSL is not in listeners": {"advertised.listeners": "SSL://h:1"},
        "ssl.principal.mapping.rules": {**base, "ssl.principal.mapping.rules": "RULE:^CN=(.*$/$1/"},
    }
    for message, settings in cases.items():
        broker = EmbeddedBroker(**settings)
        with pytest.raises(RuntimeError) as failed:
            broker.start()
        assert isinstance(failed.value.__cause__, ConfigError) and message in str(failed.value.__cause__), message
        assert not broker.data_dir.exists(), "a broker that failed to start leaves no temporary directory"


def test_a_plaintext_listener_beyond_loopback_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="onceflow.broker.broker")
    with EmbeddedBroker(**{"listeners": "PLAINTEXT://0.0.0.0:0"}):
        pass
    assert any("PLAINTEXT on every address" in r.getMessage() or "PLAINTEXT on 0.0.0.0" in r.getMessage()
               for r in caplog.records)
    caplog.clear()
    with EmbeddedBroker():
        pass
    assert not [r for r in caplog.records if "PLAINTEXT on" in r.getMessage()]


def test_principal_mapping_rules_as_kafka_writes_them() -> None:
    mapper = tls.PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                                 "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                                 "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, DEFAULT")
    assert mapper.name("CN=kafka1,OU=ServiceUsers,O=Org") == "kafka1"
    assert mapper.name("CN=Duke,OU=JavaSoft,O=Sun,L=Santa Clara,ST=CA,C=US") == "duke@javasoft"
    assert mapper.name("cn=duke,ou=javasoft,dc=sun,dc=com") == "DUKE@JAVASOFT"
    assert mapper.name("CN=other") == "CN=other"
    with pytest.raises(tls.NoMatchingRule):
        tls.PrincipalMapper("RULE:^CN=(.*)$/$1/").name("OU=x")
    for bad in ("RULE:^CN=(.*$/$1/", "NOTARULE", "RULE:a/b"):
        with pytest.raises(ConfigError):
            tls.PrincipalMapper(bad)
    assert listeners.resolve(BrokerConfig(), "127.0.0.1", 9092)[0].protocol == "PLAINTEXT"


def test_subjects_are_written_as_javas_x500principal_writes_them(tmp_path: Path) -> None:
    """RFC 2253's keywords by name, other attributes as OID=#hex of their DER value, escapes kept:
    the principal Kafka would give the same certificate, so ACLs and super.users carry over."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    ca = CertificateAuthority(tmp_path)
    issued = ca.issue("e", "CN=alice,OU=eng,O=Acme\\, Inc,1.2.840.113549.1.9.1=alice@x.com,2.5.4.5=42,DC=example,UID=a1")
    der = x509.load_pem_x509_certificate(issued.certificate.read_bytes()).public_bytes(serialization.Encoding.DER)
    assert tls.subject_name(der) == ("CN=alice,OU=eng,O=Acme\\, Inc,1.2.840.113549.1.9.1=#160b616c69636540782e636f6d,"
                                     "2.5.4.5=#13023432,DC=example,UID=a1")
    assert oct(issued.key.stat().st_mode & 0o777) == "0o600"
