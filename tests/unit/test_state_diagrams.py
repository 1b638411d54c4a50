"""docs/state-diagrams.md is what scripts/state_diagrams.py draws from the transition tables now."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from onceflow.coordinator.group.metadata import VALID_PREVIOUS_STATES as GROUP_TABLE
from onceflow.coordinator.transaction.metadata import VALID_PREVIOUS_STATES as TXN_TABLE

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "state_diagrams.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("state_diagrams", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    sys.modules[spec.name] = module  # for its dataclasses
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
        del sys.modules[spec.name]
    return module


def test_the_committed_diagrams_are_what_the_script_draws_now() -> None:
    script = _script()
    assert script.OUTPUT.read_text() == script.render(), "docs/state-diagrams.md is stale: run python scripts/state_diagrams.py"


def test_every_legal_move_is_one_arrow() -> None:
    text = _script().render()
    for table in (TXN_TABLE, GROUP_TABLE):
        for target, previous_states in table.items():
            for previous in previous_states:
                assert f"    {previous.kafka_name} --> {target.kafka_name}\n" in text
    arrows = [line for line in text.splitlines() if " --> " in line and "[*]" not in line]
    assert len(arrows) == sum(len(p) for p in TXN_TABLE.values()) + sum(len(p) for p in GROUP_TABLE.values())
