"""``onceflow-spark-python``: the Python for Spark's workers, starting them with PySpark's bytecode cached.

Theory of operation
-------------------
Spark starts a Python process for each kind of Python work: the task
workers (``pyspark.daemon``), and, for a Python data source, a daemon each
for looking it up, creating it, planning reads, planning and committing
writes, plus one runner per streaming source and sink.  The JVM puts
``$SPARK_HOME/python/lib/pyspark.zip`` first on their ``PYTHONPATH``, and
sets ``PYTHONDONTWRITEBYTECODE``: each process compiles PySpark's sources
out of the zip again.  Measured here (issue 18, ``docs/performance.md``):
1.0-1.3 s of CPU per process to import PySpark from the zip, 0.2 s from
the installed package, about 20 such processes in a run of the payments
pipeline, on 2 cores.

When PySpark is pip-installed, ``SPARK_HOME`` *is* the installed package
(``site-packages/pyspark``), and the zip holds the same sources as the
package beside it, whose bytecode is cached.  This launcher drops the zip
from ``PYTHONPATH`` in exactly that case (the ``pyspark`` this interpreter
would import is the directory ``SPARK_HOME`` names), and then ``exec``s the
interpreter it runs under with the same arguments.  In any other case (a
Spark distribution, another interpreter's PySpark) it changes nothing.

Use it as Spark's worker Python: ``PYSPARK_PYTHON=onceflow-spark-python`` or
``.config("spark.pyspark.python", onceflow.spark.worker_python.path())``.
It imports nothing beyond the standard library: it runs before every worker.
"""

from __future__ import annotations

import os
import sys

#: The launcher's name, installed beside the interpreter (``[project.scripts]``).
NAME = "onceflow-spark-python"


def path() -> str:
    """The launcher installed with this interpreter (its ``bin`` directory), or this interpreter
    itself when the launcher is not there (the workers then start as Spark starts them)."""
    candidate = os.path.join(os.path.dirname(sys.executable), NAME)
    return candidate if os.access(candidate, os.X_OK) else sys.executable


def worker_pythonpath(pythonpath: str, spark_home: str | None, search: list[str]) -> str:
    """``pythonpath`` without ``spark_home``'s ``pyspark.zip`` when the ``pyspark`` found first on
    ``search`` (the interpreter's path, zips left out) is ``spark_home`` itself; else unchanged."""
    if not spark_home or not os.path.isfile(os.path.join(spark_home, "__init__.py")):
        return pythonpath
    zipped = os.path.join(spark_home, "python", "lib", "pyspark.zip")
    entries = pythonpath.split(os.pathsep) if pythonpath else []
    if zipped not in entries:
        return pythonpath
    for entry in search:
        package = os.path.join(entry or ".", "pyspark")
        if entry.endswith(".zip") or not os.path.isfile(os.path.join(package, "__init__.py")):
            continue
        try:
            same = os.path.samefile(package, spark_home)
        except OSError:
            same = False
        if not same:
            return pythonpath  # another PySpark would be imported: keep the one Spark ships with its JVM
        return os.pathsep.join(e for e in entries if e != zipped)
    return pythonpath


def main() -> None:
    pythonpath = worker_pythonpath(os.environ.get("PYTHONPATH", ""), os.environ.get("SPARK_HOME"), sys.path)
    os.environ["PYTHONPATH"] = pythonpath
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])


if __name__ == "__main__":
    main()
