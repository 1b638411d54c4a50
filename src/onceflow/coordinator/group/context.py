"""What the group coordinator lends its membership and offset managers.

Theory of operation
-------------------
``GroupCoordinator`` (``coordinator.py``) is the facade the broker calls.  The
work behind it is split the way Kafka splits it (GroupCoordinator /
GroupMetadataManager in Kafka 3; GroupMetadataManager / OffsetMetadataManager
behind a coordinator shard in Kafka 4):

* ``membership.MembershipManager``: JoinGroup, SyncGroup, Heartbeat,
  LeaveGroup, rebalances and sessions with their timers, and the group
  metadata records;
* ``offsets.OffsetManager``: OffsetCommit, TxnOffsetCommit and the
  transaction markers that settle it, OffsetFetch, OffsetDelete,
  DeleteGroups, offset expiry and deleted topics;
* ``loader``: reading a ``__consumer_offsets`` partition back at start-up.

The coordinator keeps the plumbing both managers share and lends it to them
as one ``GroupContext``, built once: the groups (one dict, shared by
reference), the timers (set and cancelled by the managers, fired by the
coordinator's ``tick``), and the coordinator's own plumbing as callables:

* ``reply(callback, result)`` posts a callback to the coordinator's outbox;
  it runs when the public call (or ``tick``, or a store's ``done``) returns,
  never half-way through a change;
* ``append(partition, records, done, txn=...)`` writes records to
  ``__consumer_offsets`` through the ``GroupStore``; ``done`` runs inside the
  coordinator's API guard, so what it posts is flushed;
* ``register(answer)`` / ``unregister(op)`` / ``is_waiting(op)`` track the
  writes a client waits for: ``shutdown`` answers the registered ones with
  ``answer`` (NOT_COORDINATOR), and a ``done`` that comes later finds its
  operation gone (``unregister`` says False) and answers nothing;
* ``is_active()`` is False once the coordinator has shut down.

The context holds no state of its own: every field is the coordinator's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ...clock import Clock
from ...config import BrokerConfig
from ...protocol.errors import ErrorCode
from ...timers import Timers
from .metadata import GroupMetadata

# The group coordinator's timers (``CoordinatorRuntime.on_timer`` maps each to its handler).


@dataclass(frozen=True, slots=True)
class HeartbeatDeadline:
    """A member's session ends unless it heartbeats (or joins, or syncs) before this."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class PendingMemberDeadline:
    """A member id handed out by MEMBER_ID_REQUIRED (KIP-394) expires unless it joins with it."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class JoinDeadline:
    """A rebalance's join phase ends (rebalance timeout, or the initial delay)."""

    group_id: str


@dataclass(frozen=True, slots=True)
class SyncDeadline:
    """A group in CompletingRebalance waits no longer for its leader's SyncGroup."""

    group_id: str


@dataclass(frozen=True, slots=True)
class OffsetExpiry:
    """Committed offsets past offsets.retention.minutes are removed."""


#: A record for ``__consumer_offsets``: (key, value); value None is a tombstone.
Record = tuple[bytes, bytes | None]


class AppendRecords(Protocol):
    def __call__(
        self, partition: int, records: list[Record], done: Callable[[ErrorCode], None], *, txn: tuple[int, int] | None = None
    ) -> None:
        """``txn``: (producer id, producer epoch) of a transactional batch."""
        ...


@dataclass(frozen=True, slots=True)
class GroupContext:
    config: BrokerConfig
    clock: Clock
    #: group id -> group: the coordinator's groups, shared by reference.
    groups: dict[str, GroupMetadata]
    timers: Timers
    reply: Callable[[Callable[[Any], None], Any], None]
    append: AppendRecords
    register: Callable[[Callable[[], None]], int]
    unregister: Callable[[int], bool]
    is_waiting: Callable[[int], bool]
    is_active: Callable[[], bool]
    #: The ``__consumer_offsets`` partition of a group.
    partition_for: Callable[[str], int]

    def now(self) -> int:
        return self.clock.now_ms()

    def validate_group_status(self, group_id: str | None, allow_empty_id: bool) -> ErrorCode | None:
        # OffsetCommit/OffsetFetch/DescribeGroups/DeleteGroups accept the
        # empty group id for backwards compatibility; the other APIs do not.
        if group_id is None or (not allow_empty_id and group_id == ""):
            return ErrorCode.invalid_group_id
        if not self.is_active():
            return ErrorCode.coordinator_not_available
        return None
