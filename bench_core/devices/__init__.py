"""Everything that differs between cpu, cuda and mps lives here and nowhere else: the backends (this module)
and the clocks that mark a window's steps on each device (clocks.py).

A `Backend` resolves the device, sets the precision knobs, times steps (CUDA events with one
sync at the end of the window; perf_counter on CPU), reads peak memory and recognises OOM.
Building a backend creates no CUDA context: only `bind()`, in the process that benchmarks, does.
"""
from __future__ import annotations

import re
import sys

import psutil
import torch

try:  # POSIX only: the process's peak RSS (Windows has no resource module)
    import resource
except ImportError:  # pragma: no cover - not on the machines the tests run on
    resource = None

from bench_core import capability
from bench_core.capability import Support, cpu_model
from bench_core.devices.clocks import CudaStepClock, StepClock, SyncedClock
from bench_core.errors import ConfigError
from bench_core.host import available_memory_bytes, cgroup_free_bytes  # noqa: F401 - re-exported (its home is host.py)
from bench_core.host import reset_rss_peak, rss_peak_bytes
from bench_core.workload.models import resolve_model
from bench_core.workload.precision import Precision, resolve_precision


def available_devices() -> str:
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _mps_available():
        found.append("mps")
    return ", ".join(found)


def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """auto -> cuda (one device per local rank), else mps, else cpu. Refuses absent devices."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank % torch.cuda.device_count())
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = device.index if device.index is not None else local_rank
        if index >= count:
            raise ConfigError("device", f"{name} requested but this machine has {count} CUDA device(s); "
                                        f"available: {available_devices()}")
        return torch.device("cuda", index)
    if device.type == "mps" and not _mps_available():
        raise ConfigError("device", f"mps requested but not available; available: {available_devices()}")
    return device


def check_device_count(cfg) -> None:
    """More worker processes than devices is refused before anything launches."""
    if cfg.nproc_per_node <= 1:
        return
    device = resolve_device(cfg.device)
    if device.type == "cuda":
        have = torch.cuda.device_count()
        if cfg.nproc_per_node > have:
            raise ConfigError("nproc_per_node", f"{cfg.nproc_per_node} processes requested but this machine "
                                                f"has {have} CUDA device(s)")
    elif device.type == "cpu":
        import os
        have = os.cpu_count() or 1
        if cfg.nproc_per_node > have:
            raise ConfigError("nproc_per_node", f"{cfg.nproc_per_node} CPU processes requested but this "
                                                f"machine has {have} cores")
    else:
        raise ConfigError("nproc_per_node", f"multi-process runs need cuda or cpu, not {device.type}")


# On CPU, running out of memory also shows up outside torch's allocator: oneDNN failing to
# allocate while creating a kernel ("could not create a primitive"), other libraries'
# "Cannot allocate memory", a thread stack that cannot be mapped. After these, oneDNN can keep
# failing in the same process, which find-batch needs to know.
FOREIGN_CPU_OOM_ENDINGS = ("could not create a primitive", "can't start new thread")


def is_foreign_cpu_oom(message: str | None) -> bool:
    """Out of memory on CPU, reported by something other than torch's own allocator."""
    text = (message or "").strip()
    if "DefaultCPUAllocator" in text:
        return False
    return text.endswith(FOREIGN_CPU_OOM_ENDINGS) or "cannot allocate memory" in text.lower()


# Near the memory limit, cuBLAS / cuDNN (and friends) fail to allocate their workspace or handle
# with their own status, not torch's OutOfMemoryError: "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when
# calling `cublasCreate(handle)`", "cuDNN error: CUDNN_STATUS_ALLOC_FAILED" (cuDNN 9 also names
# CUDNN_STATUS_INTERNAL_ERROR_{HOST,DEVICE}_ALLOCATION_FAILED). They are out of memory: the batch
# search must bisect on them, not stop.
_LIBRARY_ALLOC_FAILED = re.compile(
    r"\b(CUBLAS|CUBLASLT|CUDNN|CUSOLVER|CUSPARSE|CURAND)_STATUS_(INTERNAL_ERROR_(HOST|DEVICE)_)?ALLOC(ATION)?_FAILED\b"
    r"|\bCUFFT_ALLOC_FAILED\b")


def is_library_alloc_failure(message: str | None) -> bool:
    """A CUDA library's allocation-failure status in an error message."""
    return bool(_LIBRARY_ALLOC_FAILED.search(message or ""))


def check_runnable(cfg) -> None:
    """Before anything runs: the device exists, there are enough of them, and it can run the
    precision. Each failure is a one-line ConfigError (bad input, exit 2)."""
    device = resolve_device(cfg.device)
    check_device_count(cfg)
    precision = resolve_precision(cfg.precision)
    reason = Backend.for_device(device).unsupported_reason(precision) or \
        resolve_model(cfg.model).task.unsupported_precision(precision, device.type)
    if reason:
        raise ConfigError("precision", reason)


# -- numerics knobs (TF32) ----------------------------------------------------------------
# torch 2.14 keeps two views of TF32: the legacy flags (set_float32_matmul_precision,
# cuda.matmul.allow_tf32, cudnn.allow_tf32) and the per-(backend, op) `fp32_precision` strings.
# Setting only the new strings leaves the legacy readers raising "mix of the legacy and new
# APIs", and inductor reads them (max-autotune, the FX graph cache key). The legacy setters
# write both views, so they are used; `cudnn.fp32_precision` (cuda, all) is then set too, the
# value compiled convolutions read, which the legacy setters leave at "none".
FP32_PRECISION_KNOBS = {  # name in tf32_flags -> the torch.backends object holding fp32_precision
    "generic": ("",), "cuda.matmul": ("cuda", "matmul"), "cudnn": ("cudnn",), "cudnn.conv": ("cudnn", "conv"),
    "cudnn.rnn": ("cudnn", "rnn"), "mkldnn": ("mkldnn",), "mkldnn.matmul": ("mkldnn", "matmul"),
    "mkldnn.conv": ("mkldnn", "conv"), "mkldnn.rnn": ("mkldnn", "rnn"),
}


def _knob_holder(path: tuple[str, ...]):
    holder = torch.backends
    for part in path:
        holder = getattr(holder, part) if part else holder
    return holder


def set_tf32(enabled: bool) -> None:
    """TF32 on or off for CUDA fp32 matmul and cuDNN conv/RNN, every accessor left consistent
    (strict IEEE fp32 when off; on CPU this also keeps oneDNN fp32 matmul in fp32)."""
    torch.set_float32_matmul_precision("high" if enabled else "highest")
    torch.backends.cudnn.allow_tf32 = enabled
    torch.backends.cudnn.fp32_precision = "tf32" if enabled else "ieee"


def tf32_flags() -> dict:
    """Every TF32 accessor read back, legacy and new. Each legacy reader raises when the two
    views disagree: reading them all is the check that nothing left torch in a mixed state."""
    flags = {"float32_matmul_precision": torch.get_float32_matmul_precision(),
             "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
             "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32}
    for name, path in FP32_PRECISION_KNOBS.items():
        flags[f"{name}.fp32_precision"] = _knob_holder(path).fp32_precision
    return flags


def format_tf32_flags(flags: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in flags.items())


def numerics_state() -> dict:
    """The process-wide numerics knobs as they are now, for `restore_numerics` after a run."""
    state: dict = {"cudnn.benchmark": torch.backends.cudnn.benchmark}
    for name, read in (("float32_matmul_precision", torch.get_float32_matmul_precision),
                       ("cudnn.allow_tf32", lambda: torch.backends.cudnn.allow_tf32)):
        try:
            state[name] = read()
        except RuntimeError:  # the caller left a mixed state: the fp32_precision strings restore it
            pass
    state["fp32_precision"] = {name: _knob_holder(path).fp32_precision for name, path in FP32_PRECISION_KNOBS.items()}
    return state


def restore_numerics(state: dict) -> None:
    """Put back what `numerics_state` saw: legacy flags first (they write both views), then
    every fp32_precision string as it read (resolved values: the same effective precision)."""
    torch.backends.cudnn.benchmark = state["cudnn.benchmark"]
    if "float32_matmul_precision" in state:
        torch.set_float32_matmul_precision(state["float32_matmul_precision"])
    if "cudnn.allow_tf32" in state:
        torch.backends.cudnn.allow_tf32 = state["cudnn.allow_tf32"]
    for name, value in state["fp32_precision"].items():
        holder = _knob_holder(FP32_PRECISION_KNOBS[name])
        if holder.fp32_precision != value:
            holder.fp32_precision = value


class Backend:
    """CPU behaviour; subclasses override what differs."""

    def __init__(self, device: torch.device):
        self.device = device
        self.type = device.type
        self._rss_peak_reset = False  # whether reset_peak_memory could reset the host's RSS peak

    @staticmethod
    def for_device(device: torch.device) -> "Backend":
        return {"cuda": CudaBackend, "mps": MpsBackend}.get(device.type, Backend)(device)

    # -- identity ------------------------------------------------------------
    def device_name(self) -> str:
        return cpu_model()

    def device_count(self) -> int:
        return 1

    # -- precision -------------------------------------------------------------
    def support(self, precision: Precision, mode: str = "train") -> Support:
        """native, emulated or unsupported in `mode`, with the reason (bench_core.capability)."""
        return capability.support(self.device, precision, mode)

    def unsupported_reason(self, precision: Precision) -> str | None:
        found = self.support(precision)
        return None if found.runs else found.reason

    def bind(self) -> None:
        """Make this process the one that runs on the device (see CudaBackend)."""

    def apply_knobs(self, precision: Precision, cudnn_benchmark: bool) -> dict:
        """Set every numerics knob explicitly and return what torch reads back, for the row.
        On CPU: strict fp32 (tf32 is refused here), cudnn.benchmark has no effect."""
        return self._set_and_read(False, False)

    @staticmethod
    def _set_and_read(tf32: bool, cudnn_benchmark: bool) -> dict:
        set_tf32(tf32)
        torch.backends.cudnn.benchmark = cudnn_benchmark
        flags = tf32_flags()  # raises if any accessor is left unreadable
        enabled = flags["cuda.matmul.allow_tf32"] and flags["cudnn.allow_tf32"]
        if enabled != tf32 or flags["cuda.matmul.allow_tf32"] != flags["cudnn.allow_tf32"]:
            raise RuntimeError(f"TF32 asked {'on' if tf32 else 'off'}, torch reads back {format_tf32_flags(flags)}")
        return {"tf32_enabled": enabled, "tf32_flags": format_tf32_flags(flags),
                "cudnn_benchmark_enabled": torch.backends.cudnn.benchmark if cudnn_benchmark else False}

    # -- timing -----------------------------------------------------------------
    def synchronize(self) -> None:
        pass

    def new_clock(self, expected_marks: int = 0) -> StepClock:
        """A clock for one window; `expected_marks`: how many marks it will likely take (a device
        clock prepares them before the window)."""
        return StepClock()

    # -- memory -----------------------------------------------------------------
    def reset_peak_memory(self) -> None:
        """From here on the peak columns count what runs next, not what ran before (on CPU: the host's RSS
        high-water mark, where the OS lets it be reset; see host.reset_rss_peak)."""
        self._rss_peak_reset = reset_rss_peak()

    def memory_stats(self) -> dict:
        if self._rss_peak_reset and (since := rss_peak_bytes()) is not None:
            peak = since  # since the last reset_peak_memory
        elif resource is None:  # Windows: the current RSS is the closest figure there is
            peak = psutil.Process().memory_info().rss
        else:
            scale = 1 if sys.platform == "darwin" else 1024  # Linux reports KiB
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
        return {"peak_mem_allocated_bytes": None, "peak_mem_reserved_bytes": None, "peak_rss_bytes": peak}

    def allocated_bytes(self) -> int | None:
        """Bytes of live tensors torch's allocator holds on the device now; None where torch
        keeps no per-device count (on CPU the process's RSS is all there is)."""
        return None

    def free_memory_bytes(self, processes_on_node: int = 1) -> int | None:
        """Bytes this process can take now: its share of MemAvailable (or of a cgroup's limit) among the node's."""
        return available_memory_bytes() // max(processes_on_node, 1)

    def in_use_bytes(self) -> int:
        """What the peak columns count from, now: torch's allocated bytes, else (CPU) the process's RSS."""
        return psutil.Process().memory_info().rss if self.allocated_bytes() is None else self.allocated_bytes()

    def is_oom(self, exc: BaseException) -> bool:
        if isinstance(exc, MemoryError):
            return True
        text = str(exc)
        return "can't allocate memory" in text or "DefaultCPUAllocator" in text or \
            "out of memory" in text.lower() or is_foreign_cpu_oom(text) or is_library_alloc_failure(text)

    def release_memory(self) -> None:
        import gc
        gc.collect()


class CudaBackend(Backend):
    """Everything but `bind()` reads device properties only (cudaGetDeviceProperties, no
    context): launchers, pre-run checks and find-batch's parent build backends too, and a
    context there would hold a few hundred MB of the benchmarked GPU and show up in NVML's
    process list as a foreign process."""

    def bind(self) -> None:
        # Events record on the current device's stream, and the first CUDA call creates the
        # context on the current device: make both this device (only in the benchmarking process).
        torch.cuda.set_device(self.device)

    def device_name(self) -> str:
        return torch.cuda.get_device_name(self.device)

    def device_count(self) -> int:
        return torch.cuda.device_count()

    def apply_knobs(self, precision: Precision, cudnn_benchmark: bool) -> dict:
        # The current device is process-wide too: another open session (bench compare on a
        # second GPU) may have made its own GPU current since this one's last window.
        torch.cuda.set_device(self.device)
        return self._set_and_read(precision.tf32, cudnn_benchmark)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def new_clock(self, expected_marks: int = 0) -> StepClock:
        return CudaStepClock(self.device, expected_marks)

    def reset_peak_memory(self) -> None:
        super().reset_peak_memory()  # the host's RSS too
        torch.cuda.reset_peak_memory_stats(self.device)

    def memory_stats(self) -> dict:
        stats = super().memory_stats()
        stats["peak_mem_allocated_bytes"] = torch.cuda.max_memory_allocated(self.device)
        stats["peak_mem_reserved_bytes"] = torch.cuda.max_memory_reserved(self.device)
        return stats

    def allocated_bytes(self) -> int | None:
        return torch.cuda.memory_allocated(self.device)  # 0 before CUDA is initialised (no context made)

    def free_memory_bytes(self, processes_on_node: int = 1) -> int | None:
        return torch.cuda.mem_get_info(self.device)[0]  # cudaMemGetInfo: what this process can still allocate

    def is_oom(self, exc: BaseException) -> bool:
        # super() also takes the cuBLAS / cuDNN ALLOC_FAILED statuses (is_library_alloc_failure)
        return isinstance(exc, torch.cuda.OutOfMemoryError) or super().is_oom(exc)

    def release_memory(self) -> None:
        super().release_memory()
        torch.cuda.empty_cache()


class MpsBackend(Backend):
    def device_name(self) -> str:
        return "Apple MPS"

    def synchronize(self) -> None:
        torch.mps.synchronize()

    def new_clock(self, expected_marks: int = 0) -> StepClock:
        return SyncedClock(self.synchronize)

    def memory_stats(self) -> dict:
        stats = super().memory_stats()
        stats["peak_mem_allocated_bytes"] = torch.mps.driver_allocated_memory()
        return stats
