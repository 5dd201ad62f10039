"""Telemetry over the timed window: a background thread reads counters while the steps run.

NVIDIA GPUs through NVML (`nvidia-ml-py`): energy (total-energy counter difference; power
integration only as fallback), power (the window's mean from that counter; samples instantaneous
where NVML has NVML_FI_DEV_POWER_INSTANT), utilization, SM clock, memory, temperature,
clock-event reasons, other processes on the device. CPU: process utilization and RSS (psutil), package energy (RAPL),
the hypervisor's steal time on this process's cores (/proc/stat: measure/steal.py).
What cannot be read stays empty and `telemetry_note` says why; nothing here fails a run.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

import psutil

from bench_core.measure.noise import FOREIGN_CPU_CORES
from bench_core.measure.nvml import open_gpu
from bench_core.measure.rapl import RAPL_ROOT, open_rapl
from bench_core.measure.steal import PROC_STAT, StealWindow, steal_flag
from bench_core.results.rows import columns

# Every reading inside the window takes the GIL from the step's thread: on a GPU seven NVML queries, each
# a release and a retake of the GIL, while a step at batch 1 is the host's own time (2 ms on an H200:
# issue 59). So the window is read 4 times a second, not 20: energy and the mean power come from the
# counter read at the window's edges (unchanged); what a row loses is resolution in what is sampled:
# power_w_max and power_w_sampled from 4 instantaneous readings a second (plus the two edges), the SM
# clock's minimum and mean (the clock-drop flag) and the throttle reasons seen at those instants, the
# utilization, temperature and memory maxima at those instants, other processes checked once a second.
GPU_INTERVAL_S = 0.25   # NVML power readings refresh every ~20-100 ms; utilization is a 1/6-1 s average
CPU_INTERVAL_S = 0.1    # RAPL and RSS only (two /proc reads, no GIL contention seen): coarser is enough
PROCESS_CHECK_EVERY = 4  # ticks between foreign-process checks (the heaviest NVML query): once a second on a GPU


class Sampler:
    """`with Sampler(backend) as s: <timed window>`; then `s.columns()` gives the telemetry columns.

    The thread only reads counters (every `interval_s`); all arithmetic happens after the window.
    `thread_cpu_s` is the CPU time the sampling thread itself used (its cost, for the record).
    `also_ours` gives the pids whose use of the device is the measured work, not another process's
    (a serving engine this process started: mode serve measures it from the outside).
    `proc_stat`: where steal time is read (a test's own text; /proc/stat).
    """

    def __init__(self, backend, interval_s: float | None = None, powercap_root: Path | str = RAPL_ROOT,
                 also_ours: Callable[[], set[int]] | None = None, proc_stat: Path | str = PROC_STAT):
        self.backend = backend
        self.also_ours = also_ours  # pids whose work on the device is the measured work (a serving engine's)
        self.device = backend.device
        self.interval_s = interval_s or (GPU_INTERVAL_S if self.device.type == "cuda" else CPU_INTERVAL_S)
        self.powercap_root = Path(powercap_root)
        self.proc_stat = Path(proc_stat)
        self.thread_cpu_s = 0.0
        self.ticks = 0
        self._columns: dict = {}

    # -- the window --------------------------------------------------------------------
    def __enter__(self) -> "Sampler":
        self._notes: list[str] = []
        self._gpu = open_gpu(self.device, self._notes)
        if self._gpu and self.also_ours:
            self._gpu.also_ours = self.also_ours
        self._rapl = open_rapl(self.device, self.powercap_root, self._notes)
        self._process = psutil.Process()
        self._rss_max = self._process.memory_info().rss
        self._stop = threading.Event()
        self._cpu0 = (_tree_cpu_s(self._process), _host_busy_s())
        self._steal = StealWindow(self.proc_stat)
        self._t0 = time.perf_counter()
        self._read(self._t0, edge=True)
        self._thread = threading.Thread(target=self._loop, name="bench-telemetry", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        self._stop.set()
        self._thread.join()
        end = time.perf_counter()
        cpu1 = (_tree_cpu_s(self._process), _host_busy_s())
        steal = self._steal.cores(end - self._t0)
        self._read(end, edge=True)
        try:
            self._columns = self._summarise(end - self._t0, cpu1, steal)
        finally:
            if self._gpu:
                self._gpu.close()
        return False

    def _loop(self) -> None:
        start = time.thread_time()
        while not self._stop.wait(self.interval_s):
            self._read(time.perf_counter())
        self.thread_cpu_s = time.thread_time() - start

    def _read(self, now: float, edge: bool = False) -> None:
        """One reading of every counter; `edge` marks the first and the last (energy counters)."""
        self.ticks += 1
        if self._gpu:
            self._gpu.sample(now, edge=edge, check_processes=edge or self.ticks % PROCESS_CHECK_EVERY == 0)
        if self._rapl:
            self._rapl.sample(now)
        try:
            self._rss_max = max(self._rss_max, self._process.memory_info().rss)
        except psutil.Error:
            pass

    # -- after the window --------------------------------------------------------------
    def _summarise(self, wall_s: float, cpu1, steal: float | None) -> dict:
        ours_s = cpu1[0] - self._cpu0[0]
        busy_s = max(ours_s - self.thread_cpu_s, 0.0)
        cols = {"cpu_util_pct_mean": busy_s / wall_s * 100.0 if wall_s > 0 else None}
        if self._gpu:
            cols.update(self._gpu.columns(self._notes))
        elif self._rapl:
            cols.update(self._rapl.columns(wall_s))
            if cols.get("power_w_mean") is not None:
                cols["power_method"] = "rapl-counter"  # package energy / window seconds
        cols["cpu_steal_cores"] = steal
        machine = (_foreign_cpu_flag(cpu1[1] - self._cpu0[1] - ours_s, wall_s), steal_flag(steal, wall_s))
        if any(machine):
            cols["noise_flags"] = ";".join(f for f in (cols.get("noise_flags"), *machine) if f)
        if WINDOW_RSS_COLUMN in _schema_columns():
            cols[WINDOW_RSS_COLUMN] = self._rss_max
        cols["telemetry_note"] = "; ".join(self._notes) or None
        return cols

    def columns(self) -> dict:
        return dict(self._columns)

    @property
    def rss_bytes_max(self) -> int:
        """Largest RSS sampled during the window (sampled; the row's peak_rss_bytes is the kernel's
        high-water mark)."""
        return self._rss_max


# Emitted only once the result schema has it (make_row refuses unknown columns).
WINDOW_RSS_COLUMN = "window_peak_rss_bytes"


def _schema_columns() -> list[str]:
    return columns()


def _tree_cpu_s(process: psutil.Process) -> float:
    """CPU seconds of this process and its live children (e.g. compile workers)."""
    total = 0.0
    for p in [process] + _children(process):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _children(process: psutil.Process) -> list:
    try:
        return process.children(recursive=True)
    except psutil.Error:
        return []


def _host_busy_s() -> float:
    return host_busy_s(psutil.cpu_times())


def host_busy_s(times) -> float:
    """Busy CPU seconds of the whole host's processes (and its kernel), summed over CPUs, from psutil.cpu_times():
    psutil's cpu_percent arithmetic less steal, which is in that sum but is no process's (the hypervisor ran
    someone else on a core that had work): measure/steal.py reads it apart, on the cores this process uses."""
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)  # guest is in user
    return total - times.idle - getattr(times, "iowait", 0.0) - getattr(times, "steal", 0.0)


class BusyNow:
    """Other processes' load on the host CPU, in cores, over a stretch of this process's own work: made at its
    start, then `cores(min_s)` (which waits out a stretch shorter than min_s first), or `text(min_s)`, which also
    reads the hypervisor's steal over it. What `bench sweep` says before it starts: its estimate is for an idle
    machine, and a machine busy now makes the sweep slower and its repeats disturbed."""

    def __init__(self, proc_stat: Path | str = PROC_STAT):
        self._process = psutil.Process()
        self._steal = StealWindow(proc_stat)
        self._start = (time.perf_counter(), _tree_cpu_s(self._process), _host_busy_s())

    def cores(self, min_s: float = 0.3) -> float:
        """Other processes' busy cores since the start, the stretch made at least min_s long."""
        return self._measure(min_s)[0]

    def text(self, min_s: float = 0.3) -> str:
        """busy_text of the stretch: other processes' cores, and the steal where it would flag a window."""
        cores, steal, wall = self._measure(min_s)
        return busy_text(cores, steal if steal_flag(steal, wall) else None)

    def _measure(self, min_s: float) -> tuple[float, float | None, float]:
        wall0, own0, host0 = self._start
        time.sleep(max(0.0, min_s - (time.perf_counter() - wall0)))
        wall, own, host = time.perf_counter() - wall0, _tree_cpu_s(self._process) - own0, _host_busy_s() - host0
        steal = self._steal.cores(wall)
        return (max(0.0, (host - own) / wall) if wall > 0 else 0.0), steal, wall


def busy_text(cores: float, steal: float | None = None) -> str:
    """'' on a quiet machine (other processes under FOREIGN_CPU_CORES, no steal given); else the line saying that
    the machine is busy (other processes; `steal`: the hypervisor's cores taken from this VM) and what it does to
    a sweep's estimate and rows."""
    others = cores > FOREIGN_CPU_CORES
    if not others and steal is None:
        return ""
    what = [f"other processes are using {cores:.1f} of its {os.cpu_count()} cores now"] if others else []
    if steal is not None:
        what.append(f"the hypervisor is giving {steal:.2f} of its cores to someone else (CPU steal)")
    return (f"this machine is busy: {'; '.join(what)}; the estimate is for an idle machine, so the sweep will take "
            "longer, and repeats measured beside them are marked disturbed (re-measure on a quiet machine)")


def _foreign_cpu_flag(others_s: float, wall_s: float) -> str | None:
    """Other processes busy on the host CPU during the window: the CPU's 'other processes on
    the device'. Skipped in multi-process runs, where the other ranks are expected."""
    import torch.distributed as dist
    if wall_s <= 0 or (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return None
    cores = others_s / wall_s
    return f"other-processes-on-cpu({cores:.2f} cores)" if cores > FOREIGN_CPU_CORES else None


def combine_ranks(per_rank: list[dict]) -> dict:
    """One row's telemetry from every rank's `columns()` (each rank samples its own device).

    Per-device meaning is kept: energy and power are the mean per device, maxima the max,
    minima the min; reasons, flags and notes are unions.
    """
    def values(key):
        return [c[key] for c in per_rank if c.get(key) is not None]

    def mean(key):
        v = values(key)
        return sum(v) / len(v) if v else None

    def union(key, sep=";"):
        seen: list[str] = []
        for v in values(key):
            seen += [p for p in str(v).split(sep) if p and p not in seen]
        return sep.join(seen) or None

    out = {k: mean(k) for k in ("power_w_mean", "power_w_sampled", "energy_j", "gpu_util_pct_mean", "sm_clock_mhz_mean",
                                "cpu_util_pct_mean")}
    out.update({k: max(values(k), default=None)
                for k in ("power_w_max", "power_limit_w", "gpu_mem_used_bytes", "gpu_temp_c_max", "cpu_steal_cores",
                          WINDOW_RSS_COLUMN)
                if k != WINDOW_RSS_COLUMN or k in _schema_columns()})
    out["sm_clock_mhz_min"] = min(values("sm_clock_mhz_min"), default=None)
    methods = set(values("energy_method"))  # the weakest method used by any rank
    out["energy_method"] = next((m for m in ("power-integration", "nvml-counter", "rapl") if m in methods), None)
    methods = set(values("power_method"))
    out["power_method"] = next((m for m in ("nvml-power-usage", "nvml-instant", "energy-counter", "rapl-counter")
                                if m in methods), None)
    out.update({k: union(k) for k in ("throttle_reasons", "noise_flags")})
    out["telemetry_note"] = union("telemetry_note", sep="; ")
    return out


# -- NVIDIA (NVML) ---------------------------------------------------------------------------


# -- CPU package energy (RAPL via powercap) ----------------------------------------------------


