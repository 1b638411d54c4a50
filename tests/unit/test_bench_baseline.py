"""``onceflow bench pipeline --baseline``: exactly-once against onceflow's sink at-least-once (the
default) or against Spark's own JVM Kafka sink (``spark-kafka``, issue 10 section 4).  The runs
themselves start brokers and Spark drivers; here only the choice is checked."""

from __future__ import annotations

import pytest

from onceflow.bench.pipeline import BASELINES, bench_pipeline
from onceflow.cli import build_parser


def test_the_baseline_defaults_to_at_least_once_and_may_be_spark_kafka() -> None:
    assert build_parser().parse_args(["bench", "pipeline"]).baseline == "at-least-once"
    assert build_parser().parse_args(["bench", "pipeline", "--baseline", "spark-kafka"]).baseline == "spark-kafka"
    assert BASELINES == ("at-least-once", "spark-kafka")


def test_an_unknown_baseline_is_refused_before_anything_starts() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "pipeline", "--baseline", "kafka-streams"])
    with pytest.raises(ValueError, match="baseline"):
        bench_pipeline(10, "local[1]", [], baseline="kafka-streams")
