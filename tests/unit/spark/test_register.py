"""``register``'s two decisions without a Spark session: inside Spark Declarative Pipelines'
definitions it registers nothing (PySpark 4.3's ``spark-pipelines`` fails at the end of a run when
the pipeline's session registered a data source), and Spark finds the format through
``pyspark_onceflow`` instead.  (With real Spark: tests/integration/spark/test_declarative.py,
test_connect.py, test_local_worker_python.py.)"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pyspark.pipelines.graph_element_registry import GraphElementRegistry, graph_element_registration_context

import onceflow.spark
import pyspark_onceflow
from onceflow.spark.datasource import OnceflowDataSource


class _Refusing:
    """A session whose every use fails the test: inside definitions, register must not touch it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"register used the session ({name}) inside pipeline definitions")


class _Registry(GraphElementRegistry):
    def register_output(self, output: Any) -> None: ...
    def register_flow(self, flow: Any) -> None: ...
    def register_auto_cdc_flow(self, flow: Any) -> None: ...
    def register_sql(self, sql_text: str, file_path: Any) -> None: ...


def test_register_does_nothing_inside_pipeline_definitions(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="onceflow.spark"), graph_element_registration_context(_Registry()):
        onceflow.spark.register(_Refusing())
    assert "pyspark_onceflow" in caplog.text


def test_outside_definitions_register_uses_the_session() -> None:
    with pytest.raises(AssertionError, match="register used the session"):
        onceflow.spark.register(_Refusing())


def test_spark_finds_the_format_through_pyspark_onceflow() -> None:
    assert pyspark_onceflow.DefaultSource is OnceflowDataSource
    assert OnceflowDataSource.name() == onceflow.spark.FORMAT
