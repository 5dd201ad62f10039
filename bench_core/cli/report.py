"""`bench report DIR...`: the HTML report of one or more result directories.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from bench_core.errors import ConfigError
from bench_core.summary.report import ReportError, build_report


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """examples:
  bench report outputs/cpu-quick                          # writes outputs/cpu-quick/report.html
  bench report outputs/gpu-a outputs/gpu-b --out ab.html  # two machines side by side
  bench report outputs/gpu-a outputs/gpu-b --baseline "RTX 3090"
exit status: 0 report written, 1 the summary notebook failed, 2 bad input."""
    p.add_argument("result_dirs", nargs="+", metavar="DIR", help="result directories (each holds results.csv)")
    p.add_argument("--out", metavar="FILE", help="HTML file to write (default: DIR/report.html of the first DIR); "
                   "the executed summary.ipynb goes beside it")
    p.add_argument("--title", default="", help="a line shown at the top of the report")
    p.add_argument("--baseline", default="", help="machine the others are compared with (part of its label, "
                   "e.g. a GPU or host name); default: the first DIR's machine")


def main(args: argparse.Namespace) -> int:
    dirs = check_result_dirs(args.result_dirs)
    out = Path(args.out) if args.out else dirs[0] / "report.html"
    if out.suffix.lower() not in (".html", ".htm"):
        raise ConfigError("--out", f"must be an .html file, got {str(out)!r}")
    try:
        path = build_report(dirs, out, title=args.title, baseline=args.baseline)
    except ReportError as exc:
        import sys
        print(f"bench report: error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


def check_result_dirs(result_dirs) -> list[Path]:
    """Each directory must exist and hold a results.csv; else one line naming it."""
    dirs = [Path(d) for d in result_dirs]
    if not dirs:
        raise ConfigError("result_dirs", "give at least one result directory")
    for d in dirs:
        if not d.is_dir():
            raise ConfigError("result_dirs", f"{str(d)!r} is not a directory; allowed: directories written by "
                              "bench sweep / bench run --out")
        if not (d / "results.csv").is_file():
            raise ConfigError("result_dirs", f"{str(d)!r} has no results.csv; allowed: directories written by "
                              "bench sweep / bench run --out")
    return dirs
