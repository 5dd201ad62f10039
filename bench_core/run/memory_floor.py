"""The bytes of a memory estimate by what holds them (MemoryEstimate), and what one rank holds whatever its batch
(the floor: parameters and, in training, their gradients and optimizer state, from the parameter count), with the
line said when that is more than the device has free. Plain arithmetic, no torch: memory_estimate.py counts and
traces, and a configuration is said too large for the CPU before torch is imported (run/parameter_oom.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Optimizer state per parameter, in the parameter's dtype (torch keeps it so): SGD's momentum buffer
# (the runner's SGD has momentum 0.9), Adam's and AdamW's two moments.
OPTIMIZER_STATES = {"sgd": 1, "adam": 2, "adamw": 2}
GIB = 2**30
# The estimate counts what tensors hold: the allocated peak. The caching allocator keeps freed blocks for
# reuse, so a device holds more (the reserved peak): on the kept H200 training rows (gpu/runs/h200-2026-11-27
# and -b) 1.02x (DLRM) to 1.30x (ResNet-50 fp32 at batch 640) the allocated peak. tests/test_memory.py reads it.
RESERVED_OVER_ALLOCATED = 1.30


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per rank, by what holds them; `activations` None where nothing states them."""
    parameters: int
    gradients: int = 0
    optimizer: int = 0
    buckets: int = 0                    # DDP's gradient buckets: a second copy of the gradients
    activations: int | None = None
    transient: int = 0                  # what the step makes and frees around its peak (gradients of activations, ...)
    kv_cache: int = 0                   # generation and serving: the keys and values the sequences cache
    how: str = ""                       # the terms as a reader checks them
    stated: bool = False                # the task's own figure (how says what it is), not counted here
    partial: bool = False               # the traced step stopped before its end (how says where)
    phases: dict = field(default_factory=dict, compare=False)  # a traced step's total per phase (the peak: the
    #                                                            highest); what the batch search reads line by line

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.buckets + (self.activations or 0) + \
            self.transient + self.kv_cache

    def text(self) -> str:
        if self.stated:
            return f"{self.how} need {self.total / GIB:.4g} GiB"
        terms = [("parameters", self.parameters), ("gradients", self.gradients), ("optimizer state", self.optimizer),
                 ("DDP buckets", self.buckets), ("activations", self.activations), ("transient", self.transient),
                 ("KV cache", self.kv_cache)]
        shown = " + ".join(f"{name} {value / GIB:.4g}" for name, value in terms if value)
        return f"estimate: {shown} = {self.total / GIB:.4g} GiB per rank ({self.how})"

    def columns(self) -> dict:
        return {"mem_estimate_bytes": self.total, "mem_estimate": self.text()}


def parameter_floor(count: int, trained_count: int, parameter_bytes: int, cfg, parts: int,
                    stated: tuple[int, str] | None) -> MemoryEstimate:
    """The floor of `count` parameters (`trained_count` of them trained), each `parameter_bytes` in the run,
    divided over `parts` ranks as the parallelism divides them (a tensor-parallel split counted as if it split
    everything); `stated`: the task's own figure (memory_needed), held among the parameters."""
    weights, trained = (n * parameter_bytes // parts for n in (count, trained_count))
    if stated is not None or cfg.mode != "train":
        # (sparse embedding tables, the task's own figure: their gradients and state are as sparse as a batch)
        weights = max(weights, stated[0]) if stated else weights
        trained = 0
    how = ([f"{stated[1]} among the parameters"] if stated else []) + \
        ["parameters" + (", gradients and optimizer state" if trained else "") +
         " alone, from the parameter count (not traced: a floor)"] + \
        ([f"{cfg.parallelism} over {parts}"] if parts > 1 else [])
    return MemoryEstimate(parameters=weights, gradients=trained, optimizer=OPTIMIZER_STATES[cfg.optimizer] * trained,
                          how="; ".join(how))


def beyond_free(found: MemoryEstimate, free: int, device: str, shared_by: int = 1) -> str | None:
    """The line of an `oom` row when `found` exceeds `free` bytes of `device` (a CPU's: its share for the
    `shared_by` processes on its node); None when it fits."""
    if found.total <= free:
        return None
    share = f" (its share for {shared_by} processes)" if shared_by > 1 else ""
    return f"{found.text()}; {device} has {free / GIB:.4g} GiB free{share}"
