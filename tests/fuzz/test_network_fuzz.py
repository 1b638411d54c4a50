"""The network fuzzer (tests/fuzz/network.py), short: mutated client traffic against a broker
process for a few seconds, a bystander connection working throughout.  The long run is
``make fuzz-long`` (docs/reliability.md)."""

from __future__ import annotations

from pathlib import Path

from tests.fuzz.network import run

SECONDS = 10


def test_mutated_client_traffic_harms_nothing_but_its_own_connection(tmp_path: Path) -> None:
    outcome = run(SECONDS, seed=1, workers=8, root=tmp_path, progress=lambda _: None)
    summary = outcome.summary()
    assert not outcome.problems, summary
    assert outcome.captured_frames >= 30, summary  # real clients' requests were captured
    assert outcome.stats.connections >= 500 and outcome.stats.closed_by_broker > 0 and outcome.stats.responses > 0, summary
    assert outcome.bystander_produced >= 20 and outcome.bystander_reads >= 2, summary
