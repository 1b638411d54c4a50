"""Transactions v2 (KIP-890 part 2) in the transaction coordinator, as Kafka 4.3 decides them
(TransactionCoordinator.endTransaction, TransactionMetadata): every EndTxn of a v2 client bumps
the epoch, and the markers carry the bumped one; a straggler from the previous transaction is
refused; a retried EndTxn is answered as the first was; an exhausted epoch moves the id to a new
producer id at the Complete record (KAFKA-18660); the coordinator's own aborts (a new instance, a
timeout) bump once (KAFKA-19367); a v2 abort may start from Empty; the records carry the next
producer id and the client's version, and a reload keeps them.  Driven with the fakes of
test_txn_coordinator.py."""

from __future__ import annotations

from onceflow.coordinator.transaction import log_records as rec
from onceflow.coordinator.transaction.metadata import MAX_PRODUCER_EPOCH
from tests.unit.test_txn_coordinator import E, S, Harness, state_name

V2 = 2


def v2_harness(**config) -> Harness:
    return Harness(transaction_version=2, **config)


def ended(h: Harness, tid: str, pid: int, epoch: int, commit: bool = True) -> tuple:
    """A v2 EndTxn through its markers to Complete; its answer."""
    box = h.end(tid, pid, epoch, commit, tv=V2)
    h.store.complete_all()
    answer = box.one
    while h.markers.calls:
        h.markers.complete()
    h.store.complete_all()
    return answer


def test_a_v2_commit_bumps_the_epoch_and_its_markers_carry_the_bumped_one() -> None:
    h = v2_harness()
    pid, epoch = h.started("t", ("a", 0), ("b", 1))
    box = h.end("t", pid, epoch, tv=V2)
    [(_, _, prepare)] = h.store.pending_records()
    assert (state_name(prepare), prepare.producer_id, prepare.producer_epoch) == ("PrepareCommit", pid, epoch + 1)
    assert (prepare.client_transaction_version, prepare.next_producer_id) == (V2, -1)
    assert box == []  # answered once the Prepare record is durable
    h.store.complete_all()
    assert box.one == (E.none, pid, epoch + 1)
    [call] = h.markers.calls
    assert (call.producer_id, call.producer_epoch, call.commit) == (pid, epoch + 1, True)
    h.markers.complete()
    h.store.complete_all()
    md = h.md()
    assert (md.state, md.producer_id, md.producer_epoch, md.last_producer_epoch) == (S.COMPLETE_COMMIT, pid, epoch + 1, epoch)
    assert md.client_transaction_version == V2


def test_a_delayed_commit_from_the_previous_transaction_cannot_commit_the_next() -> None:
    """KAFKA-17754: an EndTxn(COMMIT) of transaction 1, held back in the network until the same
    producer's transaction 2 has begun, must not commit transaction 2."""
    h = v2_harness()
    pid, epoch = h.started("t", ("a", 0))
    assert ended(h, "t", pid, epoch) == (E.none, pid, epoch + 1)
    h.begin("t", pid, epoch + 1, ("a", 0))  # transaction 2, at the bumped epoch
    assert h.end("t", pid, epoch, tv=V2).one == (E.producer_fenced, -1, -1)
    assert h.end("t", pid, epoch, commit=False, tv=V2).one == (E.producer_fenced, -1, -1)
    md = h.md()
    assert (md.state, md.producer_epoch, md.topic_partitions) == (S.ONGOING, epoch + 1, {("a", 0)})
    assert h.store.pending == [] and h.markers.calls == []
    # A Produce of transaction 1 held back the same way is fenced at the partition: its epoch is older.
    assert h.coord.partition_in_transaction("t", pid, epoch, "a", 0) is E.producer_fenced


def test_a_retried_end_is_answered_as_the_first_was() -> None:
    h = v2_harness()
    pid, epoch = h.started("t", ("a", 0))
    assert ended(h, "t", pid, epoch) == (E.none, pid, epoch + 1)
    # The client did not see the answer and sends the same EndTxn again.
    assert h.end("t", pid, epoch, tv=V2).one == (E.none, pid, epoch + 1)
    assert h.end("t", pid, epoch, commit=False, tv=V2).one == (E.invalid_txn_state, -1, -1)
    assert h.store.pending == []
    # While the markers are still being written the retry waits.
    h.begin("t", pid, epoch + 1, ("a", 0))
    box = h.end("t", pid, epoch + 1, tv=V2)
    h.store.complete_all()
    assert box.one == (E.none, pid, epoch + 2)
    assert h.end("t", pid, epoch + 1, tv=V2).one == (E.concurrent_transactions, -1, -1)


def test_a_v2_abort_may_start_from_empty_and_from_a_completed_transaction() -> None:
    h = v2_harness()
    pid, epoch = h.init_ok()
    h.advance(5)
    assert ended(h, "t", pid, epoch, commit=False) == (E.none, pid, epoch + 1)
    md = h.md()
    assert (md.state, md.producer_epoch, md.topic_partitions) == (S.COMPLETE_ABORT, epoch + 1, set())
    assert md.txn_start_timestamp == h.clock.now_ms()  # a transaction with no partition starts at its abort
    assert ended(h, "t", pid, epoch + 1, commit=False) == (E.none, pid, epoch + 2)
    assert h.end("t", pid, epoch + 2, tv=V2).one == (E.invalid_txn_state, -1, -1)  # nothing to commit


def test_an_exhausted_epoch_moves_the_id_to_a_new_producer_id_at_the_complete_record() -> None:
    h = v2_harness()
    pid, _ = h.started("t", ("a", 0))
    md = h.md()
    md.producer_epoch = MAX_PRODUCER_EPOCH - 1  # as after 32,766 transactions
    box = h.end("t", pid, MAX_PRODUCER_EPOCH - 1, tv=V2)
    [(_, _, prepare)] = h.store.pending_records()
    assert (prepare.producer_id, prepare.producer_epoch) == (pid, MAX_PRODUCER_EPOCH)
    new_pid = prepare.next_producer_id
    assert new_pid not in (-1, pid)
    h.store.complete_all()
    assert box.one == (E.none, new_pid, 0)  # the client goes on with the new id
    [call] = h.markers.calls
    assert (call.producer_id, call.producer_epoch) == (pid, MAX_PRODUCER_EPOCH)  # the markers: the old id
    h.markers.complete()
    h.store.complete_all()
    md = h.md()
    assert (md.producer_id, md.producer_epoch, md.previous_producer_id, md.next_producer_id) == (new_pid, 0, pid, -1)
    assert (md.state, md.last_producer_epoch) == (S.COMPLETE_COMMIT, MAX_PRODUCER_EPOCH - 1)
    # A retry with the old id at Short.MaxValue - 1 is the same commit, answered alike.
    assert h.end("t", pid, MAX_PRODUCER_EPOCH - 1, tv=V2).one == (E.none, new_pid, 0)
    h.begin("t", new_pid, 0, ("a", 0))
    assert ended(h, "t", new_pid, 0) == (E.none, new_pid, 1)


def test_a_new_instance_aborts_the_open_transaction_with_one_bump() -> None:
    """KAFKA-19367: the fence and the abort bump the epoch once between them, at transaction version 2."""
    h = v2_harness()
    pid, epoch = h.started("t", ("a", 0))
    box = h.init()
    [(_, _, prepare)] = h.store.pending_records()
    assert (state_name(prepare), prepare.producer_epoch) == ("PrepareAbort", epoch + 1)
    h.store.complete_all()
    [call] = h.markers.calls
    assert (call.commit, call.producer_epoch) == (False, epoch + 1)
    h.markers.complete()
    h.store.complete_all()
    assert box.one == (E.concurrent_transactions, -1, -1)
    assert h.init_ok() == (pid, epoch + 2)  # the retry bumps once more
    assert h.end("t", pid, epoch, tv=V2).one == (E.producer_fenced, -1, -1)


def test_a_v2_producer_whose_transaction_timed_out_recovers_by_aborting() -> None:
    """Kafka 4 lets a v2 producer go on after its transaction was aborted on timeout: its abort is
    taken as a retry of the coordinator's (answered with the bumped epoch); its commit is refused."""
    h = v2_harness()
    pid, epoch = h.started("t", ("a", 0), timeout=10_000)
    h.advance(11_000)
    h.store.complete_all()
    h.markers.complete()
    h.store.complete_all()
    md = h.md()
    assert (md.state, md.producer_epoch) == (S.COMPLETE_ABORT, epoch + 1)
    assert h.end("t", pid, epoch, tv=V2).one == (E.invalid_txn_state, -1, -1)
    assert h.end("t", pid, epoch, commit=False, tv=V2).one == (E.none, pid, epoch + 1)
    h.begin("t", pid, epoch + 1, ("a", 0))
    assert ended(h, "t", pid, epoch + 1) == (E.none, pid, epoch + 2)


def test_v1_clients_keep_their_epoch_on_a_v2_server() -> None:
    h = v2_harness()
    pid, epoch = h.started("t", ("a", 0))
    box = h.end("t", pid, epoch)
    [(_, _, prepare)] = h.store.pending_records()
    assert (prepare.producer_epoch, prepare.client_transaction_version) == (epoch, 0)
    h.store.complete_all()
    assert box.one is E.none


def test_a_reload_keeps_the_next_producer_id_and_the_client_version() -> None:
    h = v2_harness(num_partitions=1)
    pid, _ = h.started("t", ("a", 0))
    h.md().producer_epoch = MAX_PRODUCER_EPOCH - 1
    h.end("t", pid, MAX_PRODUCER_EPOCH - 1, tv=V2)
    h.store.complete_all()  # PrepareCommit durable; the markers not yet written
    [(_, value)] = [(k, v) for k, v in h.store.records(0)][-1:]
    decoded = rec.decode_value(value)
    assert decoded is not None and int.from_bytes(value[:2], "big") == 1  # value version 1
    new_pid = decoded.next_producer_id
    h.coord.load_partition(0, h.store.records(0))
    md = h.md()
    assert (md.state, md.producer_epoch, md.next_producer_id, md.client_transaction_version) == (
        S.PREPARE_COMMIT, MAX_PRODUCER_EPOCH, new_pid, V2)
    while h.markers.calls:  # the reload rolls the commit forward
        h.markers.complete()
    h.store.complete_all()
    assert (h.md().state, h.md().producer_id, h.md().producer_epoch) == (S.COMPLETE_COMMIT, new_pid, 0)


def test_transaction_version_0_writes_value_version_0() -> None:
    h = Harness(transaction_version=0)
    h.init("t")
    [(_, key, value, _)] = h.store.pending
    assert int.from_bytes(value[:2], "big") == 0


def test_the_first_add_after_an_exhausted_epoch_waits_for_the_move_to_the_new_id() -> None:
    """The EndTxn that exhausts the epoch answers with the next producer id at epoch 0 once its
    Prepare record is durable; the client's next Produce v12 (or TxnOffsetCommit v5) may add with it
    while the Complete record that moves the id is still being written.  Kafka checks the pending
    change first (CONCURRENT_TRANSACTIONS, retried by the leader); here the add waits for it."""
    from tests.unit.test_txn_coordinator import OFFSETS, Box

    for offsets in (False, True):
        h = v2_harness()
        pid, _ = h.started("t", ("a", 0))
        h.md().producer_epoch = MAX_PRODUCER_EPOCH - 1
        box = h.end("t", pid, MAX_PRODUCER_EPOCH - 1, tv=V2)
        h.store.complete_all()
        error, new_pid, epoch = box.one
        assert (error, epoch) == (E.none, 0)
        added = Box(h.events)
        if offsets:
            h.coord.add_offsets("t", new_pid, 0, (OFFSETS, 3), added, client_transaction_version=V2)
        else:
            h.coord.add_partitions("t", new_pid, 0, [("a", 0)], added, client_transaction_version=V2)
        assert added == []  # waiting, not INVALID_PRODUCER_ID_MAPPING
        h.markers.complete()
        h.store.complete_all()  # the Complete record: the id is the new one now; then the add's record
        h.store.complete_all()
        assert added.one == (E.none if offsets else {("a", 0): E.none})
        assert (h.md().state, h.md().producer_id) == (S.ONGOING, new_pid)


def test_a_v2_client_connected_across_a_downgrade_keeps_its_next_producer_id() -> None:
    """At transaction.version 0 the coordinator writes version-0 records, which have no room for
    the next producer id: a v2 client's transit is written at version 1 all the same."""
    h = Harness(transaction_version=0, num_partitions=1)
    pid, _ = h.started("t", ("a", 0))
    h.md().producer_epoch = MAX_PRODUCER_EPOCH - 1
    h.end("t", pid, MAX_PRODUCER_EPOCH - 1, tv=V2)
    h.store.complete_all()
    h.coord.load_partition(0, h.store.records(0))
    assert h.md().next_producer_id not in (-1, pid)
