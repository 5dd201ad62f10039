"""`bench history DIR...`: result folders of many dates as one trend per configuration and machine, the steps in
it with what changed there; with --new, the gate: a new run against the last stable stretch (exit 1 on a drop).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench_core.cli.diff import fraction
from bench_core.errors import EXIT_DISTURBED, EXIT_FAILED, EXIT_OK, ConfigError
from bench_core.history.gate import FAIL_ABOVE, judge
from bench_core.history.read import read_history
from bench_core.history.steps import MIN_RUNS, analyze
from bench_core.history.text import analysis_dict, gate_text, history_text
from bench_core.results.comparison import MIN_EFFECT


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = f"""Reads the folders as one history: every run (one process: a bench run, or one run of a sweep)
of each configuration on each machine, in time order; runs of two machines are never one line. A run's figure
is the geometric mean of its ok repeats.
A step is a shift of a configuration's level between stretches of at least {MIN_RUNS} undisturbed runs,
proposed by ruptures' binary segmentation and called only where the 95% t-interval of the shift, on the
history's own run-to-run noise, lies wholly on one side of 1 and the shift is at least --min-effect. A single
run is never a step; a run with a disturbed repeat (other processes, throttling, repeats that disagree) is
shown and never used. Each step says what differs between the runs either side (torch, CUDA, driver, the
project's commit, your model file's hash, host, threads ...); configurations stepping on one date with one
change are one finding.
The folders: one a run (outputs/nightly/2026-11-01, ...-02, ...), one that runs append to (bench run --out
DIR), or both; 50,000 rows are read in seconds (docs/history.md).
--new NEW: the gate. Each configuration of NEW against the history's last stable stretch (the runs since its
last step): NEW/stretch with its 95% interval on the history's run-to-run noise; a regression is slower by
more than --fail-above with the whole interval below 1, or failing where it ran ok. NEW's runs are left out
of the history when its folder is among the DIRs too.
examples:
  bench history outputs/nightly/*                                         # the steps, what changed there
  bench history outputs/nightly/* --new outputs/tonight --fail-above 5%   # a nightly CI gate
  bench history outputs/nightly/* --json > history.json
exit status: {EXIT_OK} no regression (without --new: always, after printing); {EXIT_FAILED} a regression; 2 bad
input, or with --new nothing could be judged (no configuration of NEW has 2 undisturbed runs since the
history's last step: a gate must not pass on nothing); {EXIT_DISTURBED} no regression, but NEW's runs of a
configuration were disturbed: re-measure on a quiet machine rather than pass or fail on them."""
    # (nargs "*": `--new A B` takes both, leaving no DIR; main says so, where argparse would say only "required")
    p.add_argument("result_dirs", metavar="DIR", nargs="*", help="result folders, from many dates, in any order "
                                                                  "(at least one; before --new, which takes every "
                                                                  "folder after it)")
    p.add_argument("--new", metavar="NEW", nargs="+", default=None,
                   help="result folder(s) of the run to judge against the history's last stable stretch")
    p.add_argument("--fail-above", type=fraction, default=FAIL_ABOVE, metavar="FRACTION",
                   help=f"with --new: exit 1 when a configuration is slower by more than this, with confidence; "
                        f"5% or 0.05 (default {FAIL_ABOVE:.0%})".replace("%", "%%"))
    p.add_argument("--min-effect", type=fraction, default=MIN_EFFECT, metavar="FRACTION",
                   help=f"smaller shifts are never a step (default {MIN_EFFECT:.0%})".replace("%", "%%"))
    p.add_argument("--json", action="store_true", help="print the findings (and the gate) as JSON, for scripts")


def main(args: argparse.Namespace) -> int:
    if not args.result_dirs:
        if args.new and len(args.new) > 1:
            raise ConfigError("result_dirs", f"no history folder given; --new took every folder after it "
                                             f"({' '.join(args.new)}): put the history's folders first, as in "
                                             "bench history outputs/nightly/* --new outputs/tonight")
        raise ConfigError("result_dirs", "no history folder given; allowed: result folders written by bench run "
                                         "--out / bench sweep, as in bench history outputs/nightly/*")
    for folder in args.new or []:  # (read_history would name its own field, result_dirs)
        if not Path(folder).is_dir():
            raise ConfigError("new", f"{folder!r} is not a directory; allowed: the result folder of the run to judge, "
                                     "written by bench run --out / bench sweep")
    new = read_history(args.new) if args.new else None
    excluded = set(new.runs["run_id"]) if new is not None else set()
    history = read_history(args.result_dirs, exclude_runs=excluded)
    # A refusal is its one line, with what the notes said of the folders in it; the notes are printed only on going on.
    if history.runs.empty:
        why = " (every run there is NEW's, left out of the history)" if history.rows and excluded else said(history)
        raise ConfigError("result_dirs", f"no result rows in {', '.join(args.result_dirs)}{why}; allowed: folders "
                                         "written by bench run --out / bench sweep")
    if new is not None and new.runs.empty:
        raise ConfigError("new", f"no result rows in {', '.join(args.new)}{said(new)}; allowed: the result folder of "
                                 "a finished run, written by bench run --out / bench sweep")
    for line in history.notes + (new.notes if new is not None else []):
        print(f"bench history: note: {line}", file=sys.stderr)
    analysis = analyze(history, min_effect=args.min_effect)
    if new is None:
        print(json.dumps(analysis_dict(analysis), indent=1, default=str) if args.json else history_text(analysis))
        return EXIT_OK
    gate = judge(analysis, new, fail_above=args.fail_above)
    if args.json:
        print(json.dumps({"history": analysis_dict(analysis), "gate": {
            "fail_above": gate.fail_above, "regressions": len(gate.regressions), "disturbed": len(gate.disturbed),
            "judged": gate.judged, "configurations": json.loads(gate.table.to_json(orient="records"))}},
            indent=1, default=str))
    else:
        print(history_text(analysis) + "\n\n" + gate_text(gate, analysis))
    if len(gate.regressions):
        return EXIT_FAILED
    if len(gate.disturbed):
        named = "; ".join(f"{r.configuration} on {r.machine}" for r in gate.disturbed.itertuples())
        print(f"bench history: disturbed: {len(gate.disturbed)} configuration(s) not judged, re-measure: {named}",
              file=sys.stderr)
        return EXIT_DISTURBED
    if not gate.judged:
        reasons = "; ".join(f"{r.configuration}: {r.verdict} ({r.reason})" for r in gate.table.itertuples())
        raise ConfigError("new", f"nothing in {', '.join(args.new)} could be judged against the history: {reasons}")
    return EXIT_OK


def said(history) -> str:
    """What read_history noted of folders with no rows, for the one line that refuses them."""
    return f" ({'; '.join(note.rstrip('.') for note in history.notes)})" if history.notes else ""
