"""``onceflow acls`` and ``onceflow users`` against Apache Kafka, and the tools reaching a secured
listener with Kafka's own client settings (a ``--command-config`` file with ``sasl.jaas.config`` and a
PEM trust store).

Each test runs against Apache Kafka and against Onceflow's broker process, configured the same
way: the StandardAuthorizer and ``super.users=User:ANONYMOUS``, so that the PLAINTEXT listener is
the administrator's, and a SASL_SSL listener (SCRAM-SHA-256, a PEM key store made with
``onceflow.security.certs``) for the users the tests create.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.secured import Secured

SECRET = "alice-s3cr3t"


@pytest.fixture
def cluster(secured: Secured) -> Secured:
    """The session's secured cluster (``tests/reference/conftest.py``): Apache Kafka, then Onceflow."""
    return secured


def onceflow(bootstrap: str, *args: str, stdin: str | None = None, timeout: str = "15") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "onceflow", *args, "--bootstrap-servers", bootstrap, "--timeout", timeout],
                          capture_output=True, text=True, timeout=120, input=stdin)


def ok(bootstrap: str, *args: str, stdin: str | None = None) -> Any:
    proc = onceflow(bootstrap, *args, "--json", stdin=stdin)
    assert proc.returncode == 0, f"{args}: {proc.stderr}"
    assert SECRET not in proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def failed(bootstrap: str, *args: str, status: int = 1, stdin: str | None = None) -> str:
    proc = onceflow(bootstrap, *args, stdin=stdin, timeout="4")
    assert proc.returncode == status, proc
    assert proc.stdout == "" and "Traceback" not in proc.stderr and SECRET not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    return proc.stderr


def command_config(directory: Path, cluster: Secured, user: str, password: str) -> Path:
    """A client.properties as kafka-console-producer.sh --command-config takes it: Java's names."""
    path = directory / f"{user}.properties"
    path.write_text("security.protocol=SASL_SSL\n"
                    "sasl.mechanism=SCRAM-SHA-256\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
                    f'    username="{user}" password="{password}";\n'
                    "ssl.truststore.type=PEM\n"
                    f"ssl.truststore.location={cluster.ca}\n")
    return path


def test_users_add_list_and_remove(cluster: Secured) -> None:
    added = ok(cluster.admin, "users", "add", "bob", "--password-stdin", "--mechanism", "scram-sha-512", "--iterations", "8192",
               stdin=f"{SECRET}\n")
    assert added == [{"user": "bob", "mechanism": "SCRAM-SHA-512", "iterations": 8192}]
    ok(cluster.admin, "users", "add", "bob", "--password", SECRET)  # SCRAM-SHA-256, 4096 iterations
    assert ok(cluster.admin, "users", "list", "bob") == [
        {"user": "bob", "mechanism": "SCRAM-SHA-256", "iterations": 4096},
        {"user": "bob", "mechanism": "SCRAM-SHA-512", "iterations": 8192}]
    table = onceflow(cluster.admin, "users", "list").stdout.splitlines()
    assert table[0].split() == ["USER", "MECHANISM", "ITERATIONS"]
    assert ok(cluster.admin, "users", "remove", "bob", "--mechanism", "SCRAM-SHA-512") == [
        {"user": "bob", "mechanism": "SCRAM-SHA-512", "removed": True}]
    assert ok(cluster.admin, "users", "remove", "bob") == [{"user": "bob", "mechanism": "SCRAM-SHA-256", "removed": True}]
    assert [u for u in ok(cluster.admin, "users", "list") if u["user"] == "bob"] == []  # the session shares the cluster
    assert "no SCRAM credentials" in failed(cluster.admin, "users", "remove", "bob")
    assert "--iterations must be from 4096" in failed(cluster.admin, "users", "add", "bob", "--password", SECRET,
                                                      "--iterations", "100", status=2)


def test_acls_add_list_and_remove(cluster: Secured) -> None:
    added = ok(cluster.admin, "acls", "add", "--allow-principal", "User:carol", "--allow-principal", "User:dave",
               "--operation", "Read", "--operation", "describe", "--topic", "orders", "--group", "billing")
    assert len(added) == 2 * 2 * 2
    ok(cluster.admin, "acls", "add", "--deny-principal", "User:carol", "--deny-host", "10.0.0.1", "--operation", "Write",
       "--topic", "orders-", "--resource-pattern-type", "prefixed")
    ok(cluster.admin, "acls", "add", "--allow-principal", "User:carol", "--operation", "IdempotentWrite", "--cluster")
    ok(cluster.admin, "acls", "add", "--allow-principal", "User:carol", "--operation", "Write", "--transactional-id", "tx-1")

    carol = ok(cluster.admin, "acls", "list", "--principal", "User:carol")
    assert {(r["resource_type"], r["resource_name"], r["pattern_type"], r["operation"], r["permission"], r["host"])
            for r in carol} == {
        ("TOPIC", "orders", "LITERAL", "READ", "ALLOW", "*"), ("TOPIC", "orders", "LITERAL", "DESCRIBE", "ALLOW", "*"),
        ("GROUP", "billing", "LITERAL", "READ", "ALLOW", "*"), ("GROUP", "billing", "LITERAL", "DESCRIBE", "ALLOW", "*"),
        ("TOPIC", "orders-", "PREFIXED", "WRITE", "DENY", "10.0.0.1"),
        ("CLUSTER", "kafka-cluster", "LITERAL", "IDEMPOTENT_WRITE", "ALLOW", "*"),
        ("TRANSACTIONAL_ID", "tx-1", "LITERAL", "WRITE", "ALLOW", "*")}
    assert {r["principal"] for r in ok(cluster.admin, "acls", "list", "--topic", "orders")} == {"User:carol", "User:dave"}
    matching = ok(cluster.admin, "acls", "list", "--topic", "orders-eu", "--resource-pattern-type", "match")
    assert [(r["resource_name"], r["permission"]) for r in matching] == [("orders-", "DENY")]
    assert onceflow(cluster.admin, "acls", "list", "--group", "billing").stdout.splitlines()[0].split() == [
        "PRINCIPAL", "HOST", "OPERATION", "PERMISSION", "RESOURCE-TYPE", "RESOURCE-NAME", "PATTERN-TYPE"]

    removed = ok(cluster.admin, "acls", "remove", "--allow-principal", "User:dave", "--topic", "orders")
    assert {(r["principal"], r["operation"]) for r in removed} == {("User:dave", "READ"), ("User:dave", "DESCRIBE")}
    assert ok(cluster.admin, "acls", "remove", "--allow-principal", "User:dave", "--topic", "orders") == []
    everything = ok(cluster.admin, "acls", "remove", "--allow-principal", "User:carol")
    assert len(everything) == 6, "every ALLOW of carol's, on any resource, from any host"
    assert ok(cluster.admin, "acls", "remove", "--deny-principal", "User:carol", "--topic", "orders-",
              "--resource-pattern-type", "prefixed") != []
    assert [r for r in ok(cluster.admin, "acls", "list") if r["principal"] in ("User:carol", "User:dave")] == [
        {"principal": "User:dave", "host": "*", "operation": "DESCRIBE", "permission": "ALLOW", "resource_type": "GROUP",
         "resource_name": "billing", "pattern_type": "LITERAL"},
        {"principal": "User:dave", "host": "*", "operation": "READ", "permission": "ALLOW", "resource_type": "GROUP",
         "resource_name": "billing", "pattern_type": "LITERAL"}]


def test_acls_usage_errors_are_status_2(cluster: Secured) -> None:
    assert "does not apply to a group" in failed(cluster.admin, "acls", "add", "--allow-principal", "User:x", "--operation",
                                                 "Write", "--group", "g", status=2)
    assert "name a resource" in failed(cluster.admin, "acls", "add", "--allow-principal", "User:x", "--operation", "Read",
                                       status=2)
    assert "name what to remove" in failed(cluster.admin, "acls", "remove", status=2)
    bad = onceflow(cluster.admin, "acls", "add", "--allow-principal", "alice", "--operation", "Read", "--topic", "t")
    assert bad.returncode == 2 and "User:alice" in bad.stderr


def test_a_scram_user_reaches_the_secured_listener_with_kafkas_client_settings(cluster: Secured, tmp_path: Path) -> None:
    ok(cluster.admin, "users", "add", "alice", "--password-stdin", stdin=f"{SECRET}\n")
    ok(cluster.admin, "acls", "add", "--allow-principal", "User:alice", "--operation", "Create", "--operation", "Describe",
       "--topic", "alice-", "--resource-pattern-type", "prefixed")
    config = command_config(tmp_path, cluster, "alice", SECRET)

    created = ok(cluster.secured, "topics", "create", "alice-orders", "--command-config", str(config))
    assert (created["topic"], created["partition_count"], created["configs"]) == ("alice-orders", 1, None), \
        "created; its configs are not alice's to read (no DescribeConfigs ACL)"
    assert [r["topic"] for r in ok(cluster.secured, "topics", "list", "--command-config", str(config))] == ["alice-orders"]
    assert ok(cluster.secured, "txn", "list", "--command-config", str(config)) == []  # kafka-python, the same settings
    # The same through -X alone, in librdkafka's names.
    assert ok(cluster.secured, "topics", "list", "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-256",
              "-X", "sasl.username=alice", "-X", f"sasl.password={SECRET}", "-X", f"ssl.ca.location={cluster.ca}") != []

    wrong = command_config(tmp_path, cluster, "mallory", "not-it")
    assert "onceflow topics list:" in failed(cluster.secured, "topics", "list", "--command-config", str(wrong))
    assert "onceflow topics list:" in failed(cluster.secured, "topics", "list", "-X", "security.protocol=SSL",
                                             "-X", f"ssl.ca.location={cluster.ca}")


def test_the_spark_connector_reaches_the_secured_listener_with_sparks_options(cluster: Secured) -> None:
    """The connector's own clients (no Spark session: its driver-side client, from parsed options) with
    the options a Spark user writes for Spark's Kafka connector: kafka.sasl.jaas.config, a PEM trust store."""
    from onceflow.spark.kafka import KafkaAdmin
    from onceflow.spark.options import parse_sink_options, parse_source_options

    ok(cluster.admin, "users", "add", "erin", "--password-stdin", stdin=f"{SECRET}\n")
    ok(cluster.admin, "acls", "add", "--allow-principal", "User:erin", "--operation", "Describe", "--operation", "Read",
       "--topic", "erin-events")
    ok(cluster.admin, "topics", "create", "erin-events", "--partitions", "2")
    spark_options = {
        "kafka.bootstrap.servers": cluster.secured,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                  f'username="erin" password="{SECRET}";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(cluster.ca),
    }
    source = parse_source_options({**spark_options, "subscribe": "erin-events"}, streaming=False)
    admin = KafkaAdmin(source.bootstrap_servers, source.kafka_params, 15)
    partitions = admin.partitions(source.subscription)
    assert partitions == [("erin-events", 0), ("erin-events", 1)]
    assert admin.latest(partitions) == {("erin-events", 0): 0, ("erin-events", 1): 0}
    assert SECRET not in repr(source) and SECRET not in repr(parse_sink_options({**spark_options, "topic": "t"},
                                                                                streaming=False))


def test_kafkas_own_tools_manage_scram_users_and_acls_and_produce_with_a_command_config(cluster: Secured,
                                                                                        tmp_path: Path) -> None:
    """kafka-configs (SCRAM users), kafka-acls and kafka-console-producer --command-config give the same
    answers from both brokers."""
    from onceflow.reference import run_java
    from tests.integration.spark.support import read_topic

    user, topic = f"kt{uuid.uuid4().hex[:6]}", f"kt-{uuid.uuid4().hex[:6]}"
    ok(cluster.admin, "topics", "create", topic)
    done = run_java("kafka-configs", ["--bootstrap-server", cluster.admin, "--alter", "--entity-type", "users",
                                      "--entity-name", user, "--add-config",
                                      f"SCRAM-SHA-256=[iterations=4096,password={SECRET}]"])
    assert done.returncode == 0, done.stderr
    described = run_java("kafka-configs", ["--bootstrap-server", cluster.admin, "--describe", "--entity-type", "users",
                                           "--entity-name", user])
    assert "SCRAM-SHA-256=iterations=4096" in described.stdout, described.stdout + described.stderr
    acl = run_java("org.apache.kafka.tools.AclCommand", ["--bootstrap-server", cluster.admin, "--add", "--allow-principal",
                                                         f"User:{user}", "--operation", "Write", "--operation", "Describe",
                                                         "--topic", topic])
    assert acl.returncode == 0, acl.stderr
    listed = run_java("org.apache.kafka.tools.AclCommand", ["--bootstrap-server", cluster.admin, "--list", "--topic", topic])
    assert f"principal=User:{user}" in listed.stdout and "operation=WRITE" in listed.stdout, listed.stdout
    assert ok(cluster.admin, "acls", "list", "--topic", topic, "--principal", f"User:{user}") != []

    config = command_config(tmp_path, cluster, user, SECRET)
    produced = run_java("org.apache.kafka.tools.ConsoleProducer", ["--bootstrap-server", cluster.secured, "--topic", topic,
                                                                  "--command-config", str(config)], input="one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    assert read_topic(cluster.admin, topic, [0]) == [b"one", b"two"]
    stranger = command_config(tmp_path, cluster, user, "wrong-password")
    refused = run_java("org.apache.kafka.tools.ConsoleProducer", ["--bootstrap-server", cluster.secured, "--topic", topic,
                                                                 "--command-config", str(stranger),
                                                                 "--producer-property", "max.block.ms=5000"],
                       input="three\n")
    assert "Authentication failed" in refused.stderr or "SaslAuthenticationException" in refused.stderr, refused.stderr
    assert read_topic(cluster.admin, topic, [0]) == [b"one", b"two"]
