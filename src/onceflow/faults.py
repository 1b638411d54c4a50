"""Test-only fault points: make the broker die, or a Spark task fail, at an exact step.

Fault tests start ``onceflow broker`` with ``ONCEFLOW_FAULT=<point>[@<n>]``
in its environment.  When the broker reaches the n-th occurrence (default
1st) of that point it logs one line and exits at once with status 137, as
``kill -9`` would: no shutdown code, no flush.  Without the variable every
``crash_point`` call is a dictionary lookup and nothing else.

Points (named where they are reached):

* ``txn-log:<State>``: a ``__transaction_state`` record moving a transaction
  to <State> (``PrepareCommit``, ``PrepareAbort``, ``CompleteCommit``...) is
  durable (a Complete record: in the log, maybe not yet on disk), but the
  coordinator has not been told yet;
* ``marker``: a COMMIT/ABORT marker has been appended to one partition of a
  transaction, before the markers of its other partitions are written;
* ``segment-roll``: a partition has opened its new segment, before the
  producer-state snapshot at its base is written;
* ``compaction-swap``: the cleaner's new segment is renamed ``.swap`` (the
  swap's commit point), the old segments are still there;
* ``compaction-delete``: the old segments are deleted, the new one is still
  named ``.swap``.

Spark tasks run in worker processes that Spark starts once per session, so
their faults are armed while they run: ``ONCEFLOW_FAULT_DIR`` names a
directory, and a file there named after a point arms it; its content is the
action (``raise``, ``exit`` or ``sleep:<seconds>``, with ``:once`` appended
for a single firing), optionally followed by filters ``slot=<n>[,<n>...]``,
``batch=<n>``, ``attempt=<n>`` that a task must match.  ``armed`` reads it;
without the variable it is one dictionary lookup.  A write task's
producer is wrapped by ``decorate_spark_producer`` (a decorator: the sink
has no branch for faults).  Points:

* ``spark-sink-first-attempt``: the first row of a task's transaction is
  written and flushed, on the task's first attempt;
* ``spark-sink-after-first-row``: the same, on any attempt the filters allow;
* ``spark-sink-before-commit``: all rows are in the task's transaction, not
  committed yet;
* ``spark-sink-after-commit``: the transaction is committed, the task has
  not returned yet (a retry must find it written).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, TypeVar

_T = TypeVar("_T")

log = logging.getLogger(__name__)

_SPEC = os.environ.get("ONCEFLOW_FAULT", "")
_POINT, _, _NTH = _SPEC.partition("@")
_WANTED = int(_NTH) if _NTH.isdigit() else 1
_seen = 0


def enabled() -> bool:
    return bool(_POINT)


def crash_point(name: str) -> None:
    global _seen
    if not _POINT or name != _POINT:
        return
    _seen += 1
    if _seen >= _WANTED:
        log.error("fault injection: crashing at %s (occurrence %d)", name, _seen)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(137)


SPARK_FIRST_ATTEMPT = "spark-sink-first-attempt"
SPARK_AFTER_FIRST_ROW = "spark-sink-after-first-row"
SPARK_BEFORE_COMMIT = "spark-sink-before-commit"
SPARK_AFTER_COMMIT = "spark-sink-after-commit"


def armed(point: str, **facts: int) -> str | None:
    """The action armed for a Spark-side fault point (see above), or None.

    ``facts`` (slot, batch, attempt) are matched against the file's filters.
    An action ending in ``:once`` fires for one task only: the first worker
    to remove the file gets it.
    """
    directory = os.environ.get("ONCEFLOW_FAULT_DIR")
    if not directory:
        return None
    path = Path(directory) / point
    try:
        action, *filters = (path.read_text().split() or ["raise"])
        for item in filters:
            name, _, values = item.partition("=")
            if name in facts and facts[name] not in {int(v) for v in values.split(",")}:
                return None
        if action.endswith(":once"):
            path.unlink()  # FileNotFoundError: another task took it first
            action = action[: -len(":once")]
    except FileNotFoundError:
        return None
    return action


def _fire(point: str, **facts: int) -> None:
    action = armed(point, **facts)
    if action is not None:
        act(point, action)


class _FaultyProducer:
    """A sink task's transactional producer with the armed points fired around its calls."""

    def __init__(self, inner: Any, task: Any) -> None:
        self._inner = inner
        self._facts = {"slot": task.partition, "batch": task.batch_id, "attempt": task.attempt}
        self._rows = 0  # rows of the open transaction (the sink's progress record not counted)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def begin_transaction(self, *args: Any) -> Any:
        self._rows = 0
        return self._inner.begin_transaction(*args)

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> Any:
        result = self._inner.produce(topic, *args, **kwargs)
        if topic.startswith("onceflow-progress-"):
            return result
        self._rows += 1
        if self._rows == 1:
            for point in (SPARK_FIRST_ATTEMPT, SPARK_AFTER_FIRST_ROW):
                if point == SPARK_FIRST_ATTEMPT and self._facts["attempt"] != 0:
                    continue
                action = armed(point, **self._facts)
                if action is not None:
                    self._inner.flush(60)  # the row is in the broker's log, in the open transaction
                    act(point, action)
        return result

    def commit_transaction(self, *args: Any) -> Any:
        if self._rows:
            action = armed(SPARK_BEFORE_COMMIT, **self._facts)
            if action is not None:
                self._inner.flush(60)  # the rows are in the broker's log, in the open transaction
                act(SPARK_BEFORE_COMMIT, action)
        result = self._inner.commit_transaction(*args)
        if self._rows:
            _fire(SPARK_AFTER_COMMIT, **self._facts)
        return result


def decorate_spark_producer(producer: _T, task: Any) -> _T:
    """``producer`` with the armed Spark task faults around its calls, or itself when none can be armed."""
    if not os.environ.get("ONCEFLOW_FAULT_DIR"):
        return producer
    return _FaultyProducer(producer, task)  # type: ignore[return-value]


def act(point: str, action: str) -> None:
    """Carry out an armed Spark-side fault: an exception (``raise``), the worker process dying
    at once (``exit``), or a pause (``sleep:<seconds>``, so that a test can kill the driver
    while the task is inside its transaction)."""
    log.error("fault injection: %s at %s", action, point)
    if action == "exit":
        os._exit(1)
    if action.startswith("sleep:"):
        import time

        time.sleep(float(action.partition(":")[2]))
        return
    raise RuntimeError(f"fault injected at {point}")
