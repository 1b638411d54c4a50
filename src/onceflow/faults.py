"""Test-only fault points: make the broker die at an exact step.

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

The Spark sink's task faults are :mod:`onceflow.spark.faults`: the connector is a
client and imports nothing from the broker's side.
"""

from __future__ import annotations

import logging
import os

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
