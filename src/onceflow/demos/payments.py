"""``onceflow demo``: the payments pipeline on Spark, exactly-once under faults, then verified.

Theory of operation: this process is the conductor.  It starts the broker
(``onceflow broker`` as a child process, unless ``--bootstrap-servers``
names a cluster), creates the topics, generates the payments, and starts the
Spark driver (``python -m onceflow.pipelines.payments driver``) as another
child process, which reports each micro-batch as a JSON line.  While the
pipeline runs it injects the faults (``--faults``, the default):

1. one write task fails on its first attempt after writing part of its
   output (armed through ``onceflow.spark.faults``; Spark's ``local[2,4]`` retries
   it);
2. the Spark driver is killed with SIGKILL while a task is inside its
   transaction, and started again from its checkpoints;
3. the broker is killed with SIGKILL and started again on the same data.
   When this process started the broker it does so itself.  On a cluster
   (``--bootstrap-servers``) it cannot: ``--broker-fault-command`` is a shell
   command that kills one broker with SIGKILL and starts it again (``docker
   kill -s KILL kafka-2 && docker start kafka-2``, say).  It runs while the
   pipeline keeps running; the demo goes on showing progress, counts the
   micro-batches committed meanwhile, and fails if the command fails.
   Without it no broker is killed on a cluster.  A secured cluster's client
   settings (``-X``, ``--command-config``) go to every client the demo
   makes and, as ``kafka.*`` options, to both queries.

It waits until both queries have caught up (their ``commitOffsetsToGroup``
groups are at their sources' ends), stops the driver, verifies the topics
(``pipelines.payments.verify``) and prints a summary.  Progress is shown
with ``rich``.  Exit status: 0 when every check passes, 1 otherwise.

On a cluster (``--bootstrap-servers``) it first checks that the cluster answers (within
``--timeout``), and deletes the three topics and the queries' two groups when it ends, whichever
way (``--keep`` keeps them, with the checkpoints and the logs).  A failure before the pipeline
runs is one line on stderr; Ctrl-C stops the driver and the broker, then prints ``interrupted``
(``longcommand.Session``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cliargs import non_negative_int, positive_int
from ..clientconfig import NO_SETTINGS, ClientSettings
from ..longcommand import Session, UsageError
from ..longcommand import add_options as add_session_options
from ..pipelines import payments as pipeline
from ..spark.faults import SPARK_FIRST_ATTEMPT as FAULT_POINT
from . import checked_bootstrap

#: How long the pipeline may take before the demo gives up (bounded, not a benchmark).
PIPELINE_TIMEOUT_S = 1800
#: Fraction of the payments processed at which each fault is injected.
FAULT_AT = {"task": 0.15, "driver": 0.35, "broker": 0.6}
#: How long ``--broker-fault-command`` may run.
FAULT_COMMAND_TIMEOUT_S = 600


@dataclass
class _Run:
    """What the conductor saw."""

    batches: dict[str, dict[int, int]] = field(default_factory=lambda: {"ledger": {}, "balances": {}})
    faults: list[str] = field(default_factory=list)
    #: When the driver first reported its queries running, and when both had caught up.
    started_at: float | None = None
    done_at: float | None = None

    @property
    def processed(self) -> int:
        return sum(self.batches["ledger"].values())

    @property
    def micro_batches(self) -> int:
        return len(self.batches["ledger"]) + len(self.batches["balances"])


def _accounts(text: str) -> int:
    """``--accounts``: two or more (a payment moves money between two)."""
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"expected a whole number of 2 or more, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--payments", type=positive_int, default=200_000,
                        help="payments: how many payments to generate (default 200000)")
    parser.add_argument("--accounts", type=_accounts, default=1000, help="payments: over how many accounts (default 1000)")
    parser.add_argument("--faults", action=argparse.BooleanOptionalAction, default=True,
                        help="payments: inject a task failure, a driver kill and a broker kill (default on)")
    add_session_options(parser, "keep what the demo made: payments' data directory, checkpoints and logs, and with "
                                "--bootstrap-servers the topics and consumer groups it created (by default they are "
                                "deleted at the end, after a failure or Ctrl-C too)")
    parser.add_argument("--master", default="local[2,4]",
                        help="payments: the Spark master (default local[2,4]: 2 cores, 4 attempts per task)")
    parser.add_argument("--max-offsets-per-trigger", type=non_negative_int, default=0,
                        help="payments: maxOffsetsPerTrigger for both queries (default 0: all available)")
    parser.add_argument("--broker-fault-command", metavar="COMMAND",
                        help="payments, with --bootstrap-servers: the broker fault, a shell command that kills one broker "
                             "of the cluster with SIGKILL and starts it again (e.g. 'docker kill -s KILL kafka-2 && "
                             "docker start kafka-2'); run, while the pipeline runs on, once 60%% of the payments are "
                             "processed; the demo fails if it exits non-zero (default none: no broker is killed on a "
                             "cluster)")


def run(args: argparse.Namespace) -> int:
    client = getattr(args, "client", NO_SETTINGS)
    return Session("onceflow demo payments", args, client).run(lambda session: _demo(args, session))


def _demo(args: argparse.Namespace, session: Session) -> int:
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)  # log lines are never broken mid-sentence
    if args.broker_fault_command and args.bootstrap_servers is None:
        raise UsageError("--broker-fault-command is for a cluster named by --bootstrap-servers "
                         "(without it the demo kills and restarts its own broker)")
    if args.bootstrap_servers is not None:
        args.bootstrap_servers = checked_bootstrap(args.bootstrap_servers)
        session.reach(args.bootstrap_servers)
    workdir = Path(tempfile.mkdtemp(prefix="onceflow-payments-"))
    try:
        return _run(args, console, workdir, session)
    finally:
        if args.keep:
            console.print(f"kept the checkpoints, the driver's log and the broker's data in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _run(args: argparse.Namespace, console: Any, workdir: Path, session: Session) -> int:
    from ..broker.process import FAST_GROUPS, BrokerProcess, free_port

    with contextlib.ExitStack() as stack:
        broker: BrokerProcess | None = None
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            metrics_port = free_port()
            broker = BrokerProcess(workdir / "broker", {**FAST_GROUPS, "metrics.port": str(metrics_port)},
                                   log_path=workdir / "broker.log", log_level="WARNING")
            broker.start()
            stack.callback(broker.stop, keep=args.keep)
            bootstrap = broker.bootstrap_servers
            console.print(f"[bold]1.[/] started [cyan]onceflow broker[/] on {bootstrap}; watch it live at "
                          f"[cyan]http://127.0.0.1:{metrics_port}/[/] (open transactions, LSO lag, the query's "
                          "micro-batches)")
        else:
            console.print(f"[bold]1.[/] using the Kafka cluster at {bootstrap}")
        client = session.client
        pipeline.create_topics(bootstrap, client=client)
        if broker is None:
            session.made(bootstrap, [pipeline.PAYMENTS, pipeline.LEDGER, pipeline.BALANCES],
                         [pipeline.LEDGER_GROUP, pipeline.BALANCES_GROUP])
        console.print(f"[bold]2.[/] created [cyan]{pipeline.PAYMENTS}[/], [cyan]{pipeline.LEDGER}[/] and the compacted "
                      f"[cyan]{pipeline.BALANCES}[/], {pipeline.PARTITIONS} partitions each")
        fault_dir = workdir / "faults"
        fault_dir.mkdir()
        driver = pipeline.DriverProcess(bootstrap, str(workdir / "checkpoints"), str(workdir / "driver.log"), args.master,
                                        args.max_offsets_per_trigger, fault_dir=str(fault_dir), settings=dict(client.given))
        stack.callback(driver.stop)
        with _progress(console) as progress:
            generating = progress.add_task("generating payments", total=args.payments, batches="", faults="")
            generated = pipeline.generate(bootstrap, args.payments, accounts=args.accounts,
                                          on_progress=lambda n: progress.advance(generating, n), client=client)
            console.print(f"[bold]3.[/] wrote {args.payments:,} payments in {generated.transactions} transactions; "
                          f"{len(generated.aborted):,} of them in aborted transactions")
            driver.start()
            console.print("[bold]4.[/] started the Spark driver: query [cyan]ledger[/] (payments → debit and credit "
                          "entries) and query [cyan]balances[/] (running balance per account)")
            run = _conduct(args, console, progress, driver, broker, fault_dir, bootstrap, generated, client)
        if run is None:
            console.print(f"[red]FAILED[/]: the pipeline did not finish; see {workdir / 'driver.log'}")
            return 1
        driver.stop()
        report = pipeline.verify(bootstrap, generated, client)
    _summary(console, args, generated, run, report)
    return 0 if report.ok else 1


@contextlib.contextmanager
def _progress(console: Any) -> Iterator[Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[batches]}"), TextColumn("{task.fields[faults]}"), TimeElapsedColumn(),
                  console=console) as progress:
        yield progress


def _conduct(args: argparse.Namespace, console: Any, progress: Any, driver: pipeline.DriverProcess, broker: Any, fault_dir: Path,
             bootstrap: str, generated: pipeline.Generated, client: ClientSettings = NO_SETTINGS) -> _Run | None:
    run = _Run()
    total = len(generated.committed)
    task = progress.add_task("payments processed", total=total, batches="0 micro-batches", faults="0 faults")
    pending = dict(FAULT_AT) if args.faults else {}
    if broker is None and not args.broker_fault_command:
        pending.pop("broker", None)
    command: _FaultCommand | None = None
    deadline = time.monotonic() + PIPELINE_TIMEOUT_S
    last_check = 0.0
    try:
        while time.monotonic() < deadline:
            if not _drain(driver, run, console):
                return None
            if driver.proc is not None and driver.proc.poll() is not None:  # died on its own (kills restart it at once)
                tail = Path(driver.log_path).read_text(errors="replace").strip().splitlines()[-3:]
                console.print(f"[red]FAILED[/]: the Spark driver exited with status {driver.proc.returncode}; "
                              f"its log ({driver.log_path}) ends:\n" + "\n".join(tail))
                return None
            progress.update(task, completed=min(run.processed, total), batches=f"{run.micro_batches} micro-batches",
                            faults=f"{len(run.faults)} faults")
            fraction = run.processed / max(total, 1)
            for name in [n for n, at in pending.items() if fraction >= at]:
                del pending[name]
                if name == "broker" and broker is None:
                    command = _FaultCommand.start(args.broker_fault_command, run, console)
                else:
                    _inject(name, console, driver, broker, fault_dir, run)
            if command is not None and command.proc.poll() is not None:
                if not command.finished(run, console):
                    return None
                command = None
            elif command is not None and time.monotonic() - command.started > FAULT_COMMAND_TIMEOUT_S:
                console.print(f"[red]FAILED[/]: the broker fault command did not finish within "
                              f"{FAULT_COMMAND_TIMEOUT_S} s")
                return None
            if run.processed >= total and not pending and command is None and time.monotonic() - last_check > 1:
                last_check = time.monotonic()
                if pipeline.caught_up(bootstrap, generated, client):
                    run.done_at = time.monotonic()
                    return run
            time.sleep(0.1)
        return None
    finally:
        if command is not None:
            command.kill()


@dataclass
class _FaultCommand:
    """``--broker-fault-command`` running in its own process group, while the pipeline runs on."""

    command: str
    proc: subprocess.Popen[bytes]
    started: float
    #: Micro-batches the driver had reported when it started.
    batches_before: int

    @classmethod
    def start(cls, command: str, run: _Run, console: Any) -> _FaultCommand:
        console.print(f"[yellow]fault:[/] running the broker fault command (kill a broker with SIGKILL, start it "
                      f"again): {command}")
        proc = subprocess.Popen(command, shell=True, stdin=subprocess.DEVNULL, start_new_session=True)
        return cls(command, proc, time.monotonic(), run.micro_batches)

    def finished(self, run: _Run, console: Any) -> bool:
        seconds = time.monotonic() - self.started
        if self.proc.returncode != 0:
            console.print(f"[red]FAILED[/]: the broker fault command exited with {self.proc.returncode}")
            return False
        batches = run.micro_batches - self.batches_before
        run.faults.append(f"the broker fault command (kill a Kafka broker with SIGKILL, start it again) exited 0 "
                          f"after {seconds:.1f} s; the queries committed {batches} micro-batches meanwhile")
        console.print(f"[yellow]fault:[/] the broker fault command exited 0 after {seconds:.1f} s; the queries "
                      f"committed {batches} micro-batches while it ran")
        return True

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def _drain(driver: pipeline.DriverProcess, run: _Run, console: Any) -> bool:
    while True:
        try:
            record = driver.lines.get_nowait()
        except queue.Empty:
            return True
        if record["event"] == "started":
            if run.started_at is None:
                run.started_at = time.monotonic()
        elif record["event"] == "batch":
            run.batches[record["query"]][record["batch"]] = record["rows"]
        elif record["event"] == "failed":
            console.print(f"[red]query {record['query']} failed:[/] {record['error'][:500]}")
            return False


def _inject(name: str, console: Any, driver: pipeline.DriverProcess, broker: Any, fault_dir: Path, run: _Run) -> None:
    armed = fault_dir / FAULT_POINT
    if name == "task":
        armed.write_text("raise:once")
        if _wait(lambda: not armed.exists(), 120):
            run.faults.append("a write task failed after writing part of its output; Spark retried it")
            console.print("[yellow]fault:[/] a write task failed on its first attempt after writing part of its "
                          "output; Spark retried it")
    elif name == "driver":
        armed.write_text("sleep:3:once")  # a task pauses inside its transaction: the kill lands mid-batch
        if _wait(lambda: not armed.exists(), 120):
            time.sleep(0.5)
            driver.kill()
            run.faults.append("the Spark driver was killed with SIGKILL mid-micro-batch and restarted from its checkpoints")
            console.print("[yellow]fault:[/] killed the Spark driver with SIGKILL in the middle of a micro-batch; "
                          "restarting it from its checkpoints")
            driver.start()
    elif name == "broker":
        broker.kill()
        broker.start()
        run.faults.append("the broker was killed with SIGKILL and restarted")
        console.print("[yellow]fault:[/] killed the broker with SIGKILL and restarted it on the same data")
    armed.unlink(missing_ok=True)


def _wait(condition: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def _summary(console: Any, args: argparse.Namespace, generated: pipeline.Generated, run: _Run,
             report: pipeline.Report) -> None:
    from rich.table import Table

    seconds = (run.done_at or 0) - (run.started_at or 0)
    table = Table(title="payments pipeline", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("payments committed / in aborted transactions", f"{report.committed:,} / {report.aborted:,}")
    table.add_row("ledger entries (a debit and a credit per payment)", f"{report.ledger_entries:,}")
    table.add_row("accounts with a balance", f"{report.accounts:,}")
    table.add_row("micro-batches (ledger + balances)", f"{len(run.batches['ledger'])} + {len(run.batches['balances'])}")
    table.add_row("faults injected", str(len(run.faults)))
    table.add_row("throughput (queries started to caught up)",
                  f"{report.committed / seconds:,.0f} payments/s over {seconds:.1f} s" if seconds > 0 else "-")
    table.add_row("duplicated ledger entries", str(report.duplicates))
    table.add_row("missing ledger entries", str(report.missing))
    table.add_row("entries of aborted payments", str(report.aborted_seen))
    table.add_row("accounts with a wrong balance", str(report.wrong_balances))
    table.add_row("sum of all balances", str(report.balance_sum))
    console.print(table)
    for fault in run.faults:
        console.print(f"  fault: {fault}")
    if report.ok:
        console.print(f"[green]OK[/]: every committed payment has exactly one debit and one credit, aborted payments "
                      f"have none, and all {report.accounts:,} balances are right and sum to zero")
    else:
        for problem in report.problems():
            console.print(f"[red]FAILED[/]: {problem}")


__all__ = ["add_arguments", "run"]
