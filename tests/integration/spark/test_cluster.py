"""The exactly-once sink on a Spark standalone cluster: a master and two workers started from the
pip-installed PySpark (``spark-class``), on loopback, and a driver process in client mode.  While a
micro-batch is being written, the worker whose task is inside its Kafka transaction is killed with
SIGKILL, with everything it started (its executor, their Python workers), as a machine's crash would
kill it; a replacement worker joins.  The same query, never restarted, must finish, and the output is
checked record by record: every committed input once, nothing of an aborted one, nothing left open.
About two minutes on 2 shared cores: marked ``platforms``, run by ``make spark-platforms`` (and CI), not ``make test``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import pytest

from onceflow.broker.process import free_port
from onceflow.spark import worker_python
from onceflow.spark.faults import SPARK_FIRST_ATTEMPT
from tests.integration.spark.support import (
    TIMEOUT,
    assert_exactly_once,
    checkpoint,
    inputs,
    new_topic,
    open_transaction_in,
    read_topic,
    uncommitted,
)
from tests.support import SCRATCH
from tests.support.broker import BrokerProcess
from tests.support.waiting import wait_for

DRIVER = str(Path(__file__).with_name("driver.py"))
SPARK_CLASS = str(Path(sys.executable).with_name("spark-class"))
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
#: What the fault point logs in the executor's stderr when a task pauses inside its transaction.
FAULT_LINE = f"at {SPARK_FIRST_ATTEMPT}"
#: Each task's first attempt pauses this long after writing its first row (long enough to see it and kill).
PAUSE_S = 3
#: Starting a JVM, or a micro-batch, on 2 cores shared with other work.
START_TIMEOUT_S = 120


def process_table() -> dict[int, tuple[int, int, str]]:
    """Every process: pid -> (parent pid, process group, state), from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        state, ppid, pgid = stat[stat.rindex(")") + 2:].split()[:3]
        table[int(entry)] = (int(ppid), int(pgid), state)
    return table


def kill_tree(pid: int) -> dict[int, str]:
    """SIGKILL a process started in its own session and every process below it; returns their pids and
    command lines.  Its group is stopped first, so nothing new starts, then every group in the tree is
    killed: PySpark's daemons put themselves in groups of their own."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGSTOP)
    table = process_table()
    children = defaultdict(list)
    for child, (parent, _, _) in table.items():
        children[parent].append(child)
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p in table and p not in tree:
            tree.add(p)
            todo += children[p]
    commands = {}
    for p in tree:
        with contextlib.suppress(OSError):
            commands[p] = Path("/proc", str(p), "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    for group in {pid} | {table[p][1] for p in tree} - {os.getpgrp()}:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    return {p: commands.get(p, "") for p in tree}


def all_dead(pids: Iterable[int]) -> bool:
    table = process_table()
    return all(p not in table or table[p][2] == "Z" for p in pids)


class Node:
    """A Spark standalone master or worker: ``spark-class`` in its own session, logging to a file."""

    def __init__(self, name: str, main_class: str, *args: str, root: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log = root / f"{name}.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([SPARK_CLASS, main_class, *args], stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def tail(self) -> str:
        return f"{self.name}'s log ends:\n" + "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])

    def kill(self) -> list[str]:
        """The whole tree, then reaped (bounded waits); the command lines of what was killed."""
        tree = kill_tree(self.proc.pid)
        self.proc.wait(TIMEOUT)
        wait_for(lambda: all_dead(tree), timeout=TIMEOUT, interval=0.1, what=f"{self.name}'s processes to die")
        return list(tree.values())


class Worker(Node):
    def __init__(self, name: str, master_url: str, *, root: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.work_dir = root / f"{name}-work"
        self.work_dir.mkdir()
        super().__init__(name, WORKER, master_url, "--host", "127.0.0.1", "--port", str(self.port), "--cores", "1",
                         "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(self.work_dir),
                         root=root, env=env)

    def paused_tasks(self) -> int:
        """How many tasks on this worker's executors have paused inside their transaction so far."""
        count = 0
        for stderr in self.work_dir.glob("*/*/stderr"):
            with contextlib.suppress(OSError):
                count += stderr.read_text(errors="replace").count(FAULT_LINE)
        return count


def alive_workers(web_url: str) -> set[int]:
    """The RPC ports of the workers the master has ALIVE (none while it does not answer)."""
    try:
        with urllib.request.urlopen(f"{web_url}/json/", timeout=5) as response:
            state = json.load(response)
    except (OSError, urllib.error.URLError, ValueError):
        return set()
    return {w["port"] for w in state.get("workers", []) if w.get("state") == "ALIVE"}


@pytest.mark.platforms
@pytest.mark.timeout(900)
def test_a_worker_killed_under_a_running_query_on_a_standalone_cluster(broker_process: BrokerProcess) -> None:
    import pyspark

    bs = broker_process.bootstrap_servers
    src, dst = new_topic(bs, 2), new_topic(bs, 2)
    committed = inputs(bs, src, 1200)
    root = Path(tempfile.mkdtemp(prefix="onceflow-cluster-", dir=SCRATCH))
    fault_dir = root / "faults"
    fault_dir.mkdir()
    (fault_dir / SPARK_FIRST_ATTEMPT).write_text(f"sleep:{PAUSE_S}")
    # What a node of a cluster has: Spark, and onceflow importable by the Python it runs (here this
    # checkout's sources); ONCEFLOW_FAULT_DIR reaches the executors' Python workers through their environment.
    env = {**os.environ, "SPARK_HOME": os.path.dirname(pyspark.__file__), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYTHONPATH": os.pathsep.join(sys.path), "ONCEFLOW_FAULT_DIR": str(fault_dir)}
    master_port, master_web = free_port(), free_port()
    master_url, web_url = f"spark://127.0.0.1:{master_port}", f"http://127.0.0.1:{master_web}"
    nodes: list[Node] = []
    driver: subprocess.Popen[bytes] | None = None
    out, err = root / "driver.out", root / "driver.err"

    def logs() -> str:
        driver_log = "\n".join(err.read_text(errors="replace").splitlines()[-20:]) if err.exists() else ""
        return "\n".join([*(n.tail() for n in nodes), f"the driver's stderr ends:\n{driver_log}"])

    def wait_workers(ports: set[int]) -> None:
        try:
            wait_for(lambda: alive_workers(web_url) == ports, timeout=START_TIMEOUT_S, interval=0.2,
                     what=f"the master to have workers {sorted(ports)} alive")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; master says {alive_workers(web_url)}\n{logs()}") from None

    def driver_lines() -> list[str]:
        return out.read_text().splitlines() if out.exists() else []

    def batches() -> list[int]:
        return [int(line.split()[1]) for line in driver_lines() if line.startswith("batch ")]

    try:
        nodes.append(Node("master", MASTER, "--host", "127.0.0.1", "--port", str(master_port),
                          "--webui-port", str(master_web), root=root, env=env))
        a = Worker("worker-a", master_url, root=root, env=env)
        b = Worker("worker-b", master_url, root=root, env=env)
        nodes += [a, b]
        wait_workers({a.port, b.port})

        settings = {"spark.executor.cores": "1", "spark.executor.memory": "512m", "spark.task.maxFailures": "4",
                    "spark.pyspark.python": worker_python.path(), "spark.driver.host": "127.0.0.1",
                    "spark.driver.bindAddress": "127.0.0.1"}
        with open(out, "w") as stdout, open(err, "w") as stderr:
            driver = subprocess.Popen(
                [sys.executable, DRIVER, bs, src, dst, checkpoint(), "--available-now", "--max-offsets", "200",
                 "--master", master_url, *(f"--conf={k}={v}" for k, v in settings.items())],
                stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=env, start_new_session=True)

        def running(at_least_batches: int) -> bool:
            assert driver is not None and driver.poll() is None, f"the driver exited ({driver_lines()})\n{logs()}"
            return len(batches()) >= at_least_batches

        # A micro-batch committed first: the kill lands in the middle of the query, not at its start.
        wait_for(lambda: running(1), timeout=2 * START_TIMEOUT_S, interval=0.2, what=lambda: f"a micro-batch\n{logs()}")
        seen = {w: w.paused_tasks() for w in (a, b)}

        def paused_worker() -> Worker | None:
            running(0)
            for w in (a, b):
                if w.paused_tasks() > seen[w] and open_transaction_in(bs, dst, [0, 1]):
                    return w
            return None

        # A task just paused inside its transaction on this worker: its row is in the broker, not committed.
        victim = wait_for(paused_worker, timeout=START_TIMEOUT_S, interval=0.05,
                          what=lambda: f"a task to pause inside its transaction\n{logs()}")
        killed_at_batch = max(batches())
        killed = victim.kill()
        assert any("CoarseGrainedExecutorBackend" in c for c in killed), f"its executor was killed too: {killed}"
        assert any("pyspark.daemon pyspark.worker" in c for c in killed), f"its Python workers too: {killed}"
        survivor = b if victim is a else a
        replacement = Worker("worker-c", master_url, root=root, env=env)
        nodes.append(replacement)
        wait_workers({survivor.port, replacement.port})

        try:
            wait_for(lambda: driver.poll() is not None, timeout=3 * START_TIMEOUT_S, interval=0.2,
                     what="the query to finish")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the driver printed {driver_lines()}\n{logs()}") from None
        assert driver.returncode == 0 and "done" in driver_lines(), f"{driver_lines()}\n{logs()}"
        assert max(batches()) > killed_at_batch, "the same query went on after the kill"
    finally:
        if driver is not None and driver.poll() is None:
            tree = kill_tree(driver.pid)
            driver.wait(TIMEOUT)
            wait_for(lambda: all_dead(tree), timeout=TIMEOUT, interval=0.1, what="the driver's processes to die")
        for node in reversed(nodes):
            if node.proc.poll() is None:
                node.kill()

    output = read_topic(bs, dst, [0, 1])
    assert_exactly_once(output, committed)
    assert not open_transaction_in(bs, dst, [0, 1]), "nothing left open"
    assert len(uncommitted(bs, dst, [0, 1])) > len(output), "the killed task's row is there, aborted"
