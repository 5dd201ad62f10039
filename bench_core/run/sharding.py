"""How a training configuration spreads over its processes: the device mesh of its parallelism, and the
model wrapped on it. DDP (run/ddp.py) keeps a whole replica per process; FSDP2 shards parameters,
gradients and optimizer state; tensor parallel splits each block's matmuls. The order is torchtitan's:
tensor parallel, activation checkpointing, then fully_shard per transformer block and the root. The
task says which modules are its transformer blocks and how tensor parallel splits them
(Task.transformer_blocks, Task.tensor_parallel_plan): nothing here knows a model family.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from bench_core.run import ddp
from bench_core.workload.precision import Precision


@dataclass(frozen=True)
class Layout:
    """The mesh of one configuration: data-parallel replicas x FSDP shards x tensor-parallel ranks."""
    parallelism: str = "ddp"
    replicate: int = 1   # replicas whose gradients are all-reduced (DDP; HSDP across nodes)
    shard: int = 1       # FSDP shards of parameters, gradients and optimizer state
    tp: int = 1          # tensor-parallel ranks splitting each block

    @classmethod
    def of(cls, cfg) -> "Layout":
        world, kind = cfg.world_size, cfg.parallelism
        if cfg.mode != "train" or world == 1:
            return cls(kind)
        if kind == "fsdp":
            return cls(kind, shard=world)
        if kind == "hsdp":
            return cls(kind, replicate=cfg.nnodes, shard=cfg.nproc_per_node)
        if kind == "fsdp-tp":
            return cls(kind, shard=world // cfg.tp_degree, tp=cfg.tp_degree)
        return cls(kind, replicate=world)

    @property
    def dims(self) -> dict[str, int]:
        """The mesh's named dimensions, outermost first (a rank's tensor-parallel peers are adjacent)."""
        if self.parallelism == "ddp":
            return {"dp_replicate": self.replicate}
        if self.parallelism == "hsdp":
            return {"dp_replicate": self.replicate, "dp_shard": self.shard}
        if self.parallelism == "fsdp-tp":
            return {"dp_shard": self.shard, "tp": self.tp}
        return {"dp_shard": self.shard}

    def mesh_text(self) -> str | None:
        """'dp_shard=4 x tp=2', as rows record it; None for one process."""
        if self.replicate * self.shard * self.tp == 1:
            return None
        return " x ".join(f"{name}={size}" for name, size in self.dims.items())


def wrap(model: torch.nn.Module, task, cfg, precision: Precision, device: torch.device):
    """The model as this configuration trains it -> (model, row facts, the precision the step applies).

    DDP without checkpointing is run/ddp.py's wrap as before. Otherwise the task's blocks are found,
    split (tensor parallel), wrapped for recomputation (activation checkpointing) and sharded (FSDP2).
    Under FSDP, amp-bf16 is FSDP's MixedPrecisionPolicy (bf16 parameters for compute, fp32 master
    shards and fp32 gradient reductions), as torchtitan trains, so the step does not autocast as well."""
    layout = Layout.of(cfg)
    facts = {"mesh_shape": layout.mesh_text(),
             "mixed_precision": _plain_text(precision) if cfg.mode == "train" and cfg.world_size > 1 else None}
    if cfg.mode != "train" or (cfg.parallelism == "ddp" and cfg.activation_checkpointing == "none"):
        return ddp.wrap(model, device, cfg.mode), facts, precision
    lists = task.transformer_blocks(model)
    if not lists:
        raise ValueError(f"{cfg.model} has no transformer blocks to shard or checkpoint")
    mesh = _mesh(layout, device)
    if layout.tp > 1:
        _tensor_parallel(lists, task.tensor_parallel_plan(model), mesh["tp"])
    if cfg.activation_checkpointing != "none":
        checkpoint_blocks(lists, cfg.activation_checkpointing)
    sharded = layout.parallelism in ("fsdp", "hsdp", "fsdp-tp") and layout.replicate * layout.shard > 1
    if sharded:  # (HSDP on one process per node still shards: its mesh's replicate dimension all-reduces)
        policy, facts["mixed_precision"], precision = _policy(precision)
        _fully_shard(model, lists, mesh, layout, policy)
    if sharded or layout.tp > 1:  # no DDP on top: FSDP reduces the gradients, TP ranks share a batch
        ddp.install_fault(model)
        return model, facts, precision
    return ddp.wrap(model, device, cfg.mode), facts, precision


def _mesh(layout: Layout, device: torch.device):
    if layout.replicate * layout.shard * layout.tp == 1:
        return None
    from torch.distributed.device_mesh import init_device_mesh
    dims = layout.dims
    return init_device_mesh(device.type, tuple(dims.values()), mesh_dim_names=tuple(dims))


def _tensor_parallel(lists, plan: dict[str, str] | None, mesh) -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    if not plan:
        raise ValueError("the model states no tensor-parallel plan")
    unknown = sorted({style for style in plan.values() if style not in styles})
    if unknown:
        raise ValueError(f"tensor-parallel styles {unknown} are not supported here; allowed: colwise, rowwise")
    for blocks in lists:
        for block in blocks:
            parallelize_module(block, mesh, {name: styles[style]() for name, style in plan.items()})


def checkpoint_blocks(lists, kind: str) -> None:
    """Each block (full) or every second block (selective) recomputed in the backward, non-reentrant."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    for blocks in lists:
        for index in range(len(blocks)):
            if kind == "full" or index % 2 == 0:
                blocks[index] = checkpoint_wrapper(blocks[index])


def _policy(precision: Precision):
    """(MixedPrecisionPolicy or None, how the row states it, the precision the step applies)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy
    if precision.autocast_dtype:
        dtype = getattr(torch, precision.autocast_dtype)
        text = f"FSDP MixedPrecisionPolicy: parameters {_short(dtype)}, reductions fp32, fp32 master shards"
        return (MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32), text,
                dataclasses.replace(precision, autocast_dtype=None, grad_scaler=False))
    return None, _plain_text(precision), precision


def _plain_text(precision: Precision) -> str:
    if precision.cast_dtype:
        return f"pure cast: parameters, gradients and reductions {precision.cast_dtype}"
    if precision.autocast_dtype:
        return f"autocast {precision.autocast_dtype}, fp32 parameters and reductions"
    return "none: fp32 parameters, compute and reductions"


def _short(dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))


def _fully_shard(model, lists, mesh, layout: Layout, policy) -> None:
    from torch.distributed.fsdp import fully_shard
    dp_mesh = mesh[("dp_replicate", "dp_shard")] if layout.parallelism == "hsdp" else mesh["dp_shard"]
    extra = {"mp_policy": policy} if policy is not None else {}
    for blocks in lists:
        for block in blocks:
            fully_shard(block, mesh=dp_mesh, **extra)
    fully_shard(model, mesh=dp_mesh, **extra)
