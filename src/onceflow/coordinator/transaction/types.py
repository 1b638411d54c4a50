"""Values exchanged between the transaction coordinator and the broker.

The coordinator is sans-I/O.  It reaches the outside world through three
protocols the broker implements:

* ``TxnLogStore``: appends one record to a partition of ``__transaction_state``
  and reports, later, whether it became durable;
* ``ProducerIdAllocator``: hands out producer ids never used before;
* ``MarkerWriter``: writes COMMIT/ABORT control batches (transaction markers)
  to the partitions of a transaction and reports, later, per partition.

Everything the coordinator tells a client is an ``ErrorCode`` value (kio's
enum of Kafka's codes) or one of the result types below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ...protocol.errors import ErrorCode

TopicPartition = tuple[str, int]

#: Kafka's RecordBatch.NO_PRODUCER_ID / NO_PRODUCER_EPOCH.
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1



class TxnLogStore(Protocol):
    """The partitions of ``__transaction_state`` (compacted, uncompressed, acks=all)."""

    @property
    def num_partitions(self) -> int: ...

    def append(
        self,
        partition: int,
        key: bytes,
        value: bytes | None,
        done: Callable[[ErrorCode], None],
        *,
        durable: bool = True,
    ) -> None:
        """Append one record to ``partition`` (value None: a tombstone).

        ``done`` is called exactly once, later (never re-entrantly from inside
        ``append``), with ``ErrorCode.none`` once the record is durable, or
        with the error that prevented it (the log's own error, e.g.
        NOT_ENOUGH_REPLICAS, KAFKA_STORAGE_ERROR; the coordinator maps it to
        what Kafka tells clients).

        With ``durable=False``, ``done`` is told once the record is in the
        partition's log, ordered before every later record of the partition;
        it becomes durable with them (or on its own, shortly).  Only a record
        that promises nothing to anyone may be applied so (a Complete record,
        see ``markers.py``).
        """
        ...


class ProducerIdAllocator(Protocol):
    def allocate(self) -> int:
        """A producer id never handed out before (also across restarts)."""
        ...


class MarkerWriter(Protocol):
    def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: frozenset[TopicPartition],
        done: Callable[[dict[TopicPartition, ErrorCode]], None],
    ) -> None:
        """Write one COMMIT (``commit``) or ABORT control batch to every partition.

        Partitions include ``__consumer_offsets`` partitions (transactional
        offset commits become visible, or are dropped, on their marker).
        ``done`` is called once, later (never re-entrantly), with an outcome
        for every partition:

        * NONE: the marker is durable;
        * UNKNOWN_TOPIC_OR_PARTITION: the partition no longer exists -- the
          coordinator drops it from the pending set (as Kafka does for a
          partition without a leader) and treats it as done;
        * UNSUPPORTED_FOR_MESSAGE_FORMAT / UNSUPPORTED_VERSION: dropped too
          (Kafka: the producer could not have written there);
        * INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED: the marker
          is obsolete; Kafka stops sending this transaction's markers;
        * anything else: retried for that partition after a short back-off.
        """
        ...


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One entry of a DescribeTransactions response (KIP-664).

    On error only ``transactional_id`` and ``error`` are meaningful; the other
    fields keep the defaults Kafka's response would carry (zeros, "").
    """

    transactional_id: str
    error: ErrorCode
    #: Kafka's state name: "Empty", "Ongoing", "PrepareCommit", ...
    state: str = ""
    producer_id: int = 0
    producer_epoch: int = 0
    timeout_ms: int = 0
    #: When the first partition was added to the current transaction (-1: none yet).
    start_timestamp_ms: int = 0
    #: Sorted (topic, partition) pairs of the current transaction.
    partitions: tuple[TopicPartition, ...] = ()

    @property
    def topics(self) -> dict[str, list[int]]:
        """The partitions grouped by topic, as the response lays them out."""
        out: dict[str, list[int]] = {}
        for topic, partition in self.partitions:
            out.setdefault(topic, []).append(partition)
        return out


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One entry of a ListTransactions response (KIP-664)."""

    transactional_id: str
    producer_id: int
    #: Kafka's state name.
    state: str


class ListTransactionsResult(list[TransactionListing]):
    """The transactions a ListTransactions request selects (a plain list of
    ``TransactionListing``), plus the response's top-level fields."""

    def __init__(
        self,
        transactions: list[TransactionListing] | None = None,
        *,
        error: ErrorCode = ErrorCode.none,
        unknown_state_filters: list[str] | None = None,
    ) -> None:
        super().__init__(transactions or [])
        self.error = error
        #: State names in the filter that are not Kafka transaction states.
        self.unknown_state_filters: list[str] = list(unknown_state_filters or [])

    def __repr__(self) -> str:
        return (f"ListTransactionsResult({list.__repr__(self)}, error={self.error!r}, "
                f"unknown_state_filters={self.unknown_state_filters!r})")
