"""SCRAM credentials through a real broker (KIP-554): confluent-kafka's AdminClient adds,
describes and deletes them; Kafka 4's errors; authorization; credentials outliving a restart;
and a credential made by the AdminClient serving a SCRAM login (driven here against the broker's
own mechanism server, as the connection's authenticator will)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka.net.sasl.scram import ScramClient
from kio.schema.alter_user_scram_credentials.v0.request import AlterUserScramCredentialsRequest, ScramCredentialUpsertion
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.static.primitive import i8, i32

from onceflow.broker.embedded import EmbeddedBroker
from onceflow.config import BrokerConfig
from onceflow.protocol.errors import ErrorCode
from onceflow.security.authorizer import AclOperation, ResourceType
from onceflow.security.mechanisms import SaslAuthenticationFailed, create_server
from onceflow.security.principal import KafkaPrincipal
from onceflow.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, make_credential
from tests.support.wire import WireClient

TIMEOUT_S = 10
SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


def upsert(user: str, mechanism: ScramMechanism, iterations: int, password: bytes, salt: bytes | None = None) -> UserScramCredentialUpsertion:
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password, salt)


def alter(admin: AdminClient, *alterations: Any) -> dict[str, str]:
    """Each user's outcome: "ok" or the error's name."""
    outcomes = {}
    for user, future in admin.alter_user_scram_credentials(list(alterations), request_timeout=TIMEOUT_S).items():
        try:
            future.result(TIMEOUT_S)
            outcomes[user] = "ok"
        except KafkaException as exc:
            outcomes[user] = exc.args[0].name()
    return outcomes


def described(admin: AdminClient) -> dict[str, list[tuple[str, int]]]:
    everyone = admin.describe_user_scram_credentials(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    return {user: [(i.mechanism.name, i.iterations) for i in d.scram_credential_infos] for user, d in sorted(everyone.items())}


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def broker(data_dir: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(data_dir) as running:
        yield running


@pytest.fixture
def admin(broker: EmbeddedBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def test_add_describe_delete(admin: AdminClient) -> None:
    assert described(admin) == {}
    assert alter(admin, upsert("alice", SHA256, 8192, b"alice-secret"), upsert("bob", SHA512, 4096, b"bob-secret")) == \
        {"alice": "ok", "bob": "ok"}
    assert alter(admin, upsert("alice", SHA512, 16384, b"alice-512")) == {"alice": "ok"}
    assert described(admin) == {"alice": [("SCRAM_SHA_256", 8192), ("SCRAM_SHA_512", 16384)], "bob": [("SCRAM_SHA_512", 4096)]}
    named = admin.describe_user_scram_credentials(["bob", "nobody"], request_timeout=TIMEOUT_S)
    assert [(i.mechanism, i.iterations) for i in named["bob"].result(TIMEOUT_S).scram_credential_infos] == [(SHA512, 4096)]
    with pytest.raises(KafkaException) as missing:
        named["nobody"].result(TIMEOUT_S)
    assert missing.value.args[0].name() == "RESOURCE_NOT_FOUND"
    assert alter(admin, UserScramCredentialDeletion("alice", SHA256), UserScramCredentialDeletion("bob", SHA512)) == \
        {"alice": "ok", "bob": "ok"}
    assert described(admin) == {"alice": [("SCRAM_SHA_512", 16384)]}


def test_kafka_4s_errors(admin: AdminClient, broker: EmbeddedBroker) -> None:
    assert alter(admin, upsert("alice", SHA256, 4096, b"pw")) == {"alice": "ok"}
    assert alter(admin,
                 upsert("few", SHA256, 4095, b"pw"), upsert("many", SHA512, 16385, b"pw"),
                 UserScramCredentialDeletion("ghost", SHA256), UserScramCredentialDeletion("alice", SHA512),
                 upsert("twice", SHA256, 4096, b"pw"), upsert("twice", SHA512, 4096, b"pw"),  # Kafka 4: one alteration per user
                 upsert("fine", SHA512, 5000, b"pw")) == {
        "few": "UNACCEPTABLE_CREDENTIAL", "many": "UNACCEPTABLE_CREDENTIAL", "ghost": "RESOURCE_NOT_FOUND",
        "alice": "RESOURCE_NOT_FOUND", "twice": "DUPLICATE_RESOURCE", "fine": "ok"}
    assert described(admin) == {"alice": [("SCRAM_SHA_256", 4096)], "fine": [("SCRAM_SHA_512", 5000)]}
    # What the AdminClient refuses to send itself (an empty name, an unknown mechanism, a name
    # described twice), sent on the wire:
    with WireClient(broker.bootstrap_servers) as wire:
        answer = wire.request(AlterUserScramCredentialsRequest(deletions=(), upsertions=(
            ScramCredentialUpsertion(name="", mechanism=i8(1), iterations=i32(4096), salt=b"s", salted_password=b"p"),
            ScramCredentialUpsertion(name="x", mechanism=i8(3), iterations=i32(4096), salt=b"s", salted_password=b"p"))))
        assert [(r.user, r.error_code, r.error_message) for r in answer.results] == [
            ("", ErrorCode.unacceptable_credential, "Username must not be empty"),
            ("x", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")]
        answer = wire.request(DescribeUserScramCredentialsRequest(users=(UserName(name="fine"), UserName(name="fine"))))
        assert answer.error_code == ErrorCode.none
        assert [(r.user, r.error_code) for r in answer.results] == [("fine", ErrorCode.duplicate_resource)]


def test_a_credential_made_by_the_admin_client_serves_a_scram_login(admin: AdminClient, broker: EmbeddedBroker) -> None:
    """librdkafka salts the password (PBKDF2) and the broker derives StoredKey and ServerKey: the
    result is what Kafka's ScramFormatter makes from the same password, salt and iterations."""
    assert alter(admin, upsert("alice", SHA512, 8192, b"alice-secret", salt=b"a-fixed-salt"),
                 upsert("bob", SHA256, 4096, b"bob-secret")) == {"alice": "ok", "bob": "ok"}
    store = broker.broker.scram_credentials
    assert broker.call(store.lookup, "alice", SCRAM_SHA_512) == make_credential(SCRAM_SHA_512, "alice-secret", b"a-fixed-salt", 8192)
    config = BrokerConfig({"sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512"})
    for user, password, mechanism in (("alice", "alice-secret", "SCRAM-SHA-512"), ("bob", "bob-secret", "SCRAM-SHA-256")):
        server = broker.call(create_server, mechanism, "SASL_PLAINTEXT", config, store)
        client = ScramClient(user, password, mechanism)
        client.process_server_first_message(broker.call(server.evaluate, client.first_message()))
        client.process_server_final_message(broker.call(server.evaluate, client.final_message()))
        assert server.complete and server.authorization_id == user
    wrong = broker.call(create_server, "SCRAM-SHA-256", "SASL_PLAINTEXT", config, store)
    client = ScramClient("alice", "alice-secret", "SCRAM-SHA-256")  # alice has no SHA-256 credential
    with pytest.raises(SaslAuthenticationFailed):
        broker.call(wrong.evaluate, client.first_message())


def test_credentials_survive_a_restart(data_dir: Path) -> None:
    with EmbeddedBroker(data_dir) as first:
        admin = AdminClient({"bootstrap.servers": first.bootstrap_servers})
        assert alter(admin, upsert("alice", SHA256, 8192, b"alice-secret"), upsert("bob", SHA512, 4096, b"bob-secret")) == \
            {"alice": "ok", "bob": "ok"}
        assert alter(admin, UserScramCredentialDeletion("bob", SHA512)) == {"bob": "ok"}
        assert alter(admin, upsert("carol", SHA512, 10000, b"carol-secret")) == {"carol": "ok"}
        stored = first.call(first.broker.scram_credentials.lookup, "alice", SCRAM_SHA_256)
    with EmbeddedBroker(data_dir) as second:
        admin = AdminClient({"bootstrap.servers": second.bootstrap_servers})
        assert described(admin) == {"alice": [("SCRAM_SHA_256", 8192)], "carol": [("SCRAM_SHA_512", 10000)]}
        assert second.call(second.broker.scram_credentials.lookup, "alice", SCRAM_SHA_256) == stored


class Refusing:
    """An authorizer that refuses everything and remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[KafkaPrincipal, AclOperation, ResourceType, str]] = []

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        self.asked.append((principal, operation, resource_type, name))
        return False

    def authorize_any(self, principal: KafkaPrincipal, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        return False


def test_without_cluster_permission_nothing_is_described_or_changed(admin: AdminClient, broker: EmbeddedBroker) -> None:
    assert alter(admin, upsert("alice", SHA256, 4096, b"pw")) == {"alice": "ok"}
    refusing = Refusing()
    broker.call(setattr, broker.broker, "authorizer", refusing)
    try:
        assert alter(admin, upsert("mallory", SHA256, 4096, b"pw"), UserScramCredentialDeletion("alice", SHA256)) == \
            {"mallory": "CLUSTER_AUTHORIZATION_FAILED", "alice": "CLUSTER_AUTHORIZATION_FAILED"}
        # Describe on the wire only: librdkafka (2.16, and its master of July 2026) frees a string it
        # does not own when DescribeUserScramCredentials has a top-level error, and aborts the process
        # (rd_kafka_DescribeUserScramCredentialsResponse_parse); Kafka answers with one too.
        with WireClient(broker.bootstrap_servers) as wire:
            answer = wire.request(DescribeUserScramCredentialsRequest(users=(UserName(name="alice"),)))
        assert (answer.error_code, [(r.user, r.error_code) for r in answer.results]) == \
            (ErrorCode.cluster_authorization_failed, [("", ErrorCode.cluster_authorization_failed)])
        anonymous = KafkaPrincipal("User", "ANONYMOUS")
        assert set(refusing.asked) == {(anonymous, AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster"),
                                       (anonymous, AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster")}
    finally:
        broker.call(setattr, broker.broker, "authorizer", None)
    assert described(admin) == {"alice": [("SCRAM_SHA_256", 4096)]}
