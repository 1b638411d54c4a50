"""One line of progress on stderr, for a person watching: ``onceflow bench``, ``chaos``, the demo
(``longcommand.Session.status``) and ``topics produce|consume`` (``tools.records``).

The line is rewritten in place (``\\r``, then erase to the end of the line), at most every
``REDRAW_S`` and cut to the terminal's width, and only when the stream is a terminal: piped, nothing
of it is written, so what scripts and tests read stays as it was.  ``clear`` takes it away before
a line of output of its own.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import IO, Any

#: Least time between two redraws.
REDRAW_S = 0.2


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (False for anything without a file descriptor)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class ProgressLine:
    """The progress line on ``stream`` (stderr): drawn only when ``enabled`` (default: the stream is a
    terminal), first ``first_after`` seconds after it is made (a quick command shows none)."""

    def __init__(self, stream: IO[str] | None = None, enabled: bool | None = None, first_after: float = 0.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = is_terminal(self.stream) if enabled is None else enabled
        self._drawn_at = time.monotonic() - REDRAW_S + first_after
        self._shown = ""

    def show(self, text: str) -> None:
        """Rewrite the line with ``text`` (unless it was drawn less than ``REDRAW_S`` ago)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._drawn_at < REDRAW_S:
            return
        self._drawn_at = now
        width = shutil.get_terminal_size((100, 24)).columns - 1
        self._shown = text[:width]
        self.stream.write(f"\r{self._shown}\x1b[K")
        self.stream.flush()

    def clear(self) -> None:
        """Take the line away; the next ``show`` draws at once."""
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = ""
            self._drawn_at = 0.0
