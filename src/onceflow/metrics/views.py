"""What the metrics endpoint and the console show, sampled from the broker's components at read time.

Theory of operation: each function here reads the live components of one
``Broker`` (on its event loop thread, so nothing changes underneath) and
returns plain, frozen rows.  ``metrics.collector`` turns the rows into
Prometheus families and ``metrics.console`` into the page's JSON, so the
two always agree.  Nothing is cached or sampled in the background: a view
costs what it reads, at the moment someone asks.

The figures that need a rule:

* **LSO lag** of a partition is high watermark - last stable offset: the
  records a read_committed consumer cannot see yet because a transaction
  before them is still open.
* **Age of the oldest open transaction** on a partition comes from its
  transaction coordinator (when the first partition was added), or, for a
  producer no coordinator knows (a hanging transaction), from the last
  batch timestamp of its producer.
* **Late** (KIP-664's ``PartitionsWithLateTransactionsCount``, per
  partition): the oldest open transaction's producer has been silent for
  more than ``transaction.max.timeout.ms`` + 5 minutes by its batches'
  timestamps (``log.producer_state``, Kafka's rule).
* **Hanging** (per transaction, what the console flags and may abort): see
  ``open_transactions``.
* **Group lag** is measured where the group's consumers read up to: to the
  last stable offset for a group whose members fetch read_committed, to the
  high watermark otherwise (Kafka's consumer default, read_uncommitted).  The
  level is what the members' last Fetch requests asked for (matched by client
  id and host) and is remembered while the group has no members (a restart, a
  rebalance); a group never seen fetching is measured to the high watermark, as
  kafka_exporter does, and labelled so.
* **Pipelines** are the Spark sink's progress topics
  (``onceflow-progress-<query>[-<name>]``, one partition per slot): each
  slot's latest committed record says which micro-batch it last wrote.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import TRANSACTION_MAX_TIMEOUT_MS
from ..coordinator.transaction.metadata import TransactionState
from ..log.aborted_index import AbortedTxn
from ..log.partition_log import PartitionLog, ReadResult
from ..records.batch import scan
from ..records.control import read_marker
from ..records.records import iter_records
from ..spark.protocol import PROGRESS_TOPIC_PREFIX

if TYPE_CHECKING:
    from ..broker.broker import Broker

READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"
_OPEN = (TransactionState.ONGOING, TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)


@dataclass(frozen=True, slots=True)
class PartitionRow:
    topic: str
    partition: int
    internal: bool
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    last_stable_offset: int
    size_bytes: int
    segments: int
    producer_ids: int
    open_transactions: int
    #: Age of the oldest open transaction on the partition (None: none open).
    oldest_transaction_age_ms: int | None
    late_transaction: bool

    @property
    def lso_lag(self) -> int:
        return self.high_watermark - self.last_stable_offset


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """An open transaction: known to the coordinator (``transactional_id`` set), or found only on
    partitions (a producer id no coordinator knows: hanging)."""

    transactional_id: str | None
    producer_id: int
    producer_epoch: int
    state: str
    #: "topic-partition" names.
    partitions: tuple[str, ...]
    age_ms: int
    timeout_ms: int | None
    #: Why it is a hanging-transaction candidate (KIP-664), or None.
    hanging: str | None
    #: (topic, partition) where it holds back the last stable offset: what an abort would target.
    open_on: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class GroupPartitionLag:
    topic: str
    partition: int
    committed: int
    #: Where the lag is measured to: the last stable offset (read_committed) or the high watermark.
    end: int
    lag: int


@dataclass(frozen=True, slots=True)
class GroupRow:
    group_id: str
    group_type: str
    state: str
    members: int
    isolation_level: str
    #: Whether the isolation level was seen in the members' fetches (else assumed read_uncommitted).
    isolation_observed: bool
    partitions: tuple[GroupPartitionLag, ...]


@dataclass(frozen=True, slots=True)
class SlotRow:
    slot: int
    #: The micro-batch the slot last wrote (None: no record yet).
    batch: int | None
    rows: int | None
    run: str | None
    refused: str | None
    #: Micro-batches behind the query's latest written one.
    lag: int


@dataclass(frozen=True, slots=True)
class PipelineRow:
    """One sink scope of a Spark query: its progress topic's slots."""

    progress_topic: str
    query: str
    last_batch: int | None
    slots: tuple[SlotRow, ...]


# -- partitions ---------------------------------------------------------------------------


def partitions(broker: Broker, now_ms: int, known_pids: dict[int, int] | None = None) -> list[PartitionRow]:
    """Every partition, internal topics included. ``known_pids``: producer id -> transaction start
    (from ``coordinator_starts``), to age an open transaction by its coordinator's clock."""
    starts = coordinator_starts(broker) if known_pids is None else known_pids
    max_timeout = broker.config[TRANSACTION_MAX_TIMEOUT_MS]
    rows = []
    for name, topic in sorted(broker.registry.topics.items()):
        for log in topic.partitions:
            state = log.producer_state
            ongoing = state.ongoing_transactions()
            age = None
            if ongoing:
                pid = ongoing[0][0]
                started = starts.get(pid)
                if started is None or started < 0:
                    entry = state.producer(pid)
                    started = entry.last_timestamp if entry is not None else now_ms
                age = max(0, now_ms - started)
            rows.append(PartitionRow(
                name, log.partition, topic.internal, log.log_start_offset, log.high_watermark, log.log_end_offset,
                log.last_stable_offset, log.size_bytes, len(log.segments), state.producer_id_count, len(ongoing), age,
                state.has_late_transaction(now_ms, max_timeout)))
    return rows


def coordinator_starts(broker: Broker) -> dict[int, int]:
    """Producer id -> start of its open transaction, for every transaction the coordinator has open."""
    return {md.producer_id: md.txn_start_timestamp for md in broker.txns.transactions() if md.state in _OPEN}


# -- transactions -------------------------------------------------------------------------


def open_transactions(broker: Broker, now_ms: int) -> list[OpenTransaction]:
    """Every open transaction, oldest first: the coordinator's, then those only partitions know.

    A hanging-transaction candidate (KIP-664, as ``onceflow txn find-hanging`` judges it) is a
    transaction no coordinator knows, or one its coordinator has had open longer than
    ``transaction.max.timeout.ms`` by this broker's clock (the coordinator should have aborted
    it at its own timeout).  A transaction its coordinator owns within that bound is never one,
    whatever the timestamps its client wrote, and whatever else is open on its partitions."""
    max_timeout = broker.config[TRANSACTION_MAX_TIMEOUT_MS]
    open_on: dict[int, list[tuple[str, int]]] = {}
    for name, topic in broker.registry.topics.items():
        for log in topic.partitions:
            for pid, _first in log.producer_state.ongoing_transactions():
                open_on.setdefault(pid, []).append((name, log.partition))
    rows = []
    known: set[int] = set()
    for md in broker.txns.transactions():
        if md.state not in _OPEN:
            continue
        known.add(md.producer_id)
        on = tuple(sorted(open_on.get(md.producer_id, ())))
        age = max(0, now_ms - md.txn_start_timestamp) if md.txn_start_timestamp >= 0 else 0
        hanging = None
        if age > max_timeout:
            hanging = f"open {age} ms, longer than transaction.max.timeout.ms ({max_timeout} ms)"
        rows.append(OpenTransaction(
            md.transactional_id, md.producer_id, md.producer_epoch, md.state.kafka_name,
            tuple(sorted(f"{topic}-{partition}" for topic, partition in md.topic_partitions)), age, md.txn_timeout_ms,
            hanging, on))
    for pid, on_list in open_on.items():
        if pid in known:
            continue
        on = tuple(sorted(on_list))
        log0 = broker.registry.get(*on[0])
        entry = log0.producer_state.producer(pid) if log0 is not None else None
        epoch = entry.producer_epoch if entry is not None else -1
        last = entry.last_timestamp if entry is not None else now_ms
        rows.append(OpenTransaction(
            None, pid, epoch, "Ongoing", tuple(f"{t}-{p}" for t, p in on), max(0, now_ms - last), None,
            "no transaction coordinator knows this producer id: nothing will end it (KIP-664)", on))
    rows.sort(key=lambda r: -r.age_ms)
    return rows


def hanging_on(broker: Broker, now_ms: int, topic: str, partition: int, producer_id: int) -> OpenTransaction | None:
    """The hanging-transaction candidate of ``producer_id`` open on that partition, or None: what
    the console may abort (``metrics.http``)."""
    for row in open_transactions(broker, now_ms):
        if row.producer_id == producer_id and row.hanging is not None and (topic, partition) in row.open_on:
            return row
    return None


def late_partitions(rows: list[PartitionRow]) -> int:
    return sum(1 for r in rows if r.late_transaction)


# -- groups -------------------------------------------------------------------------------


def groups(broker: Broker, by_partition: dict[tuple[str, int], PartitionRow]) -> list[GroupRow]:
    """Every group with its state, members and committed lag per partition (see the module doc)."""
    seen = broker.state.stats.fetch_isolation
    remembered = broker.state.stats.group_isolation
    group_ids = sorted(broker.groups.group_ids())
    for gone in remembered.keys() - set(group_ids):
        del remembered[gone]
    out = []
    for group_id in group_ids:
        group = broker.groups.group(group_id)
        if group is None:
            continue
        if group.consumer is not None:
            clients = [(m.client_id, m.client_host) for m in group.consumer.members.values()]
            state = group.consumer.state.value
        else:
            clients = [(m.client_id, m.client_host) for m in group.members.values()]
            state = group.state.kafka_name
        levels = {seen.get((client_id, host.lstrip("/"))) for client_id, host in clients} - {None}
        if levels:
            remembered[group_id] = 1 if 1 in levels else 0
        elif group_id in remembered:  # between members (a restart, a rebalance): as last seen
            levels = {remembered[group_id]}
        observed = bool(levels)
        committed = 1 in levels
        lags = []
        for (topic, partition), offset in sorted(group.offsets.committed.items()):
            row = by_partition.get((topic, partition))
            if row is None:
                continue
            end = row.last_stable_offset if committed else row.high_watermark
            lags.append(GroupPartitionLag(topic, partition, offset.offset, end, max(0, end - offset.offset)))
        out.append(GroupRow(group_id, group.group_type, state, len(clients),
                            READ_COMMITTED if committed else READ_UNCOMMITTED, observed, tuple(lags)))
    return out


# -- pipelines ----------------------------------------------------------------------------


def pipelines(broker: Broker) -> list[PipelineRow]:
    """The Spark sink's progress topics, each slot's latest committed record read from the log."""
    out = []
    for name, topic in sorted(broker.registry.topics.items()):
        if not name.startswith(PROGRESS_TOPIC_PREFIX):
            continue
        slots = []
        for log in topic.partitions:
            try:
                record = _slot_record(latest_committed_value(log))
            except Exception as exc:  # noqa: BLE001 - one unreadable partition must not cost the whole view
                record = (None, None, None, f"unreadable: {exc}")
            slots.append(record)
        batches = [s[0] for s in slots if s[0] is not None]
        last = max(batches) if batches else None
        rows = tuple(SlotRow(i, b, rows, run, refused, (last - b) if last is not None and b is not None else 0)
                     for i, (b, rows, run, refused) in enumerate(slots))
        out.append(PipelineRow(name, name[len(PROGRESS_TOPIC_PREFIX):], last, rows))
    return out


def _slot_record(value: bytes | None) -> tuple[int | None, int | None, str | None, str | None]:
    """(batch, rows, run, refusal) of a slot record, the fields the sink writes
    (``spark.protocol.SlotRecord``); anything else (anyone may write to a topic of that name) is
    shown as not a slot record, never trusted."""
    if value is None:
        return None, None, None, None
    try:
        data = json.loads(value)
    except ValueError:
        data = None
    written = data.get("written") if isinstance(data, dict) else None
    refused = data.get("refused") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(written or {}, dict) or not isinstance(refused or {}, dict):
        return None, None, None, "not a slot record"
    written, refused = written or {}, refused or {}
    batch, rows, run = written.get("batch"), written.get("rows"), written.get("run")
    if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (batch, rows)):
        return None, None, None, "not a slot record"
    reason = refused.get("reason")
    return batch, rows, run if isinstance(run, str) else None, reason if isinstance(reason, str) else None


#: How far back from its last stable offset a progress partition is searched for a committed record
#: (16, 128, then 1024 offsets): a bound on what one scrape may read, whatever the tail holds.
MAX_TAIL_WINDOW = 1024


def latest_committed_value(log: PartitionLog, window: int = 16) -> bytes | None:
    """The value of the last committed (not aborted) record below the last stable offset, read
    from the tail, the window widened while only markers and aborted attempts show (at most
    ``MAX_TAIL_WINDOW`` offsets back: None beyond that)."""
    upper = log.last_stable_offset
    while True:
        start = max(log.log_start_offset, upper - window)
        result = log.read(start, 1 << 20, max_offset=upper, committed=True)
        if isinstance(result, ReadResult):
            value = _last_value(result, start, upper)
            if value is not None:
                return value
        if start <= log.log_start_offset or window >= MAX_TAIL_WINDOW:
            return None
        window *= 8


def _last_value(result: ReadResult, start: int, upper: int) -> bytes | None:
    aborted = sorted(result.aborted or (), key=lambda a: a.first_offset)
    found: bytes | None = None
    for value in _committed_values(result.records, aborted, start, upper):
        found = value
    return found


def _committed_values(data: bytes, aborted: list[AbortedTxn], start: int, upper: int) -> Iterator[bytes | None]:
    """A read_committed consumer's view: aborted batches skipped, markers skipped."""
    view = memoryview(data)
    aborting: set[int] = set()
    pending = list(aborted)
    for pos, header in scan(data):
        while pending and pending[0].first_offset <= header.last_offset:
            aborting.add(pending.pop(0).producer_id)
        batch = view[pos : pos + header.size]
        if header.is_control:
            marker = read_marker(batch, header)
            if marker is not None and not marker.commit:
                aborting.discard(marker.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        for record in iter_records(batch, header):
            if start <= record.offset < upper:
                yield record.value
