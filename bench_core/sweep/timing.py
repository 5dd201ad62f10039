"""Where a sweep's wall time went, by cause, each cause recorded as it happened: the sweep stamps when it
started each execution's process and when it had it back, the child (sweep/child.py) when it was running,
had papermill imported and had the notebook done, papermill each cell's start and end, and the runner each
configuration's phases (a row's phase_times_s). Each execution's account goes to its run directory as it
ends; the sweep's to DIR/timing.json, with a table at the end of the sweep.

What a GPU hour buys is the timed windows; first steps (compilation, cuDNN autotuning) and warm-ups are
part of measuring. Everything else is overhead, and the sweep says how much of it a configuration cost.
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import nbformat

from bench_core import results
from bench_core.run.timing import parse_phases

ACCOUNT_FILE = ".execution-time.json"  # in each run directory: the execution's account
SWEEP_FILE = "timing.json"              # in the sweep's output directory
RUN_CELL_MARK = "bench_nb.run("         # the cell that runs the configurations
# The part of measuring that is not overhead: the budget counts everything else.
MEASURING = ("first_step", "warmup", "windows")
# The causes in the order a configuration meets them, with their words in the table.
CAUSES = {
    "sweep_start": "sweep start (plan, environment, files)",
    "process_start": "execution process start",
    "papermill_import": "papermill import",
    "kernel_start": "kernel start (read, parameterize, launch)",
    "imports_cell": "imports cell (torch, bench_core)",
    "setup_cells": "parameters and plan cells",
    "environment": "environment",
    "capability": "precision capability",
    "memory_estimate": "memory estimate",
    "output_check": "output check",
    "build": "model build",
    "server_start": "serving engine start (process, model, tokenizer)",
    "peak": "peak FLOP/s",
    "first_step": "first steps (compile, autotune)",
    "flop_count": "FLOP count",
    "warmup": "warm-up",
    "windows": "timed windows",
    "window_edges": "telemetry start/stop, rows",
    "gpu_busy": "GPU busy (a profile of a few steps)",
    "after_windows": "after the windows (profiles)",
    "release": "release (gc, cache)",
    "run_cell_other": "run cell, rest (dispatch, batch searches, rows written)",
    "report_cells": "table, chart and environment cells",
    "between_cells": "papermill between cells (saving the notebook)",
    "kernel_shutdown": "kernel shutdown",
    "process_exit": "process exit, outcome and records",
    "unstamped": "killed or crashed executions, after their last stamp",
    "between_executions": "between executions (the sweep's bookkeeping)",
}


def _stamp(text: str | None) -> float | None:
    """papermill's ISO time stamps as POSIX seconds."""
    if not text:
        return None
    stamp = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.timezone.utc)).timestamp()


def _cells(notebook: Path) -> list[tuple[str, float, float]]:
    """(source, start, end) of every executed code cell, as papermill stamped them."""
    try:
        nb = nbformat.read(notebook, as_version=4)
    except Exception:  # noqa: BLE001 - absent or cut off (a killed execution): no cells to account
        return []
    found = []
    for cell in nb.cells:
        stamps = cell.metadata.get("papermill", {})
        start, end = _stamp(stamps.get("start_time")), _stamp(stamps.get("end_time"))
        if cell.cell_type == "code" and start is not None and end is not None:
            found.append((cell.source, start, end))
    return found


def execution_account(run_dir: Path, spawned: float, returned: float, marks: dict, measured: set[str]) -> dict:
    """One execution's seconds by cause. `spawned`/`returned`: when the sweep started its process and had it
    back; `marks`: the child's stamps (started, papermill_imported, notebook_done); `measured`: the
    configurations this execution ran (their rows' phases count; rows kept from before do not)."""
    seconds: dict[str, float] = {}

    def add(cause: str, value: float | None) -> None:
        if value is not None and value > 0:
            seconds[cause] = seconds.get(cause, 0.0) + value

    started, imported, done = (marks.get(k) for k in ("started", "papermill_imported", "notebook_done"))
    cells = _cells(run_dir / "benchmark.ipynb")
    add("process_start", started - spawned if started else None)
    add("papermill_import", imported - started if imported and started else None)
    if cells and imported:
        add("kernel_start", cells[0][1] - imported)
    run_index = next((i for i, (source, _, _) in enumerate(cells) if RUN_CELL_MARK in source), None)
    phases_total = 0.0
    configurations = 0
    rows = [r for r in results.read_run(run_dir) or [] if str(r.get("config_hash")) in measured]
    for row in {str(r.get("config_hash")): r for r in rows}.values():  # the phases are the same in each repeat
        phases = parse_phases(row.get("phase_times_s"))
        configurations += 1
        for name, value in phases.items():
            add(name if name in CAUSES else "run_cell_other", value)
            phases_total += value
    for i, (_, start, end) in enumerate(cells):
        if i == 0:
            add("imports_cell", end - start)
        elif run_index is None or i < run_index:
            add("setup_cells", end - start)
        elif i == run_index:
            add("run_cell_other", end - start - phases_total)
        else:
            add("report_cells", end - start)
        if i:
            add("between_cells", start - cells[i - 1][2])
    if cells and done:
        add("kernel_shutdown", done - cells[-1][2])
    add("process_exit", returned - done if done else None)
    if not (started and cells and done):  # a killed or crashed execution: what was not stamped is one lump
        add("unstamped", (returned - spawned) - sum(seconds.values()))
    return {"run_name": run_dir.name, "started_at": spawned, "execution_s": returned - spawned,
            "configurations": configurations, "seconds": seconds}


def write_execution(run_dir: Path, account: dict) -> None:
    results.atomic_write_text(run_dir / ACCOUNT_FILE, json.dumps(account, indent=1))


def read_executions(out_dir: Path, since: float) -> list[dict]:
    """The accounts of the executions started at or after `since` (this sweep's, not an earlier one's)."""
    found = []
    for path in sorted((out_dir / "runs").glob(f"*/{ACCOUNT_FILE}")):
        try:
            account = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(account, dict) and account.get("started_at", 0) >= since and "seconds" in account:
            found.append(account)
    return found


def sweep_account(started: float, ended: float, executions: list[dict]) -> dict:
    """The sweep's seconds by cause (its executions' and its own), and the overhead per configuration:
    every second that is not a first step, a warm-up or a timed window, over the configurations run."""
    seconds: dict[str, float] = {}
    for account in executions:
        for cause, value in account["seconds"].items():
            seconds[cause] = seconds.get(cause, 0.0) + value
    wall = ended - started
    first = min((a["started_at"] for a in executions), default=ended)
    seconds["sweep_start"] = max(first - started, 0.0)
    seconds["between_executions"] = max(wall - sum(seconds.values()), 0.0)
    configurations = sum(a["configurations"] for a in executions)
    overhead = wall - sum(seconds.get(c, 0.0) for c in MEASURING)
    return {"wall_s": wall, "executions": len(executions), "configurations": configurations,
            "overhead_s": overhead, "overhead_s_per_configuration": overhead / configurations if configurations else None,
            "seconds": {c: seconds[c] for c in CAUSES if seconds.get(c)},
            "per_execution": executions}


def write_sweep(out_dir: Path, account: dict) -> None:
    results.atomic_write_text(out_dir / SWEEP_FILE, json.dumps(account, indent=1))


def table(account: dict) -> str:
    """The account as the sweep prints it at its end."""
    wall = account["wall_s"] or 1.0
    lines = [f"where the sweep's {account['wall_s']:.1f} s went ({account['executions']} executions, "
             f"{account['configurations']} configurations):"]
    for cause, value in account["seconds"].items():
        mark = " " if cause in MEASURING else "*"
        lines.append(f"  {mark} {CAUSES[cause]:46s} {value:8.1f} s {100 * value / wall:5.1f} %")
    per = account["overhead_s_per_configuration"]
    lines.append(f"  * overhead (all but first steps, warm-ups and windows): {account['overhead_s']:.1f} s"
                 + (f", {per:.1f} s a configuration" if per is not None else ""))
    return "\n".join(lines)
