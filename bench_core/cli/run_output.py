"""What `bench run` leaves behind: its rows written to --out (or, when that fails after measuring, somewhere safe)
and shown in the terminal: a table, the details with -v, the last line. Without torch: the rows of a run said
before torch was imported (run/parameter_oom.py) are recorded and shown as every run's are.
"""
from __future__ import annotations

import argparse
import json
import sys

from bench_core import results
from bench_core.cli.common import format_details, format_rows, paint, run_summary
from bench_core.errors import EXIT_FAILED, EXIT_OK
from bench_core.files import save_fallback
from bench_core.results.disturbed import disturbed_note
from bench_core.results.fidelity import is_wrong


def record_rows(args: argparse.Namespace, rows: list[dict]) -> bool:
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


def show_rows(args: argparse.Namespace, rows: list[dict], saved: bool) -> None:
    ok = all(r["status"] == "ok" for r in rows)
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
        return
    print(format_rows(rows))
    if args.verbose:
        print(format_details(rows[0]))
    doubtful = disturbed_note(rows) or is_wrong(rows[0])
    print(paint(run_summary(rows), "red" if not (ok and saved) else ("yellow" if doubtful else "green")))


def exit_status(rows: list[dict], saved: bool) -> int:
    """0 when every row is ok, was saved and its outputs are right; else 1 (fast and wrong is not a success)."""
    ok = all(r["status"] == "ok" for r in rows) and saved
    return EXIT_OK if ok and not is_wrong(rows[0]) else EXIT_FAILED
