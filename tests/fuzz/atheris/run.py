"""Run every atheris harness, one after another, and report what each did.

    python -m tests.fuzz.atheris.run --runs 250000                      # each harness 250,000 inputs
    python -m tests.fuzz.atheris.run --runs 100000 --runs recovery=50000 # one harness its own count

Per harness: inputs, seconds, inputs/s, coverage (libFuzzer's ``cov``: edges of onceflow's and
kio's instrumented Python code; ``ft``: features), corpus size, crashes (an uncaught exception,
a failed check, a native crash, running out of memory) and hangs (one input over ``-timeout``),
with the path of the input that showed it.  Each harness's whole output goes to
``<artifacts>/<harness>.log``.  The exit status is non-zero if any harness crashed or hung.
``--json FILE`` also writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HARNESSES = ("frames", "dispatcher", "batches", "recovery")
REPO = Path(__file__).resolve().parents[3]
_PROGRESS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/")
_ARTIFACT = re.compile(r"Test unit written to (\S+)")


@dataclasses.dataclass
class Result:
    harness: str
    inputs: int
    seconds: float
    cov: int
    ft: int
    corpus: int
    peak_rss_mb: int
    crashes: int
    hangs: int
    exit_status: int
    artifact: str | None
    command: str

    @property
    def inputs_per_s(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0


def run_harness(name: str, runs: int, seed: int, timeout_s: int, artifacts: Path) -> Result:
    command = [sys.executable, "-m", f"tests.fuzz.atheris.{name}", f"-runs={runs}", f"-seed={seed}", f"-timeout={timeout_s}",
               f"-artifact_prefix={artifacts}/{name}-"]
    started = time.monotonic()
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, errors="replace", check=False)
    seconds = time.monotonic() - started
    output = proc.stderr + proc.stdout
    (artifacts / f"{name}.log").write_text(output)
    inputs = cov = ft = corpus = rss = 0
    for line in output.splitlines():
        if match := _PROGRESS.match(line):
            inputs, cov, ft, corpus = (int(g) for g in match.groups())
        elif line.startswith("stat::number_of_executed_units:"):
            inputs = int(line.split(":")[-1])
        elif line.startswith("stat::peak_rss_mb:"):
            rss = int(line.split(":")[-1])
    hang = proc.returncode == 70 or "libFuzzer: timeout" in output
    crash = not hang and (proc.returncode != 0 or "ERROR: libFuzzer" in output)
    artifact = match.group(1) if (match := _ARTIFACT.search(output)) else None
    if crash or hang:
        sys.stderr.write(output[-6000:])
    return Result(name, inputs, seconds, cov, ft, corpus, rss, int(crash), int(hang), proc.returncode, artifact,
                  " ".join(["python", *command[1:-1]]))


def table(results: list[Result]) -> str:
    rows = [("harness", "inputs", "seconds", "inputs/s", "cov", "ft", "corpus", "peak RSS MB", "crashes", "hangs")]
    for r in results:
        rows.append((r.harness, f"{r.inputs:,}", f"{r.seconds:.0f}", f"{r.inputs_per_s:,.0f}", str(r.cov), str(r.ft), str(r.corpus),
                     str(r.peak_rss_mb), str(r.crashes), str(r.hangs)))
    total = sum(r.inputs for r in results)
    seconds = sum(r.seconds for r in results)
    rows.append(("total", f"{total:,}", f"{seconds:.0f}", f"{total / seconds:,.0f}" if seconds else "0", "", "", "", "",
                 str(sum(r.crashes for r in results)), str(sum(r.hangs for r in results))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
                     for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.atheris.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", action="append", default=[], metavar="[HARNESS=]N",
                        help="inputs per harness (default 10000); HARNESS=N for one harness")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=20, help="seconds one input may take before it counts as a hang")
    parser.add_argument("--only", action="append", choices=HARNESSES, help="run only these harnesses")
    parser.add_argument("--artifacts", type=Path, help="where crashing inputs go (default: a new temporary directory)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    runs = dict.fromkeys(HARNESSES, 10_000)
    for spec in args.runs:
        name, _, count = spec.rpartition("=")
        for harness in [name] if name else HARNESSES:
            if harness not in runs:
                parser.error(f"unknown harness {harness!r}")
            runs[harness] = int(count)
    artifacts = args.artifacts or Path(tempfile.mkdtemp(prefix="onceflow-fuzz-artifacts-"))
    artifacts.mkdir(parents=True, exist_ok=True)
    results = []
    for name in args.only or HARNESSES:
        print(f"{name}: {runs[name]:,} inputs ...", file=sys.stderr, flush=True)
        result = run_harness(name, runs[name], args.seed, args.timeout, artifacts)
        results.append(result)
        print(f"{name}: {result.inputs:,} inputs in {result.seconds:.0f} s, cov {result.cov}, "
              f"{result.crashes} crashes, {result.hangs} hangs" + (f" ({result.artifact})" if result.artifact else ""),
              file=sys.stderr, flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(r) | {"inputs_per_s": round(r.inputs_per_s, 1)} for r in results], indent=2))
    return 1 if any(r.crashes or r.hangs for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
