"""Transactions, the same scenarios against Onceflow and Apache Kafka (issue 10).

Each scenario asserts what a client can observe, exactly: error codes, offsets (control markers
take one), the high watermark and the last stable offset (ListOffsets with isolation level 0 and
1, and Fetch), which records read_uncommitted and read_committed see, the aborted transactions a
read_committed Fetch lists, and what DescribeTransactions answers.

* commit and abort, through the raw wire client (exact layout of the log) and through three client
  libraries (librdkafka, kafka-python, aiokafka);
* fencing: a new instance with the same transactional.id aborts the old one's transaction and
  the old one gets fenced errors (raw wire, and librdkafka's fatal error);
* a transaction that outlives transaction.timeout.ms is aborted by the broker, and the producer's
  next request is fenced (raw wire, and librdkafka);
* two transactions open on one partition: read_committed stops at the first open one (the LSO);
* KIP-890 part 1: a transactional Produce to a partition never added with AddPartitionsToTxn is
  refused (Produce v9 and v11), as is a non-transactional write inside a transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]
from confluent_kafka import KafkaError, KafkaException
from kafka import KafkaProducer  # type: ignore[import-untyped]
from kio.schema.errors import ErrorCode

from tests.support.kafka import produce as produce_plain
from tests.support.kafka import read_all, txn_producer
from tests.support.reference import Target
from tests.support.txn_wire import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    add_partitions,
    describe_transaction,
    end_txn,
    fetch,
    find_transaction_coordinator,
    hw_and_lso,
    idempotent_batch,
    init_idempotent,
    init_producer_id_raw,
    init_transactional,
    list_offset,
    make_ready_topic,
    produce,
    txn_batch,
    visible_values,
    wait_hw_and_lso,
    wait_txn_state,
)
from tests.support.waiting import wait_for
from tests.support.wire import WireClient

TIMEOUT = 30


# -- commit and abort -------------------------------------------------------------


def test_commit_and_abort_on_the_wire_leave_the_same_log(target: Target, unique: Callable[[str], str]) -> None:
    topic, tid = unique("txn-wire"), unique("tid")
    make_ready_topic(target.bootstrap_servers, topic)
    with WireClient(target.bootstrap_servers) as client:
        pid, epoch = init_transactional(client, tid)
        assert describe_transaction(client, tid).transaction_state == "Empty"

        assert add_partitions(client, tid, pid, epoch, topic, [0]) == {0: ErrorCode.none}
        assert produce(client, topic, 0, txn_batch(pid, epoch, 0, [b"c1", b"c2"]), tid) == (ErrorCode.none, 0)
        assert hw_and_lso(client, topic) == (2, 0), "the open transaction holds the LSO at its first offset"
        assert end_txn(client, tid, pid, epoch, commit=True) == ErrorCode.none
        wait_hw_and_lso(client, topic, (3, 3))  # two records and the COMMIT marker

        assert add_partitions(client, tid, pid, epoch, topic, [0]) == {0: ErrorCode.none}
        assert produce(client, topic, 0, txn_batch(pid, epoch, 2, [b"a1", b"a2", b"a3"]), tid) == (ErrorCode.none, 3)
        assert end_txn(client, tid, pid, epoch, commit=False) == ErrorCode.none
        wait_hw_and_lso(client, topic, (7, 7))

        assert add_partitions(client, tid, pid, epoch, topic, [0]) == {0: ErrorCode.none}
        assert produce(client, topic, 0, txn_batch(pid, epoch, 5, [b"c3"]), tid) == (ErrorCode.none, 7)
        assert end_txn(client, tid, pid, epoch, commit=True) == ErrorCode.none
        wait_hw_and_lso(client, topic, (9, 9))
        wait_txn_state(client, tid, "CompleteCommit")

        ru = fetch(client, topic, 0, READ_UNCOMMITTED)
        assert [(b.base_offset, b.last_offset, b.control, b.transactional, b.producer_epoch) for b in ru.batches] == [
            (0, 1, False, True, epoch), (2, 2, True, True, epoch), (3, 5, False, True, epoch), (6, 6, True, True, epoch),
            (7, 7, False, True, epoch), (8, 8, True, True, epoch)]
        rc = fetch(client, topic, 0, READ_COMMITTED)
        assert (rc.high_watermark, rc.last_stable_offset, rc.aborted) == (9, 9, ((pid, 3),))
        assert visible_values(client, topic, 0, READ_UNCOMMITTED) == [b"c1", b"c2", b"a1", b"a2", b"a3", b"c3"]
        assert visible_values(client, topic, 0, READ_COMMITTED) == [b"c1", b"c2", b"c3"]

        described = describe_transaction(client, tid)
        assert (described.error_code, described.producer_id, described.producer_epoch, described.topics) == \
            (ErrorCode.none, pid, epoch, ())
    assert read_all(target.bootstrap_servers, topic, [0], "read_committed") == [b"c1", b"c2", b"c3"]
    assert read_all(target.bootstrap_servers, topic, [0], "read_uncommitted") == [b"c1", b"c2", b"a1", b"a2", b"a3", b"c3"]


def _confluent_txns(bootstrap: str, tid: str, topic: str, txns: list[tuple[list[bytes], bool]]) -> None:
    producer = txn_producer(bootstrap, tid)
    for values, commit in txns:
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, v, partition=0)
        if commit:
            producer.commit_transaction(TIMEOUT)
        else:
            assert producer.flush(TIMEOUT) == 0
            producer.abort_transaction(TIMEOUT)


def _kafka_python_txns(bootstrap: str, tid: str, topic: str, txns: list[tuple[list[bytes], bool]]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, enable_idempotence=True, acks="all")
    try:
        producer.init_transactions()
        for values, commit in txns:
            producer.begin_transaction()
            futures = [producer.send(topic, v, partition=0) for v in values]
            producer.flush(TIMEOUT)
            assert all(f.get(TIMEOUT).offset >= 0 for f in futures)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(TIMEOUT)


def _aiokafka_txns(bootstrap: str, tid: str, topic: str, txns: list[tuple[list[bytes], bool]]) -> None:
    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, enable_idempotence=True)
        await producer.start()
        try:
            for values, commit in txns:
                await producer.begin_transaction()
                for v in values:
                    await producer.send_and_wait(topic, v, partition=0)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), TIMEOUT))


CLIENTS = {"confluent": _confluent_txns, "kafka-python": _kafka_python_txns, "aiokafka": _aiokafka_txns}


@pytest.mark.parametrize("client_name", list(CLIENTS))
def test_clients_commit_and_abort(target: Target, unique: Callable[[str], str], client_name: str) -> None:
    """commit [c1, c2], abort [a1], commit [c3]: offsets 0-1, marker 2, 3, marker 4, 5, marker 6."""
    topic, tid = unique("txn-client"), unique("tid")
    make_ready_topic(target.bootstrap_servers, topic)
    CLIENTS[client_name](target.bootstrap_servers, tid, topic, [([b"c1", b"c2"], True), ([b"a1"], False), ([b"c3"], True)])
    with WireClient(target.bootstrap_servers) as client:
        wait_hw_and_lso(client, topic, (7, 7))
        ru = fetch(client, topic, 0, READ_UNCOMMITTED)
        assert [(b.base_offset, b.last_offset) for b in ru.batches if b.control] == [(2, 2), (4, 4), (6, 6)]
        (pid,) = {b.producer_id for b in ru.batches}
        assert fetch(client, topic, 0, READ_COMMITTED).aborted == ((pid, 3),)
        assert visible_values(client, topic, 0, READ_COMMITTED) == [b"c1", b"c2", b"c3"]
        wait_txn_state(client, tid, "CompleteCommit")
    assert read_all(target.bootstrap_servers, topic, [0], "read_committed") == [b"c1", b"c2", b"c3"]
    assert read_all(target.bootstrap_servers, topic, [0], "read_uncommitted") == [b"c1", b"c2", b"a1", b"c3"]


# -- fencing ------------------------------------------------------------------------


def test_a_new_instance_fences_the_old_one_on_the_wire(target: Target, unique: Callable[[str], str]) -> None:
    topic, tid = unique("txn-fence"), unique("tid")
    make_ready_topic(target.bootstrap_servers, topic)
    with WireClient(target.bootstrap_servers) as client:
        pid, epoch = init_transactional(client, tid)
        assert add_partitions(client, tid, pid, epoch, topic, [0]) == {0: ErrorCode.none}
        assert produce(client, topic, 0, txn_batch(pid, epoch, 0, [b"zombie"]), tid) == (ErrorCode.none, 0)

        # The new instance: the coordinator aborts the open transaction with a bumped epoch first
        # and asks the caller to retry (CONCURRENT_TRANSACTIONS); the retry gets the epoch after that.
        first = init_producer_id_raw(client, tid)
        assert first.error_code == ErrorCode.concurrent_transactions
        new_pid, new_epoch = init_transactional(client, tid)
        assert (new_pid, new_epoch) == (pid, epoch + 2)
        wait_hw_and_lso(client, topic, (2, 2))  # the zombie's record and the ABORT marker
        ru = fetch(client, topic, 0, READ_UNCOMMITTED)
        assert [(b.base_offset, b.control, b.producer_epoch) for b in ru.batches] == [(0, False, epoch), (1, True, epoch + 1)]
        assert fetch(client, topic, 0, READ_COMMITTED).aborted == ((pid, 0),)

        # Whatever the zombie tries now is fenced.
        assert add_partitions(client, tid, pid, epoch, topic, [0]) == {0: ErrorCode.producer_fenced}
        assert end_txn(client, tid, pid, epoch, commit=True) == ErrorCode.producer_fenced
        assert produce(client, topic, 0, txn_batch(pid, epoch, 1, [b"late"]), tid)[0] == ErrorCode.invalid_producer_epoch
        assert describe_transaction(client, tid).transaction_state == "Empty"
        assert describe_transaction(client, tid).producer_epoch == epoch + 2

        # The successor works normally.
        assert add_partitions(client, tid, pid, new_epoch, topic, [0]) == {0: ErrorCode.none}
        assert produce(client, topic, 0, txn_batch(pid, new_epoch, 0, [b"successor"]), tid) == (ErrorCode.none, 2)
        assert end_txn(client, tid, pid, new_epoch, commit=True) == ErrorCode.none
        wait_hw_and_lso(client, topic, (4, 4))
        assert visible_values(client, topic, 0, READ_COMMITTED) == [b"successor"]


def test_librdkafka_reports_the_fenced_producer_as_fatal(target: Target, unique: Callable[[str], str]) -> None:
    topic, tid = unique("txn-fence-rdk"), unique("tid")
    make_ready_topic(target.bootstrap_servers, topic)
    zombie = txn_producer(target.bootstrap_servers, tid)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    assert zombie.flush(TIMEOUT) == 0
    successor = txn_producer(target.bootstrap_servers, tid)
    with pytest.raises(KafkaException) as err:
        zombie.commit_transaction(TIMEOUT)
    error: KafkaError = err.value.args[0]
    assert (error.code(), error.fatal()) == (KafkaError._FENCED, True), error
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=0)
    successor.commit_transaction(TIMEOUT)
    assert read_all(target.bootstrap_servers, topic, [0], "read_committed") == [b"successor"]
    assert read_all(target.bootstrap_servers, topic, [0], "read_uncommitted") == [b"zombie", b"successor"]


# -- transaction timeout ----------------------------------------------------------


def test_the_broker_aborts_a_transaction_past_its_timeout(target: Target, unique: Callable[[str], str]) -> None:
    topic, tid = unique("txn-timeout"), unique("tid")
    make_ready_topic(target.bootstrap_servers, topic)
    with WireClient(target.bootstrap_servers) as client:
        pid, epoch = init_transactional(client, tid, timeout_ms=1000)
        assert describe_transaction(client, tid).transaction_timeout.total_seconds() == 1.0
        assert add_partitions(client, tid, pid, epoch, topic, [0]) == {0: ErrorCode.none}
        assert produce(client, topic, 0, txn_batch(pid, epoch, 0, [b"t1", b"t2"]), tid) == (ErrorCode.none, 0)
        # Nothing more from the producer: the coordinator aborts it (with the epoch bumped, so the
        # producer cannot go on as if nothing happened).
        wait_for(lambda: describe_transaction(client, tid).transaction_state == "CompleteAbort", timeout=20, interval=0.1,
                 what="the timed-out transaction to be aborted")
        assert describe_transaction(client, tid).producer_epoch == epoch + 1
        wait_hw_and_lso(client, topic, (3, 3))
        marker = fetch(client, topic, 0, READ_UNCOMMITTED).batches[-1]
        assert (marker.base_offset, marker.control, marker.producer_epoch) == (2, True, epoch + 1)
        assert fetch(client, topic, 0, READ_COMMITTED).aborted == ((pid, 0),)
        assert visible_values(client, topic, 0, READ_COMMITTED) == []
        assert visible_values(client, topic, 0, READ_UNCOMMITTED) == [b"t1", b"t2"]

        assert produce(client, topic, 0, txn_batch(pid, epoch, 2, [b"t3"]), tid)[0] == ErrorCode.invalid_producer_epoch
        assert end_txn(client, tid, pid, epoch, commit=True) == ErrorCode.producer_fenced
        assert list_offset(client, topic, 0, READ_UNCOMMITTED) == 3


def test_librdkafka_after_its_transaction_timed_out(target: Target, unique: Callable[[str], str]) -> None:
    topic, tid = unique("txn-timeout-rdk"), unique("tid")
    make_ready_topic(target.bootstrap_servers, topic)
    producer = txn_producer(target.bootstrap_servers, tid, **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    producer.produce(topic, b"late", partition=0)
    assert producer.flush(TIMEOUT) == 0
    with WireClient(target.bootstrap_servers) as client:
        wait_for(lambda: describe_transaction(client, tid).transaction_state == "CompleteAbort", timeout=20, interval=0.1,
                 what="the timed-out transaction to be aborted")
        wait_hw_and_lso(client, topic, (2, 2))
    with pytest.raises(KafkaException) as err:
        producer.commit_transaction(TIMEOUT)
    error: KafkaError = err.value.args[0]
    assert (error.code(), error.fatal()) == (KafkaError._FENCED, True), error
    assert read_all(target.bootstrap_servers, topic, [0], "read_committed") == []
    assert read_all(target.bootstrap_servers, topic, [0], "read_uncommitted") == [b"late"]


# -- two open transactions and the last stable offset ------------------------------------


def test_read_committed_stops_at_the_first_open_transaction(target: Target, unique: Callable[[str], str]) -> None:
    topic, tid_a, tid_b = unique("txn-lso"), unique("tid-a"), unique("tid-b")
    make_ready_topic(target.bootstrap_servers, topic)
    with WireClient(target.bootstrap_servers) as client:
        pid_a, epoch_a = init_transactional(client, tid_a)
        pid_b, epoch_b = init_transactional(client, tid_b)
        assert add_partitions(client, tid_a, pid_a, epoch_a, topic, [0]) == {0: ErrorCode.none}
        assert add_partitions(client, tid_b, pid_b, epoch_b, topic, [0]) == {0: ErrorCode.none}
        assert produce(client, topic, 0, txn_batch(pid_a, epoch_a, 0, [b"a1"]), tid_a) == (ErrorCode.none, 0)
        pid_p, epoch_p = init_idempotent(client)
        assert produce(client, topic, 0, idempotent_batch(pid_p, epoch_p, 0, [b"plain"])) == (ErrorCode.none, 1)
        assert produce(client, topic, 0, txn_batch(pid_b, epoch_b, 0, [b"b1"]), tid_b) == (ErrorCode.none, 2)
        assert hw_and_lso(client, topic) == (3, 0)
        assert end_txn(client, tid_b, pid_b, epoch_b, commit=True) == ErrorCode.none
        wait_hw_and_lso(client, topic, (4, 0))  # b's commit sits behind a's open transaction

        rc = fetch(client, topic, 0, READ_COMMITTED)
        assert (rc.high_watermark, rc.last_stable_offset, rc.batches) == (4, 0, ())
        assert read_all(target.bootstrap_servers, topic, [0], "read_committed") == []
        assert read_all(target.bootstrap_servers, topic, [0], "read_uncommitted") == [b"a1", b"plain", b"b1"]

        # A second transaction of b's, after a's: the LSO still waits for a.
        assert add_partitions(client, tid_b, pid_b, epoch_b, topic, [0]) == {0: ErrorCode.none}
        assert produce(client, topic, 0, txn_batch(pid_b, epoch_b, 1, [b"b2"]), tid_b) == (ErrorCode.none, 4)
        assert hw_and_lso(client, topic) == (5, 0)

        assert end_txn(client, tid_a, pid_a, epoch_a, commit=False) == ErrorCode.none
        wait_hw_and_lso(client, topic, (6, 4))  # a's ABORT at 5; b's second transaction is open from 4
        assert fetch(client, topic, 0, READ_COMMITTED).aborted == ((pid_a, 0),)
        assert visible_values(client, topic, 0, READ_COMMITTED) == [b"plain", b"b1"]
        assert read_all(target.bootstrap_servers, topic, [0], "read_committed") == [b"plain", b"b1"]

        assert end_txn(client, tid_b, pid_b, epoch_b, commit=True) == ErrorCode.none
        wait_hw_and_lso(client, topic, (7, 7))
        assert visible_values(client, topic, 0, READ_COMMITTED) == [b"plain", b"b1", b"b2"]
    assert read_all(target.bootstrap_servers, topic, [0], "read_committed") == [b"plain", b"b1", b"b2"]


def test_librdkafka_open_transaction_holds_back_a_plain_write(target: Target, unique: Callable[[str], str]) -> None:
    topic = unique("txn-holdback")
    make_ready_topic(target.bootstrap_servers, topic)
    producer = txn_producer(target.bootstrap_servers, unique("tid"))
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(TIMEOUT) == 0
    produce_plain(target.bootstrap_servers, topic, [b"plain"], partition=0)
    with WireClient(target.bootstrap_servers) as client:
        assert hw_and_lso(client, topic) == (2, 0)
        assert read_all(target.bootstrap_servers, topic, [0], "read_committed") == []
        producer.commit_transaction(TIMEOUT)
        wait_hw_and_lso(client, topic, (3, 3))
    assert read_all(target.bootstrap_servers, topic, [0], "read_committed") == [b"open", b"plain"]


# -- KIP-890 part 1 ------------------------------------------------------------------


def _produce_v11(client: WireClient, tid: str, topic: str, partition: int, records: bytes) -> ErrorCode:
    import datetime

    from kio.schema.produce.v11.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.static.primitive import Records, i16, i32, i32Timedelta

    response = client.request(ProduceRequest(
        transactional_id=tid, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=TIMEOUT)),
        topic_data=(TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=i32(partition), records=Records(records)),)),)))
    return response.responses[0].partition_responses[0].error_code  # type: ignore[no-any-return]


def test_a_transactional_write_to_a_partition_not_in_the_transaction_is_refused(target: Target, unique: Callable[[str], str]) -> None:
    topic, tid = unique("kip890"), unique("tid")
    make_ready_topic(target.bootstrap_servers, topic, 2)
    with WireClient(target.bootstrap_servers) as client:
        pid, epoch = init_transactional(client, tid)
        # No transaction at all yet.
        assert produce(client, topic, 0, txn_batch(pid, epoch, 0, [b"x"]), tid) == (ErrorCode.invalid_txn_state, -1)
        assert _produce_v11(client, tid, topic, 0, txn_batch(pid, epoch, 0, [b"x"])) == ErrorCode.transaction_abortable

        assert add_partitions(client, tid, pid, epoch, topic, [1]) == {1: ErrorCode.none}
        assert produce(client, topic, 1, txn_batch(pid, epoch, 0, [b"in"]), tid) == (ErrorCode.none, 0)
        # An ongoing transaction, but partition 0 is not in it.
        assert produce(client, topic, 0, txn_batch(pid, epoch, 0, [b"x"]), tid) == (ErrorCode.invalid_txn_state, -1)
        assert _produce_v11(client, tid, topic, 0, txn_batch(pid, epoch, 0, [b"x"])) == ErrorCode.transaction_abortable
        # A transactional batch without the request's transactional id.
        assert produce(client, topic, 1, txn_batch(pid, epoch, 1, [b"y"])) == (ErrorCode.transactional_id_authorization_failed, -1)
        # A non-transactional write by the producer while its transaction is open on the partition.
        assert produce(client, topic, 1, idempotent_batch(pid, epoch, 1, [b"y"])) == (ErrorCode.invalid_txn_state, -1)
        assert hw_and_lso(client, topic, 0) == (0, 0)
        assert hw_and_lso(client, topic, 1) == (1, 0)

        assert end_txn(client, tid, pid, epoch, commit=True) == ErrorCode.none
        wait_hw_and_lso(client, topic, (2, 2), partition=1)
        # The marker is durable before the Complete record is: until then a transactional write is
        # answered as retriable (CONCURRENT_TRANSACTIONS in verification), on both brokers.
        wait_txn_state(client, tid, "CompleteCommit")
        # After the commit, partition 1 is not in a transaction any more either.
        assert produce(client, topic, 1, txn_batch(pid, epoch, 1, [b"after"]), tid) == (ErrorCode.invalid_txn_state, -1)
        assert visible_values(client, topic, 1, READ_COMMITTED) == [b"in"]
        assert hw_and_lso(client, topic, 0) == (0, 0)


# -- the coordinator's answers to requests out of turn ------------------------------------


def test_the_coordinator_refuses_requests_out_of_turn(target: Target, unique: Callable[[str], str]) -> None:
    topic, tid = unique("txn-edges"), unique("tid")
    make_ready_topic(target.bootstrap_servers, topic, 2)
    with WireClient(target.bootstrap_servers) as client:
        # An idempotent producer's InitProducerId ignores the producer id it is given: always a new one.
        idem_pid, _ = init_idempotent(client)
        again = init_producer_id_raw(client, None, producer_id=idem_pid, producer_epoch=0)
        assert again.error_code == ErrorCode.none and again.producer_id not in (idem_pid, -1)

        find_transaction_coordinator(client, tid)
        too_long = init_producer_id_raw(client, tid, timeout_ms=900_001)  # transaction.max.timeout.ms is 900000
        assert (too_long.error_code, too_long.producer_id, too_long.producer_epoch) == (ErrorCode.invalid_transaction_timeout, -1, -1)
        pid, epoch = init_transactional(client, tid)

        # No transaction open: ending one is an invalid state transition, either way.
        assert end_txn(client, tid, pid, epoch, commit=True) == ErrorCode.invalid_txn_state
        assert end_txn(client, tid, pid, epoch, commit=False) == ErrorCode.invalid_txn_state
        # Another producer id under this transactional id.
        assert end_txn(client, tid, pid + 1000, epoch, commit=True) == ErrorCode.invalid_producer_id_mapping
        assert add_partitions(client, tid, pid + 1000, epoch, topic, [0]) == {0: ErrorCode.invalid_producer_id_mapping}
        # An unknown topic fails the whole request.
        missing = unique("no-such-topic")
        from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic
        from kio.static.primitive import i16, i32, i64

        response = client.request(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=i64(pid), v3_and_below_producer_epoch=i16(epoch),
            v3_and_below_topics=(AddPartitionsToTxnTopic(name=topic, partitions=(i32(0), i32(1))),
                                 AddPartitionsToTxnTopic(name=missing, partitions=(i32(0),)))))
        assert sorted((t.name, r.partition_index, r.partition_error_code) for t in response.results_by_topic_v3_and_below
                      for r in t.results_by_partition) == sorted([
            (topic, 0, ErrorCode.operation_not_attempted), (topic, 1, ErrorCode.operation_not_attempted),
            (missing, 0, ErrorCode.unknown_topic_or_partition)])
        assert describe_transaction(client, tid).transaction_state == "Empty"

        # A committed transaction: retrying the commit is fine, aborting it is not.
        assert add_partitions(client, tid, pid, epoch, topic, [0]) == {0: ErrorCode.none}
        assert end_txn(client, tid, pid, epoch, commit=True) == ErrorCode.none
        wait_txn_state(client, tid, "CompleteCommit")
        assert end_txn(client, tid, pid, epoch, commit=True) == ErrorCode.none
        assert end_txn(client, tid, pid, epoch, commit=False) == ErrorCode.invalid_txn_state
        wait_hw_and_lso(client, topic, (1, 1))  # the one COMMIT marker

        # KIP-360: a producer whose transaction the broker aborted on timeout asks for its id back
        # with its old epoch.  Both brokers end timed-out transactions with their transaction
        # version, 2 by default, whose abort bumps the epoch and remembers the old one, so the old
        # epoch may recover (a retry, no second bump).  (Before transactions v2 Onceflow answered
        # as Kafka formatted with transaction.version=1 does: PRODUCER_FENCED.)
        short_tid = unique("tid-short")
        spid, sepoch = init_transactional(client, short_tid, timeout_ms=1000)
        assert add_partitions(client, short_tid, spid, sepoch, topic, [1]) == {1: ErrorCode.none}
        wait_for(lambda: describe_transaction(client, short_tid).transaction_state == "CompleteAbort", timeout=20,
                 interval=0.1, what="the timed-out transaction to be aborted")

        def reinit(epoch: int | None) -> tuple[ErrorCode, int, int]:
            r = init_producer_id_raw(client, short_tid, timeout_ms=1000, producer_id=-1 if epoch is None else spid,
                                     producer_epoch=-1 if epoch is None else epoch)
            return r.error_code, r.producer_id, r.producer_epoch

        assert reinit(sepoch) == (ErrorCode.none, spid, sepoch + 1)
        assert reinit(sepoch) == (ErrorCode.none, spid, sepoch + 1), "asked again: the same answer"
        assert reinit(None) == (ErrorCode.none, spid, sepoch + 2), "a new instance"
        assert reinit(sepoch) == (ErrorCode.producer_fenced, -1, -1), "the old epoch is forgotten now"
        assert reinit(sepoch + 1) == (ErrorCode.producer_fenced, -1, -1)
