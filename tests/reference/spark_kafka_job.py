"""Spark's own JVM Kafka connector (``spark-sql-kafka-0-10``) against one broker, in a process of its
own (a PySpark process has one SparkContext; the Spark tests' session has no Kafka jars).

    .venv/bin/python tests/reference/spark_kafka_job.py BOOTSTRAP WRITE_TOPIC GAP_TOPIC CHECKPOINT_DIR

1. A batch write with ``format("kafka")`` of ``ROWS`` rows to WRITE_TOPIC, then a batch read of
   it back.
2. GAP_TOPIC (filled by the caller with committed and aborted transactions) read by a streaming
   query, ``startingOffsets=earliest``, ``kafka.isolation.level=read_committed`` and
   ``failOnDataLoss`` left at its default (true), ``trigger(availableNow=True)`` into the memory
   sink; and the same read as a batch query.

The last stdout line is one JSON object with what each step saw, or the error it failed with.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

from onceflow.reference import spark_kafka_classpath

ROWS = 100
QUERY_TIMEOUT_S = 240


def _error(exc: BaseException) -> dict[str, str]:
    text = str(exc)
    return {"error_class": type(exc).__name__, "error": text[:3000]}


def _end_offsets(progress: Any) -> Any:
    """The micro-batch's end offsets of its one topic, {partition: offset} (Spark gives JSON text)."""
    end = _progress(progress)["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    return next(iter(end.values()))


def _stream(spark: Any, options: dict[str, str], name: str, checkpoint: str) -> dict[str, Any]:
    """A streaming read of the options' topic, availableNow, into the memory sink ``name``."""
    try:
        query = (spark.readStream.format("kafka").options(**options).load()
                 .selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
                 .writeStream.format("memory").queryName(name)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        finished = query.awaitTermination(QUERY_TIMEOUT_S)
        if not finished:
            query.stop()
        seen = spark.sql(f"SELECT v, partition, offset FROM {name} ORDER BY partition, offset").collect()
        exception = query.exception()
        progress = [p for p in query.recentProgress if _rows(p) is not None]
        return {
            "finished": bool(finished), "error": None if exception is None else str(exception)[:3000],
            "values": [r.v for r in seen], "offsets": [[r.partition, r.offset] for r in seen],
            "end_offsets": _end_offsets(progress[-1]) if progress else None,
            "batch_rows": [_rows(p) for p in progress],
        }
    except Exception as exc:  # noqa: BLE001 -- any failure is the result
        return _error(exc)


def _progress(progress: Any) -> dict[str, Any]:
    return json.loads(progress.json) if hasattr(progress, "json") else dict(progress)


def _rows(progress: Any) -> int | None:
    data = _progress(progress)
    return data["numInputRows"] if data.get("sources") else None


def main(bootstrap: str, write_topic: str, gap_topic: str, checkpoint: str) -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("spark-kafka-connector-check")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.jars", ",".join(spark_kafka_classpath()))
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kafka = {"kafka.bootstrap.servers": bootstrap}
    result: dict[str, Any] = {"spark_version": spark.version}
    try:
        # 1. Batch write, batch read back.
        rows = [(f"k{i}", f"v{i}") for i in range(ROWS)]
        frame = spark.createDataFrame(rows, "key string, value string")
        try:
            frame.write.format("kafka").options(**kafka).option("topic", write_topic).save()
            back = (spark.read.format("kafka").options(**kafka).option("subscribe", write_topic)
                    .option("startingOffsets", "earliest").option("endingOffsets", "latest").load()
                    .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "partition", "offset")
                    .collect())
            result["batch"] = {"written": ROWS, "read": len(back),
                               "pairs_match": sorted((r.k, r.v) for r in back) == sorted(rows),
                               "partitions": sorted({r.partition for r in back})}
        except Exception as exc:  # noqa: BLE001 -- any failure is the result
            result["batch"] = _error(exc)

        # 2. Streaming read_committed over the aborted transactions' offset gaps: in one
        #    micro-batch, and in micro-batches of at most 3 offsets (their ranges start and end
        #    inside the gaps).
        gap_options = {**kafka, "subscribe": gap_topic, "startingOffsets": "earliest",
                       "kafka.isolation.level": "read_committed"}
        result["stream"] = _stream(spark, gap_options, "gap_stream", checkpoint)
        result["stream_small_batches"] = _stream(spark, {**gap_options, "maxOffsetsPerTrigger": "3"},
                                                 "gap_stream_small", checkpoint + "-small")
        try:
            batch = (spark.read.format("kafka").options(**gap_options).option("endingOffsets", "latest").load()
                     .selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
                     .orderBy("partition", "offset").collect())
            result["gap_batch"] = {"values": [r.v for r in batch], "offsets": [[r.partition, r.offset] for r in batch]}
        except Exception as exc:  # noqa: BLE001 -- any failure is the result
            result["gap_batch"] = _error(exc)
    finally:
        spark.stop()
    return result


if __name__ == "__main__":
    try:
        out = main(*sys.argv[1:5])
    except Exception as exc:  # noqa: BLE001 -- Spark did not even start: the test shows why
        traceback.print_exc()
        out = _error(exc)
    print(json.dumps(out), flush=True)
