"""The bytes one rank of a configuration needs, from the configuration alone, before anything is
allocated: parameters counted on torch's meta device (which allocates nothing), gradients and optimizer
state for training, the activations where the task states them, each divided as the parallelism
divides it. A configuration that cannot fit the device's free memory is an `oom` row said at once.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from bench_core.devices import Backend
from bench_core.run import ddp
from bench_core.run.sharding import Layout
from bench_core.workload.precision import Precision

# Optimizer state per parameter, in the parameter's dtype (torch keeps it so): SGD's momentum buffer
# (the runner's SGD has momentum 0.9), Adam's and AdamW's two moments.
OPTIMIZER_STATES = {"sgd": 1, "adam": 2, "adamw": 2}
GIB = 2**30


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per rank, by what holds them; `activations` None where the task states no estimate."""
    parameters: int
    gradients: int = 0
    optimizer: int = 0
    buckets: int = 0                    # DDP's gradient buckets: a second copy of the gradients
    activations: int | None = None
    how: str = ""                       # the terms as a reader checks them
    stated: bool = False                # the task's own figure (how says what it is), not counted here

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.buckets + (self.activations or 0)

    def text(self) -> str:
        if self.stated:
            return f"{self.how} need {self.total / GIB:.4g} GiB"
        terms = [("parameters", self.parameters), ("gradients", self.gradients), ("optimizer state", self.optimizer),
                 ("DDP buckets", self.buckets), ("activations", self.activations)]
        shown = " + ".join(f"{name} {value / GIB:.4g}" for name, value in terms if value)
        return f"estimate: {shown} = {self.total / GIB:.4g} GiB per rank ({self.how})"

    def columns(self) -> dict:
        return {"mem_estimate_bytes": self.total, "mem_estimate": self.text()}


def estimate(task, spec, cfg, precision: Precision) -> MemoryEstimate | None:
    """What one rank of `cfg` needs at least; the task's own statement where it makes one (sparse
    embedding tables), else counted here. None where the model cannot be built on the meta device."""
    stated = task.memory_needed(cfg)
    if stated is not None:
        return MemoryEstimate(parameters=stated[0], how=stated[1], stated=True)
    try:
        with torch.device("meta"), torch.random.fork_rng(devices=[]):
            model = spec.build(cfg)
    except Exception:  # noqa: BLE001 - a builder that cannot build on meta: no estimate, the run goes on
        return None
    layout = Layout.of(cfg)
    in_blocks = {id(p) for blocks in task.transformer_blocks(model) for p in blocks.parameters()} \
        if layout.tp > 1 else set()
    param_dtype = getattr(torch, precision.cast_dtype) if precision.cast_dtype else None
    params = trained = 0
    for p in model.parameters():
        size = p.numel() * (param_dtype or p.dtype).itemsize
        size //= layout.tp if id(p) in in_blocks else 1
        params += size
        trained += size if p.requires_grad else 0
    params += sum(b.numel() * b.dtype.itemsize for b in model.buffers())
    sharded = [f"{cfg.parallelism} over {layout.shard * layout.tp}"] if layout.shard * layout.tp > 1 else []
    params //= layout.shard
    trained //= layout.shard
    if cfg.mode != "train":
        return MemoryEstimate(parameters=params, how=", ".join(["parameters only (no training state)"] + sharded))
    states = OPTIMIZER_STATES[cfg.optimizer]
    act_bytes = torch.finfo(getattr(torch, precision.compute_dtype)).bits // 8
    acts = task.activation_bytes(model, cfg, act_bytes, layout.tp)
    buckets = trained if cfg.parallelism == "ddp" and cfg.world_size > 1 else 0
    how = [f"{cfg.optimizer}: {states} state(s) per parameter", f"activations {acts[1]}" if acts else
           "activations not estimated", *sharded, f"checkpointing {cfg.activation_checkpointing}"]
    return MemoryEstimate(parameters=params, gradients=trained, optimizer=states * trained, buckets=buckets,
                          activations=acts[0] if acts else None, how="; ".join(how))


def largest_batch_that_fits(task, spec, cfg, precision: Precision,
                            limit_bytes: int) -> tuple[int, MemoryEstimate] | None:
    """The largest per-rank batch whose estimate fits `limit_bytes`, with the estimate of
    the batch after it (the one that does not fit; batch 1's when even that does not) -> (0, ...) when none
    fits; None where there is no estimate, or it does not grow with the batch (nothing to bound). The
    estimate is linear in the batch (activations per sequence; the rest fixed): two estimates give the
    line, and the answer is checked against the estimate itself."""
    def at(batch: int) -> MemoryEstimate | None:
        return estimate(task, spec, cfg.replace(batch_size=batch), precision)
    one, two = at(1), at(2)
    if one is None or two is None or one.stated or two.total <= one.total:
        return None
    if one.total > limit_bytes:
        return 0, one
    per_sample = two.total - one.total
    batch = 1 + (limit_bytes - one.total) // per_sample
    while batch > 1 and at(batch).total > limit_bytes:  # rounding of the split terms: step back to what fits
        batch -= 1
    return batch, at(batch + 1)


def check_fits(found: MemoryEstimate | None, backend: Backend, processes_on_node: int) -> None:
    """MemoryError (an `oom` row) when the estimate exceeds this rank's share of the device's free memory,
    before allocating any of it: on Linux a CPU allocation beyond what is free can succeed (overcommit),
    and the OOM killer then ends the process as its pages are touched, leaving no row at all. Every rank
    decides on the least free memory of any, so all fail or none does."""
    free = backend.free_memory_bytes(processes_on_node) if found else None
    if free is None:
        return
    free = ddp.least_over_ranks(free)
    if found.total > free:
        share = f" (its share for {processes_on_node} processes)" if processes_on_node > 1 and \
            backend.device.type == "cpu" else ""
        raise MemoryError(f"{found.text()}; {backend.device} has {free / GIB:.4g} GiB free{share}")
