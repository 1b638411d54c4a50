"""The history of a chaos run: what every client asked, what it was answered, and when.

The model is Jepsen's.  A history is a list of events; each is recorded by one
*process* (a client with a name: ``producer-0``, ``reader-rc-1``, ``ctp-0``; the
nemesis too) and has a *type*:

* ``invoke``: the process starts an operation;
* ``ok``: the operation definitely happened; ``fail``: it definitely did not;
  ``info``: its outcome is unknown (a commit timed out, the client crashed or
  was fenced mid-commit).

A process does one operation at a time: each ``invoke`` is followed by exactly
one completion (``ok``/``fail``/``info``) of the same process before its next
``invoke``.  A history may end with an ``invoke`` and no completion: the client
crashed, and the operation counts as ``info``.  Reads and bookkeeping events
(``poll``, ``assign``, ``final-read``, ``committed-offsets``) may be recorded as
a lone ``ok`` with no ``invoke``; the nemesis records lone ``info`` events with
``f="fault"``.

``f`` names the operation and ``value`` holds its arguments or results, JSON
only (the shapes each ``f`` uses are in ``checker``'s docstring).  ``time`` is
``time.monotonic()`` when the event was recorded: on Linux it is one clock for
the whole host, so events recorded by different processes on one machine
compare.  The recorder takes the time under its lock, so in one history time
never decreases with the index.  The checker's timing rules rely on when things
are recorded: a completion right after the call returned (so a poll's time is
after its records were delivered), and a transaction's ``commit_time`` right
before ``commit_transaction`` was called.

A ``Recorder`` may stream the history to a JSON-lines file as it goes, one
object per line flushed per event: a workload killed half-way leaves a readable
prefix, and ``load`` drops a torn last line.  Separate workload processes each
record their own file; ``merge`` interleaves them by time.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import IO, Any

TYPES = ("invoke", "ok", "fail", "info")

#: The output a consume-transform-produce stage writes for an input value: the
#: same for every attempt at that input, so a second committed attempt shows up
#: as a duplicate and a missing one as a lost output (see ``checker``).
CTP_OUTPUT_PREFIX = "ctp:"


def ctp_output(input_value: str) -> str:
    return CTP_OUTPUT_PREFIX + input_value


@dataclass(frozen=True)
class Event:
    index: int
    time: float
    process: str
    type: str
    f: str
    value: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "time": self.time, "process": self.process, "type": self.type, "f": self.f, "value": self.value}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Event:
        return cls(int(obj["index"]), float(obj["time"]), str(obj["process"]), str(obj["type"]), str(obj["f"]), dict(obj["value"]))

    def __str__(self) -> str:
        return f"#{self.index} {self.time:.6f} {self.process} {self.type} {self.f} {json.dumps(self.value, separators=(',', ':'))}"


class Recorder:
    """Records events, from any number of threads, optionally streaming them to ``path``."""

    def __init__(self, path: str | Path | None = None) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._file: IO[str] | None = open(path, "w", encoding="utf-8") if path is not None else None

    def record(self, process: str, type: str, f: str, value: dict[str, Any]) -> Event:
        if type not in TYPES:
            raise ValueError(f"event type {type!r} is not one of {', '.join(TYPES)}")
        with self._lock:
            event = Event(len(self._events), time.monotonic(), process, type, f, value)
            if self._file is not None:
                # Serialised under the lock: the file's lines are in index order.
                self._file.write(json.dumps(event.to_json(), separators=(",", ":")) + "\n")
                self._file.flush()
            self._events.append(event)
        return event

    def invoke(self, process: str, f: str, value: dict[str, Any]) -> Event:
        return self.record(process, "invoke", f, value)

    def complete(self, process: str, type: str, f: str, value: dict[str, Any]) -> Event:
        if type == "invoke":
            raise ValueError("a completion is ok, fail or info")
        return self.record(process, type, f, value)

    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def dump(events: Iterable[Event], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for event in events:
            out.write(json.dumps(event.to_json(), separators=(",", ":")) + "\n")


def load(path: str | Path) -> list[Event]:
    """The events of a JSON-lines history; a torn last line (the recorder was killed) is dropped."""
    with open(path, encoding="utf-8") as src:
        lines = src.read().split("\n")
    events: list[Event] = []
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            events.append(Event.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError) as e:
            if number == last:
                break
            raise ValueError(f"{path}:{number + 1}: not a history event: {e}") from e
    return events


def merge(*histories: Iterable[Event]) -> list[Event]:
    """Histories recorded by separate processes on one host, interleaved by time and renumbered."""
    ordered = sorted((e for h in histories for e in h), key=lambda e: e.time)
    return [replace(e, index=i) for i, e in enumerate(ordered)]
