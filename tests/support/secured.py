"""Secured clusters for the reference suite: Apache Kafka and Onceflow's broker process configured
the same way, with the StandardAuthorizer and ``super.users=User:ANONYMOUS`` (the PLAINTEXT listener
is the administrator's) and a SASL_SSL listener (SCRAM-SHA-256, a PEM key store made with
``onceflow.security.certs``) for the users the tests create."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from onceflow.broker.process import BrokerProcess, free_port
from onceflow.reference import KafkaCluster
from onceflow.security.certs import CertificateAuthority


@dataclass(frozen=True)
class Secured:
    admin: str  # PLAINTEXT, authorized as the super user
    secured: str  # SASL_SSL, SCRAM-SHA-256
    ca: Path  # the CA that signed the broker's certificate (PEM)


def _certificates(directory: Path) -> tuple[Path, Path]:
    """A CA and the broker's PEM key store (PKCS#8 key, certificate chain for 127.0.0.1 and localhost)."""
    ca = CertificateAuthority(directory)
    return ca.location, ca.issue("server", "CN=localhost", hosts=("localhost", "127.0.0.1")).keystore


def _secured_settings(keystore: Path, secured: int) -> dict[str, str]:
    """The same settings for both brokers: Kafka's names, read by each."""
    return {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
    }


@contextmanager
def secured_cluster(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """A secured cluster, ``kafka`` or ``onceflow`` (the broker process), configured the same way."""
    ca, keystore = _certificates(tmp_path_factory.mktemp("tls"))
    secured = free_port()
    if kind == "onceflow":
        port = free_port()
        proc = BrokerProcess(tmp_path_factory.mktemp("onceflow-secured") / "data", {
            **_secured_settings(keystore, secured),
            "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{secured}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        }, port=port)
        proc.start()
        try:
            yield Secured(proc.bootstrap_servers, f"127.0.0.1:{secured}", ca)
        finally:
            proc.stop()
        return
    kafka = KafkaCluster(overrides={"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                    "super.users": "User:ANONYMOUS"},
                         heap="512m", data_dir=tmp_path_factory.mktemp("kafka-secured"))
    node = kafka.nodes[1]
    kafka.overrides.update({
        **_secured_settings(keystore, secured),
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
                     f"SASL_SSL://127.0.0.1:{secured}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port},SASL_SSL://127.0.0.1:{secured}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
    })
    with kafka:
        yield Secured(kafka.bootstrap_servers, f"127.0.0.1:{secured}", ca)
