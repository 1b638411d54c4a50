"""The chaos checker (chaos/checker.py): a valid history with every kind of outcome passes; one
doctored history per anomaly kind reports exactly that kind, with its minimal excerpt."""

from __future__ import annotations

from typing import Any

import pytest

from onceflow.chaos.checker import KINDS, Anomaly, Report, check
from onceflow.chaos.history import Event, ctp_output

RC, RU = "read_committed", "read_uncommitted"


class H:
    """A history builder: each event one second after the previous one."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, process: str, type: str, f: str, value: dict[str, Any]) -> Event:
        e = Event(len(self.events), float(len(self.events) + 1), process, type, f, value)
        self.events.append(e)
        return e

    def begin(self, process: str, id: str, writes: list[tuple[str, int, str]]) -> Event:
        return self.add(process, "invoke", "txn", {"id": id, "transactional_id": process, "writes": [list(w) for w in writes]})

    def end(
        self,
        process: str,
        id: str,
        type: str = "ok",
        commit: bool = True,
        offsets: dict[str, int] | None = None,
        f: str = "txn",
        commit_time: float | None = None,
    ) -> Event:
        # By default commit_transaction was called half a second before the completion was recorded.
        if commit_time is None and commit:
            commit_time = len(self.events) + 0.5
        return self.add(process, type, f, {"id": id, "commit_time": commit_time, "offsets": offsets or {}})

    def txn(
        self, process: str, id: str, writes: list[tuple[str, int, str]], type: str = "ok", commit: bool = True, offsets: dict[str, int] | None = None
    ) -> Event:
        self.begin(process, id, writes)
        return self.end(process, id, type, commit, offsets)

    def ctp(self, process: str, id: str, inputs: list[tuple[str, int, int, str]], out: tuple[str, int] = ("out", 0), group: str = "g") -> Event:
        offsets: dict[str, int] = {}
        for t, p, o, _ in inputs:
            offsets[f"{t}/{p}"] = max(offsets.get(f"{t}/{p}", 0), o + 1)
        writes = [[out[0], out[1], ctp_output(v)] for *_, v in inputs]
        return self.add(process, "invoke", "ctp", {"id": id, "group": group, "inputs": [list(i) for i in inputs], "writes": writes, "offsets": offsets})

    def poll(self, process: str, records: list[tuple[str, int, int, str]], isolation: str = RC) -> Event:
        return self.add(process, "ok", "poll", {"isolation": isolation, "records": [list(r) for r in records]})

    def assign(self, process: str, positions: list[tuple[str, int, int]]) -> Event:
        return self.add(process, "ok", "assign", {"positions": [list(p) for p in positions]})

    def final(self, partitions: dict[str, tuple[int, list[tuple[int, str]]]], isolation: str = RC) -> Event:
        parts = {tp: {"end": end, "records": [list(r) for r in records]} for tp, (end, records) in partitions.items()}
        return self.add("final-reader", "ok", "final-read", {"isolation": isolation, "partitions": parts})

    def committed(self, group: str, offsets: dict[str, int]) -> Event:
        return self.add("final-reader", "ok", "committed-offsets", {"group": group, "offsets": offsets})

    def fault(self, kind: str) -> Event:
        return self.add("nemesis", "info", "fault", {"kind": kind})


def only(report: Report, kind: str, n: int = 1) -> list[Anomaly]:
    """The anomalies of ``kind``, asserting that they are ``n`` and that no other kind was found."""
    others = {k: [a.description for a in v] for k, v in report.anomalies.items() if v and k != kind}
    assert not others, others
    found = report.anomalies[kind]
    assert len(found) == n, [a.description for a in found]
    assert not report.valid
    return found


def indexes(anomaly: Anomaly) -> list[int]:
    return [e.index for e in anomaly.events]


def valid_history() -> H:
    """Two producers, commits, aborts, unknown transactions visible and invisible, a crashed
    producer, read_committed and read_uncommitted readers, a ctp stage with an aborted attempt,
    its retry and a fenced zombie, faults, final reads and the group's committed offsets.

    in/0: 0 a0 | 2 b0 (aborted) | 4 c0 (unknown, committed) | 6 d0 (unknown, never committed) | 8 g0 (crashed producer's, committed)
    in/1: 0 a1 | 2 c1 | 4 e1 (unknown, aborted by the coordinator) | 6 h1 (read before its commit returned)
    out/0: 0-1 ctp-0/0 (aborted) | 3-4 ctp-0/1 | 6-8 ctp-0/2 | 10 ctp-1/0 (fenced zombie)
    (markers in between)
    """
    h = H()
    h.assign("reader-rc-0", [("in", 0, 0), ("in", 1, 0)])
    h.txn("producer-0", "producer-0/0", [("in", 0, "a0"), ("in", 1, "a1")], offsets={"a0": 0, "a1": 0})
    h.txn("producer-1", "producer-1/0", [("in", 0, "b0")], type="fail", commit=False, offsets={"b0": 2})
    h.poll("reader-rc-0", [("in", 0, 0, "a0"), ("in", 1, 0, "a1")])
    h.poll("reader-ru-0", [("in", 0, 0, "a0"), ("in", 0, 2, "b0"), ("in", 1, 0, "a1")], RU)
    h.fault("kill")
    h.txn("producer-0", "producer-0/1", [("in", 0, "c0"), ("in", 1, "c1")], type="info", offsets={"c0": 4})
    h.txn("producer-1", "producer-1/1", [("in", 0, "d0")], type="info", commit=False)
    h.txn("producer-0", "producer-0/2", [("in", 1, "e1")], type="info")
    h.poll("reader-rc-0", [("in", 0, 4, "c0"), ("in", 1, 2, "c1")])
    h.poll("reader-ru-0", [("in", 0, 4, "c0"), ("in", 0, 6, "d0"), ("in", 1, 2, "c1"), ("in", 1, 4, "e1")], RU)
    h.fault("pause")
    h.begin("producer-2", "producer-2/0", [("in", 0, "g0")])  # and crashed: no completion
    h.fault("resume")
    h.poll("reader-rc-0", [("in", 0, 8, "g0")])
    h.poll("reader-ru-0", [("in", 0, 8, "g0")], RU)
    # The reader seeks back and reads again: fine after an assign.
    h.assign("reader-rc-0", [("in", 0, 4)])
    h.poll("reader-rc-0", [("in", 0, 4, "c0"), ("in", 0, 8, "g0")])
    # A read after commit_transaction was called, before it returned.
    h.begin("producer-1", "producer-1/2", [("in", 1, "h1")])
    commit_time = h.events[-1].time + 0.5
    h.poll("reader-rc-0", [("in", 1, 6, "h1")])
    h.end("producer-1", "producer-1/2", commit_time=commit_time)

    h.ctp("ctp-0", "ctp-0/0", [("in", 0, 0, "a0"), ("in", 1, 0, "a1")])
    h.end("ctp-0", "ctp-0/0", "fail", commit=False, f="ctp")
    h.ctp("ctp-0", "ctp-0/1", [("in", 0, 0, "a0"), ("in", 1, 0, "a1")])
    h.end("ctp-0", "ctp-0/1", f="ctp")
    h.ctp("ctp-0", "ctp-0/2", [("in", 0, 4, "c0"), ("in", 1, 2, "c1"), ("in", 0, 8, "g0")])
    h.ctp("ctp-1", "ctp-1/0", [("in", 0, 8, "g0")])
    h.end("ctp-0", "ctp-0/2", "info", f="ctp")
    h.end("ctp-1", "ctp-1/0", "info", commit=False, f="ctp")
    h.poll("reader-out", [("out", 0, 3, "ctp:a0"), ("out", 0, 4, "ctp:a1"), ("out", 0, 6, "ctp:c0")])
    h.poll("reader-out-ru", [("out", 0, 0, "ctp:a0"), ("out", 0, 1, "ctp:a1"), ("out", 0, 3, "ctp:a0"), ("out", 0, 8, "ctp:g0"), ("out", 0, 10, "ctp:g0")], RU)

    h.final({"in/0": (10, [(0, "a0"), (4, "c0"), (8, "g0")]), "in/1": (8, [(0, "a1"), (2, "c1"), (6, "h1")])})
    h.final({"in/0": (10, [(0, "a0"), (2, "b0"), (4, "c0"), (6, "d0"), (8, "g0")]), "in/1": (8, [(0, "a1"), (2, "c1"), (4, "e1"), (6, "h1")])}, RU)
    h.final({"out/0": (12, [(3, "ctp:a0"), (4, "ctp:a1"), (6, "ctp:c0"), (7, "ctp:c1"), (8, "ctp:g0")])})
    h.committed("g", {"in/0": 9, "in/1": 3})
    return h


def test_valid_history() -> None:
    report = check(valid_history().events)
    assert report.valid, report.summary()
    assert set(report.anomalies) == set(KINDS) and not any(report.anomalies.values())
    assert report.transactions == {"txn": {"committed": 2, "aborted": 1, "unknown": 4}, "ctp": {"committed": 1, "aborted": 1, "unknown": 2}}
    assert report.ops["txn"] == {"fail": 1, "info": 3, "invoke": 7, "ok": 2}
    assert report.records_read == 2 + 3 + 2 + 4 + 1 + 1 + 2 + 1 + 3 + 5 + 6 + 9 + 5
    assert "valid: no anomalies" in report.summary()
    assert report.to_json()["valid"] is True


def test_lost_write() -> None:
    h = H()
    h.txn("producer-0", "producer-0/0", [("x", 0, "v1")], offsets={"v1": 0})
    unrelated = h.txn("producer-1", "producer-1/0", [("x", 0, "v2")])
    poll = h.poll("reader", [("x", 0, 0, "v1"), ("x", 0, 2, "v2")])
    fault = h.fault("kill")
    final = h.final({"x/0": (4, [(2, "v2")])})
    later = h.fault("kill")
    [anomaly] = only(check(h.events), "lost-write")
    assert anomaly.description.startswith("txn producer-0/0 (committed) wrote 'v1' to x/0 (delivered at offset 0)")
    assert indexes(anomaly) == [0, 1, poll.index, fault.index, final.index]
    assert unrelated.index not in indexes(anomaly) and later.index not in indexes(anomaly)
    excerpt = {e.index: e for e in anomaly.events}
    assert excerpt[poll.index].value["records"] == [["x", 0, 0, "v1"]]
    assert excerpt[final.index].value["partitions"] == {"x/0": {"end": 4, "records": []}}


def test_duplicate() -> None:
    h = H()
    h.txn("producer-0", "producer-0/0", [("x", 0, "v1")])
    h.txn("producer-0", "producer-0/1", [("x", 0, "v2")])
    poll = h.poll("reader", [("x", 0, 0, "v1")], RU)
    final = h.final({"x/0": (6, [(0, "v1"), (2, "v2"), (4, "v1")])})
    [anomaly] = only(check(h.events), "duplicate")
    assert anomaly.description == "'v1' written by txn producer-0/0 (committed) is at 2 positions: x/0@0, x/0@4"
    assert indexes(anomaly) == [0, 1, poll.index, final.index]
    excerpt = {e.index: e for e in anomaly.events}
    assert excerpt[final.index].value["partitions"]["x/0"]["records"] == [[0, "v1"], [4, "v1"]]


def test_duplicate_in_two_partitions_is_also_unexpected_there() -> None:
    h = H()
    h.txn("producer-0", "producer-0/0", [("x", 0, "v1")])
    h.poll("reader", [("x", 0, 0, "v1"), ("x", 1, 0, "v1")])
    report = check(h.events)
    assert [a.description for a in report.anomalies["duplicate"]] == ["'v1' written by txn producer-0/0 (committed) is at 2 positions: x/0@0, x/1@0"]
    assert [a.description for a in report.anomalies["unexpected-value"]] == ["reader read 'v1' from x/1@0 (#2); it was written to x/0"]


def test_retried_ctp_output_twice_read_committed_is_a_duplicate() -> None:
    h = H()
    h.txn("producer-0", "producer-0/0", [("in", 0, "a")])
    h.ctp("ctp-0", "ctp-0/0", [("in", 0, 0, "a")])
    h.end("ctp-0", "ctp-0/0", "info", f="ctp")  # it did commit after all...
    h.ctp("ctp-0", "ctp-0/1", [("in", 0, 0, "a")])
    h.end("ctp-0", "ctp-0/1", f="ctp")  # ... and so did its retry
    h.final({"out/0": (4, [(0, "ctp:a"), (2, "ctp:a")])})
    [anomaly] = only(check(h.events), "duplicate")
    assert anomaly.description.startswith("'ctp:a' written by ctp ctp-0/0 (unknown), ctp ctp-0/1 (committed) is at 2 positions (2 of them read_committed)")
    assert indexes(anomaly) == [2, 3, 4, 5, 6]


def test_aborted_read() -> None:
    h = H()
    h.txn("producer-0", "producer-0/0", [("x", 0, "v1")], type="fail", commit=False)
    h.txn("producer-1", "producer-1/0", [("x", 0, "v2")])
    ru = h.poll("reader-ru", [("x", 0, 0, "v1")], RU)
    rc = h.poll("reader-rc", [("x", 0, 0, "v1"), ("x", 0, 2, "v2")])
    [anomaly] = only(check(h.events), "aborted-read")
    assert anomaly.description == f"reader-rc read 'v1' at x/0@0 read_committed (#{rc.index}) but txn producer-0/0 (aborted)"
    assert indexes(anomaly) == [0, 1, ru.index, rc.index]
    assert anomaly.events[-1].value["records"] == [["x", 0, 0, "v1"]]


def test_read_of_an_unknown_transaction_that_never_called_commit_is_an_aborted_read() -> None:
    h = H()
    h.txn("producer-0", "producer-0/0", [("x", 0, "v1")], type="info", commit=False)
    h.final({"x/0": (2, [(0, "v1")])})
    [anomaly] = only(check(h.events), "aborted-read")
    assert "txn producer-0/0 (unknown) never called commit" in anomaly.description


def test_precommitted_read() -> None:
    h = H()
    h.begin("producer-0", "producer-0/0", [("x", 0, "v1")])
    h.txn("producer-1", "producer-1/0", [("x", 0, "v2")])
    poll = h.poll("reader", [("x", 0, 0, "v1")])
    done = h.end("producer-0", "producer-0/0")
    after = h.poll("reader-2", [("x", 0, 0, "v1")])  # after the commit: fine, but part of the excerpt
    [anomaly] = only(check(h.events), "precommitted-read")
    assert anomaly.description == "reader read 'v1' at x/0@0 read_committed (#3, t=4.000000) 0.500000 s before txn producer-0/0 (committed) called commit"
    assert indexes(anomaly) == [0, poll.index, done.index, after.index]


def test_nonmonotonic_offsets() -> None:
    h = H()
    h.txn("producer-0", "producer-0/0", [("x", 0, "v0"), ("x", 0, "v1"), ("x", 0, "v2")])
    h.assign("reader", [("x", 0, 0)])
    first = h.poll("reader", [("x", 0, 0, "v0"), ("x", 0, 1, "v1")])
    other = h.poll("reader-2", [("x", 0, 1, "v1")])
    fault = h.fault("pause")
    again = h.poll("reader", [("x", 0, 1, "v1"), ("x", 0, 2, "v2")])
    [anomaly] = only(check(h.events), "nonmonotonic-offsets")
    assert anomaly.description == f"reader read x/0@1 in poll #{again.index}: it repeats offset 1 read in poll #{first.index}"
    assert indexes(anomaly) == [first.index, fault.index, again.index]
    assert other.index not in indexes(anomaly)
    assert [e.value["records"] for e in anomaly.events if e.f == "poll"] == [[["x", 0, 1, "v1"]], [["x", 0, 1, "v1"]]]


def test_nonmonotonic_within_a_poll_and_below_the_assigned_offset() -> None:
    h = H()
    h.txn("producer-0", "producer-0/0", [("x", 0, "v0"), ("x", 0, "v1"), ("x", 0, "v2")])
    assign = h.assign("reader", [("x", 0, 1)])
    below = h.poll("reader", [("x", 0, 0, "v0")])
    back = h.poll("reader", [("x", 0, 2, "v2"), ("x", 0, 1, "v1")])
    found = only(check(h.events), "nonmonotonic-offsets", 2)
    assert found[0].description == f"reader read x/0@0 in poll #{below.index}: it is below offset 1 it was assigned at (#{assign.index})"
    assert indexes(found[0]) == [assign.index, below.index]
    assert found[1].description == f"reader read x/0@1 in poll #{back.index}: it steps back from offset 2 read earlier in that poll"
    assert indexes(found[1]) == [back.index]


def test_inconsistent_offsets() -> None:
    h = H()
    h.txn("producer-0", "producer-0/0", [("x", 0, "v1")])
    h.txn("producer-1", "producer-1/0", [("x", 0, "v2")])
    h.txn("producer-1", "producer-1/1", [("x", 0, "v3")])
    one = h.poll("reader-1", [("x", 0, 0, "v1"), ("x", 0, 4, "v3")])
    two = h.poll("reader-2", [("x", 0, 0, "v2")])
    [anomaly] = only(check(h.events), "inconsistent-offsets")
    assert anomaly.description == "x/0@0 holds 2 values: 'v1', 'v2'"
    assert indexes(anomaly) == [0, 1, 2, 3, one.index, two.index]
    assert anomaly.events[4].value["records"] == [["x", 0, 0, "v1"]]


def test_inconsistent_with_the_delivery_report() -> None:
    h = H()
    h.txn("producer-0", "producer-0/0", [("x", 0, "v1")], offsets={"v1": 0})
    h.txn("producer-1", "producer-1/0", [("x", 0, "v2")], offsets={"v2": 2})
    h.poll("reader", [("x", 0, 0, "v2")])
    found = check(h.events).anomalies
    assert [a.description for a in found["inconsistent-offsets"]] == ["x/0@0 holds 2 values: 'v2', 'v1'"]
    assert [a.description for a in found["duplicate"]] == ["'v2' written by txn producer-1/0 (committed) is at 2 positions: x/0@0, x/0@2"]


def test_torn_transaction() -> None:
    h = H()
    h.txn("producer-0", "producer-0/0", [("x", 0, "v1"), ("x", 1, "v2"), ("y", 0, "v3")], type="info")
    h.txn("producer-1", "producer-1/0", [("x", 1, "w")])
    final = h.final({"x/0": (2, [(0, "v1")]), "x/1": (2, [(0, "w")])})
    [anomaly] = only(check(h.events), "torn-transaction")
    assert anomaly.description == "txn producer-0/0 (unknown) is partly visible in the final read_committed reads: 1 of its values are, 1 are not: 'v2' in x/1"
    assert indexes(anomaly) == [0, 1, final.index]
    assert anomaly.events[-1].value["partitions"] == {"x/0": {"end": 2, "records": [[0, "v1"]]}, "x/1": {"end": 2, "records": []}}


def ctp_stage(h: H, ctp_type: str, committed: int, output_visible: bool) -> None:
    h.txn("producer-0", "producer-0/0", [("in", 0, "a"), ("in", 0, "b")])
    h.ctp("ctp-0", "ctp-0/0", [("in", 0, 0, "a")])
    h.end("ctp-0", "ctp-0/0", ctp_type, f="ctp")
    h.final({"in/0": (3, [(0, "a"), (1, "b")])})
    h.final({"out/0": (2, [(0, "ctp:a")] if output_visible else [])})
    h.committed("g", {"in/0": committed})


def test_invisible_committed_offsets() -> None:
    h = H()
    ctp_stage(h, "info", committed=1, output_visible=False)
    [anomaly] = only(check(h.events), "invisible-committed-offsets")
    assert (
        anomaly.description
        == "group g committed in/0 up to 1 but the output 'ctp:a' of its input in/0@0 is missing from the final read_committed read of out/0"
    )
    assert [e.f for e in anomaly.events] == ["ctp", "ctp", "final-read", "final-read", "committed-offsets"]
    assert anomaly.events[2].value["partitions"] == {"in/0": {"end": 3, "records": [[0, "a"]]}}


def test_output_visible_but_offsets_not_committed() -> None:
    h = H()
    ctp_stage(h, "ok", committed=0, output_visible=True)
    [anomaly] = only(check(h.events), "invisible-committed-offsets")
    assert anomaly.description == "output 'ctp:a' is finally visible but group g's committed offset for in/0 (0) does not cover its input in/0@0"


def test_committed_offsets_past_an_input_never_consumed() -> None:
    h = H()
    ctp_stage(h, "ok", committed=2, output_visible=True)
    [anomaly] = only(check(h.events), "invisible-committed-offsets")
    assert anomaly.description == "group g committed in/0 up to 2 but no ctp attempt consumed its input 'b' at in/0@1"


def test_committed_ctp_with_invisible_output_is_a_lost_write_only() -> None:
    h = H()
    ctp_stage(h, "ok", committed=1, output_visible=False)
    only(check(h.events), "lost-write")


def test_unexpected_value() -> None:
    h = H()
    h.txn("producer-0", "producer-0/0", [("x", 0, "v1")])
    poll = h.poll("reader", [("x", 0, 0, "v1"), ("x", 0, 2, "zzz")])
    [anomaly] = only(check(h.events), "unexpected-value")
    assert anomaly.description == f"reader read 'zzz' from x/0@2 (#{poll.index}); it was never written"
    assert indexes(anomaly) == [poll.index]
    assert anomaly.events[0].value["records"] == [["x", 0, 2, "zzz"]]


def test_summary_and_json() -> None:
    h = H()
    h.txn("producer-0", "producer-0/0", [("x", 0, "v1")], type="fail", commit=False)
    for i in range(5):
        h.poll(f"reader-{i}", [("x", 0, 0, "v1")])
        h.poll(f"reader-{i}", [("x", 0, 1 + i, f"junk{i}")])
    report = check(h.events, excerpts=2)
    text = report.summary(examples=1)
    assert "INVALID: 6 anomalies" in text and "  aborted-read: 1" in text and "  unexpected-value: 5" in text
    assert "unexpected-value: ... and 4 more" in text
    assert [len(a.events) for a in report.anomalies["unexpected-value"]] == [1, 1, 0, 0, 0]
    assert report.to_json()["anomalies"]["aborted-read"][0]["events"][0]["f"] == "txn"


@pytest.mark.parametrize(
    ("doctor", "message"),
    [
        (lambda h: h.add("producer-0", "ok", "txn", {"id": "p/9", "commit_time": 1.0}), "completes a txn it did not invoke"),
        (lambda h: h.txn("producer-0", "producer-0/0", [("x", 0, "new")]), "is used twice"),
        (lambda h: h.txn("producer-0", "producer-0/9", [("x", 0, "v1")]), "'v1' is written by producer-0/9 and by producer-0/0"),
        (lambda h: h.txn("producer-0", "producer-0/9", [("x", 0, "n"), ("x", 1, "n")]), "txn producer-0/9 writes value 'n' twice"),
        (lambda h: h.add("producer-0", "ok", "txn", {"id": "producer-0/9", "commit_time": None}), "did not invoke"),
        (lambda h: (h.begin("producer-0", "producer-0/9", []), h.begin("producer-0", "producer-0/10", [])), "is not complete"),
        (lambda h: (h.begin("producer-0", "producer-0/9", []), h.end("producer-0", "producer-0/9", commit=False)), r"committed \(ok\) with commit_time null"),
        (lambda h: (h.begin("producer-0", "producer-0/9", []), h.end("producer-0", "other")), "carries id 'other'"),
        (lambda h: h.add("x", "maybe", "poll", {}), "type 'maybe'"),
        (lambda h: h.add("x", "ok", "poll", {"isolation": RC}), r"#2: malformed ok poll value \(KeyError: 'records'\)"),
        (lambda h: h.add("x", "ok", "final-read", {"isolation": RC, "partitions": {"x0": {"end": 0, "records": []}}}), "'x0' is not topic/partition"),
        (
            lambda h: h.add("ctp-0", "invoke", "ctp", {"id": "c", "group": "g", "inputs": [["x", 0, 0, "v1"]], "writes": [], "offsets": {"x/0": 1}}),
            "ctp_output",
        ),
        (
            lambda h: h.add("ctp-0", "invoke", "ctp", {"id": "c", "group": "g", "inputs": [["x", 0, 0, "v1"]], "writes": [["o", 0, "ctp:v1"]], "offsets": {}}),
            "sends offset None",
        ),
    ],
)
def test_malformed_histories(doctor: Any, message: str) -> None:
    h = H()
    h.txn("producer-0", "producer-0/0", [("x", 0, "v1")])
    doctor(h)
    with pytest.raises(ValueError, match=message):
        check(h.events)


def test_scale() -> None:
    """200,000 records read: 100,000 values in 2,000 transactions, read by a poller and a final read."""
    h = H()
    partitions = 4
    logs: list[list[tuple[int, str]]] = [[] for _ in range(partitions)]
    committed: list[list[tuple[int, str]]] = [[] for _ in range(partitions)]
    for t in range(2000):
        writes = [("big", i % partitions, f"{t}-{i}") for i in range(50)]
        aborted = t % 10 == 9
        h.txn(f"producer-{t % 4}", f"txn-{t}", writes, type="fail" if aborted else "ok", commit=not aborted)
        for _, p, v in writes:
            logs[p].append((len(logs[p]), v))
            if not aborted:
                committed[p].append(logs[p][-1])
        for p in range(partitions):
            logs[p].append((len(logs[p]), ""))  # the marker's offset
    for p in range(partitions):
        for i in range(0, len(logs[p]), 500):
            h.poll("reader-ru", [("big", p, o, v) for o, v in logs[p][i : i + 500] if v], RU)
    h.final({f"big/{p}": (len(logs[p]), committed[p]) for p in range(partitions)})
    report = check(h.events)
    assert report.valid, report.summary()
    assert report.records_read == 190_000  # the final read has the committed 90%


def test_a_retry_with_a_smaller_batch_is_neither_torn_nor_lost() -> None:
    """An unknown attempt at inputs a and b, retried by a committed attempt at a alone: its visible
    output may be the retry's, so nothing says the unknown attempt committed half."""
    h = H()
    h.txn("producer-0", "producer-0/0", [("in", 0, "a"), ("in", 0, "b")])
    h.ctp("ctp-0", "ctp-0/0", [("in", 0, 0, "a"), ("in", 0, 1, "b")])
    h.end("ctp-0", "ctp-0/0", "info", f="ctp")
    h.ctp("ctp-0", "ctp-0/1", [("in", 0, 0, "a")])
    h.end("ctp-0", "ctp-0/1", f="ctp")
    h.final({"in/0": (3, [(0, "a"), (1, "b")])})
    h.final({"out/0": (2, [(0, "ctp:a")])})
    h.committed("g", {"in/0": 1})
    report = check(h.events)
    assert report.valid, report.summary()
