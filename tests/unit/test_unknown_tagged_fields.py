"""Unknown tagged fields (KIP-482) are skipped, as Kafka's generated readers skip them: in the
request header, at the top level of a body, in a nested struct, several at once, next to known
ones.  What Kafka refuses is still refused: a size past the end of the frame, a varint of more
than five bytes, a tag that belongs to another version of the struct, a known tag whose value
does not decode."""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v12.request import FetchRequest as Fetch12
from kio.schema.fetch.v15.request import FetchPartition, FetchRequest, FetchTopic, ReplicaState
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.static.primitive import i32, i32Timedelta, i64

from onceflow.protocol import apis, prescan
from onceflow.protocol.errors import InvalidRequest
from onceflow.protocol.framing import Request, UnknownApiVersions, parse_request
from tests.fuzz.corpus import every_request_body
from tests.support.wire import (
    encode_request,
    tagged_fields,
    uvarint,
    with_header_tagged_fields,
    with_tagged_fields,
)

TOPIC_A = MetadataRequestTopic(topic_id=uuid.UUID(int=1), name="a")
TOPIC_B = MetadataRequestTopic(topic_id=uuid.UUID(int=2), name="b")
METADATA = MetadataRequest(topics=(TOPIC_A, TOPIC_B), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
PLAIN = encode_request(METADATA, 7)


def parsed(frame: bytes) -> Request:
    request = parse_request(frame[4:])
    assert isinstance(request, Request)
    return request


def same_request(tagged: bytes, plain: bytes) -> None:
    """``tagged`` parses to the request ``plain`` parses to (its size is its own)."""
    got, want = parsed(tagged), parsed(plain)
    assert (got.api_key, got.api_version, got.correlation_id, got.client_id, got.body) == \
        (want.api_key, want.api_version, want.correlation_id, want.client_id, want.body)
    assert got.size == len(tagged) - 4


def test_every_struct_of_every_supported_request_has_a_walk_plan() -> None:
    """The walk knows every field shape of the requests served (a tagged nullable struct, for one,
    would fail here first, not on a client's request)."""

    def plan(cls: type, flexible: bool) -> None:
        prescan._plan(cls, flexible)
        for f in dataclasses.fields(cls):
            element, _, _ = prescan.field_shape(f)
            if dataclasses.is_dataclass(element):
                plan(element, flexible)  # type: ignore[arg-type]

    for api_key, (low, high) in apis.SUPPORTED.items():
        for version in range(low, high + 1):
            schema = load_request_schema(api_key, version)
            plan(schema, schema.__flexible__)


def test_a_request_without_unknown_tags_is_handed_to_kio_as_it_is() -> None:
    frame = memoryview(PLAIN[4:]).toreadonly()
    assert prescan.scan_request(frame, MetadataRequest) is frame  # no copy on the common path


def test_an_unknown_tag_in_the_request_header_is_skipped() -> None:
    same_request(with_header_tagged_fields(PLAIN, [(0, b"from-the-future")]), PLAIN)
    same_request(with_header_tagged_fields(PLAIN, [(5, b"")]), PLAIN)


def test_an_unknown_tag_at_the_top_level_of_the_body_is_skipped() -> None:
    same_request(with_tagged_fields(PLAIN, METADATA, [(3, b"\x01\x02\x03")]), PLAIN)


def test_an_unknown_tag_in_a_nested_struct_is_skipped() -> None:
    second = with_tagged_fields(PLAIN, TOPIC_B, [(0, b"xyz")])
    same_request(second, PLAIN)
    same_request(with_tagged_fields(second, TOPIC_A, [(1, b"")]), PLAIN)  # in both elements


def test_several_unknown_tags_are_skipped() -> None:
    many = [(0, b""), (1, b"\x00"), (300, b"x" * 200), (2**31 - 1, b"y"), (2**31, b"z")]  # multi-byte varints
    frame = with_header_tagged_fields(PLAIN, many)
    frame = with_tagged_fields(frame, METADATA, many + many)  # repeated too
    frame = with_tagged_fields(frame, TOPIC_A, many)  # (an outer struct first: its bytes still match)
    frame = with_tagged_fields(frame, TOPIC_B, many[::-1])  # in no order: Kafka does not check it
    same_request(frame, PLAIN)


# -- next to known tags: Fetch v15 knows tag 0 (cluster_id) and tag 1 (replica_state) -------

PARTITION = FetchPartition(partition=i32(0), fetch_offset=i64(5), partition_max_bytes=i32(1 << 20))
FETCH_TOPIC = FetchTopic(topic_id=uuid.UUID(int=9), partitions=(PARTITION,))


def fetch(cluster_id: str | None = None, replica_state: ReplicaState | None = None) -> FetchRequest:
    known: dict[str, Any] = {}
    if cluster_id is not None:
        known["cluster_id"] = cluster_id
    if replica_state is not None:
        known["replica_state"] = replica_state
    return FetchRequest(max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=10)), min_bytes=i32(1),
                        topics=(FETCH_TOPIC,), forgotten_topics_data=(), **known)


def cluster_id_value(text: bytes) -> bytes:
    return uvarint(len(text) + 1) + text  # a compact string: tagged fields are always flexible


STATE = ReplicaState(replica_id=i32(5), replica_epoch=i64(7))
#: ReplicaState's value as a tagged field: its two fields, then its own (empty) section.
STATE_VALUE = struct.pack(">iq", 5, 7) + b"\x00"


def test_unknown_tags_next_to_known_ones_are_skipped_and_the_known_ones_decoded() -> None:
    want = encode_request(fetch(cluster_id="abc", replica_state=STATE), 7)
    section = [(7, b"?"), (0, cluster_id_value(b"abc")), (2, b"??"), (1, STATE_VALUE), (9, b"")]
    got = with_tagged_fields(encode_request(fetch(), 7), fetch(), section)
    same_request(got, want)
    assert parsed(got).body.cluster_id == "abc" and parsed(got).body.replica_state == STATE


def test_an_unknown_tag_inside_a_known_tagged_struct_is_skipped() -> None:
    """ReplicaState is itself a tagged field of Fetch, with a tagged-field section of its own."""
    want = encode_request(fetch(replica_state=STATE), 7)
    inside = struct.pack(">iq", 5, 7) + tagged_fields([(4, b"inner"), (6, b"")])
    got = with_tagged_fields(encode_request(fetch(), 7), fetch(), [(1, inside), (3, b"outer")])
    same_request(got, want)
    # And in the nested structs of the topics array, at the same time.
    got = with_tagged_fields(got, FETCH_TOPIC, [(2, b"t")])
    same_request(with_tagged_fields(got, PARTITION, [(5, b"p")]), want)


def test_known_tags_are_read_whatever_their_order_size_or_repetition_as_kafka_reads_them() -> None:
    """Kafka's reader neither checks the order of tags nor the size of a known one (kio neither):
    the value is read as the field's type, and a repeated tag's last value wins."""
    want = encode_request(fetch(cluster_id="abc", replica_state=STATE), 7)
    reversed_order = with_tagged_fields(encode_request(fetch(), 7), fetch(), [(1, STATE_VALUE), (8, b""), (0, cluster_id_value(b"abc"))])
    same_request(reversed_order, want)
    repeated = with_tagged_fields(encode_request(fetch(), 7), fetch(), [(0, cluster_id_value(b"old")), (8, b"x"), (0, cluster_id_value(b"abc")),
                                                                        (1, STATE_VALUE)])
    same_request(repeated, want)
    # A size that does not match the value: the value is read, the size ignored.
    frame = bytearray(with_tagged_fields(encode_request(fetch(), 7), fetch(), [(0, cluster_id_value(b"abc")), (5, b"u")]))
    at = len(frame) - len(tagged_fields([(0, cluster_id_value(b"abc")), (5, b"u")])) + 2  # the size of tag 0
    assert frame[at] == 4
    frame[at] = 60
    same_request(bytes(frame), encode_request(fetch(cluster_id="abc"), 7))


@pytest.mark.parametrize("body", [b for b in every_request_body(uuid.UUID(int=3)) if b.__flexible__],
                         ids=lambda b: f"{type(b).__name__}-v{b.__version__}")
def test_every_flexible_request_skips_an_unknown_tag_in_its_header_and_body(body: Any) -> None:
    plain = encode_request(body, 11)
    same_request(with_header_tagged_fields(plain, [(0, b"h")]), plain)
    same_request(with_tagged_fields(plain, body, [(0 if not _tags(body) else 99, b"b")]), plain)
    both = with_tagged_fields(with_header_tagged_fields(plain, [(1, b"")]), body, [(1000, b"\x00" * 3)])
    same_request(both, plain)


def _tags(body: Any) -> set[int]:
    return {f.metadata["tag"] for f in body.__dataclass_fields__.values() if "tag" in f.metadata}


def test_an_unknown_tag_in_the_header_of_an_api_versions_request_of_an_unknown_version() -> None:
    frame = bytearray(with_header_tagged_fields(encode_request(ApiVersionsRequest(client_software_name="x", client_software_version="1"), 42),
                                                [(0, b"new"), (2, b"")]))
    struct.pack_into(">h", frame, 4 + 2, 77)
    assert parse_request(bytes(frame[4:])) == UnknownApiVersions(42, 77)


# -- what Kafka refuses is still refused ----------------------------------------------------------


def refused(frame: bytes, match: str) -> None:
    with pytest.raises(InvalidRequest, match=match):
        parse_request(frame[4:])


def test_an_unknown_tag_whose_size_runs_past_the_frame_is_refused() -> None:
    frame = with_tagged_fields(PLAIN, TOPIC_A, [(3, b"abc")])
    at = frame.index(b"\x01\x03\x03abc")  # count, tag, size, value
    refused(frame[: at + 2] + b"\x7f" + frame[at + 3 :], "unknown tagged field 3 of 127 bytes")
    # 2^31: a negative size in Kafka's int (NegativeArraySizeException).
    refused(frame[: at + 2] + uvarint(2**31) + frame[at + 3 :], "unknown tagged field 3 of -2147483648 bytes")
    # In the header: a size beyond the whole frame.
    header = with_header_tagged_fields(PLAIN, [(0, b"abc")])
    at = header.index(b"\x01\x00\x03abc")
    refused(header[: at + 2] + uvarint(10_000) + header[at + 3 :], "unknown tagged field 0 of 10000 bytes")


def test_a_varint_longer_than_five_bytes_is_refused() -> None:
    at = len(PLAIN) - 1  # the body's section count
    refused(PLAIN[:at] + b"\x01\x85\x80\x80\x80\x80\x00\x00", "varint too long")  # a six-byte tag
    assert isinstance(parse_request(PLAIN[4:at] + b"\x01\x85\x80\x80\x80\x00\x00"), Request)  # five bytes


def test_more_fields_than_the_section_holds_is_refused() -> None:
    frame = with_tagged_fields(PLAIN, METADATA, [(3, b"abc")])
    refused(frame[:-6] + b"\x02" + frame[-5:], "varint runs past the end")


def test_a_count_of_two_to_the_31_or_more_is_no_fields_as_in_kafkas_int() -> None:
    """Kafka reads the count into a Java int: negative, so its loop reads no field."""
    at = len(PLAIN) - 1
    same_request(PLAIN[:at] + uvarint(2**31), PLAIN)
    same_request(PLAIN[:at] + uvarint(2**32 - 1), PLAIN)


@pytest.mark.parametrize(("body", "struct_", "tag", "where"), [
    (Fetch12(max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=10)), min_bytes=i32(1), topics=(), forgotten_topics_data=()),
     None, 1, "FetchRequest is not valid for version 12"),  # ReplicaState: v15+
    (fetch(), PARTITION, 0, "FetchPartition is not valid for version 15"),  # ReplicaDirectoryId: v17+
    (fetch(), PARTITION, 1, "FetchPartition is not valid for version 15"),  # HighWatermark: v18+
])
def test_a_tag_of_another_version_of_the_struct_is_refused_as_kafka_refuses_it(body: Any, struct_: Any, tag: int, where: str) -> None:
    """Kafka 4.3.1's generated reader throws "Tag N is not valid for version V" for these."""
    frame = with_tagged_fields(encode_request(body, 7), struct_ or body, [(tag, b"\x00" * 16)])
    refused(frame, f"tag {tag} of {where}")


def test_a_known_tag_whose_value_does_not_decode_is_refused_as_before() -> None:
    empty = encode_request(fetch(), 7)
    refused(with_tagged_fields(empty, fetch(), [(0, uvarint(51) + b"abc")]), "string of 50 bytes")
    refused(with_tagged_fields(empty, fetch(), [(0, cluster_id_value(b"\xff\xfe"))]), "InvalidUnicode")
    refused(with_tagged_fields(empty, fetch(), [(1, struct.pack(">iq", 5, 7) + b"\x01\x02\x7f")]), "unknown tagged field 2 of 127 bytes")


def test_tags_and_counts_are_read_as_kafkas_java_int() -> None:
    """Kafka keeps a uvarint's low 32 bits: 2^32 + 1 fields is one field, tag 2^32 is tag 0."""
    empty = encode_request(fetch(), 7)
    body = empty[:-1]  # the body's section is its last byte (every tagged field at its default)
    wrapped_count = body + uvarint(2**32 + 1) + uvarint(5) + uvarint(1) + b"u"
    same_request(wrapped_count, empty)
    wrapped_tag = body + uvarint(1) + uvarint(2**32) + uvarint(4) + cluster_id_value(b"abc")
    same_request(wrapped_tag, encode_request(fetch(cluster_id="abc"), 7))
