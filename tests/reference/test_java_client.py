"""The Apache Kafka Java client (kafka-clients 4.3.1) against Onceflow and against Apache Kafka
(issue 10, section 4): the same program, ``reference/src/.../ClientCheck.java``, on both brokers.

* ``ctp``: a consume-transform-produce loop with a transactional producer and
  ``sendOffsetsToTransaction(offsets, consumer.groupMetadata())`` (KIP-447), one transaction aborted
  on purpose and its input processed again, then a read_committed consumer checks every input is in
  the output exactly once and the group's offsets are at the input's end; its consumer in a classic
  group and in a KIP-848 one (``group.protocol=consumer``: ConsumerGroupHeartbeat, the offsets
  committed with the member's epoch), the same requests and outcome on both brokers.
* ``versions``: the versions the client negotiates (its own ``NodeApiVersions`` rule) from each
  broker's ApiVersions answer.  The requests the client really sent, and at which version, come
  from ``org.apache.kafka.clients.NetworkClient``'s DEBUG log (``reference/log4j2-requests.properties``).
* Transactions v2 (KIP-890 part 2, used when a broker finalizes ``transaction.version`` >= 2): the
  client negotiates it against Onceflow as against Kafka, and the same broker set to
  ``transaction.version=1`` gets transactions v1, as Kafka formatted so.
* The KIP-848 group protocol (``group.protocol=consumer``): served by both as they ship
  (``group.version`` 1), and refused the same way by Onceflow set to ``group.version=0`` and by
  ``kafka_without_features``, Apache Kafka formatted with ``transaction.version=0`` and
  ``group.version=0`` and only the classic rebalance protocol enabled.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from onceflow.protocol import apis
from onceflow.reference import KafkaCluster
from onceflow.reference.tools import java_command, logged_requests
from tests.support.reference import SHARED_SETTINGS, Target

MAIN = "dev.onceflow.reference.ClientCheck"
RUN_TIMEOUT_S = 300
RECORDS = 300

#: The requests of a transactional producer: which of them are sent, and at which versions,
#: tells transactions v1 (AddPartitionsToTxn, EndTxn <= 4) from v2 (neither: Produce >= 12 adds
#: the partition, EndTxn 5).
TXN_APIS = ("INIT_PRODUCER_ID", "ADD_PARTITIONS_TO_TXN", "ADD_OFFSETS_TO_TXN", "TXN_OFFSET_COMMIT", "END_TXN")


@dataclass(frozen=True)
class Run:
    """What one ClientCheck run printed, and the requests its clients sent."""

    result: dict[str, Any]
    sent: dict[str, set[int]]  # API (Kafka's enum name) -> the versions it was sent at

    def txn_requests(self) -> dict[str, set[int]]:
        return {api: versions for api, versions in self.sent.items() if api in TXN_APIS}


def client_check(mode: str, bootstrap: str, *args: str, log_dir: Path) -> Run:
    """Run ClientCheck in its own JVM (bounded) with NetworkClient's requests logged to a file."""
    request_log = log_dir / f"requests-{mode}-{len(list(log_dir.iterdir()))}.log"
    cmd = java_command(MAIN, [mode, bootstrap, *args], request_log=request_log)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"ClientCheck {mode} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
    return Run(json.loads(lines[-1]), logged_requests(request_log))


@pytest.fixture(scope="module")
def kafka_without_features(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """Apache Kafka 4.3.1 as a broker without KIP-848 and without transactions v2."""
    overrides = {**SHARED_SETTINGS, "group.coordinator.rebalance.protocols": "classic"}
    with KafkaCluster(overrides=overrides, heap="512m", features={"transaction.version": 0, "group.version": 0},
                      data_dir=tmp_path_factory.mktemp("kafka-without-features")) as cluster:
        yield Target("kafka-without-features", cluster.bootstrap_servers)


#: The consumer's ``group.protocol`` in the consume-transform-produce loop: the classic rebalance
#: protocol (JoinGroup/SyncGroup) and KIP-848's (ConsumerGroupHeartbeat, member epochs).
GROUP_PROTOCOLS = ("classic", "consumer")

#: The group requests each protocol's consumer sends, and those it must not.
GROUP_APIS = {"classic": ({"JOIN_GROUP", "SYNC_GROUP"}, {"CONSUMER_GROUP_HEARTBEAT"}),
              "consumer": ({"CONSUMER_GROUP_HEARTBEAT"}, {"JOIN_GROUP", "SYNC_GROUP", "HEARTBEAT"})}


@pytest.fixture(scope="module")
def ctp_runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Run]:
    """``ctp_runs(target, protocol)``: the consume-transform-produce run against that broker with
    that ``group.protocol`` (classic by default), made once per module (a run is a JVM and a few
    dozen transactions) and shared by the tests reading it."""
    runs: dict[tuple[str, str], Run] = {}
    log_dir = tmp_path_factory.mktemp("ctp-requests")

    def run(target: Target, protocol: str = "classic") -> Run:
        if (target.name, protocol) not in runs:
            prefix = f"java-ctp-{protocol}-{target.name}-{uuid.uuid4().hex[:8]}"
            runs[target.name, protocol] = client_check("ctp", target.bootstrap_servers, prefix, str(RECORDS), protocol,
                                                       log_dir=log_dir)
        return runs[target.name, protocol]

    return run


@pytest.mark.parametrize("protocol", GROUP_PROTOCOLS)
def test_consume_transform_produce_is_exactly_once(target: Target, protocol: str, ctp_runs: Callable[..., Run]) -> None:
    run = ctp_runs(target, protocol)
    result = run.result
    assert result["client_version"] == "4.3.1"
    assert result["group_protocol"] == protocol
    assert result["exactly_once"], result
    assert (result["inputs"], result["outputs_committed"], result["distinct"], result["missing"], result["duplicates"]) \
        == (RECORDS, RECORDS, RECORDS, 0, 0)
    assert result["aborted_transactions"] == 1 and result["committed_transactions"] >= 1
    # The aborted attempt's records are in the log (read_uncommitted sees them), never committed.
    assert result["outputs_read_uncommitted"] == RECORDS + result["aborted_records"] > RECORDS
    assert result["group_offsets_at_input_end"] and result["group_offsets_total"] == RECORDS
    # A classic group (JoinGroup/SyncGroup) or a KIP-848 one (ConsumerGroupHeartbeat only), and the
    # offsets committed through the transaction with the group's generation or the member's epoch
    # and the member id (TxnOffsetCommit v3+, KIP-447).
    used, unused = GROUP_APIS[protocol]
    assert used <= run.sent.keys() and not unused & run.sent.keys(), sorted(run.sent)
    # One join: generation 1 of the classic group; epoch 2 of the KIP-848 group's first member (a new
    # group starts at epoch 1 in Kafka 4.3).
    assert result["group_generation"] == {"classic": 1, "consumer": 2}[protocol]
    assert min(run.sent["TXN_OFFSET_COMMIT"]) >= 3
    assert "OFFSET_COMMIT" not in run.sent, "offsets go only through the transaction"


@pytest.mark.parametrize("protocol", GROUP_PROTOCOLS)
def test_ctp_results_are_the_same_on_both_brokers(onceflow_target: Target, kafka_target: Target, protocol: str,
                                                  ctp_runs: Callable[..., Run]) -> None:
    # How many transactions it took depends on how polls batch records, not on the broker.
    volatile = {"committed_transactions", "aborted_records", "outputs_read_uncommitted"}
    runs = ctp_runs(onceflow_target, protocol), ctp_runs(kafka_target, protocol)
    onceflow, kafka = ({k: v for k, v in run.result.items() if k not in volatile} for run in runs)
    assert onceflow == kafka
    # The same group requests, at the versions sent to Kafka capped at Onceflow's highest (the client
    # takes the highest both sides know: OffsetFetch v10, topic ids, is Kafka's alone), and the same
    # transactional ones.
    group_apis = set().union(*GROUP_APIS[protocol]) | {"OFFSET_FETCH", "LEAVE_GROUP", "HEARTBEAT"}
    onceflow_groups, kafka_groups = ({api: v for api, v in run.sent.items() if api in group_apis} for run in runs)
    assert onceflow_groups == {api: {min(v, apis.SUPPORTED[getattr(apis, api)][1]) for v in versions}
                               for api, versions in kafka_groups.items()}
    assert runs[0].txn_requests() == runs[1].txn_requests()


def test_the_client_negotiates_the_highest_version_both_sides_know(onceflow_target: Target, kafka_target: Target,
                                                                    tmp_path: Path) -> None:
    onceflow = client_check("versions", onceflow_target.bootstrap_servers, log_dir=tmp_path).result
    kafka = client_check("versions", kafka_target.bootstrap_servers, log_dir=tmp_path).result
    assert onceflow["error_code"] == kafka["error_code"] == 0
    served = {apis.api_name(key): bounds for key, bounds in apis.SUPPORTED.items()}
    for api, usable in onceflow["usable"].items():
        if api not in served:
            assert usable is None, f"{api} is not served by Onceflow"
            continue
        # The client's highest version, capped at Onceflow's ceiling; Kafka serves at least as much.
        client_max = kafka["usable"][api]
        assert usable == min(client_max, served[api][1]), api
        assert kafka["broker"][api][1] >= served[api][1], f"{api}: Onceflow serves a version Kafka 4.3.1 does not"
        # The advertised floors are Kafka's, Produce's v0 included (KAFKA-18659: advertised, refused).
        assert onceflow["broker"][api][0] == kafka["broker"][api][0], api
    # transaction.version 2 (transactions v2) and group.version 1 (the KIP-848 consumer protocol)
    # are finalized and supported on both, at Kafka's levels; Onceflow lists no other feature.
    assert onceflow["finalized_features"] == {"group.version": 1, "transaction.version": 2}, onceflow["finalized_features"]
    assert onceflow["supported_features"] == {"group.version": [0, 1], "transaction.version": [0, 2]}
    for features in ("finalized_features", "supported_features"):
        assert {name: kafka[features][name] for name in onceflow[features]} == onceflow[features], features


def test_the_ctp_loop_uses_transactions_v2_as_with_kafka(
        onceflow_target: Target, kafka_target: Target, ctp_runs: Callable[..., Run]) -> None:
    onceflow, kafka = ctp_runs(onceflow_target), ctp_runs(kafka_target)
    assert onceflow.result["exactly_once"] and kafka.result["exactly_once"]
    # Transactions v2 on both, request for request: no AddPartitionsToTxn or AddOffsetsToTxn (the
    # Produce and the TxnOffsetCommit add their partitions), EndTxn v5 (it bumps the epoch).
    assert onceflow.txn_requests() == kafka.txn_requests()
    assert "ADD_PARTITIONS_TO_TXN" not in onceflow.sent and "ADD_OFFSETS_TO_TXN" not in onceflow.sent
    assert onceflow.sent["END_TXN"] == {5} and onceflow.sent["TXN_OFFSET_COMMIT"] == {5}
    # Produce v13 on both (topics named by id, KIP-516).
    assert max(onceflow.sent["PRODUCE"]) == max(kafka.sent["PRODUCE"]) == 13


def test_the_ctp_loop_uses_transactions_v1_with_transaction_version_1(
        kafka_without_features: Target, ctp_runs: Callable[..., Run], make_broker_process: Any,
        tmp_path: Path) -> None:
    """The broker set to ``transaction.version=1`` finalizes it so, and the client falls back to
    transactions v1, as against Kafka formatted without transactions v2."""
    v1 = make_broker_process(**{"transaction.version": "1"})
    onceflow = client_check("ctp", v1.bootstrap_servers, f"java-ctp-v1-{uuid.uuid4().hex[:8]}", str(RECORDS),
                            log_dir=tmp_path)
    without = ctp_runs(kafka_without_features)
    assert onceflow.result["exactly_once"] and without.result["exactly_once"]
    assert onceflow.txn_requests() == without.txn_requests()
    assert onceflow.txn_requests()["ADD_PARTITIONS_TO_TXN"] == {3} and onceflow.txn_requests()["END_TXN"] == {4}
    # The transactional producer's Produce at v11 (v12+ is transactions v2's), on both.
    assert 11 in onceflow.sent["PRODUCE"] and 11 in without.sent["PRODUCE"]


def test_the_kip848_consumer_protocol_is_served_and_refused_as_on_kafka(
        onceflow_target: Target, kafka_target: Target, kafka_without_features: Target, unique: Callable[[str], str],
        make_broker_process: Any, tmp_path: Path) -> None:
    def attempt(bootstrap_servers: str) -> dict[str, Any]:
        return client_check("consumer-protocol", bootstrap_servers, unique("kip848"), log_dir=tmp_path).result

    # Both as they ship serve the new protocol: the consumer reads its three records.
    for served in (attempt(onceflow_target.bootstrap_servers), attempt(kafka_target.bootstrap_servers)):
        assert served["ok"] and served["records"] == 3, served
    # Without it (group.version=0), the consumer's poll fails at once with the same clear exception on both.
    off = make_broker_process(**{"group.version": "0"})
    onceflow, without = attempt(off.bootstrap_servers), attempt(kafka_without_features.bootstrap_servers)
    for result in (onceflow, without):
        assert not result["ok"] and result["records"] == 0
        assert result["error_class"] == "org.apache.kafka.common.errors.UnsupportedVersionException"
        assert "does not support the new CONSUMER group protocol" in result["error"]
        assert "group.protocol=classic" in result["error"]
    assert (onceflow["error_class"], onceflow["error"]) == (without["error_class"], without["error"])
