"""Unknown tagged fields (KIP-482) against a broker process: every API at every flexible version
it serves answers a request carrying a tagged field it does not know, in the request header, at
the top level of the body or both, as it answers the same request without one, on the same
connection.  A tag that belongs to another version of the struct still closes the connection, as
Kafka closes it, with one log line, and the broker goes on serving.

The requests are ``every_request_body``'s (the fuzzers' seeds: one request of every supported API
and version, built from kio's schemas), so every handler sees them, destructive ones naming a
topic of their own.  tests/reference/test_scenarios_bad_input.py sends the same to Apache Kafka."""

from __future__ import annotations

import datetime

import pytest
from kio.index import load_request_schema
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.static.primitive import i32, i32Timedelta, i64

from onceflow.protocol import apis
from tests.fuzz.corpus import TOPIC, every_request_body
from tests.support.broker import BrokerProcess
from tests.support.kafka import make_topic
from tests.support.tagged import topic_id, unknown_field_problems
from tests.support.wire import WireClient, api_versions_ok, encode_request, with_tagged_fields


def test_every_flexible_request_with_an_unknown_tagged_field_is_answered(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, TOPIC, 1)
    with WireClient(bs) as setup:
        fuzzed_id = topic_id(setup, TOPIC)
    bodies = [b for b in every_request_body(fuzzed_id) if b.__flexible__]
    flexible = {(key, v) for key, (low, high) in apis.SUPPORTED.items() for v in range(low, high + 1)
                if load_request_schema(key, v).__flexible__}
    assert {(b.__api_key__, b.__version__) for b in bodies} == flexible and len(flexible) > 70
    problems = unknown_field_problems(bs, bodies)
    assert not problems, "\n".join(problems)
    assert "tagged" not in broker_process.log()


@pytest.mark.parametrize(("struct_name", "tag"), [("FetchRequest", 1), ("FetchPartition", 0)])
def test_a_tag_of_another_version_closes_the_connection_as_kafka_does(broker_process: BrokerProcess, struct_name: str, tag: int) -> None:
    """Fetch v12 knows neither ReplicaState (tag 1, v15+) nor a partition's ReplicaDirectoryId
    (tag 0, v17+): Kafka throws "Tag N is not valid for version 12"."""
    bs = broker_process.bootstrap_servers
    make_topic(bs, "tags", 1)
    partition = FetchPartition(partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20))
    body = FetchRequest(max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=10)), min_bytes=i32(1),
                        topics=(FetchTopic(topic="tags", partitions=(partition,)),), forgotten_topics_data=())
    target = body if struct_name == "FetchRequest" else partition
    with WireClient(bs) as c:
        assert c.request(body).responses[0].partitions[0].error_code == 0  # the same request without the tag
        c.send_bytes(with_tagged_fields(encode_request(body, 2), target, [(tag, b"\x00" * 16)]))
        assert c.is_closed_by_peer()
    assert broker_process.log().count(f"tag {tag} of {struct_name} is not valid for version 12") == 1
    assert api_versions_ok(bs)
