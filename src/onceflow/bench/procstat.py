"""CPU seconds and peak memory of a benchmark's processes, by role, read from ``/proc`` (Linux).

Theory of operation
-------------------
A Spark pipeline is several processes: the broker, the driver (Python), the
Spark JVM it launches, and the Python workers the JVM forks (the data
source's readers and writers, through ``pyspark.daemon``).  ``ProcessSampler``
walks the process tree under the roots it is given every ``interval_s``,
puts each process in a role (a root's own role; a ``java`` process under a
root is ``spark-jvm``; a process under a JVM is ``python-workers``), and
keeps, per process, the CPU time used since sampling began (``utime +
stime``, all its threads; for a process started later, all of it) and its peak resident size (``VmHWM``); per role, the highest sum
of resident sizes seen at one sample.  A process loses the CPU it used
after its last sample, and one that starts and exits between two samples
is not counted at all (its parent's reaped-children time is not read).
Elsewhere than Linux it reports nothing.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from types import TracebackType

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def stat_fields(pid: int) -> list[str]:
    """Fields of ``/proc/PID/stat`` after the command name: index 0 is proc(5)'s field 3 (state)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of one process (all its threads) so far."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime: fields 14 and 15 of proc(5)


def _status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


@dataclass
class RoleUsage:
    cpu_s: float = 0.0
    #: The highest resident size of any one process of the role (VmHWM), in MiB.
    peak_process_mib: float = 0.0
    #: The highest sum of the role's resident sizes at one sample, in MiB.
    peak_total_mib: float = 0.0
    processes: int = 0


@dataclass
class ProcessSampler:
    """Samples the trees under ``roots`` (role -> pid) until stopped; ``usage()`` by role."""

    roots: dict[str, int]
    interval_s: float = 0.5
    _cpu: dict[int, tuple[str, float]] = field(default_factory=dict)
    _hwm: dict[int, int] = field(default_factory=dict)
    _peak_total: dict[str, int] = field(default_factory=dict)
    #: CPU seconds of the processes that were already there when sampling began: not counted.
    _initial: dict[int, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> ProcessSampler:
        self.sample()
        self._initial = {pid: cpu for pid, (_, cpu) in self._cpu.items()}
        if os.path.isdir("/proc/self"):
            self._thread = threading.Thread(target=self._run, name="process-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        if not os.path.isdir("/proc/self"):
            return
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    children.setdefault(int(stat_fields(int(entry))[1]), []).append(int(entry))
                except (OSError, IndexError, ValueError):
                    continue  # gone meanwhile
        resident: dict[str, int] = {}
        seen: set[int] = set()  # a root may be another's descendant (the broker, a child of the bench): once each
        for role, root in list(self.roots.items()):  # the caller may add a root meanwhile
            seen.update(self.roots.values())
            self._visit(root, role, children, resident, under_jvm=False, seen=seen)
        for role, kib in resident.items():
            self._peak_total[role] = max(self._peak_total.get(role, 0), kib)

    def _visit(self, pid: int, role: str, children: dict[int, list[int]], resident: dict[str, int],
               under_jvm: bool, seen: set[int]) -> None:
        try:
            with open(f"/proc/{pid}/comm") as comm:
                name = comm.read().strip()
            if name == "java" and not under_jvm and role != "broker":
                role, under_jvm = "spark-jvm", True
            elif under_jvm and role == "spark-jvm":
                role = "python-workers"
            self._cpu[pid] = (role, cpu_seconds(pid))
            self._hwm[pid] = max(self._hwm.get(pid, 0), _status_kib(pid, "VmHWM:"))
            resident[role] = resident.get(role, 0) + _status_kib(pid, "VmRSS:")
        except (OSError, ValueError, IndexError):
            return  # exited meanwhile: what was seen of it stays
        for child in children.get(pid, ()):
            if child not in seen:
                seen.add(child)
                self._visit(child, role, children, resident, under_jvm, seen)

    def role(self, pid: int) -> str | None:
        """The role a process was counted under, if it was seen."""
        seen = self._cpu.get(pid)
        return seen[0] if seen is not None else None

    def usage(self) -> dict[str, RoleUsage]:
        out: dict[str, RoleUsage] = {}
        for pid, (role, cpu) in self._cpu.items():
            usage = out.setdefault(role, RoleUsage())
            usage.cpu_s += cpu - self._initial.get(pid, 0.0)
            usage.processes += 1
            usage.peak_process_mib = max(usage.peak_process_mib, self._hwm.get(pid, 0) / 1024)
        for role, kib in self._peak_total.items():
            out.setdefault(role, RoleUsage()).peak_total_mib = kib / 1024
        return out

    def summary(self) -> dict[str, dict[str, float]]:
        """``{role: {cpu_s, peak_process_mib, peak_total_mib, processes}}``, rounded, for a JSON line."""
        return {role: {"cpu_s": round(u.cpu_s, 1), "peak_process_mib": round(u.peak_process_mib),
                       "peak_total_mib": round(u.peak_total_mib), "processes": u.processes}
                for role, u in sorted(self.usage().items())}


def usage_extra(sampler: ProcessSampler) -> dict[str, float]:
    """The sampler's figures as flat ``Result.extra`` keys: ``cpu_s_<role>``, ``peak_mib_<role>``
    (the role's highest total resident size)."""
    out: dict[str, float] = {}
    for role, usage in sorted(sampler.usage().items()):
        name = role.replace("-", "_")
        out[f"cpu_s_{name}"] = round(usage.cpu_s, 1)
        out[f"peak_mib_{name}"] = round(usage.peak_total_mib)
    return out
