"""``onceflow cluster info``: the cluster id, its controller, its brokers, and what each speaks.

confluent-kafka's ``AdminClient.describe_cluster`` (DescribeCluster, KIP-700; Metadata before it)
gives the cluster id, the controller and the brokers with their addresses and racks, as
``rpk cluster info`` shows them.  librdkafka negotiates API versions with every broker but does not
expose them, so they come from kafka-python, a real client library too: its ApiVersions exchange
with each broker (``KafkaAdminClient.get_broker_version_data``), what
``kafka-broker-api-versions`` prints.  ``--no-api-versions`` leaves them out (and kafka-python
with them).

Against KRaft (Apache Kafka 4, Onceflow) the controller a broker names in DescribeCluster is a
broker, not the KRaft quorum's controller: Kafka's brokers answer so (KIP-919 clients ask the
quorum itself); the command prints what the broker says.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..clientconfig import NO_SETTINGS, ClientSettings
from .common import DEFAULT_TIMEOUT_S, ToolError, add_command, add_family, confluent_admin, error_line, kafka_python_admin, wait


def cluster_info(bootstrap: str, *, api_versions: bool = True, timeout: float = DEFAULT_TIMEOUT_S,
                 client: ClientSettings = NO_SETTINGS) -> dict[str, Any]:
    """Cluster id, controller id, the brokers (id, host, port, rack) and, with ``api_versions``,
    each broker's supported version range of each Kafka API."""
    admin = confluent_admin(bootstrap, client)
    described = wait(admin.describe_cluster(request_timeout=timeout), timeout, "the cluster")
    brokers = [{"id": node.id, "host": node.host, "port": node.port, "rack": node.rack or None}
               for node in sorted(described.nodes, key=lambda n: n.id)]
    info: dict[str, Any] = {
        "cluster_id": described.cluster_id,
        "controller": described.controller.id if described.controller is not None else None,
        "brokers": brokers,
    }
    if api_versions:
        info["api_versions"] = _api_versions(bootstrap, [b["id"] for b in brokers], timeout, client)
    return info


def _api_versions(bootstrap: str, broker_ids: list[int], timeout: float, client: ClientSettings) -> list[dict[str, Any]]:
    """One row per broker and API key: its name, key, and the lowest and highest version the broker takes."""
    rows = []
    with kafka_python_admin(bootstrap, timeout, client) as admin:
        for broker_id in broker_ids:
            try:
                versions = admin.get_broker_version_data(broker_id).api_versions
            except Exception as exc:  # kafka-python raises its own errors and plain ones alike
                raise ToolError(f"the API versions of broker {broker_id}: {error_line(exc)}") from exc
            for key, (low, high) in sorted(versions.items()):
                rows.append({"broker": broker_id, "api": _api_name(key), "key": int(key),
                             "min_version": low, "max_version": high})
    return rows


def _api_name(key: int) -> str:
    """Kafka's name of an API key (kafka-python's table of them); ``Unknown(N)`` for a key it does not know."""
    try:
        from kafka.protocol.api_key import ApiKey

        return str(ApiKey(int(key)).name)
    except (ImportError, ValueError):
        return f"Unknown({int(key)})"


# -- command line --------------------------------------------------------------


def fill(parser: argparse.ArgumentParser) -> None:
    """Define ``onceflow cluster``'s commands and options on its parser."""
    actions = add_family(parser)
    p = add_command(actions, "info", "cluster id, controller, brokers and the API versions each supports", _info)
    p.add_argument("--no-api-versions", dest="api_versions", action="store_false",
                   help="leave the API versions out (they come from kafka-python's ApiVersions exchange)")


def _info(args: argparse.Namespace) -> dict[str, Any]:
    return cluster_info(args.bootstrap_servers, api_versions=args.api_versions, timeout=args.timeout, client=args.client)
