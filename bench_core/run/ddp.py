"""DDP inside one worker process: its rank, the wrapped model, the barriers and agreements every rank takes part in.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import time
import weakref
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from bench_core.measure import telemetry
from bench_core.run.timing import Window

FAULT_ENV = "BENCH_FAULT_INJECT"
SEED_PER_RANK_ENV = "BENCH_TEST_SEED_PER_RANK"
_FAULT_RE = re.compile(r"^(crash|exit|hang|oom)-rank-(\d+)$")


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    backend: str = ""


def in_worker() -> bool:
    """True inside a torchrun worker (the launcher sets these variables)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "BENCH_WORKER" in os.environ


def context() -> DistContext:
    if not (dist.is_available() and dist.is_initialized()):
        return DistContext()
    return DistContext(rank=dist.get_rank(), local_rank=int(os.environ.get("LOCAL_RANK", 0)),
                       world_size=dist.get_world_size(), backend=dist.get_backend())


@dataclass
class _Replicas:
    """The model this worker trains under DDP and its parameter digests: before DDP's initial
    broadcast, and every rank's after each repeat (one benchmark run per worker process)."""
    model: object = None            # weakref to the unwrapped module
    before: str | None = None
    after: list[list[str]] = field(default_factory=list)

    def digest(self) -> str | None:
        module = self.model() if self.model else None
        return params_digest(module) if module is not None else None


replicas = _Replicas()


def params_digest(model: torch.nn.Module) -> str:
    """sha256 of every parameter's bytes: equal digests mean bitwise-equal replicas."""
    digest = hashlib.sha256()
    for param in model.parameters():
        digest.update(param.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def wrap(model: torch.nn.Module, device: torch.device, mode: str) -> torch.nn.Module:
    """DDP for training with more than one process; inference needs no gradient sync."""
    global replicas
    install_fault(model)
    if context().world_size == 1 or mode != "train":
        return model
    from torch.nn.parallel import DistributedDataParallel
    replicas = _Replicas(model=weakref.ref(model), before=params_digest(model))
    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def barrier() -> None:
    if context().world_size > 1:
        dist.barrier()


def agree_steps(cfg, per_step_s: float) -> int | None:
    """Every rank must run the same number of steps: take the largest estimate of the
    steps that meet both minimums. None (clock-driven window) for one process."""
    if context().world_size == 1:
        return None
    wanted = max(cfg.steps, math.ceil(cfg.min_seconds / max(per_step_s, 1e-6)))
    tensor = torch.tensor([wanted], dtype=torch.int64, device=_collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def slowest(window: Window) -> Window:
    """Gather every rank's window; the run's window is the slowest rank's. Each rank's
    parameter digest travels along, to show that DDP kept the replicas equal."""
    if context().world_size == 1:
        return window
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (window.seconds, window.step_s, window.inner_s, replicas.digest(),
                                      window.host_seconds))
    if replicas.model is not None:
        replicas.after.append([item[3] for item in gathered])
    seconds, step_s, inner_s, _, host_seconds = max(gathered, key=lambda item: item[0])
    return Window(seconds=seconds, step_s=step_s, inner_s=inner_s, host_seconds=host_seconds)


def memory_over_ranks(stats: dict) -> dict:
    """Peak memory of the row: the largest over ranks (the device that runs out first), not the writer's."""
    if context().world_size == 1:
        return stats
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, stats)
    return {key: max((g[key] for g in gathered if g.get(key) is not None), default=None) for key in stats}


def telemetry_over_ranks(columns: dict) -> dict:
    """Telemetry of every rank's device combined (sums of energy, worst flags), not only rank 0's."""
    if context().world_size == 1:
        return columns
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, columns)
    return telemetry.combine_ranks(gathered)


def least_over_ranks(value: int) -> int:
    """The smallest of every rank's value (each rank's free memory: all ranks decide alike)."""
    if context().world_size == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.int64, device=_collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return int(tensor.item())


def mean_over_ranks(values: list[float]) -> list[float]:
    """Each value averaged over the ranks (every rank's loss of its own part of the global batch)."""
    if context().world_size == 1 or not values:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=_collective_device())
    dist.all_reduce(tensor)
    return (tensor / dist.get_world_size()).tolist()


def _collective_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def install_fault(model: torch.nn.Module) -> None:
    """Test hook BENCH_FAULT_INJECT: fail on purpose at this rank's first forward pass (crash: an error;
    oom: torch's out-of-memory error, on this rank only; exit: a hard death; hang: no progress)."""
    match = _FAULT_RE.match(os.environ.get(FAULT_ENV, "").strip()) if in_worker() else None
    if not match or int(match.group(2)) != int(os.environ["RANK"]):
        return
    kind = match.group(1)

    def fault(module, args):
        said = f"injected fault on rank {os.environ['RANK']} ({FAULT_ENV}={kind}-rank-{match.group(2)})"
        if kind == "oom":  # as the CUDA caching allocator raises it on the one device that ran out
            raise torch.OutOfMemoryError(f"out of memory: {said}")
        if kind == "exit":
            os._exit(17)  # a hard death: no Python error, no error file
        if kind == "hang":
            time.sleep(10**6)
        raise RuntimeError(said)
    model.register_forward_pre_hook(fault)
