"""Each atheris harness for a few thousand inputs (seed 1), in its own process: libFuzzer ends
the process it runs in.  The long run is ``make fuzz-long`` (docs/reliability.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz.atheris.run import run_harness

pytest.importorskip("atheris")

#: Inputs per harness: a few seconds each.
RUNS = {"frames": 20_000, "dispatcher": 4_000, "batches": 4_000, "recovery": 1_000}


@pytest.mark.parametrize("harness", list(RUNS))
def test_harness_finds_no_crash_or_hang(harness: str, tmp_path: Path) -> None:
    result = run_harness(harness, RUNS[harness], seed=1, timeout_s=60, artifacts=tmp_path)
    assert result.crashes == 0 and result.hangs == 0, f"{harness}: see the output above; input in {result.artifact}"
    assert result.exit_status == 0 and result.inputs == RUNS[harness], result
    assert result.cov > 0, "no coverage: the code under test is not instrumented"
