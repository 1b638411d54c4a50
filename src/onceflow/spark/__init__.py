"""Exactly-once pipelines on Apache Spark: the ``onceflow`` data source for PySpark.

    import onceflow.spark
    onceflow.spark.register(spark)
    stream = (spark.readStream.format("onceflow")
              .option("kafka.bootstrap.servers", "127.0.0.1:9092")
              .option("subscribe", "payments").load())
    (stream.selectExpr("key", "upper(value) AS value").writeStream.format("onceflow")
           .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("topic", "ledger")
           .option("checkpointLocation", "/tmp/ckpt").start())

It speaks only standard Kafka APIs, through confluent-kafka, so the same
pipeline runs against Onceflow or an Apache Kafka cluster.  Option names and
the row schema are those of Spark's built-in Kafka connector.  The layout:

* ``options``: options parsed and checked once (clear errors naming the option);
* ``ranges``: offset ranges per micro-batch, rate limits (pure functions);
* ``kafka``: the Kafka I/O (partitions, offsets, reading a range into Arrow);
* ``protocol``: the exactly-once sink's decisions, pure (what a task does, given what it reads);
* ``progress``: the progress topics that keep each slot's record;
* ``sink``: a write task's steps against Kafka (one transaction per query,
  micro-batch and task partition), and the driver's commit;
* ``source``, ``writer``: the thin PySpark adapters over all of these, joined by
  ``datasource`` (what ``register`` registers);
* ``foreach_batch``: ``write_exactly_once`` for ``foreachBatch`` (several
  topics atomically per task);
* ``faults`` (test-only task faults), ``worker_python`` (``onceflow-spark-python``).

Install with ``pip install 'onceflow[spark]'`` (PySpark 4.2 or newer, pyarrow); without it
the package imports, and ``register`` says what to install.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

__all__ = ["EXTRA_MODULES", "FORMAT", "missing_modules", "register", "write_exactly_once"]

FORMAT = "onceflow"

#: What the ``spark`` extra installs that the connector imports (``pip install 'onceflow[spark]'``).
EXTRA_MODULES = ("pyspark", "pyarrow", "pandas")


def missing_modules(also: Sequence[str] = ()) -> list[str]:
    """The modules of the ``spark`` extra (and ``also``) that are not installed, without importing any."""
    return [name for name in (*EXTRA_MODULES, *also) if importlib.util.find_spec(name) is None]


def register(spark: Any) -> None:
    """Register the ``onceflow`` format with a SparkSession."""
    from .datasource import OnceflowDataSource

    spark.dataSource.register(OnceflowDataSource)


def __getattr__(name: str) -> Any:  # the foreachBatch helper imports PySpark only when used
    if name == "write_exactly_once":
        from .foreach_batch import write_exactly_once

        return write_exactly_once
    raise AttributeError(name)
