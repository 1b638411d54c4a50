"""Keyed deadlines for the sans-I/O coordinators.

Theory of operation
-------------------
A ``Timers`` holds at most one deadline per *key* (a hashable value naming
what the deadline is for; the coordinators use small frozen dataclasses such
as ``HeartbeatDeadline(group, member)``).  Setting a key that is
already set replaces its deadline; ``cancel`` forgets it.

Deadlines live in a min-heap of ``(deadline_ms, seq, key)`` entries next to
a dict of the live ``key -> (seq, deadline_ms)``.  Replacing or cancelling a
key does not touch the heap (*lazy deletion*): the old heap entry stays
behind, and is recognised as stale -- its key is gone from the dict, or is
there with another ``seq`` -- and discarded when it reaches the top of the
heap.  When stale entries come to outnumber the live ones by far, the heap
is rebuilt from the dict so that it cannot grow without bound.  Entries
with the same deadline come out in the order they were set.

Nothing fires by itself: the owner (a coordinator) calls ``pop_due`` from
its ``tick()`` until it returns ``None``, and acts on each key returned;
``next_deadline`` tells it when the next tick is needed.  ``on_set``, if
given, hears every deadline set, so that whoever sleeps until the next tick
(the broker's timer task) can wake up for an earlier one.  Time is never
read here: callers pass ``now_ms`` (from their clock), which keeps the
class deterministic under test.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable

__all__ = ["Timers"]


class Timers:
    """Deadlines by key; setting a key again replaces its deadline."""

    def __init__(self, on_set: Callable[[int], None] | None = None) -> None:
        self._on_set = on_set
        self._heap: list[tuple[int, int, Hashable]] = []
        self._live: dict[Hashable, tuple[int, int]] = {}  # key -> (seq, deadline)
        self._seq = itertools.count()

    def set(self, key: Hashable, deadline_ms: int) -> None:
        seq = next(self._seq)
        self._live[key] = (seq, deadline_ms)
        heapq.heappush(self._heap, (deadline_ms, seq, key))
        if len(self._heap) > 1024 and len(self._heap) > 4 * len(self._live):
            self._heap = [(d, s, k) for k, (s, d) in self._live.items()]
            heapq.heapify(self._heap)
        if self._on_set is not None:
            self._on_set(deadline_ms)

    def cancel(self, key: Hashable) -> None:
        self._live.pop(key, None)

    def deadline(self, key: Hashable) -> int | None:
        entry = self._live.get(key)
        return None if entry is None else entry[1]

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            _, seq, key = heap[0]
            entry = self._live.get(key)
            if entry is not None and entry[0] == seq:
                return
            heapq.heappop(heap)

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> Hashable | None:
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._live[key]
        return key

    def clear(self) -> None:
        self._heap.clear()
        self._live.clear()
