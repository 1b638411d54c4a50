"""One local SparkSession for every Spark test (starting the JVM is the slow part), with the
onceflow format registered, task retries on (``local[2,4]``: 2 cores, 4 attempts per task)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers need this venv's pyspark and onceflow
    from pyspark.sql import SparkSession

    import onceflow.spark

    session = (SparkSession.builder.master("local[2,4]").appName("onceflow-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.streaming.stopTimeout", "30s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    onceflow.spark.register(session)
    yield session
    session.stop()
