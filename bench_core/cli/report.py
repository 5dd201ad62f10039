"""`bench report DIR...`: the HTML report of one or more result directories.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench_core.cli.common import add_price_argument
from bench_core.cli.inputs import refuse_same_folder
from bench_core.errors import ConfigError
from bench_core.files import check_writable_file
from bench_core.predict.prices import report_choices
from bench_core.predict.specs import COMPARED_TODAY
from bench_core.results.disturbed import disturbed_note
from bench_core.results.store import damage
from bench_core.summary.load import load_results
from bench_core.summary.report import ReportError, build_report
from bench_core.summary.tables import baseline_matches


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """examples:
  bench report outputs/cpu-quick                          # writes outputs/cpu-quick/report.html
  bench report outputs/gpu-a outputs/gpu-b --out ab.html  # two machines side by side
  bench report outputs/gpu-a outputs/gpu-b --baseline "RTX 3090"
  bench report gpu/runs/* --predict-gpus H100-SXM5-80GB,H200-SXM-141GB --price H100-SXM5-80GB=2.99
exit status: 0 report written, 1 the summary notebook failed, 2 bad input."""
    p.add_argument("result_dirs", nargs="+", metavar="DIR", help="result directories (each holds results.csv)")
    p.add_argument("--out", metavar="FILE", help="HTML file to write (default: DIR/report.html of the first DIR); "
                   "the executed summary.ipynb goes beside it")
    p.add_argument("--title", default="", help="a line shown at the top of the report")
    p.add_argument("--predict-gpus", default="", metavar="NAMES",
                   help="GPUs the Predicted GPUs section and the cost frontier predict, separated by commas (names "
                        f"as bench predict --gpu takes them); default: the GPUs a person compares today, "
                        f"{','.join(COMPARED_TODAY)}")
    add_price_argument(p, "a predicted GPU's cost per million items and a measured row's that has no "
                          "price_per_hour")
    p.add_argument("--baseline", default="", help="machine the others are compared with (part of its label, "
                   "e.g. a GPU or host name; it must name exactly one machine of the results, else exit 2 "
                   "listing them); default: the first DIR's machine")
    p.add_argument("--svg", action="store_true", help="also keep each chart as an SVG in the executed summary.ipynb "
                   "beside the report (JupyterLab shows it once you trust the notebook); the page embeds the PNG "
                   "either way, and without --svg the report takes about a tenth less CPU")


def main(args: argparse.Namespace) -> int:
    dirs = check_result_dirs(args.result_dirs)
    predict_gpus, prices = report_choices(args.predict_gpus, args.price)  # bad ones: exit 2 before anything is read
    out = Path(args.out) if args.out else dirs[0] / "report.html"
    if out.suffix.lower() not in (".html", ".htm"):
        raise ConfigError("out", f"must be an .html file, got {str(out)!r}")
    # Both files the report writes, before anything is rendered: neither may be a folder, nor a link (the write
    # would land where it points, an input's results.csv included).
    check_writable_file(out, "out")
    check_writable_file(out.parent / "summary.ipynb", "out")  # build_report's executed notebook, beside the page
    damaged = [(path, why) for d in dirs for path, why in damage(d)]
    loaded = load_results(dirs)  # a report reads its inputs and writes nothing into them
    if loaded.rows.empty:  # a report of nothing would say "report written" of an empty page
        said = "; ".join(f"{path} is damaged: {why}" for path, why in damaged) or " ".join(loaded.notes)
        raise ConfigError("result_dirs", f"no result rows to report ({said}); allowed: directories where bench "
                                         "sweep / bench run --out has finished at least one run")
    for path, why in damaged:
        print(f"bench report: warning: {path} is damaged ({why}); that run is left out, "
              "the other runs are in the report", file=sys.stderr)
    if args.baseline:
        check_baseline(args.baseline, loaded.machines)
    try:
        path = build_report(dirs, out, title=args.title, baseline=args.baseline, predict_gpus=predict_gpus,
                            prices=prices, svg=args.svg)
    except ReportError as exc:
        print(f"bench report: error: {exc}", file=sys.stderr)
        return 1
    for line in loaded.notes:
        if "impossible numbers" in line:
            print(f"bench report: warning: {line}", file=sys.stderr)
    note = disturbed_note(loaded.rows.to_dict("records"))  # rows, as bench run counts them
    if note:
        print(f"bench report: note: {note} (the report marks them)", file=sys.stderr)
    print(path)
    return 0


def check_baseline(baseline: str, machines: list[str]) -> None:
    """--baseline must name exactly one machine of these results (its label, or a part of it)."""
    matches = baseline_matches(machines, baseline)
    if len(matches) != 1:
        what = f"matches {len(matches)} machines" if matches else "names no machine in these results"
        raise ConfigError("--baseline", f"{baseline!r} {what}; allowed: one of "
                          + ("; ".join(repr(m) for m in (matches or machines)) or "none: no rows") + " (or a part "
                          "of one label)")


def check_result_dirs(result_dirs) -> list[Path]:
    """Each directory must exist and hold results (results.csv or run files); else one line naming it."""
    dirs = [Path(d) for d in result_dirs]
    if not dirs:
        raise ConfigError("result_dirs", "give at least one result directory")
    for d in dirs:
        if not d.is_dir():
            raise ConfigError("result_dirs", f"{str(d)!r} is not a directory; allowed: directories written by "
                              "bench sweep / bench run --out")
        if not (d / "results.csv").is_file() and not any(d.glob("runs/*/rows.json")):
            raise ConfigError("result_dirs", f"{str(d)!r} has no results.csv; allowed: directories written by "
                              "bench sweep / bench run --out")
    refuse_same_folder("result_dirs", [(f"DIR {n}", d) for n, d in enumerate(dirs, 1)],
                       "each result folder once (given twice, its rows would count twice)")
    return dirs
