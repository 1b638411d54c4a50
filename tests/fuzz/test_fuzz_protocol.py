"""Fuzzing the frame decoder and the request dispatcher with hypothesis.

Two levels:
* the sans-I/O core alone: any bytes give frames, NEED_DATA or a ProtocolError,
  never another exception;
* the real broker (embedded, on its own loop thread): random bytes and
  truncated / mutated valid requests of many APIs are fed through the same
  ``KafkaProtocol`` the server uses, on an in-memory transport.  No handler may
  raise (a raise would be logged at ERROR and close the connection), and
  afterwards the broker still serves real clients over a real socket with the
  data it held before.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.fetch.v12 import request as fetch12
from kio.schema.fetch.v16 import request as fetch16
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9 import request as join
from kio.schema.leave_group.v5 import request as leave
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.metadata.v1.request import MetadataRequest as Metadata1
from kio.schema.metadata.v12 import request as metadata12
from kio.schema.offset_commit.v9 import request as commit
from kio.schema.offset_fetch.v8 import request as offset_fetch
from kio.schema.produce.v9 import request as produce
from kio.schema.sync_group.v5 import request as sync
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from onceflow import EmbeddedBroker
from onceflow.protocol.errors import ProtocolError
from onceflow.protocol.framing import NEED_DATA, FrameReader, parse_request
from onceflow.records.builder import build_batch
from tests.support.broker import FAST_GROUPS
from tests.support.kafka import consume_all, make_topic
from tests.support.kafka import produce as produce_records
from tests.support.waiting import wait_for
from tests.support.wire import encode_request

TOPIC = "fuzzed"
#: More examples for a deeper run: ONCEFLOW_FUZZ_EXAMPLES=5000 make fuzz
EXAMPLES = int(os.environ.get("ONCEFLOW_FUZZ_EXAMPLES", "250"))
SHORT = i32Timedelta.parse(datetime.timedelta(milliseconds=10))


def corpus(topic_id: uuid.UUID) -> list[bytes]:
    batch = Records(build_batch([(b"k", b"v")], 1_700_000_000_000))
    bodies: list[Any] = [
        ApiVersionsRequest(client_software_name="fuzz", client_software_version="1"),
        Metadata1(topics=None),
        metadata12.MetadataRequest(topics=(metadata12.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=TOPIC),),
                                   allow_auto_topic_creation=False, include_topic_authorized_operations=True),
        produce.ProduceRequest(acks=i16(1), timeout=SHORT, topic_data=(
            produce.TopicProduceData(name=TOPIC, partition_data=(produce.PartitionProduceData(index=i32(0), records=batch),)),)),
        fetch12.FetchRequest(replica_id=i32(-1), max_wait=SHORT, min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=i16(0),
                             session_id=i32(0), session_epoch=i32(-1), topics=(fetch12.FetchTopic(topic=TOPIC, partitions=(
                                 fetch12.FetchPartition(partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0),
                                                        last_fetched_epoch=i32(-1), log_start_offset=i64(-1),
                                                        partition_max_bytes=i32(1 << 20)),)),),
                             forgotten_topics_data=(), rack_id=""),
        fetch16.FetchRequest(max_wait=SHORT, min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=i16(1), session_id=i32(0),
                             session_epoch=i32(-1), topics=(fetch16.FetchTopic(topic_id=topic_id, partitions=(
                                 fetch16.FetchPartition(fetch_offset=i64(0), partition=i32(0), partition_max_bytes=i32(100)),)),),
                             forgotten_topics_data=(), rack_id=""),
        list_offsets.ListOffsetsRequest(replica_id=i32(-1), isolation_level=i16(1), topics=(list_offsets.ListOffsetsTopic(
            name=TOPIC, partitions=(list_offsets.ListOffsetsPartition(partition_index=i32(0), current_leader_epoch=i32(-1),
                                                                      timestamp=i64(1_700_000_000_000)),)),)),
        FindCoordinatorRequest(key_type=i16(0), coordinator_keys=("g1", "")),
        join.JoinGroupRequest(group_id="g1", session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
                              rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)), member_id="", group_instance_id=None,
                              protocol_type="consumer", protocols=(join.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01"),),
                              reason=None),
        sync.SyncGroupRequest(group_id="g1", generation_id=i32(1), member_id="m", group_instance_id=None, protocol_type="consumer",
                              protocol_name="range", assignments=(sync.SyncGroupRequestAssignment(member_id="m", assignment=b"a"),)),
        HeartbeatRequest(group_id="g1", generation_id=i32(1), member_id="m", group_instance_id=None),
        leave.LeaveGroupRequest(group_id="g1", members=(leave.MemberIdentity(member_id="m", group_instance_id=None, reason=None),)),
        commit.OffsetCommitRequest(group_id="g2", generation_id_or_member_epoch=i32(-1), member_id="", group_instance_id=None,
                                   topics=(commit.OffsetCommitRequestTopic(name=TOPIC, partitions=(commit.OffsetCommitRequestPartition(
                                       partition_index=i32(0), committed_offset=i64(1), committed_leader_epoch=i32(-1),
                                       committed_metadata="m"),)),)),
        offset_fetch.OffsetFetchRequest(groups=(offset_fetch.OffsetFetchRequestGroup(group_id="g2", topics=None),), require_stable=True),
        DescribeGroupsRequest(groups=("g1", "g2"), include_authorized_operations=False),
        ListGroupsRequest(states_filter=()),
        describe_configs.DescribeConfigsRequest(resources=(describe_configs.DescribeConfigsResource(
            resource_type=i8(2), resource_name=TOPIC, configuration_keys=None),), include_synonyms=True, include_documentation=True),
    ]
    return [encode_request(body, i + 1) for i, body in enumerate(bodies)]


# -- the sans-I/O core --------------------------------------------------------


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=64))
def test_frame_reader_and_parser_accept_any_bytes(data: bytes, chunk: int) -> None:
    reader = FrameReader(1024)
    try:
        for i in range(0, len(data), chunk):
            reader.receive_data(data[i : i + chunk])
            while (frame := reader.next_frame()) is not NEED_DATA:
                parse_request(frame)  # type: ignore[arg-type]
    except ProtocolError:
        pass


# -- the dispatcher on the real broker ----------------------------------------


class MemoryTransport(asyncio.Transport):
    """An in-memory transport (after uvicorn's MockTransport)."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 4242) if name == "peername" else default


class ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))  # message and traceback


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with EmbeddedBroker(tmp_path_factory.mktemp("fuzz"), config=FAST_GROUPS) as broker:
        make_topic(broker.bootstrap_servers, TOPIC, 1)
        produce_records(broker.bootstrap_servers, TOPIC, [b"before-%d" % i for i in range(10)], partition=0)
        errors = ErrorLog()
        logging.getLogger("onceflow").addHandler(errors)
        try:
            yield broker, errors, corpus(broker.broker.registry.topics[TOPIC].topic_id)
        finally:
            logging.getLogger("onceflow").removeHandler(errors)


#: How long a connection's requests may take before ``feed`` drops the connection.
FEED_S = 0.5


def feed(broker: EmbeddedBroker, payload: bytes) -> None:
    """Feed bytes to a fresh connection on the broker's loop, let it answer what it will (for
    at most ``FEED_S``), then drop it."""
    from onceflow.broker.server import KafkaProtocol

    inner = broker.broker

    async def answer(proto: KafkaProtocol) -> None:
        """On the loop: until no request of the connection is in progress any more.  Each
        wait ends when one of them finishes, not after a fixed sleep."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FEED_S
        while proto._slots and (pending := [s.future for s in proto._slots if s.future is not None and not s.future.done()]):
            if loop.time() >= deadline:
                return
            await asyncio.wait(pending, timeout=deadline - loop.time(), return_when=asyncio.FIRST_COMPLETED)

    def connect() -> tuple[KafkaProtocol, Any]:
        proto = KafkaProtocol(inner.dispatch, inner._unknown_api_versions, inner.state, 1 << 20, 50)
        proto.connection_made(MemoryTransport())
        proto.data_received(payload)
        return proto, asyncio.get_running_loop()

    proto, loop = broker.call(connect)
    asyncio.run_coroutine_threadsafe(answer(proto), loop).result(timeout=30)
    broker.call(proto.connection_lost, None)


def mutate(data: bytes, draw: Any) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        if not out:
            break
        pos = draw(st.integers(0, len(out) - 1))
        if kind == "flip":
            out[pos] ^= draw(st.integers(1, 255))
        elif kind == "truncate":
            del out[pos:]
        elif kind == "insert":
            out[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        else:
            del out[pos : pos + draw(st.integers(1, 8))]
    return bytes(out)


@st.composite
def hostile_stream(draw: Any, valid: list[bytes]) -> bytes:
    pieces = []
    for _ in range(draw(st.integers(1, 3))):
        choice = draw(st.sampled_from(["random", "mutated", "mutated-reframed", "valid"]))
        if choice == "random":
            body = draw(st.binary(max_size=200))
            pieces.append(struct.pack(">i", len(body)) + body if draw(st.booleans()) else body)
        else:
            frame = draw(st.sampled_from(valid))
            if choice == "valid":
                pieces.append(frame)
            elif choice == "mutated":
                pieces.append(mutate(frame, draw))
            else:
                body = mutate(frame[4:], draw)
                pieces.append(struct.pack(">i", len(body)) + body)
    return b"".join(pieces)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_dispatcher_survives_hostile_requests(fuzz_broker: Any, data: Any) -> None:
    broker, errors, valid = fuzz_broker
    payload = data.draw(hostile_stream(valid))
    feed(broker, payload)
    assert not errors.records, "\n".join(errors.records)


def test_broker_still_serves_after_fuzzing(fuzz_broker: Any) -> None:
    broker, errors, valid = fuzz_broker
    for frame in valid:  # every valid request, once more, answers without error
        feed(broker, frame)
    assert not errors.records, "\n".join(errors.records)
    bs = broker.bootstrap_servers
    got = wait_for(lambda: consume_all(bs, TOPIC, [0], 10), what="the topic's first records")
    assert [v for _, _, v in got[:10]] == [b"before-%d" % i for i in range(10)]
