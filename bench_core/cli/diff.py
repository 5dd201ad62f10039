"""`bench diff OLD NEW`: two result directories compared configuration by configuration; exit 1 on a
regression, 3 when a configuration's measurements were too disturbed to judge.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from bench_core import results
from bench_core.cli.inputs import percentage, refuse_same_folder
from bench_core.errors import EXIT_DISTURBED, EXIT_FAILED, EXIT_OK, ConfigError
from bench_core.files import atomic_write_text, check_writable_file
from bench_core.results.comparison import MIN_EFFECT, POWER, RUN_SHIFT
from bench_core.summary.diff import FAIL_ABOVE, diff_results
from bench_core.summary.diff_rows import KEPT_APART


def fraction(text: str) -> float:
    """'5%' or '0.05' -> 0.05; a fraction in [0, 1) (an argparse type: a bad value is one line, exit 2)."""
    try:
        number = percentage(text)
    except argparse.ArgumentTypeError:
        number = float("nan")
    if not 0.0 <= number < 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.05 or a percentage such as 5%, "
                                         f"at least 0 and below 1 (100%), got {text!r}")
    return number


def add_arguments(p: argparse.ArgumentParser) -> None:
    shifts = ", ".join(f"{share:.0%} on {kind}" for kind, share in RUN_SHIFT.items())
    p.epilog = f"""Compares OLD and NEW configuration by configuration (same model, mode, precision, batch size,
input, processes, compile, channels_last, parallelism, optimizer, cudnn.benchmark, nodes, a serving
point's requests and load, on the same kind of device, a CPU used alike: the same threads and
dispatch level; runs that differ in one of these are listed apart, never compared): samples/s of each (the
geometric mean over runs of each run's undisturbed repeats), new/old as a ratio of geometric means
with a 95% t-interval (Welch, on log throughput), and a verdict: faster / slower (the interval
excludes 1 and the change is at least --min-effect) or no clear difference; too few repeats (under
2) gives no interval.
Runs: with 2 or more runs a side (bench sweep params/ci-gate.yaml, or --runs N) the runs are the
samples. One run cannot measure how far a whole run shifts from the next, so with one run a side
the interval adds a stated shift ({shifts})
and only large changes are called. The 'detectable slowdown' column is the smallest slowdown each
comparison would call {POWER:.0%} of the time at its noise: 'no regression' means none above it.
The last line answers "how many runs do I need to see a 3 % drop?": the runs a side that catch a 3,
5 or 10 % slowdown at the run-to-run spread measured here (with 2+ runs a side; else the stated one)
and the --fail-above they need (a threshold at or above a slowdown never calls it).
Disturbed: repeats flagged other-processes-on-cpu, cpu-steal (the hypervisor took this VM's cores),
other-processes-on-device, throttle, clock-drop or unstable-repeats are left out, and the 'samples' column says what was used and what set aside
('repeats, 1 run (of 3 a side: 2 set aside as disturbed)'); with too few left the verdict is
'disturbed: re-measure'. Runs are separate processes that share no disturbance, so nothing
measured under load is judged here (bench compare can: its A and B alternate).
Configurations in only one directory are listed as added / removed, failed ones with their status.
Above the table: the environment fields that differ (torch, CUDA, driver, git commit, host,
CPU/GPU, threads ...). Reads each DIR's run files (runs/*/rows.json, the record), else its results.csv, and
writes nothing unless asked (--html). OLD and NEW must differ: the same folder twice, or a copy of it (the same
runs, by run id, repeat and start time, with the same figures), is bad input, as nothing could move.
examples:
  bench sweep params/ci-gate.yaml --out outputs/new --no-report     # each configuration in 5 runs
  bench diff outputs/main outputs/new
  bench diff outputs/before outputs/after --fail-above 10% --html diff.html
exit status: {EXIT_OK} no regression; {EXIT_FAILED} a regression: slower by more than --fail-above with the
whole interval below 1, or ran in OLD and fails in NEW; 2 bad input, or no configuration in both
(a CI gate must not pass on nothing compared); {EXIT_DISTURBED} no regression, but a configuration's
measurements were too disturbed to judge (named in the table, its note and on stderr): re-measure
on a quiet machine rather than pass or fail on them."""
    p.add_argument("old_dir", metavar="OLD", help="the baseline result directory (holds results.csv)")
    p.add_argument("new_dir", metavar="NEW", help="the result directory to check against it")
    p.add_argument("--fail-above", type=fraction, default=FAIL_ABOVE, metavar="FRACTION",
                   help=f"exit 1 when a configuration is slower by more than this, with confidence; "
                        f"5% or 0.05 (default {FAIL_ABOVE:.0%})".replace("%", "%%"))
    p.add_argument("--min-effect", type=fraction, default=MIN_EFFECT, metavar="FRACTION",
                   help=f"smaller changes are 'no clear difference' (default {MIN_EFFECT:.0%})".replace("%", "%%"))
    p.add_argument("--html", metavar="FILE", help="also write the comparison as a self-contained HTML page")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON (for scripts)")


def main(args: argparse.Namespace) -> int:
    html_path = Path(args.html) if args.html else None
    if html_path is not None:
        if html_path.suffix.lower() not in (".html", ".htm"):
            raise ConfigError("html", f"must be an .html file, got {str(html_path)!r}")
        check_writable_file(html_path, "html")
    refuse_same_runs(args.old_dir, args.new_dir)
    result = diff_results(args.old_dir, args.new_dir, fail_above=args.fail_above, min_effect=args.min_effect)
    if result.compared == 0:
        apart = [r.split("run of it: ", 1)[1] for r in result.table["reason"] if f"; {KEPT_APART} " in r]
        why = f": {apart[0]}" if apart else ""
        raise ConfigError("result_dirs", f"no configuration is in both {args.old_dir} ({count(result, 'old only')}) "
                                         f"and {args.new_dir} ({count(result, 'new only')}): nothing to compare{why}")
    for line in result.notes:
        print(f"bench diff: note: {line}", file=sys.stderr)
    unsure = int(result.table["verdict"].isin(["too few repeats", "no data"]).sum())
    if unsure:  # a gate over single repeats would pass whatever happened: say so
        print(f"bench diff: warning: {unsure} configuration(s) in both have fewer than 2 usable repeats on a side, "
              "so no interval and no regression verdict (measure with --repeats 3 or more)", file=sys.stderr)
    if html_path is not None:
        atomic_write_text(html_path, result.html())
    print(json.dumps(result.to_dict(), indent=1) if args.json else result.text())
    if html_path is not None and not args.json:
        print(f"HTML written to {html_path}", file=sys.stderr)
    if len(result.regressions):
        return EXIT_FAILED
    if len(result.disturbed):
        named = "; ".join(f"{r.configuration} ({r.note})" for r in result.disturbed.itertuples())
        print(f"bench diff: disturbed: {len(result.disturbed)} configuration(s) not judged, re-measure: {named}",
              file=sys.stderr)
        return EXIT_DISTURBED
    return EXIT_OK


def refuse_same_runs(old_dir: str, new_dir: str) -> None:
    """OLD and NEW holding the same rows is bad input, as nothing could move and a gate passing on them proved
    nothing: the same folder (under any spelling: ./old/, a link) or a copy of it (`cp -r`: the same runs, as bench
    history knows a run by its run id, repeat and start time, with the same figures). A folder that is not there
    or holds no rows is left to diff_results, which names it."""
    old = recorded_rows(Path(old_dir))
    if not old:
        return
    refuse_same_folder("new_dir", [("OLD", old_dir), ("NEW", new_dir)],
                       "two result folders measured apart (a gate comparing a folder with itself proves nothing)")
    if old == recorded_rows(Path(new_dir)):
        raise ConfigError("new_dir", f"NEW {new_dir!r} holds the same {len(old)} row(s) as OLD {old_dir!r}, run for "
                                     "run and figure for figure (a copy), so nothing could move; allowed: two result "
                                     "folders measured apart")


def recorded_rows(folder: Path) -> frozenset[str]:
    """Each row of a folder as its whole record's text, read where bench diff reads the rows: the run files where
    there are any, else results.csv. Empty for a folder that is not there, a results.csv that is not a regular file
    (a FIFO would be waited on for ever) or one that cannot be read: diff_results says what is wrong there."""
    if any(folder.glob("runs/*/rows.json")):
        rows = results.record_rows(folder)
    elif (folder / "results.csv").is_file():
        try:
            rows = pd.read_csv(folder / "results.csv", dtype=str, keep_default_na=False,
                               on_bad_lines="skip").to_dict("records")
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError, OSError):
            return frozenset()
    else:
        return frozenset()
    return frozenset(json.dumps(row, sort_keys=True, default=str) for row in rows)


def count(result, side: str) -> str:
    n = int(result.table["side"].eq(side).sum())
    return f"{n} configuration{'' if n == 1 else 's'}"
