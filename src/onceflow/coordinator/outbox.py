"""Callbacks a coordinator owes, run only once its state is consistent.

Both coordinators answer requests through callbacks.  A callback is never
called in the middle of a state change: it is *posted* to the outbox, and
the public method (or ``tick``, or a store's ``done``) flushes the outbox as
it returns.  A callback that calls back into the coordinator posts more
work, which the same flush runs; re-entrant flushes are no-ops.  A failing
callback is logged and does not stop the others.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any


class Outbox:
    __slots__ = ("_flushing", "_log", "_owner", "_queue")

    def __init__(self, log: logging.Logger, owner: str) -> None:
        self._queue: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._flushing = False
        self._log = log
        self._owner = owner

    def post(self, fn: Callable[..., None], *args: Any) -> None:
        self._queue.append((fn, args))

    def flush(self) -> None:
        if self._flushing:
            return
        self._flushing = True
        try:
            while self._queue:
                fn, args = self._queue.popleft()
                try:
                    fn(*args)
                except Exception:  # noqa: BLE001 - one failed callback must not stop the others; logged whole
                    self._log.exception("%s callback %r failed", self._owner, fn)
        finally:
            self._flushing = False
