"""``onceflow broker`` as a child process, for the tools that fault it: the demos and ``onceflow chaos``.

Theory of operation: the broker runs as ``python -m onceflow broker`` on a loopback port chosen
once, so a restart serves the same address and the same data directory, as a restarted Kafka
broker does.  ``start`` waits for the ``onceflow broker ready on`` line the CLI prints once it
accepts connections.  The faults are signals: ``kill`` is SIGKILL (no shutdown code, no flush:
what recovery must survive), ``pause``/``resume`` are SIGSTOP/SIGCONT (a broker that stops
answering but keeps its sockets, like a long GC pause or a frozen VM).  ``env`` is added to the
next start's environment, which is how ``ONCEFLOW_FAULT`` crash points (``onceflow.faults``) are
armed for one life of the process.  Its stderr (the broker's log) goes to ``log_path``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

#: How long a start may take before it is an error (recovery of a large log included).
READY_TIMEOUT_S = 120.0
#: How long a stop or a kill may take to be reaped.
STOP_TIMEOUT_S = 60.0


def free_port() -> int:
    """A loopback port free at this moment."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """One broker process, restartable on the same port and data directory."""

    def __init__(self, data_dir: str | Path | None = None, overrides: Mapping[str, str] | None = None,
                 port: int | None = None, log_path: str | Path | None = None, log_level: str = "WARNING") -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="onceflow-broker-"))
        self.port = port or free_port()
        self.overrides = {"group.initial.rebalance.delay.ms": "0", **(overrides or {})}
        self.log_path = Path(log_path) if log_path else self.data_dir.parent / f"broker-{self.port}.log"
        self.log_level = log_level
        #: Added to the environment of the next start (e.g. ``ONCEFLOW_FAULT``), then cleared.
        self.env: dict[str, str] = {}
        self.proc: subprocess.Popen[str] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Start it and wait until it accepts connections; raise with its log's tail if it does not."""
        cmd = [sys.executable, "-m", "onceflow", "--log-level", self.log_level, "broker",
               "--data-dir", str(self.data_dir), "--listen", self.bootstrap]
        for key, value in self.overrides.items():
            cmd += ["-o", f"{key}={value}"]
        env, self.env = {**os.environ, **self.env}, {}
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:  # each readline returns at a line or at the process's end
            line = self.proc.stdout.readline()
            if not line or "ready on" in line:
                break
        if "ready on" not in line:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)
            raise RuntimeError(f"the broker did not start; the end of {self.log_path}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown code runs, nothing is flushed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused process dies as well, but say so plainly
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)

    def pause(self) -> None:
        """SIGSTOP: the broker keeps its sockets open and answers nothing until ``resume``."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def stop(self, keep: bool = False) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL if it does not end; remove the data directory
        it made itself unless ``keep``."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
        if self._own_dir and not keep:
            shutil.rmtree(self.data_dir, ignore_errors=True)


@contextlib.contextmanager
def broker_process(**kwargs: object) -> Iterator[BrokerProcess]:
    """A started ``BrokerProcess`` (arguments as its constructor's), stopped on exit."""
    proc = BrokerProcess(**kwargs)  # type: ignore[arg-type]
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
