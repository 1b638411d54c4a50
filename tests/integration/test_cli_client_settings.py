"""``-X key=value`` and ``--command-config FILE`` on every command family that reaches a cluster
(topics, groups, txn, acls, users, bench, chaos, demo), against one plaintext embedded broker, each
command a real subprocess: good settings work; a bad one is one line and exit status 2 before
anything is asked of the cluster; ``security.protocol=SSL`` (which a plaintext broker cannot
speak) reaches every client, so the command fails cleanly within its timeout, never with a
traceback.  The secured path itself is tests/reference/test_security_tools.py."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from onceflow.broker.embedded import EmbeddedBroker

#: A plaintext broker spoken to with TLS (the tools' own --timeout bounds the wait).
TLS = ("-X", "security.protocol=SSL")
#: The same for bench, chaos and the demo, whose librdkafka clients give up on a request after this long.
SSL = (*TLS, "-X", "socket.timeout.ms=2000")
SECRET = "s3cr3t-Value"


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with EmbeddedBroker(**{"group.initial.rebalance.delay.ms": 0}) as broker:
        yield broker.bootstrap_servers


def onceflow(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "onceflow", *args], capture_output=True, text=True, timeout=120,
                          input=stdin)


def assert_clean_failure(proc: subprocess.CompletedProcess[str], status: int, *fragments: str) -> str:
    """Exit ``status``, nothing on stdout, no traceback, and the command's own line on stderr (bench, chaos
    and the demo let librdkafka print its log lines too)."""
    assert proc.returncode == status, proc
    assert proc.stdout == "", proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    assert SECRET not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    line = next((x for x in lines if x.startswith("onceflow ")), lines[-1])
    for fragment in fragments:
        assert fragment in line, line
    return line


#: One cheap command per tool family (their own one-line failures: exactly one stderr line).
TOOLS = [("topics", "list"), ("groups", "list"), ("txn", "list"), ("acls", "list"), ("users", "list")]


def test_the_tools_run_with_settings_from_x_and_a_properties_file(bootstrap: str, tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("# Kafka's tools take this file too\nclient.id = from\\\n    -file\nsecurity.protocol=PLAINTEXT\n")
    created = onceflow("topics", "create", "settings-probe", "--bootstrap-servers", bootstrap, "--command-config", str(config),
                       "-X", "client.id=probe")
    assert created.returncode == 0, created.stderr
    for family, command in [("topics", "list"), ("groups", "list"), ("txn", "list")]:
        proc = onceflow(family, "--command-config", str(config), command, "--bootstrap-servers", bootstrap,
                        "-X", "client.id=probe", "--json")
        assert proc.returncode == 0, (family, proc.stderr)
    assert "settings-probe" in onceflow("topics", "list", "--bootstrap-servers", bootstrap, "-X", "client.id=x").stdout


@pytest.mark.parametrize(("family", "command"), TOOLS)
def test_an_unknown_setting_is_one_line_and_status_2(bootstrap: str, family: str, command: str) -> None:
    unknown = onceflow(family, command, "--bootstrap-servers", bootstrap, "-X", "no.such.setting=1")
    assert_clean_failure(unknown, 2, f"onceflow {family} {command}:", "no.such.setting")
    assert len(unknown.stderr.splitlines()) == 1


#: A family on each client library: confluent-kafka (topics) and kafka-python (txn).
LIBRARIES = [("topics", "list"), ("txn", "list")]


@pytest.mark.parametrize(("family", "command"), LIBRARIES)
def test_a_bad_setting_is_one_line_and_status_2(bootstrap: str, tmp_path: Path, family: str, command: str) -> None:
    t0 = time.monotonic()
    jaas = onceflow(family, "-X", "sasl.mechanism=PLAIN", command, "--bootstrap-servers", bootstrap, "-X",
                    f'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required password="{SECRET}"')
    assert_clean_failure(jaas, 2, "sasl.jaas.config", "not terminated by ';'")
    assert len(jaas.stderr.splitlines()) == 1
    jks = tmp_path / "truststore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + bytes(60))
    config = tmp_path / "jks.properties"
    config.write_text(f"ssl.truststore.location={jks}\nssl.truststore.password={SECRET}\n")
    assert_clean_failure(onceflow(family, command, "--bootstrap-servers", bootstrap, "--command-config", str(config)), 2,
                         "ssl.truststore.location", "JKS")
    syntax = onceflow(family, command, "--bootstrap-servers", bootstrap, "-X", "novalue")
    assert syntax.returncode == 2 and "expected key=value" in syntax.stderr and "Traceback" not in syntax.stderr
    assert time.monotonic() - t0 < 20, "refused before anything is asked of the cluster"


@pytest.mark.parametrize(("family", "command"), LIBRARIES)
def test_tls_to_a_plaintext_broker_fails_cleanly_within_the_timeout(bootstrap: str, family: str, command: str) -> None:
    t0 = time.monotonic()
    proc = onceflow(family, command, "--bootstrap-servers", bootstrap, "--timeout", "2", *TLS)
    assert_clean_failure(proc, 1, f"onceflow {family} {command}:")
    assert len(proc.stderr.splitlines()) == 1
    assert time.monotonic() - t0 < 20


def test_the_transaction_tools_refuse_what_kafka_python_cannot_take(bootstrap: str) -> None:
    proc = onceflow("txn", "list", "--bootstrap-servers", bootstrap, "-X", "linger.ms=5")
    assert_clean_failure(proc, 2, "linger.ms", "kafka-python")


def test_users_add_never_prints_the_password(bootstrap: str) -> None:
    proc = onceflow("users", "add", "alice", "--password-stdin", "--bootstrap-servers", bootstrap, "--timeout", "2", *TLS,
                    stdin=f"{SECRET}\n")
    assert_clean_failure(proc, 1, "onceflow users add:")
    usage = onceflow("users", "add", "alice", "--bootstrap-servers", bootstrap)
    assert usage.returncode == 2 and "--password" in usage.stderr


def test_bench_passes_the_settings_to_its_clients(bootstrap: str) -> None:
    ran = onceflow("bench", "produce", "--bootstrap-servers", bootstrap, "--seconds", "0.2", "--partitions", "1",
                   "--record-size", "100", "-X", "client.id=bench-probe")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("produce acks=all:")
    assert_clean_failure(onceflow("bench", "produce", "--bootstrap-servers", bootstrap, "-X", "no.such.setting=1"), 2,
                         "no.such.setting")
    assert_clean_failure(onceflow("bench", "recovery", "-X", "client.id=x"), 2, "-X and --command-config apply to")
    assert_clean_failure(onceflow("bench", "produce", "--bootstrap-servers", bootstrap, "--seconds", "0.2", *SSL), 1,
                         "onceflow bench produce:")


def test_chaos_passes_the_settings_to_its_workload(bootstrap: str) -> None:
    ran = onceflow("chaos", "--bootstrap-servers", bootstrap, "--seconds", "1", "--producers", "1", "--partitions", "1",
                   "-X", "client.id=chaos-probe")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "PASS" in ran.stdout
    assert_clean_failure(onceflow("chaos", "--bootstrap-servers", bootstrap, "-X", "no.such.setting=1"), 2, "no.such.setting")
    assert_clean_failure(onceflow("chaos", "--bootstrap-servers", bootstrap, "--seconds", "1", *SSL), 1,
                         "onceflow chaos: cannot reach", "ssl://")


def test_the_demo_runs_against_a_cluster_with_settings(bootstrap: str) -> None:
    ran = onceflow("demo", "broker-crash", "--bootstrap-servers", bootstrap, "-X", "client.id=demo-probe")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "OK:" in ran.stdout
    assert_clean_failure(onceflow("demo", "broker-crash", "-X", "client.id=x"), 2, "--bootstrap-servers")
    assert_clean_failure(onceflow("demo", "--bootstrap-servers", bootstrap, "-X", "no.such.setting=1"), 2, "no.such.setting")
    assert_clean_failure(onceflow("demo", "broker-crash", "--bootstrap-servers", bootstrap, *SSL), 1,
                         "onceflow demo broker-crash:")
