"""Transactions v2 against v1 with the Java client (issue 21): Kafka's own producer perf test
(``kafka-producer-perf-test --transactional-id``, kafka-clients 4.3.1) against two Onceflow brokers,
one at ``transaction.version=2`` and one at 1, in alternating order; the medians and the median of
the pairwise ratios.

    python scripts/bench_txn_versions.py [ROUNDS] [TRANSACTION_MS] [RECORDS]

Needs ``make reference`` (Kafka's jars).  docs/performance.md has the figures.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from onceflow.broker.process import BrokerProcess
from onceflow.reference.tools import TOOLS, java_command

_SUMMARY = re.compile(r"records sent, ([\d.]+) records/sec .*?([\d.]+) ms avg latency")


def main() -> None:
    rounds, txn_ms, records = (int(sys.argv[i]) if len(sys.argv) > i else d for i, d in ((1, 6), (2, 1), (3, 20000)))
    brokers = {f"v{v}": BrokerProcess(overrides={"transaction.version": str(v)}) for v in (2, 1)}
    rates: dict[str, list[float]] = {name: [] for name in brokers}
    latencies: dict[str, list[float]] = {name: [] for name in brokers}
    try:
        for broker in brokers.values():
            broker.start()
            admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
            for future in admin.create_topics([NewTopic("perf", 1, 1)]).values():
                future.result(30)
        for r in range(rounds):
            order = list(brokers.items()) if r % 2 == 0 else list(reversed(brokers.items()))
            for name, broker in order:
                cmd = java_command(TOOLS["kafka-producer-perf-test"], [
                    "--topic", "perf", "--num-records", str(records), "--record-size", "100", "--throughput", "-1",
                    "--transactional-id", f"perf-{uuid.uuid4().hex[:8]}", "--transaction-duration-ms", str(txn_ms),
                    "--producer-props", f"bootstrap.servers={broker.bootstrap_servers}", "acks=all", "linger.ms=5"],
                    heap="512m")
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout
                found = _SUMMARY.search(out.strip().splitlines()[-1])
                assert found, out[-2000:]
                rates[name].append(float(found.group(1)))
                latencies[name].append(float(found.group(2)))
                print(f"round {r} {name}: {found.group(1)} records/s, {found.group(2)} ms average latency", flush=True)
    finally:
        for broker in brokers.values():
            broker.stop()
    for name in brokers:
        print(f"{name}: median {statistics.median(rates[name]):,.0f} records/s, "
              f"median average latency {statistics.median(latencies[name]):.2f} ms")
    ratio = statistics.median(a / b for a, b in zip(rates["v2"], rates["v1"], strict=True))
    print(f"v2/v1, median of the pairwise ratios: {ratio:.3f}")


if __name__ == "__main__":
    main()
