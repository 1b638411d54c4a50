"""The payments pipeline as a Spark Declarative Pipelines project (``onceflow.pipelines.declarative``),
run by ``spark-pipelines run`` against the broker process: the run is killed with SIGKILL (the CLI,
the Spark Connect server it starts and its workers) while the sinks' tasks are inside their
transactions, the next run takes it up from the flows' checkpoints, and the output passes the
demo's checks: every committed payment's two entries exactly once, none of an aborted one, every
balance right."""

from __future__ import annotations

from pathlib import Path

import pytest

from onceflow.pipelines import declarative
from onceflow.pipelines import payments as pipeline
from onceflow.spark.faults import SPARK_FIRST_ATTEMPT as FAULT_POINT
from tests.integration.spark.support import open_transaction_in
from tests.support.broker import BrokerProcess
from tests.support.waiting import wait_for

PAYMENTS = 3000
RUN_TIMEOUT_S = 420
EVERY_PARTITION = list(range(pipeline.PARTITIONS))


@pytest.mark.platforms  # about two minutes: make spark-platforms (and CI), not make test
def test_spark_pipelines_runs_the_payments_project_exactly_once_through_a_killed_run(
        broker_process: BrokerProcess, tmp_path: Path) -> None:
    bs = broker_process.bootstrap_servers
    pipeline.create_topics(bs)
    generated = pipeline.generate(bs, PAYMENTS, per_transaction=250)
    spec = declarative.write_project(tmp_path / "project", bs)
    log = tmp_path / "spark-pipelines.log"
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / FAULT_POINT).write_text("sleep:3")

    killed = declarative.PipelineRun(spec, log, env={"ONCEFLOW_FAULT_DIR": str(faults)})
    try:
        wait_for(lambda: open_transaction_in(bs, pipeline.LEDGER, EVERY_PARTITION)
                 or open_transaction_in(bs, pipeline.BALANCES, EVERY_PARTITION),
                 timeout=RUN_TIMEOUT_S, interval=0.1, what="a sink's task inside its transaction")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; spark-pipelines' log ends:\n{_tail(log)}") from None
    finally:
        killed.kill()

    status = declarative.PipelineRun(spec, log).wait(RUN_TIMEOUT_S)
    assert status == 0, f"the second run failed ({status}):\n{_tail(log)}"
    assert "Run is COMPLETED" in log.read_text()
    report = pipeline.verify(bs, generated)
    assert report.ok, report.problems()
    assert report.ledger_entries == 2 * len(generated.committed) and generated.aborted
    assert not open_transaction_in(bs, pipeline.LEDGER, EVERY_PARTITION)
    assert not open_transaction_in(bs, pipeline.BALANCES, EVERY_PARTITION)
    # What the project's own check says, from the topics alone.
    assert declarative.main(["verify", "--bootstrap-servers", bs]) == 0


def _tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"
