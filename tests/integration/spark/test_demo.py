"""``onceflow demo --payments 20000`` with its faults on: the main job, as a user runs it."""

from __future__ import annotations

import subprocess
import sys


def test_the_payments_demo_passes_its_checks_with_faults() -> None:
    done = subprocess.run([sys.executable, "-m", "onceflow", "demo", "--payments", "20000"], capture_output=True,
                          text=True, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert "OK: every committed payment has exactly one debit and one credit" in output
    for fault in ("a write task failed", "killed the Spark driver with SIGKILL", "killed the broker with SIGKILL"):
        assert fault in output, f"fault not injected: {fault}\n{output[-3000:]}"
    assert "duplicated ledger entries" in output and "missing ledger entries" in output
