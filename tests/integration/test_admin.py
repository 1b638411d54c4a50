"""Topic administration through confluent-kafka's AdminClient against the broker process."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.static.primitive import i8

from tests.support.broker import BrokerProcess
from tests.support.waiting import wait_for
from tests.support.wire import WireClient

TIMEOUT = 30


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def create(client: AdminClient, *topics: NewTopic, validate_only: bool = False) -> dict[str, Exception | None]:
    futures = client.create_topics(list(topics), validate_only=validate_only)
    out: dict[str, Exception | None] = {}
    for name, fut in futures.items():
        try:
            fut.result(TIMEOUT)
            out[name] = None
        except KafkaException as exc:
            out[name] = exc
    return out


def error_name(exc: Exception | None) -> str | None:
    return None if exc is None else exc.args[0].name()


def test_create_describe_delete(broker_process: BrokerProcess) -> None:
    client = admin(broker_process)
    result = create(client, NewTopic("orders", num_partitions=3, replication_factor=1, config={"retention.ms": "60000"}),
                    NewTopic("audit", num_partitions=1, replication_factor=1))
    assert result == {"orders": None, "audit": None}

    metadata = client.list_topics(timeout=TIMEOUT)
    assert {"orders", "audit"} <= set(metadata.topics)
    assert sorted(metadata.topics["orders"].partitions) == [0, 1, 2]
    partition = metadata.topics["orders"].partitions[0]
    assert partition.leader == 1 and partition.replicas == [1] and partition.isrs == [1]

    described = client.describe_topics(TopicCollection(["orders"]))["orders"].result(TIMEOUT)
    assert described.name == "orders" and len(described.partitions) == 3 and not described.is_internal

    configs = client.describe_configs([ConfigResource(ResourceType.TOPIC, "orders")])
    entries = next(iter(configs.values())).result(TIMEOUT)
    assert entries["retention.ms"].value == "60000" and not entries["retention.ms"].is_default
    assert entries["cleanup.policy"].value == "delete" and entries["cleanup.policy"].is_default
    assert entries["max.message.bytes"].value == "1048588"

    assert error_name(create(client, NewTopic("orders", 1, 1))["orders"]) == "TOPIC_ALREADY_EXISTS"

    for fut in client.delete_topics(["orders"]).values():
        fut.result(TIMEOUT)
    assert "orders" not in client.list_topics(timeout=TIMEOUT).topics
    with pytest.raises(KafkaException) as err:
        next(iter(client.delete_topics(["orders"]).values())).result(TIMEOUT)
    assert err.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"


def test_create_topics_validation_errors(broker_process: BrokerProcess) -> None:
    client = admin(broker_process)
    result = create(
        client,
        NewTopic("bad name!", 1, 1),
        NewTopic("rf3", 1, 3),
        NewTopic("badconf", 1, 1, config={"cleanup.policy": "shred"}),
        NewTopic("unknownconf", 1, 1, config={"no.such.config": "1"}),
    )
    assert error_name(result["bad name!"]) == "TOPIC_EXCEPTION"
    assert error_name(result["rf3"]) == "INVALID_REPLICATION_FACTOR"
    assert error_name(result["badconf"]) == "INVALID_CONFIG"
    assert error_name(result["unknownconf"]) == "INVALID_CONFIG"
    assert create(client, NewTopic("dry", 2, 1), validate_only=True) == {"dry": None}
    assert "dry" not in client.list_topics(timeout=TIMEOUT).topics


def test_create_partitions_and_alter_configs(broker_process: BrokerProcess) -> None:
    client = admin(broker_process)
    create(client, NewTopic("grow", 1, 1))
    for fut in client.create_partitions([NewPartitions("grow", 4)]).values():
        fut.result(TIMEOUT)
    assert sorted(client.list_topics("grow", timeout=TIMEOUT).topics["grow"].partitions) == [0, 1, 2, 3]
    with pytest.raises(KafkaException) as err:
        next(iter(client.create_partitions([NewPartitions("grow", 2)]).values())).result(TIMEOUT)
    assert err.value.args[0].name() == "INVALID_PARTITIONS"

    resource = ConfigResource(ResourceType.TOPIC, "grow", incremental_configs=[
        ConfigEntry("retention.bytes", "1048576", incremental_operation=AlterConfigOpType.SET)])
    for fut in client.incremental_alter_configs([resource]).values():
        fut.result(TIMEOUT)
    entries = next(iter(client.describe_configs([ConfigResource(ResourceType.TOPIC, "grow")]).values())).result(TIMEOUT)
    assert entries["retention.bytes"].value == "1048576"


def test_topics_and_configs_survive_a_restart(broker_process: BrokerProcess) -> None:
    client = admin(broker_process)
    create(client, NewTopic("durable", 2, 1, config={"segment.bytes": "1048576"}))
    broker_process.restart()
    client = admin(broker_process)
    metadata = wait_for(lambda: client.list_topics(timeout=TIMEOUT).topics.get("durable"), what="topic after restart")
    assert sorted(metadata.partitions) == [0, 1]
    entries = next(iter(client.describe_configs([ConfigResource(ResourceType.TOPIC, "durable")]).values())).result(TIMEOUT)
    assert entries["segment.bytes"].value == "1048576"


def test_describe_cluster(broker_process: BrokerProcess) -> None:
    client = admin(broker_process)
    cluster = client.describe_cluster().result(TIMEOUT)
    assert [node.id for node in cluster.nodes] == [1]
    assert cluster.controller.id == 1 and cluster.cluster_id


def test_advertised_listeners_is_the_address_clients_are_given(make_broker_process: Any) -> None:
    """Behind a proxy the broker listens on one address and tells clients another: Metadata,
    DescribeCluster and FindCoordinator all answer with ``advertised.listeners``."""
    broker = make_broker_process(**{"advertised.listeners": "PLAINTEXT://proxy.example:19092"})
    with WireClient(broker.bootstrap_servers) as c:
        metadata = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False))
        assert [(b.host, b.port) for b in metadata.brokers] == [("proxy.example", 19092)]
        cluster = c.request(DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                   endpoint_type=i8(1)))
        assert [(b.host, b.port) for b in cluster.brokers] == [("proxy.example", 19092)]
        coordinator = c.request(FindCoordinatorRequest(key="g", key_type=i8(0)))
        assert (coordinator.host, coordinator.port) == ("proxy.example", 19092)
