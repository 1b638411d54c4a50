"""The faults ``onceflow chaos`` injects, and when.

Theory of operation: a ``Schedule`` spreads the requested number of each fault over the run,
one per slot of equal length, at a random moment of its slot (seeded, so a campaign can be
replayed).  ``Nemesis.inject`` carries one out against the broker process and records it in the
history as a ``fault`` event (``info``: the checker shows faults beside the anomalies they
precede, and judges nothing by them):

* ``kill``: SIGKILL, then a restart on the same port and data after up to a second;
* ``pause``: SIGSTOP for ``pause_s`` (longer than the clients' session and transaction
  timeouts), then SIGCONT;
* ``reset``: every client connection through the proxy gets a TCP RST at once;
* ``crash-roll`` / ``crash-compaction``: the broker is restarted with an ``ONCEFLOW_FAULT``
  crash point (``onceflow.faults``) armed, dies by itself at that step of a segment roll or of
  the cleaner's swap (or is killed if the step does not come within ``crash_wait_s``), and is
  started again;
* ``disk-full``: a filler file takes every free byte of the data directory's file system for
  ``disk_full_s`` (writes then fail with ENOSPC and are answered KAFKA_STORAGE_ERROR), is
  deleted, and the broker is restarted, since a partition whose data write failed refuses
  writes until then (README, "When the disk is full").  Needs the data directory on a small
  file system of its own (``onceflow chaos --disk-mib``).
"""

from __future__ import annotations

import errno
import logging
import os
import random
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .history import Recorder
from .proxy import TcpProxy

log = logging.getLogger(__name__)

FAULTS = ("kill", "pause", "reset", "crash-roll", "crash-compaction", "disk-full")
PROCESS = "nemesis"


class Broker(Protocol):
    """What the nemesis drives: ``onceflow.broker.process.BrokerProcess``, or one Apache Kafka
    node (``campaign.KafkaNode``: kills and pauses only)."""

    env: dict[str, str]
    data_dir: Path

    def alive(self) -> bool: ...

    def start(self) -> object: ...

    def kill(self) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...


@dataclass(frozen=True)
class Schedule:
    """(seconds from the start, fault) pairs, in time order."""

    items: tuple[tuple[float, str], ...]

    @classmethod
    def spread(cls, counts: dict[str, int], seconds: float, rng: random.Random, lead_s: float = 2.0) -> Schedule:
        """Every fault of ``counts`` in its own slot of ``seconds``, shuffled across kinds; the
        first ``lead_s`` are left quiet so the clients start on a healthy broker."""
        kinds = [kind for kind, n in counts.items() for _ in range(n)]
        unknown = sorted(set(kinds) - set(FAULTS))
        if unknown:
            raise ValueError(f"unknown faults {unknown}; known: {', '.join(FAULTS)}")
        rng.shuffle(kinds)
        if not kinds:
            return cls(())
        slot = max(seconds - lead_s, 0.0) / len(kinds)
        return cls(tuple((lead_s + i * slot + rng.uniform(0, slot * 0.5), kind) for i, kind in enumerate(kinds)))


class Nemesis:
    """Carries out faults against one broker process."""

    def __init__(self, broker: Broker, recorder: Recorder, rng: random.Random, *, proxy: TcpProxy | None = None,
                 pause_s: float = 12.0, crash_wait_s: float = 20.0, disk_full_s: float = 3.0) -> None:
        self.broker = broker
        self.recorder = recorder
        self.rng = rng
        self.proxy = proxy
        self.pause_s = pause_s
        self.crash_wait_s = crash_wait_s
        self.disk_full_s = disk_full_s
        self.done: dict[str, int] = {}
        self.crash_points_reached = 0
        #: Why the faults stopped early (the broker did not come back, say), or None.
        self.failure: str | None = None

    def run(self, schedule: Schedule, stop: threading.Event, on_fault: object = None) -> None:
        """Inject every scheduled fault at its time, until ``stop``."""
        start = time.monotonic()
        for at, kind in schedule.items:
            if stop.wait(max(0.0, start + at - time.monotonic())):
                return
            try:
                self.inject(kind)
            except (RuntimeError, OSError, subprocess.SubprocessError) as exc:  # the broker did not come back
                self.failure = f"{kind}: {exc}"
                self.recorder.complete(PROCESS, "fail", "fault", {"kind": kind, "error": str(exc)})
                log.error("fault %s failed: %s", kind, exc)
                return
            if callable(on_fault):
                on_fault(kind)

    def inject(self, kind: str) -> None:
        self.recorder.invoke(PROCESS, "fault", {"kind": kind})
        detail = getattr(self, "_" + kind.replace("-", "_"))()
        self.recorder.complete(PROCESS, "info", "fault", {"kind": kind, **(detail or {})})
        self.done[kind] = self.done.get(kind, 0) + 1

    def heal(self) -> None:
        """Whatever state the faults left: the broker running and answering."""
        self.broker.resume()
        if not self.broker.alive():
            self.broker.env = {}
            self.broker.start()

    # -- the faults ----------------------------------------------------------

    def _kill(self) -> dict[str, object]:
        self.broker.kill()
        down = self.rng.uniform(0, 1.0)
        time.sleep(down)
        self.broker.start()
        return {"down_s": round(down, 3)}

    def _pause(self) -> dict[str, object]:
        self.broker.pause()
        time.sleep(self.pause_s)
        self.broker.resume()
        return {"paused_s": self.pause_s}

    def _reset(self) -> dict[str, object]:
        if self.proxy is None:
            raise RuntimeError("the reset fault needs the proxy (onceflow chaos starts one when --resets is given)")
        return {"connections": self.proxy.reset_all()}

    def _crash_roll(self) -> dict[str, object]:
        return self._crash_at(f"segment-roll@{self.rng.randint(1, 3)}")

    def _crash_compaction(self) -> dict[str, object]:
        return self._crash_at(self.rng.choice(["compaction-swap", "compaction-delete"]))

    def _crash_at(self, point: str) -> dict[str, object]:
        self.broker.kill()
        self.broker.env = {"ONCEFLOW_FAULT": point}
        self.broker.start()
        deadline = time.monotonic() + self.crash_wait_s
        while self.broker.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        reached = not self.broker.alive()
        self.crash_points_reached += reached
        self.broker.kill()  # not reached in time: an ordinary kill instead
        self.broker.start()
        return {"point": point, "reached": reached}

    def _disk_full(self) -> dict[str, object]:
        filler = self.broker.data_dir.parent / "chaos-filler"
        filled = _fill(filler)
        time.sleep(self.disk_full_s)
        filler.unlink()
        self.broker.kill()
        self.broker.start()
        return {"filled_bytes": filled}


#: The most free space ``disk-full`` will fill: it is meant for a small file system of its own.
MAX_FILL_BYTES = 2 << 30


def _fill(path: Path) -> int:
    """Write ``path`` until the file system is full; returns the bytes it holds."""
    stat = os.statvfs(path.parent)
    free = stat.f_bavail * stat.f_frsize
    if free > MAX_FILL_BYTES:
        raise RuntimeError(f"{path.parent} has {free >> 20} MiB free: disk-full needs the data on a small file system "
                           "of its own (onceflow chaos --disk-mib)")
    chunk = b"\0" * (1 << 20)
    written = 0
    with open(path, "wb", buffering=0) as f:
        for size in (1 << 20, 4096, 512):  # big chunks, then what fits in the last pages
            for _ in range(free // size + 2):
                try:
                    written += f.write(chunk[:size]) or 0
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return written
