"""The transaction state manager (state_manager.py): persist-then-apply, loading, expiration."""

from __future__ import annotations

import pytest

from onceflow.clock import FakeClock
from onceflow.config import BrokerConfig
from onceflow.coordinator.partitioning import java_string_hashcode, java_utils_abs, partition_for
from onceflow.coordinator.transaction import log_records as rec
from onceflow.coordinator.transaction.metadata import (
    TransactionMetadata,
    TransactionState,
)
from onceflow.coordinator.transaction.state_manager import TransactionStateManager, map_append_error
from onceflow.protocol.errors import ErrorCode

E = ErrorCode
S = TransactionState


class Store:
    num_partitions = 1

    def __init__(self) -> None:
        self.pending: list = []

    def append(self, partition, key, value, done, durable=True) -> None:
        self.pending.append((partition, key, value, done))

    def complete(self, error: ErrorCode = E.none) -> None:
        self.pending.pop(0)[3](error)


def manager(**config) -> tuple[TransactionStateManager, Store, FakeClock]:
    store, clock = Store(), FakeClock()
    guarded: list = []

    def guard(fn) -> None:
        guarded.append(fn)
        fn()

    sm = TransactionStateManager(BrokerConfig(config), clock, store, guard=guard)
    return sm, store, clock


def new_md(clock: FakeClock, tid: str = "t") -> TransactionMetadata:
    return TransactionMetadata(tid, 5, txn_timeout_ms=1000, txn_last_update_timestamp=clock.now_ms())


def test_java_utils_abs_and_partition_for() -> None:
    assert java_utils_abs(-(2**31)) == 0
    assert java_utils_abs(-7) == 7
    assert partition_for("polygenelubricants", 50) == 0
    h = java_string_hashcode("any")
    assert partition_for("any", 13) == abs(h) % 13


@pytest.mark.parametrize(
    "error,mapped",
    [
        (E.unknown_topic_or_partition, E.coordinator_not_available),
        (E.not_enough_replicas, E.coordinator_not_available),
        (E.not_enough_replicas_after_append, E.coordinator_not_available),
        (E.request_timed_out, E.coordinator_not_available),
        (E.not_leader_or_follower, E.not_coordinator),
        (E.kafka_storage_error, E.not_coordinator),
        (E.message_too_large, E.unknown_server_error),
        (E.record_list_too_large, E.unknown_server_error),
        (E.invalid_record, E.invalid_record),
    ],
)
def test_append_error_mapping_is_kafkas(error: ErrorCode, mapped: ErrorCode) -> None:
    assert map_append_error(error) is mapped


def test_append_applies_only_when_durable() -> None:
    sm, store, clock = manager()
    md = sm.put_if_absent(new_md(clock))
    transit = md.prepare_increment_producer_epoch(1000, None, clock.now_ms())
    results: list = []
    sm.append_transaction_to_log("t", transit, results.append)
    [(partition, key, value, _)] = store.pending
    assert (partition, rec.decode_key(key)) == (0, rec.TransactionLogKey("t"))
    assert rec.decode_value(value).producer_epoch == 0
    assert (md.producer_epoch, md.pending_state) == (-1, S.EMPTY)
    store.complete()
    assert results == [E.none]
    assert (md.producer_epoch, md.pending_state) == (0, None)


def test_failed_append_clears_pending_unless_retried() -> None:
    sm, store, clock = manager()
    md = sm.put_if_absent(new_md(clock))
    results: list = []
    sm.append_transaction_to_log("t", md.prepare_increment_producer_epoch(1000, None, 0), results.append)
    store.complete(E.not_enough_replicas)
    assert results == [E.coordinator_not_available] and md.pending_state is None
    sm.append_transaction_to_log("t", md.prepare_increment_producer_epoch(1000, None, 0), results.append,
                                 retry_on_error=lambda e: e is E.coordinator_not_available)
    store.complete(E.request_timed_out)
    assert results[-1] is E.coordinator_not_available and md.pending_state is S.EMPTY


def test_append_after_reload_or_shutdown() -> None:
    sm, store, clock = manager()
    md = sm.put_if_absent(new_md(clock))
    results: list = []
    sm.append_transaction_to_log("t", md.prepare_increment_producer_epoch(1000, None, 0), results.append)
    sm.load_partition(0, [])  # the partition was reloaded: "t" is gone
    store.complete()
    assert results == [E.not_coordinator]
    sm.append_transaction_to_log("t", md.snapshot(), results.append)
    assert results[-1] is E.not_coordinator and store.pending == []
    md2 = sm.put_if_absent(new_md(clock))
    sm.append_transaction_to_log("t", md2.prepare_increment_producer_epoch(1000, None, 0), results.append)
    sm.shutdown()
    store.complete()
    assert len(results) == 2 and len(sm) == 0


def test_timed_out_and_expired_queries() -> None:
    sm, store, clock = manager(**{"transactional.id.expiration.ms": 100})
    now = clock.now_ms()
    ongoing = TransactionMetadata("o", 1, producer_epoch=0, txn_timeout_ms=50, state=S.ONGOING,
                                  topic_partitions=[("a", 0)], txn_start_timestamp=now, txn_last_update_timestamp=now)
    empty = TransactionMetadata("e", 2, producer_epoch=0, txn_timeout_ms=50, txn_last_update_timestamp=now)
    sm.put_if_absent(ongoing)
    sm.put_if_absent(empty)
    assert sm.timed_out_transactions(now + 50) == []
    assert sm.timed_out_transactions(now + 51) == [ongoing]
    assert sm.remove_expired_transactional_ids(now + 99) == 0
    assert sm.remove_expired_transactional_ids(now + 100) == 1
    assert empty.pending_state is S.DEAD
    assert sm.remove_expired_transactional_ids(now + 100) == 0  # already pending
    [(_, key, value, _)] = store.pending
    assert value is None and rec.decode_key(key) == rec.TransactionLogKey("e")
    store.complete()
    assert sm.get("e") is None and sm.get("o") is ongoing
