"""The coordinators' I/O: thin adapters over the ``Appender``.

The group and transaction coordinators are sans-I/O.  Each is given
adapters (their Protocols: ``GroupStore``, ``TxnLogStore``, ``MarkerWriter``)
through which it writes:

* ``OffsetsTopicStore``: the group coordinator's records go to
  ``__consumer_offsets``, transactional offset commits as a transactional
  batch of their producer;
* ``TransactionLogStore``: the transaction coordinator's records go to
  ``__transaction_state``;
* ``LocalMarkerWriter``: COMMIT/ABORT markers go to the partitions of a
  transaction.  Once a marker in ``__consumer_offsets`` is durable, the
  group coordinator learns the transaction's outcome for its pending offsets
  (as Kafka's KafkaApis tells its GroupCoordinator when WriteTxnMarkers'
  append completes).

The ``Appender`` makes every write durable by group commit before its
``done`` callback runs, and ``done`` always runs later, from the event loop,
never inside the call that wrote (the coordinators rely on that).  Fault
injection wraps these adapters (``onceflow.faults``); nothing here knows of it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from ..coordinator import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from ..protocol.errors import ErrorCode
from .appender import Appender

#: ``GroupCoordinator.complete_transaction(offsets_partition, producer_id, commit)``
CompleteTransaction = Callable[[int, int, bool], None]


class OffsetsTopicStore:
    """The group coordinator's ``GroupStore``: ``__consumer_offsets``."""

    def __init__(self, appender: Appender) -> None:
        self._appender = appender

    @property
    def num_partitions(self) -> int:
        return self._appender.internal_partitions(OFFSETS_TOPIC)

    def append(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        done: Callable[[ErrorCode], None],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> None:
        self._appender.append_coordinator_records(OFFSETS_TOPIC, partition, records, done, producer_id=producer_id,
                                                  producer_epoch=producer_epoch, transactional=transactional)


class TransactionLogStore:
    """The transaction coordinator's ``TxnLogStore``: ``__transaction_state``."""

    def __init__(self, appender: Appender) -> None:
        self._appender = appender

    @property
    def num_partitions(self) -> int:
        return self._appender.internal_partitions(TRANSACTION_STATE_TOPIC)

    def append(self, partition: int, key: bytes, value: bytes | None, done: Callable[[ErrorCode], None], *,
               durable: bool = True) -> None:
        self._appender.append_coordinator_records(TRANSACTION_STATE_TOPIC, partition, [(key, value)], done, durable=durable)


class LocalMarkerWriter:
    """Writes COMMIT/ABORT markers into this broker's partitions (the coordinator's MarkerWriter)."""

    def __init__(self, appender: Appender, complete_transaction: CompleteTransaction) -> None:
        self._appender = appender
        self._complete_transaction = complete_transaction

    def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: frozenset[tuple[str, int]],
        done: Callable[[dict[tuple[str, int], ErrorCode]], None],
    ) -> None:
        # One event-loop pass later: the coordinator answers EndTxn and then asks for the
        # markers in the same step, and the answer's write comes in the next pass.  Appending
        # the markers first would make the producer wait for them (about 0.5 ms for 6
        # partitions); they are not part of its answer.
        marker = (producer_id, producer_epoch, coordinator_epoch, commit)
        asyncio.get_running_loop().call_soon(self._append_markers, marker, partitions, done)

    def _append_markers(self, marker: tuple[int, int, int, bool], partitions: frozenset[tuple[str, int]],
                        done: Callable[[dict[tuple[str, int], ErrorCode]], None]) -> None:
        producer_id, producer_epoch, coordinator_epoch, commit = marker
        results: dict[tuple[str, int], ErrorCode] = {}
        waiting: set[tuple[str, int]] = set()

        def durable(tp: tuple[str, int], error: ErrorCode) -> None:
            results[tp] = error
            if error is ErrorCode.none and tp[0] == OFFSETS_TOPIC:
                self._complete_transaction(tp[1], producer_id, commit)
            waiting.discard(tp)
            if not waiting:
                done(results)

        for tp in sorted(partitions):
            error = self._appender.append_marker(tp[0], tp[1], producer_id, producer_epoch, coordinator_epoch, commit,
                                                 functools.partial(durable, tp))
            if error is ErrorCode.none:
                waiting.add(tp)  # ``durable`` is called later, never inside append_marker
            else:
                results[tp] = error
        if not waiting:
            done(results)  # already a pass later than the call
