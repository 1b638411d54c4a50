"""``pip install onceflow`` without extras: a fresh virtual environment, the package built and
installed from this checkout as a user would, then the broker started from it and a produce and
consume round trip made with the confluent-kafka it installed.  Nothing of the ``spark`` extra is
there, so this also proves that the CLI, the broker and the tools do not need it, and that what
does need it says how to get it in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from onceflow.broker.process import free_port

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60

ROUND_TRIP = """
import sys
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap = sys.argv[1]
admin = AdminClient({"bootstrap.servers": bootstrap})
admin.create_topics([NewTopic("base", 2, 1)])["base"].result(30)
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
for i in range(100):
    producer.produce("base", key=str(i % 7).encode(), value=f"v{i}".encode())
assert producer.flush(30) == 0
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "base", "auto.offset.reset": "earliest",
                     "isolation.level": "read_committed"})
consumer.subscribe(["base"])
seen = []
for _ in range(300):
    message = consumer.poll(0.1)
    if message is not None and message.error() is None:
        seen.append(message.value().decode())
    if len(seen) >= 100:
        break
consumer.close()
assert sorted(seen) == sorted(f"v{i}" for i in range(100)), seen
print("round trip ok")
"""


def _run(*cmd: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=240, env=env, **kwargs)  # type: ignore[call-overload, no-any-return]


@pytest.fixture(scope="module")
def base_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A virtual environment with ``pip install <this checkout>`` and nothing else; its bin directory."""
    home = tmp_path_factory.mktemp("base-install")
    source = home / "onceflow"  # a copy: pip builds in the source tree, and this checkout stays untouched
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    venv.create(home / "venv", with_pip=True, system_site_packages=False)
    bin_dir = home / "venv" / "bin"
    installed = _run(bin_dir / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", source, cwd=home)
    assert installed.returncode == 0, installed.stderr
    yield bin_dir
    shutil.rmtree(home, ignore_errors=True)  # about 70 MB


def test_the_base_install_has_no_spark_extra(base_env: Path) -> None:
    probe = _run(base_env / "python", "-c", "import importlib.util as u; print([m for m in ('pyspark', 'pyarrow', 'pandas', 'rich', "
                                            "'argcomplete') if u.find_spec(m)])")
    assert probe.returncode == 0 and probe.stdout.strip() == "['rich', 'argcomplete']", probe  # the tools' tables, completion
    located = _run(base_env / "python", "-c", "import onceflow; print(onceflow.__file__)", cwd=base_env)
    assert str(base_env.parent) in located.stdout, located  # the installed copy, not this checkout's sources


def test_the_version_answers_quickly(base_env: Path) -> None:
    started = time.monotonic()
    proc = _run(base_env / "onceflow", "--version")
    assert proc.returncode == 0 and proc.stdout.startswith("onceflow "), proc
    assert time.monotonic() - started < 5  # a bound, not a benchmark: it used to import PySpark and fail


def test_the_broker_starts_and_a_round_trip_works(base_env: Path, tmp_path: Path) -> None:
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    log_path = tmp_path / "broker.log"
    with open(log_path, "w") as log:
        broker = subprocess.Popen([str(base_env / "onceflow"), "--log-level", "WARNING", "broker", "--data-dir",
                                   str(tmp_path / "data"), "--listen", bootstrap], stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        assert broker.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        line = ""
        while time.monotonic() < deadline and "ready on" not in line:
            line = broker.stdout.readline()
            if not line:
                break
        assert line.strip() == f"onceflow broker ready on {bootstrap}", log_path.read_text()
        trip = _run(base_env / "python", "-c", ROUND_TRIP, bootstrap)
        assert trip.returncode == 0 and "round trip ok" in trip.stdout, trip.stderr
        for family, wanted in (("topics", '"base"'), ("groups", '"base"'), ("txn", "")):
            proc = _run(base_env / "onceflow", family, "list", "--bootstrap-servers", bootstrap, "--json")
            assert proc.returncode == 0 and wanted in proc.stdout, proc
        bench = _run(base_env / "onceflow", "bench", "produce", "--seconds", "1", "--bootstrap-servers", bootstrap,
                     "--json")
        assert bench.returncode == 0 and '"records_per_s"' in bench.stdout, bench
    finally:
        broker.terminate()
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait(30)


def test_what_needs_the_spark_extra_says_so_in_one_line(base_env: Path) -> None:
    for args in (("demo",), ("bench", "pipeline"), ("bench", "source")):
        proc = _run(base_env / "onceflow", *args)
        assert proc.returncode == 2 and proc.stdout == "", proc
        assert proc.stderr.count("\n") == 1 and "pip install 'onceflow[spark]'" in proc.stderr, proc.stderr
    proc = _run(base_env / "python", "-c", "import onceflow.spark\nonceflow.spark.register(None)")
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == ("ModuleNotFoundError: onceflow.spark needs pyspark, pyarrow, pandas, "
                                            "which the spark extra installs: pip install 'onceflow[spark]'"), proc.stderr
    # Spark's lookup of Python data sources imports pyspark_onceflow: without the extra it defines nothing.
    proc = _run(base_env / "python", "-c", "import pyspark_onceflow; print(hasattr(pyspark_onceflow, 'DefaultSource'))",
                cwd=base_env)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc
