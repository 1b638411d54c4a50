"""Keyed deadlines with lazy cancellation (timers.py)."""

from __future__ import annotations

from onceflow.timers import Timers


def drain(timers: Timers, now_ms: int) -> list[tuple]:
    out = []
    while (key := timers.pop_due(now_ms)) is not None:
        out.append(key)
    return out


def test_empty() -> None:
    t = Timers()
    assert t.next_deadline() is None
    assert t.pop_due(10**12) is None
    assert t.deadline(("x",)) is None
    t.cancel(("x",))  # cancelling an unknown key is fine


def test_set_and_pop_due_in_deadline_order() -> None:
    t = Timers()
    t.set(("c",), 30)
    t.set(("a",), 10)
    t.set(("b",), 20)
    assert t.next_deadline() == 10
    assert t.deadline(("b",)) == 20
    assert t.pop_due(9) is None
    assert drain(t, 20) == [("a",), ("b",)]
    assert t.deadline(("a",)) is None
    assert t.next_deadline() == 30
    assert drain(t, 100) == [("c",)]
    assert t.next_deadline() is None


def test_equal_deadlines_fire_in_the_order_they_were_set() -> None:
    t = Timers()
    for name in "qwerty":
        t.set((name,), 5)
    assert drain(t, 5) == [(c,) for c in "qwerty"]


def test_setting_again_replaces_the_deadline() -> None:
    t = Timers()
    t.set(("hb", "m1"), 10)
    t.set(("hb", "m1"), 50)  # later
    assert t.deadline(("hb", "m1")) == 50
    assert t.next_deadline() == 50
    assert t.pop_due(10) is None
    t.set(("hb", "m1"), 5)  # earlier
    assert t.next_deadline() == 5
    assert drain(t, 100) == [("hb", "m1")]  # fired once, not once per set


def test_cancel() -> None:
    t = Timers()
    t.set(("a",), 10)
    t.set(("b",), 20)
    t.cancel(("a",))
    assert t.deadline(("a",)) is None
    assert t.next_deadline() == 20
    assert drain(t, 100) == [("b",)]
    t.set(("a",), 30)  # a cancelled key can be set again
    assert drain(t, 100) == [("a",)]


def test_clear() -> None:
    t = Timers()
    t.set(("a",), 1)
    t.set(("b",), 2)
    t.clear()
    assert t.next_deadline() is None
    assert t.pop_due(100) is None
    assert t.deadline(("a",)) is None


def test_stale_heap_entries_are_compacted() -> None:
    t = Timers()
    # Re-setting one key leaves stale entries behind; they must not pile up.
    for i in range(10_000):
        t.set(("hb", "m"), 1_000_000 + i)
    assert len(t._heap) <= 1025
    assert t.next_deadline() == 1_000_000 + 9_999
    # With live keys, the rebuilt heap keeps exactly them and their deadlines.
    t.clear()
    for k in range(10):
        t.set(("live", k), 100 - k)
    for i in range(5_000):
        t.set(("churn",), i)
        t.cancel(("churn",))
    assert len(t._heap) <= 4 * 10 + 1025
    assert drain(t, 1_000) == [("live", k) for k in reversed(range(10))]
    assert t._heap == []
