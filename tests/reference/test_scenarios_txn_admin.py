"""KIP-664 (inspecting and aborting transactions), the same scenarios against Onceflow and Apache
Kafka (issue 10).

* DescribeTransactions through a transaction's life: unknown id, Empty, Ongoing (its partitions
  and start time), CompleteCommit, CompleteAbort;
* ListTransactions with state filters (known and unknown states), producer id filters and the
  v1 duration filter;
* DescribeProducers: a producer's epoch, last sequence and open transaction's first offset, and
  the coordinator epoch its last marker carried; unknown partitions;
* aborting an open transaction from outside, as ``kafka-transactions abort --start-offset`` does
  (Kafka's own tool, run against both brokers; one JVM run each, as the tools are slow to start): DescribeProducers finds the producer, and
  WriteTxnMarkers writes an ABORT marker to the partition; the LSO moves on and read_committed
  skips the records;
* WriteTxnMarkers sent by hand: a stale producer epoch or coordinator epoch is refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from onceflow.reference import run_java
from tests.support.reference import Target
from tests.support.txn_wire import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    add_partitions,
    describe_producers,
    describe_transaction,
    end_txn,
    fetch,
    find_transaction_coordinator,
    hw_and_lso,
    idempotent_batch,
    init_idempotent,
    init_transactional,
    list_transactions,
    make_ready_topic,
    produce,
    txn_batch,
    visible_values,
    wait_hw_and_lso,
    wait_txn_state,
    write_txn_markers,
)
from tests.support.waiting import wait_for
from tests.support.wire import WireClient


def _summary(d: object) -> tuple[object, ...]:
    """DescribeTransactions' answer for one id, start time left out."""
    return (d.error_code, d.transactional_id, d.transaction_state, int(d.transaction_timeout.total_seconds() * 1000),  # type: ignore[attr-defined]
            d.producer_id, d.producer_epoch,  # type: ignore[attr-defined]
            sorted((t.topic, sorted(t.partitions)) for t in d.topics))  # type: ignore[attr-defined]


def test_describe_transactions_through_a_transactions_life(target: Target, unique: Callable[[str], str]) -> None:
    topic_a, topic_b, tid = unique("desc-a"), unique("desc-b"), unique("tid")
    make_ready_topic(target.bootstrap_servers, topic_a, 2)
    make_ready_topic(target.bootstrap_servers, topic_b)
    with WireClient(target.bootstrap_servers) as client:
        nobody = unique("nobody")
        find_transaction_coordinator(client, nobody)
        unknown = describe_transaction(client, nobody)
        assert (unknown.error_code, unknown.transactional_id, unknown.transaction_state, unknown.producer_id,
                unknown.producer_epoch, unknown.transaction_start_time, unknown.topics) == \
            (ErrorCode.transactional_id_not_found, nobody, "", 0, 0, 0, ())

        pid, epoch = init_transactional(client, tid, timeout_ms=45_000)
        empty = describe_transaction(client, tid)
        assert _summary(empty) == (ErrorCode.none, tid, "Empty", 45_000, pid, epoch, [])
        assert empty.transaction_start_time == -1

        before = int(time.time() * 1000)
        assert add_partitions(client, tid, pid, epoch, topic_a, [0, 1]) == {0: ErrorCode.none, 1: ErrorCode.none}
        assert add_partitions(client, tid, pid, epoch, topic_b, [0]) == {0: ErrorCode.none}
        after = int(time.time() * 1000)
        ongoing = describe_transaction(client, tid)
        assert _summary(ongoing) == (ErrorCode.none, tid, "Ongoing", 45_000, pid, epoch, sorted([(topic_a, [0, 1]), (topic_b, [0])]))
        assert before - 1000 <= ongoing.transaction_start_time <= after + 1000

        assert produce(client, topic_a, 1, txn_batch(pid, epoch, 0, [b"x"]), tid) == (ErrorCode.none, 0)
        assert end_txn(client, tid, pid, epoch, commit=True) == ErrorCode.none
        wait_txn_state(client, tid, "CompleteCommit")
        committed = describe_transaction(client, tid)
        assert _summary(committed) == (ErrorCode.none, tid, "CompleteCommit", 45_000, pid, epoch, [])
        assert committed.transaction_start_time == ongoing.transaction_start_time

        assert add_partitions(client, tid, pid, epoch, topic_b, [0]) == {0: ErrorCode.none}
        assert end_txn(client, tid, pid, epoch, commit=False) == ErrorCode.none
        wait_txn_state(client, tid, "CompleteAbort")
        assert _summary(describe_transaction(client, tid)) == (ErrorCode.none, tid, "CompleteAbort", 45_000, pid, epoch, [])
        # Nothing was ever written to topic_b, but it was in both transactions: a marker each.
        wait_hw_and_lso(client, topic_b, (2, 2))
        wait_hw_and_lso(client, topic_a, (2, 2), partition=1)


def test_list_transactions_with_state_producer_and_duration_filters(target: Target, unique: Callable[[str], str]) -> None:
    topic = unique("list")
    make_ready_topic(target.bootstrap_servers, topic)
    ids = {name: unique(f"tid-{name}") for name in ("empty", "ongoing", "commit", "abort")}
    with WireClient(target.bootstrap_servers) as client:
        pids = {}
        for name, tid in ids.items():
            pid, epoch = init_transactional(client, tid)
            pids[name] = pid
            if name != "empty":
                assert add_partitions(client, tid, pid, epoch, topic, [0]) == {0: ErrorCode.none}
            if name in ("commit", "abort"):
                assert end_txn(client, tid, pid, epoch, commit=name == "commit") == ErrorCode.none
        wait_txn_state(client, ids["commit"], "CompleteCommit")
        wait_txn_state(client, ids["abort"], "CompleteAbort")
        ours = {tid: name for name, tid in ids.items()}

        def listed(**filters: object) -> tuple[ErrorCode, tuple[str, ...], list[tuple[str, int, str]]]:
            response = list_transactions(client, **filters)  # type: ignore[arg-type]
            mine = sorted((ours[s.transactional_id], s.producer_id, s.transaction_state)
                          for s in response.transaction_states if s.transactional_id in ours)
            return response.error_code, tuple(response.unknown_state_filters), mine

        everything = [("abort", pids["abort"], "CompleteAbort"), ("commit", pids["commit"], "CompleteCommit"),
                      ("empty", pids["empty"], "Empty"), ("ongoing", pids["ongoing"], "Ongoing")]
        assert listed() == (ErrorCode.none, (), everything)
        assert listed(states=("Ongoing",)) == (ErrorCode.none, (), [everything[3]])
        assert listed(states=("CompleteCommit", "CompleteAbort")) == (ErrorCode.none, (), everything[:2])
        assert listed(states=("Empty", "Bogus")) == (ErrorCode.none, ("Bogus",), [everything[2]])
        assert listed(states=("Bogus",))[:2] == (ErrorCode.none, ("Bogus",))
        assert listed(states=("Bogus",))[2] == [], "only unknown states asked for: nothing of ours matches"

        only_commit = list_transactions(client, producer_ids=(pids["commit"],))
        assert [(s.transactional_id, s.transaction_state) for s in only_commit.transaction_states] == \
            [(ids["commit"], "CompleteCommit")]
        assert listed(producer_ids=(pids["ongoing"], pids["abort"]))[2] == [everything[0], everything[3]]

        # Duration (v1): transactions running longer than the filter.  An Empty id has no start
        # time (-1), so it counts as running since the epoch.
        assert listed(duration_ms=3_600_000)[2] == [everything[2]]
        wait_for(lambda: listed(duration_ms=50)[2] == [everything[0], everything[1], everything[2], everything[3]],
                 interval=0.05, what="every transaction of ours to be older than 50 ms")


def test_describe_producers_follows_an_open_transaction(target: Target, unique: Callable[[str], str]) -> None:
    topic, tid = unique("producers"), unique("tid")
    make_ready_topic(target.bootstrap_servers, topic)
    with WireClient(target.bootstrap_servers) as client:
        assert describe_producers(client, topic, 0).active_producers == ()
        idem_pid, idem_epoch = init_idempotent(client)
        assert produce(client, topic, 0, idempotent_batch(idem_pid, idem_epoch, 0, [b"p0", b"p1"])) == (ErrorCode.none, 0)
        pid, epoch = init_transactional(client, tid)
        assert add_partitions(client, tid, pid, epoch, topic, [0]) == {0: ErrorCode.none}
        assert produce(client, topic, 0, txn_batch(pid, epoch, 0, [b"t0", b"t1", b"t2"]), tid) == (ErrorCode.none, 2)

        def producers() -> dict[int, tuple[int, int, int, int]]:
            state = describe_producers(client, topic, 0)
            assert state.error_code == ErrorCode.none
            return {p.producer_id: (p.producer_epoch, p.last_sequence, p.coordinator_epoch, p.current_txn_start_offset)
                    for p in state.active_producers}

        assert producers() == {idem_pid: (idem_epoch, 1, -1, -1), pid: (epoch, 2, -1, 2)}
        assert end_txn(client, tid, pid, epoch, commit=True) == ErrorCode.none
        wait_hw_and_lso(client, topic, (6, 6))
        after = producers()
        coordinator_epoch = after[pid][2]
        assert coordinator_epoch >= 0, "the COMMIT marker carries the coordinator's epoch"
        assert after == {idem_pid: (idem_epoch, 1, -1, -1), pid: (epoch, 2, coordinator_epoch, -1)}

        missing_topic = describe_producers(client, unique("no-such-topic"), 0)
        assert (missing_topic.error_code, missing_topic.active_producers) == (ErrorCode.unknown_topic_or_partition, ())
        missing_partition = describe_producers(client, topic, 7)
        assert (missing_partition.error_code, missing_partition.active_producers) == (ErrorCode.unknown_topic_or_partition, ())


def test_kafka_transactions_abort_ends_an_open_transaction(target: Target, unique: Callable[[str], str]) -> None:
    """``kafka-transactions abort --start-offset``: the operator's way out of a hanging transaction.
    The tool finds the producer with DescribeProducers and writes an ABORT marker with
    WriteTxnMarkers; the coordinator is not involved and still has the transaction open."""
    topic, tid = unique("abort-tool"), unique("tid")
    make_ready_topic(target.bootstrap_servers, topic)
    bs = target.bootstrap_servers
    with WireClient(bs) as client:
        idem_pid, idem_epoch = init_idempotent(client)
        assert produce(client, topic, 0, idempotent_batch(idem_pid, idem_epoch, 0, [b"p1"])) == (ErrorCode.none, 0)
        # A long timeout: the transaction must stay open while the JVM tools run on a busy machine.
        pid, epoch = init_transactional(client, tid, timeout_ms=600_000)
        assert add_partitions(client, tid, pid, epoch, topic, [0]) == {0: ErrorCode.none}
        assert produce(client, topic, 0, txn_batch(pid, epoch, 0, [b"h1", b"h2"]), tid) == (ErrorCode.none, 1)
        assert produce(client, topic, 0, idempotent_batch(idem_pid, idem_epoch, 1, [b"p2"])) == (ErrorCode.none, 3)
        assert hw_and_lso(client, topic) == (4, 1)

        run_java("kafka-transactions", ["--bootstrap-server", bs, "abort", "--topic", topic, "--partition", "0",
                                        "--start-offset", "1"], check=True)

        wait_hw_and_lso(client, topic, (5, 5))
        assert fetch(client, topic, 0, READ_COMMITTED).aborted == ((pid, 1),)
        assert visible_values(client, topic, 0, READ_COMMITTED) == [b"p1", b"p2"]
        marker = fetch(client, topic, 0, READ_UNCOMMITTED).batches[-1]
        assert (marker.base_offset, marker.control, marker.producer_id, marker.producer_epoch) == (4, True, pid, epoch)
        state = {p.producer_id: p for p in describe_producers(client, topic, 0).active_producers}
        assert (state[pid].current_txn_start_offset, state[pid].coordinator_epoch) == (-1, 0)
        # The coordinator never heard of it.
        assert describe_transaction(client, tid).transaction_state == "Ongoing"

        # The producer then commits: the coordinator writes its COMMIT marker, which ends nothing
        # on the partition; the aborted records stay aborted.
        assert end_txn(client, tid, pid, epoch, commit=True) == ErrorCode.none
        wait_txn_state(client, tid, "CompleteCommit")
        wait_hw_and_lso(client, topic, (6, 6))
        assert visible_values(client, topic, 0, READ_COMMITTED) == [b"p1", b"p2"]
        assert visible_values(client, topic, 0, READ_UNCOMMITTED) == [b"p1", b"h1", b"h2", b"p2"]


def test_write_txn_markers_by_hand(target: Target, unique: Callable[[str], str]) -> None:
    """WriteTxnMarkers as Admin.abortTransaction sends it, with a stale producer epoch and a stale
    coordinator epoch, and for a partition that does not exist."""
    topic, tid = unique("markers"), unique("tid")
    make_ready_topic(target.bootstrap_servers, topic)
    with WireClient(target.bootstrap_servers) as client:
        init_transactional(client, tid)
        pid, epoch = init_transactional(client, tid)  # the second instance: epoch 1, so epoch 0 is stale
        assert epoch == 1
        assert add_partitions(client, tid, pid, epoch, topic, [0]) == {0: ErrorCode.none}
        assert produce(client, topic, 0, txn_batch(pid, epoch, 0, [b"c"]), tid) == (ErrorCode.none, 0)
        assert end_txn(client, tid, pid, epoch, commit=True) == ErrorCode.none
        wait_hw_and_lso(client, topic, (2, 2))
        (entry,) = describe_producers(client, topic, 0).active_producers
        coordinator_epoch = entry.coordinator_epoch

        assert add_partitions(client, tid, pid, epoch, topic, [0]) == {0: ErrorCode.none}
        assert produce(client, topic, 0, txn_batch(pid, epoch, 1, [b"open"]), tid) == (ErrorCode.none, 2)
        assert write_txn_markers(client, pid, epoch - 1, False, coordinator_epoch, topic, [0]) == \
            {0: ErrorCode.invalid_producer_epoch}
        assert write_txn_markers(client, pid, epoch, False, coordinator_epoch - 1, topic, [0]) == \
            {0: ErrorCode.transaction_coordinator_fenced}
        assert write_txn_markers(client, pid, epoch, False, coordinator_epoch, unique("no-such-topic"), [0]) == \
            {0: ErrorCode.unknown_topic_or_partition}
        assert hw_and_lso(client, topic) == (3, 2), "nothing was written"
        assert write_txn_markers(client, pid, epoch, False, coordinator_epoch, topic, [0]) == {0: ErrorCode.none}
        wait_hw_and_lso(client, topic, (4, 4))
        assert visible_values(client, topic, 0, READ_COMMITTED) == [b"c"]
