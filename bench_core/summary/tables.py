"""The report's tables, computed from loaded results: plain pandas, no display.
"""
from __future__ import annotations

import contextlib
import json
import math

import numpy as np
import pandas as pd

from bench_core.summary.html import sort_table
from bench_core.summary.load import (
    EMULATED_SUFFIX,
    ENVIRONMENT_FIELDS,
    WORKLOAD,
    Results,
)
from bench_core.summary.text import is_number, is_present, num_text

KNEE_FRACTION = 0.9          # the knee: smallest batch reaching 90% of the curve's best throughput


def headline_table(res: Results) -> pd.DataFrame:
    """Median over repeats per configuration, with the interquartile range of the repeats."""
    ok = res.ok
    if ok.empty:
        return pd.DataFrame()
    ok = ok.assign(_peak_memory_mib=peak_memory_mib(ok))
    table = ok.groupby(["machine", *WORKLOAD], dropna=False, sort=False).agg(
        repeats=("samples_per_s", "count"), samples_per_s=("samples_per_s", "median"),
        q25=("samples_per_s", lambda s: s.quantile(0.25)), q75=("samples_per_s", lambda s: s.quantile(0.75)),
        step_time_ms=("step_time_ms_median", "median"), mpx_per_s=("mpx_per_s", "median"),
        mvox_per_s=("mvox_per_s", "median"), peak_memory_mib=("_peak_memory_mib", "median"))
    return sort_table(table.reset_index())


def peak_memory_mib(rows: pd.DataFrame) -> pd.Series:
    """Peak memory in MiB: torch peak allocated on CUDA, else the process's peak RSS (its whole life)."""
    return rows["peak_mem_allocated_bytes"].fillna(rows["peak_rss_bytes"]) / 2**20


def relative_speed(res: Results, baseline: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame, str | None, str]:
    """Median samples/s of each workload per machine, and each machine's speed over the baseline's.

    Returns (per-workload table, per-machine summary, baseline label, note about the baseline choice).
    """
    ok = res.ok
    machines = list(dict.fromkeys(ok["machine"]))
    if len(machines) < 2:
        return pd.DataFrame(), pd.DataFrame(), (machines[0] if machines else None), ""
    chosen, why = _pick_baseline(res, machines, baseline)
    med = ok.pivot_table(index="config", columns="machine", values="samples_per_s", aggfunc="median")
    med = med.reindex(columns=machines)
    ratio = med.div(med[chosen], axis=0)
    summary = []
    for m in machines:
        shared = ratio[m].dropna()
        if m == chosen or shared.empty:
            continue
        summary.append({"machine": m, "speed_vs_baseline": float(np.exp(np.log(shared).mean())),
                        "min": float(shared.min()), "max": float(shared.max()), "shared_configs": len(shared)})
    return med, pd.DataFrame(summary), chosen, why


def _pick_baseline(res: Results, machines: list[str], wanted: str | None) -> tuple[str, str]:
    if wanted:
        exact = [m for m in machines if m == wanted]
        partial = [m for m in machines if wanted.lower() in m.lower()]
        if exact or len(partial) == 1:
            return (exact or partial)[0], "chosen by the baseline parameter"
        why = (f"baseline {wanted!r} matches {'several' if partial else 'no'} machine; "
               "using the first result directory's machine instead")
    else:
        why = "the first result directory's machine (set the baseline parameter to choose another)"
    for d in res.dirs:
        in_dir = res.ok[res.ok["result_dir"] == str(d)]["machine"]
        if len(in_dir):
            return in_dir.iloc[0], why
    return machines[0], why


def amp_speedup_table(res: Results) -> pd.DataFrame:
    """Median throughput of each reduced precision over fp32 on the same machine and workload."""
    ok = res.ok
    keys = ["machine", *[k for k in WORKLOAD if k != "precision"]]
    if ok.empty or "fp32" not in set(ok["precision"]):
        return pd.DataFrame()
    med = ok.groupby([*keys, "precision"], dropna=False)["samples_per_s"].median().reset_index()
    base = med[med["precision"] == "fp32"].drop(columns="precision").rename(columns={"samples_per_s": "fp32"})
    other = med[med["precision"] != "fp32"]
    table = other.merge(base, on=keys, how="inner")
    table["speedup"] = table["samples_per_s"] / table["fp32"]
    return sort_table(table)


def emulation_notes(res: Results, speedups: pd.DataFrame) -> list[str]:
    """Why emulated precisions are slow, in words, with what they cost here; and which a sweep left out."""
    lines = []
    rows = res.ok[res.ok["precision"].astype(str).str.endswith(EMULATED_SUFFIX)]
    for (machine, precision), group in rows.groupby(["machine", "precision"], sort=False):
        reason = next((str(v) for v in group["precision_support_reason"] if is_present(v)), "no reason recorded")
        cost = ""
        if not speedups.empty:
            mine = speedups[(speedups["machine"] == machine) & (speedups["precision"] == precision)]["speedup"]
            if len(mine.dropna()):
                cost = (f"; here it runs at {mine.median():.2f}× fp32 (median over {len(mine.dropna())} "
                        f"workloads), {1 / mine.median():.1f}× slower")
        lines.append(f"{machine}: {precision}: {reason}{cost}. These rows show what emulation costs, not what the "
                     "hardware can do in that precision.")
    for d in res.dirs:
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            for skip in json.loads((d / "plan.json").read_text()).get("skipped") or []:
                what = " ".join(filter(None, (skip["precision"], skip.get("mode"))))  # mode: since schema v3
                lines.append(f"{d.name}: {what} was not run on {skip['device']} "
                             f"({skip['configurations']} configurations): {skip['reason']}.")
    return lines


def batch_curves(res: Results) -> pd.DataFrame:
    """Median throughput and step time per batch size, for curves with two or more batch sizes."""
    ok = res.ok
    if ok.empty:
        return pd.DataFrame()
    keys = ["machine", *[k for k in WORKLOAD if k != "batch_size"]]
    med = ok.groupby([*keys, "batch_size"], dropna=False).agg(
        samples_per_s=("samples_per_s", "median"), step_time_ms=("step_time_ms_median", "median")).reset_index()
    sizes = med.groupby(keys, dropna=False)["batch_size"].transform("nunique")
    return sort_table(med[sizes >= 2])


def knee_points(curves: pd.DataFrame, fraction: float = KNEE_FRACTION) -> pd.DataFrame:
    """Per curve: the best throughput and the knee, the smallest batch reaching `fraction` of it."""
    if curves.empty:
        return pd.DataFrame()
    keys = ["machine", *[k for k in WORKLOAD if k != "batch_size"]]
    out = []
    for key, curve in curves.groupby(keys, dropna=False, sort=False):
        curve = curve.dropna(subset=["samples_per_s"]).sort_values("batch_size")
        if curve.empty:
            continue
        best = curve.loc[curve["samples_per_s"].idxmax()]
        knee = curve[curve["samples_per_s"] >= fraction * best["samples_per_s"]].iloc[0]
        out.append({**dict(zip(keys, key)), "best_batch_size": best["batch_size"],
                    "best_samples_per_s": best["samples_per_s"], "knee_batch_size": knee["batch_size"],
                    "knee_samples_per_s": knee["samples_per_s"], "knee_step_time_ms": knee["step_time_ms"],
                    "batch_sizes": len(curve)})
    return pd.DataFrame(out)


def scaling_table(res: Results) -> pd.DataFrame:
    """DLPerf-style: devices, throughput, speed-up over 1 device, scaling efficiency (speed-up / N)."""
    ok = res.ok
    if ok.empty or ok["world_size"].nunique() < 2:
        return pd.DataFrame()
    keys = ["machine", *[k for k in WORKLOAD if k != "world_size"]]
    ok = ok.assign(nnodes=ok["nnodes"].fillna(1))
    med = ok.groupby([*keys, "world_size"], dropna=False).agg(
        nodes=("nnodes", "max"), samples_per_s=("samples_per_s", "median"),
        samples_per_s_per_device=("samples_per_s_per_device", "median"),
        repeats=("samples_per_s", "count")).reset_index()
    out = []
    for _, group in med.groupby(keys, dropna=False, sort=False):
        if group["world_size"].nunique() < 2:
            continue
        one = group[group["world_size"] == 1]["samples_per_s"]
        base = float(one.iloc[0]) if len(one) else math.nan
        group = group.assign(speedup=group["samples_per_s"] / base)
        group["efficiency"] = group["speedup"] / group["world_size"]
        out.append(group.sort_values("world_size"))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def efficiency_table(res: Results) -> pd.DataFrame:
    """Median per configuration of MFU, energy, perf per watt and cost, with where the numbers come from."""
    ok = res.ok
    if ok.empty:
        return pd.DataFrame()
    first = lambda s: next((str(v) for v in s if is_present(v)), None)  # noqa: E731
    table = ok.groupby(["machine", "config", *WORKLOAD], dropna=False, sort=False).agg(
        samples_per_s=("samples_per_s", "median"), achieved_tflops=("achieved_tflops", "median"),
        peak_tflops=("peak_tflops", "median"), mfu=("mfu", "median"), peak_source=("peak_source", first),
        power_w_mean=("power_w_mean", "median"), samples_per_j=("samples_per_j", "median"),
        j_per_1k_samples=("j_per_1k_samples", "median"), samples_per_s_per_w=("samples_per_s_per_w", "median"),
        energy_method=("energy_method", first), price_per_hour=("price_per_hour", "median"),
        cost_per_million_samples=("cost_per_million_samples", "median"), telemetry_note=("telemetry_note", first),
    ).reset_index()
    return sort_table(table)


def noise_table(res: Results) -> pd.DataFrame:
    """Successful rows whose measurement may have been disturbed, with the reasons recorded in the row."""
    rows = res.ok
    flagged = rows[rows["noise_flags"].notna() & (rows["noise_flags"].astype(str).str.strip() != "")]
    return flagged[["machine", "config", "repeat", "noise_flags", "step_time_cv"]]


def failures_table(res: Results) -> pd.DataFrame:
    """Every row whose status is not ok, with its message."""
    rows = res.rows[res.rows["status"] != "ok"]
    # A failed batch_size max search has no size: say 'max' rather than leave the cell empty.
    batch = rows["batch_size"].astype(object).where(rows["batch_size"].notna() | ~rows["batch_searched"], "max")
    return rows.assign(batch_size=batch)[["machine", "model", "mode", "precision", "batch_size", "repeat", "status",
                                          "message", "run_id", "result_dir"]]


def environment_table(res: Results) -> pd.DataFrame:
    """One column per machine, one row per environment field (values that differ are joined with |)."""
    if res.rows.empty:
        return pd.DataFrame()
    out = {}
    for machine, rows in res.rows.groupby("machine", sort=False):
        values = {}
        for name in ENVIRONMENT_FIELDS:
            seen = [num_text(v) if isinstance(v, float) else str(v) for v in dict.fromkeys(rows[name]) if is_present(v)]
            if name == "gpu_memory_bytes":
                seen = [f"{float(v) / 2**30:.1f} GiB" if is_number(v) else v for v in seen]
            values[name] = " | ".join(seen)
        out[machine] = values
    table = pd.DataFrame(out)
    table = table[(table != "").any(axis=1)]
    table.index.name = "field"
    return table.reset_index()


def method_settings(res: Results) -> pd.DataFrame:
    """The timing settings these rows actually used, per machine."""
    ok = res.ok
    if ok.empty:
        return pd.DataFrame()

    def values(s):
        return ", ".join(num_text(v) for v in sorted(set(s.dropna()))) or "?"
    table = ok.groupby("machine", sort=False).agg(
        warmup_steps=("warmup_steps", values), min_steps=("steps", values), min_seconds=("min_seconds", values),
        repeats=("repeats", values), timed_steps=("timed_steps", values),
        timer=("device_type", lambda s: ", ".join(sorted({timer_name(v) for v in s})))).reset_index()
    return table


def timer_name(device_type) -> str:
    return "CUDA events" if device_type == "cuda" else "time.perf_counter"


def step_times_long(res: Results) -> pd.DataFrame:
    """One row per timed step (from the step_times_ms column: space-separated milliseconds)."""
    out = []
    for row in res.ok[["machine", "config", "mode", "repeat", "step_times_ms"]].to_dict("records"):
        for i, text in enumerate(str(row["step_times_ms"] or "").split()):
            with contextlib.suppress(ValueError):
                value = float(text)
                if math.isfinite(value) and value > 0:
                    out.append({**{k: row[k] for k in ("machine", "config", "mode", "repeat")}, "step": i,
                                "step_ms": value})
    return pd.DataFrame(out)
