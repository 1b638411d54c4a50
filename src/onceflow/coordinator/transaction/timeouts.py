"""The transaction coordinator's two sweeps: timed-out transactions and idle transactional ids.

Theory of operation
-------------------
Two timers, each set again by its own handler (Kafka's scheduler tasks
"transaction-abort" and "transactionalId-expiration", first run one
interval after start, as Kafka's):

* ``AbortTimedOutTransactions``, every
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms``: the
  Ongoing transactions open longer than their timeout (the producer's
  ``transaction.timeout.ms`` of KIP-98, sent with InitProducerId) are
  aborted with an epoch bump (Kafka's abortTimedOutTransactions; the state
  manager's ``timed_out_transactions`` finds them, and one with a change
  pending is left for the next sweep).
  The bump takes effect in memory first (``prepare_fence_producer_epoch``,
  see ``metadata.py``), so the zombie producer is fenced at once: its next
  AddPartitionsToTxn / EndTxn gets PRODUCER_FENCED.  The abort itself is
  the coordinator's (``abort``: its EndTxn path, with the fenced epoch).
* ``ExpireTransactionalIds``, every
  ``transaction.remove.expired.transaction.cleanup.interval.ms``: ids idle for
  ``transactional.id.expiration.ms`` in Empty / CompleteCommit /
  CompleteAbort are removed with a tombstone (the state manager's
  ``remove_expired_transactional_ids``).

Producer ids are not expired here: a partition's producer state expires
them (``producer.id.expiration.ms``, ``log/producer_state.py``).  The timers
fire from the coordinator runtime's ``tick``: see ``coordinator/runtime.py``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ...config import (
    TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS,
    TRANSACTION_REMOVE_EXPIRED_TRANSACTION_CLEANUP_INTERVAL_MS,
    BrokerConfig,
)
from ...protocol.errors import ErrorCode
from ..runtime import CoordinatorRuntime
from .state_manager import TransactionStateManager

log = logging.getLogger(__name__)

#: ``abort(transactional_id, producer_id, fenced_epoch, done)``: the coordinator's abort of a
#: transaction whose epoch is already fenced; ``done(error)`` is called once.
AbortTransaction = Callable[[str, int, int, Callable[[ErrorCode], None]], None]


@dataclass(frozen=True, slots=True)
class AbortTimedOutTransactions:
    """Timer: abort the transactions past their timeout (every cleanup interval)."""


@dataclass(frozen=True, slots=True)
class ExpireTransactionalIds:
    """Timer: remove transactional ids idle past transactional.id.expiration.ms."""


class TransactionTimeouts:
    def __init__(
        self,
        config: BrokerConfig,
        runtime: CoordinatorRuntime,
        state: TransactionStateManager,
        abort: AbortTransaction,
    ) -> None:
        self._config = config
        self._timers = runtime.timers
        self._state = state
        self._abort = abort
        now = runtime.now()
        self._timers.set(AbortTimedOutTransactions(), now + self._abort_interval_ms)
        self._timers.set(ExpireTransactionalIds(), now + self._expire_interval_ms)
        runtime.on_timer(AbortTimedOutTransactions, self._on_abort_timer)
        runtime.on_timer(ExpireTransactionalIds, self._on_expire_timer)

    @property
    def _abort_interval_ms(self) -> int:
        return self._config[TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS]

    @property
    def _expire_interval_ms(self) -> int:
        return self._config[TRANSACTION_REMOVE_EXPIRED_TRANSACTION_CLEANUP_INTERVAL_MS]

    def _on_abort_timer(self, _: AbortTimedOutTransactions, now: int) -> None:
        self._abort_timed_out_transactions(now)
        self._timers.set(AbortTimedOutTransactions(), now + self._abort_interval_ms)

    def _on_expire_timer(self, _: ExpireTransactionalIds, now: int) -> None:
        self._state.remove_expired_transactional_ids(now)
        self._timers.set(ExpireTransactionalIds(), now + self._expire_interval_ms)

    def _abort_timed_out_transactions(self, now: int) -> None:
        """Kafka's abortTimedOutTransactions: fence the epoch, then abort."""
        for md in self._state.timed_out_transactions(now):
            if md.pending_transition_in_progress:
                continue
            tid = md.transactional_id
            log.info("aborting transaction of transactional id %r (producer %d epoch %d): open for %d ms, "
                     "timeout %d ms", tid, md.producer_id, md.producer_epoch, now - md.txn_start_timestamp,
                     md.txn_timeout_ms, extra={"transactional_id": tid})
            fence = md.prepare_fence_producer_epoch()
            self._state.stats.timeouts += 1
            self._abort(tid, fence.producer_id, fence.producer_epoch,
                        functools.partial(self._on_timeout_abort_done, tid))

    @staticmethod
    def _on_timeout_abort_done(transactional_id: str, error: ErrorCode) -> None:
        if error is ErrorCode.none:
            log.info("rolled back the timed-out transaction of transactional id %r", transactional_id)
        elif error in (ErrorCode.invalid_producer_id_mapping, ErrorCode.producer_fenced,
                       ErrorCode.concurrent_transactions):
            log.debug("rollback of the timed-out transaction of %r cancelled: %s", transactional_id, error.name)
        else:
            log.warning("rollback of the timed-out transaction of %r failed: %s", transactional_id, error.name)
