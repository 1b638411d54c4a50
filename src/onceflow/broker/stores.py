"""The coordinators' I/O: their internal topics, and transaction markers.

The group and transaction coordinators are sans-I/O.  Each is given
adapters through which it writes:

* ``OffsetsTopicStore``: the group coordinator's records go to
  ``__consumer_offsets``, transactional offset commits as a transactional
  batch of their producer;
* ``TransactionLogStore``: the transaction coordinator's records go to
  ``__transaction_state``;
* ``LocalMarkerWriter``: COMMIT/ABORT markers go to the partitions of a
  transaction.  Once a marker in ``__consumer_offsets`` is durable, the
  group coordinator learns the transaction's outcome for its pending offsets.

Every write is made durable by group commit before its ``done`` callback
runs, and ``done`` always runs later, from the event loop, never inside the
call that wrote (the coordinators rely on that).  Both internal topics are
created on first use, compacted, with their own segment size, as in Kafka.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import faults
from ..config import OFFSETS_TOPIC_NUM_PARTITIONS, TRANSACTION_STATE_LOG_NUM_PARTITIONS
from ..coordinator import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from ..coordinator.transaction import log_records
from ..coordinator.transaction.metadata import TransactionState
from ..log.partition_log import PartitionLog
from ..protocol.errors import ErrorCode
from ..records.batch import Invalid
from ..records.builder import build_batch

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)



def _when_durable(broker: Broker, partition: PartitionLog, offset: int, done: Callable[[ErrorCode], None]) -> None:
    broker.after_append(partition)
    broker.on_durable(partition, offset, lambda error: done(ErrorCode.none if error is None else ErrorCode.kafka_storage_error))


def _later(done: Callable[[ErrorCode], None], error: ErrorCode) -> None:
    asyncio.get_running_loop().call_soon(done, error)


def _append_internal(broker: Broker, topic: str, partition: int, batch: bytes, now: int,
                     done: Callable[[ErrorCode], None]) -> PartitionLog | None:
    """Append a coordinator's batch to an internal partition: the partition, or None when the
    append was refused -- a full disk, a failed partition, a fenced transactional producer --
    and so nothing was written; ``done`` is then told why (later), and the coordinator must not
    apply the change."""
    try:
        target = broker.internal_partition(topic, partition)
        result = target.append_batch(batch, now)
    except OSError as exc:
        log.error("cannot write to %s-%d: %s", topic, partition, exc)
        _later(done, ErrorCode.kafka_storage_error)
        return None
    if isinstance(result, Invalid):
        _later(done, result.error)
        return None
    return target


class OffsetsTopicStore:
    """The group coordinator's ``GroupStore``: ``__consumer_offsets``."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    @property
    def num_partitions(self) -> int:
        return self._broker.config[OFFSETS_TOPIC_NUM_PARTITIONS]

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
        now = self._broker.clock.now_ms()
        batch = build_batch(records, now, producer_id=producer_id, producer_epoch=producer_epoch, transactional=transactional)
        target = _append_internal(self._broker, OFFSETS_TOPIC, partition, batch, now, done)
        if target is not None:
            _when_durable(self._broker, target, target.log_end_offset, done)


class TransactionLogStore:
    """The transaction coordinator's ``TxnLogStore``: ``__transaction_state``."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    @property
    def num_partitions(self) -> int:
        return self._broker.config[TRANSACTION_STATE_LOG_NUM_PARTITIONS]

    def append(self, partition: int, key: bytes, value: bytes | None, done: Callable[[ErrorCode], None], *,
               durable: bool = True) -> None:
        broker = self._broker
        now = broker.clock.now_ms()
        target = _append_internal(broker, TRANSACTION_STATE_TOPIC, partition, build_batch([(key, value)], now), now, done)
        if target is None:
            return
        if faults.enabled() and value is not None:
            decoded = log_records.decode_value(value)
            state = TransactionState.from_id(decoded.transaction_status) if decoded is not None else None
            point = f"txn-log:{state}"

            def done_then_maybe_crash(error: ErrorCode, tell: Callable[[ErrorCode], None] = done) -> None:
                faults.crash_point(point)  # written (durable unless durable=False), the coordinator does not know yet
                tell(error)

            done = done_then_maybe_crash
        if durable:
            _when_durable(broker, target, target.log_end_offset, done)
            return
        # In the log, before every later record of the partition: the group commit that makes
        # any of them durable makes this one durable first (one file, written in order).  Nobody
        # waits for it, so it needs no flush of its own: it rides with the next one.
        broker.after_append(target, lazy=True)
        _later(done, ErrorCode.none)


class LocalMarkerWriter:
    """Writes COMMIT/ABORT markers into this broker's partitions (the coordinator's MarkerWriter)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

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
        broker = self._broker
        now = broker.clock.now_ms()
        results: dict[tuple[str, int], ErrorCode] = {}
        waiting: list[tuple[tuple[str, int], PartitionLog, int]] = []
        for topic, index in sorted(partitions):
            target = broker.registry.get(topic, index)
            if target is None:
                results[(topic, index)] = ErrorCode.unknown_topic_or_partition
                continue
            try:
                outcome = target.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, now)
            except OSError as exc:
                log.error("cannot write a marker to %s: %s", target.name, exc)
                results[(topic, index)] = ErrorCode.kafka_storage_error
                continue
            if isinstance(outcome, Invalid):
                log.info("marker for producer %d refused by %s: %s", producer_id, target.name, outcome.reason)
                results[(topic, index)] = outcome.error
                continue
            if faults.enabled():
                target.writer.barrier()  # make this marker durable before dying before the others
                target.segments[-1].flush()
                faults.crash_point("marker")
            broker.after_append(target)
            waiting.append(((topic, index), target, target.log_end_offset))
        if not waiting:
            done(results)  # already a pass later than the call
            return
        remaining = [len(waiting)]

        def durable(tp: tuple[str, int], error: OSError | None) -> None:
            if error is not None:
                results[tp] = ErrorCode.kafka_storage_error
            else:
                results[tp] = ErrorCode.none
                if tp[0] == OFFSETS_TOPIC:
                    broker.groups.complete_transaction(tp[1], producer_id, commit)
            remaining[0] -= 1
            if remaining[0] == 0:
                done(results)

        for tp, target, end in waiting:
            broker.on_durable(target, end, functools.partial(durable, tp))
