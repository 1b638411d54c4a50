"""The transaction state machine (metadata.py): transitions, prepare/complete."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from onceflow.coordinator.transaction.metadata import (
    MAX_PRODUCER_EPOCH,
    VALID_PREVIOUS_STATES,
    IllegalTransactionTransition,
    TransactionMetadata,
    TransactionState,
    TransactionStateError,
    check_transition,
    is_epoch_exhausted,
)

S = TransactionState
NOW = 1_000_000

# Kafka's TransactionState.scala, written out independently of the module.
#: Kafka 4.3's TransactionState.VALID_PREVIOUS_STATES (PrepareAbort from Empty/Complete*: transactions v2).
KAFKA_TABLE = {
    "Empty": {"Empty", "CompleteCommit", "CompleteAbort"},
    "Ongoing": {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareCommit": {"Ongoing"},
    "PrepareAbort": {"Ongoing", "PrepareEpochFence", "Empty", "CompleteCommit", "CompleteAbort"},
    "CompleteCommit": {"PrepareCommit"},
    "CompleteAbort": {"PrepareAbort"},
    "Dead": {"Empty", "CompleteAbort", "CompleteCommit"},
    "PrepareEpochFence": {"Ongoing"},
}
KAFKA_IDS = {
    "Empty": 0, "Ongoing": 1, "PrepareCommit": 2, "PrepareAbort": 3,
    "CompleteCommit": 4, "CompleteAbort": 5, "Dead": 6, "PrepareEpochFence": 7,
}


def md(state: S = S.EMPTY, epoch: int = 5, partitions=(), start: int = -1, **kw) -> TransactionMetadata:
    return TransactionMetadata(
        "txn",
        42,
        producer_epoch=epoch,
        txn_timeout_ms=60_000,
        state=state,
        topic_partitions=partitions,
        txn_start_timestamp=start,
        txn_last_update_timestamp=NOW - 10,
        **kw,
    )


def fields(m: TransactionMetadata) -> dict:
    return {name: getattr(m, name) for name in TransactionMetadata.__slots__ if name != "topic_partitions"} | {
        "topic_partitions": set(m.topic_partitions)
    }


# ---------------------------------------------------------------- states


def test_state_ids_and_names_are_kafkas() -> None:
    assert {s.kafka_name: s.id for s in S} == KAFKA_IDS
    for s in S:
        assert S.from_id(s.id) is s
        assert S.from_kafka_name(s.kafka_name) is s
        assert str(s) == s.kafka_name
    with pytest.raises(ValueError):
        S.from_id(8)
    assert S.from_kafka_name("ongoing") is None  # case-sensitive, as Kafka's fromName


def test_valid_previous_states_table_is_kafkas() -> None:
    assert {t.kafka_name: {s.kafka_name for s in prev} for t, prev in VALID_PREVIOUS_STATES.items()} == KAFKA_TABLE


@pytest.mark.parametrize("current,target", list(itertools.product(S, S)))
def test_transition_table_exhaustive(current: S, target: S) -> None:
    if current.kafka_name in KAFKA_TABLE[target.kafka_name]:
        check_transition("txn", current, target)
    else:
        with pytest.raises(IllegalTransactionTransition) as info:
            check_transition("txn", current, target)
        assert info.value.current is current and info.value.target is target
        assert isinstance(info.value, TransactionStateError)
        assert not isinstance(info.value, AssertionError)


def test_expiration_allowed_states() -> None:
    assert {s for s in S if s.is_expiration_allowed} == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


def test_epoch_exhaustion_boundary() -> None:
    assert MAX_PRODUCER_EPOCH == 32767
    assert not is_epoch_exhausted(32765)
    assert is_epoch_exhausted(32766)
    assert is_epoch_exhausted(32767)
    assert not is_epoch_exhausted(-1)


# ---------------------------------------------------------------- prepare does not mutate


PREPARES = [
    ("fence", S.ONGOING, lambda m: m.prepare_fence_producer_epoch(), S.PREPARE_EPOCH_FENCE),
    ("increment", S.EMPTY, lambda m: m.prepare_increment_producer_epoch(1000, None, NOW), S.EMPTY),
    ("rotation", S.COMPLETE_COMMIT, lambda m: m.prepare_producer_id_rotation(77, 1000, NOW, True), S.EMPTY),
    ("add", S.EMPTY, lambda m: m.prepare_add_partitions([("t", 1)], NOW), S.ONGOING),
    ("commit", S.ONGOING, lambda m: m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW), S.PREPARE_COMMIT),
    ("abort", S.ONGOING, lambda m: m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW), S.PREPARE_ABORT),
    ("complete", S.PREPARE_COMMIT, lambda m: m.prepare_complete(NOW), S.COMPLETE_COMMIT),
    ("dead", S.COMPLETE_ABORT, lambda m: m.prepare_dead(), S.DEAD),
]


@pytest.mark.parametrize("name,state,prepare,target", PREPARES, ids=[p[0] for p in PREPARES])
def test_prepare_only_sets_pending_state(name, state, prepare, target) -> None:
    start = NOW - 100 if state in (S.ONGOING, S.PREPARE_COMMIT) else -1
    m = md(state, partitions=[("t", 0)] if state in (S.ONGOING, S.PREPARE_COMMIT) else (), start=start)
    before = fields(m)
    transit = prepare(m)
    after = fields(m)
    assert after.pop("pending_state") is target
    before.pop("pending_state")
    assert after == before
    assert transit.txn_state is target
    assert transit.prev_producer_id == 42


def test_second_prepare_while_pending_raises() -> None:
    m = md(S.EMPTY)
    m.prepare_add_partitions([("t", 0)], NOW)
    with pytest.raises(TransactionStateError):
        m.prepare_add_partitions([("t", 1)], NOW)


def test_illegal_prepare_raises_typed_error_and_sets_nothing() -> None:
    m = md(S.EMPTY)
    with pytest.raises(IllegalTransactionTransition):
        m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)
    assert m.pending_state is None
    with pytest.raises(IllegalTransactionTransition):
        md(S.ONGOING, partitions=[("t", 0)], start=NOW).prepare_dead()


# ---------------------------------------------------------------- complete


def test_full_transaction_cycle_applies_on_complete() -> None:
    m = md(S.EMPTY, epoch=-1)
    t = m.prepare_increment_producer_epoch(30_000, None, NOW)
    assert (t.producer_epoch, t.last_producer_epoch) == (0, -1)
    m.complete_transition(t)
    assert (m.state, m.producer_epoch, m.txn_timeout_ms, m.pending_state) == (S.EMPTY, 0, 30_000, None)

    t = m.prepare_add_partitions([("a", 0)], NOW + 1)
    assert m.topic_partitions == set()
    m.complete_transition(t)
    assert (m.state, m.topic_partitions, m.txn_start_timestamp) == (S.ONGOING, {("a", 0)}, NOW + 1)

    t = m.prepare_add_partitions([("b", 0)], NOW + 2)
    assert t.txn_start_timestamp == NOW + 1  # the clock started with the first partition
    m.complete_transition(t)
    assert m.topic_partitions == {("a", 0), ("b", 0)}

    m.complete_transition(m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW + 3))
    assert m.state is S.PREPARE_COMMIT
    m.remove_partition(("a", 0))
    m.remove_partition(("b", 0))
    m.complete_transition(m.prepare_complete(NOW + 4))
    assert (m.state, m.topic_partitions, m.txn_last_update_timestamp) == (S.COMPLETE_COMMIT, set(), NOW + 4)
    assert m.last_producer_epoch == -1  # TV0: Complete keeps the epochs

    # The next transaction restarts the clock.
    m.complete_transition(m.prepare_add_partitions([("c", 0)], NOW + 10))
    assert m.txn_start_timestamp == NOW + 10


def test_complete_checks_invariants() -> None:
    m = md(S.ONGOING, partitions=[("a", 0)], start=NOW)
    t = m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW)
    m.producer_epoch += 1  # somebody changed the epoch behind the coordinator's back
    with pytest.raises(TransactionStateError):
        m.complete_transition(t)

    m = md(S.EMPTY)
    with pytest.raises(TransactionStateError):  # nothing pending
        m.complete_transition(m.snapshot())

    m = md(S.EMPTY)
    t = m.prepare_increment_producer_epoch(1000, None, NOW)
    m.pending_state = S.ONGOING  # pending does not match the transit
    with pytest.raises(TransactionStateError):
        m.complete_transition(t)


def test_remove_partition_only_while_preparing() -> None:
    with pytest.raises(TransactionStateError):
        md(S.ONGOING, partitions=[("a", 0)], start=NOW).remove_partition(("a", 0))


# ---------------------------------------------------------------- epochs


def test_increment_epoch_kip360_cases() -> None:
    m = md(S.EMPTY, epoch=5, last_producer_epoch=4)
    # No expected epoch: a new instance; the last epoch is forgotten.
    t = m.prepare_increment_producer_epoch(1000, None, NOW)
    assert (t.producer_epoch, t.last_producer_epoch) == (6, -1)
    m.pending_state = None
    # The current epoch: bump and remember it.
    t = m.prepare_increment_producer_epoch(1000, 5, NOW)
    assert (t.producer_epoch, t.last_producer_epoch) == (6, 5)
    m.pending_state = None
    # The last epoch: a retry, same answer.
    t = m.prepare_increment_producer_epoch(1000, 4, NOW)
    assert (t.producer_epoch, t.last_producer_epoch) == (5, 4)
    m.pending_state = None
    # Anything else: fenced.
    assert m.prepare_increment_producer_epoch(1000, 3, NOW) is None
    assert m.pending_state is None


def test_increment_refuses_exhausted_epoch() -> None:
    with pytest.raises(TransactionStateError):
        md(S.EMPTY, epoch=32766).prepare_increment_producer_epoch(1000, None, NOW)


def test_rotation() -> None:
    m = md(S.COMPLETE_ABORT, epoch=32766, start=NOW - 5)
    t = m.prepare_producer_id_rotation(99, 1000, NOW, record_last_epoch=True)
    assert (t.producer_id, t.producer_epoch, t.last_producer_epoch, t.prev_producer_id) == (99, 0, 32766, 42)
    m.complete_transition(t)
    assert (m.producer_id, m.previous_producer_id, m.producer_epoch) == (99, 42, 0)
    with pytest.raises(TransactionStateError):
        md(S.ONGOING, partitions=[("a", 0)], start=NOW).prepare_producer_id_rotation(99, 1000, NOW, False)


def test_fence_bumps_once_and_not_again_after_failure() -> None:
    m = md(S.ONGOING, epoch=5, partitions=[("a", 0)], start=NOW)
    fence = m.prepare_fence_producer_epoch()
    assert (fence.producer_epoch, fence.last_producer_epoch) == (6, -1)
    abort = m.prepare_abort_after_epoch_fence(fence.producer_epoch, NOW)
    # Kafka's fence: the bumped epoch is in memory before the abort is durable.
    assert (m.producer_epoch, m.pending_state, abort.producer_epoch) == (6, S.PREPARE_ABORT, 6)
    # The append failed: pending cleared, remembered.
    m.pending_state = None
    m.has_failed_epoch_fence = True
    assert m.prepare_fence_producer_epoch().producer_epoch == 6
    m.prepare_abort_after_epoch_fence(6, NOW)
    m.complete_transition(replace(m.snapshot(), txn_state=S.PREPARE_ABORT, txn_last_update_timestamp=NOW))
    assert m.state is S.PREPARE_ABORT
    m.prepare_complete(NOW)
    assert m.has_failed_epoch_fence is False


def test_fence_overflow_raises() -> None:
    with pytest.raises(TransactionStateError):
        md(S.ONGOING, epoch=MAX_PRODUCER_EPOCH, partitions=[("a", 0)], start=NOW).prepare_fence_producer_epoch()


def test_abort_after_fence_requires_pending_fence() -> None:
    with pytest.raises(TransactionStateError):
        md(S.ONGOING, partitions=[("a", 0)], start=NOW).prepare_abort_after_epoch_fence(6, NOW)
