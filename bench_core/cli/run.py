"""`bench run`: one configuration, its rows printed and (with --out) recorded. Its flags are
cli/flags.py's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from bench_core import results
from bench_core.cli.common import (
    config_from_args,
    format_details,
    format_rows,
    paint,
    progress_printer,
    run_summary,
)
from bench_core.devices import check_runnable
from bench_core.errors import (
    EXIT_FAILED,
    EXIT_OK,
    interrupted_by,
    interrupted_exit,
    interrupts_held,
    when_stuck,
)
from bench_core.files import check_writable, save_fallback
from bench_core.launch.dispatch import run_benchmark
from bench_core.measure import environment
from bench_core.results.disturbed import disturbed_note
from bench_core.results.fidelity import is_wrong
from bench_core.results.rows import failure_row, run_fields


def main(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    check_runnable(cfg)  # absent devices, too many processes, impossible precision: bad input
    if args.out:
        check_writable(args.out)  # before measuring: a run that cannot be saved does not start
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
        saved = _record(args, rows)
    _show(args, rows, saved)
    ok = all(r["status"] == "ok" for r in rows) and saved
    return EXIT_OK if ok and not is_wrong(rows[0]) else EXIT_FAILED  # fast and wrong is not a success


def _interrupted(args: argparse.Namespace, cfg, exc: KeyboardInterrupt) -> int:
    rows = getattr(exc, "rows", None) or [failure_row(
        {**run_fields(cfg), **environment.collect()}, "interrupted",
        f"stopped by {interrupted_by(exc)} before a repeat finished")]
    with interrupts_held():
        saved = _record(args, rows)
    _show(args, rows, saved)
    done = sum(r["status"] == "ok" for r in rows)
    print(f"bench run: interrupted ({interrupted_by(exc)}); {done} of {cfg.repeats} repeats finished"
          + (f"; rows in {Path(args.out) / 'results.csv'}" if args.out else ""), file=sys.stderr)
    return interrupted_exit(exc)


def _record(args: argparse.Namespace, rows: list[dict]) -> bool:
    """Write the rows to --out; if that fails after measuring (the disk filled meanwhile), they go
    to a new folder under the temporary directory instead, and one line says where."""
    if not args.out:
        return True
    try:
        path = results.write_run(args.out, rows[0]["run_id"], rows)
    except OSError as exc:
        fallback = save_fallback("rows.json", results.dumps_rows(rows))
        print(f"bench run: error: could not write the rows to {args.out}: {exc.strerror or exc}; "
              f"the {len(rows)} measured rows are safe in {fallback}", file=sys.stderr)
        return False
    if not args.json:
        print(f"rows written to {path} and {path.parents[2] / 'results.csv'}", file=sys.stderr)
    for damaged in results.damaged_runs(args.out):
        print(f"bench run: warning: {damaged} is damaged (not readable as rows): that earlier run is left out "
              "of results.csv", file=sys.stderr)
    return True


def _show(args: argparse.Namespace, rows: list[dict], saved: bool) -> None:
    ok = all(r["status"] == "ok" for r in rows)
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
        return
    print(format_rows(rows))
    if args.verbose:
        print(format_details(rows[0]))
    doubtful = disturbed_note(rows) or is_wrong(rows[0])
    print(paint(run_summary(rows), "red" if not (ok and saved) else ("yellow" if doubtful else "green")))
