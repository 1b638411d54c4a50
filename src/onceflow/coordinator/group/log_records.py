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

Groups of the KIP-848 consumer protocol (``consumer_group.py``) persist five
more kinds, Kafka 4's *coordinator records*: the group epoch
(``ConsumerGroupMetadata``, key type 3), each member's subscription
(``ConsumerGroupMemberMetadata``, 5), the target assignment's epoch
(``ConsumerGroupTargetAssignmentMetadata``, 6) and each member's share of
it (``ConsumerGroupTargetAssignmentMember``, 7), and each member's current
assignment with its epochs (``ConsumerGroupCurrentMemberAssignment``, 8).
Their keys are non-flexible, their values flexible version 0, as in Kafka
4.3.1's schemas (``ConsumerGroup*Key.json`` / ``*Value.json``), tagged
fields included (the metadata hash, the assignment timestamp, the
per-partition assignment epochs).  Keys of type 4 (the subscription
metadata of Kafka 4.0) and 16 (resolved regular expressions) are recognised
and ignored: this coordinator keeps neither.

Both keys and values start with an int16 *version*; the key version tells
the record kinds apart (0-1: offset commit, 2: group metadata, 3-8 and 16:
the consumer protocol's).  The
layout is Kafka's generated-message layout (``OffsetCommitKey.json``,
``OffsetCommitValue.json``, ``GroupMetadataKey.json``,
``GroupMetadataValue.json``), big-endian: strings are an int16 length and
UTF-8 bytes (-1: null), byte arrays an int32 length.  We write the highest
*non-flexible* versions, OffsetCommitValue v3 (Kafka 3.x's; Kafka 4.3 writes
v4, with the topic id as a tagged field) and GroupMetadataValue v3 (Kafka
4.3's too), so Kafka's own tools can read our log and we can read theirs
(``kafka-dump-log --offsets-decoder`` on our segments is a reference test).
Decoding accepts every version Kafka defines, including the flexible v4
values of KIP-915 (compact strings and tagged fields).  The primitive types
are read and written by ``coordinator.serde``.

A key of a version we do not know decodes to ``UnknownKey`` (the loader logs
and skips it, as Kafka does: it could be a leftover of an aborted upgrade).
Malformed bytes raise ``RecordDecodeError``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..serde import Reader, RecordDecodeError, UnknownKey, Writer, uvarint

log = logging.getLogger(__name__)

__all__ = [
    "ConsumerGroupKey",
    "ConsumerGroupMemberKey",
    "ConsumerMemberValue",
    "CurrentAssignmentValue",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "IgnoredKey",
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

# Kafka 4's coordinator record types (CoordinatorRecordType): the key's version.
CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_GROUP_REGULAR_EXPRESSION = 16
_GROUP_KEYS = (CONSUMER_GROUP_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA)
_MEMBER_KEYS = (CONSUMER_GROUP_MEMBER_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT)

#: topic id -> partition -> the epoch it was assigned at (Kafka 4.3's assignment epochs).
EpochAssignment = Mapping[uuid.UUID, Mapping[int, int]]
#: topic id -> partitions.
Assignment = Mapping[uuid.UUID, frozenset[int]]

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


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """A key naming a KIP-848 group: record type 3 (the group epoch) or 6 (the target assignment's epoch)."""

    record_type: int
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberKey:
    """A key naming a member: type 5 (subscription), 7 (target assignment) or 8 (current assignment)."""

    record_type: int
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class IgnoredKey:
    """A coordinator record this broker reads past (types 4 and 16)."""

    record_type: int
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerMemberValue:
    """ConsumerGroupMemberMetadataValue v0."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    """ConsumerGroupCurrentMemberAssignmentValue v0."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: EpochAssignment
    pending_revocation: EpochAssignment


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


def encode_consumer_group_key(record_type: int, group: str, member_id: str | None = None) -> bytes:
    """The key of a consumer-protocol record: ``member_id`` for types 5, 7 and 8."""
    w = Writer()
    w.int16(record_type)
    w.string(group)
    if record_type in _MEMBER_KEYS:
        if member_id is None:
            raise ValueError(f"record type {record_type} needs a member id")
        w.string(member_id)
    return w.getvalue()


def _flexible_value() -> Writer:
    w = Writer()
    w.int16(0)
    w.flexible = True
    return w


def _int64(v: int) -> bytes:
    w = Writer()
    w.int64(v)
    return w.getvalue()


def encode_consumer_group_epoch(epoch: int, metadata_hash: int) -> bytes:
    """ConsumerGroupMetadataValue: the group epoch; tag 0 the hash of the subscribed topics' metadata."""
    w = _flexible_value()
    w.int32(epoch)
    w.tagged_fields([(0, _int64(metadata_hash))] if metadata_hash else [])
    return w.getvalue()


#: Tag 0 of ConsumerGroupMemberMetadataValue (ClassicMemberMetadata, a nullable struct) holding null:
#: the member speaks the consumer protocol.  Kafka's generated code writes it although null is the
#: field's declared default, and reads a record without it as an *empty* classic metadata, which
#: makes the member one of the classic protocol (ConsumerGroupMember.useClassicProtocol).
_CONSUMER_PROTOCOL_MEMBER = [(0, uvarint(0))]


def encode_consumer_member(value: ConsumerMemberValue) -> bytes:
    """ConsumerGroupMemberMetadataValue v0, as Kafka's newConsumerGroupMemberSubscriptionRecord
    writes it: the topic names sorted, tag 0 (the classic member metadata) null."""
    w = _flexible_value()
    w.string(value.instance_id, nullable=True)
    w.string(value.rack_id, nullable=True)
    w.string(value.client_id)
    w.string(value.client_host)
    w.array_length(len(value.subscribed_topic_names))
    for name in sorted(value.subscribed_topic_names):
        w.string(name)
    w.string(value.subscribed_topic_regex, nullable=True)
    w.int32(value.rebalance_timeout_ms)
    w.string(value.server_assignor, nullable=True)
    w.tagged_fields(_CONSUMER_PROTOCOL_MEMBER)
    return w.getvalue()


def encode_target_assignment_epoch(epoch: int, timestamp_ms: int) -> bytes:
    """ConsumerGroupTargetAssignmentMetadataValue: tag 0 the time the assignment was computed."""
    w = _flexible_value()
    w.int32(epoch)
    w.tagged_fields([(0, _int64(timestamp_ms))] if timestamp_ms else [])
    return w.getvalue()


def encode_target_assignment_member(assignment: Assignment) -> bytes:
    w = _flexible_value()
    w.array_length(len(assignment))
    for topic_id, partitions in sorted(assignment.items()):
        w.uuid(topic_id)
        w.array_length(len(partitions))
        for p in sorted(partitions):
            w.int32(p)
        w.tagged_fields([])
    w.tagged_fields([])
    return w.getvalue()


def _write_epoch_assignment(w: Writer, assignment: EpochAssignment) -> None:
    w.array_length(len(assignment))
    for topic_id, epochs in sorted(assignment.items()):
        w.uuid(topic_id)
        partitions = sorted(epochs)
        w.array_length(len(partitions))
        for p in partitions:
            w.int32(p)
        tag = Writer(flexible=True)
        tag.array_length(len(partitions))
        for p in partitions:
            tag.int32(epochs[p])
        w.tagged_fields([(0, tag.getvalue())])


def encode_current_assignment(value: CurrentAssignmentValue) -> bytes:
    w = _flexible_value()
    w.int32(value.member_epoch)
    w.int32(value.previous_member_epoch)
    w.int8(value.state)
    _write_epoch_assignment(w, value.assigned)
    _write_epoch_assignment(w, value.pending_revocation)
    w.tagged_fields([])
    return w.getvalue()


# ------------------------------------------------------------------- reading


AnyKey = OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | ConsumerGroupMemberKey | IgnoredKey | UnknownKey


def decode_key(data: bytes) -> AnyKey:
    r = Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetCommitKey(r.required_string(), r.required_string(), r.int32())
    if version == 2:
        return GroupMetadataKey(r.required_string())
    if version in _GROUP_KEYS:
        return ConsumerGroupKey(version, r.required_string())
    if version in _MEMBER_KEYS:
        return ConsumerGroupMemberKey(version, r.required_string(), r.required_string())
    if version in (CONSUMER_GROUP_PARTITION_METADATA, CONSUMER_GROUP_REGULAR_EXPRESSION):
        return IgnoredKey(version, r.required_string())
    return UnknownKey(version)


def _flexible_reader(data: bytes, what: str) -> Reader:
    r = Reader(data)
    version = r.int16()
    if version != 0:
        raise RecordDecodeError(f"unknown {what} value version {version}")
    r.flexible = True
    return r


def _tagged_int64(tags: dict[int, bytes], tag: int) -> int:
    return Reader(tags[tag]).int64() if tag in tags else 0


def decode_consumer_group_epoch(data: bytes) -> tuple[int, int]:
    """(group epoch, metadata hash) of a ConsumerGroupMetadataValue."""
    r = _flexible_reader(data, "consumer group metadata")
    epoch = r.int32()
    return epoch, _tagged_int64(r.tagged_fields(), 0)


def decode_target_assignment_epoch(data: bytes) -> tuple[int, int]:
    """(assignment epoch, assignment timestamp) of a ConsumerGroupTargetAssignmentMetadataValue."""
    r = _flexible_reader(data, "target assignment metadata")
    epoch = r.int32()
    return epoch, _tagged_int64(r.tagged_fields(), 0)


def decode_consumer_member(data: bytes) -> ConsumerMemberValue:
    r = _flexible_reader(data, "consumer group member metadata")
    instance_id = r.string(nullable=True)
    rack_id = r.string(nullable=True)
    client_id = r.required_string()
    client_host = r.required_string()
    names = tuple(r.required_string() for _ in range(r.required_array_length()))
    regex = r.string(nullable=True)
    rebalance_timeout_ms = r.int32()
    assignor = r.string(nullable=True)
    r.skip_tagged_fields()  # tag 0: the classic member metadata of an online migration
    return ConsumerMemberValue(instance_id, rack_id, client_id, client_host, names, regex, rebalance_timeout_ms, assignor)


def decode_target_assignment_member(data: bytes) -> dict[uuid.UUID, frozenset[int]]:
    r = _flexible_reader(data, "target assignment member")
    out: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(r.required_array_length()):
        topic_id = r.uuid()
        out[topic_id] = frozenset(r.int32() for _ in range(r.required_array_length()))
        r.skip_tagged_fields()
    r.skip_tagged_fields()
    return out


def _read_epoch_assignment(r: Reader, default_epoch: int) -> dict[uuid.UUID, dict[int, int]]:
    """Kafka's Utils.assignmentFromTopicPartitions: a topic whose record carries no
    assignment epochs (before Kafka 4.3), or not one per partition (logged), takes the
    member epoch for each, never below 0 (a static member away is at -2)."""
    default_epoch = max(default_epoch, 0)
    out: dict[uuid.UUID, dict[int, int]] = {}
    for _ in range(r.required_array_length()):
        topic_id = r.uuid()
        partitions = [r.int32() for _ in range(r.required_array_length())]
        tags = r.tagged_fields()
        epochs: list[int] | None = None
        if 0 in tags:
            t = Reader(tags[0], flexible=True)
            n = t.array_length(nullable=True)
            epochs = None if n is None else [t.int32() for _ in range(n)]
        if epochs is not None and len(epochs) != len(partitions):
            log.error("%d assignment epochs for %d partitions of topic %s; using epoch %d for all", len(epochs),
                      len(partitions), topic_id, default_epoch)
            epochs = None
        out[topic_id] = dict(zip(partitions, epochs if epochs is not None else [default_epoch] * len(partitions),
                                 strict=True))
    return out


def decode_current_assignment(data: bytes) -> CurrentAssignmentValue:
    r = _flexible_reader(data, "current member assignment")
    member_epoch = r.int32()
    previous = r.int32()
    state = r.int8()
    assigned = _read_epoch_assignment(r, member_epoch)
    pending = _read_epoch_assignment(r, member_epoch)
    r.skip_tagged_fields()
    return CurrentAssignmentValue(member_epoch, previous, state, assigned, pending)


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
