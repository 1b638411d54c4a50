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
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["EXTRA_MODULES", "FORMAT", "missing_modules", "register", "write_exactly_once"]

FORMAT = "onceflow"

log = logging.getLogger(__name__)

#: What the ``spark`` extra installs that the connector imports (``pip install 'onceflow[spark]'``).
EXTRA_MODULES = ("pyspark", "pyarrow", "pandas")


def missing_modules(also: Sequence[str] = ()) -> list[str]:
    """The modules of the ``spark`` extra (and ``also``) that are not installed, without importing any."""
    return [name for name in (*EXTRA_MODULES, *also) if importlib.util.find_spec(name) is None]


def register(spark: Any) -> None:
    """Register the ``onceflow`` format with a SparkSession: classic or Spark Connect.

    With ``onceflow[spark]`` installed in the Python Spark runs for its workers the format is
    found without it too (``pyspark_onceflow``); calling it is still right in classic PySpark.

    * Local mode, classic: when neither ``PYSPARK_PYTHON`` nor ``spark.pyspark.python`` says
      which Python the workers run, Spark starts ``python3`` from ``PATH``, which may not be
      this interpreter (a virtual environment not activated).  Then the workers are given
      this driver's Python (``worker_python.path()``), and a line says so.  On a cluster
      nothing is guessed: the executors' Python is the cluster's to name (README).
    * Inside Spark Declarative Pipelines' definitions nothing is registered: the format comes
      from ``pyspark_onceflow`` there, because PySpark 4.3's ``spark-pipelines`` fails at the end
      of a run when the pipeline's session registered a data source (README).
    """
    if _in_pipeline_definitions():
        log.info("onceflow: in a Spark Declarative Pipeline the onceflow format is found through "
                 "pyspark_onceflow; nothing to register")
        return
    from .datasource import OnceflowDataSource

    _default_worker_python(spark)
    spark.dataSource.register(OnceflowDataSource)


def _in_pipeline_definitions() -> bool:
    """Whether this runs while ``spark-pipelines`` imports a pipeline's definitions."""
    registry = sys.modules.get("pyspark.pipelines.graph_element_registry")
    if registry is None:
        return False
    try:
        registry.get_active_graph_element_registry()
    except Exception:  # noqa: BLE001 - PySpark raises its own error class when there is none
        return False
    return True


def _default_worker_python(spark: Any) -> None:
    """In classic local mode with no worker Python named, run the workers with this one."""
    if "pyspark.sql.connect.session" in sys.modules and isinstance(
            spark, sys.modules["pyspark.sql.connect.session"].SparkSession):
        return  # Spark Connect: the workers are the server's
    context = spark.sparkContext
    named = os.environ.get("PYSPARK_PYTHON") or context.getConf().get("spark.pyspark.python")
    if named or not context.master.startswith("local"):
        return
    from . import worker_python

    chosen = worker_python.path()
    context.pythonExec = chosen  # the Python functions made from now on (the data source's, UDFs')
    context._conf.set("spark.pyspark.python", chosen)  # the JVM's conf: Spark's own Python runners
    log.warning("onceflow: Spark's workers will run %s, this driver's Python (neither PYSPARK_PYTHON nor "
                "spark.pyspark.python was set, and python3 on PATH may lack onceflow)", chosen)


def __getattr__(name: str) -> Any:  # the foreachBatch helper imports PySpark only when used
    if name == "write_exactly_once":
        from .foreach_batch import write_exactly_once

        return write_exactly_once
    raise AttributeError(name)
