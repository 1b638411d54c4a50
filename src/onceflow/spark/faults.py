"""Test-only fault points in the Spark sink: make a write task fail, die or pause at an exact step.

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
