"""A real terminal for CLI tests: a tmux server of the test's own (``tmux -L``), one window running
an interactive bash, driven with ``send-keys`` and read with ``capture-pane``.

``Terminal.run("onceflow ...")`` types a command line followed by ``; echo EXIT=$?``, so a test
can wait for the command's exit status as the shell saw it (130 after Ctrl-C).  The screen is
what a user would see: progress lines redrawn with ``\\r`` show their last state only.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


class Terminal:
    """A tmux session of ``width`` x ``height`` running bash with ``env`` set; a context manager."""

    def __init__(self, env: Mapping[str, str] | None = None, width: int = 160, height: int = 40) -> None:
        if shutil.which("tmux") is None:
            raise RuntimeError("tmux is not installed (apt-get install tmux)")
        self.socket = f"onceflow-test-{uuid.uuid4().hex[:12]}"
        venv_bin = str(Path(sys.executable).parent)
        self.env = {
            "PATH": f"{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "PYTHONPATH": str(REPO / "src"),
            "HOME": os.environ.get("HOME", "/root"),
            "TERM": "xterm-256color",
            **(env or {}),
        }
        self.width, self.height = width, height

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=30, check=True)
        return done.stdout

    def __enter__(self) -> Terminal:
        env_args = [a for key, value in self.env.items() for a in ("-e", f"{key}={value}")]
        self._tmux("new-session", "-d", "-s", "t", "-x", str(self.width), "-y", str(self.height), *env_args,
                   "bash --norc --noprofile")
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30, check=False)

    def run(self, command: str) -> None:
        """Type ``command`` and Enter; its exit status is echoed as ``EXIT=N`` when it ends."""
        self._tmux("send-keys", "-t", "t", "-l", f"{command}; echo EXIT=$?")
        self._tmux("send-keys", "-t", "t", "Enter")

    def keys(self, *keys: str) -> None:
        """Send keys as tmux names them (``C-c``, ``C-d``, ``Enter``)."""
        self._tmux("send-keys", "-t", "t", *keys)

    def type(self, text: str) -> None:
        """Type ``text`` literally."""
        self._tmux("send-keys", "-t", "t", "-l", text)

    def screen(self) -> str:
        """What the window shows now, with the history above it."""
        return self._tmux("capture-pane", "-t", "t", "-p", "-S", "-1000")

    def wait_for_text(self, pattern: str, timeout: float = 60) -> str:
        """Wait until the screen matches the regular expression ``pattern``; the screen then."""
        found: list[str] = []

        def seen() -> bool:
            found[:] = [self.screen()]
            return re.search(pattern, found[0], re.MULTILINE) is not None

        wait_for(seen, timeout=timeout, interval=0.1, what=lambda: f"{pattern!r} on the screen:\n{found[0] if found else ''}")
        return found[0]

    def wait_for_exit(self, timeout: float = 60) -> tuple[int, str]:
        """The exit status of the command ``run`` started, and the screen."""
        screen = self.wait_for_text(r"^EXIT=\d+", timeout)
        match = re.search(r"^EXIT=(\d+)", screen, re.MULTILINE)
        assert match is not None
        return int(match.group(1)), screen


def onceflow(*args: str) -> str:
    """A shell command line running ``onceflow ARGS`` from the sources under test."""
    return shlex.join([sys.executable, "-m", "onceflow", *args])
