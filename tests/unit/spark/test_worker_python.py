"""``onceflow-spark-python``: Spark's workers import PySpark from the installed package (bytecode
cached) instead of ``pyspark.zip``, only when the two are the same install (issue 18)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark

from onceflow.spark import worker_python

INSTALLED = os.path.dirname(pyspark.__file__)  # pip's PySpark: SPARK_HOME is this directory
ZIP = os.path.join(INSTALLED, "python", "lib", "pyspark.zip")
SITE = os.path.dirname(INSTALLED)


def test_the_zip_is_dropped_only_when_spark_home_is_the_package_that_would_be_imported(tmp_path: Path) -> None:
    path = os.pathsep.join([ZIP, "/elsewhere/py4j.zip"])
    assert worker_python.worker_pythonpath(path, INSTALLED, [ZIP, SITE]) == "/elsewhere/py4j.zip"
    # A Spark distribution (SPARK_HOME is not a Python package): unchanged.
    distribution = tmp_path / "spark-4.3.0-bin"
    (distribution / "python" / "lib").mkdir(parents=True)
    other_zip = str(distribution / "python" / "lib" / "pyspark.zip")
    assert worker_python.worker_pythonpath(other_zip, str(distribution), [other_zip, SITE]) == other_zip
    # Another PySpark earlier on the path than SPARK_HOME's: unchanged (it may be another version).
    shadow = tmp_path / "shadow"
    (shadow / "pyspark").mkdir(parents=True)
    (shadow / "pyspark" / "__init__.py").write_text("")
    assert worker_python.worker_pythonpath(path, INSTALLED, [ZIP, str(shadow), SITE]) == path
    # No SPARK_HOME, no zip on the path, no PySpark installed at all: unchanged.
    assert worker_python.worker_pythonpath(path, None, [SITE]) == path
    assert worker_python.worker_pythonpath("/a:/b", INSTALLED, [SITE]) == "/a:/b"
    assert worker_python.worker_pythonpath(path, INSTALLED, [str(tmp_path)]) == path


def test_the_launcher_runs_the_same_interpreter_with_pyspark_from_the_package() -> None:
    launcher = worker_python.path()
    assert launcher != sys.executable, "make install puts onceflow-spark-python beside the interpreter"
    env = {**os.environ, "SPARK_HOME": INSTALLED, "PYTHONPATH": ZIP, "PYTHONDONTWRITEBYTECODE": "1"}
    probe = "import sys, pyspark; print(sys.executable); print(pyspark.__file__)"
    out = subprocess.run([launcher, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=True)
    executable, imported = out.stdout.split()
    assert os.path.samefile(executable, sys.executable)
    assert imported == pyspark.__file__  # not .../pyspark.zip/pyspark/__init__.py
    plain = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert "pyspark.zip" in plain.stdout.split()[1], "without the launcher Spark's workers import the zip"
