"""What the group coordinator lends its membership and offset managers.

Theory of operation
-------------------
``GroupCoordinator`` (``coordinator.py``) is the facade the broker calls;
how the work behind it is split between ``membership.MembershipManager`` and
``offsets.OffsetManager`` is told there.

The coordinator keeps the plumbing both managers share and lends it to them
as one ``GroupContext``, built once: the groups (one dict, shared by
reference), the timers (set and cancelled by the managers, fired by the
coordinator's ``tick``), and the coordinator's own plumbing as callables.
``reply``, ``register``, ``unregister``, ``is_waiting`` and the timers are
the coordinator runtime's, whose rules they follow (``coordinator/runtime.py``:
when a posted callback runs, how shutdown answers a registered write);
``is_active()`` is its ``active``.  ``append(partition, records, done,
txn=...)`` writes records to ``__consumer_offsets`` through the
``GroupStore``; ``done`` runs inside the coordinator's API guard.

The context holds no state of its own: every field is the coordinator's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ...clock import Clock
from ...config import BrokerConfig
from ...protocol.errors import ErrorCode
from ...timers import Timers
from .metadata import GroupMetadata
from .types import TopicImage

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
class ConsumerSessionDeadline:
    """A KIP-848 member is fenced unless it heartbeats before this (group.consumer.session.timeout.ms)."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerRebalanceDeadline:
    """A KIP-848 member is fenced unless it has revoked what it was asked to by this (its rebalance timeout)."""

    group_id: str
    member_id: str


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
    #: The broker's topics now, by name (KIP-848 groups assign topic ids).
    topics: Callable[[], Mapping[str, TopicImage]] = dict

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
