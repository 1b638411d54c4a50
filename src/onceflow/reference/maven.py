"""The reference Maven project: check Java and Maven, resolve once, hand back classpaths.

``kafka_classpath()`` is Apache Kafka's broker, tools and Java client at the version pinned in
``reference/pom.xml``, plus our Java programs (``reference/src``); ``spark_kafka_classpath()`` is
Spark's JVM Kafka connector with its own Kafka client.  The first call runs Maven (about 15 s
with a warm network, filling ``~/.m2``); later calls read ``reference/target/*.txt`` unless the
pom or a Java source is newer.  A file lock keeps two processes from building at once.
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

#: Kafka's brokers and tools need Java 17 (Kafka 4.x dropped 8 and 11 for the broker).
JAVA_MIN = 17
MAVEN_TIMEOUT_S = 900


class ReferenceUnavailable(RuntimeError):
    """Java, Maven or the reference project is missing; the message says what to install."""


def reference_dir() -> Path:
    """``reference/`` of the source checkout, or ``ONCEFLOW_REFERENCE_DIR``."""
    configured = os.environ.get("ONCEFLOW_REFERENCE_DIR")
    path = Path(configured) if configured else Path(__file__).resolve().parents[3] / "reference"
    if not (path / "pom.xml").is_file():
        raise ReferenceUnavailable(
            f"the reference Maven project is not at {path}: it ships with a source checkout of "
            "Onceflow; set ONCEFLOW_REFERENCE_DIR to its reference/ directory")
    return path


@functools.cache
def java_binary() -> str:
    """The ``java`` to run, after checking it is Java 17 or newer (once per process: the check
    is a JVM start, and every ``java_command`` asks)."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise ReferenceUnavailable(
            "Apache Kafka needs Java 17 or newer and no 'java' was found: install it "
            "(Debian: apt-get install openjdk-17-jdk-headless) or set JAVA_HOME")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):
        major = int(match.group(2))
    if major < JAVA_MIN:
        raise ReferenceUnavailable(f"Apache Kafka needs Java {JAVA_MIN} or newer; {java} is {out.splitlines()[0] if out else 'unknown'}")
    return java


def _maven_binary() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ReferenceUnavailable(
            "resolving Apache Kafka needs Maven and no 'mvn' was found: install it "
            "(Debian: apt-get install maven); it fetches from Maven Central once")
    return mvn


def _newest_input(root: Path) -> float:
    sources = [root / "pom.xml", root / "spark-kafka" / "pom.xml", *(root / "src").rglob("*.java")]
    return max(p.stat().st_mtime for p in sources if p.exists())


def _build(root: Path, output: Path, args: list[str]) -> list[str]:
    target = root / "target"
    target.mkdir(exist_ok=True)
    with open(target / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not output.exists() or output.stat().st_mtime < _newest_input(root):
            java_binary()
            pom = [] if "-f" in args else ["-f", str(root / "pom.xml")]
            cmd = [_maven_binary(), "-q", "-B", *pom, *args,
                   f"-Dmdep.outputFile={output}"]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S)
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
                raise ReferenceUnavailable(f"Maven could not resolve the reference ({' '.join(cmd)}):\n{tail}")
            # The dependency plugin leaves an unchanged classpath file as it was: without this, a
            # Java source edited since would make every later call run Maven again (10 s each).
            output.touch()
    return [entry for entry in output.read_text().strip().split(os.pathsep) if entry]


def kafka_classpath() -> list[str]:
    """Apache Kafka's broker, tools and Java client, and our Java programs, as classpath entries."""
    root = reference_dir()
    entries = _build(root, root / "target" / "classpath.txt", ["compile", "dependency:build-classpath"])
    return [str(root / "target" / "classes"), *entries]


#: What Spark's Kafka connector needs that PySpark's own jars do not hold (Hadoop, Scala, lz4,
#: snappy and SLF4J come with PySpark, at the versions Spark was built with).
_SPARK_KAFKA_JARS = ("/org/apache/spark/spark-sql-kafka-0-10_", "/org/apache/spark/spark-token-provider-kafka-0-10_",
                     "/org/apache/kafka/kafka-clients/", "/org/apache/commons/commons-pool2/")


def spark_kafka_classpath() -> list[str]:
    """Spark's JVM Kafka connector (``spark-sql-kafka-0-10``) and the jars it needs beyond Spark's
    own, for ``spark.jars``."""
    root = reference_dir()
    entries = _build(root, root / "target" / "spark-classpath.txt",
                     ["-f", str(root / "spark-kafka" / "pom.xml"), "dependency:build-classpath", "-DincludeScope=runtime"])
    return [e for e in entries if any(part in e for part in _SPARK_KAFKA_JARS)]
