"""The layout's rules that imports can break: the Spark connector is a client of any Kafka and
imports nothing from the broker's side, and the CLI imports a family's modules only when that
family runs (so that a base install, without the spark extra, has a working ``onceflow``)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "onceflow"


def _imports(path: Path) -> list[str]:
    """The onceflow modules a file imports, as absolute names."""
    package = ["onceflow", *path.relative_to(SRC).parent.parts]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                found.append(".".join([*base, *([node.module] if node.module else [])]))
            elif node.module and node.module.startswith("onceflow"):
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names if alias.name.startswith("onceflow"))
    return found


#: Client-side modules outside the connector that it may import: they import nothing of onceflow's.
CLIENT_SIDE = {"onceflow.clientconfig"}


def test_the_spark_connector_imports_nothing_from_the_broker_side() -> None:
    outside = {str(path.relative_to(SRC)): name for path in (SRC / "spark").glob("*.py") for name in _imports(path)
               if not (name == "onceflow.spark" or name.startswith("onceflow.spark.") or name in CLIENT_SIDE)}
    assert outside == {}


def test_the_client_side_modules_import_nothing_of_onceflow() -> None:
    for module in CLIENT_SIDE:
        path = SRC.joinpath(*module.split(".")[1:]).with_suffix(".py")
        assert _imports(path) == [], module


def test_the_imports_seen_are_resolved_right() -> None:
    assert "onceflow.spark.protocol" in _imports(SRC / "spark" / "sink.py")
    assert "onceflow.config" in _imports(SRC / "cli.py")


HEAVY = ["pyspark", "pyarrow", "pandas", "rich", "onceflow.spark.sink", "onceflow.bench",
         "onceflow.chaos.campaign", "onceflow.broker.broker"]

PROBE = """
import json, sys
from onceflow.cli import build_parser
parser = build_parser()
for argv in {argvs}:
    parser.parse_args(argv)
print(json.dumps([name for name in {heavy} if name in sys.modules]))
"""


def _loaded_after(*argvs: list[str]) -> list[str]:
    probe = subprocess.run([sys.executable, "-c", PROBE.format(argvs=list(argvs), heavy=HEAVY)], capture_output=True,
                           text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    return list(json.loads(probe.stdout))


def test_the_cli_imports_a_family_only_when_it_runs() -> None:
    assert _loaded_after(["broker"], ["topics", "list"], ["groups", "list"], ["txn", "list"], ["chaos"]) == []
    assert _loaded_after(["demo"]) == []  # its options need none of it; running it checks for the extra first
    assert "onceflow.bench" in _loaded_after(["bench", "produce"])  # the probe can see an import
