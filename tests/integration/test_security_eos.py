"""The exactly-once resources under ACLs, with two real principals over SASL/SCRAM.

``User:alice`` owns a payments pipeline: WRITE on her transactional ids and
output topic, READ on her input topic and group.  ``User:mallory`` may
write her own topic and transactional id, and nothing of alice's.  The
operator is the PLAINTEXT listener's ``User:ANONYMOUS``, a super user.
Each refusal must leave alice's transaction, offsets and topics as they were (every API family is tried),
and show mallory nothing of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from onceflow.broker.embedded import EmbeddedBroker
from tests.support.waiting import wait_for

TIMEOUT_S = 20
IN, OUT, GROUP, TXN = "payments-in", "payments-out", "payments", "payments-tx"


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    settings = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
        "group.initial.rebalance.delay.ms": 0,
        "transaction.state.log.num.partitions": 1,
        "offsets.topic.num.partitions": 1,
    }
    with EmbeddedBroker(**settings) as running:
        admin = AdminClient({"bootstrap.servers": running.listeners["PLAINTEXT"]})
        for name in ("alice", "mallory"):
            upsert = UserScramCredentialUpsertion(name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                                  f"{name}-secret".encode())
            for future in admin.alter_user_scram_credentials([upsert]).values():
                future.result(TIMEOUT_S)
        allow = AclPermissionType.ALLOW
        literal, prefixed = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
        acls = [
            AclBinding(ResourceType.TRANSACTIONAL_ID, TXN, prefixed, "User:alice", "*", AclOperation.WRITE, allow),
            AclBinding(ResourceType.TOPIC, OUT, literal, "User:alice", "*", AclOperation.WRITE, allow),
            AclBinding(ResourceType.TOPIC, IN, literal, "User:alice", "*", AclOperation.READ, allow),
            AclBinding(ResourceType.GROUP, GROUP, literal, "User:alice", "*", AclOperation.READ, allow),
            AclBinding(ResourceType.TRANSACTIONAL_ID, "mallory", prefixed, "User:mallory", "*", AclOperation.WRITE, allow),
            AclBinding(ResourceType.TOPIC, "mallory", prefixed, "User:mallory", "*", AclOperation.ALL, allow),
            AclBinding(ResourceType.GROUP, "mallory", prefixed, "User:mallory", "*", AclOperation.READ, allow),
        ]
        for future in admin.create_acls(acls).values():
            future.result(TIMEOUT_S)
        for topic in (IN, OUT, "mallory-out"):
            producer = Producer({"bootstrap.servers": running.listeners["PLAINTEXT"]})
            producer.produce(topic, b"seed")
            assert producer.flush(TIMEOUT_S) == 0
        yield running


def _as(broker: EmbeddedBroker, user: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": broker.listeners["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": f"{user}-secret", **extra}


def _operator(broker: EmbeddedBroker) -> dict[str, Any]:
    return {"bootstrap.servers": broker.listeners["PLAINTEXT"]}


def _committed_values(broker: EmbeddedBroker, topic: str) -> list[bytes]:
    consumer = Consumer(_operator(broker) | {"group.id": f"check-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                                             "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)[1]

    def caught_up() -> bool:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value())
        position = consumer.position([TopicPartition(topic, 0)])[0].offset
        return position >= end or message is None and bool(values)

    wait_for(caught_up, TIMEOUT_S, 0, f"the end of {topic}")
    consumer.close()
    return values


def _open_transaction(broker: EmbeddedBroker, value: bytes) -> tuple[Producer, str]:
    """Alice's producer with a transaction open on OUT holding ``value``, and its transactional id."""
    txn = f"{TXN}-{uuid.uuid4().hex[:6]}"
    alice = Producer(_as(broker, "alice", **{"transactional.id": txn}))
    alice.init_transactions(TIMEOUT_S)
    alice.begin_transaction()
    alice.produce(OUT, value)
    alice.flush(TIMEOUT_S)
    return alice, txn


def test_an_intruder_without_write_on_the_transactional_id_cannot_fence_its_owner(broker: EmbeddedBroker) -> None:
    alice, txn = _open_transaction(broker, b"alice's payment")
    intruder = Producer(_as(broker, "mallory", **{"transactional.id": txn}))
    with pytest.raises(KafkaException) as refused:
        intruder.init_transactions(TIMEOUT_S)
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in str(refused.value) or "authorization" in str(refused.value).lower()
    alice.commit_transaction(TIMEOUT_S)  # not fenced: her epoch is still the current one
    assert b"alice's payment" in _committed_values(broker, OUT)


def test_an_intruder_cannot_commit_offsets_into_a_group_it_may_not_read(broker: EmbeddedBroker) -> None:
    operator = AdminClient(_operator(broker))
    before = _group_offsets(operator)
    mallory = Producer(_as(broker, "mallory", **{"transactional.id": f"mallory-{uuid.uuid4().hex[:6]}"}))
    mallory.init_transactions(TIMEOUT_S)
    mallory.begin_transaction()
    mallory.produce("mallory-out", b"mine")
    # The group named as alice's consumer names it: mallory may not READ it.
    forged = Consumer(_as(broker, "alice", **{"group.id": GROUP})).consumer_group_metadata()
    with pytest.raises(KafkaException) as refused:
        mallory.send_offsets_to_transaction([TopicPartition(IN, 0, 1_000)], forged, TIMEOUT_S)
    assert "GROUP_AUTHORIZATION_FAILED" in str(refused.value) or "authoriz" in str(refused.value).lower()
    assert _group_offsets(operator) == before, "nothing committed into alice's group"


def _group_offsets(admin: AdminClient) -> list[tuple[str, int, int]]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP, [TopicPartition(IN, 0)])])
    result = next(iter(futures.values())).result(TIMEOUT_S)
    return [(tp.topic, tp.partition, tp.offset) for tp in result.topic_partitions]


def test_the_owner_commits_offsets_in_its_transaction_and_the_intruder_sees_none_of_it(broker: EmbeddedBroker) -> None:
    alice = Producer(_as(broker, "alice", **{"transactional.id": f"{TXN}-{uuid.uuid4().hex[:6]}"}))
    alice.init_transactions(TIMEOUT_S)
    alice.begin_transaction()
    alice.produce(OUT, b"paid")
    group = Consumer(_as(broker, "alice", **{"group.id": GROUP})).consumer_group_metadata()
    alice.send_offsets_to_transaction([TopicPartition(IN, 0, 1)], group, TIMEOUT_S)
    alice.commit_transaction(TIMEOUT_S)
    assert ("payments-in", 0, 1) in _group_offsets(AdminClient(_operator(broker)))
    mallory = AdminClient(_as(broker, "mallory"))
    assert set(mallory.list_topics(timeout=TIMEOUT_S).topics) == {"mallory-out"}
    listed = mallory.list_consumer_groups(request_timeout=TIMEOUT_S).result()
    assert GROUP not in {g.group_id for g in listed.valid}
    described = mallory.describe_consumer_groups([GROUP], request_timeout=TIMEOUT_S)[GROUP]
    with pytest.raises(KafkaException, match="GROUP_AUTHORIZATION_FAILED|uthoriz"):
        described.result()


def test_an_open_transaction_is_listed_to_its_owner_and_the_operator_but_not_to_the_intruder(broker: EmbeddedBroker) -> None:
    """ListTransactions and DescribeTransactions through ``onceflow txn`` (kafka-python), each principal
    logged in with its own SCRAM settings."""
    from onceflow.clientconfig import translate
    from onceflow.tools.common import ToolError
    from onceflow.tools.txn import describe_transaction, list_transactions

    alice, txn = _open_transaction(broker, b"open")

    def listed(user: str | None) -> set[str]:
        if user is None:
            return {r["transactional_id"] for r in list_transactions(broker.listeners["PLAINTEXT"], timeout=TIMEOUT_S)}
        settings = translate({k: str(v) for k, v in _as(broker, user).items() if k != "bootstrap.servers"})
        return {r["transactional_id"] for r in list_transactions(broker.listeners["SASL_PLAINTEXT"], timeout=TIMEOUT_S,
                                                                  client=settings)}

    assert txn in listed(None) and txn in listed("alice")  # her WRITE on the prefix implies DESCRIBE
    assert not {t for t in listed("mallory") if t.startswith(TXN)}, "alice's transactions are hidden from mallory"
    mallory = translate({k: str(v) for k, v in _as(broker, "mallory").items() if k != "bootstrap.servers"})
    with pytest.raises(ToolError, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED|uthoriz"):
        describe_transaction(broker.listeners["SASL_PLAINTEXT"], txn, timeout=TIMEOUT_S, client=mallory)
    alice.commit_transaction(TIMEOUT_S)
    assert b"open" in _committed_values(broker, OUT)


def _refused(future_or_call: Any) -> str:
    """The error text of a refused admin call (a future, or a callable that raises)."""
    try:
        result = future_or_call() if callable(future_or_call) else future_or_call.result(TIMEOUT_S)
    except KafkaException as exc:
        return str(exc)
    raise AssertionError(f"not refused: {result!r}")


def test_every_api_family_refuses_the_intruder_with_kafkas_code_and_changes_nothing(broker: EmbeddedBroker) -> None:
    """The same calls as the operator succeed; as mallory each is refused with its code, and the
    topics, configs, partitions, records and group offsets are as they were."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import ConfigResource, NewPartitions

    operator, mallory = AdminClient(_operator(broker)), AdminClient(_as(broker, "mallory"))
    before = (_group_offsets(operator), _committed_values(broker, OUT),
              operator.list_topics(timeout=TIMEOUT_S).topics[OUT].partitions.keys())
    out_config = ConfigResource(ConfigResource.Type.TOPIC, OUT)
    assert next(iter(operator.describe_configs([out_config]).values())).result(TIMEOUT_S)
    cases = {
        "DescribeConfigs": (lambda: next(iter(mallory.describe_configs([out_config]).values())).result(TIMEOUT_S),
                            "TOPIC_AUTHORIZATION_FAILED"),
        "CreatePartitions": (lambda: next(iter(mallory.create_partitions([NewPartitions(OUT, 3)]).values())).result(TIMEOUT_S),
                             "TOPIC_AUTHORIZATION_FAILED"),
        "DeleteTopics": (lambda: next(iter(mallory.delete_topics([OUT]).values())).result(TIMEOUT_S),
                         "TOPIC_AUTHORIZATION_FAILED"),
        # librdkafka asks Metadata for the leaders first, which hides the topic (the broker's own
        # DeleteRecords refusal is tests/unit/broker/test_acl_checks.py's).
        "DeleteRecords": (lambda: next(iter(mallory.delete_records([TopicPartition(OUT, 0, 1)]).values())).result(TIMEOUT_S),
                          "No leaders found"),
        "OffsetFetch": (lambda: next(iter(mallory.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(GROUP)]).values())).result(TIMEOUT_S), "GROUP_AUTHORIZATION_FAILED"),
        "DeleteGroups": (lambda: next(iter(mallory.delete_consumer_groups([GROUP]).values())).result(TIMEOUT_S),
                         "GROUP_AUTHORIZATION_FAILED"),
        "AlterConsumerGroupOffsets (OffsetCommit)": (lambda: next(iter(mallory.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(GROUP, [TopicPartition(IN, 0, 0)])]).values())).result(TIMEOUT_S),
            "GROUP_AUTHORIZATION_FAILED"),
    }
    for api, (call, code) in cases.items():
        assert code in _refused(call), api
    # Produce (WRITE on the topic) and Fetch (READ), as clients meet them.
    producer = Producer(_as(broker, "mallory", **{"message.timeout.ms": 5000}))
    errors: list[str] = []
    producer.produce(OUT, b"forged", on_delivery=lambda err, _msg: errors.append(str(err)))
    producer.flush(TIMEOUT_S)
    assert errors and "TOPIC_AUTHORIZATION_FAILED" in errors[0]
    reader = Consumer(_as(broker, "mallory", **{"group.id": "mallory-reader", "auto.offset.reset": "earliest"}))
    reader.subscribe([IN])
    message = wait_for(lambda: reader.poll(0.5), TIMEOUT_S, 0, "the fetch's answer")
    assert message.error() is not None and "TOPIC_AUTHORIZATION_FAILED" in str(message.error())
    reader.close()
    for protocol in ("classic", "consumer"):  # JoinGroup and KIP-848's ConsumerGroupHeartbeat: READ on the group
        joiner = Consumer(_as(broker, "mallory", **{"group.id": GROUP, "group.protocol": protocol}))
        joiner.subscribe(["mallory-out"])
        message = wait_for(lambda j=joiner: j.poll(0.5), TIMEOUT_S, 0, f"the {protocol} join's answer")
        assert message.error() is not None and "GROUP_AUTHORIZATION_FAILED" in str(message.error()), protocol
        joiner.close()
    after = (_group_offsets(operator), _committed_values(broker, OUT),
             operator.list_topics(timeout=TIMEOUT_S).topics[OUT].partitions.keys())
    assert after == before, "nothing stored changed"
