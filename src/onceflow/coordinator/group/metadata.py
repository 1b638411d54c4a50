"""One classic consumer group: its state machine, members and committed offsets.

Theory of operation: a group moves through five states (``GroupState``).
The legal moves are data -- ``VALID_PREVIOUS_STATES``, copied from Kafka's
GroupMetadata.scala, drawn in ``docs/state-diagrams.md`` -- and every move
goes through ONE choke point, ``GroupMetadata.transition_to``, which raises
``IllegalGroupTransition`` on an illegal move and stamps the time of the
change (offset expiry counts from the moment a group became Empty, Kafka
2.1+ / KIP-211).

Nothing in this module does I/O, reads a clock or fires a timer: it is the
bookkeeping the coordinator drives (membership in ``membership.py``,
offsets in ``offsets.py``, loading in ``loader.py``).  Waiting requests
are plain callbacks parked on a member (``join_callbacks`` while the group
gathers members, ``sync_callbacks`` while it waits for the leader's
assignment); ``take_join_callbacks``/``take_sync_callbacks`` hand them back
to the coordinator exactly once, which answers them.

Members are identified by ``member_id``.  Static members (KIP-345) also have
a ``group_instance_id`` that survives restarts; ``static_members`` maps it to
the member id currently holding it.  *Pending* members (KIP-394) were handed
a member id with MEMBER_ID_REQUIRED and have not joined with it yet.

Committed offsets live in ``GroupOffsets``: the committed table (with the
acknowledgement sequence of the record behind each offset, which orders
commits the way Kafka's log offsets do), the plain commits that are being
written (``pending``) and the transactional commits awaiting their
transaction's marker, per producer id (``pending_transactional``).  A
transactional commit is a ``PendingTxnOffset``: prepared when the TxnOffsetCommit
is accepted (its append in flight), acknowledged (its record is in the log),
then committed or dropped with its whole producer slot when the marker comes
(``complete_pending_txn_offset_commit``).  Committed offsets are the only
ones OffsetFetch returns; any pending entry for a partition makes a
``require_stable`` fetch answer UNSTABLE_OFFSET_COMMIT (``has_pending``).
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from ...protocol.errors import ErrorCode
from ..transitions import IllegalTransition, check_transition
from . import topic_regex
from .consumer_group import ConsumerGroup
from .types import (
    GroupDescription,
    GroupListing,
    JoinMember,
    JoinResult,
    MemberDescription,
    OffsetAndMetadata,
    SyncResult,
    TopicPartition,
)

CONSUMER_PROTOCOL_TYPE = "consumer"

JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


class GroupState(Enum):
    """The states of a classic group (Kafka's names are the values)."""

    #: No members, but the group lingers until its offsets expire.  Also the
    #: state of "simple" groups that only use Kafka to store offsets.
    #: in:  PreparingRebalance (the rebalance ended with no member left).
    #: out: PreparingRebalance (a member joins); Dead (offsets all expired or
    #:      deleted, DeleteGroups, unload).
    EMPTY = "Empty"

    #: Gathering members: join requests are parked until every known member
    #: has rejoined or the rebalance timeout expires; heartbeats and syncs get
    #: REBALANCE_IN_PROGRESS; commits of the current generation are accepted.
    #: in:  Empty (first join), CompletingRebalance / Stable (a member joins,
    #:      changes its metadata, leaves or fails).
    #: out: CompletingRebalance (join phase done, members left); Empty (no
    #:      member left); Dead (unload).
    PREPARING_REBALANCE = "PreparingRebalance"

    #: Join responses sent; waiting for the leader's SyncGroup with the
    #: assignment.  Follower syncs are parked; commits get REBALANCE_IN_PROGRESS.
    #: in:  PreparingRebalance.
    #: out: Stable (leader's assignment persisted); PreparingRebalance (join
    #:      with new metadata, leave, failure, storage error); Dead (unload).
    COMPLETING_REBALANCE = "CompletingRebalance"

    #: Assignment in place: heartbeats answered normally, syncs answered at
    #: once with the member's assignment.
    #: in:  CompletingRebalance.
    #: out: PreparingRebalance (leader rejoins, a follower's metadata changes,
    #:      a member leaves or fails); Dead (unload).
    STABLE = "Stable"

    #: The group is gone (deleted, expired, unloaded); nothing is answered
    #: from it any more.
    #: in:  any state, including Dead.
    #: out: none.
    DEAD = "Dead"

    @property
    def kafka_name(self) -> str:
        return self.value

    def __str__(self) -> str:
        return self.value

    @classmethod
    def from_kafka_name(cls, name: str) -> GroupState:
        """Case-insensitive, as ListGroups' states filter is."""
        lowered = name.lower()
        for state in cls:
            if state.value.lower() == lowered:
                return state
        raise ValueError(f"unknown group state {name!r}")


#: Kafka's ``validPreviousStates`` (GroupMetadata.scala), verbatim.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
            GroupState.DEAD,
        }
    ),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


class IllegalGroupTransition(IllegalTransition):
    """A state change ``VALID_PREVIOUS_STATES`` forbids: a coordinator bug."""

    def __init__(self, group_id: str, current: GroupState, target: GroupState) -> None:
        allowed = ", ".join(sorted(s.value for s in VALID_PREVIOUS_STATES[target]))
        super().__init__(
            f"group {group_id!r} should be in one of [{allowed}] before moving to {target.value}, "
            f"but it is {current.value}"
        )
        self.group_id = group_id
        self.current = current
        self.target = target


def decode_consumer_subscription_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of a ConsumerProtocolSubscription, or None if it does not parse.

    Every version starts with int16 version, then the v0 prefix: an int32
    count and that many int16-length strings (the rest -- user data, owned
    partitions, rack -- is ignored, as Kafka does by reading it "with V0").
    """
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        if count < 0:
            return None
        topics = set()
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if n < 0 or pos + n > len(metadata):
                return None
            topics.add(bytes(metadata[pos : pos + n]).decode("utf-8"))
            pos += n
        return frozenset(topics)
    except (struct.error, UnicodeDecodeError):
        return None


@dataclass(eq=False)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    #: (protocol name, metadata) in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    #: Joined but never received a join response: its join times out after
    #: NEW_MEMBER_JOIN_TIMEOUT_MS instead of being protected by the rebalance.
    is_new: bool = False
    #: Parked JoinGroup / SyncGroup requests.  Normally at most one each; a
    #: client that retried after a timeout can leave two, both answered.
    join_callbacks: list[JoinCallback] = field(default_factory=list)
    sync_callbacks: list[SyncCallback] = field(default_factory=list)
    #: When the member is expired unless it shows signs of life (set by the coordinator).
    session_deadline_ms: int | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return bool(self.join_callbacks)

    @property
    def is_awaiting_sync(self) -> bool:
        return bool(self.sync_callbacks)

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise ValueError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, same metadata bytes."""
        if len(protocols) != len(self.protocols):
            return False
        return all(n1 == n2 and bytes(m1) == bytes(m2) for (n1, m1), (n2, m2) in zip(protocols, self.protocols, strict=True))

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(eq=False, slots=True)
class PendingTxnOffset:
    """One transactional offset commit (one producer, one partition) awaiting
    its transaction's outcome.  Compared by identity: the coordinator's
    acknowledgement callback holds the very entry it wrote."""

    offset: OffsetAndMetadata
    #: Where its record is in the log: the coordinator's acknowledgement
    #: sequence (or the load position).  None while the append is in flight.
    seq: int | None = None
    #: The append failed: the record is not in the log.
    failed: bool = False
    #: The same producer's earlier entry for the same partition that this one
    #: superseded while this one's append was in flight.  That earlier record
    #: is in the log, in the same transaction: if this append fails, it counts
    #: again.  Cut once this append succeeds.
    replaced: PendingTxnOffset | None = None

    @property
    def appended(self) -> bool:
        return self.seq is not None

    def fallback(self) -> PendingTxnOffset | None:
        """The newest superseded entry whose append did not fail."""
        entry = self.replaced
        while entry is not None and entry.failed:
            entry = entry.replaced
        return entry


@dataclass
class GroupOffsets:
    """Committed offsets of one group, and those on their way to the log.

    Ordering: Kafka keeps, with every committed offset, the log offset of the
    record it came from, and a committed transaction only installs an offset
    whose record is *newer* than the one behind the committed offset (a plain
    commit written after the transactional one wins even though the
    transaction commits later).  The store's ``done`` does not report log
    offsets, so ``committed_seq`` holds the coordinator's *acknowledgement
    sequence* instead: the store acknowledges the appends of one partition in
    log order, and a group lives on one partition, so comparing sequences
    compares log positions.  When loading, the sequence is the position of
    the record in the replayed partition.
    """

    committed: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    #: Latest commit per partition that was appended but not yet acknowledged.
    pending: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    #: producer id -> partition -> transactional commit awaiting the
    #: transaction's COMMIT/ABORT marker (in flight or already in the log).
    pending_transactional: dict[int, dict[TopicPartition, PendingTxnOffset]] = field(default_factory=dict)
    #: Transactional commits whose transaction committed while their own append
    #: was still unacknowledged: committed when the acknowledgement arrives.
    committing_transactional: dict[TopicPartition, list[PendingTxnOffset]] = field(default_factory=dict)
    #: The sequence of the record behind each committed offset (see above);
    #: missing: unknown, older than any record.
    committed_seq: dict[TopicPartition, int] = field(default_factory=dict)

    def has_pending(self, tp: TopicPartition) -> bool:
        """Whether a fetch with require_stable must answer UNSTABLE_OFFSET_COMMIT."""
        return (
            tp in self.pending
            or tp in self.committing_transactional
            or any(tp in per_producer for per_producer in self.pending_transactional.values())
        )

    def has_any(self) -> bool:
        return bool(self.committed or self.pending or self.pending_transactional or self.committing_transactional)

    def partitions(self) -> set[TopicPartition]:
        """Every partition with a committed or in-flight offset."""
        tps = set(self.committed) | set(self.pending) | set(self.committing_transactional)
        for per_producer in self.pending_transactional.values():
            tps |= set(per_producer)
        return tps

    def set_committed(self, tp: TopicPartition, offset: OffsetAndMetadata, seq: int | None) -> bool:
        """Install ``offset`` unless the committed one comes from a newer record.

        ``seq`` None: position unknown (install unconditionally).
        """
        if seq is not None:
            current = self.committed_seq.get(tp)
            if tp in self.committed and current is not None and current >= seq:
                return False
            self.committed_seq[tp] = seq
        else:
            self.committed_seq.pop(tp, None)
        self.committed[tp] = offset
        return True

    def drop_committed(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        self.committed_seq.pop(tp, None)
        return self.committed.pop(tp, None)


class GroupMetadata:
    """A group's membership, protocol, generation and offsets."""

    def __init__(self, group_id: str, now_ms: int, state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self._state = state
        #: When the group last changed state (None: unknown, an old record).
        self.current_state_timestamp_ms: int | None = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        #: group.instance.id -> member id (KIP-345).
        self.static_members: dict[str, str] = {}
        #: Member ids handed out with MEMBER_ID_REQUIRED, not joined yet (KIP-394).
        self.pending_members: set[str] = set()
        #: Members of this generation that have not sent their SyncGroup yet.
        self.pending_sync_members: set[str] = set()
        #: Set when a member joins during the first rebalance (InitialDelayedJoin).
        self.new_member_added = False
        #: For consumer groups, the topics the members subscribe to (None: unknown).
        self.subscribed_topics: frozenset[str] | None = None
        self.offsets = GroupOffsets()
        #: Set for a group of the KIP-848 consumer protocol (Kafka's group
        #: type "consumer"): its membership lives there, and the classic
        #: fields above stay empty (state Empty, generation 0).
        self.consumer: ConsumerGroup | None = None
        self._protocol_counts: Counter[str] = Counter()
        self._num_awaiting_join = 0

    # ------------------------------------------------------------ state

    @property
    def state(self) -> GroupState:
        return self._state

    def is_in(self, *states: GroupState) -> bool:
        return self._state in states

    @property
    def group_type(self) -> str:
        """Kafka's group type (ListGroups v5, KIP-848): "consumer" or "classic"."""
        return "classic" if self.consumer is None else "consumer"

    def is_empty(self) -> bool:
        """No member of either protocol (Kafka's Group.isEmpty)."""
        return self._state is GroupState.EMPTY and (self.consumer is None or not self.consumer.members)

    def become_consumer_group(self, consumer: ConsumerGroup, now_ms: int) -> None:
        """An empty group (new, or classic) turns into a KIP-848 consumer group; its offsets stay."""
        if self.members or self._state is not GroupState.EMPTY:
            raise RuntimeError(f"group {self.group_id} has classic members: it cannot become a consumer group")
        self.consumer = consumer
        self.protocol_type = CONSUMER_PROTOCOL_TYPE
        self.protocol_name = None
        self.generation_id = 0
        self.leader_id = None
        self.subscribed_topics = None
        self.current_state_timestamp_ms = now_ms

    def become_classic_group(self, now_ms: int) -> None:
        """An empty consumer group turns back into a classic one (a classic JoinGroup arrived)."""
        self.consumer = None
        self.protocol_type = None
        self.current_state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self._state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        """The one place the state changes."""
        check_transition(VALID_PREVIOUS_STATES, self._state, target,
                         lambda current, wanted: IllegalGroupTransition(self.group_id, current, wanted))
        self._state = target
        self.current_state_timestamp_ms = now_ms

    # ------------------------------------------------------------ members

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def num_awaiting_join(self) -> int:
        return self._num_awaiting_join

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def add(self, member: MemberMetadata, callback: JoinCallback | None = None) -> None:
        if member.member_id in self.members:
            raise RuntimeError(f"member {member.member_id} is already in group {self.group_id}")
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(
                    f"static member {member.group_instance_id} cannot be added to group "
                    f"{self.group_id}: it is already a member"
                )
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._protocol_counts.update(member.protocol_names())
        if callback is not None:
            self._add_join_callback(member, callback)
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        """Forget a member (or a pending member id).  Parked callbacks stay on
        the returned member: the caller answers them."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self._protocol_counts.subtract(member.protocol_names())
            self._protocol_counts = +self._protocol_counts
            if member.is_awaiting_join:
                self._num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(
        self,
        member: MemberMetadata,
        protocols: Sequence[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback | None,
    ) -> None:
        self._protocol_counts.subtract(member.protocol_names())
        member.protocols = list(protocols)
        self._protocol_counts.update(member.protocol_names())
        self._protocol_counts = +self._protocol_counts
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None:
            self._add_join_callback(member, callback)

    def _add_join_callback(self, member: MemberMetadata, callback: JoinCallback) -> None:
        if not member.join_callbacks:
            self._num_awaiting_join += 1
        member.join_callbacks.append(callback)

    def take_join_callbacks(self, member: MemberMetadata) -> list[JoinCallback]:
        """Clear the member's parked JoinGroup callbacks and return them to be answered."""
        callbacks = member.join_callbacks
        if callbacks:
            member.join_callbacks = []
            if self.members.get(member.member_id) is member:
                self._num_awaiting_join -= 1
        return callbacks

    def add_sync_callback(self, member: MemberMetadata, callback: SyncCallback) -> None:
        member.sync_callbacks.append(callback)

    def take_sync_callbacks(self, member: MemberMetadata) -> list[SyncCallback]:
        callbacks = member.sync_callbacks
        member.sync_callbacks = []
        return callbacks

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self._num_awaiting_join and not self.pending_members

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick the first member that did.

        False if the group has no leader (no members) or nobody rejoined.
        """
        if self.leader_id is None:
            return False
        leader = self.members[self.leader_id]
        if leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> tuple[MemberMetadata, list[JoinCallback], list[SyncCallback]]:
        """Give a static member a new member id (KIP-345).

        Returns the member and the callbacks parked under the old id, which
        the caller fences with FENCED_INSTANCE_ID.
        """
        member = self.members.pop(old_member_id, None)
        if member is None:
            raise RuntimeError(f"cannot replace non-existing member {old_member_id} of group {self.group_id}")
        fenced_joins = member.join_callbacks
        if fenced_joins:
            member.join_callbacks = []
            self._num_awaiting_join -= 1
        fenced_syncs = self.take_sync_callbacks(member)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        return member, fenced_joins, fenced_syncs

    def current_static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def add_pending_member(self, member_id: str) -> None:
        if member_id in self.members:
            raise RuntimeError(f"pending member {member_id} is already a member of group {self.group_id}")
        self.pending_members.add(member_id)

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    # ------------------------------------------------------------ protocols

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self._protocol_counts.items() if count == n}

    def supports_protocols(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        names = set(protocols)
        if self._state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(self._protocol_counts.get(p, 0) == n for p in names)

    def select_protocol(self) -> str:
        """Each member votes for its preferred protocol that all members support;
        the most votes wins (ties: the protocol voted for first, in member order)."""
        if not self.members:
            raise RuntimeError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=lambda p: votes[p])  # Counter keeps first-vote order on ties

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            decoded = decode_consumer_subscription_topics(member.metadata(self.protocol_name))
            if decoded is None:
                return None
            topics |= decoded
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """When unknown (not parsed yet, or unparseable) say yes, to be safe."""
        if self.consumer is not None:
            return _consumer_subscribes(self.consumer, topic)
        return True if self.subscribed_topics is None else topic in self.subscribed_topics

    def current_member_metadata(self) -> list[JoinMember]:
        """The member list the leader receives, with metadata for the chosen protocol."""
        if self._state in (GroupState.DEAD, GroupState.PREPARING_REBALANCE) or self.protocol_name is None:
            raise RuntimeError(f"no member metadata for group {self.group_id} in state {self._state}")
        return [
            JoinMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        ]

    # ------------------------------------------------------------ views

    def describe(self) -> GroupDescription:
        """Kafka's GroupMetadata.summary: metadata and assignments only when Stable."""
        if self._state is GroupState.STABLE and self.protocol_name is not None:
            protocol = self.protocol_name
            members = [
                MemberDescription(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host, m.metadata(protocol), m.assignment
                )
                for m in self.members.values()
            ]
        else:
            protocol = ""
            members = [
                MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b"")
                for m in self.members.values()
            ]
        return GroupDescription(
            group_id=self.group_id,
            error=ErrorCode.none,
            state=self._state.kafka_name,
            protocol_type=self.protocol_type or "",
            protocol=protocol,
            members=members,
        )

    def overview(self) -> GroupListing:
        if self.consumer is not None:
            return GroupListing(self.group_id, CONSUMER_PROTOCOL_TYPE, self.consumer.state.value, "consumer")
        return GroupListing(self.group_id, self.protocol_type or "", self._state.kafka_name)

    # ------------------------------------------------------------ offsets

    def has_offsets(self) -> bool:
        return self.offsets.has_any()

    def offset(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        return self.offsets.committed.get(tp)

    def prepare_offset_commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        self.offsets.pending.update(offsets)

    def on_offset_commit_append(self, tp: TopicPartition, offset: OffsetAndMetadata, *, seq: int | None = None) -> None:
        """A commit reached the log (``seq``: its acknowledgement sequence).

        It is applied only if still pending: a delete (OffsetDelete,
        DeleteGroups, topic deletion) appended after it has removed the
        pending entry and must win, as it does in the log."""
        if tp in self.offsets.pending:
            self.offsets.set_committed(tp, offset, seq)
            if self.offsets.pending[tp] == offset:
                del self.offsets.pending[tp]

    def fail_pending_offset_write(self, tp: TopicPartition, offset: OffsetAndMetadata) -> None:
        if self.offsets.pending.get(tp) == offset:
            del self.offsets.pending[tp]

    # ------------------------------------------------------------ transactional offsets

    def prepare_txn_offset_commit(
        self, producer_id: int, offsets: dict[TopicPartition, OffsetAndMetadata]
    ) -> dict[TopicPartition, PendingTxnOffset]:
        """Kafka's prepareTxnOffsetCommit: the offsets are pending for the
        producer from now on (UNSTABLE for require_stable fetches, invisible to
        others).  Returns the entries, for the append's acknowledgement."""
        slot = self.offsets.pending_transactional.setdefault(producer_id, {})
        entries: dict[TopicPartition, PendingTxnOffset] = {}
        for tp, offset in offsets.items():
            entry = PendingTxnOffset(offset, replaced=slot.get(tp))
            slot[tp] = entry
            entries[tp] = entry
        return entries

    def on_txn_offset_commit_append(self, producer_id: int, tp: TopicPartition, entry: PendingTxnOffset, seq: int) -> None:
        """The record of ``entry`` is in the log (acknowledged as ``seq``).

        If its transaction already committed while it was in flight, it is
        committed now (with the usual ordering rule)."""
        entry.seq = seq
        entry.replaced = None
        waiting = self.offsets.committing_transactional.get(tp)
        if waiting is not None and _remove_identical(waiting, entry):
            if not waiting:
                del self.offsets.committing_transactional[tp]
            self.offsets.set_committed(tp, entry.offset, seq)

    def fail_pending_txn_offset_commit(self, producer_id: int, tp: TopicPartition, entry: PendingTxnOffset) -> None:
        """Kafka's failPendingTxnOffsetCommit: the record of ``entry`` was not
        written.  The same producer's superseded entry, whose record is in the
        log, takes its place again (Kafka drops the partition instead)."""
        entry.failed = True
        fallback = entry.fallback()
        slot = self.offsets.pending_transactional.get(producer_id)
        if slot is not None and slot.get(tp) is entry:
            if fallback is None:
                del slot[tp]
                if not slot:
                    del self.offsets.pending_transactional[producer_id]
            else:
                slot[tp] = fallback
            return
        waiting = self.offsets.committing_transactional.get(tp)
        if waiting is not None and _remove_identical(waiting, entry):
            if fallback is not None:
                if fallback.appended:
                    assert fallback.seq is not None
                    self.offsets.set_committed(tp, fallback.offset, fallback.seq)
                else:
                    waiting.append(fallback)
            if not waiting:
                del self.offsets.committing_transactional[tp]

    def complete_pending_txn_offset_commit(self, producer_id: int, commit: bool) -> int:
        """Kafka's completePendingTxnOffsetCommit: the producer's transaction
        ended (its marker is durable).  On commit every pending offset whose
        record is newer than the committed one's becomes the committed offset;
        on abort they are dropped.  Returns how many offsets were committed.

        An entry still in flight (Kafka deems that impossible for a commit: the
        client waits for TxnOffsetCommit before EndTxn) is committed when its
        acknowledgement arrives, since its record precedes the marker."""
        slot = self.offsets.pending_transactional.pop(producer_id, None)
        if not slot or not commit:
            return 0
        applied = 0
        for tp, entry in slot.items():
            if entry.appended:
                assert entry.seq is not None
                applied += self.offsets.set_committed(tp, entry.offset, entry.seq)
            else:
                self.offsets.committing_transactional.setdefault(tp, []).append(entry)
        return applied

    def has_pending_offset_commits_from_producer(self, producer_id: int) -> bool:
        return producer_id in self.offsets.pending_transactional

    @property
    def active_producers(self) -> set[int]:
        """Producers with transactional offsets pending in this group."""
        return set(self.offsets.pending_transactional)

    def initialize_offsets(
        self,
        committed: Mapping[TopicPartition, tuple[int, OffsetAndMetadata]],
        pending_transactional: Mapping[int, Mapping[TopicPartition, tuple[int, OffsetAndMetadata]]],
    ) -> None:
        """Install what loading found: (log position, offset) per partition."""
        for tp, (seq, offset) in committed.items():
            self.offsets.set_committed(tp, offset, seq)
        for producer_id, offsets in pending_transactional.items():
            if offsets:
                slot = self.offsets.pending_transactional.setdefault(producer_id, {})
                for tp, (seq, offset) in offsets.items():
                    slot[tp] = PendingTxnOffset(offset, seq=seq)

    # ------------------------------------------------------------ removing offsets

    def remove_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        """Drop offsets (and in-flight or pending transactional commits) of these
        partitions; return the committed ones removed."""
        removed: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp in partitions:
            self.offsets.pending.pop(tp, None)
            self.offsets.committing_transactional.pop(tp, None)
            for per_producer in self.offsets.pending_transactional.values():
                per_producer.pop(tp, None)
            old = self.offsets.drop_committed(tp)
            if old is not None:
                removed[tp] = old
        # Kafka leaves empty producer maps behind (which keep an Empty group
        # alive until the transaction ends); nothing is pending there any more.
        for producer_id in [p for p, per_producer in self.offsets.pending_transactional.items() if not per_producer]:
            del self.offsets.pending_transactional[producer_id]
        return removed

    def remove_all_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """DeleteGroups: the committed partitions (Kafka's removeAllOffsets; the
        group is dropped with whatever transactional commits remain pending)."""
        return self.remove_offsets(list(self.offsets.committed))

    def remove_expired_offsets(self, now_ms: int, retention_ms: int) -> dict[TopicPartition, OffsetAndMetadata]:
        """Kafka's removeExpiredOffsets (KIP-211, KIP-496).

        * group with a protocol type, Empty: every offset expires once the
          group has been empty for the retention period (falling back on the
          commit time when the state timestamp is unknown);
        * consumer group, Stable, subscriptions known: offsets of topics no
          member subscribes to expire ``retention`` after their commit;
        * no protocol type ("simple" group, offsets only): each offset
          expires ``retention`` after its commit;
        * otherwise nothing expires.

        A partition with a plain commit in flight does not expire; pending
        *transactional* commits are not looked at (as in Kafka): the committed
        offset under them may expire, the pending ones stay until their
        transaction ends (and keep an Empty group alive).
        """
        if self.consumer is not None:
            # Kafka's ConsumerGroup: by commit time, and never a topic a member subscribes to.
            consumer = self.consumer

            def base(o: OffsetAndMetadata) -> int:
                return o.commit_timestamp_ms

            expired = {
                tp: o
                for tp, o in self.offsets.committed.items()
                if not _consumer_subscribes(consumer, tp[0]) and tp not in self.offsets.pending
                and now_ms - base(o) >= retention_ms
            }
            for tp in expired:
                self.offsets.drop_committed(tp)
            return expired
        if self.protocol_type is not None and self._state is GroupState.EMPTY:
            state_ts = self.current_state_timestamp_ms

            def base(o: OffsetAndMetadata) -> int:
                return state_ts if state_ts is not None else o.commit_timestamp_ms

            excluded: frozenset[str] = frozenset()
        elif (
            self.protocol_type == CONSUMER_PROTOCOL_TYPE
            and self.subscribed_topics is not None
            and self._state is GroupState.STABLE
        ):

            def base(o: OffsetAndMetadata) -> int:
                return o.commit_timestamp_ms

            excluded = self.subscribed_topics
        elif self.protocol_type is None:

            def base(o: OffsetAndMetadata) -> int:
                return o.commit_timestamp_ms

            excluded = frozenset()
        else:
            return {}
        expired = {
            tp: o
            for tp, o in self.offsets.committed.items()
            if tp[0] not in excluded and tp not in self.offsets.pending and now_ms - base(o) >= retention_ms
        }
        for tp in expired:
            self.offsets.drop_committed(tp)
        return expired

    def __repr__(self) -> str:
        return (
            f"GroupMetadata(group_id={self.group_id!r}, state={self._state.value}, "
            f"generation={self.generation_id}, protocol_type={self.protocol_type!r}, "
            f"members={list(self.members)})"
        )


def _consumer_subscribes(consumer: ConsumerGroup, topic: str) -> bool:
    for m in consumer.members.values():
        if topic in m.subscribed_topic_names:
            return True
        if m.subscribed_topic_regex and topic_regex.matches(m.subscribed_topic_regex, topic):
            return True
    return False


def _remove_identical(entries: list[PendingTxnOffset], entry: PendingTxnOffset) -> bool:
    for i, candidate in enumerate(entries):
        if candidate is entry:
            del entries[i]
            return True
    return False
