"""The exactly-once sink's protocol as pure decisions: what a write task does, given what it reads.

Theory of operation
-------------------
Spark runs a micro-batch as tasks, retries a task, re-runs a micro-batch
after a driver restart, and may run two copies of a task at once
(speculation).  It has no atomic commit across tasks.  So each task makes
its own output atomic with one Kafka transaction, and the question "was
this already written?" is answered per *slot* (Spark's task partition
number) by a record kept in Kafka itself:

* **Where.**  Every sink scope (a streaming query; one ``write_exactly_once``
  name of a query; one batch job) has a *progress topic*,
  ``onceflow-progress-<query id>[-<name>]``, compacted, with one partition
  per slot.  Slot P's record lives in partition P under one key, so
  compaction keeps exactly its latest record, for as long as the topic
  lives: no retention setting expires it (committed offsets of an empty
  group expire after ``offsets.retention.minutes``; that is why the record
  is not an offset).  Partition P is written only by slot P's
  transactional id, so its last stable offset is held only by slot P's own
  transaction, which slot P fences before it reads.
* **What.**  A record (``SlotRecord``) says which micro-batch the slot last
  *wrote* (in which run, how many rows, their fingerprint), and, for the
  current replay, whether a later run *confirmed* those rows or *refused*
  the micro-batch.  It is produced in the same transaction as the rows:
  output and record become visible together or not at all.
* **Same input, not same task number.**  A row's fingerprint is a hash of
  what is written (topic, partition, key, value, headers); a task's is the
  sum of its rows' (mod 2**128), so it does not depend on their order
  (``Fingerprint``).  A replayed slot whose earlier attempt wrote the same
  rows skips; one whose rows differ refuses.  A slot nobody wrote yet may
  only write once every slot an *earlier run* wrote for this micro-batch has
  confirmed its rows in this run: if those match, the rows left over for
  the unwritten slots are exactly the rows not written yet, whatever their
  split; if any does not match, the split changed, and the micro-batch is
  refused before anything more is written (``plan``: ``Wait``).

A task's decision, ``plan``, runs after the task fenced its slot
(``init_transactions``) and read the records:

1. A record of a micro-batch *after* this one: the checkpoint went back in
   time (restored, or edited).  Refuse.
2. The record was written with another ``transactionalIdPrefix``: refuse
   (the old ids could not be fenced; the prefix is pinned to the scope).
3. This slot already wrote this micro-batch: ``Check`` the rows against the
   record (``judge``).  Written in this run (a task retry, a speculative
   copy): skip.  Written in an earlier run: ``Confirm`` if they match,
   refuse if not.
4. This run refused this micro-batch in some slot: refuse too.
5. Slots of an earlier run wrote this micro-batch and are not confirmed
   yet: ``Wait`` (polling the records) until they are, then write.  Nobody
   of an earlier run wrote it: ``Write``.

A waiting task holds a core, and the tasks it waits for may be queued
behind it (a restart with fewer cores than the first run: Spark starts
tasks in partition order).  So a task waits only ``replayWaitMs``; then
it *defers*: it hands its rows to the driver (its commit message) and
ends, freeing its core.  Once every task has returned, the driver's
commit runs the same protocol for each deferred slot (``at_driver``):
every slot of the earlier run has had its task by then, so one still
unconfirmed means the micro-batch has fewer tasks now, and the driver
refuses; otherwise it writes the rows.  A micro-batch whose deferred
rows are not written is not committed by Spark, so a failure there
replays it.

``acceptChangedReplay=<batch>`` lets one refused micro-batch through: its
written slots skip, its other slots write without waiting.

Everything here is plain data and arithmetic; ``sink.py`` does the I/O.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "PROGRESS_TOPIC_PREFIX",
    "Check",
    "Confirm",
    "Fingerprint",
    "Refuse",
    "Refused",
    "Skip",
    "SlotRecord",
    "TaskIdentity",
    "Wait",
    "Write",
    "Written",
    "judge",
    "plan",
    "progress_topic",
    "transactional_id",
]

PROGRESS_TOPIC_PREFIX = "onceflow-progress-"
DEFAULT_PREFIX = "onceflow-sink"
RECORD_VERSION = 1
_MASK = (1 << 128) - 1


class SinkRefusal(RuntimeError):
    """The sink cannot be sure a write would be exactly-once, and refuses it; the message says why
    and what to do.  Nothing of the refused micro-batch was written by the refusing task."""


# -- identity -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """Which write this is.

    ``query_id`` is Spark's query id (stable across restarts from a
    checkpoint) or a batch job's id; ``name`` is ``write_exactly_once``'s
    name; ``batch_id`` the micro-batch (0 for a batch job); ``partition`` the
    task's partition number, its *slot*; ``run`` identifies one execution of
    the query (Spark's run id, new at every start) or of the batch job;
    ``attempt`` is Spark's attempt number of the task, ``stage`` its stage.
    """

    query_id: str
    batch_id: int
    partition: int
    run: str
    attempt: int = 0
    name: str | None = None
    #: Spark's stage id: a task's retries and speculative copies share it; a second write of the
    #: same scope in one micro-batch does not.
    stage: int = 0

    @property
    def progress_topic(self) -> str:
        return progress_topic(self.query_id, self.name)

    def describe(self) -> str:
        scope = f"query {self.query_id}" + (f" ({self.name})" if self.name else "")
        return f"micro-batch {self.batch_id} of {scope}"


def progress_topic(query_id: str, name: str | None = None) -> str:
    """``onceflow-progress-<query id>[-<name>]``: where a scope's slot records live."""
    return f"{PROGRESS_TOPIC_PREFIX}{query_id}" + (f"-{name}" if name else "")


def transactional_id(prefix: str | None, query_id: str, partition: int) -> str:
    """``<prefix>-<query id>-<slot>``: stable across retries and restarts, unique per query."""
    return f"{prefix or DEFAULT_PREFIX}-{query_id}-{partition}"


# -- the record ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Written:
    """A micro-batch a slot wrote: in which run, how many rows, their fingerprint, under which prefix."""

    batch: int
    run: str
    rows: int
    fingerprint: str
    prefix: str
    stage: int = 0
    #: Written by the driver's commit for a task that deferred.
    by_driver: bool = False


@dataclass(frozen=True, slots=True)
class Refused:
    batch: int
    run: str
    reason: str


@dataclass(frozen=True, slots=True)
class SlotRecord:
    """The latest state of one slot: what it last wrote, and what the current run said about it."""

    slot: int
    written: Written | None = None
    #: (batch, run): a later run's replay of ``written.batch`` had the same rows.
    confirmed: tuple[int, str] | None = None
    refused: Refused | None = None

    def key(self) -> bytes:
        return f"slot-{self.slot}".encode()

    def encode(self) -> bytes:
        data: dict[str, Any] = {"v": RECORD_VERSION, "slot": self.slot}
        if self.written is not None:
            w = self.written
            data["written"] = {"batch": w.batch, "run": w.run, "stage": w.stage, "rows": w.rows, "fp": w.fingerprint,
                               "prefix": w.prefix, **({"driver": True} if w.by_driver else {})}
        if self.confirmed is not None:
            data["confirmed"] = {"batch": self.confirmed[0], "run": self.confirmed[1]}
        if self.refused is not None:
            r = self.refused
            data["refused"] = {"batch": r.batch, "run": r.run, "reason": r.reason}
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes | None, slot: int) -> SlotRecord:
        """The record in ``value``; a record that is not one of ours is a ``SinkRefusal`` (never guessed at)."""
        try:
            data = json.loads(value or b"")
            if not isinstance(data, dict) or data.get("v") != RECORD_VERSION or data.get("slot") != slot:
                raise ValueError(f"version {data.get('v') if isinstance(data, dict) else None!r}")
            written = confirmed = refused = None
            if "written" in data:
                w = data["written"]
                written = Written(int(w["batch"]), str(w["run"]), int(w["rows"]), str(w["fp"]), str(w["prefix"]),
                                  int(w.get("stage", 0)), bool(w.get("driver", False)))
            if "confirmed" in data:
                confirmed = (int(data["confirmed"]["batch"]), str(data["confirmed"]["run"]))
            if "refused" in data:
                r = data["refused"]
                refused = Refused(int(r["batch"]), str(r["run"]), str(r["reason"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise SinkRefusal(f"partition {slot} of the sink's progress topic holds a record this version of "
                              f"onceflow does not understand ({exc}): {value[:200] if value else value!r}") from None
        return cls(slot, written, confirmed, refused)

    # transitions: every record carries what the slot last wrote forward
    def write(self, task: TaskIdentity, rows: int, fingerprint: str, prefix: str, by_driver: bool = False) -> SlotRecord:
        return SlotRecord(self.slot, Written(task.batch_id, task.run, rows, fingerprint, prefix, task.stage, by_driver))

    def confirm(self, task: TaskIdentity) -> SlotRecord:
        return replace(self, confirmed=(task.batch_id, task.run), refused=None)

    def refuse(self, task: TaskIdentity, reason: str) -> SlotRecord:
        return replace(self, refused=Refused(task.batch_id, task.run, reason))

    def confirmed_by(self, task: TaskIdentity) -> bool:
        return self.confirmed == (task.batch_id, task.run)

    def refused_by(self, task: TaskIdentity) -> Refused | None:
        r = self.refused
        return r if r is not None and (r.batch, r.run) == (task.batch_id, task.run) else None


# -- fingerprints -------------------------------------------------------------------------


_LENGTH = struct.Struct("<I").pack
_PARTITION = struct.Struct("<i").pack
_NULL = b"\xff\xff\xff\xff"


def _field(value: Any) -> bytes:
    if value is None:
        return _NULL
    data = value.encode() if isinstance(value, str) else bytes(value)
    return _LENGTH(len(data)) + data


class Fingerprint:
    """The multiset hash of the messages a task writes: order does not matter, repeats do.

    Each message's digest is BLAKE2b-128 of its length-prefixed fields (topic, partition, key,
    value, then each header's name and value); the fingerprint is their sum modulo 2**128.  The
    format is kept in progress records, so it never changes (a golden value is tested).  ``add``
    is on every row's path: bytes fields skip ``_field``'s checks, and each (topic, partition)
    prefix is built once."""

    __slots__ = ("_prefixes", "_sum", "rows")

    def __init__(self) -> None:
        self.rows = 0
        self._sum = 0
        self._prefixes: dict[tuple[str, int | None], bytes] = {}

    def add(self, topic: str, value: Any, key: Any, partition: int | None, headers: Any) -> None:
        prefix = self._prefixes.get((topic, partition))
        if prefix is None:
            prefix = self._prefixes[(topic, partition)] = _field(topic) + _PARTITION(-1 if partition is None else partition)
        k = _LENGTH(len(key)) + key if type(key) is bytes else _field(key)
        v = _LENGTH(len(value)) + value if type(value) is bytes else _field(value)
        if headers:
            parts = [prefix, k, v]
            for name, header_value in headers:
                parts += (_field(name), _field(header_value))
            data = b"".join(parts)
        else:
            data = prefix + k + v
        self._sum += int.from_bytes(hashlib.blake2b(data, digest_size=16).digest(), "little")
        self.rows += 1

    def extend(self, messages: Iterable[tuple[str, Any, Any, int | None, Any]]) -> None:
        for message in messages:
            self.add(*message)

    def add_columns(self, topic: str, keys: list[Any] | None, values: list[Any]) -> None:
        """``add`` of each (``topic``, value, key, no partition, no headers), column-wise: the same
        digests, without a Python call per row."""
        prefix = _field(topic) + _PARTITION(-1)
        if keys is None:
            keys = [None] * len(values)
        blake2b, length = hashlib.blake2b, _LENGTH
        self._sum += sum(int.from_bytes(blake2b(
            prefix + (length(len(k)) + k if type(k) is bytes else _field(k)) + (length(len(v)) + v if type(v) is bytes else _field(v)),
            digest_size=16).digest(), "little") for k, v in zip(keys, values, strict=True))
        self.rows += len(values)

    @property
    def hex(self) -> str:
        return f"{self._sum & _MASK:032x}"


# -- decisions ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Write:
    """Write the rows and the record in one transaction."""


@dataclass(frozen=True, slots=True)
class Check:
    """This slot already wrote this micro-batch: read the rows and ``judge`` them against ``written``."""

    written: Written
    #: Written by this run: by an earlier attempt of this task (same stage), or by another write of the
    #: same scope in this micro-batch (another stage).
    same_run: bool
    same_stage: bool = True


@dataclass(frozen=True, slots=True)
class Wait:
    """Slots an earlier run wrote for this micro-batch must confirm first."""

    pending: frozenset[int]


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: str


@dataclass(frozen=True, slots=True)
class Confirm:
    """The rows match what an earlier run wrote: record the confirmation, write nothing."""


@dataclass(frozen=True, slots=True)
class Skip:
    """Already written: write nothing."""

    warning: str | None = None


Plan = Write | Check | Wait | Refuse
Verdict = Confirm | Skip | Refuse

_FIX = ("Restore what decided the split (repartition(n) or coalesce(n) in the query, the source and its options) "
        "and restart, so that the micro-batch is replayed as it was first written")


def _accept_hint(task: TaskIdentity) -> str:
    return (f"or, to accept that this one micro-batch may be duplicated or incomplete in the output, restart "
            f"with option acceptChangedReplay={task.batch_id}")


def plan(task: TaskIdentity, prefix: str, own: SlotRecord | None, others: Mapping[int, SlotRecord],
         accept_changed: int | None = None) -> Plan:
    """What a task does once it has fenced its slot and read the records (see the module docstring).

    ``own`` is the task's slot's record, read after the fence; ``others``
    the other slots' (the task's own slot in it is ignored)."""
    records = [r for s, r in others.items() if s != task.partition]
    if own is not None:
        records.append(own)
    ahead = sorted((r.slot, r.written.batch) for r in records if r.written and r.written.batch > task.batch_id)
    if ahead:
        slot, batch = ahead[0]
        return Refuse(f"{task.describe()} is being written, but task partition {slot} already wrote micro-batch "
                      f"{batch}: the checkpoint is older than the output (restored from a copy, or edited). Writing "
                      f"would duplicate output. Restore the newest checkpoint, or use a new checkpoint location "
                      f"(and expect the query to start over)")
    foreign = sorted({r.written.prefix for r in records if r.written and r.written.prefix != prefix})
    if foreign:
        return Refuse(f"option transactionalIdPrefix is {prefix!r}, but this sink wrote with {foreign[0]!r} before: "
                      f"the earlier ids could not be fenced. Keep transactionalIdPrefix for the life of the "
                      f"checkpoint (set it back to {foreign[0]!r}), or use a new checkpoint location")
    twice = sorted(r.slot for r in records if r.written and (r.written.batch, r.written.run) == (task.batch_id, task.run)
                   and r.written.stage != task.stage)
    if twice:
        return Refuse(_twice(task, twice[0]))
    if own is not None and own.written is not None and own.written.batch == task.batch_id:
        same_run = own.written.run == task.run
        return Check(own.written, same_run, same_run and own.written.stage == task.stage)
    for r in records:
        refused = r.refused_by(task)
        if refused is not None:
            return Refuse(refused.reason)
    earlier = {r.slot: r for r in records
               if r.written and r.written.batch == task.batch_id and r.written.run != task.run}
    if not earlier or accept_changed == task.batch_id:
        return Write()
    pending = frozenset(s for s, r in earlier.items() if not r.confirmed_by(task))
    return Wait(pending) if pending else Write()


def judge(task: TaskIdentity, check: Check, rows: int, fingerprint: str, accept_changed: int | None = None) -> Verdict:
    """A ``Check``ed slot's rows against what it wrote before."""
    w = check.written
    if check.same_run and not check.same_stage:
        return Refuse(_twice(task, task.partition))
    if (rows, fingerprint) == (w.rows, w.fingerprint):
        return Skip() if check.same_run else Confirm()
    difference = (f"task partition {task.partition} wrote {w.rows} rows (fingerprint {w.fingerprint[:12]}) in an "
                  f"earlier run, and has {rows} rows (fingerprint {fingerprint[:12]}) now")
    if check.same_run:
        return Skip(f"{task.describe()}: {difference} in the same run; the query is not deterministic. The rows "
                    f"written first stay")
    if accept_changed == task.batch_id:
        return Skip(f"{task.describe()}: {difference}; kept what was written (acceptChangedReplay)")
    cause = ("the query is not deterministic or its logic changed" if rows == w.rows else
             "the micro-batch's rows are split into tasks differently than when it was first written")
    return Refuse(f"{task.describe()} was partly written before the restart, and {difference}: {cause}. Writing it "
                  f"now could duplicate or lose rows. {_FIX}; {_accept_hint(task)}")


def _twice(task: TaskIdentity, slot: int) -> str:
    return (f"{task.describe()} is being written twice: task partition {slot} already wrote it in another stage of "
            f"this run. A second write of the same sink in one micro-batch would be dropped or duplicated; give each "
            f"write_exactly_once call of a foreachBatch function its own name")


def unconfirmed(task: TaskIdentity, pending: Iterable[int]) -> Refuse:
    """Every task of this run returned, and slots an earlier run wrote were never confirmed: no task of
    this run had them."""
    slots = ", ".join(str(s) for s in sorted(pending))
    return Refuse(f"{task.describe()} was partly written before the restart, by task partitions {slots} among "
                  f"others, and this run has no task partition {slots}: the micro-batch has fewer tasks than when it "
                  f"was first written. Writing it now could duplicate or lose rows. {_FIX}; {_accept_hint(task)}")


# -- one task, as a coroutine of I/O steps ------------------------------------------------
#
# ``task_steps`` is the whole of a write task's protocol.  It yields *steps*; whoever runs it (``sink``
# against Kafka, the tests' model against an in-memory Kafka) carries each out and sends the result
# back, and throws ``Fenced`` into it when a step finds that another attempt of the slot fenced it.


@dataclass(frozen=True, slots=True)
class Settings:
    """What a task's protocol takes from the sink's options."""

    prefix: str
    accept_changed: int | None = None
    #: How long a task of a partly written micro-batch waits for the earlier run's slots to be
    #: confirmed before it hands its rows to the driver (``Defer``).
    replay_wait_s: float = 30.0
    #: How long a fenced task waits for its rival's outcome.
    rival_timeout_s: float = 660.0
    wait_poll_s: float = 0.25


@dataclass(frozen=True, slots=True)
class Fence:
    """Make room for the slot in the progress topic and ``init_transactions``: earlier attempts are fenced."""


@dataclass(frozen=True, slots=True)
class ReadOwn:
    """-> the slot's latest record (``SlotRecord | None``)."""


@dataclass(frozen=True, slots=True)
class ReadOthers:
    """-> every slot's latest record; ``fresh``: read now, else as first read in this worker for this stage."""

    fresh: bool = False


@dataclass(frozen=True, slots=True)
class Clock:
    """-> a monotonic time in seconds."""


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class ReadRows:
    """-> (rows, fingerprint) of the task's rows, writing nothing."""


@dataclass(frozen=True, slots=True)
class WriteRows:
    """Begin a transaction and produce the task's rows into it -> (rows, fingerprint)."""


@dataclass(frozen=True, slots=True)
class Defer:
    """Read the task's rows, writing nothing, and keep them for the driver -> (rows, fingerprint)."""


@dataclass(frozen=True, slots=True)
class Commit:
    """Produce ``record`` into the open transaction and commit it."""

    record: SlotRecord


@dataclass(frozen=True, slots=True)
class Abort:
    """Abort the open transaction, if any."""


@dataclass(frozen=True, slots=True)
class Record:
    """A transaction holding only ``record`` -> True, or False if it could not be written."""

    record: SlotRecord
    #: A refusal is recorded on a best-effort basis: failing to write it must not hide it.
    best_effort: bool = False


Step = Fence | ReadOwn | ReadOthers | Clock | Sleep | ReadRows | WriteRows | Defer | Commit | Abort | Record


class Fenced(Exception):
    """Another attempt of this slot initialized its transactional id after this one."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a task did: ``written``, ``confirmed``, ``skipped``, ``empty``, ``rival`` (another attempt of
    the slot wrote it) or ``deferred`` (its rows handed to the driver); ``rows`` written or handed over;
    ``warning`` to log, if any."""

    action: str
    rows: int = 0
    warning: str | None = None


def task_steps(task: TaskIdentity, settings: Settings, has_rows: bool,
               at_driver: bool = False) -> Generator[Step, Any, Outcome]:
    """A write task's protocol (see the module docstring); raises ``SinkRefusal`` when it refuses.

    ``at_driver``: the driver's commit writing a deferred task's rows, once every task returned."""
    try:
        return (yield from _steps(task, settings, at_driver) if has_rows else _empty_steps(task, settings))
    except Fenced:
        return (yield from _rival_steps(task, settings))


def _steps(task: TaskIdentity, settings: Settings, at_driver: bool) -> Generator[Step, Any, Outcome]:
    yield Fence()
    own: SlotRecord | None = yield ReadOwn()
    base = own or SlotRecord(task.partition)
    decision: Plan = plan(task, settings.prefix, own, (yield ReadOthers(fresh=at_driver)), settings.accept_changed)
    if at_driver and isinstance(decision, Wait):
        decision = unconfirmed(task, decision.pending)
    deadline = (yield Clock()) + settings.replay_wait_s
    while isinstance(decision, Wait):
        if (yield Clock()) > deadline:
            rows, _ = yield Defer()
            return Outcome("deferred", rows)
        yield Sleep(settings.wait_poll_s)
        decision = plan(task, settings.prefix, own, (yield ReadOthers(fresh=True)), settings.accept_changed)
    if isinstance(decision, Refuse):
        yield from _refuse_steps(task, base, decision.reason)
    if isinstance(decision, Check):
        rows, fingerprint = yield ReadRows()
        verdict = judge(task, decision, rows, fingerprint, settings.accept_changed)
        if isinstance(verdict, Refuse):
            yield from _refuse_steps(task, base, verdict.reason)
        if isinstance(verdict, Confirm):
            yield Record(base.confirm(task))
            return Outcome("confirmed")
        assert isinstance(verdict, Skip)
        return Outcome("skipped", 0, verdict.warning)
    rows, fingerprint = yield WriteRows()
    yield Commit(base.write(task, rows, fingerprint, settings.prefix, by_driver=at_driver))
    return Outcome("written", rows)


def _refuse_steps(task: TaskIdentity, base: SlotRecord, reason: str) -> Generator[Step, Any, None]:
    """Record the refusal in the slot, so that the micro-batch's other tasks refuse too; then raise it."""
    yield Record(base.refuse(task, reason), best_effort=True)
    raise SinkRefusal(reason)


def _empty_steps(task: TaskIdentity, settings: Settings) -> Generator[Step, Any, Outcome]:
    """A task without rows opens no producer: it only checks, from the records as read, that its slot
    did not write rows for this micro-batch in an earlier run (then the split changed)."""
    records = yield ReadOthers()
    own = records.get(task.partition)
    decision = plan(task, settings.prefix, own, records, settings.accept_changed)
    verdict = judge(task, decision, 0, Fingerprint().hex, settings.accept_changed) \
        if isinstance(decision, Check) else decision
    if isinstance(verdict, Refuse | Confirm):
        yield Fence()
        base = own or SlotRecord(task.partition)
        if isinstance(verdict, Refuse):
            yield from _refuse_steps(task, base, verdict.reason)
        yield Record(base.confirm(task))
        return Outcome("confirmed")
    return Outcome("empty", 0, verdict.warning if isinstance(verdict, Skip) else None)


def _rival_steps(task: TaskIdentity, settings: Settings) -> Generator[Step, Any, Outcome]:
    """Fenced by another attempt of the same slot (a speculative copy): its outcome is this task's, once
    its record shows the micro-batch written or confirmed in this run."""
    yield Abort()
    deadline = (yield Clock()) + settings.rival_timeout_s
    while (yield Clock()) < deadline:
        own: SlotRecord | None = yield ReadOwn()
        if own is not None:
            refused = own.refused_by(task)
            if refused is not None:
                raise SinkRefusal(refused.reason)
            written = own.written
            if written is not None and (written.batch, written.run) == (task.batch_id, task.run):
                if written.stage != task.stage:  # not a copy of this task: another write of the sink ran beside it
                    raise SinkRefusal(_twice(task, task.partition))
                return Outcome("rival")
            if own.confirmed_by(task):
                return Outcome("rival")
        yield Sleep(0.5)
    raise TimeoutError(f"{task.describe()}: this task was fenced by another attempt of it, whose outcome did not "
                       f"show within {settings.rival_timeout_s:.0f} s")
