"""Transactions v2 against v1 with the Java client (issue 21), on Onceflow and on Apache Kafka:
Kafka's own producer perf test (``kafka-producer-perf-test --transactional-id``, kafka-clients
4.3.1) against a pair of brokers per system, one at ``transaction.version=2`` and one at 1, all
started side by side and run one at a time in an order reversed every round; the medians and the
median of the pairwise (same round) v2/v1 ratios.

    python scripts/bench_txn_versions.py [ROUNDS] [TRANSACTION_MS] [RECORDS] [--brokers onceflow,kafka]

``--brokers`` names the systems (``onceflow`` by default; ``kafka`` is Apache Kafka 4.3.1, one
KRaft node with its defaults, formatted with ``--feature transaction.version=N``; ``kafka-fsync``
the same told to fsync every write as Onceflow does).  Before the timed rounds each broker is
checked, not assumed: ``kafka-features describe`` must show the ``transaction.version`` it was set
to, and a short untimed run of the same perf test, with the Java client's requests logged, must
have sent EndTxn v5 and no AddPartitionsToTxn (v2) or AddPartitionsToTxn and EndTxn <= v4 (v1);
its line also counts the transactions and, at v1, the AddPartitionsToTxn answered
CONCURRENT_TRANSACTIONS.  That run also warms the broker (Kafka's JIT) before the first timed
round.  The broker's CPU time (all its threads) is taken around each run, and the load average
printed before and after the rounds (other work on the machine shows there).

Needs ``make reference`` (Kafka's jars).  docs/performance.md has the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from onceflow.bench.procstat import cpu_seconds
from onceflow.bench.workloads import BROKERS, create_topic
from onceflow.broker.process import BrokerProcess
from onceflow.reference import KafkaCluster
from onceflow.reference.tools import TOOLS, finalized_features, java_command, logged_requests

_SUMMARY = re.compile(r"records sent, ([\d.]+) records/sec .*?([\d.]+) ms avg latency")
VERSIONS = (2, 1)
#: The untimed run that checks the versions the client uses and warms the broker.
CHECK_RECORDS = 3000


@dataclass
class Broker:
    system: str
    version: int
    bootstrap: str
    pids: tuple[int, ...]
    rates: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    cpu_us_per_record: list[float] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.system} v{self.version}"

    def cpu_seconds(self) -> float:
        """User plus system CPU time its processes have used so far (all their threads)."""
        return sum(cpu_seconds(pid) for pid in self.pids)


def start(system: str, version: int, stack: contextlib.ExitStack) -> Broker:
    """One broker of ``system`` at ``transaction.version=version``, stopped when ``stack`` closes."""
    if system == "onceflow":
        broker = stack.enter_context(BrokerProcess(overrides={**BROKERS[system], "transaction.version": str(version)}))
        assert broker.proc is not None
        return Broker(system, version, broker.bootstrap_servers, (broker.proc.pid,))
    cluster = stack.enter_context(KafkaCluster(overrides=BROKERS[system], features={"transaction.version": version}))
    return Broker(system, version, cluster.bootstrap_servers, tuple(n.proc.pid for n in cluster.nodes.values() if n.proc))


def perf_test(bootstrap: str, txn_ms: int, records: int, request_log: Path | None = None) -> tuple[float, float]:
    """One ``kafka-producer-perf-test`` run: records/s and average latency (ms)."""
    cmd = java_command(TOOLS["kafka-producer-perf-test"], [
        "--topic", "perf", "--num-records", str(records), "--record-size", "100", "--throughput", "-1",
        "--transactional-id", f"perf-{uuid.uuid4().hex[:8]}", "--transaction-duration-ms", str(txn_ms),
        "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", "linger.ms=5"],
        heap="512m", request_log=request_log)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout
    found = _SUMMARY.search(out.strip().splitlines()[-1])
    assert found, out[-2000:]
    return float(found.group(1)), float(found.group(2))


def check_versions(broker: Broker, txn_ms: int, log_dir: Path) -> None:
    """The finalized ``transaction.version`` and the requests the client really sent, printed;
    exits if either is not what the broker was set to."""
    level = finalized_features(broker.bootstrap).get("transaction.version")
    log = log_dir / f"{broker.system}-v{broker.version}.log"
    perf_test(broker.bootstrap, txn_ms, CHECK_RECORDS, request_log=log)
    sent = logged_requests(log)
    txn = [f"{api} v{'/'.join(map(str, sorted(sent[api])))}" for api in ("PRODUCE", "ADD_PARTITIONS_TO_TXN", "END_TXN") if api in sent]
    # An AddPartitionsToTxn that meets the previous transaction's markers still being written is
    # answered CONCURRENT_TRANSACTIONS (51) and sent again after the client's 20 ms back-off.
    text = log.read_text(errors="replace")
    busy = f"; {text.count('partitionErrorCode=51')} CONCURRENT_TRANSACTIONS answers" if "ADD_PARTITIONS_TO_TXN" in sent else ""
    print(f"{broker.name}: transaction.version finalized at {level} (kafka-features describe); "
          f"the client sent {', '.join(txn)}{'' if 'ADD_PARTITIONS_TO_TXN' in sent else ', no ADD_PARTITIONS_TO_TXN'} "
          f"({text.count('Sending END_TXN request')} transactions{busy})", flush=True)
    if broker.version >= 2:
        used = "ADD_PARTITIONS_TO_TXN" not in sent and min(sent.get("END_TXN", {0})) >= 5
    else:
        used = "ADD_PARTITIONS_TO_TXN" in sent and max(sent.get("END_TXN", {9})) <= 4
    if level != str(broker.version) or not used:
        raise SystemExit(f"{broker.name}: the broker or the client is not at transactions v{broker.version}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("rounds", nargs="?", type=int, default=6)
    parser.add_argument("txn_ms", nargs="?", type=int, default=1, metavar="transaction_ms")
    parser.add_argument("records", nargs="?", type=int, default=20000)
    parser.add_argument("--brokers", default="onceflow", help=f"comma-separated systems, of {', '.join(BROKERS)}")
    args = parser.parse_args()
    systems = args.brokers.split(",")
    if unknown := set(systems) - set(BROKERS):
        parser.error(f"unknown --brokers {', '.join(sorted(unknown))}: one of {', '.join(BROKERS)}")
    with contextlib.ExitStack() as stack:
        log_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-txn-versions-")))
        brokers = [start(system, version, stack) for system in systems for version in VERSIONS]
        for broker in brokers:
            create_topic(broker.bootstrap, "perf", 1)
            check_versions(broker, args.txn_ms, log_dir)
        print(f"load average before the rounds: {os.getloadavg()[0]:.2f}", flush=True)
        for r in range(args.rounds):
            for broker in brokers if r % 2 == 0 else reversed(brokers):
                cpu = broker.cpu_seconds()
                rate, latency = perf_test(broker.bootstrap, args.txn_ms, args.records)
                broker.cpu_us_per_record.append((broker.cpu_seconds() - cpu) / args.records * 1e6)
                broker.rates.append(rate)
                broker.latencies.append(latency)
                print(f"round {r} {broker.name}: {rate:,.0f} records/s, {latency} ms average latency, "
                      f"broker CPU {broker.cpu_us_per_record[-1]:.1f} µs/record", flush=True)
        print(f"load average after the rounds: {os.getloadavg()[0]:.2f}")
    for broker in brokers:
        print(f"{broker.name}: median {statistics.median(broker.rates):,.0f} records/s, median average latency "
              f"{statistics.median(broker.latencies):.2f} ms, broker CPU {statistics.median(broker.cpu_us_per_record):.1f} µs/record")
    for system in systems:
        v2, v1 = (next(b for b in brokers if b.system == system and b.version == v) for v in VERSIONS)
        ratios = sorted(a / b for a, b in zip(v2.rates, v1.rates, strict=True))
        print(f"{system} v2/v1, median of the pairwise ratios: {statistics.median(ratios):.3f} "
              f"(from {ratios[0]:.3f} to {ratios[-1]:.3f}); latency {statistics.median(v2.latencies):.2f} / "
              f"{statistics.median(v1.latencies):.2f} ms")


if __name__ == "__main__":
    main()
