"""The real broker as a child process, the settings tests start it with, and its data directory
read directly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from onceflow.log.compaction import read_checkpoint

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


def partition_dir(broker: BrokerProcess, topic: str, partition: int = 0) -> Path:
    return broker.data_dir / f"{topic}-{partition}"


def cleaned_through(directory: Path, offset: int) -> bool:
    """The cleaner's checkpoint has passed ``offset``."""
    checkpoint = read_checkpoint(directory)
    return checkpoint is not None and checkpoint > offset
