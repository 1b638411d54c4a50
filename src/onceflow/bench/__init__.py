"""``onceflow bench``: throughput of a broker, measured with confluent-kafka.

    onceflow bench produce [--bootstrap-servers HOST:PORT] [--partitions 6] [--record-size 1024]
                           [--seconds 10] [--acks all]
    onceflow bench consume [--bootstrap-servers HOST:PORT] [--partitions 6] [--record-size 1024]
                           [--records 1000000]

Without ``--bootstrap-servers`` the benchmark starts the broker as a separate
process (``onceflow broker`` on a free loopback port, temporary data
directory), so client and broker each have their own interpreter, as they
would in production.  Figures are payload bytes (record values) per second.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass

DEFAULT_PARTITIONS = 6
DEFAULT_RECORD_SIZE = 1024
READY_TIMEOUT_S = 60


@dataclass
class Result:
    name: str
    records: int
    bytes: int
    seconds: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds else 0.0

    def line(self) -> str:
        return (
            f"{self.name}: {self.records} records, {self.bytes / 1e6:.1f} MB in {self.seconds:.2f} s: "
            f"{self.records_per_s:,.0f} records/s, {self.mb_per_s:.1f} MB/s"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", choices=["produce", "consume"])
    parser.add_argument("--bootstrap-servers", help="benchmark this broker instead of starting one")
    parser.add_argument("--topic", help="topic to use (default: a fresh one)")
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument("--record-size", type=int, default=DEFAULT_RECORD_SIZE)
    parser.add_argument("--seconds", type=float, default=10.0, help="produce: how long to run")
    parser.add_argument("--records", type=int, default=1_000_000, help="consume: how many records to read")
    parser.add_argument("--acks", default="all", choices=["all", "1", "0"])
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("-o", dest="override", action="append", default=[], metavar="KEY=VALUE",
                        help="broker setting for the broker the benchmark starts")
    parser.set_defaults(func=run_bench)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def broker_process(overrides: list[str] | None = None) -> Iterator[str]:
    """Run ``onceflow broker`` in a child process on a free port; yield its address."""
    data_dir = tempfile.mkdtemp(prefix="onceflow-bench-")
    port = _free_port()
    cmd = [sys.executable, "-m", "onceflow", "--log-level", "WARNING", "broker", "--data-dir", data_dir,
           "--listen", f"127.0.0.1:{port}"]
    for item in overrides or []:
        cmd += ["-o", item]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        line = ""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line or "ready on" in line:
                break
        if "ready on" not in line:
            raise RuntimeError("the broker did not start")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    for fut in futures.values():
        try:
            fut.result(30)
        except Exception as exc:  # already exists is fine for a named topic
            if "already exists" not in str(exc).lower():
                raise


def bench_produce(bootstrap: str, topic: str, record_size: int, seconds: float, acks: str, linger_ms: int) -> Result:
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "linger.ms": linger_ms,
        "batch.size": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "queue.buffering.max.messages": 1_000_000,
        "enable.idempotence": False,
    })
    payload = os.urandom(record_size)
    delivered = [0]
    errors = [0]

    def report(err: object, _msg: object) -> None:
        if err is None:
            delivered[0] += 1
        else:
            errors[0] += 1

    chunk = [{"value": payload} for _ in range(10_000)]
    # Warm up: connections, metadata, first batches.
    producer.produce(topic, payload, on_delivery=report)
    producer.flush(30)
    delivered[0] = 0
    start = time.perf_counter()
    deadline = start + seconds
    sent = 0
    while time.perf_counter() < deadline:
        producer.produce_batch(topic, chunk, on_delivery=report)
        sent += len(chunk)
        producer.poll(0)
        while len(producer) > 500_000:
            producer.poll(0.01)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    if errors[0] or remaining:
        raise RuntimeError(f"{errors[0]} delivery errors, {remaining} undelivered")
    return Result(f"produce acks={acks}", delivered[0], delivered[0] * record_size, elapsed)


def bench_consume(bootstrap: str, topic: str, records: int) -> Result:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760,
        "queued.max.messages.kbytes": 1_048_576,
    })
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
                nbytes += len(msg.value())
    elapsed = time.perf_counter() - (start or time.perf_counter())
    consumer.close()
    if count < records:
        raise RuntimeError(f"only {count} of {records} records arrived")
    return Result("consume", count, nbytes, elapsed)


def count_records(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-count-{uuid.uuid4()}"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        total = 0
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            total += high - low
        return total
    finally:
        consumer.close()


def run_bench(args: argparse.Namespace) -> int:
    topic = args.topic or f"bench-{uuid.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap_servers or stack.enter_context(broker_process(args.override))
        create_topic(bootstrap, topic, args.partitions)
        if args.workload == "produce":
            result = bench_produce(bootstrap, topic, args.record_size, args.seconds, args.acks, args.linger_ms)
        else:
            # Fill the topic first if it holds fewer records than asked for, then read them back.
            available = count_records(bootstrap, topic)
            while available < args.records:
                fill_seconds = max(1.0, (args.records - available) * args.record_size / 200e6)
                filled = bench_produce(bootstrap, topic, args.record_size, fill_seconds, "1", args.linger_ms)
                print(f"(filled the topic: {filled.line()})", file=sys.stderr)
                available = count_records(bootstrap, topic)
            result = bench_consume(bootstrap, topic, args.records)
    if args.json:
        print(json.dumps({**asdict(result), "records_per_s": result.records_per_s, "mb_per_s": result.mb_per_s}))
    else:
        print(result.line())
    return 0
