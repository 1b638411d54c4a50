"""Fixtures of the reference suite (issue 10): one Onceflow broker process and one Apache Kafka
KRaft node for the whole session, and ``target``, which runs a test once against each;
``proxied``, the same for a module's own pair of brokers behind a ``RequestProxy`` they advertise.

Tests share the two brokers, so each uses topic, group and transactional ids of its own
(``unique``).  Apache Kafka comes from the Maven cache (``make reference`` fills it; the first
use here does too).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest

from onceflow.broker.process import free_port
from onceflow.reference import KafkaCluster
from tests.support.broker import BrokerProcess
from tests.support.reference import SHARED_SETTINGS, Proxied, Target
from tests.support.secured import Secured, secured_cluster
from tests.support.tcp_proxy import RequestProxy


@pytest.fixture(scope="session")
def onceflow_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    proc = BrokerProcess(tmp_path_factory.mktemp("onceflow-reference") / "data", dict(SHARED_SETTINGS))
    proc.start()
    try:
        yield Target("onceflow", proc.bootstrap_servers, proc.data_dir)
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One Apache Kafka node (broker and controller), the pinned release."""
    with KafkaCluster(overrides=SHARED_SETTINGS, data_dir=tmp_path_factory.mktemp("kafka-reference")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kafka_target(kafka_cluster: KafkaCluster) -> Target:
    return Target("kafka", kafka_cluster.bootstrap_servers, kafka_cluster.nodes[1].directory / "data")


@pytest.fixture(params=["onceflow", "kafka"])
def target(request: pytest.FixtureRequest) -> Target:
    """The broker under test: the test runs once against Onceflow and once against Apache Kafka."""
    return request.getfixturevalue(f"{request.param}_target")  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def proxied_onceflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    port = free_port()
    proxy = RequestProxy(("127.0.0.1", port))
    proxy.start()
    proc = BrokerProcess(tmp_path_factory.mktemp("onceflow-proxied") / "data",
                         {**SHARED_SETTINGS, "advertised.listeners": proxy.listener}, port=port)
    try:
        proc.start()
        yield Proxied(Target("onceflow", proxy.address), proxy, proc.bootstrap_servers)
    finally:
        proxy.close()
        proc.stop()


@pytest.fixture(scope="module")
def proxied_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    """Its own Kafka node: the session's advertises itself.  The broker's requests to itself (the
    transaction markers) go through the proxy too, as they go to the advertised address."""
    cluster = KafkaCluster(overrides=SHARED_SETTINGS, heap="512m", data_dir=tmp_path_factory.mktemp("kafka-proxied"))
    proxy = RequestProxy(("127.0.0.1", cluster.nodes[1].port))
    proxy.start()
    cluster.overrides["advertised.listeners"] = proxy.listener
    try:
        with cluster:
            yield Proxied(Target("kafka", proxy.address), proxy, cluster.bootstrap_servers)
    finally:
        proxy.close()


@pytest.fixture(params=["onceflow", "kafka"])
def proxied(request: pytest.FixtureRequest) -> Iterator[Proxied]:
    """``target``'s twin: the test runs against Onceflow and Apache Kafka, each behind its proxy,
    which is disarmed after the test."""
    broker: Proxied = request.getfixturevalue(f"proxied_{request.param}")
    try:
        yield broker
    finally:
        broker.proxy.disarm()


_ids = itertools.count()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique("orders")`` is a name no other test uses on the shared brokers."""
    test = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:60]

    def make(base: str) -> str:
        return f"{base}-{test}-{next(_ids)}"

    return make


@pytest.fixture(scope="session")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    with secured_cluster("kafka", tmp_path_factory) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def secured_onceflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    with secured_cluster("onceflow", tmp_path_factory) as cluster:
        yield cluster


@pytest.fixture(params=["kafka", "onceflow"])
def secured(request: pytest.FixtureRequest) -> Secured:
    """A secured cluster (``tests/support/secured.py``), Apache Kafka then Onceflow's broker process,
    configured the same way; one of each for the session, as ``target``'s brokers are."""
    return request.getfixturevalue(f"secured_{request.param}")  # type: ignore[no-any-return]
