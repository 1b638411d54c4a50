"""Exact transactional requests for the reference scenarios (issue 10): the steps a transactional
producer takes (InitProducerId, AddPartitionsToTxn, Produce, EndTxn), the KIP-664 inspection
APIs, and the views of a partition a test asserts on (ListOffsets by isolation level, and the
batches, high watermark, last stable offset and aborted transactions a Fetch answers).

Built on ``tests.support.wire.WireClient``; every request goes to the one broker the client is
connected to (the reference brokers are single nodes, so it is every coordinator and leader).
Requests a coordinator may answer with a retriable error while it is busy (loading, or writing the
markers of the previous transaction) are retried, bounded, through ``wait_for``.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from dataclasses import dataclass
from typing import Any

from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from onceflow.records.batch import scan
from onceflow.records.builder import build_batch
from onceflow.records.records import iter_records
from tests.support.kafka import make_topic
from tests.support.waiting import wait_for
from tests.support.wire import WireClient, init_producer_id, partition_error, produce_request

#: Errors a transaction coordinator answers while it cannot serve the request yet.
BUSY = {ErrorCode.coordinator_not_available, ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
        ErrorCode.concurrent_transactions}

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
LATEST = -1
EARLIEST = -2


def find_transaction_coordinator(client: WireClient, transactional_id: str) -> None:
    """Wait until the broker coordinates ``transactional_id`` (Kafka creates __transaction_state first)."""
    def ready() -> bool:
        response = client.request(FindCoordinatorRequest(key=transactional_id, key_type=i8(1)))
        return response.error_code == ErrorCode.none  # type: ignore[no-any-return]

    wait_for(ready, interval=0.1, what=f"a transaction coordinator for {transactional_id}")


def init_producer_id_raw(client: WireClient, transactional_id: str | None, timeout_ms: int = 60_000,
                         producer_id: int = -1, producer_epoch: int = -1) -> Any:
    return client.request(InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
        producer_id=i64(producer_id), producer_epoch=i16(producer_epoch)))


def init_idempotent(client: WireClient) -> tuple[int, int]:
    """(producer id, epoch) for an idempotent producer, retrying while the coordinator is busy
    (Kafka serves these through its transaction coordinator, which loads after startup)."""
    answers: list[Any] = []

    def attempt() -> bool:
        answers.append(init_producer_id_raw(client, None))
        return answers[-1].error_code not in BUSY  # type: ignore[no-any-return]

    wait_for(attempt, interval=0.1, what=lambda: f"InitProducerId: {answers[-1:]}")
    assert answers[-1].error_code == ErrorCode.none, answers[-1]
    return answers[-1].producer_id, answers[-1].producer_epoch


def init_transactional(client: WireClient, transactional_id: str, timeout_ms: int = 60_000) -> tuple[int, int]:
    """(producer id, epoch) of ``transactional_id``, retrying while the coordinator is busy."""
    find_transaction_coordinator(client, transactional_id)
    answers: list[Any] = []

    def attempt() -> bool:
        response = init_producer_id_raw(client, transactional_id, timeout_ms)
        answers.append(response)
        return response.error_code not in BUSY  # type: ignore[no-any-return]

    wait_for(attempt, interval=0.05, what=lambda: f"InitProducerId({transactional_id}): {answers[-1:]}")
    response = answers[-1]
    assert response.error_code == ErrorCode.none, response
    return response.producer_id, response.producer_epoch


def add_partitions(client: WireClient, transactional_id: str, producer_id: int, epoch: int, topic: str,
                   partitions: list[int]) -> dict[int, ErrorCode]:
    """AddPartitionsToTxn v3: each partition's error, retried while the coordinator is busy."""
    answers: list[dict[int, ErrorCode]] = []

    def attempt() -> bool:
        response = client.request(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=i64(producer_id),
            v3_and_below_producer_epoch=i16(epoch),
            v3_and_below_topics=(AddPartitionsToTxnTopic(name=topic, partitions=tuple(i32(p) for p in partitions)),)))
        answers.append({r.partition_index: r.partition_error_code
                        for t in response.results_by_topic_v3_and_below for r in t.results_by_partition})
        return not set(answers[-1].values()) & BUSY

    wait_for(attempt, interval=0.05, what=lambda: f"AddPartitionsToTxn: {answers[-1:]}")
    return answers[-1]


def txn_batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    """A transactional batch of ``values``, timestamped now (so it shares a segment with the
    markers the broker writes now: both brokers roll by record time)."""
    return build_batch([(None, v) for v in values], int(time.time() * 1000), producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=sequence, transactional=True)


def idempotent_batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    """A non-transactional batch with a producer id, timestamped now."""
    return build_batch([(None, v) for v in values], int(time.time() * 1000), producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=sequence)


def make_ready_topic(bootstrap: str, name: str, partitions: int = 1, **config: str) -> None:
    """Create a topic and wait until its leader serves every partition (Kafka answers
    NOT_LEADER_OR_FOLLOWER for a moment after CreateTopics; Onceflow serves it at once)."""
    make_topic(bootstrap, name, partitions, **config)
    with WireClient(bootstrap) as client:
        for p in range(partitions):
            def served(p: int = p) -> bool:
                response = client.request(ListOffsetsRequest(replica_id=i32(-1), isolation_level=i8(0), topics=(
                    ListOffsetsTopic(name=name, partitions=(ListOffsetsPartition(partition_index=i32(p), current_leader_epoch=i32(-1),
                                                                                 timestamp=i64(LATEST)),)),)))
                return response.topics[0].partitions[0].error_code == ErrorCode.none  # type: ignore[no-any-return]

            wait_for(served, interval=0.05, what=f"a leader for {name}-{p}")


def produce(client: WireClient, topic: str, partition: int, records: bytes,
            transactional_id: str | None = None) -> tuple[ErrorCode, int]:
    """(error, base offset) of a Produce v9 of ``records`` with acks=all."""
    response = client.request(produce_request(topic, records, partition=partition, transactional_id=transactional_id))
    p = response.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def end_txn(client: WireClient, transactional_id: str, producer_id: int, epoch: int, commit: bool,
            retry_busy: bool = True) -> ErrorCode:
    """EndTxn v3's error (retried while the coordinator is busy with this id, unless told not to)."""
    answers: list[ErrorCode] = []

    def attempt() -> bool:
        answers.append(client.request(EndTxnRequest(transactional_id=transactional_id, producer_id=i64(producer_id),
                                                     producer_epoch=i16(epoch), committed=commit)).error_code)
        return not retry_busy or answers[-1] not in BUSY

    wait_for(attempt, interval=0.05, what=lambda: f"EndTxn: {answers[-1:]}")
    return answers[-1]


def list_offset(client: WireClient, topic: str, partition: int, isolation: int, timestamp: int = LATEST) -> int:
    """ListOffsets v7: latest is the high watermark (read_uncommitted) or the LSO (read_committed)."""
    response = client.request(ListOffsetsRequest(replica_id=i32(-1), isolation_level=i8(isolation), topics=(
        ListOffsetsTopic(name=topic, partitions=(ListOffsetsPartition(partition_index=i32(partition), current_leader_epoch=i32(-1),
                                                                      timestamp=i64(timestamp)),)),)))
    p = response.topics[0].partitions[0]
    assert p.error_code == ErrorCode.none, p
    return p.offset  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Batch:
    """One batch of a Fetch answer: where it starts, who wrote it, and what it holds."""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    transactional: bool
    control: bool
    values: tuple[bytes | None, ...]  # data records' values; () for a control batch


@dataclass(frozen=True)
class FetchView:
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...]  # (producer id, first offset) of aborted transactions in range
    batches: tuple[Batch, ...]


def fetch(client: WireClient, topic: str, partition: int, isolation: int, offset: int = 0) -> FetchView:
    """Fetch v11 from ``offset`` without waiting: the batches the isolation level may read."""
    response = client.request(FetchRequest(
        replica_id=i32(-1), max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(0), max_bytes=i32(10_000_000),
        isolation_level=i8(isolation), session_id=i32(0), session_epoch=i32(-1),
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(partition=i32(partition), fetch_offset=i64(offset),
                                                                   log_start_offset=i64(-1), partition_max_bytes=i32(10_000_000)),)),),
        forgotten_topics_data=(), rack_id=""))
    p = response.responses[0].partitions[0]
    assert p.error_code == ErrorCode.none, p
    data = bytes(p.records or b"")
    batches = []
    for pos, header in scan(data):
        raw = data[pos:pos + header.size]
        values = () if header.is_control else tuple(r.value for r in iter_records(raw, header))
        batches.append(Batch(header.base_offset, header.last_offset, header.producer_id, header.producer_epoch,
                             header.is_transactional, header.is_control, values))
    aborted = tuple(sorted((a.producer_id, a.first_offset) for a in (p.aborted_transactions or ())))
    return FetchView(p.high_watermark, p.last_stable_offset, p.log_start_offset, aborted, tuple(batches))


def visible_values(client: WireClient, topic: str, partition: int, isolation: int) -> list[bytes | None]:
    """What a consumer of ``isolation`` delivers: data records below the HW/LSO, minus aborted
    transactions for read_committed (applied from the aborted list, as a client does)."""
    view = fetch(client, topic, partition, isolation)
    pending = sorted(view.aborted, key=lambda a: a[1])
    active: set[int] = set()  # producers inside an aborted transaction at this point of the log
    out: list[bytes | None] = []
    for b in view.batches:
        while pending and pending[0][1] <= b.last_offset:
            active.add(pending.pop(0)[0])
        if b.control:
            active.discard(b.producer_id)
        elif not (b.transactional and b.producer_id in active):
            out.extend(b.values)
    return out


# -- KIP-664 -------------------------------------------------------------------


def _describe_transactions_schema() -> Any:
    """kio's DescribeTransactionsResponse v0, except that the transaction start time is read as a
    plain int64 of milliseconds: brokers answer -1 for a transaction that has not started (Empty),
    which kio's datetime type refuses."""
    import importlib.util
    import sys

    name = "tests.support._describe_transactions_v0_response"
    if name in sys.modules:
        return sys.modules[name].DescribeTransactionsResponse
    spec = importlib.util.find_spec("kio.schema.describe_transactions.v0.response")
    assert spec is not None and spec.origin is not None
    with open(spec.origin) as f:
        source = f.read()
    old = 'transaction_start_time: TZAware = field(metadata={"kafka_type": "datetime_i64"})'
    assert old in source
    source = source.replace(old, 'transaction_start_time: i64 = field(metadata={"kafka_type": "int64"})')
    source = source.replace("from kio.static.primitive import i16\n", "from kio.static.primitive import i16\nfrom kio.static.primitive import i64\n")
    module = type(sys)(name)
    sys.modules[name] = module
    exec(compile(source, spec.origin, "exec", dont_inherit=True), module.__dict__)
    return module.DescribeTransactionsResponse


def describe_transactions(client: WireClient, *transactional_ids: str) -> list[Any]:
    """DescribeTransactions v0; ``transaction_start_time`` in milliseconds (-1: not started)."""
    from kio.schema.response_header.v1.header import ResponseHeader
    from kio.serial import entity_reader

    correlation_id = client.send(DescribeTransactionsRequest(transactional_ids=transactional_ids))
    frame = client.read_frame()
    header, offset = entity_reader(ResponseHeader)(frame, 0)
    assert header.correlation_id == correlation_id
    body, _ = entity_reader(_describe_transactions_schema())(frame, offset)
    return list(body.transaction_states)


def describe_transaction(client: WireClient, transactional_id: str) -> Any:
    """One id's TransactionState, asked again while its coordinator is not ready (Kafka answers
    NOT_COORDINATOR until it has loaded the id's __transaction_state partition)."""
    answers: list[Any] = []

    def attempt() -> bool:
        (state,) = describe_transactions(client, transactional_id)
        answers.append(state)
        return state.error_code not in BUSY

    wait_for(attempt, interval=0.1, what=lambda: f"DescribeTransactions({transactional_id}): {answers[-1:]}")
    return answers[-1]


def list_transactions(client: WireClient, states: tuple[str, ...] = (), producer_ids: tuple[int, ...] = (),
                      duration_ms: int = -1) -> Any:
    return client.request(ListTransactionsRequest(state_filters=states, producer_id_filters=tuple(i64(p) for p in producer_ids),
                                                  duration_filter=i64(duration_ms)))


def describe_producers(client: WireClient, topic: str, partition: int) -> Any:
    """The PartitionResponse of DescribeProducers for one partition."""
    response = client.request(DescribeProducersRequest(topics=(TopicRequest(name=topic, partition_indexes=(i32(partition),)),)))
    return response.topics[0].partitions[0]


def write_txn_markers(client: WireClient, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int, topic: str,
                      partitions: list[int]) -> dict[int, ErrorCode]:
    """WriteTxnMarkers v1 (what Admin.abortTransaction sends to a partition leader): each partition's error."""
    response = client.request(WriteTxnMarkersRequest(markers=(WritableTxnMarker(
        producer_id=i64(producer_id), producer_epoch=i16(epoch), transaction_result=commit,
        topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=tuple(i32(p) for p in partitions)),),
        coordinator_epoch=i32(coordinator_epoch)),)))
    return {p.partition_index: p.error_code for m in response.markers for t in m.topics for p in t.partitions}


def hw_and_lso(client: WireClient, topic: str, partition: int = 0) -> tuple[int, int]:
    """(high watermark, last stable offset) as ListOffsets answers them."""
    return (list_offset(client, topic, partition, READ_UNCOMMITTED), list_offset(client, topic, partition, READ_COMMITTED))


def wait_hw_and_lso(client: WireClient, topic: str, expected: tuple[int, int], partition: int = 0) -> None:
    """Markers are written after EndTxn is answered: wait for them to reach the partition."""
    wait_for(lambda: hw_and_lso(client, topic, partition) == expected, interval=0.05,
             what=lambda: f"(HW, LSO) of {topic}-{partition} to be {expected}, is {hw_and_lso(client, topic, partition)}")


def wait_txn_state(client: WireClient, transactional_id: str, state: str) -> None:
    wait_for(lambda: describe_transaction(client, transactional_id).transaction_state == state, interval=0.05,
             what=lambda: f"{transactional_id} to be {state}: {describe_transaction(client, transactional_id)}")


def make_hanging_transaction(bootstrap: str, topic: str) -> int:
    """What pre-KIP-890 Kafka could end up with: a transactional batch from a producer id the
    transaction coordinator never heard of (an idempotent producer id).  Needs
    transaction.partition.verification.enable=false, else the leader refuses it."""
    with WireClient(bootstrap) as client:
        pid, epoch = init_producer_id(client)
        batch = build_batch([(None, b"ghost-1"), (None, b"ghost-2")], int(time.time() * 1000), producer_id=pid,
                            producer_epoch=epoch, base_sequence=0, transactional=True)
        request = dataclasses.replace(produce_request(topic, batch), transactional_id="ghost")
        response = client.request(request)
        assert partition_error(response).name == "none", response
    return pid
