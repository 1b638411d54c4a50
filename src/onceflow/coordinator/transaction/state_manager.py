"""The transaction metadata cache and ``__transaction_state`` (Kafka's TransactionStateManager).

Theory of operation
-------------------
Every transactional id lives in ``__transaction_state`` partition
``partition_for(id)`` and, in memory, in one ``TransactionMetadata`` of the
cache.  The manager does three things:

* **load**: ``load_partition`` replays a partition's records (oldest first,
  last record per key wins, tombstones delete) into fresh metadata objects
  that replace whatever the cache held for that partition.  The caller (the
  coordinator) then rolls transactions found in PrepareCommit/PrepareAbort
  forward.
* **append**: ``append_transaction_to_log`` writes a prepared
  ``TxnTransitMetadata`` and, when the store reports the record durable
  (a Complete record: once it is in the log, ``durable=False``, see
  ``markers.py``), applies it (``complete_transition``) -- but only if the
  cache still holds the *same* metadata object: a reload in between means the prepared change
  belongs to a previous incarnation, and the caller gets NOT_COORDINATOR
  (Kafka compares coordinator epochs; identity is our single-node
  equivalent).  A failed append clears the pending state (unless the caller
  will retry it) and reports Kafka's mapped error.
* **housekeeping queries**, for the sweeps of ``timeouts.py``: which
  Ongoing transactions are past their timeout (``timed_out_transactions``),
  and removing transactional ids idle for ``transactional.id.expiration.ms``
  in Empty/CompleteCommit/CompleteAbort (``remove_expired_transactional_ids``:
  the metadata is pending Dead while its tombstone is written, then leaves
  the cache).

Store completions arrive through ``guard`` (the coordinator runtime's
``guarded``, see ``coordinator/runtime.py``); after ``shutdown`` they are
ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ...clock import Clock
from ...config import TRANSACTION_MAX_TIMEOUT_MS, TRANSACTION_VERSION, TRANSACTIONAL_ID_EXPIRATION_MS, BrokerConfig
from ...metrics.stats import TxnStats
from ...protocol.errors import ErrorCode
from .. import TRANSACTION_STATE_TOPIC
from ..partitioning import partition_for
from . import log_records as rec
from .metadata import TransactionMetadata, TransactionState, TxnTransitMetadata
from .types import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionListing,
    TxnLogStore,
)

log = logging.getLogger(__name__)

def map_append_error(error: ErrorCode) -> ErrorCode:
    """How Kafka's appendTransactionToLog reports a failed append to its caller."""
    if error in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    ):
        # Retriable for the client: it retries against the same coordinator.
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
        return ErrorCode.unknown_server_error
    return error


def transit_to_value(transit: TxnTransitMetadata, value_version: int = 0) -> rec.TransactionLogValue:
    """Kafka's TransactionLog.valueToBytes: version 1 (``transaction.version`` >= 1) carries the
    previous and next producer ids and the client's transaction version; version 0 has no room
    for them, and the metadata they are in is only ever made at transaction version 2."""
    if transit.txn_state is TransactionState.EMPTY:
        if transit.topic_partitions:
            raise ValueError(f"an Empty transaction cannot have partitions: {transit}")
        partitions = None
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in transit.topic_partitions:
            by_topic.setdefault(topic, []).append(partition)
        partitions = tuple((topic, tuple(sorted(ids))) for topic, ids in sorted(by_topic.items()))
    return rec.TransactionLogValue(
        producer_id=transit.producer_id,
        producer_epoch=transit.producer_epoch,
        transaction_timeout_ms=transit.txn_timeout_ms,
        transaction_status=transit.txn_state.id,
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=transit.txn_last_update_timestamp,
        transaction_start_timestamp_ms=transit.txn_start_timestamp,
        **({"previous_producer_id": transit.prev_producer_id, "next_producer_id": transit.next_producer_id,
            "client_transaction_version": transit.client_transaction_version} if value_version >= 1 else {}),
    )


def metadata_from_value(transactional_id: str, value: rec.TransactionLogValue) -> TransactionMetadata:
    """Kafka's TransactionLog.readTxnRecordValue: the last epoch is not persisted."""
    state = TransactionState.from_id(value.transaction_status)
    md = TransactionMetadata(
        transactional_id,
        value.producer_id,
        previous_producer_id=value.previous_producer_id,
        producer_epoch=value.producer_epoch,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=value.transaction_timeout_ms,
        state=state,
        txn_start_timestamp=value.transaction_start_timestamp_ms,
        txn_last_update_timestamp=value.transaction_last_update_timestamp_ms,
        next_producer_id=value.next_producer_id,
        client_transaction_version=value.client_transaction_version,
    )
    if state is not TransactionState.EMPTY:
        for topic, ids in value.transaction_partitions or ():
            md.topic_partitions.update((topic, p) for p in ids)
    return md


def _run(fn: Callable[[], None]) -> None:
    fn()


class TransactionStateManager:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        store: TxnLogStore,
        *,
        guard: Callable[[Callable[[], None]], None] = _run,
    ) -> None:
        self._config = config
        self._clock = clock
        self._store = store
        self._guard = guard
        self._cache: dict[str, TransactionMetadata] = {}
        self._closed = False
        #: Completed transactions and their EndTxn -> Complete latency (``_applied``), for the metrics.
        self.stats = TxnStats()
        #: transactional id -> when its Prepare record was applied (for ``stats.end_to_complete_ms``).
        self._prepared_at: dict[str, int] = {}

    # ---------------------------------------------------------------- config

    @property
    def num_partitions(self) -> int:
        return self._store.num_partitions

    @property
    def transaction_version(self) -> int:
        """The server's finalized ``transaction.version``: the records it writes, and how it aborts."""
        return int(self._config[TRANSACTION_VERSION])

    @property
    def transaction_max_timeout_ms(self) -> int:
        return self._config[TRANSACTION_MAX_TIMEOUT_MS]

    @property
    def transactional_id_expiration_ms(self) -> int:
        return self._config[TRANSACTIONAL_ID_EXPIRATION_MS]

    def validate_transaction_timeout_ms(self, txn_timeout_ms: int) -> bool:
        return 0 < txn_timeout_ms <= self.transaction_max_timeout_ms

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self._store.num_partitions)

    # ---------------------------------------------------------------- cache

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        return self._cache.get(transactional_id)

    def put_if_absent(self, md: TransactionMetadata) -> TransactionMetadata:
        return self._cache.setdefault(md.transactional_id, md)

    def all(self) -> list[TransactionMetadata]:
        return list(self._cache.values())

    def __len__(self) -> int:
        return len(self._cache)

    # ---------------------------------------------------------------- load

    def load_partition(
        self, partition: int, records: Iterable[tuple[bytes, bytes | None]]
    ) -> list[TransactionMetadata]:
        """Replay one partition (oldest record first); returns the loaded metadata.

        The cache's previous entries for the partition are replaced (Kafka's
        loading is resilient to state left by an earlier load or unload).
        """
        where = f"{TRANSACTION_STATE_TOPIC}-{partition}"
        loaded: dict[str, TransactionMetadata] = {}
        for key_bytes, value_bytes in records:
            try:
                key = rec.decode_key(key_bytes)
            except rec.RecordDecodeError as exc:
                log.error("%s: skipping a record with an undecodable key: %s", where, exc)
                continue
            if isinstance(key, rec.UnknownKey):
                log.warning(
                    "%s: ignoring a record with unknown key version %d (perhaps a leftover of an aborted upgrade)",
                    where,
                    key.version,
                )
                continue
            tid = key.transactional_id
            try:
                value = rec.decode_value(value_bytes)
                md = None if value is None else metadata_from_value(tid, value)
            except (rec.RecordDecodeError, ValueError) as exc:
                log.error("%s: skipping an unreadable record of transactional id %r: %s", where, tid, exc)
                continue
            if md is None:
                loaded.pop(tid, None)
            elif md.state is TransactionState.PREPARE_EPOCH_FENCE:
                # Never written by a coordinator either (it is replaced by
                # PrepareAbort before anything is persisted); the abort it
                # was heading for is the only safe outcome.
                log.warning("%s: transactional id %r recorded as PrepareEpochFence; completing it as an abort",
                            where, tid)
                md.state = TransactionState.PREPARE_ABORT
                loaded[tid] = md
            elif md.state is TransactionState.DEAD:
                # Never written by a coordinator (expiration writes a tombstone).
                log.warning("%s: transactional id %r recorded as Dead; treating it as removed", where, tid)
                loaded.pop(tid, None)
            else:
                loaded[tid] = md
        stale = [tid for tid in self._cache if self.partition_for(tid) == partition]
        if stale:
            log.warning("%s: replacing %d cached transactional id(s) with the loaded state", where, len(stale))
        for tid in stale:
            del self._cache[tid]
            self._prepared_at.pop(tid, None)
        for tid, md in loaded.items():
            if self.partition_for(tid) != partition:
                log.warning("%s: transactional id %r belongs to partition %d; loading it anyway",
                            where, tid, self.partition_for(tid))
            self._cache[tid] = md
        log.log(logging.INFO if loaded else logging.DEBUG, "%s: loaded %d transactional id(s)", where, len(loaded))
        return list(loaded.values())

    # ---------------------------------------------------------------- append

    def append_transaction_to_log(
        self,
        transactional_id: str,
        transit: TxnTransitMetadata,
        done: Callable[[ErrorCode], None],
        retry_on_error: Callable[[ErrorCode], bool] = lambda error: False,
        *,
        durable: bool = True,
    ) -> None:
        """Persist ``transit``; apply it once durable (``durable=False``: once in the log, see
        ``TxnLogStore.append``); then ``done(error)``.

        On failure the metadata's pending state is cleared -- unless
        ``retry_on_error(mapped error)`` says the caller will append again.
        """
        md = self._cache.get(transactional_id)
        if md is None:
            # The partition was reloaded without this id: not ours any more.
            done(ErrorCode.not_coordinator)
            return
        key = rec.encode_key(transactional_id)
        # Version 1 from transaction.version 1 on (Kafka's rule), and for any transit of a v2
        # client, whose next producer id and version must survive a reload whatever the setting
        # (Kafka fails such a write at version 0; a client reaches it only across a downgrade).
        needs_tags = transit.client_transaction_version >= 1 or transit.next_producer_id != NO_PRODUCER_ID
        version = 1 if self.transaction_version >= 1 or needs_tags else 0
        value = rec.encode_value(transit_to_value(transit, version), version)

        def on_done(error: ErrorCode) -> None:
            if self._closed:
                return
            result = ErrorCode.none if error is ErrorCode.none else map_append_error(error)
            current = self._cache.get(transactional_id)
            if result is ErrorCode.none:
                if current is not md:
                    log.info("transactional id %r was reloaded while %s was being written; not applying it",
                             transactional_id, transit.txn_state)
                    result = ErrorCode.not_coordinator
                else:
                    before = md.state
                    md.complete_transition(transit)
                    self._applied(transactional_id, before, transit)
            else:
                log.info("appending %s for transactional id %r failed: %s (returning %s)",
                         transit.txn_state, transactional_id, error.name, result.name)
                if current is md and not retry_on_error(result):
                    md.pending_state = None
            done(result)

        self._store.append(
            self.partition_for(transactional_id), key, value, lambda error: self._guard(lambda: on_done(error)),
            durable=durable,
        )

    def _applied(self, transactional_id: str, before: TransactionState, transit: TxnTransitMetadata) -> None:
        """Every durable change of a transactional id passes here: counted, and logged at DEBUG
        with the id as a field, so that one transaction's life can be followed in the log.

        EndTxn -> Complete is timed by this broker's clock from the Prepare record's being
        applied to the Complete record's, so it covers every marker; a transaction rolled
        forward after a restart (its Prepare applied before the restart) is counted, not timed."""
        state = transit.txn_state
        S = TransactionState
        if state is S.PREPARE_COMMIT or state is S.PREPARE_ABORT:
            self._prepared_at[transactional_id] = self._clock.now_ms()
        elif state is S.COMPLETE_COMMIT or state is S.COMPLETE_ABORT:
            if state is S.COMPLETE_COMMIT:
                self.stats.commits += 1
            else:
                self.stats.aborts += 1
            prepared_at = self._prepared_at.pop(transactional_id, None)
            if prepared_at is not None:
                self.stats.end_to_complete_ms.observe(max(0, self._clock.now_ms() - prepared_at))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("transactional id %r: %s -> %s (producer %d epoch %d, partitions %s)", transactional_id,
                      before, state, transit.producer_id, transit.producer_epoch,
                      ",".join(f"{topic}-{partition}" for topic, partition in sorted(transit.topic_partitions)) or "none",
                      extra={"transactional_id": transactional_id, "producer_id": transit.producer_id,
                             "producer_epoch": transit.producer_epoch})

    # ---------------------------------------------------------------- housekeeping

    def timed_out_transactions(self, now_ms: int) -> list[TransactionMetadata]:
        """Ongoing transactions (no change pending) open longer than their timeout."""
        return [
            md
            for md in self._cache.values()
            if md.pending_state is None
            and md.state is TransactionState.ONGOING
            and md.txn_start_timestamp + md.txn_timeout_ms < now_ms
        ]

    def _should_expire(self, md: TransactionMetadata, now_ms: int) -> bool:
        return (
            md.pending_state is None
            and md.state.is_expiration_allowed
            and md.txn_last_update_timestamp <= now_ms - self.transactional_id_expiration_ms
        )

    def remove_expired_transactional_ids(self, now_ms: int) -> int:
        """Write tombstones for idle ids; each leaves the cache once its tombstone is durable."""
        count = 0
        for md in list(self._cache.values()):
            if not self._should_expire(md, now_ms):
                continue
            transit = md.prepare_dead()
            count += 1
            self._append_tombstone(md, transit)
        if count:
            log.info("expiring %d transactional id(s) idle for %d ms", count, self.transactional_id_expiration_ms)
        return count

    def _append_tombstone(self, md: TransactionMetadata, transit: TxnTransitMetadata) -> None:
        tid = md.transactional_id

        def on_done(error: ErrorCode) -> None:
            if self._closed:
                return
            current = self._cache.get(tid)
            if current is not md:
                return
            if (
                error is ErrorCode.none
                and md.pending_state is TransactionState.DEAD
                and md.producer_epoch == transit.producer_epoch
            ):
                del self._cache[tid]
                log.info("removed expired transactional id %r", tid)
            else:
                log.warning("failed to remove expired transactional id %r: tombstone append %s, pending %s",
                            tid, error.name, md.pending_state)
                md.pending_state = None

        self._store.append(self.partition_for(tid), rec.encode_key(tid), None,
                           lambda error: self._guard(lambda: on_done(error)))

    # ---------------------------------------------------------------- listing

    def list_transaction_states(
        self,
        producer_ids: set[int] | None,
        state_names: set[str] | None,
        duration_filter_ms: int,
        now_ms: int,
    ) -> tuple[list[TransactionListing], list[str]]:
        """Kafka's listTransactionStates: the matching transactions, and the
        state names of the filter that are not transaction states."""
        states: set[TransactionState] = set()
        unknown: list[str] = []
        for name in sorted(state_names or ()):
            state = TransactionState.from_kafka_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)

        def include(md: TransactionMetadata) -> bool:
            if md.state is TransactionState.DEAD:
                return False
            if producer_ids and md.producer_id not in producer_ids:
                return False
            if state_names and md.state not in states:
                return False
            # Kafka's rule, including for Empty ids (start -1: always "long-running").
            return not (duration_filter_ms >= 0 and now_ms - md.txn_start_timestamp <= duration_filter_ms)

        listings = [
            TransactionListing(md.transactional_id, md.producer_id, md.state.kafka_name)
            for md in sorted(self._cache.values(), key=lambda m: m.transactional_id)
            if include(md)
        ]
        return listings, unknown

    # ---------------------------------------------------------------- shutdown

    def shutdown(self) -> None:
        self._closed = True
        self._cache.clear()
