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
for a single firing).  ``armed`` reads it; without the variable it
is one dictionary lookup.  Points:

* ``spark-sink-first-attempt``: the exactly-once sink has written and flushed
  the first row of a task's transaction, on the task's first attempt.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

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


def armed(point: str) -> str | None:
    """The action armed for a Spark-side fault point (see above), or None.

    An action ending in ``:once`` fires for one task only: the first worker
    to remove the file gets it.
    """
    directory = os.environ.get("ONCEFLOW_FAULT_DIR")
    if not directory:
        return None
    path = Path(directory) / point
    try:
        action = path.read_text().strip() or "raise"
        if action.endswith(":once"):
            path.unlink()  # FileNotFoundError: another task took it first
            action = action[: -len(":once")]
    except FileNotFoundError:
        return None
    return action


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
