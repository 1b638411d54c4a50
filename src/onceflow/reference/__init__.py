"""Apache Kafka as the reference (issue 10).

Onceflow claims Kafka's semantics, and that a pipeline moves to an Apache Kafka cluster with no
code change.  This package runs the real thing so both claims can be checked, not read off
documentation:

* ``maven``: the Maven project in ``reference/`` resolves one pinned Apache Kafka release (the
  broker, its tools, the Java client) and Spark's JVM Kafka connector into the local Maven cache,
  builds our small Java programs, and hands back their classpaths.  Missing Java or Maven is one
  clear message saying what to install.
* ``kafka``: ``KafkaCluster`` starts KRaft brokers on free loopback ports with temporary data
  directories (one node, or three with replication factor 3 and ``min.insync.replicas=2``),
  waits until they serve metadata, kills one with SIGKILL and brings it back, and stops them on
  exit.  It is used the way ``EmbeddedBroker`` is used.
* ``tools``: Kafka's own command-line tools and Java programs, run through their main classes on
  the cached classpath.

It needs a source checkout (the ``reference/`` directory beside ``src/``) or
``ONCEFLOW_REFERENCE_DIR`` pointing at a copy of it.
"""

from .kafka import KafkaCluster
from .maven import ReferenceUnavailable, kafka_classpath, spark_kafka_classpath
from .tools import run_java

__all__ = ["KafkaCluster", "ReferenceUnavailable", "kafka_classpath", "run_java", "spark_kafka_classpath"]
