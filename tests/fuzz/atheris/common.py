"""The part every harness shares: libFuzzer's command line, the seed corpus, periodic checks.

A harness module instruments and imports the code under test first (``instrument``), then
calls ``fuzz(one_input, seeds, ...)``.  Arguments are libFuzzer's (``-runs=N``, ``-seed=S``,
``-max_len=L``, ``-timeout=T``, corpus directories...).  The seeds reach libFuzzer as
``-seed_inputs`` files, deleted once run; a corpus directory on the command line (optional)
adds its inputs and receives the new ones libFuzzer finds, otherwise the corpus lives in memory.

libFuzzer ends the process with ``_exit`` after the last run (no ``atexit``), so a harness's
final check runs from inside the ``-runs``-th input, besides every ``check_every`` inputs, and
``finish`` (cleaning up) after it.  A failed check raises: libFuzzer reports it as a crash, exit
status 77; a hang (one input over ``-timeout`` seconds) exits with 70.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import atheris

#: libFuzzer defaults a harness gets unless its command line sets them.
DEFAULTS = {"-timeout": "20", "-rss_limit_mb": "4096", "-print_final_stats": "1"}


def instrument() -> atheris.import_hook.HookManager:
    """``with instrument(): import ...``: coverage instrumentation for onceflow and kio."""
    return atheris.instrument_imports(include=["onceflow", "kio"])


def scratch_dir(prefix: str) -> Path:
    """A fresh temporary directory, in memory (``/dev/shm``) where there is one: the harnesses
    fsync on every input, and a disk would make that the cost of the run."""
    shm = Path("/dev/shm")
    where = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=where))


def _runs(argv: list[str]) -> int:
    for arg in argv:
        if arg.startswith("-runs="):
            return int(arg.split("=", 1)[1])
    return -1


def fuzz(
    one_input: Callable[[bytes], None],
    seeds: Iterable[bytes],
    *,
    max_len: int,
    check: Callable[[], None] | None = None,
    check_every: int = 1000,
    finish: Callable[[], None] | None = None,
    argv: list[str] | None = None,
) -> None:
    args = list(sys.argv if argv is None else argv)
    flags = {a.split("=", 1)[0] for a in args[1:] if a.startswith("-")}
    args += [f"{k}={v}" for k, v in {**DEFAULTS, "-max_len": str(max_len)}.items() if k not in flags]
    seed_dir = scratch_dir("onceflow-fuzz-seeds-")
    paths = []
    for i, seed in enumerate(seeds):
        path = seed_dir / f"{i:04d}"
        path.write_bytes(seed)
        paths.append(str(path))
    args.append("-seed_inputs=" + ",".join(paths))
    total = _runs(args)
    calls = 0

    def wrapped(data: bytes) -> None:
        nonlocal calls
        calls += 1
        if calls == len(paths) + 2:
            shutil.rmtree(seed_dir, ignore_errors=True)  # libFuzzer has run (and read) every seed by now
        if 0 < total < calls:
            return  # libFuzzer may make a call past -runs (seen once); the harness is closed by then
        one_input(data)
        if check is not None and (calls % check_every == 0 or calls == total):
            check()
        if calls == total:
            print(f"onceflow-fuzz: {calls} inputs, final check passed", file=sys.stderr, flush=True)
            if finish is not None:
                finish()

    atheris.Setup(args, wrapped)
    atheris.Fuzz()
