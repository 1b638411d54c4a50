"""The records of ``__consumer_offsets``, byte for byte as Kafka writes them.

Theory of operation: the group coordinator persists two kinds of records in
the compacted ``__consumer_offsets`` topic, and rebuilds its whole state from
them at start-up (last value per key wins, a ``None`` value is a tombstone):

* an *offset commit*: key ``OffsetCommitKey(group, topic, partition)``,
  value ``OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp)``;
* a *group metadata* record: key ``GroupMetadataKey(group)``, value
  ``GroupMetadataValue`` (protocol type, generation, protocol, leader, the
  time of the last state change and every member with its subscription and
  assignment) -- written when a generation's assignment is persisted and
  when a group becomes empty.

Both keys and values start with an int16 *version*; the key version tells
the two record kinds apart (0-1: offset commit, 2: group metadata).  The
layout is Kafka's generated-message layout (``OffsetCommitKey.json``,
``OffsetCommitValue.json``, ``GroupMetadataKey.json``,
``GroupMetadataValue.json``), big-endian: strings are an int16 length and
UTF-8 bytes (-1: null), byte arrays an int32 length.  We write the highest
*non-flexible* versions, as Kafka 3.x/4.x does (OffsetCommitValue v3,
GroupMetadataValue v3), so Kafka's own tools can read our log and we can
read theirs.  Decoding accepts every version Kafka defines, including the
flexible v4 values of KIP-915 (compact strings and tagged fields).  The
primitive types are read and written by ``coordinator.serde``.

A key of a version we do not know decodes to ``UnknownKey`` (the loader logs
and skips it, as Kafka does: it could be a leftover of an aborted upgrade).
Malformed bytes raise ``RecordDecodeError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..serde import Reader, RecordDecodeError, UnknownKey, Writer

__all__ = [
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadataValue",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "RecordDecodeError",
    "UnknownKey",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
]

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

# ---------------------------------------------------------------- dataclasses


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    #: Only version 1 carries it (the old per-commit retention); -1 otherwise.
    expire_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int = -1
    members: tuple[MemberMetadataValue, ...] = field(default_factory=tuple)


# ------------------------------------------------------------------- writing


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    w = Writer()
    w.int16(OFFSET_COMMIT_KEY_VERSION)
    w.string(key.group)
    w.string(key.topic)
    w.int32(key.partition)
    return w.getvalue()


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    w = Writer()
    w.int16(GROUP_METADATA_KEY_VERSION)
    w.string(key.group)
    return w.getvalue()


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    """Version 3: offset, leader epoch, metadata, commit timestamp."""
    w = Writer()
    w.int16(OFFSET_COMMIT_VALUE_VERSION)
    w.int64(value.offset)
    w.int32(value.leader_epoch)
    w.string(value.metadata if value.metadata is not None else "")
    w.int64(value.commit_timestamp_ms)
    return w.getvalue()


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    """Version 3 (group instance ids of KIP-345 included)."""
    w = Writer()
    w.int16(GROUP_METADATA_VALUE_VERSION)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol, nullable=True)
    w.string(value.leader, nullable=True)
    w.int64(value.current_state_timestamp_ms)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        w.string(m.group_instance_id, nullable=True)
        w.string(m.client_id)
        w.string(m.client_host)
        w.int32(m.rebalance_timeout_ms)
        w.int32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.getvalue()


# ------------------------------------------------------------------- reading


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | UnknownKey:
    r = Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetCommitKey(r.required_string(), r.required_string(), r.int32())
    if version == 2:
        return GroupMetadataKey(r.required_string())
    return UnknownKey(version)


def decode_offset_commit_value(data: bytes | None) -> OffsetCommitValue | None:
    """Versions 0-4; ``None`` (a tombstone) decodes to ``None``."""
    if data is None:
        return None
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordDecodeError(f"unknown offset commit value version {version}")
    r.flexible = version >= 4
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.required_string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    r.skip_tagged_fields()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def decode_group_metadata_value(data: bytes | None) -> GroupMetadataValue | None:
    """Versions 0-4; ``None`` (a tombstone) decodes to ``None``."""
    if data is None:
        return None
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordDecodeError(f"unknown group metadata value version {version}")
    r.flexible = version >= 4
    protocol_type = r.required_string()
    generation = r.int32()
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    current_state_timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.required_array_length()):
        member_id = r.required_string()
        group_instance_id = r.string(nullable=True) if version >= 3 else None
        client_id = r.required_string()
        client_host = r.required_string()
        rebalance_timeout = r.int32() if version >= 1 else None
        session_timeout = r.int32()
        subscription = r.required_bytes()
        assignment = r.required_bytes()
        r.skip_tagged_fields()
        members.append(
            MemberMetadataValue(
                member_id=member_id,
                group_instance_id=group_instance_id,
                client_id=client_id,
                client_host=client_host,
                # Version 0 had no rebalance timeout: Kafka uses the session timeout.
                rebalance_timeout_ms=session_timeout if rebalance_timeout is None else rebalance_timeout,
                session_timeout_ms=session_timeout,
                subscription=subscription,
                assignment=assignment,
            )
        )
    r.skip_tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members))
