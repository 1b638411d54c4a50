"""A Spark driver as its own process, so a test can SIGKILL it in the middle of a micro-batch.

    python driver.py BOOTSTRAP INPUT OUTPUT CHECKPOINT [--available-now] [--max-offsets N]
                     [--master URL] [--conf KEY=VALUE ...]

Reads INPUT with the onceflow source, upper-cases each value, and writes it to OUTPUT with the
exactly-once onceflow sink, checkpointing in CHECKPOINT (a test makes its tasks pause inside
their transactions with ``onceflow.spark.faults``, so that a kill lands inside a batch).  It
prints ``started`` once the query runs and ``batch N`` after each micro-batch.  With
``--available-now`` it processes what is there and exits 0; otherwise it runs until killed
(or for at most ``RUN_AT_MOST_S``).  ``--master`` is ``local[2,4]`` unless a test runs it on a
cluster (test_cluster.py), with the cluster's settings as ``--conf``.
"""

from __future__ import annotations

import argparse
import os
import time

from onceflow.spark import worker_python

RUN_AT_MOST_S = 300


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("checkpoint")
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--max-offsets", type=int, default=0)
    parser.add_argument("--master", default="local[2,4]")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = worker_python.path()  # PySpark imported with its bytecode cached
    from pyspark.sql import SparkSession

    import onceflow.spark

    builder = (SparkSession.builder.master(args.master).appName("onceflow-test-driver")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2"))
    for setting in args.conf:
        key, _, value = setting.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    onceflow.spark.register(spark)
    reader = (spark.readStream.format("onceflow").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input).option("startingOffsets", "earliest"))
    if args.max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets))
    frame = reader.load().selectExpr("key", "upper(CAST(value AS STRING)) AS value")
    writer = (frame.writeStream.format("onceflow").option("kafka.bootstrap.servers", args.bootstrap)
              .option("topic", args.output).option("checkpointLocation", args.checkpoint))
    writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime="100 milliseconds")
    query = writer.start()
    print("started", flush=True)
    seen = -1
    deadline = time.monotonic() + RUN_AT_MOST_S
    while query.isActive and time.monotonic() < deadline:
        progress = query.lastProgress
        if progress is not None and progress["batchId"] > seen:
            seen = progress["batchId"]
            print(f"batch {seen}", flush=True)
        query.awaitTermination(0.1)
    if query.exception() is not None:
        print(f"failed {query.exception()}", flush=True)
        return 1
    query.stop()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
