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
import sys
import tempfile
import time
import uuid
from pathlib import Path

from ..pipelines import payments as pipeline
from .workloads import Result, bench_produce, broker_process, count_records, create_topic

#: ``--baseline`` choices: what the exactly-once pipeline is compared with.
BASELINES = ("at-least-once", "spark-kafka")


def bench_pipeline(payments: int, master: str, overrides: list[str], baseline: str = "at-least-once") -> list[Result]:
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {', '.join(BASELINES)}")
    if baseline == "spark-kafka":
        from ..reference import spark_kafka_classpath

        spark_kafka_classpath()  # resolve it (Maven, once) before anything is timed; says what is missing
    results = []
    for guarantee in ("exactly-once", baseline):
        workdir = Path(tempfile.mkdtemp(prefix="onceflow-bench-pipeline-"))
        try:
            with broker_process(overrides) as bootstrap:
                pipeline.create_topics(bootstrap)
                generated = pipeline.generate(bootstrap, payments)
                driver = pipeline.DriverProcess(bootstrap, str(workdir / "checkpoints"), str(workdir / "driver.log"),
                                                master=master, delivery_guarantee=guarantee)
                seconds = pipeline.run_until_caught_up(driver, generated)
                if guarantee == "exactly-once":
                    report = pipeline.verify(bootstrap, generated)
                    if not report.ok:
                        raise RuntimeError(f"the exactly-once run failed its checks: {report.problems()}")
                n = len(generated.committed)
                results.append(Result(f"pipeline {guarantee} ({master})", n, n * 24, seconds,
                                      {"payments_per_s": round(n / seconds)}))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    eos, base = results
    eos.extra["of_" + baseline.replace("-", "_")] = round(eos.records_per_s / base.records_per_s, 3)
    return results


def bench_source(records: int, record_size: int, partitions: int, master: str, overrides: list[str]) -> list[Result]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import onceflow.spark

    topic = f"bench-source-{uuid.uuid4().hex[:8]}"
    with broker_process(overrides) as bootstrap:
        create_topic(bootstrap, topic, partitions)
        while count_records(bootstrap, topic) < records:  # about what was asked for: a short fill at a time
            bench_produce(bootstrap, topic, record_size, max(0.5, records * record_size / 600e6), "1", 5)
        total = count_records(bootstrap, topic)
        spark = (SparkSession.builder.master(master).appName("onceflow-bench-source")
                 .config("spark.ui.enabled", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        onceflow.spark.register(spark)
        frame = (spark.read.format("onceflow").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                 .option("startingOffsets", "earliest").load())
        frame.write.format("noop").mode("overwrite").save()  # warm up the workers and the plan
        start = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        spark_s = time.perf_counter() - start
        spark.stop()
        plain_s = _plain_read(bootstrap, topic, partitions, total)
    source = Result(f"spark source ({master}, {partitions} partitions)", total, total * record_size, spark_s)
    plain = Result("plain confluent-kafka consumer", total, total * record_size, plain_s)
    source.extra["of_plain_consumer"] = round(source.records_per_s / plain.records_per_s, 3)
    return [source, plain]


def _plain_read(bootstrap: str, topic: str, partitions: int, total: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "log_level": 3})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 600
    while seen < total and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 0.5):
            if message.error() is None:
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed
