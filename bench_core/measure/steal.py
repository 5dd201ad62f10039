"""CPU steal time: the seconds in which the hypervisor ran someone else on this VM's cores while they had work,
read from /proc/stat (Linux, a cpu line's 8th number, since 2.6.11). It is no process of this machine, so the
other-processes flag cannot see it: a window it hits is slower with nothing else running. Plain text arithmetic.

Steal is summed over the cores this process may run on (its affinity), where the run's threads compute; a file or
a field that is not there gives no reading (None) and no flag.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from bench_core.measure.noise import STEAL_CPU_CORES

PROC_STAT = Path("/proc/stat")
# cpuN user nice system idle iowait irq softirq steal guest guest_nice: steal is the 8th count after the name
STEAL_FIELD = 8
# /proc/stat counts in USER_HZ ticks (100 a second on Linux), whatever the kernel's own tick
TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def steal_s(text: str, cpus: Iterable[int] | None = None) -> float | None:
    """Steal seconds since boot in a /proc/stat text: summed over the per-core lines (cpu0, cpu1, ...) of `cpus`,
    or the whole machine's line ('cpu') when cpus is None. None when no line asked for is there, or one lacks the
    steal field (a kernel before 2.6.11). A core asked for without a line (offline) adds nothing."""
    wanted = {"cpu"} if cpus is None else {f"cpu{c}" for c in cpus}
    ticks, found = 0, False
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] not in wanted:
            continue
        if len(fields) <= STEAL_FIELD or not fields[STEAL_FIELD].isdigit():
            return None
        ticks, found = ticks + int(fields[STEAL_FIELD]), True
    return ticks * TICK_S if found else None


def our_cpus() -> set[int] | None:
    """The cores this process may run on (its affinity); None where the platform does not say."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def read_steal_s(path: Path | str = PROC_STAT, cpus: Iterable[int] | None = None) -> float | None:
    """steal_s of the file at `path` (None when it cannot be read: not Linux, no /proc)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    return steal_s(text, cpus)


def steal_cores(before_s: float | None, after_s: float | None, wall_s: float) -> float | None:
    """Steal over a stretch of wall_s seconds, in cores (steal seconds / wall seconds): None without both
    readings, a stretch, or a counter that went forward (one that fell back was reset: no reading)."""
    if before_s is None or after_s is None or wall_s <= 0 or after_s < before_s:
        return None
    return (after_s - before_s) / wall_s


def steal_flag(cores: float | None, wall_s: float) -> str | None:
    """'cpu-steal(0.31 cores)' where the hypervisor took more than STEAL_CPU_CORES of the run's cores over the
    window, beyond the counter's resolution (one tick in the window, so that a short window's rounding alone
    never flags); None otherwise and where there is no reading."""
    if cores is None or wall_s <= 0 or cores - TICK_S / wall_s <= STEAL_CPU_CORES:
        return None
    return f"cpu-steal({cores:.2f} cores)"


class StealWindow:
    """Steal over a stretch: made at its start; `cores(wall_s)` at its end (None where /proc/stat or its steal field
    is missing). `path` and `cpus` are for a test's own /proc/stat text and cores."""

    def __init__(self, path: Path | str = PROC_STAT, cpus: Iterable[int] | None = None):
        self.path = Path(path)
        self.cpus = set(cpus) if cpus is not None else our_cpus()
        self.start_s = read_steal_s(self.path, self.cpus)

    def cores(self, wall_s: float) -> float | None:
        return steal_cores(self.start_s, read_steal_s(self.path, self.cpus), wall_s)
