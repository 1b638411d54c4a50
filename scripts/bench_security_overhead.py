"""What TLS and SCRAM cost (issue 23): ``onceflow bench produce`` and ``consume`` over each security
protocol, against Onceflow's broker process and against Apache Kafka, configured the same way.

Each broker serves four listeners at once: PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL (SCRAM-SHA-256
for both SASL ones; certificates from ``onceflow.security.certs``).  A round runs every
(broker, protocol) pair once, each a fresh ``onceflow bench`` process given the listener with
``--bootstrap-servers`` and the client settings with ``-X``; the order of the protocols rotates
from round to round.  Prints every run, the medians, and per broker the median of the per-round
ratios against PLAINTEXT.

    python scripts/bench_security_overhead.py [ROUNDS] [--workloads produce,consume] [--seconds 10]
                                              [--records 1000000] [--brokers onceflow,kafka]

docs/performance.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from onceflow.broker.process import BrokerProcess, free_port
from onceflow.reference import KafkaCluster
from onceflow.security.certs import CertificateAuthority

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
USER, PASSWORD = "bench", "bench-secret"


def security_settings(keystore: Path) -> dict[str, str]:
    return {
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
    }


def client_settings(protocol: str, ca: Path) -> list[str]:
    settings = [f"security.protocol={protocol}"]
    if protocol.startswith("SASL"):
        settings += ["sasl.mechanism=SCRAM-SHA-256", f"sasl.username={USER}", f"sasl.password={PASSWORD}"]
    if protocol.endswith("SSL"):
        settings += [f"ssl.ca.location={ca}"]
    return [item for setting in settings for item in ("-X", setting)]


@contextmanager
def onceflow_broker(directory: Path, keystore: Path) -> Iterator[dict[str, str]]:
    ports = {name: free_port() for name in PROTOCOLS}
    (directory / "onceflow").mkdir(parents=True, exist_ok=True)
    proc = BrokerProcess(directory / "onceflow" / "data", {
        **security_settings(keystore),
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
    }, port=ports["PLAINTEXT"])
    proc.start()
    try:
        yield {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    finally:
        proc.stop()


@contextmanager
def kafka_broker(directory: Path, keystore: Path) -> Iterator[dict[str, str]]:
    kafka = KafkaCluster(data_dir=directory / "kafka")
    node = kafka.nodes[1]
    ports = {"PLAINTEXT": node.port, **{name: free_port() for name in PROTOCOLS[1:]}}
    endpoints = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    kafka.overrides.update({
        **security_settings(keystore),
        "listeners": f"{endpoints},CONTROLLER://127.0.0.1:{node.controller_port}",
        "advertised.listeners": endpoints,
        "listener.security.protocol.map": ",".join(f"{p}:{p}" for p in PROTOCOLS) + ",CONTROLLER:PLAINTEXT",
    })
    with kafka:
        yield {name: f"127.0.0.1:{port}" for name, port in ports.items()}


def add_user(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    upsert = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)


def delete_topics(bootstrap: str) -> None:
    """Each run writes a fresh topic: deleted after it, or the runs fill the disk (a few GB each)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [t for t in admin.list_topics(timeout=30).topics if not t.startswith("__")]
    for future in (admin.delete_topics(topics).values() if topics else ()):
        future.result(60)


def run_once(workload: str, bootstrap: str, settings: list[str], seconds: float, records: int) -> float:
    cmd = [sys.executable, "-m", "onceflow", "bench", workload, "--bootstrap-servers", bootstrap, *settings, "--json"]
    cmd += ["--seconds", f"{seconds:g}"] if workload == "produce" else ["--records", str(records)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 600, check=False)
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["records_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rounds", nargs="?", type=int, default=5)
    parser.add_argument("--workloads", default="produce,consume")
    parser.add_argument("--brokers", default="onceflow,kafka")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="bench-security-"))
    stack_cleanup = ExitStack()
    stack_cleanup.callback(shutil.rmtree, directory, True)
    ca = CertificateAuthority(directory / "pki")
    keystore = ca.issue("broker", "CN=localhost", hosts=("127.0.0.1", "localhost")).keystore
    figures: dict[tuple[str, str, str], list[float]] = {}
    with ExitStack() as stack:
        brokers = {}
        for name in args.brokers.split(","):
            start = onceflow_broker if name == "onceflow" else kafka_broker
            brokers[name] = stack.enter_context(start(directory, keystore))
            add_user(brokers[name]["PLAINTEXT"])
        for round_no in range(args.rounds):
            order = PROTOCOLS[round_no % 4:] + PROTOCOLS[:round_no % 4]
            for workload in args.workloads.split(","):
                for name, listeners in brokers.items():
                    for protocol in order:
                        figure = run_once(workload, listeners[protocol], client_settings(protocol, ca.location),
                                          args.seconds, args.records)
                        figures.setdefault((workload, name, protocol), []).append(figure)
                        delete_topics(listeners["PLAINTEXT"])
                        print(f"round {round_no + 1} {workload:8} {name:9} {protocol:15} {figure:12,.0f} records/s",
                              flush=True)
    stack_cleanup.close()
    print()
    for workload in args.workloads.split(","):
        for name in brokers:
            plain = figures[(workload, name, "PLAINTEXT")]
            for protocol in PROTOCOLS:
                runs = figures[(workload, name, protocol)]
                ratios = [r / p for r, p in zip(runs, plain, strict=True)]
                print(f"{workload:8} {name:9} {protocol:15} median {statistics.median(runs):12,.0f} records/s   "
                      f"ratio to PLAINTEXT {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
