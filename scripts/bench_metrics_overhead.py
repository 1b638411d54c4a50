"""Metrics on and scraped every second against metrics off (issue 22): ``onceflow bench WORKLOAD``
run as it is and with ``--scrape-every 1`` (another interval with ``--every``), one after the
other, the order reversed every pair, each run its own ``onceflow bench`` process with a fresh
broker.  The benchmark's own figure is compared (records/s for ``produce``, txn/s for
``txn-rate``), not the command's wall time, which includes the broker's start.  Prints every run,
the medians and the median of the per-pair (on/off) ratios, of the figure and of the broker's CPU
time per record (``--json``'s ``broker_cpu_s``; per transaction of one record in ``txn-rate``).

    python scripts/bench_metrics_overhead.py [PAIRS] [--workloads produce,txn-rate] [--seconds 10] [--every 1]
    python scripts/bench_metrics_overhead.py --scrape-time [--topics 100] [--partitions 6]

``--scrape-time`` instead times ``GET /metrics`` (request to last byte, over loopback, median of
20, and the broker process's CPU time per GET) on one broker: fresh and idle, then with
``__consumer_offsets`` and ``__transaction_state`` created (one committed transaction, one group
offset commit: 50 partitions each, as Kafka's defaults), then with ``--topics`` more topics of
``--partitions`` partitions each.

docs/performance.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid

from onceflow.bench.procstat import cpu_seconds
from onceflow.bench.workloads import create_topic
from onceflow.broker.process import BrokerProcess, free_port

#: The benchmark's command per workload (after ``python -m onceflow bench``), its figure, and the
#: unit the broker's CPU time is counted per.
WORKLOADS = {
    "produce": (["produce"], "records/s", "record"),
    "txn-rate": (["txn-rate", "--producers", "1", "--records-per-txn", "1"], "txn/s", "txn"),
}


def run_once(workload: str, seconds: float, scrape: float | None) -> tuple[float, float, dict[str, float]]:
    """One ``onceflow bench`` run: its figure, the broker's CPU µs per record (a transaction of one
    record in txn-rate), and its scrape summary (empty when off)."""
    args, _unit, _per = WORKLOADS[workload]
    cmd = [sys.executable, "-m", "onceflow", "bench", *args, "--seconds", f"{seconds:g}", "--json"]
    if scrape is not None:
        cmd += ["--scrape-every", f"{scrape:g}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 180, check=False)
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    figure = result["extra"]["txn_per_s"] if workload == "txn-rate" else result["records_per_s"]
    scraped = {k: v for k, v in result.items() if k.startswith("scrape")}
    return float(figure), result["broker_cpu_s"] / result["records"] * 1e6, scraped


def compare(workload: str, pairs: int, seconds: float, every: float) -> None:
    _args, unit, per = WORKLOADS[workload]
    runs: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    scrape_ms: list[float] = []
    scrapes = failures = 0
    for p in range(pairs):
        for scrape in (False, True) if p % 2 == 0 else (True, False):
            figure, cpu_us, scraped = run_once(workload, seconds, every if scrape else None)
            runs[scrape].append(figure)
            cpu[scrape].append(cpu_us)
            note = ""
            if scrape:
                scrape_ms.append(scraped["scrape_median_ms"])
                scrapes += int(scraped["scrapes"])
                failures += int(scraped["scrape_failures"])
                note = (f" ({scraped['scrapes']:.0f} scrapes, {scraped['scrape_failures']:.0f} failed, "
                        f"median {scraped['scrape_median_ms']:.1f} ms, {scraped['scrape_bytes']:.0f} bytes)")
            print(f"pair {p} {workload} metrics {'on ' if scrape else 'off'}: {figure:,.1f} {unit}, "
                  f"broker CPU {cpu_us:.2f} µs/{per}{note}", flush=True)
    off, on = runs[False], runs[True]
    ratios = sorted(a / b for a, b in zip(on, off, strict=True))
    print(f"{workload}: metrics off median {statistics.median(off):,.1f} {unit} "
          f"(from {min(off):,.1f} to {max(off):,.1f}); on, scraped every {every:g} s, {statistics.median(on):,.1f} {unit} "
          f"(from {min(on):,.1f} to {max(on):,.1f})")
    print(f"{workload}: on/off, median of the per-pair ratios {statistics.median(ratios):.3f} "
          f"(from {ratios[0]:.3f} to {ratios[-1]:.3f}); ratio of the medians {statistics.median(on) / statistics.median(off):.3f}; "
          f"{scrapes} scrapes, {failures} failed, median of the runs' median scrape {statistics.median(scrape_ms):.1f} ms",
          flush=True)
    cpu_ratios = sorted(a / b for a, b in zip(cpu[True], cpu[False], strict=True))
    print(f"{workload}: broker CPU per {per}, median off {statistics.median(cpu[False]):.2f} µs, on "
          f"{statistics.median(cpu[True]):.2f} µs; on/off, median of the per-pair ratios {statistics.median(cpu_ratios):.3f} "
          f"(from {cpu_ratios[0]:.3f} to {cpu_ratios[-1]:.3f})", flush=True)


def time_scrapes(url: str, pid: int, n: int = 20) -> tuple[float, float, float, int]:
    """Median and max milliseconds of ``n`` GETs of ``url``, the broker's CPU milliseconds per GET
    (process ``pid``, all its threads), and the body's size."""
    times = []
    size = 0
    cpu = cpu_seconds(pid)
    for _ in range(n):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as response:
            size = len(response.read())
        times.append((time.perf_counter() - t0) * 1000)
    cpu_ms = (cpu_seconds(pid) - cpu) / n * 1000
    return statistics.median(times), max(times), cpu_ms, size


def scrape_time(topics: int, partitions: int) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    with BrokerProcess(overrides={"metrics.port": str(port)}, log_level="WARNING") as broker:
        bootstrap = broker.bootstrap_servers

        assert broker.pid is not None
        pid = broker.pid

        def show(stage: str) -> None:
            median, worst, cpu_ms, size = time_scrapes(url, pid)
            lines = sum(1 for _ in urllib.request.urlopen(url, timeout=10).read().splitlines())
            print(f"{stage}: GET /metrics median {median:.1f} ms, max {worst:.1f} ms, broker CPU {cpu_ms:.1f} ms a scrape "
                  f"({size:,} bytes, {lines:,} lines)", flush=True)

        show("fresh broker, idle, no topic")
        create_topic(bootstrap, "scrape-time", 1)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"scrape-{uuid.uuid4()}"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("scrape-time", b"x")
        producer.commit_transaction(30)
        del producer  # closed before the broker stops
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "scrape-time"})
        consumer.commit(offsets=[TopicPartition("scrape-time", 0, 1)], asynchronous=False)
        consumer.close()
        show("idle, with __consumer_offsets and __transaction_state (50 partitions each) and one 1-partition topic")
        for i in range(topics):
            create_topic(bootstrap, f"scrape-time-{i}", partitions)
        show(f"idle, with {topics} more topics of {partitions} partitions ({topics * partitions} partitions)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("pairs", nargs="?", type=int, default=5)
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=1.0, help="the scrape interval of the runs with metrics on")
    parser.add_argument("--scrape-time", action="store_true", help="time GET /metrics instead (see above)")
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args()
    if args.scrape_time:
        scrape_time(args.topics, args.partitions)
        return
    workloads = args.workloads.split(",")
    if unknown := set(workloads) - set(WORKLOADS):
        parser.error(f"unknown --workloads {', '.join(sorted(unknown))}: one of {', '.join(WORKLOADS)}")
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    for workload in workloads:
        compare(workload, args.pairs, args.seconds, args.every)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
