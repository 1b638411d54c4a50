"""The payments pipeline as a Spark Declarative Pipelines project, and what sets it up and checks it.

    python -m onceflow.pipelines.declarative init DIR --bootstrap-servers 127.0.0.1:9092 --payments 20000
    spark-pipelines run --spec DIR/spark-pipeline.yml
    python -m onceflow.pipelines.declarative verify --bootstrap-servers 127.0.0.1:9092

Theory of operation
-------------------
The project is this package's ``transformations/`` (the definitions, see
``transformations/payments.py``) and a spec written by ``write_project``:
``storage`` (where Spark keeps the flows' checkpoints, an absolute ``file://``
URI as SDP requires) and the bootstrap servers, passed to the definitions as the
configuration ``payments.bootstrap.servers``.  ``init`` also creates the topics
and writes the payments, with ``onceflow.pipelines.payments`` (about one
transaction in ten aborted on purpose).

``verify`` needs no memory of what was written: it reads ``payments`` back,
read_committed for the payments that count and read_uncommitted for the ones
aborted, and checks ``ledger`` and ``balances`` as ``onceflow demo`` does.

``spark-pipelines`` runs each flow once per run (``Trigger.AvailableNow``), so a
run that is killed (the driver, here the Spark Connect server ``spark-pipelines``
starts, with it) is taken up by the next run from the flows' checkpoints;
``PipelineRun`` is such a run as a child process, in its own process group.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from .. import payments

#: The project's definitions (copied by ``write_project``).
TRANSFORMATIONS = Path(__file__).with_name("transformations")

SPEC = """\
name: payments
storage: {storage}
configuration:
  payments.bootstrap.servers: "{bootstrap}"
  spark.sql.shuffle.partitions: "{partitions}"
libraries:
  - glob:
      include: transformations/**
"""


def write_project(directory: str | Path, bootstrap: str, partitions: int = payments.PARTITIONS) -> Path:
    """The project in ``directory`` (created); returns its spec's path."""
    root = Path(directory).resolve()
    shutil.copytree(TRANSFORMATIONS, root / "transformations", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "storage").mkdir(parents=True, exist_ok=True)
    spec = root / "spark-pipeline.yml"
    spec.write_text(SPEC.format(storage=(root / "storage").as_uri(), bootstrap=bootstrap, partitions=partitions))
    return spec


def spark_pipelines() -> str:
    """The ``spark-pipelines`` script of the PySpark this interpreter imports."""
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-pipelines")


class PipelineRun:
    """``spark-pipelines run --spec SPEC`` as a child process in its own process group."""

    def __init__(self, spec: Path, log_path: Path, env: dict[str, str] | None = None) -> None:
        from ...spark import worker_python

        environment = {**os.environ, **(env or {})}
        # spark-pipelines finds its CLI with $PYSPARK_PYTHON, and its Spark's workers run it.
        environment.setdefault("PYSPARK_PYTHON", worker_python.path())
        with open(log_path, "a") as log:
            self.proc = subprocess.Popen([spark_pipelines(), "run", "--spec", str(spec)], stdout=log,
                                         stderr=subprocess.STDOUT, env=environment, start_new_session=True)

    def wait(self, timeout: float) -> int:
        """Its exit status; killed (and an error) if it has not finished within ``timeout``."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(f"spark-pipelines did not finish within {timeout:.0f} s") from None

    def kill(self) -> None:
        """SIGKILL to the whole group: the CLI, Spark's JVM and its Python workers."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(payments.TIMEOUT_S)


def generated_from_topic(bootstrap: str) -> payments.Generated:
    """What was written to ``payments``, read back: committed payments read_committed, the aborted
    ones as those only read_uncommitted sees."""
    out = payments.Generated()
    every: set[int] = set()
    for isolation in ("read_committed", "read_uncommitted"):
        for _, value in payments.read_committed(bootstrap, payments.PAYMENTS, isolation=isolation):
            number, source, target, amount = (int(x) for x in (value or b"").decode().split(","))
            if isolation == "read_committed":
                out.committed[number] = (source, target, amount)
            every.add(number)
    out.aborted = every - set(out.committed)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m onceflow.pipelines.declarative",
                                     description="The payments pipeline for Spark Declarative Pipelines.")
    commands = parser.add_subparsers(dest="command", required=True)
    init = commands.add_parser("init", help="create the topics, write payments, write the project")
    init.add_argument("directory")
    init.add_argument("--payments", type=int, default=20_000)
    verify = commands.add_parser("verify", help="check ledger and balances against payments")
    for command in (init, verify):
        command.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    args = parser.parse_args(argv)
    if args.command == "init":
        if args.payments < 1:
            parser.error(f"--payments must be at least 1, not {args.payments}")
        payments.create_topics(args.bootstrap_servers)
        generated = payments.generate(args.bootstrap_servers, args.payments)
        spec = write_project(args.directory, args.bootstrap_servers)
        print(f"{len(generated.committed)} payments committed, {len(generated.aborted)} aborted; "
              f"now: spark-pipelines run --spec {spec}")
        return 0
    report = payments.verify(args.bootstrap_servers, generated_from_topic(args.bootstrap_servers))
    print(f"{report.ledger_entries} ledger entries for {report.committed} committed payments, "
          f"{report.accounts} balances: " + ("all checks pass" if report.ok else "; ".join(report.problems())))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
