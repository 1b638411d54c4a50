"""One local SparkSession for every Spark test (starting the JVM is the slow part), with the
onceflow format registered, task retries on (``local[2,4]``: 2 cores, 4 attempts per task)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator

import pytest

FAULT_DIR = tempfile.mkdtemp(prefix="onceflow-faults-")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers need this venv's pyspark and onceflow
    os.environ["ONCEFLOW_FAULT_DIR"] = FAULT_DIR  # Spark's workers inherit it (onceflow.faults.armed)
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


@pytest.fixture
def arm_fault() -> Iterator[object]:
    """``arm_fault(point, action)`` arms a Spark-side fault point until the test ends."""
    armed: list[str] = []

    def arm(point: str, action: str) -> None:
        with open(os.path.join(FAULT_DIR, point), "w") as f:
            f.write(action)
        armed.append(point)

    yield arm
    for point in armed:
        os.unlink(os.path.join(FAULT_DIR, point))
