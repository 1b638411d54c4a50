"""The transaction coordinator, driven with a FakeClock and fakes for the store,
the producer id allocator and the marker writer."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from onceflow.clock import FakeClock
from onceflow.config import BrokerConfig
from onceflow.coordinator.partitioning import java_string_hashcode
from onceflow.coordinator.transaction import log_records as rec
from onceflow.coordinator.transaction.coordinator import PARKED_MAX_MS, PARKED_MAX_PER_ID, TransactionCoordinator
from onceflow.coordinator.transaction.markers import COMPLETION_RETRY_BACKOFF_MS, MARKER_RETRY_BACKOFF_MS
from onceflow.coordinator.transaction.metadata import TransactionState
from onceflow.coordinator.transaction.types import TransactionListing
from onceflow.protocol.errors import ErrorCode

E = ErrorCode
S = TransactionState
TIMEOUT = 60_000
COORDINATOR_EPOCH = 7
OFFSETS = "__consumer_offsets"


# ================================================================ fakes


def decode(key: bytes, value: bytes | None) -> tuple[str, rec.TransactionLogValue | None]:
    k = rec.decode_key(key)
    assert isinstance(k, rec.TransactionLogKey)
    return k.transactional_id, rec.decode_value(value)


def state_name(value: rec.TransactionLogValue | None) -> str:
    return "<tombstone>" if value is None else S.from_id(value.transaction_status).kafka_name


class FakeTxnStore:
    """Records appends; the test decides when (and how) they complete."""

    def __init__(self, events: list, num_partitions: int = 50) -> None:
        self._num_partitions = num_partitions
        self.events = events
        self.pending: list[tuple[int, bytes, bytes | None, Callable[[ErrorCode], None]]] = []
        self.log: list[tuple[int, bytes, bytes | None]] = []
        #: States the coordinator asked to apply once in the log, before they are durable.
        self.applied_once_in_log: list[str] = []

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def append(self, partition, key, value, done, durable=True) -> None:
        self.pending.append((partition, key, value, done))
        tid, decoded = decode(key, value)
        self.events.append(("append", tid, state_name(decoded)))
        if not durable:
            self.applied_once_in_log.append(state_name(decoded))

    def complete_one(self, error: ErrorCode = E.none) -> None:
        partition, key, value, done = self.pending.pop(0)
        if error is E.none:
            self.log.append((partition, key, value))
        done(error)

    def complete_all(self, error: ErrorCode = E.none) -> int:
        n = 0
        while self.pending:
            self.complete_one(error)
            n += 1
        return n

    def pending_records(self) -> list[tuple[int, str, rec.TransactionLogValue | None]]:
        return [(p, *decode(k, v)) for p, k, v, _ in self.pending]

    def pending_states(self) -> list[tuple[str, str]]:
        return [(tid, state_name(v)) for _, tid, v in self.pending_records()]

    def logged_states(self, tid: str) -> list[str]:
        return [state_name(v) for t, v in (decode(k, v) for _, k, v in self.log) if t == tid]

    def records(self, partition: int | None = None) -> list[tuple[bytes, bytes | None]]:
        return [(k, v) for p, k, v in self.log if partition is None or p == partition]


class FakeIds:
    def __init__(self) -> None:
        self._ids = itertools.count(1000)
        self.fail = False

    def allocate(self) -> int:
        if self.fail:
            raise RuntimeError("no producer id block")
        return next(self._ids)


@dataclass
class MarkerCall:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: frozenset
    done: Callable


class FakeMarkers:
    def __init__(self, events: list) -> None:
        self.events = events
        self.calls: list[MarkerCall] = []

    def write_markers(self, producer_id, producer_epoch, coordinator_epoch, commit, partitions, done) -> None:
        self.calls.append(MarkerCall(producer_id, producer_epoch, coordinator_epoch, commit, partitions, done))
        self.events.append(("markers", "COMMIT" if commit else "ABORT", tuple(sorted(partitions))))

    def complete(self, outcomes: dict | None = None) -> MarkerCall:
        call = self.calls.pop(0)
        results = dict.fromkeys(call.partitions, E.none)
        results.update(outcomes or {})
        call.done(results)
        return call


class Box(list):
    """Collects a callback's results; ``one`` asserts it was called exactly once."""

    def __init__(self, events: list | None = None, name: str = "answer") -> None:
        super().__init__()
        self._events = events
        self._name = name

    def __call__(self, *args) -> None:
        result = args[0] if len(args) == 1 else args
        self.append(result)
        if self._events is not None:
            self._events.append((self._name, result))

    @property
    def one(self):
        assert len(self) == 1, f"expected exactly one result, got {list(self)}"
        return self[0]


class Harness:
    def __init__(self, num_partitions: int = 50, **config) -> None:
        settings = {
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
            "transaction.remove.expired.transaction.cleanup.interval.ms": 1000,
            # The coordinator's own aborts (a fence, a timeout) as before transactions v2, unless a
            # test asks for 2 (Kafka 4's default; test_txn_coordinator_v2.py).
            "transaction.version": 1,
        }
        settings.update({k.replace("_", "."): v for k, v in config.items()})
        self.events: list = []
        self.clock = FakeClock()
        self.t0 = self.clock.now_ms()
        self.store = FakeTxnStore(self.events, num_partitions)
        self.ids = FakeIds()
        self.markers = FakeMarkers(self.events)
        self.coord = TransactionCoordinator(
            BrokerConfig(settings), self.clock, self.store, self.ids, self.markers,
            coordinator_epoch=COORDINATOR_EPOCH,
        )

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.coord.tick()

    def md(self, tid: str = "t"):
        return self.coord.transaction(tid)

    def init(self, tid: str | None = "t", timeout: int = TIMEOUT, pid: int = -1, epoch: int = -1) -> Box:
        box = Box(self.events)
        self.coord.init_producer_id(tid, timeout, pid, epoch, box)
        return box

    def init_ok(self, tid: str = "t", **kw) -> tuple[int, int]:
        box = self.init(tid, **kw)
        self.store.complete_all()
        error, pid, epoch = box.one
        assert error is E.none, box
        return pid, epoch

    def add(self, tid: str, pid: int, epoch: int, *tps) -> Box:
        box = Box(self.events)
        self.coord.add_partitions(tid, pid, epoch, list(tps), box)
        return box

    def begin(self, tid: str, pid: int, epoch: int, *tps) -> None:
        box = self.add(tid, pid, epoch, *tps)
        self.store.complete_all()
        assert box.one == dict.fromkeys(tps, E.none)

    def add_offsets(self, tid: str, pid: int, epoch: int, partition: int = 7) -> Box:
        box = Box(self.events)
        self.coord.add_offsets(tid, pid, epoch, (OFFSETS, partition), box)
        return box

    def end(self, tid: str, pid: int, epoch: int, commit: bool = True, tv: int = 0) -> Box:
        """EndTxn; the box gets the error alone below transaction version 2, else (error, pid, epoch)."""
        box = Box(self.events)
        if tv:
            self.coord.end_txn(tid, pid, epoch, commit, box, tv)
        else:
            self.coord.end_txn(tid, pid, epoch, commit, lambda error, *_: box(error))
        return box

    def finish(self, tid: str, pid: int, epoch: int, commit: bool = True) -> None:
        """EndTxn all the way to CompleteCommit / CompleteAbort."""
        box = self.end(tid, pid, epoch, commit)
        self.store.complete_all()
        assert box.one is E.none
        while self.markers.calls:
            self.markers.complete()
        self.store.complete_all()
        assert self.md(tid).state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)

    def started(self, tid: str = "t", *tps, **kw) -> tuple[int, int]:
        pid, epoch = self.init_ok(tid, **kw)
        self.begin(tid, pid, epoch, *(tps or [("a", 0), ("b", 1)]))
        return pid, epoch


def value_bytes(state: S, pid: int = 500, epoch: int = 0, partitions=(), timeout: int = TIMEOUT,
                start: int = -1, last_update: int = 0) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    parts = None if state is S.EMPTY else tuple((t, tuple(ps)) for t, ps in sorted(by_topic.items()))
    return rec.encode_value(rec.TransactionLogValue(pid, epoch, timeout, state.id, parts, last_update, start))


# ================================================================ partition_for


def test_partition_for_is_kafkas_utils_abs() -> None:
    h = Harness()
    for tid in ["t", "my-transactional-id", "订单", "a" * 100, "zzzzzzz"]:
        assert h.coord.partition_for(tid) == abs(java_string_hashcode(tid)) % 50
    # Kafka's Utils.abs, not "& 0x7fffffff": they differ for negative hash codes.
    negative = next(s for s in (f"txn-{i}" for i in range(1000)) if java_string_hashcode(s) < 0)
    assert h.coord.partition_for(negative) == -java_string_hashcode(negative) % 50
    # Integer.MIN_VALUE maps to 0.
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert h.coord.partition_for("polygenelubricants") == 0


# ================================================================ InitProducerId


def test_idempotent_producer_gets_fresh_ids_and_nothing_is_kept() -> None:
    h = Harness()
    first = h.init(None)
    assert first.one == (E.none, 1000, 0)  # answered before the call returned
    assert h.init(None, timeout=0).one == (E.none, 1001, 0)
    assert h.store.pending == [] and h.coord.transactional_ids() == []
    h.ids.fail = True
    assert h.init(None).one == (E.unknown_server_error, -1, -1)


def test_first_init_persists_then_applies() -> None:
    h = Harness()
    box = h.init("t")
    assert box == []
    md = h.md("t")
    # In the cache at once (as Kafka), but nothing applied before the record is durable.
    assert (md.state, md.producer_id, md.producer_epoch, md.pending_state) == (S.EMPTY, 1000, -1, S.EMPTY)
    [(partition, tid, value)] = h.store.pending_records()
    assert (partition, tid) == (h.coord.partition_for("t"), "t")
    # Value version 1 (transaction.version >= 1, as Kafka 4 writes): the previous producer id is the
    # one in use before the transition, as Kafka writes it.
    assert value == rec.TransactionLogValue(1000, 0, TIMEOUT, 0, None, h.t0, -1, previous_producer_id=1000)
    assert h.init("t").one == (E.concurrent_transactions, -1, -1)  # pending
    h.store.complete_all()
    assert box.one == (E.none, 1000, 0)
    assert (md.producer_epoch, md.last_producer_epoch, md.pending_state, md.txn_timeout_ms) == (0, -1, None, TIMEOUT)


def test_reinit_bumps_epoch_and_fences_previous_instance() -> None:
    h = Harness()
    assert h.init_ok() == (1000, 0)
    assert h.init_ok(timeout=5000) == (1000, 1)
    assert h.md().txn_timeout_ms == 5000
    assert h.init_ok() == (1000, 2)
    assert h.store.logged_states("t") == ["Empty"] * 3
    # The old instance is fenced.
    assert h.add("t", 1000, 1, ("a", 0)).one == {("a", 0): E.producer_fenced}
    assert h.end("t", 1000, 1).one is E.producer_fenced


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_invalid_transaction_timeout(timeout: int) -> None:
    h = Harness()
    assert h.init("t", timeout=timeout).one == (E.invalid_transaction_timeout, -1, -1)
    assert h.md("t") is None and h.store.pending == []


def test_transaction_max_timeout_is_configurable() -> None:
    h = Harness(**{"transaction.max.timeout.ms": 1000})
    assert h.init("t", timeout=1001).one[0] is E.invalid_transaction_timeout
    assert h.init_ok("t", timeout=1000) == (1000, 0)


def test_invalid_requests() -> None:
    h = Harness()
    assert h.init("").one == (E.invalid_request, -1, -1)
    assert h.init("t", pid=5, epoch=-1).one == (E.invalid_request, -1, -1)
    assert h.init("t", pid=-1, epoch=3).one == (E.invalid_request, -1, -1)
    assert h.add("", 1, 0, ("a", 0)).one == {("a", 0): E.invalid_request}
    assert h.end("", 1, 0).one is E.invalid_request


@pytest.mark.parametrize(
    "store_error,client_error",
    [
        (E.not_enough_replicas, E.coordinator_not_available),
        (E.not_enough_replicas_after_append, E.coordinator_not_available),
        (E.request_timed_out, E.coordinator_not_available),
        (E.unknown_topic_or_partition, E.coordinator_not_available),
        (E.not_leader_or_follower, E.not_coordinator),
        (E.kafka_storage_error, E.not_coordinator),
        (E.message_too_large, E.unknown_server_error),
        (E.record_list_too_large, E.unknown_server_error),
        (E.corrupt_message, E.corrupt_message),
    ],
)
def test_failed_append_leaves_state_and_maps_error(store_error: ErrorCode, client_error: ErrorCode) -> None:
    h = Harness()
    h.init_ok()
    box = h.init("t", timeout=5000)
    h.store.complete_one(store_error)
    assert box.one == (client_error, -1, -1)
    md = h.md()
    assert (md.producer_epoch, md.txn_timeout_ms, md.pending_state, md.state) == (0, TIMEOUT, None, S.EMPTY)
    assert h.init_ok() == (1000, 1)  # not 2: the failed bump never happened


def test_reinit_while_ongoing_aborts_old_transaction_with_fencing() -> None:
    h = Harness()
    pid, _ = h.started("t", ("a", 0), ("b", 1))
    box = h.init("t")
    assert box == []
    # The previous instance's transaction is aborted with a bumped epoch.
    [(_, _, value)] = h.store.pending_records()
    assert (state_name(value), value.producer_epoch, value.transaction_partitions) == (
        "PrepareAbort", 1, (("a", (0,)), ("b", (1,))))
    # Kafka's fence: the bump is effective at once; the zombie cannot commit.
    assert h.end("t", pid, 0, commit=True).one is E.producer_fenced
    h.store.complete_all()
    assert box.one == (E.concurrent_transactions, -1, -1)  # the client retries
    [call] = h.markers.calls
    assert (call.producer_id, call.producer_epoch, call.coordinator_epoch, call.commit, call.partitions) == (
        pid, 1, COORDINATOR_EPOCH, False, frozenset({("a", 0), ("b", 1)}))
    assert (h.md().state, h.md().pending_state) == (S.PREPARE_ABORT, S.COMPLETE_ABORT)
    assert h.init("t").one == (E.concurrent_transactions, -1, -1)  # still completing
    h.markers.complete()
    assert h.store.pending_states() == [("t", "CompleteAbort")]
    assert h.md().state is S.PREPARE_ABORT  # until durable
    h.store.complete_all()
    assert (h.md().state, h.md().topic_partitions) == (S.COMPLETE_ABORT, set())
    assert h.init_ok() == (pid, 2)
    # Neither the zombie nor the never-returned fence epoch can use the id.
    for epoch in (0, 1):
        assert h.add("t", pid, epoch, ("a", 0)).one == {("a", 0): E.producer_fenced}
        assert h.end("t", pid, epoch, commit=True).one is E.producer_fenced
    assert h.store.logged_states("t") == [
        "Empty", "Ongoing", "PrepareAbort", "CompleteAbort", "Empty"]


def test_reinit_while_ongoing_fails_if_abort_cannot_be_persisted() -> None:
    h = Harness()
    pid, _ = h.started()
    box = h.init("t")
    h.store.complete_one(E.not_enough_replicas)
    assert box.one == (E.coordinator_not_available, -1, -1)
    md = h.md()
    assert (md.state, md.pending_state, md.producer_epoch, md.has_failed_epoch_fence) == (S.ONGOING, None, 1, True)
    assert h.end("t", pid, 0).one is E.producer_fenced  # the zombie stays fenced
    # The retry does not bump again.
    box = h.init("t")
    assert [(state_name(v), v.producer_epoch) for _, _, v in h.store.pending_records()] == [("PrepareAbort", 1)]
    h.store.complete_all()
    assert box.one[0] is E.concurrent_transactions
    h.markers.complete()
    h.store.complete_all()
    assert h.init_ok() == (pid, 2)


def test_epoch_exhaustion_allocates_a_new_producer_id() -> None:
    h = Harness(num_partitions=1)
    h.coord.load_partition(0, [(rec.encode_key("t"), value_bytes(S.COMPLETE_COMMIT, pid=500, epoch=32765, start=1))])
    assert h.init_ok() == (500, 32766)
    assert h.init_ok() == (1000, 0)  # rotated
    md = h.md()
    assert (md.producer_id, md.previous_producer_id, md.producer_epoch, md.last_producer_epoch) == (1000, 500, 0, -1)
    assert h.end("t", 500, 32766).one is E.invalid_producer_id_mapping


def test_fence_that_exhausts_epochs_rotates_on_the_retry() -> None:
    h = Harness(num_partitions=1)
    h.coord.load_partition(0, [(rec.encode_key("t"), value_bytes(S.ONGOING, pid=500, epoch=32765,
                                                                   partitions=[("a", 0)], start=h.t0))])
    box = h.init("t")
    h.store.complete_all()
    assert box.one[0] is E.concurrent_transactions
    assert h.markers.calls[0].producer_epoch == 32766
    h.markers.complete()
    h.store.complete_all()
    assert h.init_ok() == (1000, 0)


def test_kip360_retry_across_producer_id_rotation() -> None:
    h = Harness(num_partitions=1)
    h.coord.load_partition(0, [(rec.encode_key("t"), value_bytes(S.EMPTY, pid=500, epoch=32766))])
    assert h.init_ok(pid=500, epoch=32766) == (1000, 0)
    md = h.md()
    assert (md.previous_producer_id, md.last_producer_epoch) == (500, 32766)
    # The response was lost: the retry gets the same answer.
    assert h.init_ok(pid=500, epoch=32766) == (1000, 0)
    # Not a retry: the old id with a non-exhausted epoch is fenced.
    assert h.init("t", pid=500, epoch=32765).one == (E.producer_fenced, -1, -1)


def test_kip360_init_with_current_or_last_epoch() -> None:
    h = Harness()
    pid, _epoch = h.init_ok()
    assert h.init_ok(pid=pid, epoch=0) == (pid, 1)
    assert h.md().last_producer_epoch == 0
    # Retry of that call (response lost): same epoch, no bump.
    assert h.init_ok(pid=pid, epoch=0) == (pid, 1)
    assert h.init("t", pid=pid, epoch=5).one == (E.producer_fenced, -1, -1)
    assert h.init("t", pid=4242, epoch=1).one == (E.producer_fenced, -1, -1)
    assert h.init_ok(pid=pid, epoch=1) == (pid, 2)
    # A new instance (no id/epoch) forgets the last epoch: the old one is fenced.
    assert h.init_ok() == (pid, 3)
    assert h.init("t", pid=pid, epoch=2).one == (E.producer_fenced, -1, -1)


def test_kip360_unknown_producer_recovery_on_fresh_metadata() -> None:
    h = Harness()
    # A producer whose transactional id was expired presents its old id/epoch.
    assert h.init_ok("fresh", pid=77, epoch=4) == (1000, 0)


def test_kip360_abortable_error_recovery_while_ongoing() -> None:
    h = Harness()
    pid, _ = h.started()
    box = h.init("t", pid=pid, epoch=0)  # the producer aborts and re-initialises with its identity
    h.store.complete_all()
    assert box.one[0] is E.concurrent_transactions
    h.markers.complete()
    h.store.complete_all()
    # The fence bumped to 1 (last epoch -1); the producer's epoch 0 is now stale.
    assert h.init("t", pid=pid, epoch=0).one == (E.producer_fenced, -1, -1)
    assert h.init_ok("t", pid=pid, epoch=1) == (pid, 2)


def test_id_whose_first_init_failed_cannot_be_used() -> None:
    h = Harness()
    box = h.init("t")
    h.store.complete_one(E.not_enough_replicas)
    assert box.one == (E.coordinator_not_available, -1, -1)
    md = h.md("t")
    assert (md.producer_id, md.producer_epoch, md.state, md.pending_state) == (1000, -1, S.EMPTY, None)
    assert h.add("t", 1000, -1, ("a", 0)).one == {("a", 0): E.invalid_producer_id_mapping}
    assert h.add_offsets("t", 1000, -1).one is E.invalid_producer_id_mapping
    assert h.end("t", 1000, -1).one is E.invalid_txn_state
    assert h.init_ok("t") == (1000, 0)  # the retry initialises it


def test_allocator_failure_for_a_new_transactional_id() -> None:
    h = Harness()
    h.ids.fail = True
    assert h.init("t").one == (E.unknown_server_error, -1, -1)
    assert h.md("t") is None


def test_a_full_disk_while_reserving_producer_ids_is_retriable() -> None:
    """The next block of ids could not be written (ENOSPC): the client retries, as it does
    while Kafka's ProducerIdManager waits for a new block (issue 7, a sibling of defect 7)."""
    import errno

    h = Harness()

    def full() -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    h.ids.allocate = full  # type: ignore[method-assign]
    assert h.init("t").one == (E.coordinator_load_in_progress, -1, -1)
    assert h.init(None).one == (E.coordinator_load_in_progress, -1, -1)
    assert h.md("t") is None


# ================================================================ AddPartitionsToTxn / AddOffsetsToTxn


def test_add_partitions_error_matrix() -> None:
    h = Harness()
    pid, _ = h.init_ok()
    pid, epoch = h.init_ok()  # epoch 1
    tp = ("a", 0)
    assert h.add("unknown", pid, epoch, tp).one == {tp: E.invalid_producer_id_mapping}
    assert h.add("t", pid + 1, epoch, tp).one == {tp: E.invalid_producer_id_mapping}
    assert h.add("t", pid, epoch - 1, tp).one == {tp: E.producer_fenced}
    assert h.add("t", pid, epoch + 1, tp).one == {tp: E.producer_fenced}  # Kafka: any other epoch
    pending = h.add("t", pid, epoch, tp)
    assert h.add("t", pid, epoch, ("b", 0)).one == {("b", 0): E.concurrent_transactions}
    h.store.complete_all()
    assert pending.one == {tp: E.none}
    assert h.store.pending == []
    # Duplicates are answered once each.
    box = h.add("t", pid, epoch, tp, tp)
    assert box.one == {tp: E.none}
    assert h.store.pending == []  # already in the transaction: nothing to write
    # While completing: the request waits for the completion (see the tests below).
    h.end("t", pid, epoch)
    h.store.complete_all()
    assert h.add("t", pid, epoch, ("c", 0)) == []


def test_add_partitions_while_the_previous_transaction_completes_waits_for_it() -> None:
    """Kafka answers CONCURRENT_TRANSACTIONS and the client backs off 20 ms or more; here the
    request waits for the markers and the Complete record (about a millisecond), then is
    answered as if it had just arrived, and the next transaction starts."""
    h = Harness()
    pid, epoch = h.init_ok()
    h.begin("t", pid, epoch, ("a", 0))
    ended = h.end("t", pid, epoch)
    h.store.complete_all()  # PrepareCommit durable: EndTxn answered, markers sent
    assert ended.one is E.none
    waiting = h.add("t", pid, epoch, ("b", 0))
    offsets = h.add_offsets("t", pid, epoch)
    assert waiting == [] and offsets == [] and h.md().state is S.PREPARE_COMMIT
    h.markers.complete()
    assert waiting == [] and offsets == [], "still waiting: the Complete record is not durable yet"
    # CompleteCommit durable: the first request goes on and appends Ongoing; once that is
    # durable it is answered, and the second goes on (the fake store completes them all).
    h.store.complete_all()
    assert waiting.one == {("b", 0): E.none} and offsets.one is E.none
    assert h.md().state is S.ONGOING and h.md().topic_partitions == {("b", 0), (OFFSETS, 7)}


def _parked_behind_a_completion(**harness: Any) -> tuple[Harness, int, int, Box]:
    """A committed transaction whose markers are out, and an AddPartitionsToTxn waiting for them."""
    h = Harness(**harness)
    pid, epoch = h.init_ok()
    h.begin("t", pid, epoch, ("a", 0))
    h.end("t", pid, epoch)
    h.store.complete_all()
    return h, pid, epoch, h.add("t", pid, epoch, ("b", 0))


def test_a_request_waits_for_completion_at_most_parked_max_ms() -> None:
    h, pid, epoch, waiting = _parked_behind_a_completion()
    h.advance(PARKED_MAX_MS - 1)
    assert waiting == []
    h.advance(1)  # the markers never came back: Kafka's answer, and the client retries
    assert waiting.one == {("b", 0): E.concurrent_transactions}
    crowd = [h.add("t", pid, epoch, ("b", 0)) for _ in range(PARKED_MAX_PER_ID + 1)]
    assert [box for box in crowd if box] == [crowd[-1]] and crowd[-1].one == {("b", 0): E.concurrent_transactions}
    stale = h.add("t", pid, epoch - 1, ("b", 0))
    assert stale.one == {("b", 0): E.producer_fenced}, "only a request that could succeed waits"
    h.markers.complete()
    for _ in range(3):
        h.store.complete_all()
    # In arrival order: the first adds the partition, the others find it already there.
    assert all(box.one == {("b", 0): E.none} for box in crowd[:-1])


def test_a_parked_request_is_answered_from_what_a_reload_finds() -> None:
    """The partition is loaded again while a request waits: the request is answered from the
    loaded state at once (the reload rolls the commit forward: CONCURRENT_TRANSACTIONS, and the
    client retries), not left waiting for a completion of metadata that is gone."""
    h, _, _, waiting = _parked_behind_a_completion(num_partitions=1)
    h.coord.load_partition(0, h.store.records(0))
    assert waiting.one == {("b", 0): E.concurrent_transactions}


def test_a_parked_request_is_answered_not_coordinator_on_shutdown() -> None:
    h, _, _, waiting = _parked_behind_a_completion()
    h.coord.shutdown()
    assert waiting.one == {("b", 0): E.not_coordinator}


def test_add_partitions_starts_the_transaction_clock() -> None:
    h = Harness()
    pid, epoch = h.init_ok()
    h.clock.advance(100)
    box = h.add("t", pid, epoch, ("a", 0), ("b", 3))
    [(_, _, value)] = h.store.pending_records()
    assert (state_name(value), value.transaction_partitions, value.transaction_start_timestamp_ms) == (
        "Ongoing", (("a", (0,)), ("b", (3,))), h.t0 + 100)
    assert (h.md().state, h.md().topic_partitions) == (S.EMPTY, set())  # not before durable
    h.store.complete_all()
    assert box.one == {("a", 0): E.none, ("b", 3): E.none}
    assert (h.md().state, h.md().txn_start_timestamp) == (S.ONGOING, h.t0 + 100)
    h.clock.advance(100)
    h.begin("t", pid, epoch, ("c", 0))
    assert h.md().txn_start_timestamp == h.t0 + 100
    assert h.md().topic_partitions == {("a", 0), ("b", 3), ("c", 0)}
    h.finish("t", pid, epoch)
    # A new transaction after CompleteCommit starts a new clock; so does one after CompleteAbort.
    h.clock.advance(100)
    h.begin("t", pid, epoch, ("d", 0))
    assert (h.md().txn_start_timestamp, h.md().topic_partitions) == (h.t0 + 300, {("d", 0)})
    h.finish("t", pid, epoch, commit=False)
    h.begin("t", pid, epoch, ("e", 0))
    assert h.md().state is S.ONGOING


def test_add_partitions_failed_append() -> None:
    h = Harness()
    pid, epoch = h.init_ok()
    box = h.add("t", pid, epoch, ("a", 0))
    h.store.complete_one(E.not_leader_or_follower)
    assert box.one == {("a", 0): E.not_coordinator}
    assert (h.md().state, h.md().pending_state, h.md().topic_partitions) == (S.EMPTY, None, set())


def test_add_offsets_adds_the_offsets_partition() -> None:
    h = Harness()
    pid, epoch = h.started("t", ("a", 0))
    box = h.add_offsets("t", pid, epoch, 7)
    assert box == []
    h.store.complete_all()
    assert box.one is E.none
    assert h.md().topic_partitions == {("a", 0), (OFFSETS, 7)}
    assert h.add_offsets("t", pid, epoch + 1).one is E.producer_fenced
    assert h.add_offsets("nope", pid, epoch).one is E.invalid_producer_id_mapping
    h.end("t", pid, epoch)
    h.store.complete_all()
    assert h.markers.calls[0].partitions == frozenset({("a", 0), (OFFSETS, 7)})
    # add_offsets also starts a transaction from Empty.
    h2 = Harness()
    pid, epoch = h2.init_ok()
    box = h2.add_offsets("t", pid, epoch, 3)
    h2.store.complete_all()
    assert box.one is E.none and h2.md().state is S.ONGOING


# ================================================================ EndTxn


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_full_sequence(commit: bool) -> None:
    h = Harness()
    pid, epoch = h.started("t", ("a", 0), ("b", 1))
    prepare, complete = ("PrepareCommit", "CompleteCommit") if commit else ("PrepareAbort", "CompleteAbort")
    h.events.clear()
    box = h.end("t", pid, epoch, commit)
    assert h.events == [("append", "t", prepare)]
    assert box == []
    assert (h.md().state, h.md().pending_state.kafka_name) == (S.ONGOING, prepare)

    h.store.complete_one()
    # Persisted -> answered -> markers, in that order.
    marker = ("markers", "COMMIT" if commit else "ABORT", (("a", 0), ("b", 1)))
    assert h.events == [("append", "t", prepare), ("answer", E.none), marker]
    assert (h.md().state.kafka_name, h.md().pending_state.kafka_name) == (prepare, complete)
    call = h.markers.calls[0]
    assert (call.producer_id, call.producer_epoch, call.coordinator_epoch, call.commit) == (
        pid, epoch, COORDINATOR_EPOCH, commit)

    h.markers.complete()
    assert h.events[-1] == ("append", "t", complete)
    assert h.md().state.kafka_name == prepare  # not before the store reports it
    # Only Complete is applied once in the log: it promises nothing (every marker is durable).
    assert h.store.applied_once_in_log == [complete]
    h.store.complete_all()
    md = h.md()
    assert (md.state.kafka_name, md.pending_state, md.topic_partitions) == (complete, None, set())
    assert (md.producer_id, md.producer_epoch) == (pid, epoch)  # TV0: no bump
    assert h.store.logged_states("t") == ["Empty", "Ongoing", prepare, complete]
    values = [v for t, v in (decode(k, v) for _, k, v in h.store.log) if t == "t"]
    assert values[2].transaction_partitions == (("a", (0,)), ("b", (1,)))
    assert values[3].transaction_partitions == ()
    assert values[3].transaction_start_timestamp_ms == h.t0
    assert len(box) == 1


def test_end_txn_retries_and_mismatches() -> None:
    h = Harness()
    pid, epoch = h.started()
    h.finish("t", pid, epoch, commit=True)
    assert h.end("t", pid, epoch, commit=True).one is E.none  # a retry
    assert h.end("t", pid, epoch, commit=False).one is E.invalid_txn_state
    assert h.store.pending == []
    h.begin("t", pid, epoch, ("a", 0))
    h.finish("t", pid, epoch, commit=False)
    assert h.end("t", pid, epoch, commit=False).one is E.none
    assert h.end("t", pid, epoch, commit=True).one is E.invalid_txn_state


def test_end_txn_while_completing() -> None:
    h = Harness()
    pid, epoch = h.started()
    first = h.end("t", pid, epoch, commit=True)
    # While the Prepare record is being written.
    assert h.end("t", pid, epoch, commit=True).one is E.concurrent_transactions
    h.store.complete_all()
    assert first.one is E.none
    # While the markers are being written (CompleteCommit pending).
    assert h.end("t", pid, epoch, commit=True).one is E.concurrent_transactions
    assert h.end("t", pid, epoch, commit=False).one is E.concurrent_transactions


def test_end_txn_in_prepare_state_without_pending_change() -> None:
    # Kafka reaches PrepareCommit with nothing pending when it gives up writing
    # the Complete record (NOT_COORDINATOR); we retry instead, so the state is
    # set up by hand here to check EndTxn's answers for it.
    h = Harness(num_partitions=1)
    pid, epoch = h.started()
    h.end("t", pid, epoch, commit=True)
    h.store.complete_all()
    h.markers.complete({("a", 0): E.invalid_producer_epoch})  # markers obsolete: sending stops
    h.md().pending_state = None
    assert h.md().state is S.PREPARE_COMMIT
    assert h.end("t", pid, epoch, commit=True).one is E.concurrent_transactions
    assert h.end("t", pid, epoch, commit=False).one is E.invalid_txn_state
    assert h.init("t").one == (E.concurrent_transactions, -1, -1)
    # Reloading the partition completes it.
    h.coord.load_partition(0, h.store.records(0))
    assert h.markers.calls[0].partitions == frozenset({("a", 0), ("b", 1)})
    h.markers.complete()
    h.store.complete_all()
    assert h.md().state is S.COMPLETE_COMMIT


def test_end_txn_error_matrix() -> None:
    h = Harness()
    pid, epoch = h.init_ok()
    assert h.end("t", pid, epoch).one is E.invalid_txn_state  # Empty: no transaction to end
    assert h.end("t", pid, epoch, commit=False).one is E.invalid_txn_state
    assert h.end("unknown", pid, epoch).one is E.invalid_producer_id_mapping
    h.begin("t", pid, epoch, ("a", 0))
    assert h.end("t", pid + 1, epoch).one is E.invalid_producer_id_mapping
    assert h.end("t", pid, epoch + 1).one is E.producer_fenced
    assert h.end("t", pid, epoch - 1).one is E.producer_fenced
    assert h.store.pending == [] and h.md().state is S.ONGOING


def test_end_txn_failed_prepare_append() -> None:
    h = Harness()
    pid, epoch = h.started()
    box = h.end("t", pid, epoch)
    h.store.complete_one(E.not_enough_replicas)
    assert box.one is E.coordinator_not_available
    assert (h.md().state, h.md().pending_state) == (S.ONGOING, None)
    assert h.markers.calls == []
    h.finish("t", pid, epoch)


def test_transaction_with_no_partitions_cannot_end_but_empty_add_opens_it() -> None:
    h = Harness()
    pid, epoch = h.init_ok()
    box = h.add("t", pid, epoch)  # no partitions at all
    h.store.complete_all()
    assert box.one == {}
    assert h.md().state is S.ONGOING
    # Ending it writes no markers at all.
    h.end("t", pid, epoch)
    h.store.complete_one()
    assert h.markers.calls == []
    assert h.store.pending_states() == [("t", "CompleteCommit")]
    h.store.complete_all()
    assert h.md().state is S.COMPLETE_COMMIT


# ================================================================ markers


def test_marker_failure_is_retried_after_backoff() -> None:
    h = Harness()
    pid, epoch = h.started("t", ("a", 0), ("b", 1))
    h.end("t", pid, epoch)
    h.store.complete_all()
    h.markers.complete({("b", 1): E.not_leader_or_follower})
    assert h.store.pending == []
    assert h.md().topic_partitions == {("b", 1)}
    assert h.coord.next_deadline_ms() == h.clock.now_ms() + MARKER_RETRY_BACKOFF_MS
    h.advance(MARKER_RETRY_BACKOFF_MS - 1)
    assert h.markers.calls == []
    h.advance(1)
    [call] = h.markers.calls
    assert (call.partitions, call.producer_epoch, call.commit) == (frozenset({("b", 1)}), epoch, True)
    h.markers.complete({("b", 1): E.request_timed_out})
    h.advance(MARKER_RETRY_BACKOFF_MS)
    h.markers.complete()
    assert h.store.pending_states() == [("t", "CompleteCommit")]
    h.store.complete_all()
    assert h.md().state is S.COMPLETE_COMMIT


def test_missing_marker_outcome_is_retried() -> None:
    h = Harness()
    pid, epoch = h.started("t", ("a", 0))
    h.end("t", pid, epoch)
    h.store.complete_all()
    h.markers.calls.pop(0).done({})
    assert h.md().topic_partitions == {("a", 0)}
    h.advance(MARKER_RETRY_BACKOFF_MS)
    h.markers.complete()
    h.store.complete_all()
    assert h.md().state is S.COMPLETE_COMMIT


@pytest.mark.parametrize("outcome", [E.unknown_topic_or_partition, E.unsupported_for_message_format])
def test_deleted_partition_counts_as_done(outcome: ErrorCode) -> None:
    h = Harness()
    pid, epoch = h.started("t", ("a", 0), ("gone", 3))
    h.end("t", pid, epoch, commit=False)
    h.store.complete_all()
    h.markers.complete({("gone", 3): outcome})
    assert h.store.pending_states() == [("t", "CompleteAbort")]
    h.store.complete_all()
    assert h.md().state is S.COMPLETE_ABORT


def test_obsolete_markers_stop_as_kafka() -> None:
    h = Harness()
    pid, epoch = h.started("t", ("a", 0), ("b", 1))
    h.end("t", pid, epoch)
    h.store.complete_all()
    h.markers.complete({("b", 1): E.invalid_producer_epoch})
    h.advance(10 * MARKER_RETRY_BACKOFF_MS)
    assert h.markers.calls == [] and h.store.pending == []
    assert (h.md().state, h.md().pending_state) == (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)


@pytest.mark.parametrize("error", [E.not_enough_replicas, E.not_leader_or_follower, E.kafka_storage_error])
def test_failed_completion_append_is_retried(error: ErrorCode) -> None:
    h = Harness()
    pid, epoch = h.started()
    h.end("t", pid, epoch)
    h.store.complete_all()
    h.markers.complete()
    h.store.complete_one(error)
    assert (h.md().state, h.md().pending_state) == (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
    assert h.init("t").one[0] is E.concurrent_transactions
    h.advance(COMPLETION_RETRY_BACKOFF_MS - 1)
    assert h.store.pending == []
    h.advance(1)
    assert h.store.pending_states() == [("t", "CompleteCommit")]
    h.store.complete_all()
    assert h.md().state is S.COMPLETE_COMMIT
    assert h.markers.calls == []  # markers were not written twice


def test_completion_left_to_the_reload_that_replaced_the_metadata() -> None:
    h = Harness(num_partitions=1)
    pid, epoch = h.started()
    h.end("t", pid, epoch)
    h.store.complete_all()
    h.markers.complete()
    h.coord.load_partition(0, h.store.records(0))  # PrepareCommit is the last durable record
    h.store.complete_one(E.not_leader_or_follower)  # the old incarnation's Complete fails: not retried
    h.advance(10 * COMPLETION_RETRY_BACKOFF_MS)
    assert h.store.pending == []
    h.markers.complete()  # the reload's own markers
    assert h.store.pending_states() == [("t", "CompleteCommit")]
    h.store.complete_all()
    assert h.md().state is S.COMPLETE_COMMIT


# ================================================================ KIP-890 part 1 verification


def test_partition_in_transaction() -> None:
    h = Harness()
    check = h.coord.partition_in_transaction
    assert check("unknown", 1, 0, "a", 0) is E.invalid_producer_id_mapping
    pid, epoch = h.init_ok()
    assert check("t", pid, epoch, "a", 0) is E.transaction_abortable  # Empty: nothing added
    adding = h.add("t", pid, epoch, ("a", 0))
    assert check("t", pid, epoch, "a", 0) is E.transaction_abortable  # not yet durable
    h.store.complete_all()
    assert adding.one == {("a", 0): E.none}
    assert check("t", pid, epoch, "a", 0) is E.none
    assert check("t", pid, epoch, "a", 1) is E.transaction_abortable
    assert check("t", pid + 1, epoch, "a", 0) is E.invalid_producer_id_mapping
    assert check("t", pid, epoch + 1, "a", 0) is E.producer_fenced
    assert check("", pid, epoch, "a", 0) is E.invalid_request
    h.end("t", pid, epoch)
    h.store.complete_all()
    assert check("t", pid, epoch, "a", 0) is E.concurrent_transactions  # completing
    h.markers.complete()
    h.store.complete_all()
    assert check("t", pid, epoch, "a", 0) is E.transaction_abortable  # completed
    # A fenced producer.
    h.begin("t", pid, epoch, ("a", 0))
    h.init("t")
    assert check("t", pid, epoch, "a", 0) is E.producer_fenced


# ================================================================ timeouts


def test_timed_out_transaction_is_aborted_with_epoch_bump() -> None:
    h = Harness()
    pid, epoch = h.started("t", ("a", 0), timeout=10_000)
    h.advance(10_000)  # start + timeout == now: not yet
    assert h.store.pending == []
    h.advance(1000)
    [(_, _, value)] = h.store.pending_records()
    assert (state_name(value), value.producer_epoch) == ("PrepareAbort", epoch + 1)
    # The zombie is fenced at once.
    assert h.end("t", pid, epoch, commit=True).one is E.producer_fenced
    h.store.complete_all()
    [call] = h.markers.calls
    assert (call.commit, call.producer_epoch, call.partitions) == (False, epoch + 1, frozenset({("a", 0)}))
    assert h.add("t", pid, epoch, ("b", 0)).one == {("b", 0): E.producer_fenced}
    h.markers.complete()
    h.store.complete_all()
    md = h.md()
    assert (md.state, md.producer_epoch, md.topic_partitions) == (S.COMPLETE_ABORT, epoch + 1, set())
    # The producer that comes back gets fenced, never success.
    assert h.end("t", pid, epoch, commit=True).one is E.producer_fenced
    assert h.end("t", pid, epoch, commit=False).one is E.producer_fenced
    assert h.add("t", pid, epoch, ("a", 0)).one == {("a", 0): E.producer_fenced}
    assert h.coord.partition_in_transaction("t", pid, epoch, "a", 0) is E.producer_fenced
    # A new instance takes over with a higher epoch.
    assert h.init_ok() == (pid, epoch + 2)


def test_a_timed_out_producer_is_fenced_as_by_kafka_without_transactions_v2() -> None:
    """After the coordinator aborts a timed-out transaction (epoch fence), the producer's KIP-360
    InitProducerId(pid, old epoch) is PRODUCER_FENCED; a new instance gets the next epoch.  This is
    what Apache Kafka 4.3.1 formatted with transaction.version=1 answers (measured); with
    transactions v2 (KIP-890 part 2, which Onceflow does not implement) Kafka's timeout abort
    bumps the epoch again and remembers the old one, so the producer may recover."""
    h = Harness()
    pid, epoch = h.started("t", ("a", 0), timeout=1000)
    h.advance(2000)
    h.store.complete_all()
    h.markers.complete()
    h.store.complete_all()
    md = h.md()
    assert (md.state, md.producer_epoch) == (S.COMPLETE_ABORT, epoch + 1)
    assert h.end("t", pid, epoch, commit=True).one is E.producer_fenced
    assert h.init("t", pid=pid, epoch=epoch).one == (E.producer_fenced, -1, -1)
    assert h.init_ok() == (pid, epoch + 2)  # a new instance


def test_timeout_abort_is_periodic_and_skips_pending_transactions() -> None:
    h = Harness(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": 5000})
    pid, epoch = h.started("t", ("a", 0), timeout=1000)
    busy = h.add("t", pid, epoch, ("b", 0))  # a change is pending
    h.advance(5000)
    assert h.store.pending_states() == [("t", "Ongoing")]
    h.store.complete_all()
    assert busy.one == {("b", 0): E.none}
    h.advance(4999)
    assert h.store.pending == []
    h.advance(1)
    assert h.store.pending_states() == [("t", "PrepareAbort")]


def test_failed_timeout_abort_keeps_the_fence_and_retries_without_second_bump() -> None:
    h = Harness()
    pid, epoch = h.started("t", ("a", 0), timeout=1000)
    h.advance(2000)
    h.store.complete_one(E.not_enough_replicas)
    md = h.md()
    assert (md.state, md.producer_epoch, md.has_failed_epoch_fence) == (S.ONGOING, epoch + 1, True)
    assert h.end("t", pid, epoch).one is E.producer_fenced
    h.advance(1000)
    [(_, _, value)] = h.store.pending_records()
    assert (state_name(value), value.producer_epoch) == ("PrepareAbort", epoch + 1)
    h.store.complete_all()
    h.markers.complete()
    h.store.complete_all()
    assert (h.md().state, h.md().has_failed_epoch_fence) == (S.COMPLETE_ABORT, False)


# ================================================================ expiration


def test_expired_transactional_ids_are_tombstoned() -> None:
    h = Harness(**{"transactional.id.expiration.ms": 5000})
    h.init_ok("idle")
    _pid, _epoch = h.started("busy", ("a", 0), timeout=900_000)
    pid_done, epoch_done = h.started("done", ("a", 1))
    h.finish("done", pid_done, epoch_done)
    h.advance(4000)
    assert h.store.pending == []
    h.advance(1000)
    assert sorted(h.store.pending_states()) == [("done", "<tombstone>"), ("idle", "<tombstone>")]
    md = h.md("idle")
    assert (md.state, md.pending_state) == (S.EMPTY, S.DEAD)
    assert h.init("idle").one == (E.concurrent_transactions, -1, -1)
    h.store.complete_all()
    assert h.md("idle") is None and h.md("done") is None
    assert [d.error for d in h.coord.describe_transactions(["idle", "done"])] == [E.transactional_id_not_found] * 2
    assert h.add("done", pid_done, epoch_done, ("a", 1)).one == {("a", 1): E.invalid_producer_id_mapping}
    # Ongoing transactions never expire.
    h.advance(60_000)
    assert h.md("busy").state is S.ONGOING and h.store.pending == []
    # The id can be used again: a new producer id.
    assert h.init_ok("idle") == (1003, 0)


def test_failed_tombstone_keeps_the_id() -> None:
    h = Harness(**{"transactional.id.expiration.ms": 5000})
    h.init_ok("idle")
    h.advance(5000)
    h.store.complete_one(E.not_enough_replicas)
    assert (h.md("idle").state, h.md("idle").pending_state) == (S.EMPTY, None)
    h.advance(1000)
    assert h.store.pending_states() == [("idle", "<tombstone>")]


def test_activity_postpones_expiration() -> None:
    h = Harness(**{"transactional.id.expiration.ms": 5000})
    pid, epoch = h.init_ok("t")
    h.advance(4000)
    h.begin("t", pid, epoch, ("a", 0))
    h.finish("t", pid, epoch)  # last update now
    h.advance(4000)
    assert h.store.pending == []
    h.advance(1000)
    assert h.store.pending_states() == [("t", "<tombstone>")]


# ================================================================ loading


def test_load_partition_last_record_wins_and_rolls_forward() -> None:
    h = Harness(num_partitions=1)
    key = rec.encode_key
    t_start = h.t0 - 1000
    records = [
        (key("a"), value_bytes(S.EMPTY, pid=10, epoch=0)),
        (key("a"), value_bytes(S.ONGOING, pid=10, epoch=0, partitions=[("x", 0)], start=h.t0 - TIMEOUT)),
        (key("b"), value_bytes(S.EMPTY, pid=11)),
        (key("b"), None),  # tombstone
        (b"\x00\x09\x00\x01z", b"whatever"),  # unknown key version: skipped
        (key("c"), b"\x00\x00\x01"),  # garbage: skipped
        (key("d"), value_bytes(S.PREPARE_COMMIT, pid=12, epoch=3, partitions=[("x", 1), ("y", 0)], start=t_start)),
        (key("e"), value_bytes(S.PREPARE_ABORT, pid=13, epoch=4, partitions=[("x", 2)], start=t_start)),
        (key("f"), value_bytes(S.PREPARE_EPOCH_FENCE, pid=14, epoch=5, partitions=[("x", 3)], start=t_start)),
        (key("g"), value_bytes(S.COMPLETE_COMMIT, pid=15, epoch=6, start=t_start, last_update=h.t0)),
        (key("h"), value_bytes(S.DEAD, pid=16)),  # never written by a coordinator: dropped
    ]
    h.coord.load_partition(0, records)
    assert h.coord.transactional_ids() == ["a", "d", "e", "f", "g"]
    a = h.md("a")
    assert (a.state, a.topic_partitions, a.producer_epoch, a.last_producer_epoch) == (S.ONGOING, {("x", 0)}, 0, -1)
    # Roll forward: markers first, with the epochs of the log.
    calls = {(c.producer_id, c.producer_epoch, c.commit, c.partitions) for c in h.markers.calls}
    assert calls == {
        (12, 3, True, frozenset({("x", 1), ("y", 0)})),
        (13, 4, False, frozenset({("x", 2)})),
        (14, 5, False, frozenset({("x", 3)})),
    }
    assert all(c.coordinator_epoch == COORDINATOR_EPOCH for c in h.markers.calls)
    assert h.store.pending == []
    assert h.init("d").one == (E.concurrent_transactions, -1, -1)
    while h.markers.calls:
        h.markers.complete()
    assert sorted(h.store.pending_states()) == [
        ("d", "CompleteCommit"), ("e", "CompleteAbort"), ("f", "CompleteAbort")]
    h.store.complete_all()
    assert [h.md(t).state for t in "defg"] == [S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.COMPLETE_ABORT,
                                               S.COMPLETE_COMMIT]
    # The loaded Ongoing transaction times out like any other.
    h.advance(1000)
    assert h.store.pending_states() == [("a", "PrepareAbort")]


def test_load_partition_replaces_cached_state_and_round_trips_the_log() -> None:
    h = Harness(num_partitions=1)
    pid, epoch = h.started("t", ("a", 0))
    h.init_ok("other")
    log = h.store.records(0)
    h.coord.load_partition(0, [])
    assert h.coord.transactional_ids() == []
    h.coord.load_partition(0, log)
    md = h.md("t")
    assert (md.state, md.producer_id, md.producer_epoch, md.topic_partitions) == (S.ONGOING, pid, epoch, {("a", 0)})
    h.finish("t", pid, epoch)


def test_reload_while_a_change_is_pending_answers_not_coordinator() -> None:
    h = Harness(num_partitions=1)
    pid, epoch = h.init_ok()
    box = h.add("t", pid, epoch, ("a", 0))
    h.coord.load_partition(0, h.store.records(0))
    h.store.complete_all()
    assert box.one == {("a", 0): E.not_coordinator}
    assert h.md().state is S.EMPTY  # the reloaded metadata is untouched
    h.begin("t", pid, epoch, ("a", 0))


# ================================================================ KIP-664


def test_describe_transactions() -> None:
    h = Harness()
    pid, epoch = h.started("t", ("b", 2), ("a", 1), ("a", 0), timeout=30_000)
    [d, missing, empty] = h.coord.describe_transactions(["t", "nope", ""])
    assert (d.error, d.state, d.producer_id, d.producer_epoch, d.timeout_ms) == (
        E.none, "Ongoing", pid, epoch, 30_000)
    assert d.start_timestamp_ms == h.t0
    assert d.partitions == (("a", 0), ("a", 1), ("b", 2))
    assert d.topics == {"a": [0, 1], "b": [2]}
    assert missing.error is E.transactional_id_not_found
    assert empty.error is E.invalid_request
    h.init_ok("fresh")
    [f] = h.coord.describe_transactions(["fresh"])
    assert (f.state, f.start_timestamp_ms, f.partitions) == ("Empty", -1, ())


def test_list_transactions_with_filters() -> None:
    h = Harness()
    h.init_ok("a")  # 1000, Empty
    h.started("b", ("x", 0))  # 1001, Ongoing since t0
    pid_c, epoch_c = h.started("c", ("x", 1))  # 1002
    h.finish("c", pid_c, epoch_c)
    everything = h.coord.list_transactions(None, None)
    assert everything == [
        TransactionListing("a", 1000, "Empty"),
        TransactionListing("b", 1001, "Ongoing"),
        TransactionListing("c", 1002, "CompleteCommit"),
    ]
    assert everything.error is E.none and everything.unknown_state_filters == []
    assert [t.transactional_id for t in h.coord.list_transactions({"Ongoing"}, None)] == ["b"]
    odd = h.coord.list_transactions({"Ongoing", "Bogus", "ongoing"}, set())
    assert [t.transactional_id for t in odd] == ["b"]
    assert odd.unknown_state_filters == ["Bogus", "ongoing"]
    assert [t.transactional_id for t in h.coord.list_transactions(set(), {1002, 5})] == ["c"]
    assert list(h.coord.list_transactions({"Empty"}, {1001})) == []
    # Duration filter (KIP-994): transactions running longer than the filter.
    h.clock.advance(5000)
    h.started("d", ("x", 2))
    long_running = h.coord.list_transactions(None, None, duration_filter_ms=3000)
    # Kafka's rule: now - start > filter; an Empty id has start -1 and always passes.
    assert [t.transactional_id for t in long_running] == ["a", "b", "c"]
    assert [t.transactional_id for t in h.coord.list_transactions({"Ongoing"}, None, 0)] == ["b"]


# ================================================================ callbacks and shutdown


def test_callbacks_run_after_the_state_is_consistent() -> None:
    h = Harness()
    seen: list = []

    def on_init(error, pid, epoch) -> None:
        # Re-entering the coordinator from a callback sees the applied state.
        seen.append(h.md().producer_epoch)
        h.coord.add_partitions("t", pid, epoch, [("a", 0)], seen.append)

    h.coord.init_producer_id("t", TIMEOUT, -1, -1, on_init)
    h.store.complete_all()
    assert seen == [0, {("a", 0): E.none}]

    def bad(*args) -> None:
        raise RuntimeError("broken handler")

    good = Box()
    h.coord.init_producer_id("u", TIMEOUT, -1, -1, bad)
    h.coord.init_producer_id("v", TIMEOUT, -1, -1, good)
    h.store.complete_all()
    assert good.one[0] is E.none and h.md("u").producer_epoch == 0


def test_shutdown_answers_pending_requests_once_and_goes_quiet() -> None:
    h = Harness()
    pid, epoch = h.started("t", ("a", 0))
    pid_u, epoch_u = h.started("u", ("a", 1))
    h.init_ok("w")
    pending_init = h.init("w")
    pending_add = h.add("t", pid, epoch, ("b", 0))
    pending_end = h.end("u", pid_u, epoch_u)
    pending_fence = h.init("t")  # the pending add makes this CONCURRENT at once
    assert pending_fence.one == (E.concurrent_transactions, -1, -1)
    h.coord.shutdown()
    assert pending_init.one == (E.not_coordinator, -1, -1)
    assert pending_add.one == {("b", 0): E.not_coordinator}
    assert pending_end.one is E.not_coordinator
    h.store.complete_all()
    assert h.markers.calls == []
    assert len(pending_init) == len(pending_add) == len(pending_end) == 1
    assert h.coord.next_deadline_ms() is None
    h.advance(10**7)
    assert h.store.pending == []
    assert h.init("t").one == (E.not_coordinator, -1, -1)
    assert h.init(None).one == (E.coordinator_not_available, -1, -1)
    assert h.add("t", pid, epoch, ("a", 0)).one == {("a", 0): E.not_coordinator}
    assert h.end("t", pid, epoch).one is E.not_coordinator
    assert h.add_offsets("t", pid, epoch).one is E.not_coordinator
    assert h.coord.partition_in_transaction("t", pid, epoch, "a", 0) is E.not_coordinator
    assert h.coord.describe_transactions(["t"])[0].error is E.coordinator_not_available
    assert h.coord.list_transactions(None, None).error is E.coordinator_not_available
    h.coord.shutdown()  # idempotent


def test_shutdown_during_markers_drops_them() -> None:
    h = Harness()
    pid, epoch = h.started()
    box = h.end("t", pid, epoch)
    h.store.complete_all()
    assert box.one is E.none
    h.coord.shutdown()
    h.markers.complete()
    assert h.store.pending == []


def test_next_deadline_tracks_the_periodic_tasks() -> None:
    h = Harness(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": 300,
                   "transaction.remove.expired.transaction.cleanup.interval.ms": 700})
    assert h.coord.next_deadline_ms() == h.t0 + 300
    h.advance(300)
    assert h.coord.next_deadline_ms() == h.t0 + 600
    h.advance(300)
    assert h.coord.next_deadline_ms() == h.t0 + 700


# ================================================================ random interleavings


@pytest.mark.parametrize("seed", range(12))
def test_random_interleavings_keep_invariants(seed: int, caplog: pytest.LogCaptureFixture) -> None:
    """Random requests, store errors, marker outcomes, time jumps and reloads:
    no invariant breaks, every callback is called at most once while running
    and exactly once in the end, and everything completes once the faults stop."""
    import random

    rnd = random.Random(seed)
    h = Harness(num_partitions=2, **{"transactional.id.expiration.ms": 20_000})
    tids = ["t0", "t1", "t2"]
    known: dict[str, tuple[int, int]] = {}
    boxes: list[tuple[str, str, Box]] = []
    store_outcomes = [E.none] * 6 + [E.not_enough_replicas, E.not_leader_or_follower, E.request_timed_out]
    marker_outcomes = [E.none] * 8 + [E.not_leader_or_follower, E.unknown_topic_or_partition,
                                      E.invalid_producer_epoch]
    for _ in range(300):
        op = rnd.randrange(11)
        tid = rnd.choice(tids)
        pid, epoch = known.get(tid, (rnd.randrange(1000, 1003), 0))
        if rnd.random() < 0.1:
            epoch -= 1
        if op == 0:
            boxes.append(("init", tid, h.init(tid, timeout=rnd.choice([1000, 5000]))))
        elif op == 1:
            boxes.append(("add", tid, h.add(tid, pid, epoch, (rnd.choice("ab"), rnd.randrange(3)))))
        elif op == 2:
            boxes.append(("end", tid, h.end(tid, pid, epoch, rnd.random() < 0.5)))
        elif op == 3:
            boxes.append(("offsets", tid, h.add_offsets(tid, pid, epoch)))
        elif op in (4, 5, 6) and h.store.pending:
            h.store.complete_one(rnd.choice(store_outcomes))
        elif op == 7 and h.markers.calls:
            call = h.markers.calls.pop(rnd.randrange(len(h.markers.calls)))
            call.done({tp: rnd.choice(marker_outcomes) for tp in call.partitions})
        elif op == 8:
            h.advance(rnd.choice([1, 100, 1000, 3000]))
        elif op == 9 and rnd.random() < 0.3:
            partition = rnd.randrange(2)
            h.coord.load_partition(partition, h.store.records(partition))
        elif op == 10:
            h.coord.describe_transactions(tids)
            h.coord.list_transactions(None, None, 10)
            h.coord.partition_in_transaction(tid, pid, epoch, "a", 0)
        for kind, t, box in boxes:
            assert len(box) <= 1, (kind, t, list(box))
            if kind == "init" and box and box[0][0] is E.none:
                known[t] = box[0][1:]
        boxes = [entry for entry in boxes if not entry[2]]
    # The faults stop; a final load rolls forward whatever was left behind.
    for partition in range(2):
        h.coord.load_partition(partition, h.store.records(partition))
    for _ in range(50):
        while h.store.pending:
            h.store.complete_one()
        while h.markers.calls:
            h.markers.complete()
        h.advance(1000)
    assert all(len(box) == 1 for _, _, box in boxes)
    for t in tids:
        md = h.md(t)
        if md is not None:
            assert md.pending_state is None and md.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT), md
    assert not [r for r in caplog.records if r.exc_info]  # no callback or step raised
    h.coord.shutdown()


def test_stats_count_commits_aborts_fences_and_time_endtxn_to_complete_with_every_marker() -> None:
    h = Harness()
    pid, epoch = h.started("t", ("a", 0))
    box = h.end("t", pid, epoch, commit=True)
    h.store.complete_all()
    assert box.one is E.none
    h.clock.advance(1500)  # the markers take 1.5 s to be written
    while h.markers.calls:
        h.markers.complete()
    h.store.complete_all()
    stats = h.coord.stats
    assert (stats.commits, stats.aborts, stats.fenced) == (1, 0, 0)
    assert stats.end_to_complete_ms.count == 1 and stats.end_to_complete_ms.sum == 1500
    # A new instance takes the id over: the old one is fenced.
    h.init_ok("t")
    assert stats.fenced == 1
    pid, epoch = h.md("t").producer_id, h.md("t").producer_epoch
    h.begin("t", pid, epoch, ("a", 0))
    h.finish("t", pid, epoch, commit=False)
    assert (stats.commits, stats.aborts, stats.end_to_complete_ms.count) == (1, 1, 2)
    # A transaction that outlives its timeout: aborted by the coordinator, counted as a timeout too.
    h.begin("t", pid, epoch, ("a", 0))
    h.advance(TIMEOUT + 1000)
    h.store.complete_all()
    while h.markers.calls:
        h.markers.complete()
    h.store.complete_all()
    assert (stats.timeouts, stats.aborts) == (1, 2)
