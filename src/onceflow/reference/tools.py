"""Kafka's own tools and our Java programs, run through their main classes on the cached classpath.

``run_java("org.apache.kafka.tools.TopicCommand", ["--bootstrap-server", bs, "--list"])`` is what
``kafka-topics.sh --list`` runs, without a Kafka distribution on disk.  The tools log warnings to
stderr (``reference/log4j2-tools.properties``), so stdout is what they print on purpose.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .maven import java_binary, kafka_classpath, reference_dir

#: A tool must finish in this long unless the caller says otherwise.
TOOL_TIMEOUT_S = 120

#: Kafka's command-line tools by the name of their script, as ``bin/*.sh`` runs them in 4.x.
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-transactional-message-copier": "org.apache.kafka.tools.TransactionalMessageCopier",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
}


#: The JVM options ``kafka-run-class.sh`` gives every Kafka process (``KAFKA_JVM_PERFORMANCE_OPTS``).
KAFKA_JVM_OPTIONS = ("-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                     "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true")


def java_command(main_class: str, args: Sequence[str], *, heap: str = "256m",
                 jvm_options: Sequence[str] = (), logging: str = "log4j2-tools.properties",
                 request_log: Path | None = None) -> list[str]:
    """The command line that runs ``main_class`` with Kafka's classpath (for ``subprocess.Popen``),
    with the JVM options Kafka's scripts use; ``heap`` is ``-Xmx`` (the scripts' default for
    tools is 256 MiB, for the broker 1 GiB).  With ``request_log``, every request the Java client
    sends is logged to that file (``reference/log4j2-requests.properties``: NetworkClient at
    DEBUG), for ``logged_requests``."""
    if request_log is not None:
        jvm_options, logging = [*jvm_options, f"-Donceflow.requestLog={request_log}"], "log4j2-requests.properties"
    log_config = reference_dir() / logging
    return [java_binary(), f"-Xmx{heap}", *KAFKA_JVM_OPTIONS, f"-Dlog4j2.configurationFile={log_config}", *jvm_options,
            "-cp", os.pathsep.join(kafka_classpath()), main_class, *args]


_SENT = re.compile(r"Sending (\w+) request with header RequestHeader\(apiKey=(\w+), apiVersion=(\d+)")


def logged_requests(path: Path) -> dict[str, set[int]]:
    """The requests a Java program run with ``java_command(..., request_log=path)`` sent: each API, by
    Kafka's enum name (``END_TXN``), and the versions it was sent at; empty if nothing was logged."""
    sent: dict[str, set[int]] = {}
    if path.exists():
        for match in _SENT.finditer(path.read_text(errors="replace")):
            sent.setdefault(match.group(2), set()).add(int(match.group(3)))
    return sent


def finalized_features(bootstrap: str) -> dict[str, str]:
    """Each feature's finalized level as ``kafka-features --bootstrap-server ... describe`` prints
    it (``{"transaction.version": "2", "metadata.version": "4.3-IV0", ...}``): what a client's
    ApiVersions answer from that broker finalizes."""
    out = run_java("kafka-features", ["--bootstrap-server", bootstrap, "describe"], check=True).stdout
    return dict(re.findall(r"Feature: (\S+)\s.*?FinalizedVersionLevel: (\S+)", out))


def run_java(main_class: str, args: Sequence[str], *, timeout: float = TOOL_TIMEOUT_S, check: bool = False,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a main class (or a tool's script name from ``TOOLS``) to completion; stdout and stderr
    are captured as text.  ``check`` raises when it exits non-zero, with its output."""
    cmd = java_command(TOOLS.get(main_class, main_class), args)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
    if check and done.returncode != 0:
        raise RuntimeError(f"{main_class} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done
