"""The queue of callbacks a coordinator owes (``CoordinatorRuntime.reply`` / ``then``).

When they run, and why, is told in ``runtime.py``.  Here: ``post`` queues,
``flush`` runs the queue in order, including what the callbacks post while
it runs; a flush called during a flush does nothing, and a callback that
raises is logged and does not stop the others.
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
