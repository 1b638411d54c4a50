"""Fixtures: the real broker, as a child process or embedded, on free loopback ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from onceflow import EmbeddedBroker

READY_TIMEOUT_S = 60

#: Settings that keep tests quick without changing semantics: no 3 s wait before
#: the first rebalance of a new group.
FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0"}

#: Every segment, the internal topics' too, rolls at 1 KiB: transactions then outlive several
#: rolls and coordinators reload across segments, the shapes where issue 7's bugs hid.
SMALL_SEGMENTS = {"log.segment.bytes": "1024", "offsets.topic.segment.bytes": "1024",
                  "transaction.state.log.segment.bytes": "1024"}

#: ``@pytest.mark.parametrize("broker_process", SEGMENT_SHAPES, indirect=True)`` runs a test
#: against a broker with Kafka's default segment sizes and one with 1 KiB segments.
SEGMENT_SHAPES = [pytest.param({}, id="default-segments"), pytest.param(SMALL_SEGMENTS, id="1KiB-segments")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], object], timeout: float = 30.0, interval: float = 0.02, what: str = "condition") -> object:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class BrokerProcess:
    """``onceflow broker`` in a child process; can be killed (-9) and restarted on the same port and data."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[str] | None = None
        #: Extra environment for the next start (e.g. ONCEFLOW_FAULT for crash points).
        self.env: dict[str, str] = {}
        self.log_path = data_dir.parent / f"broker-{self.port}.log"

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> BrokerProcess:
        cmd = [sys.executable, "-m", "onceflow", "broker", "--data-dir", str(self.data_dir),
               "--listen", f"127.0.0.1:{self.port}"]
        for key, value in self.overrides.items():
            cmd += ["-o", f"{key}={value}"]
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env={**os.environ, **self.env})
        assert self.proc.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line or "ready on" in line:
                break
        if "ready on" not in line:
            self.proc.kill()
            raise RuntimeError(f"broker did not start:\n{self.log()}")
        assert line.strip() == f"onceflow broker ready on 127.0.0.1:{self.port}", line
        return self

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.proc = None

    def wait_exit(self, timeout: float = 60) -> int:
        """Wait for the process to end by itself (a crash point); returns its exit status."""
        assert self.proc is not None
        code = self.proc.wait(timeout)
        self.proc = None
        return code

    def stop(self) -> int:
        """SIGTERM and wait: a clean shutdown."""
        if self.proc is None:
            return 0
        self.proc.terminate()
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        self.proc = None
        return code

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()


@pytest.fixture
def broker_process(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerProcess]:
    """The broker process; indirect parametrization may add settings (e.g. ``SEGMENT_SHAPES``)."""
    proc = BrokerProcess(tmp_path / "data", {**FAST_GROUPS, **getattr(request, "param", {})})
    proc.start()
    try:
        yield proc
    finally:
        if proc.proc is not None:
            proc.proc.kill()
            proc.proc.wait()


@pytest.fixture
def make_broker_process(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    made: list[BrokerProcess] = []

    def make(**overrides: str) -> BrokerProcess:
        proc = BrokerProcess(tmp_path / f"data{len(made)}", {**FAST_GROUPS, **overrides})
        made.append(proc)
        return proc.start()

    try:
        yield make
    finally:
        for proc in made:
            if proc.proc is not None:
                proc.proc.kill()
                proc.proc.wait()


@pytest.fixture
def embedded_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "embedded", config=FAST_GROUPS) as broker:
        yield broker
