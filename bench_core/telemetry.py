"""Telemetry over the timed window: a background thread reads counters while the steps run.

NVIDIA GPUs through NVML (`nvidia-ml-py`): power, energy (total-energy counter difference; power
integration only as fallback), utilization, SM clock, memory, temperature, clock-event reasons,
other processes on the device. CPU: process utilization and RSS (psutil), package energy (RAPL).
What cannot be read stays empty and `telemetry_note` says why; nothing here fails a run.
"""
from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

RAPL_ROOT = Path("/sys/class/powercap")
GPU_INTERVAL_S = 0.05   # NVML power readings refresh every ~20-100 ms
CPU_INTERVAL_S = 0.1    # RAPL and RSS only: cheaper, coarser is enough
PROCESS_CHECK_EVERY = 10  # ticks between foreign-process checks (the heaviest NVML query)

# NVML clock-event (throttle) reason bits, from nvml.h; stable across driver versions.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


class Sampler:
    """`with Sampler(backend) as s: <timed window>`; then `s.columns()` gives the telemetry columns.

    The thread only reads counters (every `interval_s`); all arithmetic happens after the window.
    `thread_cpu_s` is the CPU time the sampling thread itself used (its cost, for the record).
    """

    def __init__(self, backend, interval_s: float | None = None, powercap_root: Path | str = RAPL_ROOT):
        self.backend = backend
        self.device = backend.device
        self.interval_s = interval_s or (GPU_INTERVAL_S if self.device.type == "cuda" else CPU_INTERVAL_S)
        self.powercap_root = Path(powercap_root)
        self.thread_cpu_s = 0.0
        self.ticks = 0
        self._columns: dict = {}

    # -- the window --------------------------------------------------------------------
    def __enter__(self) -> "Sampler":
        self._notes: list[str] = []
        self._gpu = _open_gpu(self.device, self._notes)
        self._rapl = _open_rapl(self.device, self.powercap_root, self._notes)
        self._process = psutil.Process()
        self._rss_max = self._process.memory_info().rss
        self._stop = threading.Event()
        self._cpu0 = (_tree_cpu_s(self._process), _host_busy_s())
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
        self._read(end, edge=True)
        try:
            self._columns = self._summarise(end - self._t0, cpu1)
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
    def _summarise(self, wall_s: float, cpu1) -> dict:
        ours_s = cpu1[0] - self._cpu0[0]
        busy_s = max(ours_s - self.thread_cpu_s, 0.0)
        cols = {"cpu_util_pct_mean": busy_s / wall_s * 100.0 if wall_s > 0 else None}
        if self._gpu:
            cols.update(self._gpu.columns(self._notes))
        elif self._rapl:
            cols.update(self._rapl.columns(wall_s))
        foreign = _foreign_cpu_flag(cpu1[1] - self._cpu0[1] - ours_s, wall_s)
        if foreign:
            cols["noise_flags"] = ";".join(f for f in (cols.get("noise_flags"), foreign) if f)
        if WINDOW_RSS_COLUMN in _schema_columns():
            cols[WINDOW_RSS_COLUMN] = self._rss_max
        cols["telemetry_note"] = "; ".join(self._notes) or None
        return cols

    def columns(self) -> dict:
        return dict(self._columns)

    @property
    def rss_bytes_max(self) -> int:
        """Largest RSS sampled during the window (the row's peak_rss_bytes is the lifetime peak)."""
        return self._rss_max


# Emitted only once the result schema has it (make_row refuses unknown columns).
WINDOW_RSS_COLUMN = "window_peak_rss_bytes"
# Other processes' CPU use during the window, in cores, above which the row is flagged.
FOREIGN_CPU_CORES = 0.25


def _schema_columns() -> list[str]:
    from bench_core.results import columns
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
    """Busy CPU seconds of the whole host, summed over CPUs (psutil's cpu_percent arithmetic)."""
    t = psutil.cpu_times()
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)  # guest is in user
    return total - t.idle - getattr(t, "iowait", 0.0)


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

    out = {k: mean(k) for k in ("power_w_mean", "energy_j", "gpu_util_pct_mean", "sm_clock_mhz_mean",
                                "cpu_util_pct_mean")}
    out.update({k: max(values(k), default=None) for k in ("power_w_max", "gpu_mem_used_bytes", "gpu_temp_c_max")})
    out["sm_clock_mhz_min"] = min(values("sm_clock_mhz_min"), default=None)
    methods = set(values("energy_method"))  # the weakest method used by any rank
    out["energy_method"] = next((m for m in ("power-integration", "nvml-counter", "rapl") if m in methods), None)
    out.update({k: union(k) for k in ("throttle_reasons", "noise_flags")})
    out["telemetry_note"] = union("telemetry_note", sep="; ")
    return out


# -- NVIDIA (NVML) ---------------------------------------------------------------------------

def _open_gpu(device, notes: list[str]) -> "_NvmlDevice | None":
    if device.type != "cuda":
        notes.append(f"gpu columns empty: device is {device.type} (NVML reads NVIDIA GPUs only)")
        return None
    try:
        import pynvml
    except ImportError:
        notes.append("gpu columns empty: nvidia-ml-py (pynvml) is not installed")
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: degrade, never fail
        notes.append(f"gpu columns empty: NVML unavailable ({_why(exc)})")
        return None
    try:
        handle, how = _nvml_handle(pynvml, device)
    except Exception as exc:  # noqa: BLE001 - telemetry must never fail the run
        handle, how = None, f"lookup failed ({_why(exc)})"
    if handle is None:
        notes.append(f"gpu columns empty: no NVML device matches {device} by UUID or PCI bus id: {how}")
        _shutdown(pynvml)
        return None
    if how != "uuid":
        notes.append(f"NVML device matched by {how}")
    return _NvmlDevice(pynvml, handle)


def _nvml_handle(nvml, device):
    """The NVML handle of a torch device, by UUID, else PCI bus id. Never by index: NVML
    numbers every GPU of the host, torch only the ones CUDA_VISIBLE_DEVICES lets it see."""
    import torch
    props = torch.cuda.get_device_properties(device.index or 0)
    want_uuid = _uuid_hex(getattr(props, "uuid", ""))
    want_bus = _torch_bus(props)
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    for handle in handles:
        if want_uuid and _guard(lambda: _uuid_hex(nvml.nvmlDeviceGetUUID(handle))) == want_uuid:
            return handle, "uuid"
    for handle in handles:
        if want_bus and _guard(lambda: _parse_bus(nvml.nvmlDeviceGetPciInfo(handle).busId)) == want_bus:
            return handle, "PCI bus id (UUID did not match, e.g. a MIG instance: readings are the whole GPU's)"
    return None, f"torch uuid {want_uuid or '?'}, bus {want_bus or '?'}"


def _uuid_hex(value) -> str:
    """'GPU-8e1c...' (NVML) and '8e1c...' (torch) both become 32 lowercase hex digits."""
    text = value.decode() if isinstance(value, bytes) else str(value)
    text = re.sub(r"^(GPU|MIG)-", "", text.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^0-9a-f]", "", text.lower())


def _parse_bus(value) -> tuple[int, int, int] | None:
    text = value.decode() if isinstance(value, bytes) else str(value)
    m = re.search(r"([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)", text)
    return (int(m[1], 16), int(m[2], 16), int(m[3], 16)) if m else None


def _torch_bus(props) -> tuple[int, int, int] | None:
    parts = [getattr(props, a, None) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    return tuple(parts) if all(isinstance(p, int) for p in parts) else None


def _guard(read):
    try:
        return read()
    except Exception:  # noqa: BLE001
        return None


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _shutdown(nvml) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # noqa: BLE001
        pass


def _own_pids() -> set[int]:
    """This process's pid in every pid namespace (NVML reports host pids inside containers)."""
    pids = {os.getpid()}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                pids.update(int(p) for p in line.split()[1:])
    except (OSError, ValueError):
        pass
    return pids


@dataclass
class _NvmlDevice:
    """Readings of one NVML device. Each query is guarded on its own: one that raises
    (NotSupported on vGPU/MIG, ...) is dropped for the rest of the window and noted."""
    nvml: object
    handle: object
    failed: dict = field(default_factory=dict)
    power_w: list = field(default_factory=list)       # (t, W)
    util_pct: list = field(default_factory=list)
    sm_mhz: list = field(default_factory=list)
    mem_used_max: int | None = None
    temp_max: int | None = None
    reasons: int = 0
    foreign_pids: set = field(default_factory=set)
    unresolved_self: bool = False
    foreign_unresolved: int = 0                       # others seen when our pid is not in NVML's list
    energy_mj: list = field(default_factory=list)     # counter at the first and last read

    def query(self, name: str, read):
        if name in self.failed:
            return None
        try:
            return read()
        except Exception as exc:  # noqa: BLE001 - pynvml.NVMLError and friends
            self.failed[name] = _why(exc)
            return None

    def sample(self, now: float, edge: bool = False, check_processes: bool = False) -> None:
        n, h = self.nvml, self.handle
        if edge:
            energy = self.query("energy", lambda: n.nvmlDeviceGetTotalEnergyConsumption(h))
            if energy is not None:
                self.energy_mj.append(energy)
        mw = self.query("power", lambda: n.nvmlDeviceGetPowerUsage(h))
        if mw is not None:
            self.power_w.append((now, mw / 1000.0))
        util = self.query("utilization", lambda: n.nvmlDeviceGetUtilizationRates(h).gpu)
        if util is not None:
            self.util_pct.append(util)
        mhz = self.query("sm_clock", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
        if mhz is not None:
            self.sm_mhz.append(mhz)
        used = self.query("memory", lambda: n.nvmlDeviceGetMemoryInfo(h).used)
        if used is not None:
            self.mem_used_max = max(self.mem_used_max or 0, int(used))
        temp = self.query("temperature", lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))
        if temp is not None:
            self.temp_max = max(self.temp_max if self.temp_max is not None else temp, temp)
        bits = self._clock_reasons()
        if bits is not None:
            self.reasons |= int(bits)
        if check_processes:
            procs = self.query("processes", lambda: n.nvmlDeviceGetComputeRunningProcesses(h))
            if procs is not None:
                self._note_processes({int(p.pid) for p in procs})

    def _clock_reasons(self):
        n, h = self.nvml, self.handle
        if "clock_events" not in self.failed and hasattr(n, "nvmlDeviceGetCurrentClocksEventReasons"):
            bits = self.query("clock_events", lambda: n.nvmlDeviceGetCurrentClocksEventReasons(h))
            if bits is not None:
                return bits
        # older bindings or drivers: the same bits under the old name
        return self.query("throttle_reasons", lambda: n.nvmlDeviceGetCurrentClocksThrottleReasons(h))

    def _note_processes(self, pids: set[int]) -> None:
        ours = _own_pids()
        if pids & ours:
            self.foreign_pids |= pids - ours
        elif pids:
            # Our pid is not visible to NVML (a container's pid namespace: NVML lists host pids).
            # This process holds a context on the device, so it is one of them, but which one is
            # unknowable: count the others, name no pid (the smallest pid is not ours by any rule).
            self.unresolved_self = True
            self.foreign_unresolved = max(self.foreign_unresolved, len(pids) - 1)

    def columns(self, notes: list[str]) -> dict:
        powers = [w for _, w in self.power_w]
        cols = {
            "power_w_mean": _mean(powers), "power_w_max": max(powers, default=None),
            "gpu_util_pct_mean": _mean(self.util_pct),
            "sm_clock_mhz_mean": _mean(self.sm_mhz), "sm_clock_mhz_min": min(self.sm_mhz, default=None),
            "gpu_mem_used_bytes": self.mem_used_max, "gpu_temp_c_max": self.temp_max,
            "throttle_reasons": ";".join(decode_clock_reasons(self.reasons)) or None,
        }
        if "clock_events" in self.failed and "throttle_reasons" not in self.failed:
            del self.failed["clock_events"]  # the fallback worked
        energy_failure = self.failed.pop("energy", None)
        if len(self.energy_mj) == 2 and self.energy_mj[1] >= self.energy_mj[0]:
            cols.update(energy_j=(self.energy_mj[1] - self.energy_mj[0]) / 1000.0, energy_method="nvml-counter")
        else:
            integrated = integrate_power(self.power_w)
            if integrated is not None:
                cols.update(energy_j=integrated, energy_method="power-integration")
            counter = energy_failure or "did not advance"
            notes.append(f"energy {'from power samples' if integrated is not None else 'empty'}: "
                         f"NVML energy counter {counter}")
        if self.foreign_pids:
            cols["noise_flags"] = "other-processes-on-device(pid " + ",".join(map(str, sorted(self.foreign_pids))) + ")"
        elif self.foreign_unresolved:
            cols["noise_flags"] = f"other-processes-on-device({self.foreign_unresolved} other, pids not resolvable)"
        if self.unresolved_self:
            notes.append("own pid not in NVML's process list (pid namespace): others counted, none named")
        notes += [f"nvml {name}: {why}" for name, why in self.failed.items()]
        return cols

    def close(self) -> None:
        _shutdown(self.nvml)


def decode_clock_reasons(bits: int) -> list[str]:
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if bits & bit]
    unknown = bits & ~sum(CLOCK_EVENT_REASONS)
    return names + ([f"0x{unknown:x}"] if unknown else [])


def integrate_power(samples: list[tuple[float, float]]) -> float | None:
    """Joules from (seconds, watts) samples, trapezoid rule; None with fewer than two."""
    if len(samples) < 2:
        return None
    return sum((t1 - t0) * (w0 + w1) / 2.0 for (t0, w0), (t1, w1) in zip(samples, samples[1:]))


def _mean(values):
    return sum(values) / len(values) if values else None


# -- CPU package energy (RAPL via powercap) ----------------------------------------------------

def _open_rapl(device, root: Path, notes: list[str]) -> "RaplCounter | None":
    if device.type == "mps":
        notes.append("energy empty: no energy counter is read on mps")
    if device.type != "cpu":
        return None
    counter, reason = RaplCounter.open(root)
    if counter is None:
        notes.append(f"energy empty: {reason}")
    else:
        notes.append("energy is RAPL package energy: the whole CPU package, every process on it")
    return counter


class RaplCounter:
    """Package energy from <root>/intel-rapl:N/energy_uj, summed over packages.

    The counter wraps at max_energy_range_uj; reading it every sample and adding the
    per-interval deltas counts every wrap (a window can outlast one wrap period).
    """

    def __init__(self, zones: list[Path], ranges_uj: list[int]):
        self.zones = zones
        self.ranges_uj = ranges_uj
        self.energy_uj = 0
        self.power_w_max: float | None = None
        self._last: list[int] | None = None
        self._last_t: float | None = None

    @classmethod
    def open(cls, root: Path | str = RAPL_ROOT) -> tuple["RaplCounter | None", str | None]:
        root = Path(root)
        zones = sorted(p for p in root.glob("intel-rapl:*") if re.fullmatch(r"intel-rapl:\d+", p.name))
        if not zones:
            return None, f"no RAPL package zone under {root} (intel-rapl:N)"
        try:
            counter = cls(zones, [int((z / "max_energy_range_uj").read_text()) for z in zones])
            counter.read()
        except PermissionError:
            return None, f"RAPL {zones[0]}/energy_uj is not readable (root only since Linux 5.10)"
        except (OSError, ValueError) as exc:
            return None, f"RAPL unreadable ({_why(exc)})"
        return counter, None

    def read(self) -> list[int]:
        return [int((z / "energy_uj").read_text()) for z in self.zones]

    def sample(self, now: float) -> None:
        try:
            values = self.read()
        except (OSError, ValueError):
            return
        if self._last is not None:
            delta = 0
            for cur, prev, span in zip(values, self._last, self.ranges_uj):
                delta += cur - prev if cur >= prev else cur + span - prev
            self.energy_uj += delta
            if now > self._last_t:
                watts = delta / 1e6 / (now - self._last_t)
                self.power_w_max = max(self.power_w_max or 0.0, watts)
        self._last, self._last_t = values, now

    @property
    def energy_j(self) -> float:
        return self.energy_uj / 1e6

    def columns(self, wall_s: float) -> dict:
        return {"energy_j": self.energy_j, "energy_method": "rapl",
                "power_w_mean": self.energy_j / wall_s if wall_s > 0 else None, "power_w_max": self.power_w_max}
