"""`bench memory`: the bytes one rank of a configuration needs, estimated before anything is built, and
whether that fits a device (this one's free memory, or a memory size given: a GPU you do not have here).
"""
from __future__ import annotations

import argparse
import json
import math

from bench_core.cli.common import add_config_arguments, config_from_args, refuse_flags
from bench_core.config.values import as_float
from bench_core.devices import Backend, resolve_device
from bench_core.errors import EXIT_FAILED, EXIT_OK, ConfigError
from bench_core.run.memory_estimate import GIB, estimate
from bench_core.workload.models import resolve_model
from bench_core.workload.precision import resolve_precision

# Settings of a timed run that the estimate does not read.
UNUSED = ("steps", "warmup_steps", "repeats", "min_seconds", "profile", "price_per_hour")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """Parameters are counted on torch's meta device (nothing is allocated); for training, gradients,
optimizer state (sgd 1, adam and adamw 2 per parameter), DDP's gradient buckets and the activations the
model's family states, each divided as --parallelism divides it over --nproc-per-node x --nnodes.
bench run makes the same estimate and records it (mem_estimate_bytes) beside the measured peak.
examples:
  bench memory --model llama-8b --precision amp-bf16 --optimizer adamw --seq-len 2048 --batch-size 1 --device-memory-gib 80
  bench memory --model llama-8b --precision amp-bf16 --optimizer adamw --seq-len 2048 --batch-size 1 --device-memory-gib 80 --parallelism fsdp --nproc-per-node 8
exit status: 0 it fits, 1 it does not, 2 bad input."""
    add_config_arguments(p, unused=UNUSED)
    p.add_argument("--device-memory-gib", type=float, metavar="GIB",
                   help="memory of one device to check against (default: what --device has free now)")
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")


def main(args: argparse.Namespace) -> int:
    refuse_flags(args, UNUSED, "does not apply to bench memory: nothing is run")
    cfg = config_from_args(args)
    spec = resolve_model(cfg.model)
    found = estimate(spec.task, spec, cfg, resolve_precision(cfg.precision))
    if args.device_memory_gib is not None:
        gib = as_float("device_memory_gib", args.device_memory_gib, minimum=-math.inf)  # 0.5 GiB is a size too
        if gib <= 0:
            raise ConfigError("device_memory_gib", f"must be a positive number of GiB, got {gib:g}")
        limit, where = gib * GIB, f"a {gib:g} GiB device"
    else:
        backend = Backend.for_device(resolve_device(cfg.device))
        limit, where = backend.free_memory_bytes(cfg.nproc_per_node), f"{backend.device}'s free memory"
    fits = found is None or limit is None or found.total <= limit
    if args.json:
        print(json.dumps({"estimate_bytes": found.total if found else None, "estimate": found.text() if found else None,
                          "limit_bytes": limit, "fits": fits}, indent=1))
    else:
        print(found.text() if found else f"{cfg.model}: no estimate (the model cannot be built on the meta device)")
        if found and limit:
            print(f"{'fits' if fits else 'does not fit'}: {found.total / GIB:.4g} of {limit / GIB:.4g} GiB "
                  f"({where}) per rank")
    return EXIT_OK if fits else EXIT_FAILED
