"""The exactly-once Spark sink over SASL_SSL with SCRAM and ACLs, against Onceflow's broker process and
against Apache Kafka configured the same way (the session's secured clusters, shared with
``test_security_tools``)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.reference.test_security_tools import SECRET, ok
from tests.support.secured import Secured


@pytest.fixture
def cluster(secured: Secured) -> Secured:
    """The session's secured cluster (``tests/reference/conftest.py``): Apache Kafka, then Onceflow."""
    return secured


def test_the_exactly_once_spark_sink_runs_over_sasl_ssl_with_scram(spark: Any, cluster: Secured, tmp_path: Path) -> None:
    """A real Spark micro-batch query, read_committed source to exactly-once sink, as a SCRAM user over
    SASL_SSL with the grants docs/security.md gives a pipeline: READ on its input and group, WRITE on
    its output, its transactional ids (``onceflow-sink-``) and its progress topic (``onceflow-progress-``,
CREATE included); its readers' generated groups (``onceflow-spark-source-``, and the sink's progress
reader's ``onceflow-progress-reader-``) may be read."""
    from tests.integration.spark.support import assert_exactly_once, inputs, read_topic, run_available_now, upper

    src, dst = f"pay-in-{uuid.uuid4().hex[:6]}", f"pay-out-{uuid.uuid4().hex[:6]}"
    ok(cluster.admin, "topics", "create", src, "--partitions", "2")
    ok(cluster.admin, "topics", "create", dst, "--partitions", "2")
    committed = inputs(cluster.admin, src, 200)
    ok(cluster.admin, "users", "add", "pipeline", "--password-stdin", stdin=f"{SECRET}\n")
    grant = ("acls", "add", "--allow-principal", "User:pipeline")
    ok(cluster.admin, *grant, "--operation", "Read", "--operation", "Describe", "--topic", src)
    ok(cluster.admin, *grant, "--operation", "Write", "--operation", "Describe", "--topic", dst)
    ok(cluster.admin, *grant, "--operation", "All", "--topic", "onceflow-progress-", "--resource-pattern-type", "prefixed")
    ok(cluster.admin, *grant, "--operation", "Write", "--operation", "Describe", "--transactional-id", "onceflow-sink-",
       "--resource-pattern-type", "prefixed")
    ok(cluster.admin, *grant, "--operation", "Read", "--group", "onceflow-spark-source-", "--group",
       "onceflow-progress-reader-", "--resource-pattern-type", "prefixed")
    secured = {
        "kafka.bootstrap.servers": cluster.secured,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                  f'username="pipeline" password="{SECRET}";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(cluster.ca),
    }
    reader = spark.readStream.format("onceflow").option("subscribe", src).option("startingOffsets", "earliest")
    for key, value in {**secured, "maxOffsetsPerTrigger": "80"}.items():
        reader = reader.option(key, value)
    query = run_available_now(upper(reader.load()), {**secured, "topic": dst}, str(tmp_path / "checkpoint"))
    assert [p for p in query.recentProgress if p["numInputRows"]], "micro-batches ran"
    assert_exactly_once(read_topic(cluster.admin, dst, [0, 1]), committed)
