"""NVML (nvidia-ml-py) for one CUDA device: power, energy, clocks, utilization, throttle reasons, other processes.

The device is found by its UUID or PCI bus id (never by NVML index alone); on a MIG slice the
GPU-wide readings are the whole GPU's and are withheld from the power and energy columns.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Callable

from bench_core.host import own_status

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


def open_gpu(device, notes: list[str]) -> "NvmlDevice | None":
    if device.type != "cuda":
        notes.append(f"gpu columns empty: device is {device.type} (NVML reads NVIDIA GPUs only)")
        return None
    try:
        import pynvml  # optional: only GPU rows need it
    except ImportError:
        notes.append("gpu columns empty: nvidia-ml-py (pynvml) is not installed")
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: degrade, never fail
        notes.append(f"gpu columns empty: NVML unavailable ({_why(exc)})")
        return None
    try:
        match = _nvml_handle(pynvml, device)
    except Exception as exc:  # noqa: BLE001 - telemetry must never fail the run
        match = Match(None, f"lookup failed ({_why(exc)})")
    if match.handle is None:
        notes.append(f"gpu columns empty: no NVML device matches {device} by UUID or PCI bus id: {match.how}")
        _shutdown(pynvml)
        return None
    if match.how != "uuid":
        notes.append(f"NVML device matched by {match.how}")
    return NvmlDevice(pynvml, match.handle, slice_handle=match.slice_handle, shared_gpu=match.shared_gpu)


@dataclass(frozen=True)
class Match:
    """The NVML handle of a torch device. On a MIG instance `handle` is the whole GPU's (power,
    energy, clocks and temperature exist only there, shared by every slice) and `slice_handle`
    the instance's own (its memory and processes); `shared_gpu` says the GPU-wide readings
    include other slices' work."""
    handle: object
    how: str
    slice_handle: object = None
    shared_gpu: bool = False


def _by_bus(nvml, handle) -> Match:
    """A match by PCI bus id: the whole GPU. With MIG mode on, this process runs on one of its
    slices (whose UUID NVML did not know), and the GPU-wide readings are every slice's."""
    if _mig_enabled(nvml, handle):
        return Match(handle, "PCI bus id (UUID did not match; MIG mode is on: the readings are the whole GPU's)",
                     shared_gpu=True)
    return Match(handle, "PCI bus id (UUID did not match)")


def _nvml_handle(nvml, device) -> Match:
    """The NVML handle of a torch device: asked for by UUID (a GPU's, then a MIG instance's),
    else by PCI bus id, else found by walking the indices. Never by index alone: NVML numbers
    every GPU of the host, torch only the ones CUDA_VISIBLE_DEVICES lets it see. Asking by UUID
    or bus id opens only this GPU: under cgroup device limits (SLURM ConstrainDevices,
    containers) the GPUs this job does not own raise NO_PERMISSION, and that must not empty
    this GPU's columns."""
    import torch
    props = torch.cuda.get_device_properties(device.index or 0)
    want_uuid = _uuid_hex(getattr(props, "uuid", ""))
    want_bus = _torch_bus(props)
    if len(want_uuid) == 32:
        handle = _guard(lambda: nvml.nvmlDeviceGetHandleByUUID("GPU-" + _dashed(want_uuid)))
        if handle is not None:
            return Match(handle, "uuid")
        # A MIG instance (CUDA gives its own UUID; NVML spells it MIG-<uuid> since driver R470).
        instance = _guard(lambda: nvml.nvmlDeviceGetHandleByUUID("MIG-" + _dashed(want_uuid)))
        if instance is not None:
            parent = _guard(lambda: nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(instance))
            if parent is None and want_bus:
                parent = _guard(lambda: nvml.nvmlDeviceGetHandleByPciBusId(_bus_text(want_bus)))
            if parent is not None:
                return Match(parent, "MIG instance UUID (power, energy and clocks are the whole GPU's)",
                             slice_handle=instance, shared_gpu=True)
    if want_bus:
        handle = _guard(lambda: nvml.nvmlDeviceGetHandleByPciBusId(_bus_text(want_bus)))
        if handle is not None:
            return _by_bus(nvml, handle)
    # Last resort (bindings or drivers that refuse both look-ups): every index, each on its own.
    handles, refused = [], []
    for i in range(nvml.nvmlDeviceGetCount()):
        try:
            handles.append(nvml.nvmlDeviceGetHandleByIndex(i))
        except Exception as exc:  # noqa: BLE001 - NO_PERMISSION for a GPU this job does not own
            refused.append(f"{i} ({_why(exc)})")
    for handle in handles:
        if want_uuid and _guard(lambda: _uuid_hex(nvml.nvmlDeviceGetUUID(handle))) == want_uuid:
            return Match(handle, "uuid")
    for handle in handles:
        if want_bus and _guard(lambda: _parse_bus(nvml.nvmlDeviceGetPciInfo(handle).busId)) == want_bus:
            return _by_bus(nvml, handle)
    unopened = f"; indices not opened: {', '.join(refused)}" if refused else ""
    return Match(None, f"torch uuid {want_uuid or '?'}, bus {want_bus or '?'}{unopened}")


def _mig_enabled(nvml, handle) -> bool:
    """MIG mode is on for this GPU (then this process runs on one of its slices). GPUs without
    MIG raise NOT_SUPPORTED: not MIG."""
    mode = _guard(lambda: nvml.nvmlDeviceGetMigMode(handle))
    return bool(mode) and mode[0] == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)


def _dashed(hex32: str) -> str:
    """32 hex digits in NVML's 8-4-4-4-12 form."""
    return "-".join((hex32[:8], hex32[8:12], hex32[12:16], hex32[16:20], hex32[20:]))


def _bus_text(bus: tuple[int, int, int]) -> str:
    """(domain, bus, device) as NVML writes a PCI bus id: '00000000:3B:00.0'."""
    return f"{bus[0]:08X}:{bus[1]:02X}:{bus[2]:02X}.0"


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


def own_pids() -> set[int]:
    """This process's pid in every pid namespace (NVML reports host pids inside containers)."""
    return {os.getpid(), *(int(p) for p in own_status("NSpid") if p.isdigit())}


@dataclass
class NvmlDevice:
    """Readings of one NVML device. Each query is guarded on its own: one that raises
    (NotSupported on vGPU/MIG, ...) is dropped for the rest of the window and noted."""
    nvml: object
    handle: object
    slice_handle: object = None   # a MIG instance's own handle: its memory and processes
    shared_gpu: bool = False      # the GPU-wide readings include other MIG slices' work
    failed: dict = field(default_factory=dict)
    power_w: list = field(default_factory=list)       # (t, W)
    power_sources: set = field(default_factory=set)   # POWER_INSTANT | POWER_USAGE: what the samples are
    util_pct: list = field(default_factory=list)
    sm_mhz: list = field(default_factory=list)
    mem_used_max: int | None = None
    temp_max: int | None = None
    reasons: int = 0
    foreign_pids: set = field(default_factory=set)
    unresolved_self: bool = False
    foreign_unresolved: int = 0                       # others seen when our pid is not in NVML's list
    energy_mj: list = field(default_factory=list)     # (t, mJ) at the first and last read
    also_ours: Callable[[], set[int]] | None = None   # pids whose use of the device is the measured work
                                                      # (a serving engine this process started)

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
        own = h if self.slice_handle is None else self.slice_handle
        if edge:
            # Its own stamp, the middle of the call: the caller's `now` may be some ms older, and the
            # read itself takes time (longer if the process is preempted inside it).
            before = time.perf_counter()
            energy = self.query("energy", lambda: n.nvmlDeviceGetTotalEnergyConsumption(h))
            if energy is not None:
                self.energy_mj.append(((before + time.perf_counter()) / 2, energy))
        mw, source = self._instant_power_mw(), POWER_INSTANT
        if mw is None:
            mw, source = self.query("power", lambda: n.nvmlDeviceGetPowerUsage(h)), POWER_USAGE
        if mw is not None:
            self.power_w.append((now, mw / 1000.0))
            self.power_sources.add(source)
        util = self.query("utilization", lambda: n.nvmlDeviceGetUtilizationRates(h).gpu)
        if util is not None:
            self.util_pct.append(util)
        mhz = self.query("sm_clock", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
        if mhz is not None:
            self.sm_mhz.append(mhz)
        used = self.query("memory", lambda: n.nvmlDeviceGetMemoryInfo(own).used)
        if used is not None:
            self.mem_used_max = max(self.mem_used_max or 0, int(used))
        temp = self.query("temperature", lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))
        if temp is not None:
            self.temp_max = max(self.temp_max if self.temp_max is not None else temp, temp)
        bits = self._clock_reasons()
        if bits is not None:
            self.reasons |= int(bits)
        if check_processes:
            procs = self.query("processes", lambda: n.nvmlDeviceGetComputeRunningProcesses(own))
            if procs is not None:
                self._note_processes({int(p.pid) for p in procs})

    def _instant_power_mw(self):
        """Instantaneous power (NVML_FI_DEV_POWER_INSTANT, field values API), mW; None where the
        binding, driver or GPU does not have it (then it is not asked again)."""
        n, h = self.nvml, self.handle
        if "power_instant" in self.failed or not hasattr(n, "NVML_FI_DEV_POWER_INSTANT"):
            return None

        def read():
            value = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_POWER_INSTANT])[0]
            if value.nvmlReturn != n.NVML_SUCCESS:
                raise n.NVMLError(value.nvmlReturn)
            return field_value(value)
        return self.query("power_instant", read)

    def _clock_reasons(self):
        n, h = self.nvml, self.handle
        if "clock_events" not in self.failed and hasattr(n, "nvmlDeviceGetCurrentClocksEventReasons"):
            bits = self.query("clock_events", lambda: n.nvmlDeviceGetCurrentClocksEventReasons(h))
            if bits is not None:
                return bits
        # older bindings or drivers: the same bits under the old name
        return self.query("throttle_reasons", lambda: n.nvmlDeviceGetCurrentClocksThrottleReasons(h))

    def _note_processes(self, pids: set[int]) -> None:
        ours = own_pids() | (self.also_ours() if self.also_ours else set())
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
            "power_w_mean": mean_or_none(powers), "power_w_max": max(powers, default=None),
            "power_w_sampled": mean_or_none(powers),
            "power_method": _sampled_power_method(self.power_sources),
            "gpu_util_pct_mean": mean_or_none(self.util_pct),
            "sm_clock_mhz_mean": mean_or_none(self.sm_mhz), "sm_clock_mhz_min": min(self.sm_mhz, default=None),
            "gpu_mem_used_bytes": self.mem_used_max, "gpu_temp_c_max": self.temp_max,
            "throttle_reasons": ";".join(decode_clock_reasons(self.reasons)) or None,
            # the cap the power-capped flag measures against (measure/noise.py); read once, after the window
            "power_limit_w": _watts(self.query("power_limit", lambda: self.nvml.nvmlDeviceGetEnforcedPowerLimit(self.handle))),
        }
        if "clock_events" in self.failed and "throttle_reasons" not in self.failed:
            del self.failed["clock_events"]  # the fallback worked
        power_notes = []
        energy_failure = self.failed.pop("energy", None)
        advanced = self.energy_advance_mj()
        if advanced:
            cols.update(energy_j=advanced / 1000.0, energy_method="nvml-counter")
            (t0, _), (t1, _) = self.energy_mj
            if t1 > t0:  # the window's own mean: no lag, nothing from before the window
                cols.update(power_w_mean=advanced / 1000.0 / (t1 - t0), power_method="energy-counter")
        else:
            integrated = integrate_power(self.power_w)
            if integrated is not None:
                cols.update(energy_j=integrated, energy_method="power-integration")
            counter = energy_failure or self._stuck_counter()
            power_notes.append(f"energy {'from power samples' if integrated is not None else 'empty'}: "
                               f"NVML energy counter {counter}")
        instant_failure = self.failed.pop("power_instant", None)
        if POWER_USAGE in self.power_sources:
            why = f" (instantaneous power: {instant_failure})" if instant_failure else ""
            power_notes.append(f"power samples from nvmlDeviceGetPowerUsage{why}: a 1 s average on Ampere and "
                               f"newer (A100 excepted), so power_w_max is smoothed"
                               + ("" if cols["power_method"] == "energy-counter" else
                                  " and power_w_mean lags the window"))
        if self.shared_gpu:
            self._withhold_shared_power(cols, notes)
        else:
            notes += power_notes
        if self.foreign_pids:
            cols["noise_flags"] = "other-processes-on-device(pid " + ",".join(map(str, sorted(self.foreign_pids))) + ")"
        elif self.foreign_unresolved:
            cols["noise_flags"] = f"other-processes-on-device({self.foreign_unresolved} other, pids not resolvable)"
        if self.unresolved_self:
            notes.append("own pid not in NVML's process list (pid namespace): others counted, none named")
        notes += [f"nvml {name}: {why}" for name, why in self.failed.items()]
        return cols

    def _withhold_shared_power(self, cols: dict, notes: list[str]) -> None:
        """On a MIG slice, power and energy exist only for the whole GPU: every slice's work,
        other tenants' included. Not this workload's figures, so empty (and with them samples
        per joule and per watt); what the whole GPU drew stays in the note."""
        mean, energy = cols.pop("power_w_mean", None), cols.pop("energy_j", None)
        for name in ("power_w_max", "power_w_sampled", "energy_method", "power_method"):
            cols.pop(name, None)
        seen = ", ".join(f for f in (None if mean is None else f"mean {mean:.0f} W",
                                      None if energy is None else f"{energy:.1f} J") if f)
        notes.append("power and energy empty: this is a MIG slice and NVML measures only the whole GPU "
                     f"(every slice's work{': ' + seen if seen else ''}); samples_per_j and "
                     "samples_per_s_per_w left empty")

    def energy_advance_mj(self) -> int | None:
        """mJ the total-energy counter advanced between the window's edges; None when it was
        not read twice or did not move. NVML refreshes it every few tens of ms: over a short
        window it can stand still, and a difference of 0 would be '0 J', not a measurement."""
        if len(self.energy_mj) != 2:
            return None
        (_, first), (_, last) = self.energy_mj
        return last - first if last > first else None

    def _stuck_counter(self) -> str:
        if len(self.energy_mj) != 2:
            return "not read at both edges of the window"
        (t0, first), (t1, last) = self.energy_mj
        return (f"did not advance over the {t1 - t0:.3f} s window (NVML refreshes it every few tens of ms)"
                if last == first else f"went backwards ({first} -> {last} mJ)")

    def close(self) -> None:
        _shutdown(self.nvml)


# Where power samples come from. nvmlDeviceGetPowerUsage is a 1-second average on Ampere and
# newer (A100 excepted: instantaneous there); NVML_FI_DEV_POWER_INSTANT is instantaneous.
POWER_INSTANT, POWER_USAGE = "nvml-instant", "nvml-power-usage"
# nvmlValue_t member per nvmlValueType_t (NVML_VALUE_TYPE_DOUBLE = 0 ... UNSIGNED_SHORT = 6).
_FIELD_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def field_value(value):
    """The number in an nvmlFieldValue_t, read by its valueType."""
    return getattr(value.value, _FIELD_VALUE_MEMBERS[value.valueType])


def _sampled_power_method(sources: set) -> str | None:
    """The weakest source any sample came from (a 1 s average taints an instantaneous mean)."""
    return POWER_USAGE if POWER_USAGE in sources else (POWER_INSTANT if sources else None)


def decode_clock_reasons(bits: int) -> list[str]:
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if bits & bit]
    unknown = bits & ~sum(CLOCK_EVENT_REASONS)
    return names + ([f"0x{unknown:x}"] if unknown else [])


def integrate_power(samples: list[tuple[float, float]]) -> float | None:
    """Joules from (seconds, watts) samples, trapezoid rule; None with fewer than two."""
    if len(samples) < 2:
        return None
    return sum((t1 - t0) * (w0 + w1) / 2.0 for (t0, w0), (t1, w1) in zip(samples, samples[1:]))


def _watts(milliwatts) -> float | None:
    return None if milliwatts is None else milliwatts / 1000.0


def mean_or_none(values):
    return sum(values) / len(values) if values else None
