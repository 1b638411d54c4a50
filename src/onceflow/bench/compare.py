"""``onceflow bench compare``: Onceflow beside Apache Kafka, in one sitting, with one load generator.

Each broker in turn (``--brokers onceflow,kafka,kafka-fsync`` by default) is started alone on
this machine, runs the same workloads with the same confluent-kafka load generator, and is
stopped before the next starts:

* ``produce``: acks=all for ``--seconds``; ``consume``: the first ``--records`` of what it wrote,
  read by three fresh consumers in turn, the median pass reported (one pass of a million records
  takes about two seconds, where one stray scheduling hiccup moves the figure by half);
* ``txn-produce``: a transactional producer committing every ``--commit-interval-ms``;
* ``commit-latency``: ``--transactions`` transactions of ``--records-per-txn`` records, one at a time;
* ``read-committed``: a half-aborted topic read with both isolation levels.

The three brokers differ in what acks=all promises: Onceflow answers once the write is fsynced;
Kafka with its defaults once it is in the page cache (replication is its durability, and one
node has none); ``kafka-fsync`` sets ``log.flush.interval.messages=1`` so that Kafka fsyncs every
write too.  Each row also gives the CPU seconds each side used: the broker's processes (all
threads) and the load generator (this process, librdkafka's threads included).
"""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from .workloads import (
    BenchBroker,
    Result,
    bench_commit_latency,
    bench_consume,
    bench_produce,
    bench_read_committed,
    bench_txn_produce,
    create_topic,
    started_broker,
)


@dataclass
class Row:
    broker: str
    result: Result
    broker_cpu_s: float
    client_cpu_s: float

    @property
    def figure(self) -> tuple[str, float]:
        """The figure this workload is compared on."""
        if "p99_ms" in self.result.extra:
            return "commit p99 ms", self.result.extra["p99_ms"]
        return "MB/s", self.result.mb_per_s


def _client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _measured(broker: BenchBroker, run: Callable[[], list[Result]]) -> list[Row]:
    broker_before, client_before = broker.cpu_seconds(), _client_cpu()
    results = run()
    broker_cpu, client_cpu = broker.cpu_seconds() - broker_before, _client_cpu() - client_before
    return [Row(broker.name, r, round(broker_cpu, 2), round(client_cpu, 2)) for r in results]


def compare(brokers: list[str], overrides: list[str], partitions: int, record_size: int, seconds: float,
            records: int, transactions: int, records_per_txn: int, commit_interval_ms: int, linger_ms: int,
            progress: Callable[[str], None]) -> list[Row]:
    rows: list[Row] = []
    for name in brokers:
        with started_broker(name, overrides if name == "onceflow" else None) as broker:
            progress(f"{name}: started on {broker.bootstrap}")
            topics = {w: f"compare-{w}-{int(time.time() * 1000)}" for w in ("produce", "txn", "latency", "rc")}
            for topic in topics.values():
                create_topic(broker.bootstrap, topic, partitions)
            for step in _steps(broker.bootstrap, topics, record_size, seconds, records, transactions, records_per_txn,
                               commit_interval_ms, linger_ms):
                for row in _measured(broker, step):
                    progress(f"{name}: {row.result.line()} [broker CPU {row.broker_cpu_s} s, client CPU {row.client_cpu_s} s]")
                    rows.append(row)
    return rows


def _steps(bs: str, topics: dict[str, str], record_size: int, seconds: float, records: int, transactions: int,
           records_per_txn: int, commit_interval_ms: int, linger_ms: int) -> list[Callable[[], list[Result]]]:
    return [
        lambda: [bench_produce(bs, topics["produce"], record_size, seconds, "all", linger_ms)],
        lambda: [_median_pass(lambda: bench_consume(bs, topics["produce"], records), passes=3)],
        lambda: [bench_txn_produce(bs, topics["txn"], record_size, seconds, commit_interval_ms, linger_ms)],
        lambda: [bench_commit_latency(bs, topics["latency"], record_size, transactions, records_per_txn)],
        lambda: bench_read_committed(bs, topics["rc"], record_size, records // 5, 100),
    ]


def _median_pass(run: Callable[[], Result], passes: int) -> Result:
    """Run ``passes`` times; the median pass's result, with the slowest and fastest pass's MB/s."""
    results = sorted((run() for _ in range(passes)), key=lambda r: r.mb_per_s)
    median = results[len(results) // 2]
    extra = {**median.extra, "slowest MB/s": round(results[0].mb_per_s, 1), "fastest MB/s": round(results[-1].mb_per_s, 1)}
    return Result(f"{median.name}, median of {passes} passes", median.records, median.bytes, median.seconds, extra)


def table(rows: list[Row]) -> str:
    """Markdown: one line per workload, each broker's figure and CPU, and Onceflow's ratio to each."""
    brokers = list(dict.fromkeys(r.broker for r in rows))
    by_workload: dict[str, dict[str, Row]] = {}
    for row in rows:
        by_workload.setdefault(row.result.name, {})[row.broker] = row
    head = ["workload", "figure", *brokers, *(f"onceflow / {b}" for b in brokers if b != "onceflow"),
            *(f"CPU s {b} (broker + client)" for b in brokers)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for workload, cells in by_workload.items():
        unit = next(iter(cells.values())).figure[0]
        values = {b: cells[b].figure[1] for b in brokers if b in cells}
        ratios = []
        for b in brokers:
            if b == "onceflow":
                continue
            if "onceflow" in values and values.get(b):
                ratio = values["onceflow"] / values[b]
                # Latency: lower is better (a ratio under 1 means Onceflow answers sooner).
                ratios.append(f"{ratio:.2f}x{' (latency)' if unit.startswith('commit') else ''}")
            else:
                ratios.append("")
        cpu = [f"{cells[b].broker_cpu_s} + {cells[b].client_cpu_s}" if b in cells else "" for b in brokers]
        lines.append("| " + " | ".join([workload, unit, *(f"{values[b]:.1f}" if b in values else "" for b in brokers),
                                         *ratios, *cpu]) + " |")
    return "\n".join(lines)


def as_json(rows: list[Row]) -> str:
    return "\n".join(json.dumps({"broker": r.broker, **asdict(r.result), "mb_per_s": r.result.mb_per_s,
                                 "broker_cpu_s": r.broker_cpu_s, "client_cpu_s": r.client_cpu_s}) for r in rows)
