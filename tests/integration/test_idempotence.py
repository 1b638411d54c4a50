"""Idempotent produce at the protocol level: a retried batch whose first ack was lost is
not written twice; a sequence gap is refused; a zombie epoch is refused."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.static.primitive import i32Timedelta

from onceflow.records.builder import build_batch
from tests.support.broker import BrokerProcess
from tests.support.kafka import make_topic, read_all
from tests.support.wire import WireClient, base_offset, batch, end_offset, init_producer_id, partition_error, produce_request


def test_a_replayed_batch_is_acknowledged_once_and_stored_once(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "idempotent")
    with WireClient(bs) as client:
        pid, epoch = init_producer_id(client)
        first = batch(pid, epoch, 0, [b"a", b"b", b"c"])
        r1 = client.request(produce_request("idempotent", first))
        assert (partition_error(r1), base_offset(r1)) == (ErrorCode.none, 0)
        # The ack was "lost": the producer sends the very same request again.
        r2 = client.request(produce_request("idempotent", first))
        assert (partition_error(r2), base_offset(r2)) == (ErrorCode.none, 0), "the original offset, not a second copy"
        assert end_offset(client, "idempotent") == 3

        second = batch(pid, epoch, 3, [b"d"])
        assert base_offset(client.request(produce_request("idempotent", second))) == 3
        # A duplicate of an older retained batch is recognised too.
        assert base_offset(client.request(produce_request("idempotent", first))) == 0

        gap = batch(pid, epoch, 10, [b"x"])
        assert partition_error(client.request(produce_request("idempotent", gap))) == ErrorCode.out_of_order_sequence_number
        assert end_offset(client, "idempotent") == 4

        # A newer producer id is unrelated; an older epoch of ours is refused.
        pid2, epoch2 = init_producer_id(client)
        assert pid2 != pid
        stale = batch(pid, epoch - 1, 4, [b"stale"]) if epoch > 0 else None
        if stale is not None:
            assert partition_error(client.request(produce_request("idempotent", stale))) == ErrorCode.invalid_producer_epoch
    assert read_all(bs, "idempotent", [0], "read_uncommitted") == [b"a", b"b", b"c", b"d"]


def test_producer_ids_are_never_reused_across_restarts(broker_process: BrokerProcess) -> None:
    with WireClient(broker_process.bootstrap_servers) as client:
        before = {init_producer_id(client)[0] for _ in range(5)}
    broker_process.kill()
    broker_process.start()
    with WireClient(broker_process.bootstrap_servers) as client:
        after = {init_producer_id(client)[0] for _ in range(5)}
    assert not before & after


def test_producer_state_survives_a_crash(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "idem-crash")
    with WireClient(bs) as client:
        pid, epoch = init_producer_id(client)
        first = batch(pid, epoch, 0, [b"one"])
        assert base_offset(client.request(produce_request("idem-crash", first))) == 0
    broker_process.kill()
    broker_process.start()
    with WireClient(bs) as client:
        # The retry after the crash is still recognised: producer state was rebuilt from the log.
        assert base_offset(client.request(produce_request("idem-crash", first))) == 0
        assert partition_error(client.request(produce_request("idem-crash", batch(pid, epoch, 5, [b"gap"])))) == \
            ErrorCode.out_of_order_sequence_number
        assert base_offset(client.request(produce_request("idem-crash", batch(pid, epoch, 1, [b"two"])))) == 1


def test_a_transactional_write_to_a_partition_outside_the_transaction_is_refused(broker_process: BrokerProcess) -> None:
    """KIP-890 part 1: the broker checks with the transaction coordinator that the partition was
    added to the producer's ongoing transaction before it accepts a transactional batch."""
    from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic
    from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
    from kio.static.primitive import i8

    bs = broker_process.bootstrap_servers
    make_topic(bs, "verified", 2)
    with WireClient(bs) as client:
        assert client.request(FindCoordinatorRequest(key="verifier", key_type=i8(1))).error_code == ErrorCode.none
        init = client.request(InitProducerIdRequest(transactional_id="verifier",
                                                    transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
                                                    producer_id=-1, producer_epoch=-1))
        assert init.error_code == ErrorCode.none
        pid, epoch = init.producer_id, init.producer_epoch

        def txn_produce(partition: int) -> ErrorCode:
            batch = build_batch([(None, b"t")], 1_700_000_000_000, producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                transactional=True)
            return partition_error(client.request(produce_request("verified", batch, partition=partition,
                                                                  transactional_id="verifier")))

        assert txn_produce(0) == ErrorCode.invalid_txn_state, "partition 0 was never added to the transaction"
        added = client.request(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="verifier", v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(AddPartitionsToTxnTopic(name="verified", partitions=(1,)),)))
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.none
        assert txn_produce(1) == ErrorCode.none
        assert txn_produce(0) == ErrorCode.invalid_txn_state, "still not part of this transaction"
        # Produce v11 clients know KIP-890's TRANSACTION_ABORTABLE, and get it (Kafka 4).
        from kio.schema.produce.v11.request import PartitionProduceData, ProduceRequest, TopicProduceData
        from kio.static.primitive import Records, i16, i32

        batch = build_batch([(None, b"t")], 1_700_000_000_000, producer_id=pid, producer_epoch=epoch, base_sequence=1,
                            transactional=True)
        v11 = client.request(ProduceRequest(
            transactional_id="verifier", acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            topic_data=(TopicProduceData(name="verified", partition_data=(
                PartitionProduceData(index=i32(0), records=Records(batch)),)),)))
        assert v11.responses[0].partition_responses[0].error_code == ErrorCode.transaction_abortable
        assert end_offset(client, "verified") == 0
