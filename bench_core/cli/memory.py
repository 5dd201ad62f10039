"""`bench memory`: the bytes one rank of a configuration needs, estimated before anything is built, and
whether that fits a device (this one's free memory, a GPU by name from the spec sheets, or a memory size
given: a GPU you do not have here).
"""
from __future__ import annotations

import argparse
import json
import math

import torch

from bench_core.cli.common import add_config_arguments, config_from_args, refuse_flags
from bench_core.config.values import as_float
from bench_core.devices import Backend, resolve_device
from bench_core.errors import EXIT_FAILED, EXIT_OK, ConfigError
from bench_core.predict.specs import names_with, spec
from bench_core.run.memory_estimate import GIB, RESERVED_OVER_ALLOCATED, estimate
from bench_core.workload.models import resolve_model
from bench_core.workload.precision import resolve_precision

# Settings of a timed run that the estimate does not read.
UNUSED = ("steps", "warmup_steps", "repeats", "min_seconds", "profile", "price_per_hour")
NOT_COUNTED = ("not counted: cuDNN/cuBLAS workspaces, the CUDA context, a compiled model's fusions; the caching "
               f"allocator holds more than the tensors (reserved: up to {RESERVED_OVER_ALLOCATED:.2f}x the allocated "
               "peak on the kept H200 training rows)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = f"""One step of the configuration runs on fake tensors (torch's FakeTensorMode: shapes, no memory):
its peak is counted op by op, by what holds it: parameters at the precision that runs, gradients,
optimizer state (sgd 1, adam and adamw 2 per parameter), the activations autograd keeps (in half
precision where autocast makes them so, by CUDA's lists for a GPU), the transients around the peak;
each divided as --parallelism divides it over --nproc-per-node x --nnodes. Inference: the parameters
and the largest live activations. generate and serve add the KV cache: --batch-size (generate) or
--concurrency (serve) sequences of --prompt-len + --new-tokens tokens. {NOT_COUNTED}.
bench run makes the same estimate and records it (mem_estimate_bytes) beside the measured peak.
examples:
  bench memory --model llama-8b --precision amp-bf16 --optimizer adamw --seq-len 2048 --batch-size 1 --gpu H100-SXM5-80GB
  bench memory --model llama-8b --precision amp-bf16 --optimizer adamw --seq-len 2048 --batch-size 1 --gpu H100-SXM5-80GB --parallelism fsdp --nproc-per-node 8
  bench memory --model llama-1b --mode serve --precision bf16 --concurrency 50 --prompt-len 1024 --new-tokens 256 --gpu H200-SXM-141GB
exit status: 0 it fits, 1 it does not, 2 bad input."""
    add_config_arguments(p, unused=UNUSED)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--gpu", metavar="NAME",
                       help=f"a GPU by name, its memory from its datasheet (bench_core/data/gpu_peaks.csv): "
                            f"{', '.join(names_with(('memory_gb',)))}")
    where.add_argument("--device-memory-gib", type=float, metavar="GIB",
                       help="memory of one device to check against, traced as a CUDA GPU unless --device names "
                            "another (default: what --device has free now)")
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")


def main(args: argparse.Namespace) -> int:
    refuse_flags(args, UNUSED, "does not apply to bench memory: nothing is run")
    gpu = spec(args.gpu, "gpu", required=("memory_gb",)) if args.gpu else None
    if args.device_memory_gib is not None:  # refused before anything is traced (and a trace kept)
        gib = as_float("device_memory_gib", args.device_memory_gib, minimum=-math.inf)  # 0.5 GiB is a size too
        if gib <= 0:
            raise ConfigError("device_memory_gib", f"must be a positive number of GiB, got {gib:g}")
    cfg = config_from_args(args)
    model = resolve_model(cfg.model)
    named = resolve_device("auto") if cfg.device == "auto" else torch.device(cfg.device)  # (not opened here)
    # A memory size without --device is a GPU's (a CPU's memory is what it has free): traced by CUDA's rules.
    device_type = "cuda" if gpu or (args.device_memory_gib is not None and cfg.device == "auto") else named.type
    found = estimate(model.task, model, cfg, resolve_precision(cfg.precision), device_type)
    if gpu:
        # A datasheet's "80 GB" of HBM is 80 GiB; CUDA shows about 1 % less (the kept H200: 139.8 of 141).
        gib = gpu.number("memory_gb")
        limit, where = gib * GIB, f"{gpu.gpu}: {gib:g} GiB, its datasheet's {gib:g} GB"
    elif args.device_memory_gib is not None:
        limit, where = gib * GIB, f"a {gib:g} GiB {'GPU' if device_type == 'cuda' else device_type + ' device'}"
    else:
        backend = Backend.for_device(resolve_device(cfg.device))
        limit, where = backend.free_memory_bytes(cfg.nproc_per_node), f"{backend.device}'s free memory"
    fits = found is None or limit is None or found.total <= limit
    if args.json:
        print(json.dumps({"estimate_bytes": found.total if found else None, "estimate": found.text() if found else None,
                          "limit_bytes": limit, "limit": where, "fits": fits, "device_type": device_type,
                          "not_counted": NOT_COUNTED}, indent=1))
        return EXIT_OK if fits else EXIT_FAILED
    print(found.text() if found else f"{cfg.model}: no estimate (the model cannot be built on the meta device)")
    if found and limit:
        verdict = "fits" if fits else "does not fit"
        tight = fits and found.total * RESERVED_OVER_ALLOCATED > limit
        print(f"{verdict}: {found.total / GIB:.4g} of {limit / GIB:.4g} GiB ({where}) per rank"
              + (f"; tight: with the allocator's cache ({RESERVED_OVER_ALLOCATED:.2f}x) it may not" if tight else ""))
    print(NOT_COUNTED)
    return EXIT_OK if fits else EXIT_FAILED
