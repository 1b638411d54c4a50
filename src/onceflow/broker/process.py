"""``onceflow broker`` as a child process: the one way the tests, the benchmarks, ``onceflow chaos``
and the demos start a broker, and ``free_port``, the one way they pick a loopback port.

Theory of operation: the broker runs as ``python -m onceflow broker`` on a loopback port chosen
once, so a restart serves the same address and the same data directory, as a restarted Kafka
broker does.  Its settings are exactly ``overrides`` (``FAST_GROUPS`` is what most users add).
``start`` waits for the line the CLI prints once it accepts connections, and checks it is exactly
``onceflow broker ready on 127.0.0.1:<port>``.  The faults are signals: ``kill`` is SIGKILL (no
shutdown code, no flush: what recovery must survive), ``pause``/``resume`` are SIGSTOP/SIGCONT
(a broker that stops answering but keeps its sockets, like a long GC pause or a frozen VM);
``stop`` is SIGTERM, a clean shutdown.  ``env`` is added to the next start's environment, which
is how ``ONCEFLOW_FAULT`` crash points (``onceflow.faults``) are armed for one life of the
process; ``wait_exit`` waits for a life that ends by itself.  Its stderr (the broker's log, at
``log_level``) goes to ``log_path``, or to this process's stderr with ``log_to_stderr``.  Without
a ``data_dir`` it makes a temporary directory for the data and the log, removed by ``stop``.
``with BrokerProcess(...) as broker:`` starts it and stops it on exit, as ``KafkaCluster`` (Apache
Kafka's reference broker, ``onceflow.reference``) does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("onceflow.broker.process")

#: How long a start may take before it is an error (recovery of a large log included).
READY_TIMEOUT_S = 120.0
#: How long a stop or a kill may take to be reaped.
STOP_TIMEOUT_S = 60.0

#: Settings that keep tests and tools quick without changing semantics: no 3 s wait before the
#: first rebalance of a new group.
FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0"}


def free_port() -> int:
    """A loopback port free at this moment."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """One broker process, restartable on the same port and data directory."""

    def __init__(self, data_dir: str | Path | None = None, overrides: Mapping[str, str] | None = None, *,
                 port: int | None = None, log_path: str | Path | None = None, log_level: str | None = None,
                 log_to_stderr: bool = False, log_format: str | None = None) -> None:
        #: The temporary directory made for the data and the log when no ``data_dir`` is given.
        self._own_root: Path | None = None
        if data_dir is None:
            self._own_root = Path(tempfile.mkdtemp(prefix="onceflow-broker-"))
            data_dir = self._own_root / "data"
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.overrides = dict(overrides or {})
        self.log_path = Path(log_path) if log_path else self.data_dir.parent / f"broker-{self.port}.log"
        #: ``--log-level`` for the broker; None: the CLI's default.
        self.log_level = log_level
        self.log_to_stderr = log_to_stderr
        #: ``--log-format`` (text or json); None: the CLI's default.
        self.log_format = log_format
        #: The metrics port the running broker serves (``metrics.port``; 0 resolved), None when off.
        self.metrics_port: int | None = None
        #: Added to the environment of the next start (e.g. ``ONCEFLOW_FAULT``), then cleared.
        self.env: dict[str, str] = {}
        self.proc: subprocess.Popen[str] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = READY_TIMEOUT_S) -> BrokerProcess:
        """Start it and wait until it accepts connections; raise with its log's tail if it does not."""
        cmd = [sys.executable, "-m", "onceflow"]
        if self.log_level is not None:
            cmd += ["--log-level", self.log_level]
        if self.log_format is not None:
            cmd += ["--log-format", self.log_format]
        cmd += ["broker", "--data-dir", str(self.data_dir), "--listen", self.bootstrap_servers]
        for key, value in self.overrides.items():
            cmd += ["-o", f"{key}={value}"]
        env, self.env = {**os.environ, **self.env}, {}
        with contextlib.ExitStack() as files:
            stderr = None if self.log_to_stderr else files.enter_context(open(self.log_path, "a"))
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:  # each readline returns at a line or at the process's end
            line = self.proc.stdout.readline()
            if not line or "ready on" in line:
                break
        ready = f"onceflow broker ready on {self.bootstrap_servers}"
        if line.strip() != ready:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)
            log = "its log went to stderr" if self.log_to_stderr else f"the end of {self.log_path}:\n{self.log_tail()}"
            raise RuntimeError(f"the broker did not start (no {ready!r}, but {line!r}); {log}")
        self.metrics_port = None
        if self.overrides.get("metrics.port") is not None:  # printed right after the ready line
            url = self.proc.stdout.readline().strip()
            if url.startswith("metrics and console on http://"):
                self.metrics_port = int(url.rstrip("/").rsplit(":", 1)[1])
        return self

    def log(self) -> str:
        """Everything the broker has logged to ``log_path`` (empty before it has)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

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

    def wait_exit(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """Wait for the process to end by itself (at a crash point); its exit status."""
        if self.proc is None:
            raise RuntimeError("the broker was never started")
        return self.proc.wait(timeout)

    def stop(self, keep: bool = False) -> int:
        """SIGTERM (a clean shutdown) and wait; its exit status (0 if it never ran).  If it does not
        end in ``STOP_TIMEOUT_S``: SIGKILL, one warning, and the status of the kill (negative), so a
        caller that needs a clean stop sees it was not.  Removes the temporary directory it made
        itself unless ``keep``."""
        try:
            if self.proc is None:
                return 0
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                return self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("the broker on %s did not stop within %.0f s of SIGTERM; killed it", self.bootstrap_servers,
                            STOP_TIMEOUT_S)
                self.proc.kill()
                return self.proc.wait(STOP_TIMEOUT_S)
        finally:
            if self._own_root is not None and not keep:
                shutil.rmtree(self._own_root, ignore_errors=True)

    def restart(self) -> BrokerProcess:
        """A clean stop, then a start on the same port and data."""
        self.stop(keep=True)
        return self.start()

    def __enter__(self) -> BrokerProcess:
        """``with BrokerProcess() as broker:`` started, and stopped on exit."""
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
