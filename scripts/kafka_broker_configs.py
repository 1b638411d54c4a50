"""Write src/onceflow/kafka_broker_configs.txt: the broker configuration names of the pinned Apache Kafka.

``BrokerConfig`` tells a setting Kafka has but Onceflow does not use (logged at INFO and
ignored, so an existing ``server.properties`` works unchanged) from a name neither knows (a
typo: a WARNING with a did-you-mean).  The names are Kafka's own, read from the jars
``reference/pom.xml`` pins: ``kafka.server.KafkaConfig.configDef().names()``, the table Kafka's
"Broker Configs" documentation is generated from.  Run it again after changing
``kafka.version`` in ``reference/pom.xml``:

    python scripts/kafka_broker_configs.py           # write the file (needs Java 17 and Maven)
    python scripts/kafka_broker_configs.py --check   # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "src" / "onceflow" / "kafka_broker_configs.txt"

sys.path.insert(0, str(ROOT / "src"))

from onceflow.reference.maven import java_binary, kafka_classpath  # noqa: E402

PROGRAM = """\
public class KafkaBrokerConfigNames {
    public static void main(String[] args) {
        System.out.println(org.apache.kafka.common.utils.AppInfoParser.getVersion());
        new java.util.TreeSet<>(kafka.server.KafkaConfig.configDef().names()).forEach(System.out::println);
    }
}
"""


def generate() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "KafkaBrokerConfigNames.java"
        source.write_text(PROGRAM)
        done = subprocess.run([java_binary(), "-cp", os.pathsep.join(kafka_classpath()), str(source)],
                              capture_output=True, text=True, timeout=300, check=True)
    version, *names = done.stdout.split()
    header = [
        f"# Apache Kafka {version}'s broker configuration names, one per line:",
        "# kafka.server.KafkaConfig.configDef().names(), sorted.",
        "# Made by scripts/kafka_broker_configs.py from the jars reference/pom.xml pins; do not edit.",
    ]
    return "\n".join([*header, *names]) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed file differs")
    args = parser.parse_args()
    text = generate()
    if args.check:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(ROOT)} is out of date: run python scripts/kafka_broker_configs.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}: {len(text.splitlines()) - 3} names")
    return 0


if __name__ == "__main__":
    sys.exit(main())
