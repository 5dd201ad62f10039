"""`bench run`: one configuration, its rows printed and (with --out) recorded. Its flags are
cli/flags.py's.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench_core.cli.common import config_from_args, progress_printer
from bench_core.cli.run_output import exit_status, record_rows, show_rows
from bench_core.devices import check_runnable
from bench_core.errors import (
    EXIT_OK,
    interrupted_by,
    interrupted_exit,
    interrupts_held,
    when_stuck,
)
from bench_core.files import check_results_folder
from bench_core.launch.dispatch import run_benchmark
from bench_core.measure import environment
from bench_core.results.rows import failure_row, run_fields


def main(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    check_runnable(cfg)  # absent devices, too many processes, impossible precision: bad input
    if args.out is not None:  # an empty --out is refused, not ignored
        check_results_folder(args.out)  # before measuring: a run that cannot be saved does not start
    if cfg.profile and args.out:  # profiles next to the rows
        os.environ.setdefault("BENCH_PROFILE_DIR", str(Path(args.out) / "profiles"))
    if args.out:  # mode serve: per-request records and server logs next to the rows
        os.environ.setdefault("BENCH_SERVING_DIR", str(Path(args.out) / "serving"))
    try:
        # Stuck in one long op, the main thread never reaches the except clause: the watchdog runs it.
        with when_stuck(lambda exc: _interrupted(args, cfg, exc)):
            rows = run_benchmark(cfg, progress=progress_printer(args))
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: keep the repeats that finished
        return _interrupted(args, cfg, exc)
    if not rows:  # a node other than node 0 of a multi-node run: node 0 returns and writes the rows
        print(f"node {cfg.node_rank}: done; node 0 reports the combined result", file=sys.stderr)
        return EXIT_OK
    with interrupts_held():  # measured: a stop now (scancel at a job's end) must not lose the rows
        saved = record_rows(args, rows)
    show_rows(args, rows, saved)
    return exit_status(rows, saved)


def _interrupted(args: argparse.Namespace, cfg, exc: KeyboardInterrupt) -> int:
    rows = getattr(exc, "rows", None) or [failure_row(
        {**run_fields(cfg), **environment.collect()}, "interrupted",
        f"stopped by {interrupted_by(exc)} before a repeat finished")]
    with interrupts_held():
        saved = record_rows(args, rows)
    show_rows(args, rows, saved)
    done = sum(r["status"] == "ok" for r in rows)
    print(f"bench run: interrupted ({interrupted_by(exc)}); {done} of {cfg.repeats} repeats finished"
          + (f"; rows in {Path(args.out) / 'results.csv'}" if args.out else ""), file=sys.stderr)
    return interrupted_exit(exc)
