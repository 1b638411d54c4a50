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
* ``marker``: a COMMIT/ABORT marker is durable in one partition of a
  transaction, before the markers of its other partitions are written;
* ``segment-roll``: a partition has opened its new segment, before the
  producer-state snapshot at its base is written;
* ``compaction-swap``: the cleaner's new segment is renamed ``.swap`` (the
  swap's commit point), the old segments are still there;
* ``compaction-delete``: the old segments are deleted, the new one is still
  named ``.swap``;
* ``delete-records``: a DeleteRecords' new log start offset is durable (its
  checkpoint written), the segments below it are not deleted yet.

The broker's own code has no branch for faults: the first two points are
reached in decorators around the transaction coordinator's log store and
marker writer (``decorate_txn_log_store``, ``decorate_marker_writer``),
which return what they are given unchanged when ``ONCEFLOW_FAULT`` is not
set.  While they are installed, a transaction's markers are written one
partition at a time, in order, each once the one before is durable, so that
a crash at the n-th leaves exactly n of them on disk.  The last four points
are inside the log's own multi-step operations, where nothing can wrap them.

The Spark sink's task faults are :mod:`onceflow.spark.faults`: the connector is a
client and imports nothing from the broker's side.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
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


class _FaultyTxnLogStore:
    """A ``TxnLogStore`` reaching ``txn-log:<State>`` once a record is written, before the
    coordinator is told."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    @property
    def num_partitions(self) -> int:
        return int(self._inner.num_partitions)

    def append(self, partition: int, key: bytes, value: bytes | None, done: Callable[[Any], None], *,
               durable: bool = True) -> None:
        if value is not None:
            from .coordinator.transaction import log_records
            from .coordinator.transaction.metadata import TransactionState
            from .protocol.errors import ErrorCode

            decoded = log_records.decode_value(value)
            state = TransactionState.from_id(decoded.transaction_status) if decoded is not None else None
            point = f"txn-log:{state}"

            def done_then_maybe_crash(error: ErrorCode, tell: Callable[[ErrorCode], None] = done) -> None:
                if error is ErrorCode.none:
                    crash_point(point)  # written (durable unless durable=False), the coordinator does not know yet
                tell(error)

            done = done_then_maybe_crash
        self._inner.append(partition, key, value, done, durable=durable)


class _FaultyMarkerWriter:
    """A ``MarkerWriter`` reaching ``marker`` as each partition's marker is durable, the
    partitions written one at a time (see above)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                      partitions: frozenset[tuple[str, int]], done: Callable[[dict[tuple[str, int], Any]], None]) -> None:
        from .protocol.errors import ErrorCode

        order = sorted(partitions)
        if not order:
            self._inner.write_markers(producer_id, producer_epoch, coordinator_epoch, commit, partitions, done)
            return
        results: dict[tuple[str, int], Any] = {}

        def write(i: int) -> None:
            tp = order[i]

            def written(outcome: dict[tuple[str, int], Any]) -> None:
                results.update(outcome)
                if outcome.get(tp) is ErrorCode.none:
                    crash_point("marker")  # durable here, the other partitions have no marker yet
                if i + 1 < len(order):
                    write(i + 1)
                else:
                    done(results)

            self._inner.write_markers(producer_id, producer_epoch, coordinator_epoch, commit, frozenset((tp,)), written)

        write(0)


def decorate_txn_log_store(store: _T) -> _T:
    """``store`` (a ``TxnLogStore``) with the ``txn-log:<State>`` points, or itself without ONCEFLOW_FAULT."""
    if not enabled():
        return store
    return _FaultyTxnLogStore(store)  # type: ignore[return-value]


def decorate_marker_writer(writer: _T) -> _T:
    """``writer`` (a ``MarkerWriter``) with the ``marker`` point, or itself without ONCEFLOW_FAULT."""
    if not enabled():
        return writer
    return _FaultyMarkerWriter(writer)  # type: ignore[return-value]
