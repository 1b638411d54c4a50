"""``onceflow bench pipeline|source --baseline --rounds``: exactly-once against onceflow's sink
at-least-once (the default) or against Spark's own JVM Kafka connector (``spark-kafka``, issue 18),
and the CPU and memory figures by process (``procstat``).  The runs themselves start brokers and
Spark drivers; here the choices are checked, and the sampler against real child processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from onceflow.bench import run_bench
from onceflow.bench.pipeline import BASELINES, bench_pipeline
from onceflow.bench.procstat import ProcessSampler, usage_extra
from onceflow.bench.workloads import Result, median_result
from onceflow.cli import build_parser


def test_the_baseline_defaults_to_at_least_once_and_may_be_spark_kafka() -> None:
    assert build_parser().parse_args(["bench", "pipeline"]).baseline is None  # at-least-once, for pipeline
    assert build_parser().parse_args(["bench", "pipeline", "--baseline", "spark-kafka"]).baseline == "spark-kafka"
    assert build_parser().parse_args(["bench", "source", "--baseline", "spark-kafka", "--rounds", "3"]).rounds == 3
    assert BASELINES == ("at-least-once", "spark-kafka")


def test_an_unknown_baseline_or_round_count_is_refused_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["bench", "pipeline", "--baseline", "kafka-streams"], ["bench", "pipeline", "--rounds", "0"],
                 ["bench", "source", "--rounds", "x"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
    with pytest.raises(ValueError, match="baseline"):
        bench_pipeline(10, "local[1]", [], baseline="kafka-streams")
    capsys.readouterr()
    assert run_bench(build_parser().parse_args(["bench", "source", "--baseline", "at-least-once"])) == 2
    assert capsys.readouterr().err == "onceflow bench source: --baseline takes spark-kafka (the source has no at-least-once mode)\n"


def test_the_median_run_is_reported_with_the_median_of_each_figure() -> None:
    runs = [Result("r", 100, 1000, seconds, {"cpu_s_broker": cpu, "only_here": 1.0} if i == 0 else {"cpu_s_broker": cpu})
            for i, (seconds, cpu) in enumerate([(2.0, 5.0), (1.0, 9.0), (4.0, 1.0)])]
    median = median_result("median of 3", runs)
    assert (median.name, median.seconds, median.extra) == ("median of 3", 2.0, {"cpu_s_broker": 5.0})


def test_the_sampler_counts_cpu_by_role_down_the_process_tree() -> None:
    burn = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"
    # A parent that starts a busy child: both are counted under the root's role.
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"])
    try:
        with ProcessSampler({"driver": parent.pid}, interval_s=0.05) as sampler:
            parent.wait(30)
    finally:
        parent.kill()
    usage = sampler.usage()
    assert set(usage) == {"driver"}
    assert usage["driver"].processes == 2
    assert 0.3 <= usage["driver"].cpu_s <= 5  # the child's 0.6 s, less what it used after the last sample
    assert usage["driver"].peak_process_mib > 1
    assert set(usage_extra(sampler)) == {"cpu_s_driver", "peak_mib_driver"}


def test_a_root_under_another_root_keeps_its_own_role() -> None:
    """The benchmark's broker is a child of the benchmark process, itself the driver root of ``bench source``."""
    burn = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"
    child = subprocess.Popen([sys.executable, "-c", burn])
    try:
        with ProcessSampler({"broker": child.pid, "driver": os.getpid()}, interval_s=0.05) as sampler:
            child.wait(30)
    finally:
        child.kill()
    usage = sampler.usage()
    assert usage["broker"].processes == 1 and usage["broker"].cpu_s >= 0.3
    assert sampler.role(child.pid) == "broker" and sampler.role(os.getpid()) == "driver"  # not counted twice


def test_a_micro_batch_first_seen_idle_is_reported_again_with_its_rows() -> None:
    """The driver's micro-batch lines, which the benchmark counts rows from: Spark's idle progress entry
    carries the next micro-batch's id and no rows; the micro-batch itself must still be reported."""
    from onceflow.pipelines.payments import is_news

    reported: dict[int, int] = {}
    entries = [(0, 0), (0, 0), (1, 0), (1, 0), (1, 500), (1, 500), (2, 30)]  # recentProgress, polled again and again
    assert [is_news(reported, batch, rows) for batch, rows in entries] == [True, False, True, False, True, False, True]
    assert sum(reported.values()) == 530
