"""`bench find-batch`: the largest per-device batch size that runs, found by an explicit search.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench_core.cli.common import (
    add_config_arguments,
    add_output_arguments,
    config_from_args,
    note_line,
    progress_printer,
    refuse_flags,
    write_json,
)
from bench_core.config.schema import DEFAULT_MAX_BATCH, MAX_BATCH
from bench_core.devices import check_runnable
from bench_core.errors import EXIT_FAILED, EXIT_OK
from bench_core.files import check_writable
from bench_core.launch.batch_search import find_max_batch

# Settings of a benchmark run that a probe does not use: each probe is a fixed short run.
UNUSED = ("steps", "warmup_steps", "repeats", "min_seconds", "profile")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = f"""Grows the batch (x2 from --batch-size; without it, from the largest batch whose memory estimate,
as bench memory makes it, fits the device's memory less the allocator's headroom, else 1) until out of memory or --max-batch-size
(default {DEFAULT_MAX_BATCH}), then bisects. When out of memory bounded it, the size to use is
--batch-margin (default 10%) below the largest that ran, and bisection stops at half that margin;
--batch-margin 0 gives the exact edge. Each probe is a real run of 3 steps (train: forward,
backward, optimizer step; with --compile, 3 warm-up steps before the timed one); --steps/--repeats/
--min-seconds do not apply.
Any failure other than out-of-memory stops the search, except a batch too small to train (BatchNorm
needs more than one value per channel): it is marked too-small and the search grows past it.
examples:
  bench find-batch --model resnet50 --mode train --precision amp-bf16 --device cuda
  bench find-batch --model resnet18 --width 64 --height 64 --device cpu --max-batch-size 512 --out outputs/capacity
In a sweep or `bench run`, batch_size max runs this search (each probe in a fresh process), then
the benchmark at the size found; its rows keep both sizes and the search (batch_search).
exit status: 0 found, 1 nothing fits or the search failed, 2 bad input."""
    add_config_arguments(p, unused=UNUSED)
    p.add_argument("--isolate", action="store_true",
                   help="run each probe in a fresh process (an import per probe; exact for runs in fresh "
                        "processes, e.g. sweeps; in-process CPU probes can come out low near the limit)")
    p.add_argument("--out", metavar="DIR", help="write the search as DIR/find-batch/<id>.json")
    add_output_arguments(p)


def main(args: argparse.Namespace) -> int:
    refuse_flags(args, UNUSED,
                  "does not apply to find-batch: each probe is a fixed 3-step run")
    cfg = config_from_args(args)
    check_runnable(cfg)
    if args.out:
        check_writable(args.out)
    # No --batch-size: the first probe is the largest batch the memory estimate fits (1 where it has none)
    start = None if getattr(args, "batch_size", None) is None or cfg.batch_size == MAX_BATCH else cfg.batch_size
    search = find_max_batch(cfg, start_batch_size=start, isolate=args.isolate, progress=progress_printer(args))
    if args.out:
        path = write_json(Path(args.out) / "find-batch", cfg, search.to_dict())
        note_line(args, f"search written to {path}")
    print(json.dumps(search.to_dict(), indent=1, default=str) if args.json else search.format())
    return EXIT_OK if search.ok else EXIT_FAILED
