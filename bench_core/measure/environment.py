"""The environment fingerprint that goes into every result row (`bench sysinfo`): what fingerprint.py reads without
torch, and what torch says (its version, threads and CPU dispatch, CUDA and the GPUs)."""
from __future__ import annotations

import functools

import torch

from bench_core.capability import cpu_facts
from bench_core.devices import Backend
from bench_core.measure.fingerprint import (  # noqa: F401 - re-exported (their home is fingerprint.py)
    BUILD_RECORD,
    SLURM_EXCLUSIVE_ENV,
    git_commit,
    machine_columns,
    package_version,
    slurm_job,
)


def _nvml_driver() -> str | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            return pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: the column stays empty
        return None


def nccl_version() -> str | None:
    """torch's NCCL as 'major.minor.patch'; a multi-node run needs the same on every node.
    (ncclGetVersion: no CUDA context.) None when torch is built without NCCL."""
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - no NCCL in this build (e.g. Windows, ROCm without RCCL)
        return None
    if isinstance(version, tuple):
        return ".".join(str(part) for part in version[:3])
    return str(version)


def device_columns(device: torch.device) -> dict:
    """A row's device columns: its type, its name (the GPU's, or the CPU model) and how many of its
    kind this host has."""
    backend = Backend.for_device(device)
    return {"device_type": device.type, "device_name": backend.device_name(), "device_count": backend.device_count()}


def collect(device: torch.device | None = None) -> dict:
    """Flat, JSON-ready description of host, software and (if given) the device. What cannot change
    while the process runs (versions, driver, CPU, the GPU's properties) is read once per process: a
    sweep's kernel runs many configurations, and each asked the package metadata again and opened NVML
    for the driver's version. The thread count and the SLURM job are read each time."""
    env = dict(_machine())
    env["torch_threads"] = torch.get_num_threads()  # (its place in the order is _machine's)
    env.update(slurm_job())
    if device is not None and device.type == "cuda":
        env.update(_gpu(device.index or 0))
    return env


def machine_facts_forget() -> None:
    """Read the machine again at the next row (a test that sets BENCH_CPU_AS in this process)."""
    _machine.cache_clear()
    machine_columns.cache_clear()


@functools.cache
def _machine() -> dict:
    cuda = torch.cuda.is_available()
    return {
        **machine_columns(),  # what is known without torch; torch says the rest
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda if cuda else None,
        "cudnn_version": str(torch.backends.cudnn.version()) if cuda and torch.backends.cudnn.is_available() else None,
        "nccl_version": nccl_version() if cuda else None,
        "driver_version": _nvml_driver() if cuda else None,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        **cpu_facts().describe(),
    }


@functools.cache
def _gpu(index: int) -> dict:
    props = torch.cuda.get_device_properties(index)
    return {
        "gpu_name": props.name,
        "gpu_uuid": str(getattr(props, "uuid", "")) or None,
        "gpu_memory_bytes": props.total_memory,
        "gpu_compute_capability": f"{props.major}.{props.minor}",
    }
