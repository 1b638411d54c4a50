"""The payments ledger: two chained exactly-once Spark queries, and their verification.

Theory of operation
-------------------
A payment moves ``amount`` from one account to another; any duplicate or
loss anywhere shows up as money created or destroyed.

1. ``generate`` writes payments ``id,from,to,amount`` to ``payments`` in
   Kafka transactions, and aborts about one transaction in ten on purpose.
2. Query *ledger* reads ``payments`` read_committed and writes one debit and
   one credit entry per payment to ``ledger`` (key: the account; value:
   ``payment,account,delta,kind``) through the exactly-once onceflow sink.
3. Query *balances* reads ``ledger`` read_committed, keeps each account's
   running balance in Spark's state store (a streaming ``groupBy().sum()``,
   update mode) and writes each micro-batch's changed balances to the
   compacted topic ``balances`` with ``write_exactly_once`` in
   ``foreachBatch`` (update mode needs foreachBatch: Python data source
   sinks take appends only).
4. ``verify`` reads both topics back with a plain read_committed consumer:
   every committed payment has exactly one debit and one credit, aborted
   payments have none, every account's latest balance is what the committed
   payments imply, and all balances sum to zero.

Each query has its own checkpoint; both run in one Spark driver process
(``python -m onceflow.pipelines.payments driver ...``), which prints a JSON
line per micro-batch, so that ``onceflow demo`` can kill it with SIGKILL and
start it again from its checkpoints.  Only standard Kafka APIs are used:
the same code runs against any Kafka cluster (``--bootstrap-servers``).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..clientconfig import NO_SETTINGS, ClientSettings
from ..spark import worker_python

PAYMENTS, LEDGER, BALANCES = "payments", "ledger", "balances"
PARTITIONS = 4
#: Consumer groups the queries' sources record their progress in (commitOffsetsToGroup).
LEDGER_GROUP, BALANCES_GROUP = "payments-to-ledger", "ledger-to-balances"
TIMEOUT_S = 60
QUIET = {"log.connection.close": False, "log_level": 3}


# -- the input --------------------------------------------------------------------------


@dataclass
class Generated:
    """What the generator wrote: committed payments (id -> (from, to, amount)) and aborted ids."""

    committed: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    aborted: set[int] = field(default_factory=set)
    transactions: int = 0

    def expected_balances(self) -> dict[int, int]:
        balances: Counter[int] = Counter()
        for source, target, amount in self.committed.values():
            balances[source] -= amount
            balances[target] += amount
        return dict(balances)


def create_topics(bootstrap: str, partitions: int = PARTITIONS, client: ClientSettings = NO_SETTINGS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({**client.librdkafka(bootstrap), **QUIET})
    # Replication factor -1: the cluster's default.replication.factor (3 on a production cluster;
    # a single Onceflow broker has 1), and its min.insync.replicas.
    topics = [NewTopic(PAYMENTS, partitions, -1), NewTopic(LEDGER, partitions, -1),
              NewTopic(BALANCES, partitions, -1, config={"cleanup.policy": "compact"})]
    for name, future in admin.create_topics(topics, request_timeout=TIMEOUT_S).items():
        try:
            future.result(TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - reported with the topic's name
            raise RuntimeError(f"cannot create topic {name!r} (it must not exist yet): {exc}") from None


def generate(bootstrap: str, payments: int, *, accounts: int = 1000, per_transaction: int = 500, abort_ratio: float = 0.1,
             seed: int = 20261123, on_progress: Any = None, client: ClientSettings = NO_SETTINGS) -> Generated:
    """Write ``payments`` payments to ``payments`` in transactions, about ``abort_ratio`` of them aborted."""
    from confluent_kafka import Producer

    rng = random.Random(seed)
    producer = Producer({**client.librdkafka(bootstrap), "transactional.id": f"payments-generator-{uuid.uuid4()}",
                         "linger.ms": 20, "batch.size": 1 << 20, **QUIET})
    producer.init_transactions(TIMEOUT_S)
    out = Generated()
    for first in range(0, payments, per_transaction):
        ids = range(first, min(payments, first + per_transaction))
        rows = [(i, rng.randrange(accounts), rng.randrange(accounts), rng.randint(1, 10_000)) for i in ids]
        producer.begin_transaction()
        for i, source, target, amount in rows:
            while True:
                try:
                    producer.produce(PAYMENTS, f"{i},{source},{target},{amount}".encode(), key=str(i).encode())
                    break
                except BufferError:
                    producer.poll(0.05)
        if rng.random() < abort_ratio:
            producer.flush(TIMEOUT_S)
            producer.abort_transaction(TIMEOUT_S)
            out.aborted.update(i for i, _, _, _ in rows)
        else:
            producer.commit_transaction(TIMEOUT_S)
            out.committed.update((i, (s, t, a)) for i, s, t, a in rows)
        out.transactions += 1
        if on_progress is not None:
            on_progress(len(ids))
    return out


# -- the pipeline (in the Spark driver process) ----------------------------------------------


def start_queries(spark: Any, bootstrap: str, checkpoints: str, max_offsets: int | None = None,
                  delivery_guarantee: str = "exactly-once", settings: dict[str, str] | None = None) -> dict[str, Any]:
    """Start both queries; returns them by name.  ``at-least-once`` is for comparison (benchmarks),
    and so is ``spark-kafka``: what a user would run instead, Spark's own JVM Kafka connector at
    both ends (``format("kafka")``, read_committed, at-least-once sinks; its jars must be in
    ``spark.jars``, see ``onceflow.reference``).  Spark's source commits no group offsets: the
    benchmark counts the queries' input rows instead (``run_until_caught_up``)."""
    import onceflow.spark

    onceflow.spark.register(spark)
    spark_kafka = delivery_guarantee == "spark-kafka"
    #: The client settings (a secured cluster's) as Spark's kafka.* options: the connector translates them.
    kafka_options = {f"kafka.{key}": value for key, value in (settings or {}).items()}

    def source(topic: str, group: str) -> Any:
        reader = (spark.readStream.format("kafka" if spark_kafka else "onceflow")
                  .option("kafka.bootstrap.servers", bootstrap).options(**kafka_options)
                  .option("subscribe", topic).option("startingOffsets", "earliest"))
        if spark_kafka:
            reader = reader.option("kafka.isolation.level", "read_committed")
        else:
            reader = reader.option("commitOffsetsToGroup", group)
        if max_offsets:
            reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
        return reader.load()

    entries = (source(PAYMENTS, LEDGER_GROUP)
               .selectExpr("split(CAST(value AS STRING), ',') AS f")
               .selectExpr("f[0] AS id", "explode(array("
                           "named_struct('account', f[1], 'delta', -CAST(f[3] AS BIGINT), 'kind', 'debit'), "
                           "named_struct('account', f[2], 'delta', CAST(f[3] AS BIGINT), 'kind', 'credit'))) AS e")
               .selectExpr("e.account AS key", "concat_ws(',', id, e.account, CAST(e.delta AS STRING), e.kind) AS value"))
    ledger_sink = entries.writeStream.format("kafka" if spark_kafka else "onceflow").queryName("ledger")
    if not spark_kafka:
        ledger_sink = ledger_sink.option("deliveryGuarantee", delivery_guarantee)
    ledger = (ledger_sink.option("kafka.bootstrap.servers", bootstrap).options(**kafka_options).option("topic", LEDGER)
              .option("checkpointLocation", os.path.join(checkpoints, "ledger")).start())

    totals = (source(LEDGER, BALANCES_GROUP)
              .selectExpr("CAST(key AS STRING) AS account",
                          "CAST(split(CAST(value AS STRING), ',')[2] AS BIGINT) AS delta")
              .groupBy("account").sum("delta").withColumnRenamed("sum(delta)", "balance"))

    def write_balances(frame: Any, batch_id: int) -> None:
        changed = frame.selectExpr("account AS key", "CAST(balance AS STRING) AS value")
        if spark_kafka:
            changed.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", BALANCES).save()
            return
        onceflow.spark.write_exactly_once(changed, batch_id, bootstrap_servers=bootstrap, topic=BALANCES, name="balances",
                                          deliveryGuarantee=delivery_guarantee, **kafka_options)

    balances = (totals.writeStream.queryName("balances").outputMode("update").foreachBatch(write_balances)
                .option("checkpointLocation", os.path.join(checkpoints, "balances")).start())
    return {"ledger": ledger, "balances": balances}


def driver_main(argv: list[str] | None = None) -> int:
    """The Spark driver: both queries, a JSON line per micro-batch, until SIGTERM or a failure."""
    parser = argparse.ArgumentParser(prog="python -m onceflow.pipelines.payments driver")
    parser.add_argument("bootstrap")
    parser.add_argument("checkpoints")
    parser.add_argument("--master", help="Spark master (default: whatever spark-submit or Spark's defaults say)")
    parser.add_argument("--max-offsets", type=int, default=0)
    parser.add_argument("--shuffle-partitions", type=int, default=PARTITIONS)
    parser.add_argument("--delivery-guarantee", default="exactly-once", choices=["exactly-once", "at-least-once", "spark-kafka"],
                        help="spark-kafka: Spark's own Kafka connector at both ends instead of onceflow's (a benchmark baseline)")
    parser.add_argument("--settings-stdin", action="store_true",
                        help="read client settings (a JSON object: a secured cluster's) from standard input: kept off "
                             "the command line, which any user of the machine can see")
    args = parser.parse_args(argv)
    settings = json.loads(sys.stdin.readline()) if args.settings_stdin else {}
    os.environ.setdefault("PYSPARK_PYTHON", worker_python.path())
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("onceflow-payments")
    if args.master:
        builder = builder.master(args.master).config("spark.ui.enabled", "false")
    if args.delivery_guarantee == "spark-kafka":
        from ..reference import spark_kafka_classpath

        builder = builder.config("spark.jars", ",".join(spark_kafka_classpath()))
    spark = (builder.config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
             .config("spark.sql.streaming.stopTimeout", "60s").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    queries = start_queries(spark, args.bootstrap, args.checkpoints, args.max_offsets or None, args.delivery_guarantee,
                            settings)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    _emit({"event": "started"})
    reported: dict[str, dict[int, int]] = {name: {} for name in queries}
    status = 0
    while not stopping:
        for name, query in queries.items():
            for progress in query.recentProgress:
                if is_news(reported[name], progress["batchId"], progress["numInputRows"]):
                    _emit({"event": "batch", "query": name, "batch": progress["batchId"],
                           "rows": progress["numInputRows"], "ms": progress["batchDuration"],
                           "phases_ms": progress["durationMs"]})
            if not query.isActive:
                _emit({"event": "failed", "query": name, "error": str(query.exception())[:2000]})
                stopping.append(True)
                status = 1
        time.sleep(0.2)
    for query in queries.values():
        query.stop()
    _emit({"event": "stopped"})
    spark.stop()
    return status


def is_news(reported: dict[int, int], batch: int, rows: int) -> bool:
    """Whether a query's progress entry is to be reported (and note it in ``reported``, rows per
    micro-batch): a micro-batch not reported yet, or reported with fewer rows.  A query with nothing
    to do reports an idle entry under its *next* micro-batch's id, with no rows (Spark's
    ``noDataProgressEventInterval``); the micro-batch that later runs under that id is news."""
    if reported.get(batch, -1) >= rows:
        return False
    reported[batch] = rows
    return True


def _emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


@dataclass
class DriverProcess:
    """``driver_main`` as a child process; its JSON lines are read by a thread into ``lines``."""

    bootstrap: str
    checkpoints: str
    log_path: str
    master: str = "local[2,4]"
    max_offsets: int = 0
    delivery_guarantee: str = "exactly-once"
    #: Set as ONCEFLOW_FAULT_DIR for the driver's workers (``onceflow.spark.faults``), if any.
    fault_dir: str | None = None
    #: Client settings as the user gave them (``ClientSettings.given``), handed over on standard input.
    settings: dict[str, str] = field(default_factory=dict, repr=False)
    proc: subprocess.Popen[str] | None = None
    lines: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)

    def start(self) -> None:
        env = {**os.environ, "PYSPARK_PYTHON": worker_python.path()}
        if self.fault_dir is not None:
            env["ONCEFLOW_FAULT_DIR"] = self.fault_dir
        cmd = [sys.executable, "-m", "onceflow.pipelines.payments", "driver", self.bootstrap, self.checkpoints,
               "--master", self.master, "--delivery-guarantee", self.delivery_guarantee]
        if self.max_offsets:
            cmd += ["--max-offsets", str(self.max_offsets)]
        if self.settings:
            cmd.append("--settings-stdin")
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if self.settings else None,
                                         stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        if self.settings:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(self.settings) + "\n")
            self.proc.stdin.close()
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(TIMEOUT_S)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_until_caught_up(driver: DriverProcess, generated: Generated, timeout_s: float = 1800,
                        on_start: Callable[[int], None] | None = None) -> float:
    """Start the driver, wait until both queries have processed everything; seconds from the
    queries' start to caught up (the driver is stopped after).  Raises on a failed query.

    Caught up is counted from the driver's micro-batch lines, the same way for every sink and
    source (Spark's Kafka source commits no group offsets): the ledger query has read every
    committed payment and the balances query both entries of each.  Only for runs without
    faults: a re-run micro-batch would count twice."""
    driver.start()
    if on_start is not None and driver.proc is not None:
        on_start(driver.proc.pid)
    started: float | None = None
    rows: dict[str, dict[int, int]] = {"ledger": {}, "balances": {}}  # per micro-batch: a batch reported again replaces
    wanted = {"ledger": len(generated.committed), "balances": 2 * len(generated.committed)}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            while not driver.lines.empty():
                record = driver.lines.get_nowait()
                if record["event"] == "started" and started is None:
                    started = time.monotonic()
                elif record["event"] == "batch":
                    rows[record["query"]][record["batch"]] = record["rows"]
                elif record["event"] == "failed":
                    raise RuntimeError(f"query {record['query']} failed: {record['error'][:500]}")
            if started is not None and all(sum(rows[name].values()) >= wanted[name] for name in rows):
                return time.monotonic() - started
            time.sleep(0.05)
        raise TimeoutError(f"the pipeline did not catch up within {timeout_s:.0f} s (see {driver.log_path})")
    finally:
        driver.stop()


# -- the verification -----------------------------------------------------------------------


@dataclass
class Report:
    committed: int
    aborted: int
    ledger_entries: int = 0
    duplicates: int = 0
    missing: int = 0
    aborted_seen: int = 0
    wrong_balances: int = 0
    balance_sum: int = 0
    accounts: int = 0

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.missing or self.aborted_seen or self.wrong_balances or self.balance_sum)

    def problems(self) -> list[str]:
        out = []
        if self.duplicates:
            out.append(f"{self.duplicates} ledger entries are duplicates")
        if self.missing:
            out.append(f"{self.missing} ledger entries are missing")
        if self.aborted_seen:
            out.append(f"{self.aborted_seen} ledger entries belong to aborted payments")
        if self.wrong_balances:
            out.append(f"{self.wrong_balances} accounts have a balance the committed payments do not imply")
        if self.balance_sum:
            out.append(f"the balances sum to {self.balance_sum}, not 0")
        return out


def read_committed(bootstrap: str, topic: str, partitions: int = PARTITIONS, isolation: str = "read_committed",
                   client: ClientSettings = NO_SETTINGS) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every committed record of ``topic`` (or every record: ``read_uncommitted``),
    in offset order per partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({**client.librdkafka(bootstrap), "group.id": f"verify-{uuid.uuid4()}", "enable.auto.commit": False,
                         "isolation.level": isolation, "enable.partition.eof": True, **QUIET})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[tuple[bytes | None, bytes | None]] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 5 * TIMEOUT_S
    try:
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} did not reach its end")
            for message in consumer.consume(10_000, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading {topic}: {error}")
                    at_end.add(message.partition() or 0)
                    continue
                out.append((message.key(), message.value()))
    finally:
        consumer.close()
    return out


def verify(bootstrap: str, generated: Generated, client: ClientSettings = NO_SETTINGS) -> Report:
    report = Report(committed=len(generated.committed), aborted=len(generated.aborted))
    entries: Counter[tuple[int, str]] = Counter()  # (payment, kind) -> times seen
    for _, value in read_committed(bootstrap, LEDGER, client=client):
        payment, _, _, kind = (value or b"").decode().split(",")
        entries[(int(payment), kind)] += 1
    report.ledger_entries = sum(entries.values())
    report.duplicates = sum(n - 1 for n in entries.values() if n > 1)
    report.aborted_seen = sum(n for (payment, _), n in entries.items() if payment in generated.aborted)
    report.missing = sum(1 for payment in generated.committed for kind in ("debit", "credit") if not entries[(payment, kind)])
    latest: dict[int, int] = {}
    for key, value in read_committed(bootstrap, BALANCES, client=client):
        latest[int(key or b"0")] = int(value or b"0")  # offset order: the last value of each key wins
    expected = generated.expected_balances()
    report.accounts = len(latest)
    report.wrong_balances = sum(1 for account in set(expected) | set(latest)
                                if latest.get(account, 0) != expected.get(account, 0))
    report.balance_sum = sum(latest.values())
    return report


def caught_up(bootstrap: str, generated: Generated, client: ClientSettings = NO_SETTINGS) -> bool:
    """Both queries have processed everything: their groups' offsets are at their sources' ends.
    False, not an exception, while the cluster cannot answer (a broker restarting, leaders moving)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    for topic, group in ((PAYMENTS, LEDGER_GROUP), (LEDGER, BALANCES_GROUP)):
        consumer = Consumer({**client.librdkafka(bootstrap), "group.id": group, "isolation.level": "read_committed",
                             "enable.auto.commit": False, **QUIET})
        try:
            partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            committed = consumer.committed(partitions, timeout=TIMEOUT_S)
            for tp in committed:
                _, end = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=TIMEOUT_S,
                                                        cached=False)
                if tp.error is not None or tp.offset < end:
                    return False
        except KafkaException:
            return False
        finally:
            consumer.close()
    return True


def rows_by_batch(lines: Iterable[dict[str, Any]], query: str) -> dict[int, int]:
    """Input rows per micro-batch of ``query`` (a re-run batch replaces its earlier count)."""
    return {record["batch"]: record["rows"] for record in lines if record.get("query") == query}


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "driver":
        raise SystemExit(driver_main(sys.argv[2:]))
    raise SystemExit("usage: python -m onceflow.pipelines.payments driver BOOTSTRAP CHECKPOINT_DIR [...]")
