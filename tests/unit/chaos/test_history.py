"""The chaos history (chaos/history.py): recording from threads, JSON lines, torn last lines, merging."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import pytest

from onceflow.chaos.history import Event, Recorder, ctp_output, dump, load, merge


def test_recorder_streams_what_it_records(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with Recorder(path) as rec:
        inv = rec.invoke("producer-0", "txn", {"id": "producer-0/0", "transactional_id": "t", "writes": [["x", 0, "v"]]})
        done = rec.complete("producer-0", "ok", "txn", {"id": "producer-0/0", "commit_time": inv.time, "offsets": {"v": 0}})
        rec.record("nemesis", "info", "fault", {"kind": "kill"})
        # Flushed per event: the file is readable before the recorder closes.
        assert load(path)[:2] == [inv, done]
        events = rec.events()
    assert [e.index for e in events] == [0, 1, 2]
    assert events[0].time <= events[1].time <= events[2].time
    assert load(path) == events
    dump(events, tmp_path / "copy.jsonl")
    assert load(tmp_path / "copy.jsonl") == events


def test_recorder_from_threads_numbers_events_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    rec = Recorder(path)

    def client(n: int) -> None:
        for i in range(200):
            rec.record(f"reader-{n}", "ok", "poll", {"isolation": "read_committed", "records": [["x", n, i, f"{n}-{i}"]]})

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.close()
    events = load(path)
    assert events == rec.events()
    assert [e.index for e in events] == list(range(800))
    assert all(a.time <= b.time for a, b in itertools.pairwise(events))


def test_a_torn_last_line_is_dropped_a_torn_middle_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    events = [Event(i, float(i), "p", "ok", "poll", {"isolation": "read_committed", "records": []}) for i in range(3)]
    dump(events, path)
    whole = path.read_text()
    path.write_text(whole + whole.splitlines()[0][:17])  # killed mid-write
    assert load(path) == events
    path.write_text(whole + '{"index": 3}\n')  # a line without its fields, last
    assert load(path) == events
    lines = whole.splitlines()
    path.write_text("\n".join([lines[0], lines[1][:10], lines[2]]) + "\n")
    with pytest.raises(ValueError, match=r"history.jsonl:2: not a history event"):
        load(path)


def test_merge_interleaves_by_time_and_renumbers() -> None:
    a = [Event(0, 1.0, "a", "ok", "poll", {}), Event(1, 3.0, "a", "ok", "poll", {})]
    b = [Event(0, 2.0, "b", "info", "fault", {"kind": "kill"})]
    merged = merge(a, b)
    assert [(e.index, e.process, e.time) for e in merged] == [(0, "a", 1.0), (1, "b", 2.0), (2, "a", 3.0)]


def test_event_json_and_ctp_output() -> None:
    e = Event(7, 1.5, "ctp-0", "invoke", "ctp", {"inputs": [["in", 0, 3, "v"]]})
    assert Event.from_json(json.loads(json.dumps(e.to_json()))) == e
    assert str(e) == '#7 1.500000 ctp-0 invoke ctp {"inputs":[["in",0,3,"v"]]}'
    assert ctp_output("v") == "ctp:v"
