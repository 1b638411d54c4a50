"""The fault schedule: seeded, every requested fault once in its own slot, a quiet lead-in."""

from __future__ import annotations

import random

import pytest

from onceflow.chaos.nemesis import Schedule


def test_every_fault_gets_its_own_slot_after_the_lead_in() -> None:
    schedule = Schedule.spread({"kill": 6, "pause": 2, "reset": 2}, 102.0, random.Random(7), lead_s=2.0)
    times = [at for at, _ in schedule.items]
    assert sorted(kind for _, kind in schedule.items) == ["kill"] * 6 + ["pause"] * 2 + ["reset"] * 2
    assert times == sorted(times) and times[0] >= 2.0 and times[-1] < 102.0
    slots = [int((at - 2.0) // 10.0) for at in times]  # ten slots of ten seconds
    assert slots == list(range(10)), "one fault per slot, in its first half"


def test_the_same_seed_gives_the_same_schedule() -> None:
    counts = {"kill": 3, "crash-roll": 1, "crash-compaction": 1}
    assert Schedule.spread(counts, 60, random.Random(3)) == Schedule.spread(counts, 60, random.Random(3))
    assert Schedule.spread(counts, 60, random.Random(3)) != Schedule.spread(counts, 60, random.Random(4))
    assert Schedule.spread({}, 60, random.Random(3)).items == ()


def test_an_unknown_fault_is_named() -> None:
    with pytest.raises(ValueError, match="unknown faults \\['explode'\\]"):
        Schedule.spread({"explode": 1}, 60, random.Random(1))
