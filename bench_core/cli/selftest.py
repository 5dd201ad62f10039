"""`bench selftest`: a pass / fail checklist of this machine's GPU (or CPU) paths.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from bench_core.cli.common import paint, wrap_line
from bench_core.errors import EXIT_FAILED, EXIT_OK
from bench_core.files import atomic_write_text, check_writable
from bench_core.scenarios.selftest import (
    DEFAULT_OUT,
    FAIL,
    PASS,
    SKIPPED,
    Checklist,
    cpu_checks,
    environment_summary,
    gpu_checks,
    print_capability_table,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """Run it first on a new GPU machine; attach the JSON to a bug report.
CPU-only machines run the CPU checks and list the GPU ones as skipped.
exit status: 0 no check failed, 1 a check failed.
examples:
  bench selftest
  bench selftest --out outputs/selftest/$(hostname).json
  bench selftest --quick        # compile one precision, not six (minutes less on a GPU)"""
    p.add_argument("--out", metavar="FILE", default=DEFAULT_OUT,
                   help=f"where the checklist goes as JSON (default: {DEFAULT_OUT}); nothing else is written "
                        "(the check that a row is written and reads back uses a temporary folder, removed after)")
    p.add_argument("--quick", action="store_true",
                   help="on a GPU, compile one precision (the mixed one the GPU runs) instead of every precision: "
                        "each compilation takes tens of seconds")


def main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    check_writable(out.parent)  # before the checks run: a checklist that cannot be saved does not start
    started = dt.datetime.now(dt.timezone.utc)
    # "  [PASS   ] name: reason": a long reason folds under the name, not under the status
    checklist = Checklist(say=lambda line: print(wrap_line(line, indent=12), flush=True))
    print(paint("bench selftest", "bold"), flush=True)
    print_capability_table()
    # --out FILE writes FILE only: the row written and read back goes to a folder removed after.
    with tempfile.TemporaryDirectory(prefix="bench-selftest-") as scratch:
        cpu_checks(checklist, Path(scratch))
    gpu_checks(checklist, quick=args.quick)
    counts = checklist.counts()
    report = {"started": started.isoformat(timespec="seconds"),
              "seconds": round((dt.datetime.now(dt.timezone.utc) - started).total_seconds(), 1),
              **environment_summary(), **counts, "checks": [asdict(c) for c in checklist.checks]}
    atomic_write_text(out, json.dumps(report, indent=1, default=str))
    line = f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIPPED]} skipped; checklist written to {out}"
    print(paint(line, "red" if counts[FAIL] else "green"), flush=True)
    return EXIT_FAILED if counts[FAIL] else EXIT_OK
