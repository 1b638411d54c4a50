"""Unknown tagged fields (KIP-482) sent to a broker: does it answer a request carrying one as it
answers the same request without it?  Shared by the integration test (Onceflow) and the reference
scenario (Onceflow and Apache Kafka)."""

from __future__ import annotations

import dataclasses
import enum
import time
import uuid
from typing import Any

from kio.index import load_response_schema
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader
from kio.serial.errors import SerialError

from tests.support.wire import WireClient, encode_request, with_header_tagged_fields, with_tagged_fields

API_VERSIONS = 18
#: Tags no version of any request has (the request header has no tagged fields at all).
HEADER_FIELD = (0, b"header-from-the-future")
BODY_FIELD = (97, b"\x00\x01body-from-the-future")
WHERE = ("header", "body", "both")


def topic_id(client: WireClient, topic: str) -> uuid.UUID:
    response = client.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=topic),),
                                              allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return response.topics[0].topic_id  # type: ignore[no-any-return]


def shape(value: Any) -> Any:
    """A response as its structure: struct and field names, array lengths and error codes, and
    of every other value its type only (offsets, ids and times differ from one answer to the
    next, error codes and structure do not)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, {f.name: shape(getattr(value, f.name)) for f in dataclasses.fields(value)})
    if isinstance(value, tuple):
        return tuple(shape(v) for v in value)
    if isinstance(value, enum.Enum):
        return value
    return type(value).__name__


def answer(client: WireClient, body: Any) -> tuple[int, Any]:
    """The correlation id and the shape of the next response.  A few responses kio cannot decode
    (DescribeTransactions' start timestamp of -1: "Cannot parse negative timestamp"); their shape
    is their size."""
    frame = client.read_frame()
    correlation = int.from_bytes(frame[:4], "big")
    schema = load_response_schema(body.__api_key__, body.__version__)
    header = ResponseHeaderV1 if schema.__flexible__ and body.__api_key__ != API_VERSIONS else ResponseHeaderV0
    _, offset = entity_reader(header)(frame, 0)
    try:
        response, _ = entity_reader(schema)(frame, offset)
    except SerialError:
        return correlation, ("undecoded", len(frame))
    return correlation, shape(response)


def with_unknown_field(body: Any, correlation_id: int, where: str) -> bytes:
    """The request frame of ``body`` with an unknown tagged field in the header, the body or both."""
    frame = encode_request(body, correlation_id)
    if where in ("header", "both"):
        frame = with_header_tagged_fields(frame, [HEADER_FIELD])
    if where in ("body", "both"):
        frame = with_tagged_fields(frame, body, [BODY_FIELD])
    return frame


def _one_request(bootstrap: str, body: Any) -> list[str]:
    """Answers to ``body`` without a tagged field (its effect on state happens here, so that the
    answers compared next are all to the same state), then with an unknown one in the header, in
    the body and in both, then without again, on one connection: what went wrong."""
    what = f"{type(body).__name__} v{body.__version__}"
    with WireClient(bootstrap) as c:
        c.send_bytes(encode_request(body, 1))
        if answer(c, body)[0] != 1:
            return [f"{what}: the request without a tagged field got another correlation id"]
        answers: dict[str, Any] = {}
        for correlation, where in enumerate(WHERE, start=100):
            c.send_bytes(with_unknown_field(body, correlation, where))
            try:
                got, answers[where] = answer(c, body)
            except ConnectionError:
                return [f"{what}: an unknown tagged field in the {where} closed the connection"]
            if got != correlation:
                return [f"{what}: with the field in the {where}, correlation id {got} instead of {correlation}"]
        c.send_bytes(encode_request(body, 200))
        _, plain = answer(c, body)
    return [f"{what}: with the field in the {where}, {got_shape} instead of {plain}"
            for where, got_shape in answers.items() if got_shape != plain]


def unknown_field_problems(bootstrap: str, bodies: list[Any], attempts: int = 3) -> list[str]:
    """For each request body, on a connection of its own: every request with an unknown tagged
    field must be answered, with its correlation id, as the same request without it is answered.
    What went otherwise, one line per request.  Answers that differ are asked again, up to
    ``attempts`` times, half a second apart: Kafka's state moves on by itself at first (its
    transaction coordinator answers COORDINATOR_NOT_AVAILABLE until ``__transaction_state``
    exists); a closed connection is not asked again."""
    problems = []
    for body in bodies:
        for attempt in range(attempts):
            found = _one_request(bootstrap, body)
            if not found or any("closed the connection" in p or "correlation id" in p for p in found):
                break
            if attempt + 1 < attempts:
                time.sleep(0.5)
        problems += found
    return problems
