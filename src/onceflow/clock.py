"""Time, injected.

Theory of operation: domain code (logs, coordinators, retention, group
timers) never reads the wall clock or sleeps.  It is handed a ``Clock`` and
asks it for ``now_ms()``; timers are deadlines compared against that value
when the owner is *ticked*.  The asyncio server ticks with ``SystemClock``;
tests tick with ``FakeClock`` and move time with ``advance()``, so a
30-second session timeout takes no real time at all.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


class SystemClock:
    """The real wall clock (epoch milliseconds)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that only moves when a test says so."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError("time does not go backwards")
        self._now += ms
        return self._now

    def set(self, now_ms: int) -> None:
        if now_ms < self._now:
            raise ValueError("time does not go backwards")
        self._now = now_ms
