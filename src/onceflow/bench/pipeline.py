"""``onceflow bench pipeline``: the payments pipeline end to end, and the Spark source alone.

1. End to end: exactly-once, then a baseline (``--baseline``: at-least-once,
   onceflow's sink without transactions, the default; or ``spark-kafka``,
   Spark's own JVM Kafka sink, at-least-once, its jars resolved by
   ``onceflow.reference.spark_kafka_classpath``), on the same input (the same
   seed), each with a fresh ``onceflow broker`` process,
   the three topics, the payments written (not timed), then the Spark driver
   (``pipelines.payments``) run until both queries have caught up.  The
   figure is committed payments per second, from the queries' start to
   caught up (Spark's start-up before that is not counted).
2. The source alone: a topic of ``--records`` records of ``--record-size``
   bytes, read once by Spark (``spark.read.format("onceflow")`` into the
   ``noop`` sink, so that Spark does nothing else) and once by a plain
   confluent-kafka consumer, both read_committed, in records/s and MB/s.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from ..pipelines import payments as pipeline
from ..spark import worker_python
from .procstat import ProcessSampler, usage_extra
from .workloads import Result, bench_txn_produce, count_records, create_topic, median_result, started_broker

#: ``--baseline`` choices: what the exactly-once pipeline is compared with.
BASELINES = ("at-least-once", "spark-kafka")


def bench_pipeline(payments: int, master: str, overrides: list[str], baseline: str = "at-least-once",
                   rounds: int = 1) -> list[Result]:
    """``rounds`` pairs, exactly-once then the baseline, interleaved; each run's figure, then (with
    more than one round) the medians and the median of the pairs' ratios."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {', '.join(BASELINES)}")
    if baseline == "spark-kafka":
        from ..reference import spark_kafka_classpath

        spark_kafka_classpath()  # resolve it (Maven, once) before anything is timed; says what is missing
    key = "of_" + baseline.replace("-", "_")
    results, ratios = [], []
    for _ in range(rounds):
        eos, base = (_pipeline_once(payments, master, overrides, guarantee) for guarantee in ("exactly-once", baseline))
        eos.extra[key] = round(eos.records_per_s / base.records_per_s, 3)
        ratios.append(eos.extra[key])
        results += [eos, base]
    if rounds > 1:
        medians = [median_result(f"median of {rounds}: {run.name}", results[i::2]) for i, run in enumerate(results[:2])]
        medians[0].extra[key] = round(statistics.median(ratios), 3)
        results += medians
    return results


def _pipeline_once(payments: int, master: str, overrides: list[str], guarantee: str) -> Result:
    workdir = Path(tempfile.mkdtemp(prefix="onceflow-bench-pipeline-"))
    try:
        with started_broker("onceflow", overrides) as broker:
            pipeline.create_topics(broker.bootstrap)
            generated = pipeline.generate(broker.bootstrap, payments)
            driver = pipeline.DriverProcess(broker.bootstrap, str(workdir / "checkpoints"), str(workdir / "driver.log"),
                                            master=master, delivery_guarantee=guarantee)
            with ProcessSampler({"broker": broker.pids[0]}) as sampler:
                seconds = pipeline.run_until_caught_up(driver, generated,
                                                       on_start=lambda pid: sampler.roots.update(driver=pid))
            report = pipeline.verify(broker.bootstrap, generated)
            if not report.ok and guarantee == "exactly-once":
                raise RuntimeError(f"the exactly-once run failed its checks: {report.problems()}")
            n = len(generated.committed)
            extra: dict[str, float] = {"payments_per_s": round(n / seconds)}
            if not report.ok:  # an at-least-once baseline may duplicate, but not here: no faults
                extra["duplicates"], extra["missing"] = report.duplicates, report.missing
            return Result(f"pipeline {guarantee} ({master})", n, n * 24, seconds, {**extra, **usage_extra(sampler)})
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def bench_source(records: int, record_size: int, partitions: int, master: str, overrides: list[str],
                 baseline: str | None = None, rounds: int = 1) -> list[Result]:
    """One topic (about ``records`` records written in transactions), read read_committed into
    Spark's ``noop`` sink by our source and, with ``baseline="spark-kafka"``, by Spark's JVM Kafka
    source in the same session, then by a plain consumer; ``rounds`` times, interleaved, after a
    warm-up read each.  Medians, and the median of the pairs' ratios."""
    os.environ.setdefault("PYSPARK_PYTHON", worker_python.path())
    from pyspark.sql import SparkSession

    import onceflow.spark

    if baseline not in (None, "spark-kafka"):
        raise ValueError("the source's baseline is spark-kafka (Spark's own Kafka source) or none")
    jars = []
    if baseline == "spark-kafka":
        from ..reference import spark_kafka_classpath

        jars = spark_kafka_classpath()
    topic = f"bench-source-{uuid.uuid4().hex[:8]}"
    with started_broker("onceflow", overrides) as broker:
        bootstrap = broker.bootstrap
        create_topic(bootstrap, topic, partitions)
        while count_records(bootstrap, topic) < records:  # about what was asked for: a short fill at a time
            bench_txn_produce(bootstrap, topic, record_size, max(0.5, records * record_size / 600e6), 100, 5)
        builder = SparkSession.builder.master(master).appName("onceflow-bench-source").config("spark.ui.enabled", "false")
        if jars:
            builder = builder.config("spark.jars", ",".join(jars))
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        onceflow.spark.register(spark)
        frames = {f"onceflow source ({master}, {partitions} partitions)": "onceflow"}
        if baseline:
            frames[f"Spark's Kafka source ({master}, {partitions} partitions)"] = "kafka"
        loaded = {name: (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                         .option("startingOffsets", "earliest").option("kafka.isolation.level", "read_committed").load())
                  for name, fmt in frames.items()}
        total = _plain_read(bootstrap, topic, partitions)[1]  # the committed records, markers not counted
        for frame in loaded.values():
            frame.write.format("noop").mode("overwrite").save()  # warm up the workers and the plan
        runs: dict[str, list[Result]] = {name: [] for name in [*loaded, "plain confluent-kafka consumer"]}
        for _ in range(rounds):
            for name, frame in loaded.items():
                with ProcessSampler({"broker": broker.pids[0], "driver": os.getpid()}) as sampler:
                    start = time.perf_counter()
                    frame.write.format("noop").mode("overwrite").save()
                    seconds = time.perf_counter() - start
                runs[name].append(Result(name, total, total * record_size, seconds, usage_extra(sampler)))
            with ProcessSampler({"broker": broker.pids[0], "driver": os.getpid()}) as sampler:
                seconds, _ = _plain_read(bootstrap, topic, partitions)
            runs["plain confluent-kafka consumer"].append(
                Result("plain confluent-kafka consumer", total, total * record_size, seconds, usage_extra(sampler)))
        spark.stop()
    results = [median_result(f"{name}, median of {rounds}" if rounds > 1 else name, of) for name, of in runs.items()]
    ours, *others = runs.values()
    for key, other in zip(["of_spark_kafka"] * bool(baseline) + ["of_plain_consumer"], others, strict=True):
        pairs = zip(ours, other, strict=True)
        results[0].extra[key] = round(statistics.median(a.records_per_s / b.records_per_s for a, b in pairs), 3)
    return results


def _plain_read(bootstrap: str, topic: str, partitions: int) -> tuple[float, int]:
    """Seconds to read the whole topic read_committed with a plain consumer, and the records read."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True, "log_level": 3})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen = 0
    at_end: set[int] = set()
    start = time.perf_counter()
    deadline = time.monotonic() + 600
    while len(at_end) < partitions and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 0.5):
            error = message.error()
            if error is None:
                seen += 1
            elif error.code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition() or 0)
    elapsed = time.perf_counter() - start
    consumer.close()
    if len(at_end) < partitions:
        raise TimeoutError(f"the plain consumer did not reach the end of {topic} within 600 s")
    return elapsed, seen
