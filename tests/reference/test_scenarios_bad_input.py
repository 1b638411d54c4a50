"""Bad input against Onceflow and Apache Kafka: the same malformed requests, sent byte for byte
by the wire client (and an oversized record through confluent-kafka), get the same error codes or
the same closed connection on both, and leave the log as it was.

- Produce of a batch with a bad CRC: CORRUPT_MESSAGE; an unknown magic: CORRUPT_MESSAGE; a magic-1
  batch or two batches in one partition's payload: INVALID_RECORD; a batch larger than the topic's
  max.message.bytes: MESSAGE_TOO_LARGE (librdkafka reports MSG_SIZE_TOO_LARGE).  Nothing of them
  is stored.
- ApiVersions at a version the broker does not know: a v0 answer with UNSUPPORTED_VERSION and
  the versions of ApiVersions itself (KIP-511); the connection stays open for the retry.
- Any other API at a version the broker does not serve (above its newest, below its oldest), an
  unknown API key, or an ApiVersions header cut short: the broker closes the connection.
- A tagged field the broker does not know (KIP-482), in the request header or at the top level of
  the body, in every flexible request Onceflow serves: skipped, the request answered as without
  it.  Kafka's reader keeps a uvarint in a Java int: a count of 2^31 fields is none.  A tag of
  another version of the struct (Fetch v12's ReplicaState, tag 1), a field running past the end
  of the frame and a six-byte varint close the connection.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Callable

from confluent_kafka import KafkaError, Producer
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.static.primitive import i32, i32Timedelta, i64

from onceflow.records.builder import build_batch
from tests.fuzz.corpus import every_request_body
from tests.support.reference import Target
from tests.support.tagged import topic_id, unknown_field_problems
from tests.support.txn_wire import make_ready_topic
from tests.support.wire import (
    WireClient,
    api_versions_ok,
    encode_request,
    end_offset,
    partition_error,
    produce_request,
    uvarint,
    with_tagged_fields,
)

TIMEOUT = 30
TS = 1_700_000_000_000


def test_refused_batches_get_kafkas_error_codes_and_store_nothing(target: Target, unique: Callable[[str], str]) -> None:
    topic = unique("guarded")
    # Ready: Kafka answers NOT_LEADER_OR_FOLLOWER for a moment after CreateTopics (seen in CI).
    make_ready_topic(target.bootstrap_servers, topic, 1, **{"max.message.bytes": "1024"})
    good = build_batch([(b"k", b"v")], TS)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    magic_1 = bytearray(good)
    magic_1[16] = 1
    magic_7 = bytearray(good)
    magic_7[16] = 7
    oversized = build_batch([(b"k", b"x" * 2000)], TS)
    oversized_bad_crc = bytearray(oversized)
    oversized_bad_crc[-1] ^= 1
    cases = {
        "bad crc": (bytes(bad_crc), ErrorCode.corrupt_message),
        "unknown magic": (bytes(magic_7), ErrorCode.corrupt_message),
        "magic 1": (bytes(magic_1), ErrorCode.invalid_record),
        "two batches": (good + good, ErrorCode.invalid_record),
        "a batch cut short": (good[:-3], ErrorCode.invalid_record),
        "fewer than 12 bytes": (good[:5], ErrorCode.invalid_record),
        "batch length below 14": (bytes(80), ErrorCode.corrupt_message),
        "over max.message.bytes": (oversized, ErrorCode.message_too_large),
        "over max.message.bytes, bad crc": (bytes(oversized_bad_crc), ErrorCode.message_too_large),
    }
    with WireClient(target.bootstrap_servers) as c:
        got = {what: partition_error(c.request(produce_request(topic, payload))) for what, (payload, _) in cases.items()}
        assert got == {what: expected for what, (_, expected) in cases.items()}
        response = c.request(produce_request(topic, good))
        assert (partition_error(response), response.responses[0].partition_responses[0].base_offset) == (ErrorCode.none, 0)
        assert end_offset(c, topic) == 1, "only the good batch was stored"

    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": target.bootstrap_servers, "linger.ms": 0})
    producer.produce(topic, b"y" * 3000, partition=0, on_delivery=lambda err, msg: reports.append(err))
    producer.flush(TIMEOUT)
    assert [(e.code(), e.retriable()) if e is not None else None for e in reports] == [(KafkaError.MSG_SIZE_TOO_LARGE, False)]
    with WireClient(target.bootstrap_servers) as c:
        assert end_offset(c, topic) == 1


def test_api_versions_at_an_unknown_version_gets_a_v0_answer_kip_511(target: Target) -> None:
    with WireClient(target.bootstrap_servers) as c:
        frame = bytearray(encode_request(ApiVersionsRequest(client_software_name="future", client_software_version="9"), 5))
        struct.pack_into(">h", frame, 6, 99)  # the header's api_version
        c.send_bytes(bytes(frame))
        correlation, response = c.receive(ApiVersionsV0())
        assert correlation == 5 and response.error_code == ErrorCode.unsupported_version
        assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(18, 0, 4)], \
            "the versions of ApiVersions alone"
        # The connection stays open: the client retries with a version both know.
        retry = c.request(ApiVersionsRequest(client_software_name="future", client_software_version="9"))
        assert retry.error_code == ErrorCode.none
        assert {k.api_key: (k.min_version, k.max_version) for k in retry.api_keys}[18] == (0, 4)


def test_unsupported_versions_and_unknown_api_keys_close_the_connection(target: Target) -> None:
    def header(api_key: int, version: int) -> bytes:
        return struct.pack(">hhih", api_key, version, 1, -1)  # correlation id 1, null client id

    frames = {
        "Metadata v99": header(3, 99) + b"\x00" * 8,
        "Produce v2 (below Kafka 4's floor)": header(0, 2) + b"\x00" * 16,
        "unknown api key 4242": header(4242, 0),
        "unknown api key -1": header(-1, 0),
        "ApiVersions v5 header without its tagged fields": header(18, 5),
    }
    for what, frame in frames.items():
        with WireClient(target.bootstrap_servers) as c:
            c.send_bytes(struct.pack(">i", len(frame)) + frame)
            assert c.is_closed_by_peer(), what
    assert api_versions_ok(target.bootstrap_servers), "the broker serves the next connection"


def test_an_unknown_tagged_field_is_skipped_in_every_flexible_request_kip_482(target: Target, unique: Callable[[str], str]) -> None:
    topic = unique("tagged")
    make_ready_topic(target.bootstrap_servers, topic, 1)
    with WireClient(target.bootstrap_servers) as c:
        tagged_id = topic_id(c, topic)
    bodies = [b for b in every_request_body(tagged_id, topic) if b.__flexible__]
    problems = unknown_field_problems(target.bootstrap_servers, bodies)
    assert not problems, "\n".join(problems)


def test_tagged_fields_kafka_refuses_close_the_connection(target: Target, unique: Callable[[str], str]) -> None:
    topic = unique("tagged-refused")
    make_ready_topic(target.bootstrap_servers, topic, 1)
    metadata = MetadataRequest(topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=topic),),
                               allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    plain = encode_request(metadata, 3)
    section = len(plain) - 1  # the body's tagged-field section, empty as written: its last byte
    partition = FetchPartition(partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20))
    fetch = FetchRequest(max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=10)), min_bytes=i32(1),
                         topics=(FetchTopic(topic=topic, partitions=(partition,)),), forgotten_topics_data=())

    def framed(frame: bytes) -> bytes:
        return struct.pack(">i", len(frame) - 4) + frame[4:]

    answered = {
        "a count of 2^31 fields (none, in Kafka's int)": framed(plain[:section] + uvarint(2**31)),
        "a five-byte tag": framed(plain[:section] + b"\x01\x85\x80\x80\x80\x00\x00"),
    }
    for what, frame in answered.items():
        with WireClient(target.bootstrap_servers) as c:
            c.send_bytes(frame)
            correlation, response = c.receive(metadata)
            assert correlation == 3 and response.topics[0].error_code == ErrorCode.none, what
    closed = {
        "Fetch v12 with ReplicaState's tag": with_tagged_fields(encode_request(fetch, 1), fetch, [(1, b"\x00" * 13)]),
        "Fetch v12 with ReplicaDirectoryId's tag in a partition": with_tagged_fields(encode_request(fetch, 1), partition, [(0, b"\x00" * 16)]),
        "an unknown field past the end": framed(plain[:section] + b"\x01\x05\x7f\x00"),
        "a six-byte tag": framed(plain[:section] + b"\x01\x85\x80\x80\x80\x80\x00\x00"),
    }
    for what, frame in closed.items():
        with WireClient(target.bootstrap_servers) as c:
            c.send_bytes(frame)
            assert c.is_closed_by_peer(), what
    assert api_versions_ok(target.bootstrap_servers)


def test_produce_v13_names_topics_by_id_and_an_unknown_id_gets_unknown_topic_id(
        target: Target, unique: Callable[[str], str]) -> None:
    """Produce v13 (KIP-516): the topic is named by its id; a batch to a known id is stored and the
    answer names the id; an unknown id gets UNKNOWN_TOPIC_ID and stores nothing anywhere."""
    from kio.schema.produce.v13.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.static.primitive import Records, i16

    topic = unique("produce-v13")
    make_ready_topic(target.bootstrap_servers, topic)
    with WireClient(target.bootstrap_servers) as client:
        known = topic_id(client, topic)
        stranger = uuid.uuid4()

        def produce_v13(to: uuid.UUID, value: bytes) -> list[tuple[uuid.UUID, int, ErrorCode]]:
            response = client.request(ProduceRequest(
                transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=TIMEOUT)),
                topic_data=(TopicProduceData(topic_id=to, partition_data=(
                    PartitionProduceData(index=i32(0), records=Records(build_batch([(None, value)], TS))),)),)))
            return [(t.topic_id, p.index, p.error_code) for t in response.responses for p in t.partition_responses]

        assert produce_v13(known, b"by-id") == [(known, 0, ErrorCode.none)]
        assert produce_v13(stranger, b"lost") == [(stranger, 0, ErrorCode.unknown_topic_id)]
        assert end_offset(client, topic) == 1
