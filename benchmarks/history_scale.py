"""How `bench history` and the report's History section grow with the rows: a history of RUNS runs of CONFIGS
configurations (1,000 x 50 = 50,000 rows) is built as a team would keep it, then read, analysed (steps found)
and drawn, each size in a fresh process, with the time of each phase and the process's peak memory.

The rows are real rows' shape: every column of results.csv (about 330, step times included), copied from a
kept GPU row (gpu/runs/h200-2026-11-27-b) with the model, the run id, the date and the throughput set: each
configuration a level of its own with a 3 % run-to-run spread, a third of them 10 % slower from the middle run
on (torch_version changed there). Two layouts: `folders` (one result folder a run, as a nightly sweep writes
them) and `append` (one folder that every run appends to, bench run --out DIR).

    .venv/bin/python benchmarks/history_scale.py                          # 2,500 to 50,000 rows, both layouts
    .venv/bin/python benchmarks/history_scale.py --runs 40 --configs 5    # a check that it works

Time it on an idle machine: the figures are the machine's, and another process's load shows in them.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "gpu" / "runs" / "h200-2026-11-27-b"
REPEATS = 1  # a row a run and configuration, as the issue counts them: 1,000 runs x 50 = 50,000 rows
START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def template_row() -> dict:
    """A kept run file's row (its numbers numbers, as bench writes them: a row from results.csv, all text, would be
    a damaged run to every reader)."""
    from bench_core.results.store import iter_rows
    return next(r for r in iter_rows(TEMPLATE) if r["status"] == "ok" and r["model"] == "resnet50")


def build(out: Path, runs: int, configs: int, layout: str, seed: int = 0, repeats: int = REPEATS) -> int:
    """Write the history under `out`; returns the rows written."""
    from bench_core.results.store import csv_text, dumps_rows
    rng = random.Random(seed)
    base = template_row()
    levels = [rng.uniform(200, 5000) for _ in range(configs)]
    written, appended = 0, []
    for run in range(runs):
        day = (START + dt.timedelta(hours=8 * run)).isoformat()  # three runs a day, 1,000 in a year
        rows = []
        for c in range(configs):
            stepped = c % 3 == 0 and run >= runs // 2
            level = levels[c] * (0.9 if stepped else 1.0) * math.exp(rng.gauss(0, 0.03))
            run_id = f"run{run:05d}-c{c:03d}"
            for repeat in range(repeats):
                value = level * math.exp(rng.gauss(0, 0.01))
                rows.append({**base, "model": f"model{c:03d}", "run_id": run_id, "repeat": repeat, "timestamp": day,
                             "samples_per_s": value, "throughput": value, "noise_flags": "",
                             "torch_version": "2.12.0+cu130" if run >= runs // 2 else base["torch_version"]})
        written += len(rows)
        if layout == "folders":
            folder = out / f"night-{run:05d}"
            (folder / "runs" / "all").mkdir(parents=True)
            (folder / "runs" / "all" / "rows.json").write_text(dumps_rows(rows))
            (folder / "results.csv").write_text(csv_text(rows))
        else:
            (out / "all" / "runs" / f"run{run:05d}").mkdir(parents=True)
            (out / "all" / "runs" / f"run{run:05d}" / "rows.json").write_text(dumps_rows(rows))
            appended += rows
    if layout == "append":
        (out / "all" / "results.csv").write_text(csv_text(appended))
    return written


def child(folders: list[str]) -> dict:
    """Read, analyse and draw in this (fresh) process; times per phase and the peak RSS."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    from IPython.utils.capture import capture_output

    from bench_core.history.read import read_history
    from bench_core.history.show import history_chart
    from bench_core.history.steps import analyze
    from bench_core.summary.html import plot_style
    imported = peak_mib()
    started = time.perf_counter()
    history = read_history(folders)
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    analysis = analyze(history)
    analyze_s = time.perf_counter() - started
    started = time.perf_counter()
    with capture_output(), plot_style():
        for unit in history.lines["unit"].drop_duplicates():
            history_chart(analysis, unit)
    draw_s = time.perf_counter() - started
    return {"rows": history.rows, "runs": len(history.runs), "steps": len(analysis.steps),
            "findings": len(analysis.findings), "read_s": read_s, "analyze_s": analyze_s, "draw_s": draw_s,
            "peak_mib": peak_mib(), "imports_mib": imported}


def peak_mib() -> float:
    """This process's peak resident memory: VmHWM (reset at exec, where ru_maxrss keeps the parent's peak at the
    fork: the builder held the whole history), else ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB; macOS counts bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[50, 200, 500, 1000])
    parser.add_argument("--configs", type=int, default=50)
    parser.add_argument("--layouts", nargs="+", default=["folders", "append"], choices=["folders", "append"])
    parser.add_argument("--repeats", type=int, default=REPEATS, help="rows a run and configuration")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    print(f"bench history at scale: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"{args.configs} configurations x {args.repeats} repeat(s) a run")
    print(f"{'layout':8s} {'rows':>7s} {'runs':>6s} {'steps':>5s} {'read s':>7s} {'steps s':>7s} {'draw s':>7s} "
          f"{'peak MiB':>8s} {'imports MiB':>11s}")
    results = []
    for layout in args.layouts:
        for runs in args.runs:
            folder = Path(tempfile.mkdtemp(prefix="history-scale-"))
            try:
                build(folder, runs, args.configs, layout, repeats=args.repeats)
                dirs = sorted(str(p) for p in folder.iterdir())
                done = subprocess.run([sys.executable, __file__, "--child", *dirs], capture_output=True, text=True,
                                      check=True, cwd=ROOT)
                found = {"layout": layout, **json.loads(done.stdout.strip().splitlines()[-1])}
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            results.append(found)
            print(f"{layout:8s} {found['rows']:7d} {found['runs']:6d} {found['steps']:5d} {found['read_s']:7.2f} "
                  f"{found['analyze_s']:7.2f} {found['draw_s']:7.2f} {found['peak_mib']:8.0f} "
                  f"{found['imports_mib']:11.0f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
