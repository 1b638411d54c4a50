"""The checker: every anomaly an exactly-once Kafka workload must not show, found in its history alone.

``check(events)`` is pure and deterministic.  It reads the operations below (any other ``f``,
such as the nemesis's ``fault`` events, is context: it appears in the excerpts of anomalies
whose time window it falls in) and returns a ``Report``.

Operations (``tp`` is ``"topic/partition"`` where a JSON key, ``[topic, partition]`` elsewhere):

* ``txn``: a transactional producer's transaction.  Invoke ``{"id", "transactional_id",
  "writes": [[topic, partition, value], ...]}``; completion ``{"id", "commit_time",
  "offsets": {value: offset}}`` with ``ok`` committed, ``fail`` aborted, ``info`` unknown.
  ``commit_time`` is when ``commit_transaction`` was called, ``null`` when it never was.
* ``ctp``: one consume-transform-produce transaction.  Invoke ``{"id", "group", "inputs":
  [[topic, partition, offset, value], ...], "writes": [[topic, partition, value], ...],
  "offsets": {tp: next_offset}}``; completion as for ``txn``.  The output of input ``v`` is
  ``history.ctp_output(v)`` (``"ctp:" + v``), the same value for every attempt at ``v``: so two
  committed attempts at one input show as a ``duplicate`` and none as
  ``invisible-committed-offsets``.  Several ctp attempts may write one value; nothing else may;
  so one ctp stage (one group) consumes a given input partition.
* ``poll`` (``ok``): ``{"isolation", "records": [[topic, partition, offset, value], ...]}``.
* ``assign`` (``ok``): ``{"positions": [[topic, partition, offset], ...]}``: the process's
  consumer was (re)assigned or seeked; its offset tracking restarts at these positions.
* ``final-read`` (``ok``): ``{"isolation", "partitions": {tp: {"end", "records": [[offset,
  value], ...]}}}``: everything the isolation level delivers from the log start to ``end``,
  read after the workload and the faults stopped, once no transaction is open (the last
  stable offset has reached the high watermark: a committed transaction's markers may land
  after its commit returned).  Where a partition has several, the last read_committed one
  decides what is "finally visible".
* ``committed-offsets`` (``ok``): ``{"group", "offsets": {tp: next_offset}}``, read at the
  end; the last one of a group counts.

A txn or ctp *writes* each of its values to one partition and, under the idempotent producer,
appends it at most once per attempt.  Its visibility to read_committed readers starts at
``visible_from``: its ``commit_time`` if it committed or is unknown with a known commit time;
never (+inf) if it aborted or is unknown with ``commit_time`` null (commit was never called,
so only an abort can follow); unconstrained (-inf) if the commit time is unknown (no
completion, or no ``commit_time`` in it).  A value several ctp attempts wrote is visible from
the earliest of theirs.

The anomalies, by kind (in brackets the names of jepsen.tests.kafka's checker, where it has one):

* ``lost-write`` [lost-write]: a committed txn/ctp's value is missing from the final read_committed read of
  the partition it was written to (only partitions with a final read are judged).
* ``duplicate`` [duplicate]: a value is seen (polls, final reads, ctp inputs, delivery reports; any
  isolation) at more distinct (partition, offset) positions than attempts wrote it, or at
  more than one position by read_committed reads.
* ``aborted-read`` [G1a]: a read_committed poll or final read returns a value whose every
  writer aborted, or is unknown with commit_time null.
* ``precommitted-read`` [precommitted-read: a transaction's writes seen before it committed]: a
  read_committed read completed before ``commit_time`` of every writer of the value that
  could be visible (one that is committed or unknown with a known commit time).  The read's
  time is taken after the poll returned and ``commit_time`` before the call: no false alarms.
* ``nonmonotonic-offsets`` [nonmonotonic-poll, int-nonmonotonic-poll]: within one process's polls since its last ``assign``, a
  partition's offsets do not strictly increase (a repeat or a step back, within a poll or
  across polls), or a record is below the offset the process was assigned at.
* ``inconsistent-offsets`` [inconsistent-offsets]: one (partition, offset) holds different values in two reads
  (polls, final reads, ctp inputs, delivery reports; any isolation).
* ``torn-transaction`` (atomicity: a transaction neither wholly visible nor wholly invisible, a
  "fractured read" in RAMP's terms): in the final read_committed reads, a committed or unknown txn/ctp has some values visible
  and some missing.  Only partitions with a final read are judged, and a value counts as
  visible only if no other attempt wrote it (a retried ctp's shared outputs prove nothing).
* ``invisible-committed-offsets``: group ``g``'s final committed offset covers an input of
  its ctp stage (offset below it, and at or above the lowest offset the stage consumed in
  that partition) whose output is not finally visible (the output's partition has a final
  read; inputs whose output already is a ``lost-write`` are not repeated here), or that no
  attempt ever consumed; or conversely an output is finally visible but its input is not
  covered by the group's committed offset (it would be processed again).
* ``unexpected-value``: a read returns a value no txn/ctp wrote, or wrote to another partition.

The history must be well formed, else ``ValueError``: event types are Jepsen's, indexes
unique; a txn/ctp completion follows an invoke of the same process and ``f`` with the same
``id``; a process does not invoke while an operation of its is open; txn/ctp ids are unique;
a value is written once, except ctp outputs shared by ctp attempts; a ctp writes exactly
``ctp_output`` of each input and sends offsets past each input; a committed txn has a
commit_time (not null).  Topics the checker judges are assumed to be neither compacted nor
truncated by retention while the workload runs, and every write to them is in the history.

Each anomaly carries the minimal history around it: the invokes and completions of the
txns/ctps that wrote the values involved, the reads that saw them (their records trimmed to
the relevant ones; final reads keep only the relevant partitions, with their ``end``), and
the context events (faults) whose time falls between the first and the last of those.
``check(events, excerpts=n)`` cuts excerpts for the first n anomalies of each kind only: a
broken run may have millions.  One pass over the records, dictionaries keyed by value and by
position, an inline fast path for a value seen where it was seen before: a million records
read take a few seconds.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from .history import TYPES, Event, ctp_output

KINDS = (
    "lost-write",
    "duplicate",
    "aborted-read",
    "precommitted-read",
    "nonmonotonic-offsets",
    "inconsistent-offsets",
    "torn-transaction",
    "invisible-committed-offsets",
    "unexpected-value",
)
CHECKED = frozenset({"txn", "ctp", "poll", "assign", "final-read", "committed-offsets"})
RC = "read_committed"

TP = tuple[str, int]
Pos = tuple[str, int, int]
INF = math.inf


@dataclass(frozen=True)
class Anomaly:
    kind: str
    description: str
    events: list[Event]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "description": self.description, "events": [e.to_json() for e in self.events]}


@dataclass
class Report:
    events: int
    ops: dict[str, dict[str, int]]  # f -> event type -> count
    transactions: dict[str, dict[str, int]]  # "txn"/"ctp" -> committed/aborted/unknown -> count
    records_read: int
    anomalies: dict[str, list[Anomaly]]  # every kind of KINDS, in that order

    @property
    def valid(self) -> bool:
        return not any(self.anomalies.values())

    def summary(self, examples: int = 3, width: int = 240) -> str:
        txns = "; ".join(f"{f}: " + ", ".join(f"{n} {s}" for s, n in c.items()) for f, c in self.transactions.items())
        lines = [f"history: {self.events} events, {self.records_read} records read; {txns}"]
        total = sum(len(a) for a in self.anomalies.values())
        if not total:
            lines.append("valid: no anomalies")
            return "\n".join(lines)
        lines.append(f"INVALID: {total} anomalies")
        lines += [f"  {kind}: {len(found)}" for kind, found in self.anomalies.items() if found]
        for kind, found in self.anomalies.items():
            for anomaly in found[:examples]:
                lines.append(f"{kind}: {anomaly.description}")
                lines += [_clip(f"    {e}", width) for e in anomaly.events]
            if len(found) > examples:
                lines.append(f"{kind}: ... and {len(found) - examples} more")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "events": self.events,
            "ops": self.ops,
            "transactions": self.transactions,
            "records_read": self.records_read,
            "anomalies": {kind: [a.to_json() for a in found] for kind, found in self.anomalies.items()},
        }


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _tp(key: str) -> TP:
    topic, _, partition = key.rpartition("/")
    if not topic or not partition.lstrip("-").isdigit():
        raise ValueError(f"{key!r} is not topic/partition")
    return topic, int(partition)


def _fmt(tp: TP, offset: int | None = None) -> str:
    return f"{tp[0]}/{tp[1]}" if offset is None else f"{tp[0]}/{tp[1]}@{offset}"


@dataclass(eq=False)
class _Op:
    """A txn or ctp attempt."""

    id: str
    f: str
    invoke: Event
    writes: list[tuple[TP, str]]
    inputs: list[tuple[TP, int, str]] = field(default_factory=list)
    group: str = ""
    completion: Event | None = None

    @property
    def status(self) -> str:
        t = self.completion.type if self.completion is not None else "info"
        return "committed" if t == "ok" else "aborted" if t == "fail" else "unknown"

    @property
    def visible_from(self) -> float:
        status = self.status
        if status == "aborted":
            return INF
        if self.completion is None or "commit_time" not in self.completion.value:
            return -INF
        commit_time = self.completion.value["commit_time"]
        return INF if commit_time is None else float(commit_time)

    @property
    def events(self) -> list[Event]:
        return [self.invoke] if self.completion is None else [self.invoke, self.completion]

    def describe(self) -> str:
        return f"{self.f} {self.id} ({self.status})"


@dataclass(eq=False, slots=True)
class _Draft:
    """An anomaly found, before its excerpt is cut from the history."""

    kind: str
    description: str
    ops: list[_Op]
    events: tuple[Event, ...] | list[Event] = ()  # included as they are
    values: frozenset[str] | set[str] = frozenset()  # reads of these values belong to the excerpt
    positions: frozenset[Pos] | set[Pos] = frozenset()  # so do reads at these positions
    partitions: frozenset[TP] | set[TP] = frozenset()  # and final reads of these partitions
    only: set[int] | None = None  # reads restricted to these event indexes


@dataclass
class _FinalRead:
    event: Event
    end: int
    records: list[list[Any]]  # [[offset, value], ...]
    values: set[str]


class _Checker:
    def __init__(self, events: Iterable[Event]) -> None:
        self.history = sorted(events, key=lambda e: e.index)
        self.ops: dict[str, _Op] = {}
        self.writer: dict[str, _Op] = {}  # value -> its (first) writer
        self.more_writers: dict[str, list[_Op]] = {}  # ctp outputs written by several attempts: all of them
        self.tps: dict[TP, TP] = {}  # one tuple per partition, so that the hot loop compares them by identity
        self.polls: list[Event] = []
        self.final_reads: list[Event] = []
        self.context: list[Event] = []
        self.committed_offsets: dict[str, tuple[Event, dict[TP, int]]] = {}
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)
        self.drafts: dict[str, list[_Draft]] = {kind: [] for kind in KINDS}
        self.final: dict[TP, _FinalRead] = {}  # partition -> its last read_committed final read
        self.records_read = 0

    # -- well-formedness and the operation table

    def parse(self) -> None:
        pending: dict[str, Event] = {}  # process -> its open invoke
        last_index: int | None = None
        for e in self.history:
            if e.index == last_index:
                raise ValueError(f"two events have index {e.index}")
            last_index = e.index
            try:
                self._parse(e, pending)
            except (KeyError, TypeError, AttributeError) as exc:
                raise ValueError(f"#{e.index}: malformed {e.type} {e.f} value ({type(exc).__name__}: {exc})") from exc

    def _parse(self, e: Event, pending: dict[str, Event]) -> None:
        if e.type not in TYPES:
            raise ValueError(f"#{e.index}: type {e.type!r} is not one of {', '.join(TYPES)}")
        self.counts[e.f][e.type] += 1
        if e.type == "invoke":
            if e.process in pending:
                raise ValueError(f"#{e.index}: {e.process} invokes {e.f} while its #{pending[e.process].index} is not complete")
            pending[e.process] = e
            if e.f in ("txn", "ctp"):
                self._add_op(e)
            elif e.f not in CHECKED:
                self.context.append(e)
            return
        opened = pending.get(e.process)
        if opened is not None and opened.f == e.f:
            del pending[e.process]
        elif e.f in ("txn", "ctp"):
            raise ValueError(f"#{e.index}: {e.process} completes a {e.f} it did not invoke")
        if e.f in ("txn", "ctp"):
            assert opened is not None
            op = self.ops[str(opened.value["id"])]
            if str(e.value.get("id", op.id)) != op.id:
                raise ValueError(f"#{e.index}: completion of {op.id} carries id {e.value['id']!r}")
            if e.type == "ok" and "commit_time" in e.value and e.value["commit_time"] is None:
                raise ValueError(f"#{e.index}: {op.f} {op.id} committed (ok) with commit_time null")
            op.completion = e
        elif e.type != "ok":
            if e.f not in CHECKED:
                self.context.append(e)
        elif e.f == "poll":
            if not isinstance(e.value["records"], list):
                raise TypeError("records is not a list")
            self.polls.append(e)
        elif e.f == "final-read":
            for key, part in e.value["partitions"].items():
                _tp(key)
                if not isinstance(part["records"], list):
                    raise TypeError(f"records of {key} is not a list")
            self.final_reads.append(e)
        elif e.f == "committed-offsets":
            self.committed_offsets[str(e.value["group"])] = (e, {_tp(k): int(n) for k, n in e.value["offsets"].items()})
        elif e.f not in CHECKED:
            self.context.append(e)

    def _add_op(self, e: Event) -> None:
        op_id = str(e.value["id"])
        if op_id in self.ops:
            raise ValueError(f"#{e.index}: {e.f} id {op_id!r} is used twice (#{self.ops[op_id].invoke.index})")
        canon = self.tps
        writes = [(canon.setdefault((t, p), (t, p)), v) for t, p, v in e.value["writes"]]
        op = _Op(op_id, e.f, e, writes)
        if e.f == "ctp":
            op.group = str(e.value["group"])
            op.inputs = [(canon.setdefault((t, p), (t, p)), o, v) for t, p, o, v in e.value["inputs"]]
            if sorted(v for _, v in writes) != sorted(ctp_output(v) for _, _, v in op.inputs):
                raise ValueError(f"#{e.index}: ctp {op_id} does not write exactly ctp_output(input) for each input")
            offsets = {_tp(k): int(n) for k, n in e.value["offsets"].items()}
            for tp, o, _ in op.inputs:
                if offsets.get(tp, -1) <= o:
                    raise ValueError(f"#{e.index}: ctp {op_id} consumed {_fmt(tp, o)} but sends offset {offsets.get(tp)} for {_fmt(tp)}")
        writer = self.writer
        for _, v in writes:
            other = writer.setdefault(v, op)
            if other is op:
                continue
            if other.f != "ctp" or e.f != "ctp":
                raise ValueError(f"#{e.index}: value {v!r} is written by {op_id} and by {other.id}")
            attempts = self.more_writers.setdefault(v, [other])
            if op in attempts:
                raise ValueError(f"#{e.index}: {e.f} {op_id} writes value {v!r} twice")
            attempts.append(op)
        if len({v for _, v in writes}) < len(writes):
            twice = next(v for v, n in Counter(v for _, v in writes).items() if n > 1)
            raise ValueError(f"#{e.index}: {e.f} {op_id} writes value {twice!r} twice")
        self.ops[op_id] = op

    def writers(self, value: str) -> list[_Op]:
        more = self.more_writers.get(value)
        if more is not None:
            return more
        op = self.writer.get(value)
        return [] if op is None else [op]

    def written_to(self, value: str) -> set[TP]:
        return {tp for op in self.writers(value) for tp, v in op.writes if v == value}

    # -- one pass over every record observed

    def observe(self) -> None:
        # What the writers of each value allow: the partition it may be read from (None: several),
        # and the time from which read_committed may return it.
        allowed: dict[str, tuple[TP | None, float]] = {}
        shared = self.more_writers
        for op in self.ops.values():
            visible_from = op.visible_from
            for dest, v in op.writes:
                allowed[v] = (dest, visible_from)
        # A value several attempts wrote: what they allow together.  In ``allowed``, the table of
        # the inline fast path, it is never read_committed-readable, so that see() records its
        # read_committed positions.
        allowed_shared: dict[str, tuple[TP | None, float]] = {}
        for v, ops in shared.items():
            tps = self.written_to(v)
            allowed_shared[v] = (next(iter(tps)) if len(tps) == 1 else None, min(op.visible_from for op in ops))
            allowed[v] = (allowed_shared[v][0], INF)

        at: dict[TP, dict[int, str]] = defaultdict(dict)  # position -> value
        conflicts: dict[Pos, dict[str, None]] = {}
        first_pos: dict[str, tuple[TP, int]] = {}
        positions: dict[str, dict[tuple[TP, int], None]] = {}  # values seen at 2+ positions: all of them
        rc_positions: dict[str, dict[tuple[TP, int], None]] = {}  # values of several writers: read_committed positions
        unexpected: dict[tuple[str, TP], tuple[Event, int]] = {}
        bad_rc: dict[str, tuple[Event, TP, int]] = {}
        records_read = 0

        def see(e: Event, tp: TP, o: int, v: str, rc: bool) -> None:
            # An observation the inline fast path (a value of this partition, readable now, seen here
            # before or nowhere yet) did not settle.
            if o >= 0:
                slot = at[tp]
                old = slot.setdefault(o, v)
                if old != v:
                    conflicts.setdefault((tp[0], tp[1], o), {old: None})[v] = None
                first = first_pos.setdefault(v, (tp, o))
                if first != (tp, o):
                    positions.setdefault(v, {first: None})[(tp, o)] = None
                if rc and v in shared:
                    rc_positions.setdefault(v, {})[(tp, o)] = None
            allow = allowed_shared.get(v) or allowed.get(v)
            if allow is None or (allow[0] != tp and tp not in self.written_to(v)):
                unexpected.setdefault((v, tp), (e, o))
            elif rc and e.time < allow[1]:
                bad_rc.setdefault(v, (e, tp, o))

        canon = self.tps
        # Per process: partition -> last offset read since the last assign, and the events since it.
        last: dict[str, dict[TP, int]] = defaultdict(dict)
        since: dict[str, list[Event]] = defaultdict(list)
        for e in self.history:
            if e.type != "ok" or e.f not in ("poll", "assign"):
                continue
            if e.f == "assign":
                last[e.process] = {(str(t), int(p)): int(o) - 1 for t, p, o in e.value.get("positions", []) if int(o) >= 0}
                since[e.process] = [e]
                continue
            since[e.process].append(e)
            records = e.value["records"]
            records_read += len(records)
            rc = e.value.get("isolation") == RC
            limit = e.time if rc else INF
            mine = last[e.process]
            tp: TP = ("", -1)
            slot: dict[int, str] = {}
            before = -1
            for rec in records:
                t, p, o, v = rec
                if p != tp[1] or t != tp[0]:
                    if tp[1] >= 0:
                        mine[tp] = before
                    tp = canon.get((t, p), (t, p))
                    slot = at[tp]
                    before = mine.get(tp, -1)
                if o <= before:
                    self._nonmonotonic(since[e.process], rec, before)
                before = o
                allow = allowed.get(v)
                if allow is not None and allow[0] is tp and allow[1] <= limit:
                    old = slot.get(o)
                    if old == v:
                        continue
                    if old is None and v not in first_pos:
                        slot[o] = v
                        first_pos[v] = (tp, o)
                        continue
                see(e, tp, o, v, rc)
            if tp[1] >= 0:
                mine[tp] = before

        for e in self.final_reads:
            rc = e.value.get("isolation") == RC
            limit = e.time if rc else INF
            for key, part in e.value["partitions"].items():
                tp = _tp(key)
                tp = canon.get(tp, tp)
                slot = at[tp]
                records = part["records"]
                records_read += len(records)
                for o, v in records:
                    allow = allowed.get(v)
                    if allow is not None and allow[0] is tp and allow[1] <= limit:
                        old = slot.get(o)
                        if old == v:
                            continue
                        if old is None and v not in first_pos:
                            slot[o] = v
                            first_pos[v] = (tp, o)
                            continue
                    see(e, tp, o, v, rc)
                if rc:
                    self.final[tp] = _FinalRead(e, int(part["end"]), records, {v for _, v in records})

        for op in self.ops.values():
            for tp, o, v in op.inputs:
                see(op.invoke, tp, o, v, False)
            delivered = op.completion.value.get("offsets") if op.completion is not None else None
            if op.completion is None or not isinstance(delivered, dict) or not delivered:
                continue
            for tp, v in op.writes:
                o = delivered.get(v)
                if o is None or o < 0:
                    continue
                slot = at[tp]
                old = slot.get(o)
                if old == v:
                    continue
                if old is None and v not in first_pos:
                    slot[o] = v
                    first_pos[v] = (tp, o)
                    continue
                see(op.completion, tp, o, v, False)

        self.records_read = records_read
        self._report_observations(conflicts, positions, rc_positions, unexpected, bad_rc)

    def _nonmonotonic(self, since: list[Event], rec: list[Any], before: int) -> None:
        """Record ``rec`` of poll ``since[-1]`` is at or below offset ``before`` of its partition: the
        excerpt is that poll and the latest event since the assign that read ``before`` (or the
        assign, if it set it)."""
        e = since[-1]
        tp, o = (rec[0], rec[1]), rec[2]
        how = f"{'repeats' if o == before else 'steps back from'} offset {before}"
        only = {e.index}
        events: list[Event] = []
        for earlier in reversed(since):
            if earlier.f == "assign":
                events.append(earlier)
                how = f"is below offset {before + 1} it was assigned at (#{earlier.index})"
                break
            records = earlier.value["records"]
            if earlier is e:
                records = records[: next(i for i, r in enumerate(records) if r is rec)]
            if any(r[2] == before and r[1] == tp[1] and r[0] == tp[0] for r in records):
                only.add(earlier.index)
                where = "earlier in that poll" if earlier is e else f"in poll #{earlier.index}"
                how += f" read {where}"
                break
        self._add(
            "nonmonotonic-offsets",
            f"{e.process} read {_fmt(tp, o)} in poll #{e.index}: it {how}",
            [],
            positions={(tp[0], tp[1], before), (tp[0], tp[1], o)},
            only=only,
            events=events,
        )

    def _report_observations(
        self,
        conflicts: dict[Pos, dict[str, None]],
        positions: dict[str, dict[tuple[TP, int], None]],
        rc_positions: dict[str, dict[tuple[TP, int], None]],
        unexpected: dict[tuple[str, TP], tuple[Event, int]],
        bad_rc: dict[str, tuple[Event, TP, int]],
    ) -> None:
        for v, seen in positions.items():
            writers = self.writers(v)
            if not writers:
                continue
            rc_seen = rc_positions.get(v, {})
            if len(seen) > len(writers) or len(rc_seen) > 1:
                where = ", ".join(_fmt(tp, o) for tp, o in sorted(seen))
                by = ", ".join(op.describe() for op in writers)
                rc_note = f" ({len(rc_seen)} of them read_committed)" if len(rc_seen) > 1 else ""
                self._add("duplicate", f"{v!r} written by {by} is at {len(seen)} positions{rc_note}: {where}", writers, values={v})
        for v, (e, tp, o) in bad_rc.items():
            writers = self.writers(v)
            possible = [op for op in writers if op.visible_from < INF]
            if possible:
                first = min(possible, key=lambda op: op.visible_from)
                self._add(
                    "precommitted-read",
                    f"{e.process} read {v!r} at {_fmt(tp, o)} read_committed (#{e.index}, t={e.time:.6f}) "
                    f"{first.visible_from - e.time:.6f} s before {first.describe()} called commit",
                    writers,
                    values={v},
                )
            else:
                self._add(
                    "aborted-read",
                    f"{e.process} read {v!r} at {_fmt(tp, o)} read_committed (#{e.index}) but "
                    + ", ".join(op.describe() + (" never called commit" if op.status == "unknown" else "") for op in writers),
                    writers,
                    values={v},
                )
        for (tp0, p0, o), values in conflicts.items():
            tp = (tp0, p0)
            writers = [op for v in values for op in self.writers(v)]
            self._add(
                "inconsistent-offsets",
                f"{_fmt(tp, o)} holds {len(values)} values: " + ", ".join(repr(v) for v in values),
                writers,
                positions={(tp0, p0, o)},
            )
        for (v, tp), (e, o) in unexpected.items():
            dest = sorted(self.written_to(v))
            why = "was never written" if not dest else "was written to " + ", ".join(_fmt(d) for d in dest)
            self._add(
                "unexpected-value",
                f"{e.process} read {v!r} from {_fmt(tp, o if o >= 0 else None)} (#{e.index}); it {why}",
                self.writers(v),
                values={v},
            )

    def _add(self, kind: str, description: str, ops: list[_Op], **focus: Any) -> _Draft:
        draft = _Draft(kind, description, ops, **focus)
        self.drafts[kind].append(draft)
        return draft

    # -- what the final reads decide

    def judge_final(self) -> None:
        final = self.final
        lost: set[str] = set()
        for op in self.ops.values():
            status = op.status
            if status == "aborted":
                continue
            visible: list[str] = []
            missing: list[tuple[TP, str]] = []
            for tp, v in op.writes:
                read = final.get(tp)
                if read is None:
                    continue
                if v in read.values:
                    if v not in self.more_writers:
                        visible.append(v)
                else:
                    missing.append((tp, v))
            for tp, v in missing if status == "committed" else ():
                if v in lost:
                    continue
                lost.add(v)
                read = final[tp]
                delivered = op.completion.value.get("offsets", {}) if op.completion is not None else {}
                at = f" (delivered at offset {delivered[v]})" if isinstance(delivered, dict) and v in delivered else ""
                self._add(
                    "lost-write",
                    f"{op.describe()} wrote {v!r} to {_fmt(tp)}{at}, missing from the final read_committed read #{read.event.index} (end {read.end})",
                    self.writers(v),
                    values={v},
                    partitions={tp},
                )
            if visible and missing:
                gone = ", ".join(f"{v!r} in {_fmt(tp)}" for tp, v in missing)
                self._add(
                    "torn-transaction",
                    f"{op.describe()} is partly visible in the final read_committed reads: {len(visible)} of its values are, {len(missing)} are not: {gone}",
                    [op],
                    values={v for _, v in op.writes},
                    partitions={tp for tp, _ in missing},
                )
        self._judge_offsets(lost)

    def _judge_offsets(self, lost: set[str]) -> None:
        """invisible-committed-offsets: a group's final committed offsets against its outputs."""
        by_group: dict[str, list[_Op]] = defaultdict(list)
        for op in self.ops.values():
            if op.f == "ctp":
                by_group[op.group].append(op)
        for group, ops in by_group.items():
            if group not in self.committed_offsets:
                continue
            event, committed = self.committed_offsets[group]
            consumed: dict[Pos, tuple[str, list[_Op]]] = {}
            lowest: dict[TP, int] = {}
            for op in ops:
                for tp, o, v in op.inputs:
                    consumed.setdefault((tp[0], tp[1], o), (v, []))[1].append(op)
                    lowest[tp] = min(o, lowest.get(tp, o))
            # Inputs the committed offsets cover: consumed ones, and the final read's records from the
            # lowest offset the stage consumed there (below that, an offset reset policy may skip).
            covered: dict[Pos, str] = {}
            for pos, (v, _) in consumed.items():
                if pos[2] < committed.get((pos[0], pos[1]), -1):
                    covered[pos] = v
            for tp, upto in committed.items():
                read = self.final.get(tp)
                if read is not None and tp in lowest:
                    for o, v in read.records:
                        if lowest[tp] <= o < upto:
                            covered.setdefault((tp[0], tp[1], o), v)
            for pos in sorted(covered):
                v = covered[pos]
                tp, o, out = (pos[0], pos[1]), pos[2], ctp_output(v)
                upto = committed[tp]
                attempts = consumed.get(pos, (v, []))[1]
                if not attempts:
                    self._add(
                        "invisible-committed-offsets",
                        f"group {group} committed {_fmt(tp)} up to {upto} but no ctp attempt consumed its input {v!r} at {_fmt(tp, o)}",
                        [],
                        positions={pos},
                        events=[event],
                    )
                    continue
                if out in lost:
                    continue
                dests = self.written_to(out)
                judged = [self.final[d] for d in dests if d in self.final]
                if judged and not any(out in read.values for read in judged):
                    self._add(
                        "invisible-committed-offsets",
                        f"group {group} committed {_fmt(tp)} up to {upto} but the output {out!r} of its input {_fmt(tp, o)} "
                        f"is missing from the final read_committed read of {', '.join(_fmt(d) for d in sorted(dests))}",
                        attempts,
                        values={v, out},
                        partitions=set(dests),
                        events=[event],
                    )
            # Conversely: an output finally visible whose input the committed offsets do not cover.
            for pos, (v, attempts) in consumed.items():
                out = ctp_output(v)
                tp = (pos[0], pos[1])
                if pos[2] < committed.get(tp, -1):
                    continue
                if any(out in self.final[d].values for d in self.written_to(out) if d in self.final):
                    self._add(
                        "invisible-committed-offsets",
                        f"output {out!r} is finally visible but group {group}'s committed offset for {_fmt(tp)} "
                        f"({committed.get(tp, 'none')}) does not cover its input {_fmt(tp, pos[2])}",
                        attempts,
                        values={v, out},
                        events=[event],
                    )

    # -- excerpts

    def excerpts(self, limit: int) -> dict[str, list[Anomaly]]:
        drafts = [d for found in self.drafts.values() for d in found[:limit]]
        by_value: dict[str, list[int]] = defaultdict(list)
        by_pos: dict[Pos, list[int]] = defaultdict(list)
        by_tp: dict[TP, list[int]] = defaultdict(list)
        for i, d in enumerate(drafts):
            for v in d.values:
                by_value[v].append(i)
            for pos in d.positions:
                by_pos[pos].append(i)
            for tp in d.partitions:
                by_tp[tp].append(i)
        picked: list[dict[int, Event]] = [{} for _ in drafts]
        for i, d in enumerate(drafts):
            for op in d.ops:
                for e in op.events:
                    picked[i][e.index] = e
            for e in d.events:
                picked[i][e.index] = e
        if drafts:
            self._cut_reads(drafts, picked, by_value, by_pos, by_tp)
        context = sorted(self.context, key=lambda e: (e.time, e.index))
        times = [e.time for e in context]
        out: dict[str, list[Anomaly]] = {kind: [] for kind in KINDS}
        n = 0
        for kind, found in self.drafts.items():
            for j, d in enumerate(found):
                if j >= limit:
                    out[kind].append(Anomaly(kind, d.description, []))
                    continue
                chosen = picked[n]
                n += 1
                if chosen:
                    lo, hi = min(e.time for e in chosen.values()), max(e.time for e in chosen.values())
                    for e in context[bisect.bisect_left(times, lo) : bisect.bisect_right(times, hi)]:
                        chosen.setdefault(e.index, e)
                out[kind].append(Anomaly(kind, d.description, [chosen[k] for k in sorted(chosen)]))
        return out

    def _cut_reads(
        self,
        drafts: list[_Draft],
        picked: list[dict[int, Event]],
        by_value: dict[str, list[int]],
        by_pos: dict[Pos, list[int]],
        by_tp: dict[TP, list[int]],
    ) -> None:
        none: list[int] = []

        def wanted(e: Event, tp: TP, o: int, v: str) -> list[int]:
            hits = by_value.get(v, none) + by_pos.get((tp[0], tp[1], o), none)
            return [i for i in hits if (only := drafts[i].only) is None or e.index in only]

        for e in self.polls:
            kept: dict[int, list[Any]] = defaultdict(list)
            for rec in e.value["records"]:
                if rec[3] not in by_value and (rec[0], rec[1], rec[2]) not in by_pos:
                    continue
                for i in wanted(e, (rec[0], rec[1]), rec[2], rec[3]):
                    if not kept[i] or kept[i][-1] is not rec:
                        kept[i].append(rec)
            for i, records in kept.items():
                picked[i][e.index] = replace(e, value={**e.value, "records": records})
        for e in self.final_reads:
            parts: dict[int, dict[str, Any]] = defaultdict(dict)
            for key, part in e.value["partitions"].items():
                tp = _tp(key)
                for i in by_tp.get(tp, []):
                    parts[i][key] = {"end": part["end"], "records": []}
                for rec in part["records"]:
                    if rec[1] not in by_value and (tp[0], tp[1], rec[0]) not in by_pos:
                        continue
                    for i in wanted(e, tp, rec[0], rec[1]):
                        slot = parts[i].setdefault(key, {"end": part["end"], "records": []})
                        if not slot["records"] or slot["records"][-1] is not rec:
                            slot["records"].append(rec)
            for i, kept_parts in parts.items():
                picked[i][e.index] = replace(e, value={**e.value, "partitions": kept_parts})
        for op in self.ops.values():
            hits: set[int] = set()
            for tp, o, v in op.inputs:
                hits.update(wanted(op.invoke, tp, o, v))
            delivered = op.completion.value.get("offsets") if op.completion is not None else None
            if isinstance(delivered, dict):
                for tp, v in op.writes:
                    if v in delivered:
                        hits.update(by_pos.get((tp[0], tp[1], int(delivered[v])), []))
            for i in hits:
                if drafts[i].only is None:
                    for ev in op.events:
                        picked[i][ev.index] = ev

    def report(self, anomalies: dict[str, list[Anomaly]]) -> Report:
        transactions: dict[str, dict[str, int]] = {}
        for f in ("txn", "ctp"):
            c = Counter(op.status for op in self.ops.values() if op.f == f)
            if c:
                transactions[f] = {s: c[s] for s in ("committed", "aborted", "unknown")}
        ops = {f: dict(sorted(c.items())) for f, c in sorted(self.counts.items())}
        return Report(len(self.history), ops, transactions, self.records_read, anomalies)


def check(events: Iterable[Event], excerpts: int = 20) -> Report:
    """The anomalies of a history (see the module docstring); ``ValueError`` if it is malformed.

    The first ``excerpts`` anomalies of each kind carry their excerpt of the history; later
    ones (a broken run may have millions) carry none.
    """
    checker = _Checker(events)
    checker.parse()
    checker.observe()
    checker.judge_final()
    return checker.report(checker.excerpts(excerpts))
