"""The request prescan and nullable struct fields (found by ``kafka-topics --describe``, whose
admin client sends DescribeTopicPartitions with a null cursor): Kafka writes an int8 marker
before such a struct, -1 for null and 1 for present, and the bounds check must step over it
as kio's decoder does, while still refusing lengths the frame cannot hold inside the struct."""

from __future__ import annotations

import pytest
from kio.schema.describe_topic_partitions.v0.request import Cursor, DescribeTopicPartitionsRequest, TopicRequest
from kio.static.primitive import i32

from onceflow.protocol.errors import InvalidRequest
from onceflow.protocol.framing import Request, parse_request
from tests.support.wire import encode_request


def frame(cursor: Cursor | None) -> bytes:
    body = DescribeTopicPartitionsRequest(topics=(TopicRequest(name="orders"),), response_partition_limit=i32(10), cursor=cursor)
    return encode_request(body, 7)[4:]


@pytest.mark.parametrize("cursor", [None, Cursor(topic_name="orders", partition_index=i32(3))], ids=["null", "present"])
def test_a_nullable_struct_parses_null_and_present(cursor: Cursor | None) -> None:
    request = parse_request(frame(cursor))
    assert isinstance(request, Request)
    assert request.body.cursor == cursor and [t.name for t in request.body.topics] == ["orders"]


def test_a_forged_length_inside_a_present_struct_is_refused() -> None:
    data = bytearray(frame(Cursor(topic_name="orders", partition_index=i32(3))))
    marker = data.index(b"\x07orders", data.index(b"\x07orders") + 1) - 1  # the cursor's marker, then its name
    assert data[marker] == 1
    data[marker + 1] = 0x7F  # the cursor's topic name now claims 126 bytes
    with pytest.raises(InvalidRequest, match="string of 126 bytes"):
        parse_request(bytes(data))
