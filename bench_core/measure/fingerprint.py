"""The environment fingerprint read without torch: host, OS, Python, CPU, the libraries' versions from their package
metadata, the project's commit and the SLURM job. environment.py adds what only torch can say (its threads and
dispatch level, CUDA, the GPUs); `machine_columns` names those None.
"""
from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import json
import os
import platform
import socket
import subprocess
from pathlib import Path

from bench_core import __version__
from bench_core.host import cpu_columns, cpu_flags, cpu_model, dispatch_env, kind_facts


def package_version(dist: str) -> str | None:
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


def torch_version() -> str | None:
    """torch.__version__ without importing torch: the literal torch/version.py assigns it (torch's __init__ takes
    it from there). Not the package metadata's version, which drops the build's local label (2.14.1 for
    2.14.1+cu130). None where torch or that file is not found."""
    try:
        spec = importlib.util.find_spec("torch")  # (a top-level package: found, not imported)
        tree = ast.parse(Path(spec.origin).with_name("version.py").read_text())
    except (AttributeError, TypeError, ValueError, OSError, SyntaxError, ImportError):
        return None
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == "__version__" and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            return node.value.value
    return None


@functools.cache
def machine_columns() -> dict:
    """The environment columns of a row as far as they are known without importing torch, in the order the
    rows' environment gives them. None, as not known here (environment.collect reads them from torch): the
    threads torch would use, whether CUDA is there (and so CUDA's, cuDNN's, NCCL's and the driver's versions,
    the GPUs), and torch's CPU dispatch level (its own choice among what the CPU has and the variables allow)."""
    kind = kind_facts()  # (BENCH_CPU_AS: every CPU fact is the kind's, read without torch)
    return {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "python_version": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": None,
        "torch_version": torch_version(),
        "torchvision_version": package_version("torchvision"),
        "timm_version": package_version("timm"),
        "transformers_version": package_version("transformers"),
        "diffusers_version": package_version("diffusers"),
        "smp_version": package_version("segmentation-models-pytorch"),
        "cuda_version": None,
        "cudnn_version": None,
        "nccl_version": None,
        "driver_version": None,
        "gpu_count": None,
        "project_version": __version__,
        "git_commit": git_commit(),
        **(kind.describe() if kind else {"cpu_isa_dispatch": None, **cpu_columns(cpu_flags(), dispatch_env())}),
    }
