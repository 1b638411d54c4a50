"""Kafka's own tools and our Java programs, run through their main classes on the cached classpath.

``run_java("org.apache.kafka.tools.TopicCommand", ["--bootstrap-server", bs, "--list"])`` is what
``kafka-topics.sh --list`` runs, without a Kafka distribution on disk.  The tools log warnings to
stderr (``reference/log4j2-tools.properties``), so stdout is what they print on purpose.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from .maven import java_binary, kafka_classpath, reference_dir

#: A tool must finish in this long unless the caller says otherwise.
TOOL_TIMEOUT_S = 120

#: Kafka's command-line tools by the name of their script, as ``bin/*.sh`` runs them in 4.x.
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
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
                 jvm_options: Sequence[str] = (), logging: str = "log4j2-tools.properties") -> list[str]:
    """The command line that runs ``main_class`` with Kafka's classpath (for ``subprocess.Popen``),
    with the JVM options Kafka's scripts use; ``heap`` is ``-Xmx`` (the scripts' default for
    tools is 256 MiB, for the broker 1 GiB)."""
    log_config = reference_dir() / logging
    return [java_binary(), f"-Xmx{heap}", *KAFKA_JVM_OPTIONS, f"-Dlog4j2.configurationFile={log_config}", *jvm_options,
            "-cp", os.pathsep.join(kafka_classpath()), main_class, *args]


def run_java(main_class: str, args: Sequence[str], *, timeout: float = TOOL_TIMEOUT_S, check: bool = False,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a main class (or a tool's script name from ``TOOLS``) to completion; stdout and stderr
    are captured as text.  ``check`` raises when it exits non-zero, with its output."""
    cmd = java_command(TOOLS.get(main_class, main_class), args)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
    if check and done.returncode != 0:
        raise RuntimeError(f"{main_class} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done
