"""Size-prefixed Kafka frames in, requests out; responses in, frames out.

Theory of operation (sans-I/O, after h11): the server owns the socket and
feeds whatever bytes arrive to ``FrameReader.receive_data`` (or lets the
socket read straight into the reader's buffer); ``next_frame`` then hands
back one complete request frame (the bytes after the 4-byte size prefix) or
``NEED_DATA``.  The reader's memory follows the frame being read, as in
Kafka: a few KiB while a connection is idle, one frame's worth while a large
frame arrives (see ``FrameReader``).  ``parse_request`` turns a frame into a
``Request``: the header (v1, or v2 for flexible versions), then the body,
both decoded by kio after ``prescan.scan_request`` has checked their bounds
and taken out the tagged fields kio does not know (KIP-482: Kafka skips
them, kio would refuse them).  ``encode_response`` does the reverse,
choosing the response header version the request's API version calls for.

Wire layout of a request::

    int32 size | int16 api_key | int16 api_version | int32 correlation_id
               | nullable string client_id | [tagged fields, header v2] | body

where, in flexible versions, the body and each struct in it end with their
own tagged fields (a uvarint count, then uvarint tag, uvarint size, bytes).

A frame whose size prefix is negative or above ``socket.request.max.bytes``
raises ``FrameTooLarge``; a header or body that does not decode, or that
claims more bytes than the frame holds, raises ``InvalidRequest`` (an
unknown tagged field does not: it is skipped); an API key or version
outside ``apis.SUPPORTED`` raises ``UnsupportedApi``.  The server closes the
connection on each of these, as Kafka does, with one exception taken from
KIP-511: an ApiVersions request of a version this broker does not know is
answered with a v0 response carrying UNSUPPORTED_VERSION and the supported
ranges, so a newer client can retry with a version both sides know.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from dataclasses import dataclass
from typing import Any, Final, cast

from kio.index import load_request_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.primitive import i32

from . import apis
from .errors import FrameTooLarge, InvalidRequest, UnsupportedApi
from .prescan import field_shape, scan_header_v2, scan_request


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


#: Returned by ``FrameReader.next_frame`` when no complete frame is buffered.
NEED_DATA: Final = _NeedData()

_SIZE = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
#: What an idle connection holds: room for the size prefix and a few small requests.
_SMALL_BUFFER = 4 << 10


class FrameReader:
    """Buffers inbound bytes and cuts them into frames (no I/O).

    Bytes come in one of two ways: ``receive_data(data)`` copies them in, or
    the socket writes straight into the buffer through ``get_buffer`` and
    ``buffer_updated`` (asyncio's BufferedProtocol), which saves a copy of
    every produced byte.  ``next_frame`` returns a memoryview into the
    buffer: it is valid until the next call that adds data, so a frame must
    be parsed before more bytes are read (kio copies what it keeps).

    Buffer policy, after Kafka's ``NetworkReceive``, which reads the 4-byte
    size and only then allocates that many bytes: memory follows the frame
    being read, not the connection.

    - An idle or new connection holds a small buffer (``_SMALL_BUFFER``,
      4 KiB): enough for the size prefix and for many small requests, so
      thousands of idle connections cost a few KiB each (a 256 KiB buffer
      per connection once took 4,000 idle connections to 1 GiB).
    - Once a frame's size prefix has arrived and has been checked against
      ``max_frame_bytes``, a frame that does not fit gets a buffer of
      exactly its size, so the socket reads the rest straight into place
      and the frame is contiguous.  A size that ``next_frame`` refuses
      (negative or too large) is never allocated for.
    - A buffer more than twice the size of what it must hold (a large frame
      has passed) is replaced by a right-sized one, the small buffer when
      the connection is between frames, so the memory goes back to the
      allocator at once and not when the connection closes.
    - ``get_buffer`` ignores ``sizehint``: the buffer never grows beyond the
      frame being read to make a read larger.

    A buffer with views handed out is never resized (that would raise
    BufferError or invalidate them): it is replaced by a new bytearray, or
    its unread bytes slide to the front with a same-length slice assignment.
    """

    __slots__ = ("_buf", "_end", "_start", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int) -> None:
        self._buf = bytearray(_SMALL_BUFFER)
        self._start = 0
        self._end = 0
        self.max_frame_bytes = max_frame_bytes

    @property
    def buffered(self) -> int:
        return self._end - self._start

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Free space at the end of the buffer for the next read (at least one byte)."""
        self._make_room(1)
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        self._make_room(len(data))
        self._buf[self._end : self._end + len(data)] = data
        self._end += len(data)

    def _make_room(self, want: int) -> None:
        """Make ``want`` bytes free after the buffered ones, and room for all of the current frame."""
        buf, start, end = self._buf, self._start, self._end
        pending = end - start
        if pending == 0:
            self._start = self._end = start = end = 0
        need = pending + want
        if pending >= 4:
            (size,) = _SIZE.unpack_from(buf, start)
            if need < 4 + size and 0 <= size <= self.max_frame_bytes:  # next_frame refuses any other size
                need = 4 + size
        capacity = len(buf)
        right_sized = capacity <= _SMALL_BUFFER or 2 * need > capacity
        if right_sized and start + need <= capacity:
            return
        if right_sized and need <= capacity:
            buf[:pending] = buf[start:end]  # same length: allowed with views alive
        else:
            fresh = bytearray(max(need, _SMALL_BUFFER))
            fresh[:pending] = buf[start:end]
            self._buf = fresh
        self._start, self._end = 0, pending

    def next_frame(self) -> memoryview | _NeedData:
        available = self._end - self._start
        if available < 4:
            return NEED_DATA
        (size,) = _SIZE.unpack_from(self._buf, self._start)
        if size < 0 or size > self.max_frame_bytes:
            raise FrameTooLarge(
                f"frame of {size} bytes is larger than socket.request.max.bytes={self.max_frame_bytes}"
                if size >= 0
                else f"negative frame size {size}"
            )
        if available < 4 + size:
            return NEED_DATA
        begin = self._start + 4
        self._start = begin + size
        return memoryview(self._buf)[begin : begin + size].toreadonly()


@dataclass(frozen=True, slots=True)
class Request:
    """One decoded request: its header fields and its kio body entity."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    #: Size of the whole frame (without the size prefix), for logging and quotas.
    size: int

    @property
    def name(self) -> str:
        return apis.api_name(self.api_key)


@dataclass(frozen=True, slots=True)
class UnknownApiVersions:
    """An ApiVersions request of a version newer than ours (KIP-511): answer with v0."""

    correlation_id: int
    api_version: int


_header_readers: dict[int, Any] = {1: entity_reader(RequestHeaderV1), 2: entity_reader(RequestHeaderV2)}
_body_readers: dict[tuple[int, int], Any] = {}


def _body_reader(api_key: int, version: int) -> Any:
    reader = _body_readers.get((api_key, version))
    if reader is None:
        schema = load_request_schema(api_key, version)
        reader = _body_readers[(api_key, version)] = (entity_reader(schema), schema)
    return reader


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id of a frame (raises InvalidRequest if too short)."""
    if len(frame) < _HEADER_PREFIX.size:
        raise InvalidRequest(f"request frame of {len(frame)} bytes is shorter than a header")
    return _HEADER_PREFIX.unpack_from(frame, 0)


def parse_request(frame: bytes | memoryview) -> Request | UnknownApiVersions:
    api_key, api_version, correlation_id = peek_header(frame)
    size = len(frame)
    if not apis.is_supported(api_key, api_version):
        if api_key == apis.API_VERSIONS and api_version > apis.max_version(api_key):
            # The body is not read (KIP-511), but the header is, as Kafka's RequestHeader.parse
            # does: versions past 3 have a flexible header (v2), unknown tagged fields skipped.
            try:
                _header_readers[2](scan_header_v2(frame), 0)
            except (SerialError, ValueError, TypeError, OverflowError, UnicodeDecodeError, KeyError) as exc:
                raise InvalidRequest(f"cannot decode the ApiVersions v{api_version} request header: "
                                     f"{type(exc).__name__}: {exc}") from None
            return UnknownApiVersions(correlation_id, api_version)
        raise UnsupportedApi(api_key, api_version, correlation_id)
    reader, schema = _body_reader(api_key, api_version)
    header_version = 2 if schema.__flexible__ else 1
    # Before kio: kio trusts array counts and refuses unknown tagged fields (see prescan).
    try:
        frame = scan_request(frame, schema)
    except InvalidRequest as exc:
        raise InvalidRequest(f"{apis.api_name(api_key)} v{api_version} request: {exc}") from None
    try:
        header, offset = _header_readers[header_version](frame, 0)
        body, _ = reader(frame, offset)
    except (SerialError, ValueError, TypeError, OverflowError, UnicodeDecodeError, KeyError) as exc:
        raise InvalidRequest(
            f"cannot decode {apis.api_name(api_key)} v{api_version} request: {type(exc).__name__}: {exc}"
        ) from None
    problem = _null_violation(body)
    if problem is not None:
        raise InvalidRequest(f"{apis.api_name(api_key)} v{api_version} request: non-nullable field {problem} was serialized as null")
    # Bytes after the body are ignored, as Kafka's RequestContext ignores them
    # (librdkafka's Metadata v12 request, for one, carries three).
    return Request(api_key, api_version, correlation_id, header.client_id, body, size)


_NullPlan = tuple[tuple[str, bool, type | None, bool], ...]
_null_plans: dict[type, _NullPlan] = {}


def _null_plan(cls: type) -> _NullPlan:
    """Per field: (name, nullable, nested entity type or None, is an array)."""
    plan = _null_plans.get(cls)
    if plan is None:
        rows = []
        for f in dataclasses.fields(cls):
            element, array, nullable = field_shape(f)
            nested = element if isinstance(element, type) and dataclasses.is_dataclass(element) else None
            rows.append((f.name, nullable, nested, array))
        plan = _null_plans[cls] = tuple(rows)
    return plan


def _null_violation(entity: Any, path: str = "") -> str | None:
    """The first non-nullable field holding None, as Kafka's generated parsers check.

    kio decodes a null array or struct into such a field without complaint;
    Kafka refuses the request ("non-nullable field ... was serialized as null").
    """
    for name, nullable, nested, is_array in _null_plan(type(entity)):
        value = getattr(entity, name)
        if value is None:
            if not nullable:
                return path + name
            continue
        if nested is not None:
            for item in value if is_array else (value,):
                problem = _null_violation(item, f"{path}{name}.")
                if problem is not None:
                    return problem
    return None


_writers: dict[type, Any] = {}
_header_v0_writer = entity_writer(ResponseHeaderV0)
_header_v1_writer = entity_writer(ResponseHeaderV1)


def _writer(schema: type) -> Any:
    writer = _writers.get(schema)
    if writer is None:
        writer = _writers[schema] = entity_writer(schema)
    return writer


def encode_response(correlation_id: int, body: Any) -> memoryview:
    """A complete response frame, size prefix included (a view of the encoding buffer: no copy).

    The header version follows the body's schema (v1 for flexible versions),
    except that ApiVersions responses always use header v0 (KIP-511).
    """
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    if body.__flexible__ and body.__api_key__ != apis.API_VERSIONS:
        _header_v1_writer(buf, ResponseHeaderV1(correlation_id=cast(i32, correlation_id)))
    else:
        _header_v0_writer(buf, ResponseHeaderV0(correlation_id=cast(i32, correlation_id)))
    _writer(type(body))(buf, body)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    return out
