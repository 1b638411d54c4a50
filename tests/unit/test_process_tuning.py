"""What ``onceflow broker`` tunes in its own process (and only there): after start-up the
garbage collector no longer walks the start-up objects on its full passes."""

from __future__ import annotations

import subprocess
import sys


def test_start_up_objects_are_frozen_out_of_full_collections() -> None:
    script = (
        "import gc\n"
        "from onceflow.broker.broker import tune_process_gc\n"
        "assert gc.get_freeze_count() == 0\n"
        "tune_process_gc()\n"
        "print(gc.get_freeze_count(), len(gc.get_objects()))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True).stdout
    frozen, tracked = map(int, out.split())
    assert frozen > 10_000, "the modules and kio's schema are frozen"
    assert tracked < frozen / 10, "a full pass visits only what was created since"
