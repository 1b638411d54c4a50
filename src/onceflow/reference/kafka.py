"""Apache Kafka brokers on loopback, for tests and benchmarks: one node, or a 3-node cluster.

    with KafkaCluster() as kafka:                       # one KRaft node, broker and controller
        Producer({"bootstrap.servers": kafka.bootstrap_servers})

    with KafkaCluster(size=3) as cluster:               # replication factor 3, min.insync.replicas=2
        cluster.kill(2)                                  # SIGKILL: no shutdown code runs
        cluster.restart(2)                               # same port, same data

Each node is one JVM running ``kafka.Kafka`` in combined mode (``process.roles=broker,controller``)
with a static controller quorum over every node, on free loopback ports, its data in a temporary
directory removed on exit.  ``start`` formats the storage (``kafka.tools.StorageTool format``), as
``kafka-storage.sh format`` does, and returns once every node is in the cluster's metadata and the
controller has elected a leader.  Its log is ``<node dir>/server.log``.

The settings are Kafka's defaults except what one machine needs: the internal topics' replication
factor and ISR fit the cluster's size, and ``overrides`` (e.g. ``log.flush.interval.messages=1``
to fsync every write as Onceflow does, or ``group.initial.rebalance.delay.ms=0`` in tests) go on
top.  ``features`` sets feature levels at format time (``{"transaction.version": 1}``: a cluster
without transactions v2), as ``kafka-storage.sh format --feature`` does.
"""

from __future__ import annotations

import base64
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..broker.process import free_port
from .tools import java_command

READY_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60


def _random_id() -> str:
    """A cluster id as Kafka's ``Uuid.randomUuid`` makes one: URL-safe base64, never starting with
    ``-`` (a command line would take it for an option: one format in 64 failed so)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass
class _Node:
    node_id: int
    port: int
    controller_port: int
    directory: Path
    proc: subprocess.Popen[bytes] | None = field(default=None)

    @property
    def properties(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log(self) -> Path:
        return self.directory / "server.log"


class KafkaCluster:
    def __init__(self, size: int = 1, *, overrides: dict[str, Any] | None = None, heap: str = "1g",
                 data_dir: str | Path | None = None, features: dict[str, int] | None = None) -> None:
        if size not in (1, 3):
            raise ValueError("size must be 1 or 3")
        self.size = size
        self.heap = heap
        self.overrides = {k: str(v) for k, v in (overrides or {}).items()}
        #: Feature levels set at format time (``kafka-storage.sh format --feature NAME=LEVEL``), e.g.
        #: ``{"transaction.version": 1}`` for a cluster without transactions v2 (KIP-890 part 2).
        self.features = dict(features or {})
        self._own_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="kafka-ref-")) if data_dir is None else Path(data_dir)
        self.cluster_id = _random_id()
        self.nodes = {i: _Node(i, free_port(), free_port(), self.data_dir / f"node-{i}") for i in range(1, size + 1)}

    # -- what clients use -------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes.values())

    def node_bootstrap(self, node_id: int) -> str:
        return f"127.0.0.1:{self.nodes[node_id].port}"

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> KafkaCluster:
        for node in self.nodes.values():
            node.directory.mkdir(parents=True, exist_ok=True)
            node.properties.write_text(self._properties(node))
        feature_args = [arg for name, level in self.features.items() for arg in ("--feature", f"{name}={level}")]
        formats = [subprocess.Popen(java_command("kafka.tools.StorageTool", ["format", "-t", self.cluster_id, "-c", str(n.properties),
                                                                         *feature_args]),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for n in self.nodes.values()]
        for fmt in formats:
            out, _ = fmt.communicate(timeout=READY_TIMEOUT_S)
            if fmt.returncode != 0:
                raise RuntimeError(f"kafka-storage format failed:\n{out.decode(errors='replace')}")
        for node in self.nodes.values():
            self._launch(node)
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Until every running node is in the metadata every running node answers."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        running = {i for i, n in self.nodes.items() if n.proc is not None}
        # One quiet client per node (log_level 0: refused connections while it boots are expected).
        admins = {i: AdminClient({"bootstrap.servers": self.node_bootstrap(i), "socket.timeout.ms": 2000, "log_level": 0})
                  for i in running}
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            for node_id, node in self.nodes.items():
                if node.proc is not None and node.proc.poll() is not None:
                    raise RuntimeError(f"Kafka node {node_id} exited with {node.proc.returncode}:\n{self._tail(node)}")
            try:
                seen = {frozenset(admin.list_topics(timeout=2).brokers) for admin in admins.values()}
                if seen == {frozenset(running)}:
                    return
                last = seen
            except KafkaException as exc:  # not up yet
                last = exc
            time.sleep(0.2)
        raise RuntimeError(f"Kafka nodes {sorted(running)} not ready within {timeout}s (last: {last})\n"
                           + "\n".join(self._tail(n) for n in self.nodes.values()))

    def kill(self, node_id: int) -> None:
        """SIGKILL one node: no shutdown code runs, unflushed writes are lost as in a power cut
        of the process (the page cache survives)."""
        node = self.nodes[node_id]
        assert node.proc is not None, f"node {node_id} is not running"
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait(STOP_TIMEOUT_S)
        node.proc = None

    def restart(self, node_id: int) -> None:
        """Start a stopped or killed node again on its port and data, and wait until the cluster
        sees it."""
        node = self.nodes[node_id]
        assert node.proc is None, f"node {node_id} is running"
        self._launch(node)
        self.wait_ready()

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.proc is not None:
                node.proc.terminate()
        for node in self.nodes.values():
            if node.proc is not None:
                try:
                    node.proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait(STOP_TIMEOUT_S)
                node.proc = None
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- internals --------------------------------------------------------------------------------

    def _launch(self, node: _Node) -> None:
        cmd = java_command("kafka.Kafka", [str(node.properties)], heap=self.heap,
                           jvm_options=[f"-Xms{self.heap}", f"-Dkafka.logs.dir={node.directory}"],
                           logging="log4j2-broker.properties")
        node.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(node.directory / "stderr.log", "ab"))

    def _properties(self, node: _Node) -> str:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes.values())
        replicas = str(self.size)
        isr = "2" if self.size >= 3 else "1"
        # The internal topics' replication must fit the cluster; the rest is set only for three
        # nodes, so that a one-node broker reports Kafka's defaults as defaults.
        cluster = {
            "default.replication.factor": replicas,
            "min.insync.replicas": isr,
        } if self.size > 1 else {}
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.directory / "data"),
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": isr,
            **cluster,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": isr,
            **self.overrides,
        }
        return "".join(f"{k}={v}\n" for k, v in settings.items())

    @staticmethod
    def _tail(node: _Node, lines: int = 20) -> str:
        text = "".join(p.read_text(errors="replace") for p in (node.directory / "stderr.log", node.log) if p.exists())
        return f"--- node {node.node_id} ---\n" + "\n".join(text.splitlines()[-lines:])
