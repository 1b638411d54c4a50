"""The scale-out proof (issue 10, section 5): ``onceflow demo --bootstrap-servers`` against a
3-node Apache Kafka cluster passes all its checks, through its Spark faults (a write task that
fails, the driver killed with SIGKILL mid-micro-batch) and one Kafka broker killed with SIGKILL
and restarted while the pipeline runs.  First, the connector's driver-side calls through the
same kind of leader failover, on their own (what the demo's first runs here broke on).

The cluster belongs to this test (``KafkaCluster(size=3)``: KRaft, every node broker and
controller, replication factor 3, min.insync.replicas=2), so the demo cannot restart a node
itself.  Its ``--broker-fault-command`` is ``kill -KILL <node 2's pid>`` followed by a wait for
this test to say the node is back.  Once 60% of the payments are processed the demo runs it
and carries on; this test sees node 2 die, waits until the partitions it led have new leaders
and the pipeline has processed more payments without it, restarts it on its port and data,
and lets the command finish.  The demo then runs until both queries have caught up and checks
its topics.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from onceflow.pipelines import payments as pipeline
from onceflow.reference import KafkaCluster
from onceflow.spark.kafka import KafkaAdmin
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
VICTIM = 2
#: 6000 payments between 200 accounts: the generator's seed aborts 2 of its 12 transactions.
PAYMENTS, ACCOUNTS = 6000, 200
#: Micro-batches of at most this many offsets, so that the run lasts past the broker fault.
MAX_OFFSETS = 1500
DEMO_TIMEOUT_S = 900
QUIET = {"log_level": 0, "log.connection.close": False}

#: The second half of --broker-fault-command: wait (bounded) until this test has restarted the node.
WAIT_FOR_RESTART = ("import pathlib, sys; from tests.support.waiting import wait_for; "
                    "wait_for(lambda: pathlib.Path(sys.argv[1]).exists(), timeout=600, interval=0.1, "
                    "what='the test to restart the broker')")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Three KRaft nodes, broker and controller each: replication factor 3, min.insync.replicas=2."""
    with KafkaCluster(size=3, heap="512m", data_dir=tmp_path_factory.mktemp("kafka-3")) as started:
        yield started


@pytest.mark.timeout(600)  # the cluster's start (80 s here) counts
def test_the_sources_offsets_survive_a_leader_killed_restarted_and_elected_again(cluster: KafkaCluster) -> None:
    """The driver side of the source (ListOffsets, commitOffsetsToGroup) through one client that
    keeps its metadata: SIGKILL of a partition's leader, its restart, and the preferred leader's
    election back.  Each call returns the true offsets; none fails a query."""
    topic, group = "failover-offsets", "failover-offsets-group"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET})
    admin.create_topics([NewTopic(topic, 4, -1)])[topic].result(60)
    wait_for(lambda: len(_partition_leaders(admin, topic)) == 4 and -1 not in _partition_leaders(admin, topic).values(),
             timeout=60, interval=0.2, what="the topic's leaders")
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", **QUIET})
    for i in range(400):
        producer.produce(topic, b"v%d" % i, partition=i % 4)
    assert producer.flush(60) == 0
    partitions = [(topic, p) for p in range(4)]
    source = KafkaAdmin(cluster.bootstrap_servers, {})
    assert source.earliest(partitions) == dict.fromkeys(partitions, 0)
    assert source.latest(partitions) == dict.fromkeys(partitions, 100)
    calls = 0

    def offsets_right() -> bool:
        """One round of the driver's calls, as each micro-batch makes them: all must succeed."""
        nonlocal calls
        assert source.earliest(partitions) == dict.fromkeys(partitions, 0)
        assert source.latest(partitions) == dict.fromkeys(partitions, 100)
        source.commit_group_offsets(group, dict.fromkeys(partitions, 100))
        calls += 1
        return True

    leader = _partition_leaders(admin, topic)[0]
    others = ",".join(cluster.node_bootstrap(n) for n in cluster.nodes if n != leader)
    survivors = AdminClient({"bootstrap.servers": others, **QUIET})
    cluster.kill(leader)
    wait_for(lambda: offsets_right() and _partition_leaders(survivors, topic).get(0) not in (leader, -1, None),
             timeout=120, interval=0.2, what=f"partition 0 to get a leader other than node {leader}")
    cluster.restart(leader)
    offsets_right()

    def leader_back() -> bool:
        offsets_right()
        futures = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, p) for p in range(4)])
        with contextlib.suppress(KafkaException):  # not in the ISR yet, or already the leader
            futures.result(30)
        return _partition_leaders(admin, topic).get(0) == leader

    wait_for(leader_back, timeout=120, interval=0.5, what=f"node {leader} to lead partition 0 again")
    offsets_right()
    assert calls >= 3


def _partition_leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    try:
        metadata = admin.list_topics(topic, timeout=10)
    except KafkaException:
        return {}
    return {p.id: p.leader for p in metadata.topics[topic].partitions.values()}


# In make reference-suite only: on this machine the 3-node cluster's KRaft quorum (nodes 1 and 3 left,
# heap 512m each, beside Spark) failed over in 3 runs of 5 only after more than 120 s, the survivors'
# controller fetches timing out ("Did not receive fetch request from the majority of the voters"),
# with db54cfc as with later commits; alone it passed in 175 s.
@pytest.mark.long
@pytest.mark.timeout(DEMO_TIMEOUT_S + 300)
def test_the_demo_passes_its_checks_on_a_three_node_kafka_cluster_with_a_broker_killed(cluster: KafkaCluster,
                                                                                      tmp_path: Path) -> None:
    restarted = tmp_path / "node-restarted"
    log = tmp_path / "demo.out"
    bootstrap = cluster.bootstrap_servers
    survivors = ",".join(cluster.node_bootstrap(n) for n in cluster.nodes if n != VICTIM)
    victim = cluster.nodes[VICTIM]
    assert victim.proc is not None
    fault = (f"kill -KILL {victim.proc.pid} && "
             f"{shlex.quote(sys.executable)} -c {shlex.quote(WAIT_FOR_RESTART)} {shlex.quote(str(restarted))}")
    command = [sys.executable, "-m", "onceflow", "demo", "--bootstrap-servers", bootstrap,
               "--payments", str(PAYMENTS), "--accounts", str(ACCOUNTS), "--max-offsets-per-trigger", str(MAX_OFFSETS),
               "--broker-fault-command", fault, "--keep"]  # the groups are read once the demo has ended
    admin = AdminClient({"bootstrap.servers": survivors, **QUIET})
    with open(log, "w") as out:
        # Its own process group: the demo, its Spark driver and the driver's JVM end together in finally.
        demo = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    try:
        def output() -> str:
            return log.read_text(errors="replace")[-6000:]

        # The topics the demo creates: three replicas each, and node 2 leads some of their partitions.
        def topics_created() -> dict[tuple[str, int], int] | str | None:
            if demo.poll() is not None:
                return "exited"
            found = _leaders(admin)
            return found if len(found) == 3 * pipeline.PARTITIONS and -1 not in found.values() else None

        before = wait_for(topics_created, timeout=120, interval=0.5, what=lambda: f"the demo's topics\n{output()}")
        assert isinstance(before, dict), output()
        metadata = admin.list_topics(timeout=10)
        replicas = {len(p.replicas) for t in (pipeline.PAYMENTS, pipeline.LEDGER, pipeline.BALANCES)
                    for p in metadata.topics[t].partitions.values()}
        assert replicas == {3}, f"the demo's topics have replication factors {replicas}, not the cluster's 3"
        led = sorted(tp for tp, leader in before.items() if leader == VICTIM)
        assert led, f"node {VICTIM} leads none of the demo's partitions: {before}"

        # The demo's fault command kills node 2 (60% of the payments processed).
        wait_for(lambda: victim.proc is None or victim.proc.poll() is not None or demo.poll() is not None,
                 timeout=DEMO_TIMEOUT_S, interval=0.2, what=lambda: f"the broker fault\n{output()}")
        assert demo.poll() is None, f"the demo ended before it killed a broker:\n{output()}"
        cluster.kill(VICTIM)  # already dead (SIGKILL from the demo's command): reaps it
        at_kill = wait_for(lambda: _processed(survivors), timeout=120, interval=0.5, what="the queries' offsets")
        assert isinstance(at_kill, int)
        # Failover: every partition node 2 led has another leader, and the pipeline moves on without it.
        wait_for(lambda: all(_leaders(admin).get(tp, VICTIM) not in (VICTIM, -1) for tp in led) or demo.poll() is not None,
                 timeout=120, interval=0.5, what=lambda: f"new leaders for {led}: {_leaders(admin)}")
        wait_for(lambda: (_processed(survivors) or 0) > at_kill or demo.poll() is not None, timeout=300,
                 interval=0.5, what=lambda: f"the pipeline to progress without node {VICTIM}\n{output()}")
        assert demo.poll() is None, f"the demo ended while node {VICTIM} was down:\n{output()}"
        cluster.restart(VICTIM)
        at_restart = _processed(bootstrap)
        restarted.touch()

        demo.wait(DEMO_TIMEOUT_S)
        text = log.read_text(errors="replace")
        assert demo.returncode == 0, text[-6000:]
        assert "OK: every committed payment has exactly one debit and one credit" in text, text[-6000:]
        assert "FAILED" not in text, text[-6000:]
        assert "1,000 of them in aborted transactions" in text, text[-6000:]
        for fault_line in ("a write task failed", "killed the Spark driver with SIGKILL",
                           "the broker fault command exited 0"):
            assert fault_line in text, f"fault not injected: {fault_line}\n{text[-3000:]}"
        # The restart happened mid-run: the queries processed more after it.
        final = _processed(bootstrap)
        assert at_restart is not None and final is not None and final > at_restart, (at_kill, at_restart, final)
        print(f"node {VICTIM} led {led}; offsets the queries had processed: {at_kill} at the kill, "
              f"{at_restart} after the restart, {final} at the end")
    finally:
        if demo.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(60)
        restarted.touch()  # the fault command, if still waiting, ends


def _leaders(admin: AdminClient) -> dict[tuple[str, int], int]:
    """(topic, partition) -> leader of the demo's topics, as the metadata says now ({} if unknown)."""
    try:
        metadata = admin.list_topics(timeout=10)
    except KafkaException:
        return {}
    return {(name, p.id): p.leader for name, topic in metadata.topics.items()
            if name in (pipeline.PAYMENTS, pipeline.LEDGER, pipeline.BALANCES) for p in topic.partitions.values()}


def _processed(bootstrap: str) -> int | None:
    """Offsets both queries have processed (their commitOffsetsToGroup groups), or None if unknown now."""
    total = 0
    for topic, group in ((pipeline.PAYMENTS, pipeline.LEDGER_GROUP), (pipeline.LEDGER, pipeline.BALANCES_GROUP)):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **QUIET})
        try:
            committed = consumer.committed([TopicPartition(topic, p) for p in range(pipeline.PARTITIONS)], timeout=10)
        except KafkaException:
            return None
        finally:
            consumer.close()
        total += sum(max(tp.offset, 0) for tp in committed)
    return total
