"""Kafka's exactly-once system test (``tests/kafkatest/tests/core/transactions_test.py``), driven
from Python against any broker that can be killed and started again.

What Kafka's test does, and so what this does:

1. ``VerifiableProducer`` (``kafka-verifiable-producer``, idempotent, acks=all) seeds an input
   topic with ``records`` numbered values.
2. One ``TransactionalMessageCopier`` per input partition copies that partition to the same
   partition of an output topic, one transaction per poll: the records, then the consumed
   offsets (``sendOffsetsToTransaction``), then commit, or, one time in three, abort
   (``--enable-random-aborts``) and rewind to the last committed offset.
3. While they copy, the broker is killed with SIGKILL and started again (``bounces`` times, each
   at an even share of the way through the copy); a copier that dies because the broker
   vanished is started again with the same ``--transactional-id``, as Kafka's test restarts
   its copiers.  A copier is done when it says ``ShutdownComplete`` with nothing remaining.
4. A read_committed consumer reads the output while all this happens; afterwards fresh
   consumers read it again, read_committed and read_uncommitted.

The verdict (``Result.check``): every input partition arrives in its output partition exactly
once and in order, through both read_committed readers (no loss, no duplicate); the output
holds more records read_uncommitted than read_committed (aborted copies exist and stay
invisible to read_committed).

Every wait is bounded (``wait_for``), every Java process is killed in ``close``.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from onceflow.reference.tools import TOOLS, java_command
from tests.support.kafka import consume_all
from tests.support.waiting import wait_for

#: How long one step may take: seeding, a share of the copy, the copy's end.  Generous because
#: the machine may be shared; a healthy run takes a fraction of it.
STEP_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class Plan:
    """The shape of one run."""

    records: int = 6000
    input_partitions: int = 2  # one copier each
    output_partitions: int = 3  # as Kafka's test: more output partitions than copiers
    transaction_size: int = 50
    bounces: int = 3
    #: Also SIGKILL one copier (round robin) at every this many-th bounce, as Kafka's
    #: ``bounce_target="clients"`` does: its successor, same transactional id, fences it and
    #: aborts what it left open.  0: never.
    kill_copier_every: int = 0
    #: Kafka's test: above the request timeout (30 s), so a broker bounce does not time out
    #: the transaction under the producer.
    transaction_timeout_ms: int = 40000


@dataclass
class Result:
    plan: Plan
    acked: list[str]  # values VerifiableProducer saw acknowledged
    input: dict[int, list[str]]  # per input partition, in offset order
    committed: dict[int, list[str]]  # output read_committed after the run
    concurrent: dict[int, list[str]]  # output read_committed while the copy and the bounces ran
    uncommitted_count: int  # output records read_uncommitted (aborted copies included)
    bounces: int
    copier_starts: int  # copier processes started (copiers + restarts)
    copier_kills: int  # of those restarts, after a SIGKILL of the copier by the harness
    seconds: float  # copy and bounces, from the copiers' start to the last one done
    bounce_seconds: list[float] = field(default_factory=list)  # kill + start of the broker

    @property
    def copied(self) -> int:
        return sum(len(v) for v in self.committed.values())

    def check(self) -> None:
        n = self.plan.records
        assert len(self.acked) == n and len(set(self.acked)) == n, f"seeded {len(self.acked)} of {n}"
        assert sorted(v for vs in self.input.values() for v in vs) == sorted(self.acked), "input differs from what was acked"
        for p in range(self.plan.output_partitions):
            want = self.input.get(p, [])
            for name, got in (("read_committed", self.committed), ("concurrent read_committed", self.concurrent)):
                out = got.get(p, [])
                missing = set(want) - set(out)
                dups = len(out) - len(set(out))
                assert not missing and dups == 0, (f"{name} output partition {p}: {len(missing)} lost, {dups} duplicated "
                                                   f"(input {len(want)}, output {len(out)})")
                assert out == want, f"{name} output partition {p} is not the input partition in order"
        assert self.bounces == self.plan.bounces, f"{self.bounces} bounces of {self.plan.bounces}"
        assert self.copier_starts >= self.plan.input_partitions + self.copier_kills, "a killed copier was not started again"
        assert self.uncommitted_count > self.copied, (
            f"read_uncommitted saw {self.uncommitted_count} records, read_committed {self.copied}: no aborted copy "
            "was written, so nothing showed that aborted data stays out of read_committed")

    def summary(self) -> str:
        bounce = f", bounce (kill+ready) {min(self.bounce_seconds):.1f}-{max(self.bounce_seconds):.1f}s" if self.bounce_seconds else ""
        return (f"{self.copied} records copied exactly once through {self.bounces} broker bounces by "
                f"{self.plan.input_partitions} copiers ({self.copier_starts} copier starts, {self.copier_kills} after a "
                "copier SIGKILL), "
                f"{self.uncommitted_count - self.copied} aborted copies hidden from read_committed, "
                f"copy took {self.seconds:.1f}s{bounce}")


class _JavaProcess:
    """A Kafka tool in a child process, its stdout read line by line as JSON by a thread."""

    def __init__(self, tool: str, args: list[str], log_dir: Path, name: str) -> None:
        self.tool, self.args, self.name = tool, args, name
        # Built once, before anything starts: java_command checks the classpath under the
        # reference build's lock, which another process may hold, and a restart must be quick.
        self.command = java_command(TOOLS[tool], args)
        self.stderr_path = log_dir / f"{name}.stderr"
        self.stdout_path = log_dir / f"{name}.stdout"
        self.proc: subprocess.Popen[str] | None = None
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._err: IO[str] | None = None

    def start(self) -> None:
        self._err = open(self.stderr_path, "a")
        self.proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=self._err, text=True)
        proc = self.proc
        self._reader = threading.Thread(target=self._read, args=(proc,), daemon=True, name=f"read-{self.name}")
        self._reader.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        with open(self.stdout_path, "a") as copy:
            for line in proc.stdout:
                copy.write(line)
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                with self.lock:
                    self.on_event(event)

    def on_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def exited(self) -> int | None:
        """The exit status once the process and its output are finished; None while running."""
        if self.proc is None:
            return None
        code = self.proc.poll()
        if code is None:
            return None
        if self._reader is not None:
            self._reader.join(10)
        return code

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(30)
        if self._reader is not None:
            self._reader.join(10)
        if self._err is not None:
            self._err.close()
            self._err = None


class Copier(_JavaProcess):
    """``TransactionalMessageCopier`` for one input partition, started again when it dies."""

    def __init__(self, bootstrap: str, index: int, plan: Plan, topics: tuple[str, str], group: str, prefix: str,
                 log_dir: Path) -> None:
        self.transactional_id = f"{prefix}-copier-{index}"
        args = ["--broker-list", bootstrap, "--transactional-id", self.transactional_id, "--consumer-group", group,
                "--input-topic", topics[0], "--input-partition", str(index), "--output-topic", topics[1],
                "--transaction-size", str(plan.transaction_size),
                "--transaction-timeout", str(plan.transaction_timeout_ms), "--enable-random-aborts"]
        if index % 2:  # Kafka's matrix runs both: the KIP-447 API with the group's metadata, and without
            args.append("--use-group-metadata")
        super().__init__("kafka-transactional-message-copier", args, log_dir, self.transactional_id)
        self.done = False
        self.running = False  # has printed a ProcessLoop status: initTransactions is behind it
        self.commits = 0  # transactions it committed, seen as totalProcessed growing, over all its runs
        self._processed = 0
        self.size = 0  # records in its input partition, from its first status line
        self.remaining = -1  # latest "remaining": the partition's end minus the committed position
        self.starts = 0
        self.exits: list[int] = []

    def start(self) -> None:
        self.starts += 1
        self.running = False
        self._processed = 0
        super().start()

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("stage") == "ProcessLoop":
            self.running = True
            processed = int(event.get("totalProcessed", 0))
            if processed > self._processed:  # printed right after a commit returned
                self.commits += 1
                self._processed = processed
            self.remaining = int(event.get("remaining", -1))
            if not self.size:
                self.size = self.remaining
        # As Kafka's service: finished only when it shut down with nothing remaining.
        if event.get("stage") == "ShutdownComplete" and int(event.get("remaining", -1)) == 0:
            self.done = True

    @property
    def copied(self) -> int:
        """Records it has committed, from its own reports (no consumer lag)."""
        if self.done:
            return self.size
        return self.size - self.remaining if self.remaining >= 0 else 0

    def kill(self) -> None:
        """SIGKILL, as Kafka's hard client bounce; ``tend`` starts it again."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    def tend(self) -> bool:
        """True once done; starts the copier again if it exited without finishing."""
        if self.done:
            return True
        code = self.exited()
        if code is not None:
            with self.lock:
                if self.done:
                    return True
            self.exits.append(code)
            self.close()
            self.start()
        return False


class ConcurrentReader:
    """A read_committed consumer of the output topic in a thread, from the beginning, for the
    whole run (Kafka's test's ``concurrent_consumer``)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-concurrent",
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "log_level": 0})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.values: dict[int, list[str]] = {}
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"concurrent-{topic}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for msg in self.consumer.consume(500, 0.2):
                if msg.error() is not None:
                    continue  # transport errors while the broker is down; librdkafka reconnects
                self.values.setdefault(msg.partition(), []).append(msg.value().decode())
                self.count += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


def _create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
    for future in futures.values():
        future.result(60)
    wait_for(lambda: all(len(admin.list_topics(t, timeout=10).topics[t].partitions) == n for t, n in topics.items()),
             timeout=60, interval=0.1, what="topics in metadata")


def _seed(bootstrap: str, topic: str, plan: Plan, log_dir: Path) -> list[str]:
    """VerifiableProducer, idempotent, as Kafka's ``seed_messages``; returns the acked values."""
    config = log_dir / "seed-producer.properties"
    # What Kafka's service writes for enable_idempotence=True (VerifiableProducer sets retries=0 otherwise).
    config.write_text("acks=all\nmax.in.flight.requests.per.connection=5\nretries=1000000\nenable.idempotence=true\n")
    seeder = _JavaProcess("kafka-verifiable-producer",
                          ["--bootstrap-server", bootstrap, "--topic", topic, "--max-messages", str(plan.records),
                           "--repeating-keys", "100", "--command-config", str(config)], log_dir, "seed-producer")
    seeder.start()
    try:
        wait_for(lambda: seeder.exited() is not None, timeout=STEP_TIMEOUT_S, interval=0.1, what="the seed producer to finish")
        assert seeder.exited() == 0, f"VerifiableProducer failed:\n{seeder.stderr_path.read_text()[-3000:]}"
        with seeder.lock:
            events = list(seeder.events)
    finally:
        seeder.close()
    errors = [e for e in events if e.get("name") == "producer_send_error"]
    assert not errors, errors[:3]
    tool_data = [e for e in events if e.get("name") == "tool_data"]
    assert tool_data and tool_data[-1]["acked"] == plan.records, tool_data
    return [e["value"] for e in events if e.get("name") == "producer_send_success"]


def _read(bootstrap: str, topic: str, partitions: int, expected: int, isolation: str) -> dict[int, list[str]]:
    got = consume_all(bootstrap, topic, list(range(partitions)), expected, **{"isolation.level": isolation})
    out: dict[int, list[str]] = {}
    for partition, _, value in sorted(got):
        out.setdefault(partition, []).append(value.decode())
    return out


def run(bootstrap: str, kill: Callable[[], None], start: Callable[[], None], plan: Plan, prefix: str,
        log_dir: Path, log: Callable[[str], None] = print) -> Result:
    """One run of the harness; ``kill`` SIGKILLs the broker, ``start`` brings it back on the same
    address and data and returns once it serves."""
    log_dir.mkdir(parents=True, exist_ok=True)
    input_topic, output_topic = f"{prefix}-input", f"{prefix}-output"
    _create_topics(bootstrap, {input_topic: plan.input_partitions, output_topic: plan.output_partitions})
    acked = _seed(bootstrap, input_topic, plan, log_dir)
    log(f"seeded {len(acked)} records into {input_topic}")
    copiers = [Copier(bootstrap, i, plan, (input_topic, output_topic), f"{prefix}-group", prefix, log_dir)
               for i in range(plan.input_partitions)]
    reader: ConcurrentReader | None = None
    bounce_seconds: list[float] = []
    copier_kills = 0
    try:
        began = time.monotonic()
        for copier in copiers:
            copier.start()
        reader = ConcurrentReader(bootstrap, output_topic, plan.output_partitions)

        def tended() -> bool:
            return all([c.tend() for c in copiers])  # noqa: C419 -- a list: every copier tended, no short cut

        def copied() -> int:
            return sum(c.copied for c in copiers)

        r = reader
        last, commits = 0, 0  # records copied and copier commits when the broker last came back
        for bounce in range(plan.bounces):
            # The bounces share out the first three quarters of the copy (the copiers finish at
            # different times, so the tail is short), and each waits for a transaction committed
            # since the last restart: every kill lands in a copy that is moving.
            threshold = last + max(1, (plan.records * 3 // 4 - last) // (plan.bounces - bounce + 1))
            done_before = commits
            wait_for(lambda n=threshold, k=done_before: tended() or (copied() >= n and sum(c.commits for c in copiers) > k),
                     timeout=STEP_TIMEOUT_S, interval=0.05,
                     what=lambda n=threshold, b=bounce + 1: f"{n} records copied before bounce {b} (have {copied()})")
            assert not all(c.done for c in copiers), f"the copy finished before bounce {bounce + 1}: make it longer"
            killed_at = copied()
            victim = ""
            if plan.kill_copier_every and (bounce + 1) % plan.kill_copier_every == 0:
                alive = [c for c in copiers if not c.done and c.exited() is None]
                if alive:
                    chosen = alive[copier_kills % len(alive)]
                    chosen.kill()
                    copier_kills += 1
                    victim = f" with {chosen.transactional_id}"
            t = time.monotonic()
            kill()
            start()
            bounce_seconds.append(time.monotonic() - t)
            last, commits = copied(), sum(c.commits for c in copiers)
            log(f"bounce {bounce + 1}: broker killed{victim} at {killed_at} committed records, back in {bounce_seconds[-1]:.1f}s")
        wait_for(tended, timeout=STEP_TIMEOUT_S, interval=0.05,
                 what=lambda: "every copier to finish: " + ", ".join(f"{c.transactional_id} starts={c.starts} exits={c.exits}" for c in copiers))
        seconds = time.monotonic() - began
        r = reader
        wait_for(lambda: r.count >= plan.records, timeout=STEP_TIMEOUT_S, interval=0.05,
                 what=lambda: f"the concurrent consumer to read {plan.records} (has {r.count})")
        reader.close()
        concurrent, reader = reader.values, None
        committed = _read(bootstrap, output_topic, plan.output_partitions, plan.records, "read_committed")
        uncommitted = _read(bootstrap, output_topic, plan.output_partitions, plan.records, "read_uncommitted")
        source = _read(bootstrap, input_topic, plan.input_partitions, plan.records, "read_uncommitted")
        result = Result(plan, acked, source, committed, concurrent, sum(len(v) for v in uncommitted.values()),
                        len(bounce_seconds), sum(c.starts for c in copiers), copier_kills, seconds, bounce_seconds)
        log(result.summary())
        return result
    finally:
        if reader is not None:
            reader.close()
        for copier in copiers:
            copier.close()


def plan_from_environment(short: Plan, long: Plan, variable: str = "ONCEFLOW_BOUNCE_LONG") -> Plan:
    """``long`` when the environment variable is set to something other than 0 or empty."""
    return long if os.environ.get(variable, "") not in ("", "0") else short
