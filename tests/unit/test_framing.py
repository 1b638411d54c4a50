"""The sans-I/O framing core: frames cut whole, byte by byte and with trailing data;
buffer sizes (small when idle, one frame's worth while a large frame arrives);
limits; header versions; KIP-511."""

from __future__ import annotations

import datetime
import struct
import tracemalloc

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v1.request import MetadataRequest as MetadataV1
from kio.schema.metadata.v1.request import MetadataRequestTopic as MetadataV1Topic
from kio.schema.metadata.v12.request import MetadataRequest as MetadataV12
from kio.schema.metadata.v12.response import MetadataResponse

from onceflow.protocol.errors import ErrorCode, FrameTooLarge, InvalidRequest, UnsupportedApi
from onceflow.protocol.framing import NEED_DATA, FrameReader, Request, UnknownApiVersions, encode_response, parse_request
from tests.support.wire import encode_request

META12 = encode_request(MetadataV12(topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False), 7)
META1 = encode_request(MetadataV1(topics=None), 8)


def frames_from(reader: FrameReader) -> list[bytes]:
    """Frames as bytes: a frame view is only valid until more data is received."""
    out = []
    while (frame := reader.next_frame()) is not NEED_DATA:
        out.append(bytes(frame))  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("mode", ["whole", "byte-by-byte", "trailing", "socket-buffer"])
def test_frames_are_cut_exactly(mode: str) -> None:
    reader = FrameReader(1 << 20)
    stream = META12 + META1
    got: list[bytes] = []
    if mode == "whole":
        reader.receive_data(stream)
        got = frames_from(reader)
    elif mode == "byte-by-byte":
        for i in range(len(stream)):
            reader.receive_data(stream[i : i + 1])
            got += frames_from(reader)
    elif mode == "trailing":
        reader.receive_data(stream + META12[:5])
        got = frames_from(reader)
        assert reader.buffered == 5
    else:  # as asyncio's BufferedProtocol feeds it: reads of uneven sizes into get_buffer()
        pos = 0
        for size in (3, 17, 1, 40, 1000):
            buf = reader.get_buffer(-1)
            chunk = stream[pos : pos + size]
            buf[: len(chunk)] = chunk
            reader.buffer_updated(len(chunk))
            pos += len(chunk)
            got += frames_from(reader)
    assert got == [META12[4:], META1[4:]]


def test_a_frame_larger_than_the_buffer_is_assembled_whole() -> None:
    reader = FrameReader(8 << 20)
    body = b"\x00\x03\x00\x01\x00\x00\x00\x05" + bytes(range(256)) * 8000  # ~2 MB frame
    stream = struct.pack(">i", len(body)) + body
    pos = 0
    frames = []
    while pos < len(stream):
        buf = reader.get_buffer(-1)
        n = min(len(buf), 100_000, len(stream) - pos)
        buf[:n] = stream[pos : pos + n]
        reader.buffer_updated(n)
        pos += n
        frames += frames_from(reader)
    assert frames == [body]
    reader.get_buffer(-1)  # empty again: the grown buffer is given back
    assert len(reader._buf) <= SMALL


#: What a reader may hold while no large frame is arriving ("a few KiB").
SMALL = 4 << 10


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_an_idle_reader_holds_a_small_buffer() -> None:
    """Kafka allocates per frame, after reading its size; an idle connection costs a few KiB."""
    reader = FrameReader(100 << 20)
    assert len(reader._buf) <= SMALL
    assert len(reader.get_buffer(256 << 10)) <= SMALL  # a large sizehint (uvloop's) does not grow it
    reader.receive_data(META12 + META1)
    assert frames_from(reader) == [META12[4:], META1[4:]]
    reader.get_buffer(-1)
    assert len(reader._buf) <= SMALL


def test_a_large_frame_gets_exactly_its_size_and_then_the_small_buffer_again() -> None:
    reader = FrameReader(8 << 20)
    body = bytes(range(256)) * 4096  # 1 MiB
    stream = framed(body) + META1
    buf = reader.get_buffer(-1)
    first = min(len(buf), 1000)
    buf[:first] = stream[:first]
    reader.buffer_updated(first)
    assert reader.next_frame() is NEED_DATA
    rest = reader.get_buffer(-1)  # the size is known: room for exactly the rest of the frame, in place
    assert len(reader._buf) == 4 + len(body) and len(rest) == 4 + len(body) - first
    rest[:] = stream[first : 4 + len(body)]
    reader.buffer_updated(len(rest))
    frame = reader.next_frame()
    assert frame == body
    assert reader.next_frame() is NEED_DATA
    buf = reader.get_buffer(-1)  # the large frame has passed: back to a small buffer
    assert len(reader._buf) <= SMALL
    assert frame == body  # the old buffer was replaced, not resized: the view still reads the frame
    del frame
    buf[: len(META1)] = META1
    reader.buffer_updated(len(META1))
    assert frames_from(reader) == [META1[4:]]
    # The same through receive_data, with the large frame and the next one in one chunk.
    reader.receive_data(stream)
    assert frames_from(reader) == [body, META1[4:]]
    reader.get_buffer(-1)
    assert len(reader._buf) <= SMALL


# Small frames around frames just above and far above the small buffer, so that every
# transition (small -> grown -> small, a prefix split across reads) is crossed.
PIPELINED = [META12[4:], b"\x01" * (SMALL - 3), META1[4:], bytes(range(256)) * 40, b"", META12[4:], b"\x02" * 7]
PIPELINED_STREAM = b"".join(framed(f) for f in PIPELINED)
LARGEST = max(len(f) for f in PIPELINED)


def test_pipelined_frames_split_at_every_byte_boundary() -> None:
    for cut in range(len(PIPELINED_STREAM) + 1):
        reader = FrameReader(1 << 20)
        reader.receive_data(PIPELINED_STREAM[:cut])
        got = frames_from(reader)
        reader.receive_data(PIPELINED_STREAM[cut:])
        got += frames_from(reader)
        assert got == PIPELINED, cut
        assert reader.buffered == 0
        reader.get_buffer(-1)
        assert len(reader._buf) <= SMALL, cut


@pytest.mark.parametrize("mode", ["receive_data", "get_buffer"])
def test_pipelined_frames_fed_one_byte_at_a_time(mode: str) -> None:
    reader = FrameReader(1 << 20)
    got: list[bytes] = []
    for i in range(len(PIPELINED_STREAM)):
        if mode == "receive_data":
            reader.receive_data(PIPELINED_STREAM[i : i + 1])
        else:
            buf = reader.get_buffer(-1)
            assert len(buf) >= 1
            buf[0] = PIPELINED_STREAM[i]
            reader.buffer_updated(1)
        got += frames_from(reader)
        assert len(reader._buf) <= max(SMALL, 4 + LARGEST)  # never more than the frame being read
    assert got == PIPELINED


def test_pipelined_frames_read_like_a_socket_in_reads_of_every_size() -> None:
    """As asyncio feeds a BufferedProtocol: each read fills at most what get_buffer offers."""
    for read_size in [*range(1, 40), 4095, 4096, 4097, 1 << 20]:
        reader = FrameReader(1 << 20)
        got: list[bytes] = []
        pos = 0
        while pos < len(PIPELINED_STREAM):
            buf = reader.get_buffer(-1)
            n = min(len(buf), read_size, len(PIPELINED_STREAM) - pos)
            buf[:n] = PIPELINED_STREAM[pos : pos + n]
            reader.buffer_updated(n)
            pos += n
            got += frames_from(reader)
            assert len(reader._buf) <= max(SMALL, 4 + LARGEST), read_size
        assert got == PIPELINED, read_size
        reader.get_buffer(-1)
        assert len(reader._buf) <= SMALL


@pytest.mark.parametrize("size", [(64 << 20) + 1, 2**31 - 1, -1, -(2**31)])
def test_a_refused_size_prefix_is_never_allocated_for(size: int) -> None:
    limit = 64 << 20
    reader = FrameReader(limit)
    tracemalloc.start()
    try:
        buf = reader.get_buffer(-1)
        buf[:4] = struct.pack(">i", size)
        reader.buffer_updated(4)
        reader.get_buffer(-1)  # where a checked size would make the buffer grow
        reader.receive_data(b"\x00" * 100)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert len(reader._buf) <= SMALL
    with pytest.raises(FrameTooLarge):
        reader.next_frame()
    # The control: a size at the limit is allocated for, once its prefix is known.
    reader = FrameReader(limit)
    reader.receive_data(struct.pack(">i", limit))
    tracemalloc.start()
    try:
        reader.get_buffer(-1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak >= limit and len(reader._buf) == 4 + limit


def test_oversized_and_negative_frames_are_refused_before_buffering() -> None:
    reader = FrameReader(100)
    reader.receive_data(struct.pack(">i", 101))
    with pytest.raises(FrameTooLarge):
        reader.next_frame()
    reader = FrameReader(100)
    reader.receive_data(struct.pack(">i", -5))
    with pytest.raises(FrameTooLarge):
        reader.next_frame()


def test_parse_request_decodes_both_header_versions() -> None:
    r12 = parse_request(META12[4:])
    r1 = parse_request(META1[4:])
    assert isinstance(r12, Request) and isinstance(r1, Request)
    assert (r12.api_key, r12.api_version, r12.correlation_id, r12.client_id) == (3, 12, 7, "wire-test")
    assert (r1.api_version, r1.correlation_id) == (1, 8)
    assert r12.body.topics is None and r12.body.allow_auto_topic_creation is True


def test_unknown_api_key_and_version_are_protocol_errors() -> None:
    unknown_key = struct.pack(">hhih", 9999, 0, 1, -1)
    with pytest.raises(UnsupportedApi):
        parse_request(unknown_key)
    too_new = bytearray(META12[4:])
    struct.pack_into(">h", too_new, 2, 99)
    with pytest.raises(UnsupportedApi):
        parse_request(bytes(too_new))
    with pytest.raises(InvalidRequest):
        parse_request(b"\x00\x03")
    with pytest.raises(InvalidRequest):
        parse_request(META12[4:-4])


def test_api_versions_of_an_unknown_version_gets_the_kip_511_fallback() -> None:
    frame = bytearray(encode_request(ApiVersionsRequest(client_software_name="x", client_software_version="1"), 42)[4:])
    struct.pack_into(">h", frame, 2, 77)
    parsed = parse_request(bytes(frame))
    assert parsed == UnknownApiVersions(42, 77)


def test_response_header_versions() -> None:
    flexible = encode_response(5, MetadataResponse(throttle_time=datetime.timedelta(0), brokers=(), cluster_id=None,
                                                   controller_id=1, topics=()))
    (size, correlation, tags) = struct.unpack_from(">iib", flexible)
    assert size == len(flexible) - 4 and correlation == 5 and tags == 0
    # ApiVersions keeps header v0 even when the body is flexible (KIP-511).
    api = encode_response(6, ApiVersionsV0(error_code=ErrorCode.unsupported_version, api_keys=()))
    assert struct.unpack_from(">iih", api) == (len(api) - 4, 6, ErrorCode.unsupported_version)


def test_a_forged_array_count_is_refused_before_kio_allocates() -> None:
    """kio sizes arrays from the claimed count; a huge one used to abort the process."""
    frame = bytearray(encode_request(MetadataV1(topics=(MetadataV1Topic(name="a"), MetadataV1Topic(name="b"))), 9)[4:])
    header_len = 2 + 2 + 4 + 2 + len("wire-test")
    struct.pack_into(">i", frame, header_len, 2_000_000_000)  # the topics array count
    with pytest.raises(InvalidRequest, match="array of 2000000000 elements"):
        parse_request(bytes(frame))
    flexible = bytearray(META12[4:])
    body = 2 + 2 + 4 + 2 + len("wire-test") + 1
    flexible[body : body + 1] = b"\xff\xff\xff\xff\x07"  # compact count 2^35-1
    with pytest.raises(InvalidRequest):
        parse_request(bytes(flexible))


def _v1_header(api_key: int, version: int, correlation_id: int = 7, client_id: bytes = b"t") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def test_a_null_in_a_non_nullable_field_is_refused_as_kafka_refuses_it() -> None:
    """kio decodes an array count of -1 into None even where the schema says the array is not
    nullable; Kafka's generated parser refuses it ("non-nullable field ... was serialized as null")."""
    delete_topics = 20  # v3: topic_names (array of string, not nullable), timeout_ms (int32)
    ok = parse_request(_v1_header(delete_topics, 3) + struct.pack(">ih", 1, 1) + b"a" + struct.pack(">i", 1000))
    assert isinstance(ok, Request) and ok.body.topic_names == ("a",)
    with pytest.raises(InvalidRequest, match="non-nullable field topic_names was serialized as null"):
        parse_request(_v1_header(delete_topics, 3) + struct.pack(">ii", -1, 1000))
    metadata = 3  # v4: topics is nullable (null: every topic), allow_auto_topic_creation (bool)
    everything = parse_request(_v1_header(metadata, 4) + struct.pack(">ib", -1, 1))
    assert isinstance(everything, Request) and everything.body.topics is None
