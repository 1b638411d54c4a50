"""``onceflow chaos``: one campaign = a broker, the workload, scheduled faults, then the checker.

Theory of operation: the campaign starts ``onceflow broker`` in a work directory with small
segments everywhere (the internal topics included) and a quick cleaner, so that rolls and
compactions happen many times in a short run; puts the TCP proxy in front of it when
connection resets are asked for (the broker then advertises the proxy); starts the workload
(``workload.Workload``) and the nemesis (``nemesis.Nemesis``) with its seeded schedule; after
``seconds`` and the last scheduled fault it heals the broker, lets the workload finish (every transaction ended, final reads
recorded) and checks the history (``checker.check``).  The history (``history.jsonl``), the
report (``report.json``) and the broker's log stay in the work directory.

With ``--broker kafka`` the same campaign runs against one Apache Kafka node from the reference
Maven project (``onceflow.reference``), with kills and pauses (the other faults need
Onceflow's crash points, its advertised proxy or its tmpfs): the reference for what the
workload and the checker see from a correct broker.  With ``--bootstrap-servers`` the workload
and the checker run against any Kafka-protocol broker, without faults (the campaign cannot
kill a broker it did not start).  That broker is first checked to answer (``Session.reach``), and the
topics the workload created there, with the copiers' group, are deleted when the campaign ends,
whichever way (``Session.made``; ``--keep`` keeps them).

What the user sees: the campaign's lines (the broker, each fault) on stderr, and, when stderr is
a terminal, a progress line (seconds, faults, committed transactions).  Ctrl-C stops the faults
and the clients (each client within a few seconds), then the broker, then the session's cleanup
runs: the one line ``interrupted``, exit status 130.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..broker.process import FAST_GROUPS, BrokerProcess
from ..clientconfig import NO_SETTINGS, ClientSettings
from ..longcommand import Session, UsageError
from ..progressline import REDRAW_S
from .checker import Report, check
from .history import Recorder
from .nemesis import Nemesis, Schedule
from .proxy import TcpProxy
from .workload import Plan, Workload

#: The faults an Apache Kafka node can take here.
KAFKA_FAULTS = ("kill", "pause")
#: Kafka's settings for the campaign: the same quick abort of timed-out transactions.
KAFKA_SETTINGS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
                  "group.initial.rebalance.delay.ms": "0"}

#: What the campaign's broker runs with: every segment small and the cleaner quick, so that a
#: two-minute run rolls and compacts (``__consumer_offsets`` and ``__transaction_state``
#: included) many times; killed transactions are aborted soon after their timeout.
BROKER_SETTINGS = {
    **FAST_GROUPS,
    "log.segment.bytes": "16384",
    "offsets.topic.segment.bytes": "16384",
    "transaction.state.log.segment.bytes": "16384",
    "log.cleaner.backoff.ms": "500",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}


@dataclass
class Options:
    seconds: float = 120.0
    faults: dict[str, int] = field(default_factory=lambda: {"kill": 10})
    seed: int = 1
    workdir: Path | None = None
    bootstrap_servers: str | None = None
    #: ``onceflow`` or ``kafka``: which broker the campaign starts (without ``bootstrap_servers``).
    broker: str = "onceflow"
    #: Put the data directory on a tmpfs of this many MiB (root only); needed by disk-full.
    disk_mib: int | None = None
    pause_s: float = 12.0
    plan: Plan = field(default_factory=Plan)
    #: The workload's client settings (``-X``, ``--command-config``), e.g. a secured cluster's.
    client: ClientSettings = NO_SETTINGS


@dataclass
class Outcome:
    report: Report
    faults: dict[str, int]
    crash_points_reached: int
    seconds: float
    workdir: Path
    errors: list[str]

    @property
    def passed(self) -> bool:
        return self.report.valid and not self.errors

    def summary(self, kept: bool = True) -> str:
        """The report in a few lines; ``kept``: the work directory stays (say where)."""
        lines = [f"onceflow chaos: {self.seconds:.0f} s, faults {self.faults or 'none'}"
                 + (f" ({self.crash_points_reached} crash points reached)" if self.crash_points_reached else ""),
                 self.report.summary()]
        lines += [f"workload error: {e}" for e in self.errors]
        if kept:
            lines.append(f"history, report and broker log in {self.workdir}")
        lines.append("PASS: no anomaly" if self.passed else "FAIL")
        return "\n".join(lines)


#: How long the clients may take to stop after Ctrl-C (each is between two calls, or in one).
INTERRUPTED_STOP_S = 5.0


def run(options: Options, session: Session) -> Outcome:
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="onceflow-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    rng = random.Random(options.seed)
    progress = session.say
    with contextlib.ExitStack() as stack:
        recorder = stack.enter_context(Recorder(workdir / "history.jsonl"))
        broker = proxy = nemesis = None
        bootstrap = options.bootstrap_servers
        if bootstrap is None and options.broker == "kafka":
            unsupported = sorted(k for k, n in options.faults.items() if n and k not in KAFKA_FAULTS)
            if unsupported:
                raise UsageError(f"faults {', '.join(unsupported)} need Onceflow; against Kafka: {', '.join(KAFKA_FAULTS)}")
            node = stack.enter_context(_kafka_node())
            bootstrap = node.bootstrap_servers
            nemesis = Nemesis(node, recorder, rng, pause_s=options.pause_s)
            progress(f"Apache Kafka on {bootstrap} (pid {node.pid}), data in {node.data_dir}")
        elif bootstrap is None:
            data_root = stack.enter_context(_small_disk(workdir / "disk", options.disk_mib)) if options.disk_mib else workdir
            broker = BrokerProcess(data_root / "data", BROKER_SETTINGS, log_path=workdir / "broker.log", log_level="WARNING")
            if options.faults.get("reset"):
                proxy = stack.enter_context(contextlib.closing(TcpProxy(("127.0.0.1", broker.port)).start()))
                broker.overrides["advertised.listeners"] = f"PLAINTEXT://{proxy.address}"
            broker.start()
            stack.callback(broker.stop, keep=True)
            bootstrap = proxy.address if proxy else broker.bootstrap_servers
            nemesis = Nemesis(broker, recorder, rng, proxy=proxy, pause_s=options.pause_s)
            progress(f"broker {broker.bootstrap_servers} (pid {broker.pid}), data in {broker.data_dir}"
                     + (f", clients through the proxy on {proxy.address}" if proxy else ""))
        elif any(options.faults.values()):
            raise UsageError("faults need a broker the campaign starts itself: leave out --bootstrap-servers")
        else:
            session.reach(bootstrap)
        workload = Workload(bootstrap, options.plan, recorder, options.seed, options.client)
        created = workload.create_topics()
        if options.bootstrap_servers is not None:  # a broker the campaign started goes with its directory
            first = options.plan.topics[0]
            session.made(bootstrap, created, [workload.ctp_group] if options.plan.ctp and first in created else [])
        stack.callback(workload.stop, INTERRUPTED_STOP_S)  # after finish(), nothing left to stop
        workload.start()
        schedule = Schedule.spread(options.faults, options.seconds, rng)
        progress(f"workload running for {options.seconds:.0f} s with {len(schedule.items)} faults (seed {options.seed})")
        stop = threading.Event()
        stack.callback(stop.set)

        running = time.monotonic()

        def show() -> None:
            faults = f", {sum(nemesis.done.values())} of {len(schedule.items)} faults" if nemesis is not None else ""
            session.status(f"chaos: {time.monotonic() - running:.0f} of {options.seconds:.0f} s{faults}, "
                           f"{workload.committed:,} transactions committed")

        if nemesis is not None:
            faulting = threading.Thread(target=nemesis.run, args=(schedule, stop, lambda k: progress(f"fault: {k}")),
                                        name="chaos-nemesis", daemon=True)
            faulting.start()
            # Every scheduled fault is injected, even when pauses and restarts run past
            # ``seconds``: the clients keep working until the last one (bounded: each fault
            # takes at most a pause or a crash wait plus a restart).
            until = time.monotonic() + options.seconds + len(schedule.items) * (options.pause_s + 150)
            while faulting.is_alive() and time.monotonic() < until:
                faulting.join(REDRAW_S)
                show()
            stop.set()
            faulting.join(options.pause_s + 150)
            if faulting.is_alive():
                workload.errors.append("the faults did not finish in time")
            if nemesis.failure is not None:
                workload.errors.append(f"the faults stopped early: {nemesis.failure}")
            nemesis.heal()
        else:
            while (left := running + options.seconds - time.monotonic()) > 0 and not stop.wait(min(REDRAW_S, left)):
                show()
        progress("faults over: waiting for every transaction to end, then the final reads")
        session.status("chaos: the final reads")
        workload.finish()
        report = check(recorder.events())
        outcome = Outcome(report, dict(nemesis.done) if nemesis else {}, nemesis.crash_points_reached if nemesis else 0,
                          time.monotonic() - started, workdir, workload.errors)
        (workdir / "report.json").write_text(json.dumps({**report.to_json(), "faults": outcome.faults,
                                                         "errors": outcome.errors, "seconds": outcome.seconds}, indent=1))
    return outcome


class KafkaNode:
    """One Apache Kafka node in the shape the nemesis drives (``nemesis.Broker``)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.node = cluster.nodes[1]
        self.env: dict[str, str] = {}
        self.data_dir: Path = cluster.data_dir

    @property
    def bootstrap_servers(self) -> str:
        return str(self.cluster.bootstrap_servers)

    @property
    def pid(self) -> int | None:
        return self.node.proc.pid if self.node.proc is not None else None

    def alive(self) -> bool:
        return self.node.proc is not None and self.node.proc.poll() is None

    def start(self) -> None:
        self.cluster.restart(1)

    def kill(self) -> None:
        if self.node.proc is not None:
            self.node.proc.send_signal(signal.SIGCONT)
            self.cluster.kill(1)

    def pause(self) -> None:
        if self.alive():
            self.node.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.alive():
            self.node.proc.send_signal(signal.SIGCONT)


@contextlib.contextmanager
def _kafka_node() -> Iterator[KafkaNode]:
    from ..reference import KafkaCluster

    with KafkaCluster(overrides=KAFKA_SETTINGS) as cluster:
        node = KafkaNode(cluster)
        try:
            yield node
        finally:
            node.resume()


@contextlib.contextmanager
def _small_disk(mount_point: Path, mib: int) -> Iterator[Path]:
    """A tmpfs of ``mib`` MiB at ``mount_point`` (mount needs root), unmounted afterwards."""
    mount_point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"--disk-mib: cannot mount a tmpfs at {mount_point} (root is needed): {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
