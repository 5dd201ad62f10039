"""Where a sweep's wall time goes: timed windows against everything else, from what a sweep records.

For an output folder written by `bench sweep`, it adds up, per execution: the seconds the sweep waited
for it (runs/<run>/.execution-time.json), the executed notebook's cells (papermill's per-cell
durations), and in the cell that runs the configurations, each row's timed window, warm-up and
first step. The rest of that cell is the builds, FLOP counts, capability checks and peak measurements.

    .venv/bin/python benchmarks/sweep_time.py outputs/default
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import nbformat

from bench_core import results


def account(out_dir: Path) -> dict:
    seconds = {"executions": 0.0, "start (process, kernel, imports)": 0.0, "setup and plan cells": 0.0,
               "timed windows": 0.0, "warm-up and first steps": 0.0, "build, FLOPs, checks": 0.0,
               "tables, charts, environment cells": 0.0}
    executions = 0
    for run_dir in sorted((out_dir / "runs").iterdir()):
        timing, notebook = run_dir / ".execution-time.json", run_dir / "benchmark.ipynb"
        if not (timing.is_file() and notebook.is_file()):
            continue
        executions += 1
        total = json.loads(timing.read_text())["execution_s"]
        nb = nbformat.read(notebook, as_version=4)
        cells = [(c.source, float(c.metadata.get("papermill", {}).get("duration") or 0)) for c in nb.cells
                 if c.cell_type == "code"]
        run_cell = next(d for source, d in cells if "bench_nb.run(" in source)
        before = sum(d for source, d in cells[: [s for s, _ in cells].index(next(s for s, _ in cells
                                                                            if "bench_nb.run(" in s))])
        after = sum(d for _, d in cells) - before - run_cell
        rows = [r for r in results.read_run(run_dir) or [] if r.get("status") == "ok"]
        timed = sum(float(r["timed_s"]) for r in rows)
        warm = sum(float(r["warmup_s"] or 0) + float(r["first_step_ms"] or 0) / 1e3
                   for r in {r["config_hash"]: r for r in rows}.values())
        seconds["executions"] += total
        seconds["start (process, kernel, imports)"] += total - sum(d for _, d in cells)
        seconds["setup and plan cells"] += before
        seconds["timed windows"] += timed
        seconds["warm-up and first steps"] += warm
        seconds["build, FLOPs, checks"] += run_cell - timed - warm
        seconds["tables, charts, environment cells"] += after
    return {"executions": executions, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    found = account(parser.parse_args().out_dir)
    total = found["seconds"]["executions"]
    print(f"{found['executions']} executions, {total:.1f} s")
    for name, value in found["seconds"].items():
        if name != "executions":
            print(f"  {name:36s} {value:7.1f} s  {100 * value / total:5.1f} %")


if __name__ == "__main__":
    main()
