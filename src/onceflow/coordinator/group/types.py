"""Values exchanged between the group coordinator and the request handlers.

The coordinator is sans-I/O: it never touches sockets or files.  It persists
through a ``GroupStore`` (records appended to ``__consumer_offsets``, with a
completion callback) and answers through callbacks or return values made of
the types below.  Kafka outcomes are ``ErrorCode`` values.

Transactional offset commits (TxnOffsetCommit, KIP-98) are appended through
the same ``GroupStore.append``, as a *transactional batch* of the committing
producer (``producer_id``/``producer_epoch``/``transactional=True``): the
partition log checks the producer's epoch, and the COMMIT or ABORT marker
the transaction coordinator later writes into the same partition decides
whether the offsets count.  At start-up the store hands the coordinator the
partition's contents as ``StoredRecord``/``StoredMarker`` entries, in log
order, so that it can replay those decisions.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ...protocol.errors import ErrorCode

TopicPartition = tuple[str, int]

NO_GENERATION = -1
NO_LEADER_EPOCH = -1
UNKNOWN_MEMBER_ID = ""


class GroupStore(Protocol):
    """Where the coordinator's records go: the partitions of ``__consumer_offsets``."""

    @property
    def num_partitions(self) -> int: ...

    def append(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        done: Callable[[ErrorCode], None],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> None:
        """Append (key, value) records to one partition (value None: tombstone).

        ``done`` is called exactly once, later (never re-entrantly from inside
        ``append``), with ``ErrorCode.none`` once the records are durable, or
        with the error that prevented it (for a transactional batch, also the
        log's verdict on the producer: e.g. INVALID_PRODUCER_EPOCH).

        The coordinator relies on one ordering property: on one partition,
        successful appends are acknowledged in the order in which they are
        written to the log (so the order of the ``done(none)`` calls is the
        log order; the coordinator uses it where Kafka compares log offsets).

        ``producer_id``/``producer_epoch``/``transactional``: a transactional
        offset commit is written as a transactional batch of that producer.
        The coordinator passes these keyword arguments only for transactional
        appends; plain appends are made with the three positional arguments.
        """
        ...


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record read back from a ``__consumer_offsets`` partition (for loading).

    ``producer_id``/``transactional`` come from the header of the record's
    batch: a transactional offset commit counts only once a COMMIT marker of
    the same producer follows it in the log.
    """

    key: bytes
    value: bytes | None
    producer_id: int = -1
    transactional: bool = False


@dataclass(frozen=True, slots=True)
class StoredMarker:
    """A transaction marker (control batch) read back from a ``__consumer_offsets`` partition."""

    producer_id: int
    commit: bool


#: What ``GroupCoordinator.load_partition`` accepts, in log order.  A plain
#: ``(key, value)`` tuple is a non-transactional record.
StoredEntry = StoredRecord | StoredMarker | tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = UNKNOWN_MEMBER_ID
    #: Only the leader receives the member list (with their subscription metadata).
    members: list[JoinMember] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class LeaveMember:
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: ErrorCode
    #: One entry per member asked to leave (LeaveGroup v3+ batches them).
    members: list[tuple[LeaveMember, ErrorCode]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    error: ErrorCode
    #: Kafka's state names: "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead".
    state: str = "Dead"
    protocol_type: str = ""
    protocol: str = ""
    members: list[MemberDescription] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TopicImage:
    """What the group coordinator needs to know of a topic (KIP-848 assignments name topics by id)."""

    topic_id: uuid.UUID
    num_partitions: int


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    #: Kafka's group type (ListGroups v5, KIP-848).
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str | None = ""
    commit_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    """One partition's answer in OffsetFetch: offset -1 means no committed offset."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str | None = ""
    error: ErrorCode = ErrorCode.none


#: (topic id, topic name, partitions) as ConsumerGroupDescribe lists an assignment.
DescribedPartitions = tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ConsumerMemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: DescribedPartitions
    target_assignment: DescribedPartitions


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """One group of ConsumerGroupDescribe (KIP-848)."""

    group_id: str
    error: ErrorCode
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[ConsumerMemberDescription, ...] = ()
