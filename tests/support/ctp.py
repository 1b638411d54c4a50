"""The consume-transform-produce worker (``ctp_worker.py``) as a child process a test can SIGKILL."""

from __future__ import annotations

import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.kafka import TIMEOUT

WORKER = str(Path(__file__).with_name("ctp_worker.py"))


class Worker:
    """The consume-transform-produce worker as a child process we can SIGKILL."""

    def __init__(self, bootstrap: str) -> None:
        self.proc = subprocess.Popen([sys.executable, WORKER, bootstrap, "ctp-in", "ctp-out", "ctp-group", "ctp-worker"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def lines(self) -> Iterator[str]:
        """Its output lines as they come, for at most ``TIMEOUT`` seconds in all."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline()
                if not line:
                    return
                yield line.strip()
        raise AssertionError("the worker went quiet")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(TIMEOUT)
