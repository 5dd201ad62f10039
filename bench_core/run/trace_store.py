"""Traces kept between processes: a step traced once is read back by the next process that asks for the same
step (a sweep run again, a report that estimates the kept GPU runs again, a suite's many runs of one tiny
configuration) instead of tracing it again (a second to half a minute of CPU each).

A file per step in the user's cache folder (beside bench peak's), named by a hash of all a trace depends on:
the configuration's fields (all of them but those that change no shape: the run's length, its seed, where its
rows go), the device type it is traced for, the model's definition (its name, or its config file's content), the
versions of torch and the model libraries, and the source of bench_core itself (any edit of the tracing code or
a model's declaration makes every key new). A model of your own code (code:...) is never kept: what its function
builds can change with any file it imports. A file that cannot be read or written is a miss, never an error.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
from pathlib import Path

from bench_core.files import atomic_write_text, cache_folder

LIBRARIES = ("torch", "torchvision", "timm", "transformers", "diffusers", "segmentation-models-pytorch", "torchao")
# Fields that change how long a run takes or where its rows go, never the shapes a step makes.
UNTRACED = frozenset({"steps", "warmup_steps", "repeats", "min_seconds", "seed", "device", "num_threads", "profile",
                      "dist_timeout_s", "price_per_hour", "currency", "max_batch_size", "batch_margin", "node_rank",
                      "rdzv_endpoint", "compile"})
VERSION = 1  # of this file's format


def folder() -> Path:
    return cache_folder("traces")


@functools.cache
def _code_stamp() -> str:
    """The libraries' versions and a hash of bench_core's source, once per process."""
    digest = hashlib.sha256(f"v{VERSION}".encode())
    for name in LIBRARIES:
        try:
            digest.update(f"{name}={importlib.metadata.version(name)};".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{name}=none;".encode())
    import torch  # (the CPU's dispatch level: fake CPU tensors take its kernel choices)
    digest.update(str(torch.backends.cpu.get_cpu_capability()).encode())
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def key(spec, cfg, precision_name: str, device_type: str) -> str | None:
    """The file name of a step's trace; None where it is never kept (a model of your own code)."""
    if spec.name.startswith("code:"):
        return None
    fields = {k: v for k, v in cfg.to_dict().items() if k not in UNTRACED}
    definition = getattr(spec.builder, "config", None)  # a transformers model's config: a file's content may change
    text = json.dumps([_code_stamp(), spec.name, definition, fields, precision_name, device_type], sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32] + ".json"


def read(name: str | None, kind):
    """The kept trace (a `kind` dataclass), or None."""
    if name is None:
        return None
    try:
        return kind(**json.loads((folder() / name).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def write(name: str | None, trace) -> None:
    if name is None:
        return
    try:
        atomic_write_text(folder() / name, json.dumps(dataclasses.asdict(trace)))
    except OSError:  # a read-only or full cache folder: traced again next time
        pass
