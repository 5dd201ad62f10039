"""`bench run`: one configuration, its rows printed and (with --out) recorded.
"""
from __future__ import annotations

import argparse
import json
import sys

from bench_core import results
from bench_core.cli.common import (
    add_config_arguments,
    add_output_arguments,
    config_from_args,
    format_details,
    format_rows,
    paint,
)
from bench_core.devices import check_runnable
from bench_core.errors import EXIT_FAILED, EXIT_OK
from bench_core.launch.dispatch import run_benchmark


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """examples:
  bench run --model resnet50 --mode train --precision amp-bf16 --batch-size 32 \\
            --width 224 --height 224 --steps 50 --warmup-steps 10 --repeats 3 --device cuda --out outputs/quick
  bench run --model unet3d --depth 32 --width 64 --height 64 --mode infer --device cpu
  bench run --model resnet50 --precision amp-bf16 --batch-size 256 --nproc-per-node 8
exit status: 0 all rows ok, 1 a row failed (oom, nan, error, unsupported), 2 bad input."""
    add_config_arguments(p)
    p.add_argument("--out", metavar="DIR", help="append rows to DIR/results.csv and DIR/runs/<run_id>/rows.json")
    add_output_arguments(p)


def main_run(args: argparse.Namespace) -> int:

    cfg = config_from_args(args)
    check_runnable(cfg)  # absent devices, too many processes, impossible precision: bad input
    if cfg.profile and args.out:  # profiles next to the rows
        import os
        from pathlib import Path
        os.environ.setdefault("BENCH_PROFILE_DIR", str(Path(args.out) / "profiles"))
    progress = None if args.quiet or args.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    rows = run_benchmark(cfg, progress=progress)
    if not rows:  # a node other than node 0 of a multi-node run: node 0 returns and writes the rows
        print(f"node {cfg.node_rank}: done; node 0 reports the combined result", file=sys.stderr)
        return EXIT_OK
    if args.out and rows:
        path = results.write_run(args.out, rows[0]["run_id"], rows)
        if not args.json:
            print(f"rows written to {path} and {path.parents[2] / 'results.csv'}", file=sys.stderr)
    ok = bool(rows) and all(r["status"] == "ok" for r in rows)
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
    else:
        print(format_rows(rows))
        if args.verbose:
            print(format_details(rows[0]))
        print(paint(f"{sum(r['status'] == 'ok' for r in rows)}/{len(rows)} rows ok", "green" if ok else "red"))
    return EXIT_OK if ok else EXIT_FAILED
