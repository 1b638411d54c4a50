"""The ``onceflow`` format, found by Spark without ``onceflow.spark.register``.

Spark looks for Python data sources once per JVM, the first time a query
names a format it does not know: its lookup worker imports every top-level
module whose name starts with ``pyspark_`` and registers the ``DefaultSource``
it defines under that class's ``name()`` (PySpark's
``sql/worker/lookup_data_sources.py``).  This module is that entry for
Onceflow: with ``onceflow[spark]`` installed in the Python Spark starts for
its workers, ``format("onceflow")`` works in classic PySpark, through Spark
Connect and in Spark Declarative Pipelines, registered or not.

Registered this way, the source is part of the server, not of a session.
That matters in Declarative Pipelines: PySpark 4.3's ``spark-pipelines``
fails at the end of a run (``UNKNOWN_RESPONSE ... __python_accumulator__``)
when a data source was registered by the pipeline's session, because its
client does not expect the Python accumulator results the server then sends
(README, "Spark Declarative Pipelines").

Without the ``spark`` extra (no pyarrow, say), or with an install of ours
broken in any other way, nothing is defined and Spark skips this module: the
lookup imports every ``pyspark_*`` module in one worker, and an exception here
would fail the lookup of every other Python data source too.
"""

try:
    from onceflow.spark.datasource import OnceflowDataSource as DefaultSource  # noqa: F401 (what Spark looks up)
except Exception:  # noqa: BLE001 - see above: register() still says what is missing
    pass
