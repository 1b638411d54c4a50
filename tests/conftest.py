"""Fixtures: the real broker as a child process, on free loopback ports.  What they are built
from, and what tests share besides fixtures, is in tests/support."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# The helpers in tests/support assert as test code does: rewrite their asserts like a test
# module's (this must happen before anything imports them).
pytest.register_assert_rewrite("tests.support")

from onceflow.spark import worker_python  # noqa: E402
from tests.support import SCRATCH  # noqa: E402
from tests.support.broker import FAST_GROUPS, BrokerProcess  # noqa: E402


@pytest.fixture
def broker_process(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerProcess]:
    """The broker process; indirect parametrization may add settings (e.g. ``SEGMENT_SHAPES``)."""
    proc = BrokerProcess(tmp_path / "data", {**FAST_GROUPS, **getattr(request, "param", {})})
    proc.start()
    try:
        yield proc
    finally:
        if proc.proc is not None:
            proc.proc.kill()
            proc.proc.wait()


@pytest.fixture
def make_broker_process(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """``make_broker_process(**settings)`` starts another broker process with these settings."""
    made: list[BrokerProcess] = []

    def make(**overrides: str) -> BrokerProcess:
        proc = BrokerProcess(tmp_path / f"data{len(made)}", {**FAST_GROUPS, **overrides})
        made.append(proc)
        return proc.start()

    try:
        yield make
    finally:
        for proc in made:
            if proc.proc is not None:
                proc.proc.kill()
                proc.proc.wait()


# -- Spark -------------------------------------------------------------------------------

#: Where Spark-side fault points are armed (``onceflow.spark.faults``); Spark's workers inherit it.
SPARK_FAULT_DIR = tempfile.mkdtemp(prefix="onceflow-faults-", dir=SCRATCH)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local SparkSession for every Spark test (starting the JVM is the slow part), with the
    onceflow format registered, task retries on (``local[2,4]``: 2 cores, 4 attempts per task)."""
    # Workers need this venv's pyspark and onceflow; the launcher starts them with PySpark's bytecode cached.
    os.environ["PYSPARK_PYTHON"] = worker_python.path()
    os.environ["ONCEFLOW_FAULT_DIR"] = SPARK_FAULT_DIR  # Spark's workers inherit it (onceflow.spark.faults.armed)
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
def arm_fault() -> Iterator[Callable[[str, str], None]]:
    """``arm_fault(point, action)`` arms a Spark-side fault point until the test ends (or it is armed
    with an empty action, which disarms it)."""
    armed: list[str] = []

    def arm(point: str, action: str) -> None:
        path = os.path.join(SPARK_FAULT_DIR, point)
        if not action:
            if os.path.exists(path):
                os.unlink(path)
            return
        with open(path, "w") as f:
            f.write(action)
        armed.append(point)

    yield arm
    for point in armed:
        path = os.path.join(SPARK_FAULT_DIR, point)
        if os.path.exists(path):
            os.unlink(path)
