"""What both coordinators run on: the API guard, replies, waiting writes, and typed timers.

Theory of operation (Kafka's ``CoordinatorRuntime``, in small, for a
single-threaded sans-I/O coordinator)
-------------------------------------------------------------------------
This is the one home of this explanation; the coordinators' modules link
here rather than retell it.  Both coordinators (``group/coordinator.py``,
``transaction/coordinator.py``) are called on the broker's event loop
thread, answer requests through callbacks, and own one ``CoordinatorRuntime``.

* **API guard.** Every public call (and ``tick``, and every store or marker
  completion) runs inside ``api()`` (``guarded`` wraps a completion in it).
  Callbacks the coordinator owes are *posted* to the outbox (``reply``) and
  run as the guard exits, never half-way through a state change:
  a callback that calls back into the coordinator sees a consistent state,
  and an immediate error still arrives before the public call returns.
  ``then`` posts an internal follow-up step, which runs after the callbacks
  posted before it (the transaction coordinator answers EndTxn before its
  markers are sent, as Kafka does).  The outbox (``outbox.py``) runs what a
  callback posts in the same flush; one that raises is logged and does not
  stop the others.
* **Waiting writes.** A request that waits on the store is ``register``-ed
  with how shutdown answers it (NOT_COORDINATOR); the store's ``done``
  ``unregister``-s it, and finds nothing if shutdown came first, so every
  request is answered exactly once (``deferred`` wraps both; ``is_waiting``
  asks whether one still waits).
* **Timers** are typed keys (small frozen dataclasses, e.g.
  ``HeartbeatDeadline(group, member)``) in a ``onceflow.timers.Timers``,
  mapped to handlers with ``on_timer``; ``tick``, which the broker calls
  every few milliseconds, pops what is due and calls each key's handler with
  ``now``.  ``next_deadline_ms`` tells the broker when to tick next, and the
  ``on_timer_set`` hook wakes it for an earlier deadline.
* **Lifetime.** ``active`` turns False at ``shut_down``, which runs
  ``first`` (the group coordinator answers its parked joins and syncs
  there), answers the waiting writes NOT_COORDINATOR and drops the timers;
  after that nothing is called.  Completions that arrive later find nothing
  to answer.

Nothing here reads a clock but the one injected, or does I/O.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ..clock import Clock
from ..timers import Timers
from .outbox import Outbox

K = TypeVar("K", bound=Hashable)


class CoordinatorRuntime:
    def __init__(self, owner: str, logger: logging.Logger, clock: Clock,
                 on_timer_set: Callable[[int], None] | None = None) -> None:
        self.clock = clock
        self.timers = Timers(on_timer_set)
        self.active = True
        self._owner = owner
        self._outbox = Outbox(logger, owner)
        #: Requests waiting on the store: op id -> how shutdown answers them.
        self._inflight: dict[int, Callable[[], None]] = {}
        self._op_ids = itertools.count()
        self._timer_handlers: dict[type, Callable[[Any, int], None]] = {}

    def now(self) -> int:
        return self.clock.now_ms()

    # -- the API guard and the outbox ------------------------------------------------

    @contextmanager
    def api(self) -> Iterator[None]:
        try:
            yield
        finally:
            self._outbox.flush()

    def guarded(self, fn: Callable[[], None]) -> None:
        """Run a store or marker completion as if it were a public call."""
        with self.api():
            fn()

    def reply(self, callback: Callable[..., None], *args: Any) -> None:
        self._outbox.post(callback, *args)

    def then(self, action: Callable[[], None]) -> None:
        """An internal step, run after the callbacks posted so far."""
        self._outbox.post(action)

    # -- waiting writes -------------------------------------------------------------------

    def register(self, on_shutdown: Callable[[], None]) -> int:
        op = next(self._op_ids)
        self._inflight[op] = on_shutdown
        return op

    def unregister(self, op: int) -> bool:
        """False if the operation was already answered (by shutdown)."""
        return self._inflight.pop(op, None) is not None

    def is_waiting(self, op: int) -> bool:
        return op in self._inflight

    def deferred(self, callback: Callable[..., None], *shutdown_args: Any) -> Callable[..., None]:
        """A one-shot answer for a request that waits on the store; shutdown answers it
        with ``shutdown_args`` if it is still waiting then."""
        op = self.register(lambda: self.reply(callback, *shutdown_args))

        def answer(*args: Any) -> None:
            if self.unregister(op):
                self.reply(callback, *args)

        return answer

    # -- timers -----------------------------------------------------------------------------

    def on_timer(self, key_type: type[K], handler: Callable[[K, int], None]) -> None:
        """``handler(key, now)`` runs when a timer keyed by a ``key_type`` is due."""
        self._timer_handlers[key_type] = handler

    def tick(self) -> None:
        """Run every due timer's handler."""
        if not self.active:
            return
        with self.api():
            now = self.now()
            while self.active:
                key = self.timers.pop_due(now)
                if key is None:
                    return
                handler = self._timer_handlers.get(type(key))
                if handler is None:
                    raise RuntimeError(f"{self._owner}: no handler for timer {key!r}")
                handler(key, now)

    def next_deadline_ms(self) -> int | None:
        return self.timers.next_deadline() if self.active else None

    # -- lifetime -----------------------------------------------------------------------------

    def shut_down(self, first: Callable[[], None] | None = None) -> bool:
        """Stop: run ``first`` (once inactive), answer every waiting request, drop the
        timers.  False if already stopped.  Call it inside ``api()`` so that the answers
        are flushed."""
        if not self.active:
            return False
        self.active = False
        if first is not None:
            first()
        inflight = list(self._inflight.values())
        self._inflight.clear()
        for answer in inflight:
            answer()
        self.timers.clear()
        return True
