"""A bare Kafka protocol client for tests: kio entities over a blocking socket, and the
requests tests build by hand.

Not a Kafka client library: it sends exactly the request it is given (or raw
bytes) so tests can replay, truncate and garble requests at the protocol level.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import socket
import struct
from collections.abc import Iterable
from typing import Any

from kio.index import load_response_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial.writers import write_unsigned_varint
from kio.static.constants import EntityType
from kio.static.primitive import Records, i16, i32, i32Timedelta, i64

from onceflow.records.builder import build_batch

TIMEOUT_S = 30
#: The timeout a Produce request carries.
TIMEOUT = datetime.timedelta(seconds=TIMEOUT_S)


def encode_request(body: Any, correlation_id: int, client_id: str = "wire-test") -> bytes:
    header_cls = RequestHeaderV2 if body.__flexible__ else RequestHeaderV1
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=i16(body.__api_key__),
            request_api_version=i16(body.__version__),
            correlation_id=i32(correlation_id),
            client_id=client_id,
        ),
    )
    entity_writer(type(body))(buf, body)
    payload = buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def encode_entity(entity: Any) -> bytes:
    """An entity's bytes as kio writes them (a body, or a struct nested in one)."""
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def uvarint(value: int) -> bytes:
    buf = io.BytesIO()
    write_unsigned_varint(buf, value)  # type: ignore[arg-type]
    return buf.getvalue()


#: A tagged field as sent: (tag, the bytes of its value).
TaggedField = tuple[int, bytes]


def tagged_fields(fields: Iterable[TaggedField]) -> bytes:
    """A tagged-field section (KIP-482): a uvarint count, then per field a uvarint tag, a uvarint
    size and the value's bytes, in the order given."""
    fields = list(fields)
    return uvarint(len(fields)) + b"".join(uvarint(tag) + uvarint(len(value)) + value for tag, value in fields)


def _resized(frame: bytes | bytearray) -> bytes:
    return struct.pack(">i", len(frame) - 4) + bytes(frame[4:])


def with_header_tagged_fields(frame: bytes, fields: Iterable[TaggedField]) -> bytes:
    """A flexible request ``frame`` (size prefix included, from ``encode_request``) with ``fields``
    in its request header (v2): after api key, version, correlation id (8 bytes) and the client
    id, a legacy nullable string (int16 length), comes the header's section, empty as written."""
    (n,) = struct.unpack_from(">h", frame, 4 + 8)
    at = 4 + 8 + 2 + max(n, 0)
    assert frame[at] == 0, "encode_request writes no header tagged fields"
    return _resized(frame[:at] + tagged_fields(fields) + frame[at + 1 :])


def with_tagged_fields(frame: bytes, entity: Any, fields: Iterable[TaggedField]) -> bytes:
    """``frame`` with ``fields`` in the tagged-field section of ``entity``: the request body, whose
    bytes end the frame, or a struct in it whose bytes occur once in the frame.  A flexible
    struct's encoding ends with its own section (KIP-482); with every tagged field of ``entity``
    at its default, kio writes it as one byte 0, which is replaced."""
    for f in dataclasses.fields(entity):
        if "tag" in f.metadata:
            assert getattr(entity, f.name) == f.default, f"{type(entity).__name__}.{f.name} is not at its default"
    encoded = encode_entity(entity)
    assert type(entity).__flexible__ and encoded.endswith(b"\x00")
    if entity.__type__ == EntityType.request:
        assert frame.endswith(encoded), "the body's bytes end the frame"
        at = len(frame) - 1
    else:
        assert frame.count(encoded) == 1, "the struct's bytes must occur once in the frame"
        at = frame.index(encoded) + len(encoded) - 1
    return _resized(frame[:at] + tagged_fields(fields) + frame[at + 1 :])


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, response entity) of a response ``frame`` (after its size) to a request of
    that api key and version; ApiVersions answers with header v0 whatever its version."""
    schema = load_response_schema(api_key, api_version)
    header: Any
    if schema.__flexible__ and api_key != 18:
        header, offset = entity_reader(ResponseHeaderV1)(frame, 0)
    else:
        header, offset = entity_reader(ResponseHeaderV0)(frame, 0)
    body, _ = entity_reader(schema)(frame, offset)
    return header.correlation_id, body


class WireClient:
    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, body: Any) -> int:
        self.correlation_id += 1
        self.sock.sendall(encode_request(body, self.correlation_id))
        return self.correlation_id

    def _read_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            out += chunk
        return bytes(out)

    def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._read_exact(4))
        return self._read_exact(size)

    def receive(self, request_body: Any) -> tuple[int, Any]:
        """(correlation id, response entity) for a request of ``request_body``'s type."""
        return decode_response(request_body.__api_key__, request_body.__version__, self.read_frame())

    def request(self, body: Any) -> Any:
        correlation_id = self.send(body)
        got, response = self.receive(body)
        assert got == correlation_id, (got, correlation_id)
        return response

    def is_closed_by_peer(self) -> bool:
        """True once the broker has closed this connection (waits up to the socket timeout)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True


# -- requests tests share -----------------------------------------------------


def produce_request(topic: str, records: bytes, acks: int = -1, partition: int = 0,
                    transactional_id: str | None = None) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=i16(acks),
        timeout=i32Timedelta.parse(TIMEOUT),
        topic_data=(TopicProduceData(name=topic, partition_data=(
            PartitionProduceData(index=i32(partition), records=Records(records)),)),),
    )


def partition_error(response: ProduceRequest) -> ErrorCode:
    return response.responses[0].partition_responses[0].error_code  # type: ignore[attr-defined]


def base_offset(response: object) -> int:
    return response.responses[0].partition_responses[0].base_offset  # type: ignore[attr-defined]


def end_offset(client: WireClient, topic: str) -> int:
    req = ListOffsetsRequest(replica_id=i32(-1), isolation_level=0, topics=(
        ListOffsetsTopic(name=topic, partitions=(ListOffsetsPartition(partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(-1)),)),))
    return client.request(req).topics[0].partitions[0].offset


def api_versions_ok(bootstrap: str) -> bool:
    with WireClient(bootstrap) as c:
        resp = c.request(ApiVersionsRequest(client_software_name="probe", client_software_version="1.0"))
        return resp.error_code == ErrorCode.none and len(resp.api_keys) > 10


def init_producer_id(client: WireClient) -> tuple[int, int]:
    """An idempotent (non-transactional) producer id and epoch."""
    response = client.request(InitProducerIdRequest(transactional_id=None,
                                                    transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
                                                    producer_id=-1, producer_epoch=-1))
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


def batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    """An idempotent batch of ``values`` (no keys) from ``sequence`` on."""
    return build_batch([(None, v) for v in values], 1_700_000_000_000, producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=sequence)
