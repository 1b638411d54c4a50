"""The sink's protocol (``protocol.task_steps``, as the real sink runs it) against an in-memory Kafka,
under random interleavings of task attempts, worker deaths, driver crashes, speculative copies, fences
and splits that change between runs.

The world: one micro-batch whose input is a multiset of rows.  Each run of the query splits the rows
into tasks (the same split as before, or another); tasks run a few at a time (``cores``), and the
scheduler picks, step by step, which attempt moves on, which dies (its transaction stays open until
fenced), when a speculative copy starts, and when the driver dies (a new run starts, maybe with another
split).  A refusal fails its task; Spark retries it, then the run ends, and the user restarts with the
split the micro-batch was first written with.

The invariant, checked at the end: if a run completed the micro-batch, every row is in the output
exactly as often as in the input and no transaction is left open once the driver's commit fenced the
slots it did not use; otherwise no row is in the output more often than in the input (a refusal
rewrote nothing).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from onceflow.spark.protocol import (
    Abort,
    Clock,
    Commit,
    Fence,
    Fenced,
    Fingerprint,
    Outcome,
    ReadOthers,
    ReadOwn,
    ReadRows,
    Record,
    Settings,
    SinkRefusal,
    Sleep,
    SlotRecord,
    Step,
    TaskIdentity,
    WriteRows,
    Written,
    task_steps,
)

BATCH = 3
PREFIX = "p"
MAX_ATTEMPTS = 3
SETTINGS = Settings(PREFIX, replay_check_timeout_ms=5_000, rival_timeout_s=20.0, wait_poll_s=0.5)


def fingerprint(rows: list[str]) -> tuple[int, str]:
    fp = Fingerprint()
    for row in rows:
        fp.add("out", row, None, None, None)
    return fp.rows, fp.hex


@dataclass
class Kafka:
    """The broker as the protocol sees it: committed output, slot records, producer epochs, open transactions."""

    output: Counter[str] = field(default_factory=Counter)
    records: dict[int, SlotRecord] = field(default_factory=dict)
    epochs: dict[int, int] = field(default_factory=dict)
    #: slot -> (epoch, rows) of the transaction the slot's current epoch holds open
    open: dict[int, tuple[int, list[str]]] = field(default_factory=dict)
    clock: float = 0.0

    def fence(self, slot: int) -> int:
        self.epochs[slot] = self.epochs.get(slot, 0) + 1
        self.open.pop(slot, None)  # the coordinator aborts what the earlier epoch left open
        return self.epochs[slot]


@dataclass
class Attempt:
    run: int
    slot: int
    number: int
    rows: list[str]
    steps: Generator[Step, Any, Outcome]
    epoch: int | None = None
    result: Any = None
    fenced: bool = False
    outcome: Outcome | None = None
    failed: bool = False
    refused: bool = False


class World:
    def __init__(self, rows: list[str], first_split: list[list[str]], cores: int) -> None:
        self.rows = rows
        self.kafka = Kafka()
        self.first_split = first_split
        self.cores = cores
        self.run = -1
        self.split: list[list[str]] = []
        self.attempts: list[Attempt] = []
        self.pending: list[int] = []
        self.done: dict[int, Attempt] = {}
        self.tries: Counter[int] = Counter()
        self.snapshot: dict[int, SlotRecord] | None = None
        self.completed = False
        self.refused = False
        self.slots_ever = 0

    # -- runs ------------------------------------------------------------------------------

    def start_run(self, split: list[list[str]]) -> None:
        self.run += 1
        self.split = split
        self.slots_ever = max(self.slots_ever, len(split))
        self.attempts = []  # the earlier run's attempts die with its driver
        self.pending = list(range(len(split)))
        self.done = {}
        self.tries = Counter()
        self.snapshot = None
        self.refused = False

    def task(self, slot: int, number: int) -> TaskIdentity:
        return TaskIdentity("q", BATCH, slot, f"run{self.run}", number, None, stage=self.run)

    def launch(self, slot: int) -> None:
        number = self.tries[slot]
        self.tries[slot] += 1
        rows = self.split[slot]
        self.attempts.append(Attempt(self.run, slot, number, rows,
                                     task_steps(self.task(slot, number), SETTINGS, bool(rows))))

    @property
    def running(self) -> list[Attempt]:
        return [a for a in self.attempts if a.outcome is None and not a.failed]

    # -- one step of one attempt -------------------------------------------------------------

    def advance(self, attempt: Attempt) -> None:
        try:
            step = attempt.steps.throw(Fenced()) if attempt.fenced else attempt.steps.send(attempt.result)
        except StopIteration as stop:
            attempt.outcome = stop.value
            if attempt.slot not in self.done:
                self.done[attempt.slot] = attempt
            return
        except SinkRefusal:
            self.fail(attempt, refused=True)
            return
        except TimeoutError:
            self.fail(attempt)
            return
        attempt.fenced = False
        try:
            attempt.result = self.carry_out(attempt, step)
        except Fenced:
            attempt.result, attempt.fenced = None, True

    def carry_out(self, attempt: Attempt, step: Step) -> Any:
        k = self.kafka
        slot = attempt.slot
        current = attempt.epoch is not None and k.epochs.get(slot) == attempt.epoch
        if isinstance(step, Fence):
            attempt.epoch = k.fence(slot)
            return None
        if isinstance(step, ReadOwn):
            return k.records.get(slot)
        if isinstance(step, ReadOthers):
            if step.fresh:
                return dict(k.records)
            if self.snapshot is None:  # the most stale a worker's cached read can be: the run's first
                self.snapshot = dict(k.records)
            return self.snapshot
        if isinstance(step, Clock):
            return k.clock
        if isinstance(step, Sleep):
            k.clock += step.seconds
            return None
        if isinstance(step, ReadRows):
            return fingerprint(attempt.rows)
        if isinstance(step, WriteRows):
            if current:
                k.open[slot] = (k.epochs[slot], list(attempt.rows))
            return fingerprint(attempt.rows)
        if isinstance(step, Commit):
            if not current:
                raise Fenced()
            _, rows = k.open.pop(slot, (0, []))
            k.output.update(rows)
            k.records[slot] = step.record
            return None
        if isinstance(step, Abort):
            if current:
                k.open.pop(slot, None)
            return None
        assert isinstance(step, Record)
        if not current:
            if step.best_effort:
                return False
            raise Fenced()
        k.records[slot] = step.record
        return True

    def fail(self, attempt: Attempt, refused: bool = False) -> None:
        """A task attempt failed (its worker died, or it refused): Spark retries it, up to a limit."""
        attempt.failed = True
        attempt.refused = refused
        if attempt.slot in self.done or any(a.slot == attempt.slot for a in self.running):
            return
        if self.tries[attempt.slot] < MAX_ATTEMPTS:
            self.pending.insert(0, attempt.slot)
        else:
            self.refused = refused
            self.attempts = []  # the micro-batch failed: the query stops
            self.pending = []

    def finish(self) -> None:
        """Spark committed the micro-batch: the driver fences the slots no task of it fenced."""
        self.completed = True
        fenced = {slot for slot, a in self.done.items() if a.epoch is not None or (a.outcome and a.outcome.action == "rival")}
        for slot in range(self.slots_ever):
            if slot not in fenced:
                self.kafka.fence(slot)


def split_rows(rows: list[str], parts: int, assignment: list[int]) -> list[list[str]]:
    out: list[list[str]] = [[] for _ in range(parts)]
    for row, slot in zip(rows, assignment, strict=True):
        out[slot % parts].append(row)
    return out


@st.composite
def splits(draw: st.DrawFn, rows: list[str]) -> list[list[str]]:
    parts = draw(st.integers(1, 5))
    assignment = draw(st.lists(st.integers(0, parts - 1), min_size=len(rows), max_size=len(rows)))
    return split_rows(rows, parts, assignment)


def simulate(data: st.DataObject, *, splits_change: bool) -> World:
    """Draw a world and run it: random scheduling and faults, then (so that a run can finish) fair
    scheduling without faults."""
    rows = data.draw(st.lists(st.sampled_from([f"r{i}" for i in range(12)]), min_size=1, max_size=12), label="rows")
    first = data.draw(splits(rows), label="first split")
    cores = data.draw(st.integers(1, 4), label="cores") if splits_change else 5
    world = World(rows, first, cores)
    for slot in data.draw(st.sets(st.integers(0, 4), max_size=3), label="slots that wrote the batch before"):
        world.kafka.records[slot] = SlotRecord(slot, Written(BATCH - 1, "old", 1, "0" * 32, PREFIX))
    replay = first
    if data.draw(st.booleans(), label="a crashed run left the micro-batch partly written"):
        written = data.draw(st.sets(st.integers(0, len(first) - 1)), label="slots it committed")
        confirmed = data.draw(st.booleans(), label="a replay that crashed too confirmed them")
        for slot in written:
            world.kafka.output.update(first[slot])
            record = SlotRecord(slot, Written(BATCH, "crashed", *fingerprint(first[slot]), PREFIX))
            world.kafka.records[slot] = record.confirm(TaskIdentity("q", BATCH, slot, "replay")) if confirmed else record
        for slot in set(range(len(first))) - written:
            if data.draw(st.booleans(), label=f"slot {slot} left its transaction open"):
                world.kafka.open[slot] = (world.kafka.fence(slot), list(first[slot]))
        world.slots_ever = len(first)
        event(f"partly written: {len(written)} of {len(first)} slots")
        if splits_change:
            replay = data.draw(st.one_of(st.just(first), splits(rows)), label="replay split")
    world.start_run(replay)
    crashes = data.draw(st.integers(0, 3), label="driver crashes")
    faulty = data.draw(st.integers(0, 300), label="steps with faults")
    for step in range(5000):
        if world.completed:
            break
        if not world.attempts and not world.pending:  # the query stopped: the user restarts it
            if world.run >= 40:
                break
            if world.refused or not splits_change:
                replay = first
            else:
                replay = data.draw(st.one_of(st.just(world.split), splits(rows)), label="split")
            world.start_run(replay)
            continue
        if len(world.done) == len(world.split):
            world.finish()
            break
        running = world.running
        if step >= faulty:  # fair: start what can start, then move every attempt on
            while world.pending and len(world.running) < world.cores:
                world.launch(world.pending.pop(0))
            for attempt in world.running:
                world.advance(attempt)
            continue
        choices = ["step"] * 6 if running else []
        if world.pending and len(running) < world.cores:
            choices += ["launch"] * 3
        if running:
            choices += ["die", "speculate"]
        if crashes:
            choices.append("crash")
        action = data.draw(st.sampled_from(choices), label="action")
        if action == "launch":
            world.launch(world.pending.pop(0))
        elif action == "step":
            world.advance(data.draw(st.sampled_from(running), label="attempt"))
        elif action == "die":
            world.fail(data.draw(st.sampled_from(running), label="dies"))
        elif action == "speculate":
            victim = data.draw(st.sampled_from(running), label="speculated")
            if world.tries[victim.slot] < MAX_ATTEMPTS:
                world.launch(victim.slot)
        else:
            crashes -= 1
            world.attempts, world.pending = [], []
    event("completed" if world.completed else "refused" if world.refused else "stopped")
    return world


@settings(max_examples=250, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_row_is_written_exactly_once_or_the_query_refuses_having_rewritten_nothing(data: st.DataObject) -> None:
    world = simulate(data, splits_change=True)
    expected = Counter(world.rows)
    duplicated = world.kafka.output - expected
    assert not duplicated, f"rows written more often than they came: {dict(duplicated)}"
    if world.completed:
        assert world.kafka.output == expected, f"missing: {dict(expected - world.kafka.output)}"
        assert not world.kafka.open, f"transactions left open: {world.kafka.open}"


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_replay_split_as_before_always_finishes_exactly_once_without_a_refusal(data: st.DataObject) -> None:
    world = simulate(data, splits_change=False)
    assert not any(a.refused for a in world.attempts), "no attempt refused"
    assert world.completed, f"the micro-batch did not complete: {world.run + 1} runs"
    assert world.kafka.output == Counter(world.rows)
    assert not world.kafka.open, f"transactions left open: {world.kafka.open}"
