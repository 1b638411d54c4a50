"""Values exchanged between the group coordinator and the request handlers.

The coordinator is sans-I/O: it never touches sockets or files.  It persists
through a ``GroupStore`` (records appended to ``__consumer_offsets``, with a
completion callback) and answers through callbacks or return values made of
the types below.  Kafka outcomes are ``ErrorCode`` values.
"""

from __future__ import annotations

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
    ) -> None:
        """Append (key, value) records to one partition (value None: tombstone).

        ``done`` is called exactly once, later (never re-entrantly from inside
        ``append``), with ``ErrorCode.none`` once the records are durable, or
        with the error that prevented it.
        """
        ...


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
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


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
