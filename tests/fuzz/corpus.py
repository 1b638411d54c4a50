"""What the fuzzers share: seed requests, an in-memory transport, an ERROR-log catcher and byte
mutators.

Seeds come two ways:

* ``corpus``: a hand-written request of each of the APIs clients use most, against one topic
  (what ``test_fuzz_protocol`` started with);
* ``every_request``: one request of *every* supported API at *every* supported version, built
  from kio's schemas with plausible values (a topic that exists, a group, a record batch...),
  so a fuzzer starts from bytes each decoder accepts and can reach every handler.

Requests that would destroy data (DeleteTopics, CreatePartitions, AlterConfigs...) name
``OTHER_TOPIC`` (and a random topic id), never the fuzzed topic: the fuzzers check that the
fuzzed topic's stored bytes survive.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import random
import struct
import uuid
from typing import Any

from kio.index import load_request_schema
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
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_field_tag
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from onceflow.protocol import apis
from onceflow.records.builder import build_batch
from tests.support.wire import encode_request

TOPIC = "fuzzed"
#: The topic requests that delete or reshape data name instead of ``TOPIC``.
OTHER_TOPIC = "fz-other"
SHORT = i32Timedelta.parse(datetime.timedelta(milliseconds=10))
TIMESTAMP = 1_700_000_000_000


def corpus(topic_id: uuid.UUID) -> list[bytes]:
    """Hand-written requests of the APIs clients use most, against ``TOPIC``."""
    batch = Records(build_batch([(b"k", b"v")], TIMESTAMP))
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
                                                                      timestamp=i64(TIMESTAMP)),)),)),
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


# -- one request of every API and version, from the schemas ----------------------

#: APIs whose requests delete or reshape what they name: they get ``OTHER_TOPIC``.
_DESTRUCTIVE = {apis.DELETE_TOPICS, apis.CREATE_PARTITIONS, apis.ALTER_CONFIGS, apis.INCREMENTAL_ALTER_CONFIGS,
                apis.CREATE_TOPICS, apis.WRITE_TXN_MARKERS, apis.DELETE_RECORDS}


@dataclasses.dataclass
class _Context:
    topic: str
    topic_id: uuid.UUID
    records: bytes


def _string(name: str, ctx: _Context) -> str:
    n = name.lower()
    if "topic" in n or n in ("name", "resource_name"):
        return ctx.topic
    if "transactional" in n:
        return "txn-1"
    if "group" in n or n in ("key", "coordinator_keys"):
        return "g1"
    if "member" in n:
        return "m"
    if n == "protocol_type":
        return "consumer"
    if "protocol" in n:
        return "range"
    if "state" in n:
        return "Stable"
    if n == "value":
        return "1000"
    if "rack" in n or "cluster" in n:
        return ""
    return "fz"


def _integer(name: str) -> int:
    n = name.lower()
    if "max_bytes" in n or "partition_max_bytes" in n:
        return 1 << 20
    if "min_bytes" in n:
        return 1
    if n == "acks":
        return 1
    if "producer_id" in n or "epoch" in n or "replica_id" in n or n == "timestamp" or "duration" in n:
        return -1
    if "isolation" in n:
        return 1
    if n in ("resource_type", "resource_type_filter"):
        return 2  # TOPIC
    if "pattern_type" in n or n == "permission_type":
        return 3  # LITERAL, ALLOW: an ACL request with UNKNOWN (0) elements is one Kafka cannot parse
    if n == "operation":
        return 3  # the ACL operation READ (IncrementalAlterConfigs' is ``config_operation``: SET, 0)
    if "num_partitions" in n or "replication_factor" in n or n == "count":
        return 1
    if "operation" in n or "config_operation" in n:
        return 0
    return 0


#: Arrays left empty: CreateTopics with both a partition count and an assignment, or with an
#: unknown config, would be refused, and the topic it names never created.
_EMPTY_ARRAYS = {"assignments", "configs"}


def _field_value(field: dataclasses.Field[Any], ctx: _Context) -> Any:
    kind = classify_field(field)
    if isinstance(kind, EntityTupleField) and field.name in _EMPTY_ARRAYS:
        return ()
    if isinstance(kind, (EntityField, EntityTupleField)):
        value = _build(kind.type_, ctx)
        return (value,) if kind.is_array else value
    kafka_type = field.metadata["kafka_type"]
    name = field.name
    if kafka_type == "string":
        one: Any = _string(name, ctx)
    elif kafka_type in ("int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "uint8"):
        one = _integer(name)
    elif kafka_type == "bool":
        one = name.startswith("include")
    elif kafka_type in ("timedelta_i32", "timedelta_i64"):
        one = kind.type_.parse(datetime.timedelta(milliseconds=10 if "wait" in name or name == "timeout" else 10_000))
    elif kafka_type == "datetime_i64":
        one = kind.type_.parse(datetime.datetime.fromtimestamp(TIMESTAMP / 1000, datetime.UTC))
    elif kafka_type == "uuid":
        one = ctx.topic_id if "topic" in name else uuid.UUID(int=0)
    elif kafka_type == "records":
        one = Records(ctx.records)
    elif kafka_type == "bytes":
        one = b"\x00\x01fz"
    elif kafka_type == "float64":
        one = 1.0
    else:
        raise AssertionError(f"no sample value for kafka_type {kafka_type!r} ({name})")
    return (one,) if kind.is_array else one


def _build(cls: type, ctx: _Context) -> Any:
    values = {}
    for field in dataclasses.fields(cls):
        if get_field_tag(field) is not None and (field.default is not dataclasses.MISSING
                                                 or field.default_factory is not dataclasses.MISSING):
            continue  # tagged fields keep their defaults
        values[field.name] = _field_value(field, ctx)
    return cls(**values)


def every_request_body(topic_id: uuid.UUID, topic: str = TOPIC) -> list[Any]:
    """One request body (a kio entity) of every supported API at every supported version."""
    batch = build_batch([(b"k", b"v"), (None, b"w")], TIMESTAMP)
    bodies = []
    for api_key, (low, high) in sorted(apis.SUPPORTED.items()):
        destructive = api_key in _DESTRUCTIVE
        ctx = _Context(OTHER_TOPIC if destructive else topic, uuid.UUID(int=0xF2) if destructive else topic_id, batch)
        for version in range(low, high + 1):
            bodies.append(_build(load_request_schema(api_key, version), ctx))
    return bodies


def every_request(topic_id: uuid.UUID, topic: str = TOPIC) -> list[bytes]:
    """One request frame (size prefix included) of every supported API at every supported version."""
    return [encode_request(body, i + 1, client_id="fuzz") for i, body in enumerate(every_request_body(topic_id, topic))]


# -- the in-memory connection -----------------------------------------------------


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


async def settle(proto: Any, timeout_s: float) -> None:
    """On the broker's loop: wait until no request of the connection ``proto`` (a
    ``KafkaProtocol``) is in progress any more, for at most ``timeout_s``.  Each wait ends when
    one of them finishes, not after a fixed sleep."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while proto._slots and (pending := [s.future for s in proto._slots if s.future is not None and not s.future.done()]):
        if loop.time() >= deadline:
            return
        await asyncio.wait(pending, timeout=deadline - loop.time(), return_when=asyncio.FIRST_COMPLETED)


class ErrorLog(logging.Handler):
    """Collects every record logged at ERROR or above (message and traceback)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))


def quiet_onceflow_logs() -> ErrorLog:
    """Keep onceflow's log to ERROR and above (one WARNING per refused connection or corrupt
    file otherwise), collected by the returned handler."""
    errors = ErrorLog()
    onceflow_log = logging.getLogger("onceflow")
    onceflow_log.addHandler(errors)
    onceflow_log.setLevel(logging.ERROR)
    return errors


# -- mutations ------------------------------------------------------------------


def split_frames(stream: bytes) -> list[bytes]:
    """The whole size-prefixed frames at the start of ``stream`` (prefix included)."""
    frames, pos = [], 0
    while pos + 4 <= len(stream):
        (size,) = struct.unpack_from(">i", stream, pos)
        if size < 0 or pos + 4 + size > len(stream):
            break
        frames.append(stream[pos : pos + 4 + size])
        pos += 4 + size
    return frames


def reframe(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


_INTERESTING = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


def mutate_bytes(data: bytes, rng: random.Random, rounds: int | None = None) -> bytes:
    """A few random edits of ``data``: bit flips, interesting integers, varint bytes,
    insertions, deletions, truncations, duplicated spans."""
    out = bytearray(data)
    for _ in range(rounds if rounds is not None else rng.randint(1, 4)):
        if not out:
            out += rng.randbytes(rng.randint(1, 8))
            continue
        pos = rng.randrange(len(out))
        kind = rng.randrange(8)
        if kind == 0:  # flip one bit
            out[pos] ^= 1 << rng.randrange(8)
        elif kind == 1:  # a random byte
            out[pos] = rng.randrange(256)
        elif kind == 2:  # an interesting 16/32-bit integer, big-endian as Kafka's
            width = rng.choice((2, 4))
            out[pos : pos + width] = (rng.choice(_INTERESTING) & ((1 << 8 * width) - 1)).to_bytes(width, "big")
        elif kind == 3:  # a varint-shaped run: continuation bits set, or a huge/negative zig-zag value
            out[pos : pos + rng.randint(1, 5)] = rng.choice((b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80", b"\x01", b"\xfe\xff\xff\xff\x0f"))
        elif kind == 4:  # insert
            out[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif kind == 5:  # delete
            del out[pos : pos + rng.randint(1, 8)]
        elif kind == 6:  # truncate
            del out[pos:]
        else:  # duplicate a span
            end = min(len(out), pos + rng.randint(1, 32))
            out[pos:pos] = out[pos:end]
    return bytes(out)


# -- record batches ---------------------------------------------------------------

_CRC_START = 21


def with_crc(batch: bytes | bytearray) -> bytes:
    """``batch`` with its CRC32C recomputed (as a client would compute it), when it is long enough."""
    from crc32c import crc32c

    out = bytearray(batch)
    if len(out) >= _CRC_START:
        struct.pack_into(">I", out, 17, crc32c(bytes(out[_CRC_START:])))
    return bytes(out)


def compressed(batch: bytes, codec: int) -> bytes:
    """``batch`` with its records compressed by ``codec`` (1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
    import gzip

    import cramjam

    records = batch[61:]
    packed = {1: lambda b: gzip.compress(b, mtime=0), 2: lambda b: bytes(cramjam.snappy.compress_raw(b)),
              3: lambda b: bytes(cramjam.lz4.compress(b)), 4: lambda b: bytes(cramjam.zstd.compress(b))}[codec](records)
    out = bytearray(batch[:61] + packed)
    struct.pack_into(">i", out, 8, len(out) - 12)
    attributes = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, (attributes & ~0x07) | codec)
    return with_crc(out)


def sample_batches(timestamp_ms: int = TIMESTAMP) -> list[bytes]:
    """Valid produce payloads of many shapes: plain, keyed, several records, idempotent,
    transactional, every codec."""
    plain = build_batch([(b"k", b"v")], timestamp_ms)
    several = build_batch([(b"key-%d" % i, b"value-%d" % i * 3) for i in range(5)], timestamp_ms,
                          timestamps=[timestamp_ms + i for i in range(5)])
    out = [
        plain,
        several,
        build_batch([(None, b"")], timestamp_ms),
        build_batch([(None, None)], timestamp_ms),
        build_batch([(b"a", b"b"), (b"c", b"d")], timestamp_ms, producer_id=1000, producer_epoch=0, base_sequence=0),
        build_batch([(b"t", b"x")], timestamp_ms, producer_id=1001, producer_epoch=0, base_sequence=0, transactional=True),
    ]
    out += [compressed(several, codec) for codec in (1, 2, 3, 4)]
    return out
