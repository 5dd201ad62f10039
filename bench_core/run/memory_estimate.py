"""The bytes one rank of a configuration needs, from the configuration alone, before anything is
allocated: one step run on fake tensors (memory_trace.py), its peak by what holds it (parameters,
gradients, optimizer state, activations, transients), each divided as the parallelism divides it; for
generation and serving, the KV cache the family states beside it. Where the step cannot be traced, the
parameters counted on torch's meta device and the activations the family states. A configuration
that cannot fit the device's free memory is an `oom` row said at once.
"""
from __future__ import annotations

import torch

from bench_core.devices import Backend
from bench_core.run.memory_floor import (  # noqa: F401 - re-exported (their home is memory_floor.py)
    GIB,
    OPTIMIZER_STATES,
    RESERVED_OVER_ALLOCATED,
    MemoryEstimate,
    beyond_free,
    parameter_floor,
)
from bench_core.run import ddp
from bench_core.run.memory_trace import Trace, trace_step
from bench_core.run.sharding import Layout
from bench_core.workload.precision import Precision

def estimate(task, spec, cfg, precision: Precision, device_type: str = "cuda") -> MemoryEstimate | None:
    """What one rank of `cfg` needs at its peak on a `device_type` device (its autocast decides what is
    kept in half precision). Traced where the step runs on fake tensors; else the task's own statement
    (sparse embedding tables), else parameters and the activations the family states. None where the
    model cannot be built on the meta device."""
    if cfg.mode != "serve":
        try:
            trace = trace_step(task, spec, cfg, precision, device_type)
        except Exception:  # noqa: BLE001 - a step fake tensors cannot begin: estimated from the shapes instead
            trace = None
        if trace is not None:
            return _traced(task, spec, cfg, precision, trace, device_type)
    stated = task.memory_needed(cfg)
    if stated is not None:
        return MemoryEstimate(parameters=stated[0], how=stated[1], stated=True)
    try:
        with torch.device("meta"), torch.random.fork_rng(devices=[]):
            model = spec.build(cfg)
    except Exception:  # noqa: BLE001 - a builder that cannot build on meta: no estimate, the run goes on
        return None
    return _from_shapes(task, spec, cfg, precision, model)


def floor(task, spec, cfg, precision: Precision) -> MemoryEstimate | None:
    """What one rank holds whatever its batch: the parameters and, in training, their gradients and optimizer
    state, from the parameter count alone (the task's, from a transformer's one and two layers; else counted
    on a meta build), each divided as the parallelism divides it (a tensor-parallel split counted as if it
    split everything: a floor). No trace: a configuration that cannot hold even this is an `oom` row in
    seconds, whatever its size. None where the model cannot be built on meta."""
    count = task.parameter_count(spec, cfg)
    trained_count = count
    if count is None:
        try:
            with torch.device("meta"), torch.random.fork_rng(devices=[]):
                model = spec.build(cfg)
        except Exception:  # noqa: BLE001 - a builder that cannot build on meta: the trace or the run decides
            return None
        count = sum(p.numel() for p in model.parameters())
        trained_count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    layout = Layout.of(cfg)
    return parameter_floor(count, trained_count, _parameter_bytes(precision), cfg, layout.shard * layout.tp,
                           task.memory_needed(cfg))


def _parameter_bytes(precision: Precision) -> int:
    """Bytes a parameter takes in the run: its cast dtype's, else float32's."""
    return torch.finfo(getattr(torch, precision.cast_dtype)).bits // 8 if precision.cast_dtype else 4


def _traced(task, spec, cfg, precision: Precision, trace: Trace, device_type: str) -> MemoryEstimate:
    """The trace's highest phase as one rank holds it. FSDP divides parameters, gradients and optimizer
    state over its shards (and the optimizer step's temporaries with them) and gathers two blocks at a
    time in the compute dtype (in place of autocast's copies of every weight); tensor parallel splits the
    blocks' parameters and, by the family's formula, their activations; DDP adds its buckets. Autocast's
    weight copies are shown with the activations."""
    layout = Layout.of(cfg)
    whole = max(next(iter(trace.phases.values()))["parameters"], 1)
    share = (whole - trace.blocks + trace.blocks / layout.tp) / whole / layout.shard
    split = _split_share(task, spec, cfg, precision, layout.tp) if layout.tp > 1 else 1.0
    # FSDP's all-gathers: the block computing and the next, prefetched, unsharded in the compute dtype
    gathered = 2 * trace.largest_block * _compute_bytes(precision) // (2 if precision.cast_dtype else 4) \
        if layout.shard > 1 else 0
    ranks = {}
    for phase, terms in trace.phases.items():
        per_parameter = phase == "step"  # the optimizer's temporaries span the parameters a rank holds
        casts = 0 if layout.shard > 1 else terms["weight_casts"] * share  # under FSDP: what `gathered` holds
        ranks[phase] = {"parameters": int(terms["parameters"] * share), "gradients": int(terms["gradients"] * share),
                        "optimizer": int(terms["optimizer"] * share),
                        "activations": int(terms["activations"] * split + casts),
                        "transient": int(terms["transient"] * (share if per_parameter else 1)) + gathered}
    phase = max(ranks, key=lambda name: sum(ranks[name].values()))
    stated = task.memory_needed(cfg)
    how = [f"{stated[1]} among the parameters"] if stated else []
    how.append(f"traced on fake tensors: one {f'training step ({cfg.optimizer})' if cfg.mode == 'train' else 'forward'}"
               + (f", autocast {precision.autocast_dtype} as {device_type} applies it" if precision.autocast_dtype
                  else "") + (f", peak in the {'optimizer step' if phase == 'step' else phase}" if cfg.mode == "train"
                              else ""))
    if precision.float8_recipe:  # (the kept H200 fp8 row: 0.94 of this)
        how.append("float8 linears counted as bf16 ones: torchao's keep float8 copies, less")
    if layout.shard * layout.tp > 1:
        how.append(f"{cfg.parallelism} over {layout.shard * layout.tp}")
    if cfg.mode == "train" and cfg.activation_checkpointing != "none":
        how.append(f"checkpointing {cfg.activation_checkpointing}")
    kv = _kv_cache(task, spec, cfg, precision, cfg.batch_size)
    how += [kv[1]] if kv else []
    how += [trace.note] if trace.note else []
    if trace.stopped_at:
        how.append(f"stopped at {trace.stopped_at}: counted up to it")
    buckets = trace.trained if cfg.parallelism == "ddp" and cfg.world_size > 1 and cfg.mode == "train" else 0
    extra = buckets + (kv[0] if kv else 0)
    return MemoryEstimate(**ranks[phase], buckets=buckets, kv_cache=kv[0] if kv else 0, how="; ".join(how),
                          partial=trace.stopped_at is not None,
                          phases={name: sum(terms.values()) + extra for name, terms in ranks.items()})


def _split_share(task, spec, cfg, precision: Precision, tp: int) -> float:
    """The share of the activations a tensor-parallel rank keeps, by the family's activation formula
    (1 where it states none)."""
    with torch.device("meta"), torch.random.fork_rng(devices=[]):
        model = spec.build(cfg)
    split, whole = (task.activation_bytes(model, cfg, _compute_bytes(precision), degree) for degree in (tp, 1))
    return split[0] / whole[0] if split and whole and whole[0] else 1.0


def _compute_bytes(precision: Precision) -> int:
    return torch.finfo(getattr(torch, precision.compute_dtype)).bits // 8


def _kv_cache(task, spec, cfg, precision: Precision, sequences: int) -> tuple[int, str] | None:
    if cfg.mode not in ("generate", "serve"):
        return None
    return task.kv_cache_bytes(spec, cfg, sequences, _compute_bytes(precision))


def _from_shapes(task, spec, cfg, precision: Precision, model) -> MemoryEstimate:
    """Parameters counted on the meta device, training state per parameter, the activations the family
    states; for generation and serving, the family's KV cache (a serving point: `concurrency` sequences)."""
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
        sequences = (cfg.concurrency or 1) if cfg.mode == "serve" else cfg.batch_size
        kv = _kv_cache(task, spec, cfg, precision, sequences)
        shown = [kv[1]] if kv else []
        if kv and cfg.mode == "serve":
            load = f"concurrency {cfg.concurrency}" if cfg.concurrency else "no concurrency cap: counted for 1"
            shown = [f"{kv[1]} ({load}: the requests in flight)", "the engine's own buffers not counted"]
        return MemoryEstimate(parameters=params, kv_cache=kv[0] if kv else 0,
                              how="; ".join(["parameters (no training state)", *shown] + sharded))
    states = OPTIMIZER_STATES[cfg.optimizer]
    acts = task.activation_bytes(model, cfg, _compute_bytes(precision), layout.tp)
    buckets = trained if cfg.parallelism == "ddp" and cfg.world_size > 1 else 0
    how = [f"{cfg.optimizer}: {states} state(s) per parameter", f"activations {acts[1]}" if acts else
           "activations not estimated", *sharded, f"checkpointing {cfg.activation_checkpointing}"]
    return MemoryEstimate(parameters=params, gradients=trained, optimizer=states * trained, buckets=buckets,
                          activations=acts[0] if acts else None, how="; ".join(how))


def largest_batch_that_fits(task, spec, cfg, precision: Precision, limit_bytes: int,
                            device_type: str = "cuda") -> tuple[int, MemoryEstimate] | None:
    """The largest per-rank batch whose estimate fits `limit_bytes`, with the estimate of
    the batch after it (the one that does not fit; batch 1's when even that does not) -> (0, ...) when none
    fits; None where there is no estimate, or it does not grow with the batch (nothing to bound). Each
    phase of a traced step grows about linearly with the batch (its activations per sample; the rest
    fixed), the peak the highest of them: the lines through batch 1 and 2 give a first answer, the lines
    through batch 1 and a guess that did not fit a closer one, and the answer is checked against the
    estimate itself."""
    def at(batch: int) -> MemoryEstimate | None:
        return estimate(task, spec, cfg.replace(batch_size=batch), precision, device_type)
    least = floor(task, spec, cfg.replace(batch_size=1), precision)
    if least is not None and least.total > limit_bytes:  # no batch fits: said without a trace
        return 0, least
    one, two = at(1), at(2)
    if one is None or two is None or one.stated:
        return None
    if one.total > limit_bytes:
        return 0, one
    first, low = (two, 2) if one.partial else (one, 1)  # batch 1 too small to train (BatchNorm): from 2
    second, high = (at(4), 4) if one.partial else (two, 2)
    batch = _on_the_lines(first, low, second, high, limit_bytes)
    if batch is None:
        return None
    for _ in range(3):
        guess = at(batch)
        if guess.total <= limit_bytes or batch <= high:
            break
        batch = min(batch - 1, _on_the_lines(first, low, guess, batch, limit_bytes) or 1)
    while batch > 1 and at(batch).total > limit_bytes:  # the lines are near, not exact: step to the edge
        batch -= 1
    for _ in range(8):
        if at(batch + 1).total > limit_bytes:
            break
        batch += 1
    return batch, at(batch + 1)


def _on_the_lines(one: MemoryEstimate, low: int, other: MemoryEstimate, high: int, limit_bytes: int) -> int | None:
    """The largest batch at which every phase's line through `one` (at batch `low`) and `other` (at `high`)
    stays within the limit; None where no phase grows."""
    phases = [p for p in one.phases if p in other.phases]
    lines = [(one.phases[p], (other.phases[p] - one.phases[p]) / (high - low)) for p in phases] or \
        [(one.total, (other.total - one.total) / (high - low))]
    growing = [low + int((limit_bytes - start) // slope) for start, slope in lines if slope > 0]
    return max(1, min(growing)) if growing else None


def check_fits(found: MemoryEstimate | None, backend: Backend, processes_on_node: int) -> None:
    """MemoryError (an `oom` row) when the estimate exceeds this rank's share of the device's free memory,
    before allocating any of it: on Linux a CPU allocation beyond what is free can succeed (overcommit),
    and the OOM killer then ends the process as its pages are touched, leaving no row at all. Every rank
    decides on the least free memory of any, so all fail or none does."""
    free = backend.free_memory_bytes(processes_on_node) if found else None
    if free is None:
        return
    beyond = beyond_free(found, ddp.least_over_ranks(free), str(backend.device),
                         processes_on_node if backend.device.type == "cpu" else 1)
    if beyond:
        raise MemoryError(beyond)
