"""The benchmark workloads (load generated with confluent-kafka) and their broker.

Each workload takes ``progress``, called with a short line about how far it is (a few times a
second at most is shown: ``longcommand.Session.status``), and raises ``BenchError`` (one line) when
the cluster did not do what it asked.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import statistics
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..broker.process import BrokerProcess, free_port
from ..clientconfig import NO_SETTINGS, ClientSettings
from ..progressline import REDRAW_S  # how often a waiting workload looks up to report its progress
from .procstat import cpu_seconds

DEFAULT_PARTITIONS = 6
DEFAULT_RECORD_SIZE = 1024
TIMEOUT_S = 120


class BenchError(RuntimeError):
    """The cluster did not do what a workload asked: one line, said as it is."""


def _quiet(_text: str) -> None:
    """No progress shown."""


Progress = Callable[[str], None]


@dataclass
class Result:
    name: str
    records: int
    bytes: int
    seconds: float
    extra: dict[str, float] = field(default_factory=dict)
    #: False for a figure that is a duration (a restart), not a rate over ``bytes``.
    rated: bool = True

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds else 0.0

    def line(self) -> str:
        if not self.rated:
            return f"{self.name}: {self.seconds:.2f} s"
        text = (
            f"{self.name}: {self.records} records, {self.bytes / 1e6:.1f} MB in {self.seconds:.2f} s: "
            f"{self.records_per_s:,.0f} records/s, {self.mb_per_s:.1f} MB/s"
        )
        if self.extra:
            text += " (" + ", ".join(f"{k} {v:g}" for k, v in self.extra.items()) + ")"
        return text


def median_result(name: str, runs: list[Result]) -> Result:
    """The run of median rate among ``runs`` (the same work each; of an even count, the slower of the
    two middle runs), renamed; its ``extra`` figures are the medians of the runs' figures."""
    ordered = sorted(runs, key=lambda r: r.records_per_s)
    middle = ordered[(len(ordered) - 1) // 2]
    keys = set.intersection(*(set(r.extra) for r in runs))
    extra = {k: round(statistics.median(r.extra[k] for r in runs), 3) for k in middle.extra if k in keys}
    return Result(name, middle.records, middle.bytes, middle.seconds, extra, middle.rated)


#: The brokers a benchmark can start: Onceflow (every acks=all write fsynced before it is
#: answered), Apache Kafka with its defaults (acks=all means in every in-sync replica's page
#: cache; no fsync), and Apache Kafka told to fsync every write as Onceflow does.
BROKERS = {
    "onceflow": {},
    "kafka": {},
    "kafka-fsync": {"log.flush.interval.messages": "1"},
}


@dataclass
class BenchBroker:
    """A broker a benchmark started: its address, and its processes for their CPU time."""

    name: str
    bootstrap: str
    pids: tuple[int, ...]
    #: ``http://127.0.0.1:PORT/metrics`` when the broker was started with its metrics port on.
    metrics_url: str | None = None

    def cpu_seconds(self) -> float:
        """User plus system CPU time its processes have used so far (all their threads)."""
        return sum(cpu_seconds(pid) for pid in self.pids)


def _settings(items: list[str] | None) -> dict[str, str]:
    return dict(item.split("=", 1) for item in items or [])


@contextlib.contextmanager
def started_broker(name: str = "onceflow", overrides: list[str] | None = None,
                   metrics: bool = False) -> Iterator[BenchBroker]:
    """Start one of ``BROKERS`` on a free loopback port with a temporary data directory.

    Apache Kafka comes from the reference Maven project (``onceflow.reference``), one KRaft node
    with Kafka's own JVM options and a 1 GiB heap, as ``kafka-server-start.sh`` runs it.
    ``metrics``: Onceflow only, with ``metrics.port`` on a free loopback port."""
    if name not in BROKERS:
        raise ValueError(f"--broker must be one of {', '.join(BROKERS)}, not {name!r}")
    settings = {**BROKERS[name], **_settings(overrides)}
    if name != "onceflow":
        if metrics:
            raise ValueError(f"only the onceflow broker has a metrics port, not {name!r}")
        from ..reference import KafkaCluster

        with KafkaCluster(overrides=settings) as cluster:
            pids = tuple(node.proc.pid for node in cluster.nodes.values() if node.proc is not None)
            yield BenchBroker(name, cluster.bootstrap_servers, pids)
        return
    metrics_url = None
    if metrics:
        port = free_port()
        settings["metrics.port"] = str(port)
        metrics_url = f"http://127.0.0.1:{port}/metrics"
    # The broker's warnings go where the benchmark's progress does.
    with BrokerProcess(overrides=settings, log_level="WARNING", log_to_stderr=True) as broker:
        assert broker.proc is not None
        yield BenchBroker(name, broker.bootstrap_servers, (broker.proc.pid,), metrics_url)


class Scraper:
    """Prometheus' part in a benchmark: GET ``url`` every ``every`` seconds on a background thread
    until stopped, counting the scrapes, the failures and each scrape's time (request to last byte)."""

    TIMEOUT_S = 5.0

    def __init__(self, url: str, every: float) -> None:
        self.url = url
        self.every = every
        self.times_ms: list[float] = []
        self.failures = 0
        self.last_error = ""
        self.body_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-scraper", daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(self.TIMEOUT_S + 1)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=self.TIMEOUT_S) as response:
                    self.body_bytes = len(response.read())
                self.times_ms.append((time.perf_counter() - t0) * 1000)
            except (OSError, http.client.HTTPException) as exc:  # URLError, HTTPError, timeouts, refused, cut short
                self.failures += 1
                self.last_error = str(exc)
            next_at += self.every  # a fixed rate, as Prometheus' scrape_interval; a late scrape is not made up
            self._stop.wait(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic())

    def summary(self) -> dict[str, float]:
        times = self.times_ms
        return {"scrapes": len(times), "scrape_failures": self.failures,
                "scrape_median_ms": round(statistics.median(times), 2) if times else 0.0,
                "scrape_max_ms": round(max(times), 2) if times else 0.0, "scrape_bytes": self.body_bytes}

    def line(self) -> str:
        s = self.summary()
        text = (f"scraped {self.url} every {self.every:g} s: {s['scrapes']:.0f} scrapes, {s['scrape_failures']:.0f} failed, "
                f"median {s['scrape_median_ms']:.1f} ms, max {s['scrape_max_ms']:.1f} ms, {s['scrape_bytes']:.0f} bytes")
        return text + (f" (last failure: {self.last_error})" if self.failures else "")


def create_topic(bootstrap: str, topic: str, partitions: int, client: ClientSettings = NO_SETTINGS,
                 timeout: float = 30.0) -> bool:
    """Create ``topic``; False if it already existed (a ``--topic`` given: used as it is)."""
    import concurrent.futures

    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client.librdkafka(bootstrap))
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                  request_timeout=timeout)
    for fut in futures.values():
        try:
            fut.result(timeout + 5)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            raise
        except concurrent.futures.TimeoutError:
            raise BenchError(f"topic {topic!r} not created: no answer from {bootstrap} within {timeout:g}s") from None
    return True


def count_records(bootstrap: str, topic: str, client: ClientSettings = NO_SETTINGS) -> int:
    """Offsets in the topic's partitions (records, and markers if any)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(client.librdkafka(bootstrap, **{"group.id": f"bench-count-{uuid.uuid4()}"}))
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        total = 0
        for p in partitions:
            low, high = _watermarks(consumer, TopicPartition(topic, p))
            total += high - low
        return total
    finally:
        consumer.close()


def _watermarks(consumer: Any, partition: Any, timeout_s: float = 30) -> tuple[int, int]:
    """The partition's watermarks, asked again while the answer is retriable: Apache Kafka answers
    NOT_LEADER_OR_FOLLOWER for a moment after a topic is created, until its leader is known."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(partition, timeout=timeout_s)
            return int(low), int(high)
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class _Delivery:
    def __init__(self) -> None:
        self.delivered = 0
        self.errors = 0
        self.first_error = ""

    def __call__(self, err: object, _msg: object) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.errors += 1
            if not self.first_error:
                from ..clienterrors import kafka_error_text

                self.first_error = kafka_error_text(err)

    def check(self, undelivered: int = 0) -> None:
        """``BenchError`` if a record failed (the first error named) or stayed undelivered."""
        if self.errors or undelivered:
            first = f" (the first: {self.first_error})" if self.first_error else ""
            raise BenchError(f"{self.errors} records failed{first}, {undelivered} undelivered")


def _producer_config(bootstrap: str, linger_ms: int, client: ClientSettings, **extra: object) -> dict[str, object]:
    """The benchmark's producer settings, under the workload's own (``extra``), the user's client
    settings (``-X``: security, mostly) over both."""
    return client.librdkafka(bootstrap, **{
        # A topic deleted under a producer (Ctrl-C's cleanup) is not created again by its metadata requests.
        "allow.auto.create.topics": False,
        "linger.ms": linger_ms,
        "batch.size": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "queue.buffering.max.messages": 1_000_000,
        **extra,
    })


def _flush(producer: Any, report: _Delivery, progress: Progress, what: str) -> int:
    """Flush, a short wait at a time (Ctrl-C is seen between two), for up to ``TIMEOUT_S``; the
    records still undelivered then."""
    deadline = time.monotonic() + TIMEOUT_S
    while (remaining := producer.flush(0.2)) and time.monotonic() < deadline:
        progress(f"{what}: waiting for {remaining:,} acknowledgements ({report.delivered:,} records so far)")
    return int(remaining)


def bench_produce(bootstrap: str, topic: str, record_size: int, seconds: float, acks: str, linger_ms: int,
                  idempotent: bool = False, client: ClientSettings = NO_SETTINGS, progress: Progress = _quiet) -> Result:
    from confluent_kafka import Producer

    name = f"produce acks={acks}" + (" idempotent" if idempotent else "")
    producer = Producer(_producer_config(bootstrap, linger_ms, client, acks=acks, **{"enable.idempotence": idempotent}))
    payload = os.urandom(record_size)
    report = _Delivery()
    chunk = [{"value": payload} for _ in range(10_000)]
    producer.produce(topic, payload, on_delivery=report)  # warm up: connections, metadata
    producer.flush(30)
    report.check()
    report.delivered = 0
    start = time.perf_counter()
    deadline = start + seconds
    while (now := time.perf_counter()) < deadline:
        producer.produce_batch(topic, chunk, on_delivery=report)
        producer.poll(0)
        while len(producer) > 500_000:
            producer.poll(0.01)
        progress(f"{name}: {now - start:.0f} of {seconds:g} s, {report.delivered:,} records acknowledged")
    remaining = _flush(producer, report, progress, name)
    elapsed = time.perf_counter() - start
    report.check(remaining)
    return Result(name, report.delivered, report.delivered * record_size, elapsed)


def bench_txn_produce(bootstrap: str, topic: str, record_size: int, seconds: float, commit_interval_ms: int,
                      linger_ms: int, client: ClientSettings = NO_SETTINGS, progress: Progress = _quiet) -> Result:
    """A transactional producer committing every ``commit_interval_ms``."""
    from confluent_kafka import Producer

    producer = Producer(_producer_config(bootstrap, linger_ms, client, **{"transactional.id": f"bench-{uuid.uuid4()}"}))
    producer.init_transactions(30)
    payload = os.urandom(record_size)
    report = _Delivery()
    chunk = [{"value": payload} for _ in range(2_000)]
    commits = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        producer.begin_transaction()
        commit_at = time.perf_counter() + commit_interval_ms / 1000
        while time.perf_counter() < commit_at:
            producer.produce_batch(topic, chunk, on_delivery=report)
            producer.poll(0)
            while len(producer) > 500_000:
                producer.poll(0.005)
        producer.commit_transaction(TIMEOUT_S)
        commits += 1
        progress(f"txn-produce: {time.perf_counter() - start:.0f} of {seconds:g} s, {commits:,} commits, "
                 f"{report.delivered:,} records")
    elapsed = time.perf_counter() - start
    report.check()
    return Result(f"txn-produce commit every {commit_interval_ms} ms", report.delivered, report.delivered * record_size,
                  elapsed, {"commits": commits})


def bench_commit_latency(bootstrap: str, topic: str, record_size: int, transactions: int, records_per_txn: int,
                         client: ClientSettings = NO_SETTINGS, progress: Progress = _quiet) -> Result:
    """begin, ``records_per_txn`` records, commit: the commit call's latency, one transaction at a time."""
    from confluent_kafka import Producer

    producer = Producer(_producer_config(bootstrap, 0, client, **{"transactional.id": f"bench-{uuid.uuid4()}"}))
    producer.init_transactions(30)
    payload = os.urandom(record_size)
    latencies = []
    start = time.perf_counter()
    for n in range(transactions):
        producer.begin_transaction()
        for _ in range(records_per_txn):
            producer.produce(topic, payload)
        producer.flush(TIMEOUT_S)  # the records are written; what follows is the commit itself
        t0 = time.perf_counter()
        producer.commit_transaction(TIMEOUT_S)
        latencies.append((time.perf_counter() - t0) * 1000)
        progress(f"commit-latency: {n + 1:,} of {transactions:,} transactions")
    elapsed = time.perf_counter() - start
    latencies.sort()
    n = transactions * records_per_txn
    return Result(f"commit-latency {records_per_txn} records/txn", n, n * record_size, elapsed, {
        "p50_ms": round(_percentile(latencies, 0.50), 3), "p99_ms": round(_percentile(latencies, 0.99), 3),
        "max_ms": round(latencies[-1], 3),
        "mean_ms": round(statistics.fmean(latencies), 3)})


#: txn-rate's shapes: records per transaction, and concurrent transactional producers.
TXN_RATE_RECORDS = (1, 10, 100)
TXN_RATE_PRODUCERS = (1, 4)
#: Transactions each producer runs before the clock starts (connections, metadata, coordinator).
TXN_WARMUP = 20


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_txn_rate(bootstrap: str, topic: str, record_size: int, seconds: float, records_per_txn: int,
                   producers: int, partitions: int, client: ClientSettings = NO_SETTINGS,
                   progress: Progress = _quiet) -> Result:
    """Transactions per second: ``producers`` transactional producers, each on its own thread,
    run begin, ``records_per_txn`` records (spread over the partitions), commit, back to back for
    ``seconds``.  The commit latency is ``commit_transaction()`` called right after the records
    are produced, so it includes their own acks=all write, as an application sees it."""
    import threading

    from confluent_kafka import KafkaException, Producer

    payload = os.urandom(record_size)
    start_line = threading.Barrier(producers + 1)
    stop = threading.Event()
    counts = [0] * producers
    latencies: list[list[float]] = [[] for _ in range(producers)]
    errors: list[KafkaException] = []

    def one_transaction(producer: Producer, first: int) -> float:
        producer.begin_transaction()
        for i in range(records_per_txn):
            producer.produce(topic, payload, partition=(first + i) % partitions)
        t0 = time.perf_counter()
        producer.commit_transaction(TIMEOUT_S)
        return (time.perf_counter() - t0) * 1000

    def run(index: int) -> None:
        try:
            producer = Producer(_producer_config(bootstrap, 0, client, **{"transactional.id": f"bench-{uuid.uuid4()}"}))
            producer.init_transactions(TIMEOUT_S)
            for n in range(TXN_WARMUP):
                one_transaction(producer, index + n)
        except KafkaException as exc:  # reported by the caller, after the barrier
            errors.append(exc)
            start_line.abort()
            return
        try:
            start_line.wait(TIMEOUT_S)
        except threading.BrokenBarrierError:
            return  # another producer could not start: its error is reported
        n = 0
        try:
            while not stop.is_set():
                latencies[index].append(one_transaction(producer, index + n))
                n += 1
        except KafkaException as exc:
            errors.append(exc)
        counts[index] = n

    threads = [threading.Thread(target=run, args=(i,), name=f"bench-txn-{i}") for i in range(producers)]
    for thread in threads:
        thread.start()
    try:
        start_line.wait(TIMEOUT_S)
    except threading.BrokenBarrierError:
        stop.set()  # a producer could not start: no run, its error is raised below
    start = time.perf_counter()
    shape = f"txn-rate {records_per_txn} records/txn, {producers} producer(s)"
    try:
        while (left := start + seconds - time.perf_counter()) > 0 and not stop.wait(min(REDRAW_S, left)):
            progress(f"{shape}: {time.perf_counter() - start:.0f} of {seconds:g} s, "
                     f"{sum(len(x) for x in latencies):,} transactions")
    finally:  # Ctrl-C too: the producers stop at their next transaction
        stop.set()
    for thread in threads:
        thread.join(TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if errors:
        from ..clienterrors import error_line

        raise BenchError(f"txn-rate: {error_line(errors[0])}")
    ordered = sorted(x for per_producer in latencies for x in per_producer)
    transactions = sum(counts)
    n = transactions * records_per_txn
    return Result(shape, n, n * record_size, elapsed, {
        "txn_per_s": round(transactions / elapsed, 1), "p50_ms": round(_percentile(ordered, 0.50), 3),
        "p99_ms": round(_percentile(ordered, 0.99), 3), "max_ms": round(ordered[-1], 3)})


def bench_consume(bootstrap: str, topic: str, records: int, isolation: str = "read_uncommitted",
                  client: ClientSettings = NO_SETTINGS, progress: Progress = _quiet) -> Result:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(client.librdkafka(bootstrap, **{
        "group.id": f"bench-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760,
        "queued.max.messages.kbytes": 1_048_576,
    }))
    metadata = consumer.list_topics(topic, timeout=30)
    partitions = sorted(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    count = nbytes = 0
    start = None
    deadline = time.monotonic() + 600
    while count < records and time.monotonic() < deadline:
        batch = consumer.consume(10_000, 1.0)
        if start is None and batch:
            start = time.perf_counter()
        for msg in batch:
            if msg.error() is None:
                count += 1
                nbytes += len(msg.value() or b"")
        progress(f"consume {isolation}: {count:,} of {records:,} records")
    elapsed = time.perf_counter() - (start or time.perf_counter())
    consumer.close()
    if count < records:
        raise BenchError(f"only {count} of {records} records arrived")
    return Result(f"consume {isolation}", count, nbytes, elapsed)


def bench_read_committed(bootstrap: str, topic: str, record_size: int, records: int, records_per_txn: int,
                         client: ClientSettings = NO_SETTINGS, progress: Progress = _quiet) -> list[Result]:
    """Fill ``topic`` with transactions, every other one aborted; read it all with both isolation levels.

    Throughput is reported as log offsets covered per second (records fetched,
    whether delivered or filtered), so the two levels are compared on the same work.
    """
    from confluent_kafka import Producer

    producer = Producer(_producer_config(bootstrap, 5, client, **{"transactional.id": f"bench-{uuid.uuid4()}"}))
    producer.init_transactions(30)
    payload = os.urandom(record_size)
    transactions = max(2, records // records_per_txn)
    for i in range(transactions):
        producer.begin_transaction()
        producer.produce_batch(topic, [{"value": payload}] * records_per_txn)
        if i % 2:
            producer.flush(TIMEOUT_S)
            producer.abort_transaction(TIMEOUT_S)
        else:
            producer.commit_transaction(TIMEOUT_S)
        progress(f"read-committed: writing, {i + 1:,} of {transactions:,} transactions")
    total = transactions * records_per_txn
    committed = (transactions + 1) // 2 * records_per_txn
    results = []
    for isolation, expected in (("read_uncommitted", total), ("read_committed", committed)):
        got = bench_consume(bootstrap, topic, expected, isolation, client, progress)
        # Both runs cover the same log range: rate it on the whole range.
        results.append(Result(f"read {isolation} over a half-aborted topic", total, total * record_size, got.seconds,
                              {"delivered": got.records}))
    return results
