"""Bad input at the protocol level: the client gets Kafka's error code or its connection
closed, the broker logs one line, stored data is untouched and other clients are served."""

from __future__ import annotations

import datetime
import struct
import time
import uuid

from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.static.primitive import i32, i32Timedelta

from onceflow.records.builder import build_batch
from tests.support.broker import BrokerProcess
from tests.support.kafka import make_topic
from tests.support.wire import WireClient, api_versions_ok, encode_request, end_offset, partition_error, produce_request


def test_corrupt_batches_get_kafka_errors_and_leave_the_log_alone(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "guarded")
    good = build_batch([(b"k", b"v")], 1_700_000_000_000)
    with WireClient(bs) as c:
        assert partition_error(c.request(produce_request("guarded", good))) == ErrorCode.none
        bad_crc = bytearray(good)
        bad_crc[-1] ^= 1
        old_magic = bytearray(good)
        old_magic[16] = 1
        cases = {
            bytes(bad_crc): ErrorCode.corrupt_message,
            good[:-3]: ErrorCode.invalid_record,  # no whole batch, as Kafka answers
            bytes(old_magic): ErrorCode.invalid_record,
            good + good: ErrorCode.invalid_record,
            b"\x00" * 80: ErrorCode.corrupt_message,  # batch length 0: below the smallest record
            b"\x07" * 80: ErrorCode.corrupt_message,  # unknown magic 7
        }
        for payload, expected in cases.items():
            assert partition_error(c.request(produce_request("guarded", payload))) == expected
        bad_acks = c.request(produce_request("guarded", good, acks=2))
        assert partition_error(bad_acks) == ErrorCode.invalid_required_acks
        unknown = c.request(produce_request("no-such-topic", good))
        assert partition_error(unknown) == ErrorCode.unknown_topic_or_partition
        assert end_offset(c, "guarded") == 1, "only the good batch was stored"
    assert broker_process.log().count("refused") >= 5


def test_oversized_frame_closes_only_that_connection(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    bystander = WireClient(bs)
    assert bystander.request(ApiVersionsRequest(client_software_name="a", client_software_version="1")).error_code == ErrorCode.none
    with WireClient(bs) as c:
        c.send_bytes(struct.pack(">i", 104857600 + 1) + b"\x00" * 16)
        assert c.is_closed_by_peer()
    with WireClient(bs) as c:
        c.send_bytes(struct.pack(">i", -7))
        assert c.is_closed_by_peer()
    assert bystander.request(ApiVersionsRequest(client_software_name="a", client_software_version="1")).error_code == ErrorCode.none
    bystander.close()
    assert "larger than socket.request.max.bytes" in broker_process.log()


def test_garbled_unknown_and_truncated_requests_close_the_connection(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    frames = {
        "unknown api key": struct.pack(">hhih", 4242, 0, 1, -1),
        "unknown version": struct.pack(">hhih", 3, 99, 1, -1),
        "too short": b"\x00\x03",
        "garbled body": encode_request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name="x"),),
                                                       allow_auto_topic_creation=False, include_topic_authorized_operations=False), 1)[4:30],
    }
    for what, frame in frames.items():
        with WireClient(bs) as c:
            c.send_bytes(struct.pack(">i", len(frame)) + frame)
            assert c.is_closed_by_peer(), what
    assert api_versions_ok(bs)


def test_api_versions_newer_than_ours_gets_a_v0_answer_kip_511(broker_process: BrokerProcess) -> None:
    with WireClient(broker_process.bootstrap_servers) as c:
        frame = bytearray(encode_request(ApiVersionsRequest(client_software_name="future", client_software_version="9"), 5))
        struct.pack_into(">h", frame, 6, 99)  # api_version
        c.send_bytes(bytes(frame))
        correlation, response = c.receive(ApiVersionsV0())
        assert correlation == 5
        assert response.error_code == ErrorCode.unsupported_version
        versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert versions == {18: (0, 4)}, "only ApiVersions is listed, as Kafka answers"
        # The connection stays open: the client retries with a version we know.
        assert c.request(ApiVersionsRequest(client_software_name="future", client_software_version="9")).error_code == ErrorCode.none


def test_invalid_client_software_name_is_invalid_request(broker_process: BrokerProcess) -> None:
    with WireClient(broker_process.bootstrap_servers) as c:
        resp = c.request(ApiVersionsRequest(client_software_name="bad name!", client_software_version="1"))
        assert resp.error_code == ErrorCode.invalid_request


def test_metadata_for_an_illegal_topic_name(broker_process: BrokerProcess) -> None:
    with WireClient(broker_process.bootstrap_servers) as c:
        resp = c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name="bad/name"),),
                                         allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        assert resp.topics[0].error_code == ErrorCode.invalid_topic_exception
        resp = c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name="absent"),),
                                         allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        assert resp.topics[0].error_code == ErrorCode.unknown_topic_or_partition


def test_consumer_group_heartbeats_with_a_too_long_id_or_a_catastrophic_regex(
        broker_process: BrokerProcess) -> None:
    """ConsumerGroupHeartbeat (KIP-848): a member id too long for a record fails that heartbeat
    (UNKNOWN_SERVER_ERROR; Kafka 4.3.1 does not parse the request and closes the connection) and
    not the group; a regex that makes a backtracking engine run for hours is matched in linear
    time (Kafka's RE2J), the broker serving others meanwhile."""
    bs = broker_process.bootstrap_servers
    topic = "a" * 30  # `(.*.*)*x` against it: hours for Python's re
    make_topic(bs, topic)

    def join(member_id: str, group: str = "kip848-bad", **kw: object) -> ConsumerGroupHeartbeatRequest:
        return ConsumerGroupHeartbeatRequest(group_id=group, member_id=member_id, member_epoch=i32(0),
                                             rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                                             topic_partitions=(), **kw)

    with WireClient(bs) as c:
        too_long = c.request(join("m" * 40_000, subscribed_topic_names=(topic,)))
        assert too_long.error_code == ErrorCode.unknown_server_error
        ok = c.request(join(str(uuid.uuid4()), subscribed_topic_names=(topic,)))
        assert (ok.error_code, ok.member_epoch) == (ErrorCode.none, 2), "the group is not stuck"
        started = time.monotonic()
        regex = c.request(join(str(uuid.uuid4()), group="kip848-regex", subscribed_topic_regex="(.*.*)*x"))
        assert regex.error_code == ErrorCode.none and time.monotonic() - started < 5
        lookahead = c.request(join(str(uuid.uuid4()), group="kip848-regex", subscribed_topic_regex="(?=a)a+"))
        assert lookahead.error_code == ErrorCode.invalid_regular_expression  # not RE2J's syntax
    assert api_versions_ok(bs)
