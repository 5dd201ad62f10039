"""The environment fingerprint that goes into every result row (`bench sysinfo`)."""
from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
from pathlib import Path

import torch

from bench_core import __version__
from bench_core.capability import cpu_facts, cpu_model
from bench_core.devices import Backend


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# Written by the build (setup.py) into an installed package: the commit it was built from.
BUILD_RECORD = Path(__file__).resolve().parents[1] / "data" / "build.json"


@functools.cache
def git_commit() -> str:
    """The project's commit: BENCH_GIT_COMMIT (set in the Docker image), else the one a built package
    recorded, else git (a checkout, an editable install), else unknown."""
    if os.environ.get("BENCH_GIT_COMMIT"):
        return os.environ["BENCH_GIT_COMMIT"]
    try:
        return json.loads(BUILD_RECORD.read_text())["git_commit"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not a built package (or an unreadable record): ask git
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if out.returncode != 0:
        return "unknown"
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


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


# Set by bench slurm's batch script: 1 when the job has its nodes alone (--exclusive), 0 when
# it shares them (--share). Unset: not a bench slurm job, so not known.
SLURM_EXCLUSIVE_ENV = "BENCH_SLURM_EXCLUSIVE"


def slurm_job(environ=os.environ) -> dict:
    """The SLURM job this process runs in (nothing outside SLURM): job id, array task, node,
    how often SLURM requeued it, and whether it had its node alone."""
    job = environ.get("SLURM_ARRAY_JOB_ID") or environ.get("SLURM_JOB_ID")
    if not job:
        return {}
    task, restarts = environ.get("SLURM_ARRAY_TASK_ID"), environ.get("SLURM_RESTART_COUNT")
    return {"slurm_job_id": job,
            "slurm_array_task_id": int(task) if task and task.isdigit() else None,
            "slurm_node": environ.get("SLURMD_NODENAME") or socket.gethostname(),
            "slurm_restart_count": int(restarts) if restarts and restarts.isdigit() else 0,
            "slurm_exclusive": {"1": True, "0": False}.get(environ.get(SLURM_EXCLUSIVE_ENV, ""))}


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


@functools.cache
def _machine() -> dict:
    cuda = torch.cuda.is_available()
    return {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "python_version": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": None,
        "torch_version": torch.__version__,
        "torchvision_version": _version("torchvision"),
        "timm_version": _version("timm"),
        "transformers_version": _version("transformers"),
        "diffusers_version": _version("diffusers"),
        "smp_version": _version("segmentation-models-pytorch"),
        "cuda_version": torch.version.cuda if cuda else None,
        "cudnn_version": str(torch.backends.cudnn.version()) if cuda and torch.backends.cudnn.is_available() else None,
        "nccl_version": nccl_version() if cuda else None,
        "driver_version": _nvml_driver() if cuda else None,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "project_version": __version__,
        "git_commit": git_commit(),
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
