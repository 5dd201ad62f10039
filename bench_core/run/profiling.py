"""torch.profiler over a few steps AFTER the timed window (never inside it): a chrome trace
(open in https://ui.perfetto.dev or chrome://tracing) and a table of the top operators.

Files go to $BENCH_PROFILE_DIR/<run_id>/ (default ./outputs/profiles/<run_id>/):
trace.json, top_ops.txt (the profiler's own table) and top_ops.csv (the same, for code).
"""
from __future__ import annotations

import csv
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PROFILE_STEPS = 3        # profiled steps, after one profiler warm-up step
TOP_OPS = 25             # operators kept in the table and the CSV
DEFAULT_DIR = Path("outputs") / "profiles"
TOP_OPS_FIELDS = ("operator", "calls", "self_cpu_time_us", "cpu_time_total_us",
                  "self_device_time_us", "device_time_total_us", "self_share_pct")


@dataclass
class Profile:
    trace_path: Path
    table_path: Path
    top_ops_path: Path
    table: str          # the profiler's text table, sorted by `sort_by`
    sort_by: str        # self_device_time_total on GPU, self_cpu_time_total on CPU
    steps: int


def profile_dir(run_id: str) -> Path:
    """Where a run's profile goes: the sweep / notebook / CLI set BENCH_PROFILE_DIR."""
    return Path(os.environ.get("BENCH_PROFILE_DIR") or DEFAULT_DIR) / run_id


def profile_after_window(step: Callable[[], object], backend, cfg, rows: list[dict], rank: int = 0) -> Profile | None:
    """The runner's hook: profile `step` and point every row at the files (rank > 0: its own folder).

    A failing profiler must not turn measured rows into a failure: it warns and leaves the
    profile columns empty.
    """
    run_id = rows[0]["run_id"] if rows and rows[0].get("run_id") else cfg.config_hash()
    out_dir = profile_dir(run_id) if rank == 0 else profile_dir(run_id) / f"rank{rank}"
    try:
        result = profile_steps(step, backend, out_dir)
    except Exception as exc:  # noqa: BLE001 - the measurement stands; say why the profile is missing
        warnings.warn(f"profile failed, rows kept without it: {type(exc).__name__}: {exc}", stacklevel=2)
        return None
    # The result schema gets these columns from the lead (profile_trace, profile_top_ops);
    # until then make_row refused them, so only fill columns the row already has.
    for row in rows:
        if "profile_trace" in row:
            row["profile_trace"] = str(result.trace_path)
        if "profile_top_ops" in row:
            row["profile_top_ops"] = str(result.top_ops_path)
    return result


def profile_steps(step: Callable[[], object], backend, out_dir: Path, steps: int = PROFILE_STEPS) -> Profile:
    """Run `step` 1 + `steps` times under torch.profiler; write trace, table and CSV."""
    from torch.profiler import ProfilerActivity, profile, schedule

    on_gpu = backend.type == "cuda"
    if not on_gpu:
        # Kineto logs "gpuGetDeviceCount failed" and USDT lines on a CPU-only host; they would
        # show as red boxes in the notebook. On GPU keep its messages (e.g. CUPTI permissions).
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    trace_path = out_dir / "trace.json"
    captured: dict = {}

    def on_ready(prof) -> None:
        captured["averages"] = prof.key_averages()
        prof.export_chrome_trace(str(trace_path))

    # The profiler's own warm-up step absorbs its start-up cost; only `steps` are recorded.
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                 on_trace_ready=on_ready) as prof:
        for _ in range(steps + 1):
            step()
            backend.synchronize()
            prof.step()
    averages = captured["averages"]
    sort_by = "self_device_time_total" if on_gpu else "self_cpu_time_total"
    table = averages.table(sort_by=sort_by, row_limit=TOP_OPS)
    ops = top_operators(averages, sort_by)
    if on_gpu and not any(op["self_device_time_us"] for op in ops):
        warnings.warn("the profile recorded no GPU kernel time (is CUPTI available to this user?)", stacklevel=2)
    table_path = out_dir / "top_ops.txt"
    table_path.write_text(f"torch.profiler over {steps} steps after the timed window, sorted by {sort_by}\n"
                          + table + "\n")
    top_ops_path = out_dir / "top_ops.csv"
    with open(top_ops_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=TOP_OPS_FIELDS)
        writer.writeheader()
        writer.writerows(ops)
    return Profile(trace_path, table_path, top_ops_path, table, sort_by, steps)


def top_operators(averages, sort_by: str, limit: int = TOP_OPS) -> list[dict]:
    """The `limit` operators with most self time (device on GPU, CPU otherwise), in us."""
    # "ProfilerStep*" spans whole steps: it is the container, not an operator.
    events = [e for e in averages if not e.key.startswith("ProfilerStep")]
    events.sort(key=lambda e: getattr(e, sort_by), reverse=True)
    total = sum(getattr(e, sort_by) for e in events) or 1.0
    return [{"operator": e.key, "calls": e.count,
             "self_cpu_time_us": round(e.self_cpu_time_total, 3),
             "cpu_time_total_us": round(e.cpu_time_total, 3),
             "self_device_time_us": round(e.self_device_time_total, 3),
             "device_time_total_us": round(e.device_time_total, 3),
             "self_share_pct": round(100.0 * getattr(e, sort_by) / total, 2)}
            for e in events[:limit]]


def load_top_ops(path):
    """A run's top operators as a DataFrame (for the run notebook and the report)."""
    import pandas as pd
    return pd.read_csv(path)
