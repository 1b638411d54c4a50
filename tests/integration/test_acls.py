"""ACLs against real clients (confluent-kafka): the ACL APIs, and what each refusal looks like.

One broker for the module, with ``authorizer.class.name`` set and
``allow.everyone.if.no.acl.found=true``; its bootstrap grants the test principal ALTER and
DESCRIBE on the cluster, so the cluster *has* ACLs and every other cluster operation
(CREATE, IDEMPOTENT_WRITE, DELETE, ...) is denied, while a topic, group or transactional id
nobody wrote an ACL for is allowed.  Each test denies what it tests, on resources named for
it, and its ACLs are removed afterwards (``acls`` fixture).

Every connection is ``User:ANONYMOUS`` for now (PLAINTEXT).  The helpers take a ``Principal``
-- a name and the client settings that authenticate as it -- so that SASL principals can be
plugged in for a multi-principal matrix.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.static.primitive import i8

from onceflow.broker.embedded import EmbeddedBroker
from onceflow.protocol.errors import ErrorCode
from onceflow.security.acls import AclBindingFilter as BrokerFilter
from onceflow.security.acls import StandardAuthorizer
from onceflow.security.authorizer import AclOperation as Op
from onceflow.security.authorizer import AclPermissionType as Perm
from tests.support.wire import WireClient

TIMEOUT = 10
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SETTINGS = {"authorizer.class.name": STANDARD_AUTHORIZER, "allow.everyone.if.no.acl.found": "true",
            "group.initial.rebalance.delay.ms": "0", "transaction.state.log.num.partitions": "1",
            "offsets.topic.num.partitions": "1"}


@dataclass(frozen=True, eq=False)
class Principal:
    """Who a client is: the principal as ACLs name it, and the settings that make a client it."""

    name: str
    settings: dict[str, str] = field(default_factory=dict)


ANONYMOUS = Principal("User:ANONYMOUS")


class Cluster:
    """The module's broker, and clients of it as a given principal."""

    def __init__(self, broker: EmbeddedBroker) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap_servers
        self._admins: dict[Principal, AdminClient] = {}

    def config(self, who: Principal, /, **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **who.settings, **extra}

    def admin(self, who: Principal = ANONYMOUS) -> AdminClient:
        """One admin client per principal, kept (a dropped client fails the futures it made)."""
        if who not in self._admins:
            self._admins[who] = AdminClient(self.config(who))
        return self._admins[who]

    def producer(self, who: Principal = ANONYMOUS, /, **extra: Any) -> Producer:
        return Producer(self.config(who, **{"message.timeout.ms": TIMEOUT * 1000, **extra}))

    def consumer(self, who: Principal = ANONYMOUS, /, **extra: Any) -> Consumer:
        return Consumer(self.config(who, **{"auto.offset.reset": "earliest", "enable.auto.commit": False, **extra}))


def binding(rtype: ResourceType, name: str, operation: AclOperation, permission: AclPermissionType = AclPermissionType.ALLOW,
            who: Principal = ANONYMOUS, pattern: ResourcePatternType = ResourcePatternType.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, who.name, host, operation, permission)


def deny(rtype: ResourceType, name: str, operation: AclOperation, who: Principal = ANONYMOUS, **kw: Any) -> AclBinding:
    return binding(rtype, name, operation, AclPermissionType.DENY, who, **kw)


def create_acls(admin: AdminClient, *bindings: AclBinding) -> dict[AclBinding, Exception | None]:
    out: dict[AclBinding, Exception | None] = {}
    for b, fut in admin.create_acls(list(bindings)).items():
        try:
            fut.result(TIMEOUT)
            out[b] = None
        except KafkaException as exc:
            out[b] = exc
    return out


def delete_acls(admin: AdminClient, *filters: AclBindingFilter) -> list[AclBinding]:
    return [b for fut in admin.delete_acls(list(filters)).values() for b in fut.result(TIMEOUT)]


def code(exc: BaseException | None) -> str | None:
    if exc is None:
        return None
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return error.name() if error is not None else repr(exc)


BOOTSTRAP_ACLS = [binding(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER),
                  binding(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with EmbeddedBroker(**SETTINGS) as broker:
        c = Cluster(broker)
        assert set(create_acls(c.admin(), *BOOTSTRAP_ACLS).values()) == {None}
        yield c


class Acls:
    """A test's ACLs: added as it goes, removed when it ends."""

    def __init__(self, cluster: Cluster) -> None:
        self.admin = cluster.admin()
        self.added: list[AclBinding] = []

    def add(self, *bindings: AclBinding) -> None:
        assert set(create_acls(self.admin, *bindings).values()) == {None}
        self.added.extend(bindings)

    def remove(self, *bindings: AclBinding) -> None:
        delete_acls(self.admin, *(AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                                                   b.operation, b.permission_type) for b in bindings))
        self.added = [b for b in self.added if b not in bindings]


@pytest.fixture
def acls(cluster: Cluster) -> Iterator[Acls]:
    tracker = Acls(cluster)
    yield tracker
    if tracker.added:
        tracker.remove(*tracker.added)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(cluster: Cluster, name: str, partitions: int = 1) -> None:
    for fut in cluster.admin().create_topics([NewTopic(name, partitions, 1)]).values():
        fut.result(TIMEOUT)


# -- the ACL APIs -------------------------------------------------------------


def test_create_describe_and_delete_acls(cluster: Cluster, acls: Acls) -> None:
    admin = cluster.admin()
    topic = unique("acl-api")
    reader = binding(ResourceType.TOPIC, topic, AclOperation.READ, who=Principal("User:reader"))
    prefixed = binding(ResourceType.TOPIC, topic[:6], AclOperation.WRITE, who=Principal("User:writer"),
                       pattern=ResourcePatternType.PREFIXED)
    bad_cluster = binding(ResourceType.BROKER, "not-the-cluster", AclOperation.ALTER)
    results = create_acls(admin, reader, prefixed, bad_cluster)
    acls.added += [reader, prefixed]
    assert (results[reader], results[prefixed], code(results[bad_cluster])) == (None, None, "INVALID_REQUEST")
    assert "The only valid name for the CLUSTER resource is kafka-cluster" in str(results[bad_cluster])

    match = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.MATCH, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    assert set(admin.describe_acls(match).result(TIMEOUT)) == {reader, prefixed}
    literal = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
                               AclPermissionType.ANY)
    assert admin.describe_acls(literal).result(TIMEOUT) == [reader]

    assert set(delete_acls(admin, match)) == {reader, prefixed}
    acls.added.clear()
    assert admin.describe_acls(match).result(TIMEOUT) == []


def test_acls_survive_a_restart(tmp_path: Path) -> None:
    rule = binding(ResourceType.GROUP, "durable", AclOperation.READ, who=Principal("User:app"),
                   pattern=ResourcePatternType.PREFIXED)
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    with EmbeddedBroker(tmp_path, **SETTINGS) as broker:
        assert create_acls(AdminClient({"bootstrap.servers": broker.bootstrap_servers}), rule) == {rule: None}
    with EmbeddedBroker(tmp_path, **SETTINGS) as broker:
        assert AdminClient({"bootstrap.servers": broker.bootstrap_servers}).describe_acls(everything).result(TIMEOUT) == [rule]


def test_without_an_authorizer_the_acl_apis_answer_security_disabled() -> None:
    with EmbeddedBroker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        assert code(create_acls(admin, *BOOTSTRAP_ACLS)[BOOTSTRAP_ACLS[0]]) == "SECURITY_DISABLED"
        # librdkafka's describe_acls does not raise a top-level error (it answers []): read the answer itself.
        with WireClient(broker.bootstrap_servers) as client:
            answer = client.request(DescribeAclsRequest(
                resource_type_filter=i8(1), resource_name_filter=None, pattern_type_filter=i8(1), principal_filter=None,
                host_filter=None, operation=i8(1), permission_type=i8(1)))
        assert (answer.error_code, answer.error_message) == (ErrorCode.security_disabled,
                                                             "No Authorizer is configured on the broker")


def test_changing_acls_needs_alter_on_the_cluster(cluster: Cluster, acls: Acls) -> None:
    admin = cluster.admin()
    acls.add(deny(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER))
    wanted = binding(ResourceType.TOPIC, unique("nope"), AclOperation.READ)
    assert code(create_acls(admin, wanted)[wanted]) == "CLUSTER_AUTHORIZATION_FAILED"
    with pytest.raises(KafkaException) as err:
        delete_acls(admin, AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                            AclOperation.ANY, AclPermissionType.ANY))
    assert code(err.value) == "CLUSTER_AUTHORIZATION_FAILED"
    # The deny cannot be taken back through the API now: the test removes it behind the API's back.
    authorizer = cluster.broker.broker.authorizer
    assert isinstance(authorizer, StandardAuthorizer)
    cluster.broker.call(lambda: authorizer.delete_acls([BrokerFilter(operation=Op.ALTER, permission=Perm.DENY)]))
    acls.added.clear()


# -- topics -------------------------------------------------------------------


def test_metadata_hides_the_topics_a_client_may_not_describe(cluster: Cluster, acls: Acls) -> None:
    shown, hidden = unique("shown"), unique("hidden")
    create_topic(cluster, shown)
    create_topic(cluster, hidden)
    acls.add(deny(ResourceType.TOPIC, hidden, AclOperation.DESCRIBE))
    listed = cluster.admin().list_topics(timeout=TIMEOUT).topics
    assert shown in listed and hidden not in listed
    with WireClient(cluster.bootstrap) as client:
        answer = client.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=hidden),
                                                        MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=shown)),
                                                allow_auto_topic_creation=False, include_topic_authorized_operations=True))
    by_name = {t.name: t for t in answer.topics}
    assert (by_name[hidden].error_code, by_name[hidden].partitions) == (ErrorCode.topic_authorization_failed, ())
    assert by_name[hidden].topic_id in (None, uuid.UUID(int=0))  # no id given away (kio reads the zero id as None)
    assert by_name[shown].error_code is ErrorCode.none
    ops = by_name[shown].topic_authorized_operations
    assert ops & (1 << AclOperation.DESCRIBE.value) and ops & (1 << AclOperation.WRITE.value)


def test_auto_creation_needs_create(cluster: Cluster, acls: Acls) -> None:
    refused, allowed = unique("auto-refused"), unique("auto-allowed")
    acls.add(deny(ResourceType.TOPIC, refused, AclOperation.CREATE))
    with WireClient(cluster.bootstrap) as client:
        answer = client.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=refused),
                                                        MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=allowed)),
                                                allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    assert [(t.name, t.error_code) for t in answer.topics] == [(refused, ErrorCode.topic_authorization_failed),
                                                              (allowed, ErrorCode.none)]
    assert refused not in cluster.broker.broker.registry.topics


def test_topic_administration_is_refused_without_its_operation(cluster: Cluster, acls: Acls) -> None:
    admin = cluster.admin()
    no_create, keep, frozen = unique("no-create"), unique("keep"), unique("frozen")
    create_topic(cluster, keep)
    create_topic(cluster, frozen)
    acls.add(deny(ResourceType.TOPIC, no_create, AclOperation.CREATE), deny(ResourceType.TOPIC, keep, AclOperation.DELETE),
             deny(ResourceType.TOPIC, frozen, AclOperation.ALTER_CONFIGS),
             deny(ResourceType.TOPIC, frozen, AclOperation.DESCRIBE_CONFIGS))
    with pytest.raises(KafkaException) as err:
        admin.create_topics([NewTopic(no_create, 1, 1)])[no_create].result(TIMEOUT)
    assert code(err.value) == "TOPIC_AUTHORIZATION_FAILED"
    with pytest.raises(KafkaException) as err:
        admin.delete_topics([keep])[keep].result(TIMEOUT)
    assert code(err.value) == "TOPIC_AUTHORIZATION_FAILED"
    assert keep in cluster.broker.broker.registry.topics and no_create not in cluster.broker.broker.registry.topics
    with pytest.raises(KafkaException) as err:
        next(iter(admin.describe_configs([ConfigResource(ResourceType.TOPIC, frozen)]).values())).result(TIMEOUT)
    assert code(err.value) == "TOPIC_AUTHORIZATION_FAILED"
    with pytest.raises(KafkaException) as err:  # the broker's configs are the cluster's: no DESCRIBE_CONFIGS on it
        next(iter(admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")]).values())).result(TIMEOUT)
    assert code(err.value) == "CLUSTER_AUTHORIZATION_FAILED"


def test_describe_cluster_shows_the_operations_granted(cluster: Cluster) -> None:
    described = cluster.admin().describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert sorted(op.name for op in described.authorized_operations) == ["ALTER", "DESCRIBE"]


def test_produce_and_fetch_are_refused_per_topic_and_nothing_is_written(cluster: Cluster, acls: Acls,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    topic = unique("pf")
    create_topic(cluster, topic)
    # Once a topic has ACLs, only what they allow is: DESCRIBE is granted so that the clients find it.
    acls.add(binding(ResourceType.TOPIC, topic, AclOperation.DESCRIBE), deny(ResourceType.TOPIC, topic, AclOperation.WRITE),
             deny(ResourceType.TOPIC, topic, AclOperation.READ))
    producer = cluster.producer(**{"enable.idempotence": False, "retries": 0})
    errors: list[KafkaError] = []
    with caplog.at_level(logging.INFO, logger="onceflow.authorizer"):
        producer.produce(topic, b"v", on_delivery=lambda err, _: errors.append(err))
        producer.flush(TIMEOUT)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert f"is Denied operation = WRITE from host = 127.0.0.1 on resource = Topic:LITERAL:{topic}" in caplog.text
    assert cluster.broker.broker.registry.get(topic, 0).log_end_offset == 0  # type: ignore[union-attr]

    consumer = cluster.consumer(**{"group.id": unique("g")})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        error = first_error(consumer)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def first_error(consumer: Consumer, polls: int = 20) -> Any:
    """The first error a consumer's polls return (at most ``polls`` half-second polls), or None."""
    for _ in range(polls):
        msg = consumer.poll(0.5)
        if msg is not None and msg.error():
            return msg.error()
    return None


# -- groups -------------------------------------------------------------------


def test_a_group_the_client_may_not_read_is_refused(cluster: Cluster, acls: Acls) -> None:
    topic, group = unique("grp-topic"), unique("grp")
    create_topic(cluster, topic)
    acls.add(deny(ResourceType.GROUP, group, AclOperation.READ))
    consumer = cluster.consumer(**{"group.id": group})
    try:
        consumer.subscribe([topic])
        error = first_error(consumer)
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    with pytest.raises(KafkaException) as err:  # the group has ACLs now, none allowing DELETE
        cluster.admin().delete_consumer_groups([group])[group].result(TIMEOUT)
    assert code(err.value) == "GROUP_AUTHORIZATION_FAILED"


# -- producer ids and transactions --------------------------------------------


def test_an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic(cluster: Cluster, acls: Acls) -> None:
    topic = unique("idem")
    create_topic(cluster, topic)
    # IDEMPOTENT_WRITE on the cluster is denied already (the cluster has ACLs, none for it); WRITE on
    # some topic is what lets it in (KIP-679) -- until every topic's WRITE is denied too.
    ok = cluster.producer(**{"enable.idempotence": True})
    ok.produce(topic, b"allowed")
    assert ok.flush(TIMEOUT) == 0
    acls.add(deny(ResourceType.TOPIC, "*", AclOperation.WRITE), binding(ResourceType.TOPIC, topic, AclOperation.DESCRIBE))
    refused = cluster.producer(**{"enable.idempotence": True})
    refused.produce(topic, b"refused")
    with pytest.raises(KafkaException) as err:  # its InitProducerId was refused: a fatal error
        refused.flush(TIMEOUT)
    assert code(err.value) == "CLUSTER_AUTHORIZATION_FAILED" and err.value.args[0].fatal()


def test_a_refused_init_producer_id_does_not_fence_the_open_transaction(cluster: Cluster, acls: Acls) -> None:
    topic, txn = unique("txn-topic"), unique("tx")
    create_topic(cluster, topic)
    owner = cluster.producer(**{"transactional.id": txn})
    owner.init_transactions(TIMEOUT)
    owner.begin_transaction()
    owner.produce(topic, b"kept")
    assert owner.flush(TIMEOUT) == 0
    before = cluster.broker.call(lambda: cluster.broker.broker.txns.describe_transactions([txn]))[0]
    assert before.state == "Ongoing"

    # DESCRIBE stays allowed, so that both find the coordinator; WRITE is refused from now on.
    acls.add(deny(ResourceType.TRANSACTIONAL_ID, txn, AclOperation.WRITE),
             binding(ResourceType.TRANSACTIONAL_ID, txn, AclOperation.DESCRIBE))
    intruder = cluster.producer(**{"transactional.id": txn})
    with pytest.raises(KafkaException) as err:
        intruder.init_transactions(TIMEOUT)
    assert code(err.value) == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    after = cluster.broker.call(lambda: cluster.broker.broker.txns.describe_transactions([txn]))[0]
    assert (after.state, after.producer_id, after.producer_epoch) == (before.state, before.producer_id, before.producer_epoch)

    acls.remove(*acls.added)
    owner.commit_transaction(TIMEOUT)  # not fenced: the refused InitProducerId changed nothing
    consumer = cluster.consumer(**{"group.id": unique("g"), "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        for _ in range(20):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                values.append(msg.value())
                break
        assert values == [b"kept"]
    finally:
        consumer.close()
