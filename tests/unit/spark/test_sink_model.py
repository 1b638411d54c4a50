"""The sink's protocol (``protocol.task_steps``, as the real sink runs it) against an in-memory Kafka,
under random interleavings of task attempts, worker deaths, driver crashes, speculative copies, fences
and splits that change between runs.

The world: one micro-batch whose input is a multiset of rows.  Each run of the query splits the rows
into tasks (the same split as before, or another); tasks run a few at a time (``cores``), and the
scheduler picks, step by step, which attempt moves on, which dies (its transaction stays open until
fenced), when a speculative copy starts, and when the driver dies (a new run starts, maybe with another
split).  A refusal fails its task; Spark retries it, then the run ends, and the user restarts with the
split the micro-batch was first written with.  When every task has returned, the driver's commit
writes what tasks handed it (``Defer``: they could not wait any longer for the earlier run's slots to
be confirmed, holding cores those slots' tasks needed) and fences the slots no task used.

The invariants, checked at the end: if a run completed the micro-batch, every row is in the output
exactly as often as in the input and no transaction is left open; otherwise no row is in the output
more often than in the input, and a run that refused wrote nothing.  With the split unchanged on every
restart, the micro-batch always completes, never refused, whatever the number of cores.
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
    Defer,
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
SETTINGS = Settings(PREFIX, replay_wait_s=5.0, rival_timeout_s=20.0, wait_poll_s=0.5)


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
    #: Rows handed to the driver (``Defer``).
    deferred: list[str] | None = None


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
        #: Rows each run wrote, and the runs that ended in a refusal.
        self.written: Counter[int] = Counter()
        self.refusals: set[int] = set()
        #: Attempts of crashed runs that go on (an executor that outlived its driver, a commit in doubt).
        self.zombies: list[Attempt] = []

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

    def advance(self, attempt: Attempt, driver: bool = False) -> None:
        try:
            step = attempt.steps.throw(Fenced()) if attempt.fenced else attempt.steps.send(attempt.result)
        except StopIteration as stop:
            attempt.outcome = stop.value
            if attempt.slot not in self.done and not driver and attempt.run == self.run:
                self.done[attempt.slot] = attempt
            return
        except (SinkRefusal, TimeoutError) as exc:
            if driver or attempt.run != self.run:  # a zombie's end concerns nobody
                attempt.failed, attempt.refused = True, isinstance(exc, SinkRefusal)
            else:
                self.fail(attempt, refused=isinstance(exc, SinkRefusal))
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
        if isinstance(step, Defer):
            attempt.deferred = list(attempt.rows)
            return fingerprint(attempt.rows)
        if isinstance(step, Commit):
            if not current:
                raise Fenced()
            _, rows = k.open.pop(slot, (0, []))
            k.output.update(rows)
            self.written[attempt.run] += len(rows)
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
            self.stop(refused)

    def stop(self, refused: bool) -> None:
        """The micro-batch failed: the query stops."""
        self.refused = refused
        if refused:
            self.refusals.add(self.run)
        self.attempts = []
        self.pending = []

    def finish(self) -> None:
        """Every task returned: the driver's commit writes the rows tasks handed it, then fences the
        slots no task fenced (as ``sink.finish``), and Spark commits the micro-batch."""
        for slot, attempt in sorted(self.done.items()):
            if attempt.outcome is None or attempt.outcome.action != "deferred":
                continue
            driver = Attempt(self.run, slot, attempt.number, attempt.deferred or [],
                             task_steps(self.task(slot, attempt.number), SETTINGS, True, at_driver=True))
            for _ in range(200):  # the driver's commit runs alone: step it to its end
                if driver.outcome is not None or driver.failed:
                    break
                self.advance(driver, driver=True)
            if driver.outcome is None:
                self.stop(refused=driver.refused)
                return
            attempt.epoch = driver.epoch
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


def simulate(data: st.DataObject, *, splits_change: bool, zombies: bool = False) -> World:
    """Draw a world and run it: random scheduling and faults, then (so that a run can finish) fair
    scheduling without faults."""
    rows = data.draw(st.lists(st.sampled_from([f"r{i}" for i in range(12)]), min_size=1, max_size=12), label="rows")
    first = data.draw(splits(rows), label="first split")
    cores = data.draw(st.integers(1, 4), label="cores")
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
            continue
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
        live_zombies = [a for a in world.zombies if a.outcome is None and not a.failed]
        if live_zombies:
            choices += ["zombie"] * 2
        action = data.draw(st.sampled_from(choices), label="action")
        if action == "launch":
            world.launch(world.pending.pop(0))
        elif action == "step":
            world.advance(data.draw(st.sampled_from(running), label="attempt"))
        elif action == "die":
            world.fail(data.draw(st.sampled_from(running), label="dies"))
        elif action == "zombie":
            world.advance(data.draw(st.sampled_from(live_zombies), label="zombie"))
        elif action == "speculate":
            victim = data.draw(st.sampled_from(running), label="speculated")
            if world.tries[victim.slot] < MAX_ATTEMPTS:
                world.launch(victim.slot)
        else:
            crashes -= 1
            if zombies:
                world.zombies += running
            world.attempts, world.pending = [], []
    for _ in range(500):  # the zombies that outlive it all finish too: nothing of theirs may land now
        live = [a for a in world.zombies if a.outcome is None and not a.failed]
        if not live:
            break
        for attempt in live:
            world.advance(attempt)
    event("completed" if world.completed else "refused" if world.refused else "stopped")
    if world.zombies:
        event("zombies")
    if any(a.outcome and a.outcome.action == "deferred" for a in world.done.values()):
        event("rows handed to the driver")
    return world


@settings(max_examples=250, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_row_is_written_exactly_once_or_the_query_refuses_having_rewritten_nothing(data: st.DataObject) -> None:
    world = simulate(data, splits_change=True)
    expected = Counter(world.rows)
    duplicated = world.kafka.output - expected
    assert not duplicated, f"rows written more often than they came: {dict(duplicated)}"
    assert not [r for r in world.refusals if world.written[r]], f"runs that refused after writing: {world.written}"
    if world.completed:
        assert world.kafka.output == expected, f"missing: {dict(expected - world.kafka.output)}"
        assert not world.kafka.open, f"transactions left open: {world.kafka.open}"


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_replay_split_as_before_always_finishes_exactly_once_without_a_refusal(data: st.DataObject) -> None:
    """Attempts of a crashed run may go on beside the restarted one (zombies, commits in doubt): with the
    split unchanged, what they manage to commit is theirs alone."""
    world = simulate(data, splits_change=False, zombies=True)
    assert not world.refusals, "no run refused"
    assert world.completed, f"the micro-batch did not complete: {world.run + 1} runs"
    assert world.kafka.output == Counter(world.rows)
    assert not world.kafka.open, f"transactions left open: {world.kafka.open}"


def test_tasks_that_cannot_wait_for_the_slots_queued_behind_them_hand_their_rows_to_the_driver() -> None:
    """The restart has one core; task partitions 0 and 1 were not written, 2 was: 0 and 1, started
    first, cannot wait for 2 forever (it only starts once they end).  They defer; 2 confirms; the
    driver writes their rows."""
    first = [["a", "b"], ["c"], ["d", "e"]]
    world = World(["a", "b", "c", "d", "e"], first, cores=1)
    world.kafka.output.update(first[2])
    world.kafka.records[2] = SlotRecord(2, Written(BATCH, "crashed", *fingerprint(first[2]), PREFIX))
    world.slots_ever = 3
    world.start_run(first)
    for _ in range(1000):
        if len(world.done) == len(world.split):
            world.finish()
            break
        if world.pending and len(world.running) < world.cores:
            world.launch(world.pending.pop(0))
        for attempt in world.running:
            world.advance(attempt)
    assert world.completed and not world.refusals
    assert [world.done[s].outcome.action for s in range(3)] == ["deferred", "deferred", "confirmed"]  # type: ignore[union-attr]
    assert world.kafka.output == Counter("abcde") and not world.kafka.open
