"""The report's tables, computed from loaded results: plain pandas, no display.
"""
from __future__ import annotations

import contextlib
import json
import math

import numpy as np
import pandas as pd

from bench_core.results.disturbed import disturbances
from bench_core.results.keys import machine_use
from bench_core.summary.effects import compare_variants, verdict_summary
from bench_core.summary.html import sort_table
from bench_core.summary.load import (
    EMULATED_SUFFIX,
    ENVIRONMENT_FIELDS,
    WORKLOAD,
    Results,
)
from bench_core.summary.text import is_number, is_present, num_text

KNEE_FRACTION = 0.9          # the knee: smallest batch reaching 90% of the curve's best throughput
DISTURBED_MARK = "⚠"  # beside a figure whose repeats were flagged as disturbed, in the tables and the charts
DISTURBED_WHY = "another process on the CPU or device, throttling, a clock drop, or repeats that disagree"


def flag_disturbed(ok: pd.DataFrame) -> pd.DataFrame:
    """The rows with `_disturbed`: whether each repeat carries a disturbing flag (results.disturbed), for
    a table's `disturbed=("_disturbed", "sum")` beside its `repeats`."""
    return ok.assign(_disturbed=[bool(disturbances(v)) for v in ok["noise_flags"]])


def marked(text: str, disturbed) -> str:
    """A chart's label with DISTURBED_MARK after it where its figure rests on repeats flagged as disturbed."""
    return f"{text} {DISTURBED_MARK}" if disturbed else text


def disturbed_marks(table: pd.DataFrame) -> list[str]:
    """'⚠ 2 of 3' per row of a table with `disturbed` and `repeats` columns ('' where none was flagged)."""
    return [f"{DISTURBED_MARK} {int(d)} of {int(n)}" if d else "" for d, n in zip(table["disturbed"], table["repeats"])]


def headline_table(res: Results) -> pd.DataFrame:
    """Median over repeats per configuration, with the interquartile range of the repeats and how many
    repeats were flagged as disturbed (results.disturbed.DISTURBING_FLAGS). Memory is torch's peak
    allocated (CUDA): a CPU process's peak RSS spans its whole life, the same for every configuration
    it ran, so it is left empty here."""
    ok = res.ok
    if ok.empty:
        return pd.DataFrame()
    ok = flag_disturbed(ok).assign(_peak_memory_mib=ok["peak_mem_allocated_bytes"] / 2**20)
    table = ok.groupby(["machine", *WORKLOAD], dropna=False, sort=False).agg(
        repeats=("throughput", "count"), disturbed=("_disturbed", "sum"), throughput=("throughput", "median"),
        throughput_unit=("throughput_unit", "first"),
        q25=("throughput", lambda s: s.quantile(0.25)), q75=("throughput", lambda s: s.quantile(0.75)),
        samples_per_s=("samples_per_s", "median"), sample_unit=("sample_unit", "first"),
        step_time_ms=("step_time_ms_median", "median"), mpx_per_s=("mpx_per_s", "median"),
        mvox_per_s=("mvox_per_s", "median"), images_per_s=("images_per_s", "median"),
        peak_memory_mib=("_peak_memory_mib", "median"), load=("load", "first"),
        emulated=("precision_support", lambda s: bool((s == "emulated").any())))
    return sort_table(table.reset_index())


def relative_speed(res: Results, baseline: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame, str | None, str]:
    """Each machine against the baseline machine, per configuration both ran, from their repeats:
    ratio of geometric means, 95 % interval and verdict (see results.comparison).

    Returns (one row per configuration and machine, per-machine summary, baseline label, note about
    the baseline choice).
    """
    ok = res.ok
    machines = list(dict.fromkeys(ok["machine"]))
    if len(machines) < 2:
        return pd.DataFrame(), pd.DataFrame(), (machines[0] if machines else None), ""
    chosen, why = _pick_baseline(res, machines, baseline)
    table = with_unit(sort_table(compare_variants(ok, "machine", chosen, keys=["config", *WORKLOAD],
                                                  value="throughput")), ok)
    table = with_repeats(table, ok, "machine", chosen, ["config", *WORKLOAD])
    summary = []
    for m in machines:
        mine = table[table["machine"] == m]
        if m == chosen or mine.empty:
            continue
        ratios = mine["ratio"].dropna()
        summary.append({"machine": m, "speed_vs_baseline": float(np.exp(np.log(ratios).mean())),
                        "min": float(ratios.min()), "max": float(ratios.max()), "shared_configs": len(mine),
                        "summary": verdict_summary(mine)})
    return table, pd.DataFrame(summary), chosen, why


def baseline_matches(machines: list[str], wanted: str) -> list[str]:
    """The machines a baseline names: the one whose label it is, else those whose label contains it
    (any case). One match is a baseline; none or several is not (bench report refuses it)."""
    exact = [m for m in machines if m == wanted]
    return exact or [m for m in machines if wanted.lower() in m.lower()]


def _pick_baseline(res: Results, machines: list[str], wanted: str | None) -> tuple[str, str]:
    if wanted:
        matches = baseline_matches(machines, wanted)
        if len(matches) == 1:
            return matches[0], "chosen by the baseline parameter"
        why = (f"baseline {wanted!r} matches {'several' if matches else 'no'} machine; "
               "using the first result directory's machine instead")
    else:
        why = "the first result directory's machine (set the baseline parameter to choose another)"
    for name in res.names:
        in_dir = res.ok[res.ok["result_dir"] == name]["machine"]
        if len(in_dir):
            return in_dir.iloc[0], why
    return machines[0], why


def amp_speedup_table(res: Results) -> pd.DataFrame:
    """Each reduced precision against fp32 of the same workload on the same machine, from the
    repeats: medians of both, speed-up (ratio of geometric means), its interval and verdict. At the
    same batch and layout, and where a precision ran at others than fp32 (each the most it fits, as
    lambdal measures), also each at its best (best_batch_speedups): `batches` says which ("the same",
    or "each at its best: batch 1,280, channels_last and fp32's batch 640, NCHW")."""
    ok = res.ok
    if ok.empty or "fp32" not in set(ok["precision"]):
        return pd.DataFrame()
    same = compare_variants(ok, "precision", "fp32", value="throughput").assign(batches="the same")
    best = best_batch_speedups(ok)
    table = pd.concat([part for part in (same, best) if len(part)], ignore_index=True) if len(best) else same
    if table.empty:
        return pd.DataFrame()
    table = with_unit(table.rename(columns={"baseline_median": "fp32", "median": "throughput"}), ok)
    others = ["machine", *[k for k in WORKLOAD if k != "precision"]]
    same_part, best_part = table[table["batches"] == "the same"], table[table["batches"] != "the same"]
    parts = [with_repeats(same_part, ok, "precision", "fp32", others)]
    if len(best_part):  # fp32's repeats counted at fp32's own batch
        fp32 = with_repeats(best_part.assign(batch_size=best_part["fp32_batch_size"],
                                             channels_last=best_part["fp32_channels_last"]), ok, "precision", "fp32",
                            others)
        parts.append(with_repeats(best_part, ok, "precision", "fp32", others).assign(
            baseline_repeats=fp32["baseline_repeats"].to_numpy()))
    table = pd.concat([part for part in parts if len(part)], ignore_index=True)
    return sort_table(table.assign(speedup=table["ratio"]))


# What a precision is run at to give its best (lambdal: the largest batch it fits, channels_last for AMP).
BEST_OF = ("batch_size", "channels_last")


def best_batch_speedups(ok: pd.DataFrame) -> pd.DataFrame:
    """Each reduced precision at its own best batch and layout (BEST_OF: the highest median throughput
    among those it ran) against fp32 at fp32's, where the two differ: compare_variants on those rows;
    batch_size and channels_last are the precision's, fp32_batch_size and fp32_channels_last fp32's."""
    keys = ["machine", *[k for k in WORKLOAD if k not in ("precision", *BEST_OF)]]
    ok = ok.dropna(subset=["batch_size"])
    if ok.empty:
        return pd.DataFrame()

    def key(row: dict) -> str:  # (an empty value one way, whether None or NaN)
        return "|".join(str(row[k]) if is_present(row[k]) else "" for k in keys)
    label = pd.Series([key(r) for r in ok[keys].to_dict("records")], index=ok.index)
    medians = ok.assign(_key=label).groupby(["_key", "precision", *BEST_OF])["throughput"].median().reset_index()
    best = medians.loc[medians.groupby(["_key", "precision"])["throughput"].idxmax()]
    best_of = {(k, p): (b, c) for k, p, b, c in zip(best["_key"], best["precision"], best["batch_size"],
                                                     best["channels_last"])}
    at_best = ok[[best_of.get((k, p)) == (b, c) for k, p, b, c in
                  zip(label, ok["precision"], ok["batch_size"], ok["channels_last"])]]
    table = compare_variants(at_best, "precision", "fp32", keys=keys, value="throughput")
    if table.empty:
        return table
    mine = [best_of[(key(r), r["precision"])] for r in table.to_dict("records")]
    fp32 = [best_of[(key(r), "fp32")] for r in table.to_dict("records")]
    table = table.assign(batch_size=[m[0] for m in mine], channels_last=[m[1] for m in mine],
                         fp32_batch_size=[f[0] for f in fp32], fp32_channels_last=[f[1] for f in fp32],
                         batches=[f"each at its best: {setting_text(*m)} and fp32's {setting_text(*f)}"
                                  for m, f in zip(mine, fp32)])
    return table[[m != f for m, f in zip(mine, fp32)]]


def setting_text(batch_size, channels_last) -> str:
    """'batch 1,280, channels_last' / 'batch 640, NCHW'."""
    return f"batch {num_text(batch_size)}, {'channels_last' if channels_last is True else 'NCHW'}"


def with_repeats(table: pd.DataFrame, rows: pd.DataFrame, column: str, baseline, keys: list[str]) -> pd.DataFrame:
    """A comparison table with the repeats each side has, as the Headline counts them, disturbed ones
    included ('3 (3 disturbed)'): n_baseline and n_candidate count only what the verdict judged."""
    if table.empty:
        return table.assign(baseline_repeats=pd.Series(dtype=object), repeats_text=pd.Series(dtype=object))
    def key(row: dict, value) -> tuple:  # missing values (None, NaN) as one
        return tuple(str(v) if is_present(v) else "" for v in (*[row.get(k) for k in keys], value))
    n, disturbed = {}, {}
    for row in rows.to_dict("records"):
        here = key(row, row[column])
        n[here] = n.get(here, 0) + 1
        disturbed[here] = disturbed.get(here, 0) + bool(disturbances(row.get("noise_flags")))

    def text(row: dict, value) -> str:
        here = key(row, value)
        return repeats_text(n[here], disturbed[here]) if here in n else ""
    records = table.to_dict("records")
    return table.assign(baseline_repeats=[text(r, baseline) for r in records],
                        repeats_text=[text(r, r[column]) for r in records])


def repeats_text(repeats, disturbed) -> str:
    """'3', or '3 (2 disturbed)' when some were flagged as disturbed."""
    return f"{int(repeats)}" + (f" ({int(disturbed)} disturbed)" if disturbed else "")


def with_unit(table: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """A comparison table with each workload's throughput unit (a workload is measured in one unit)."""
    if table.empty:
        return table.assign(throughput_unit=pd.Series(dtype=object))
    units = rows.drop_duplicates(["model", "mode"]).set_index(["model", "mode"])["throughput_unit"]
    return table.assign(throughput_unit=[units.get((m, mode)) for m, mode in zip(table["model"], table["mode"])])


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
    for d, name in zip(res.dirs, res.names):
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            for skip in json.loads((d / "plan.json").read_text()).get("skipped") or []:
                what = " ".join(filter(None, (skip["precision"], skip.get("mode"))))  # mode: since schema v3
                lines.append(f"{name}: {what} was not run on {skip['device']} "
                             f"({skip['configurations']} configurations): {skip['reason']}.")
    return lines


def batch_curves(res: Results) -> pd.DataFrame:
    """Median throughput (in the workload's unit) and step time per batch size, for curves with two or more batch sizes."""
    ok = res.ok
    if ok.empty:
        return pd.DataFrame()
    keys = ["machine", *[k for k in WORKLOAD if k != "batch_size"]]
    med = flag_disturbed(ok).groupby([*keys, "batch_size"], dropna=False).agg(
        throughput=("throughput", "median"), throughput_unit=("throughput_unit", "first"),
        step_time_ms=("step_time_ms_median", "median"), repeats=("throughput", "count"),
        disturbed=("_disturbed", "sum")).reset_index()
    sizes = med.groupby(keys, dropna=False)["batch_size"].transform("nunique")
    return sort_table(med[sizes >= 2])


def knee_points(curves: pd.DataFrame, fraction: float = KNEE_FRACTION) -> pd.DataFrame:
    """Per curve: the best throughput and the knee, the smallest batch reaching `fraction` of it."""
    if curves.empty:
        return pd.DataFrame()
    keys = ["machine", *[k for k in WORKLOAD if k != "batch_size" and k in curves]]
    out = []
    for key, curve in curves.groupby(keys, dropna=False, sort=False):
        curve = curve.dropna(subset=["throughput"]).sort_values("batch_size")
        if curve.empty:
            continue
        best = curve.loc[curve["throughput"].idxmax()]
        knee = curve[curve["throughput"] >= fraction * best["throughput"]].iloc[0]
        out.append({**dict(zip(keys, key)), "throughput_unit": best.get("throughput_unit"),
                    **{k: int(curve[k].sum()) for k in ("repeats", "disturbed") if k in curve},
                    "best_batch_size": best["batch_size"], "best_throughput": best["throughput"],
                    "knee_batch_size": knee["batch_size"], "knee_throughput": knee["throughput"],
                    "knee_step_time_ms": knee["step_time_ms"], "batch_sizes": len(curve)})
    return pd.DataFrame(out)


def scaling_table(res: Results) -> pd.DataFrame:
    """DLPerf-style: devices, throughput, speed-up over 1 device (ratio of geometric means of the
    repeats, with its 95 % interval and verdict) and scaling efficiency (speed-up / N, interval / N)."""
    ok = res.ok
    if ok.empty or ok["world_size"].nunique() < 2:
        return pd.DataFrame()
    keys = ["machine", *[k for k in WORKLOAD if k != "world_size"]]
    ok = ok.assign(nnodes=ok["nnodes"].fillna(1))
    med = flag_disturbed(ok).groupby([*keys, "world_size"], dropna=False).agg(
        nodes=("nnodes", "max"), samples_per_s=("samples_per_s", "median"),
        samples_per_s_per_device=("samples_per_s_per_device", "median"),
        repeats=("samples_per_s", "count"), disturbed=("_disturbed", "sum")).reset_index()
    curves = [group.sort_values("world_size") for _, group in med.groupby(keys, dropna=False, sort=False)
              if group["world_size"].nunique() >= 2]
    if not curves:
        return pd.DataFrame()
    speedups = compare_variants(ok, "world_size", 1, keys=keys)
    # Keys as objects on both sides: a field empty in every row (another mode's) is float here, text there.
    table = pd.concat(curves, ignore_index=True).astype({k: object for k in keys}).merge(
        speedups[[*keys, "world_size", "ratio", "low", "high", "verdict", "text"]].astype({k: object for k in keys}),
        on=[*keys, "world_size"], how="left")
    one = table["world_size"] == 1
    table["speedup"] = table["ratio"].where(~one, 1.0)
    table["text"] = table["text"].where(~one, "1 device: the reference")
    for name, source in (("efficiency", "speedup"), ("efficiency_low", "low"), ("efficiency_high", "high")):
        table[name] = table[source] / table["world_size"]
    table["efficiency_text"] = [efficiency_text(n, e, lo, hi) for n, e, lo, hi in zip(
        table["world_size"], table["efficiency"], table["efficiency_low"], table["efficiency_high"])]
    return table.drop(columns="ratio")


def efficiency_text(devices, efficiency, low, high) -> str:
    """'0.90 [0.84-0.97]', '0.90 (too few repeats for an interval)', or '' when there is no 1-device run."""
    if devices == 1:
        return "1 (the reference)"
    if not np.isfinite(efficiency):
        return ""
    if np.isfinite(low) and np.isfinite(high):
        return f"{efficiency:.2f} [{low:.2f}-{high:.2f}]"
    return f"{efficiency:.2f} (too few repeats for an interval)"


def efficiency_table(res: Results) -> pd.DataFrame:
    """Median per configuration of MFU (or why the task has none, and its embedding bytes/s), energy, perf
    per watt and cost, with where the numbers come from."""
    ok = res.ok
    if ok.empty:
        return pd.DataFrame()
    first = lambda s: next((str(v) for v in s if is_present(v)), None)  # noqa: E731
    table = flag_disturbed(ok).groupby(["machine", "config", *WORKLOAD], dropna=False, sort=False).agg(
        repeats=("samples_per_s", "count"), disturbed=("_disturbed", "sum"),
        samples_per_s=("samples_per_s", "median"), achieved_tflops=("achieved_tflops", "median"),
        peak_tflops=("peak_tflops", "median"), mfu=("mfu", "median"), peak_source=("peak_source", first),
        power_w_mean=("power_w_mean", "median"), samples_per_j=("samples_per_j", "median"),
        j_per_1k_samples=("j_per_1k_samples", "median"), samples_per_s_per_w=("samples_per_s_per_w", "median"),
        energy_method=("energy_method", first), price_per_hour=("price_per_hour", "median"), currency=("currency", first),
        cost_per_million_samples=("cost_per_million_samples", "median"), telemetry_note=("telemetry_note", first),
        mfu_note=("mfu_note", first), embedding_bytes_per_s=("embedding_bytes_per_s", "median"),
    ).reset_index()
    return sort_table(table)


def noise_table(res: Results) -> pd.DataFrame:
    """Successful rows whose measurement may have been disturbed, with the reasons recorded in the row."""
    rows = res.ok
    flagged = rows[rows["noise_flags"].notna() & (rows["noise_flags"].astype(str).str.strip() != "")]
    flagged = flagged.assign(noise_flags=flagged["noise_flags"].astype(str).str.replace(";", "; "))  # as read
    return flagged[["machine", "config", "repeat", "noise_flags", "step_time_cv"]]


def failures_table(res: Results) -> pd.DataFrame:
    """Every row whose status is not ok, with its message."""
    rows = res.rows[res.rows["status"] != "ok"]
    # A failed batch_size max search has no size: say 'max' rather than leave the cell empty.
    batch = rows["batch_size"].astype(object).where(rows["batch_size"].notna() | ~rows["batch_searched"], "max")
    return rows.assign(batch_size=batch)[["machine", "model", "mode", "precision", "batch_size", "repeat", "status",
                                          "message", "run_id", "result_dir"]]


def machines_table(res: Results) -> pd.DataFrame:
    """One line per machine: its GPUs and CPU as recorded, the device counts its runs used, its rows."""
    out = []
    for machine, rows in res.rows.groupby("machine", sort=False):
        def first(name, rows=rows):
            return next((v for v in rows[name] if is_present(v)), None) if name in rows else None
        out.append({"machine": machine, "gpu": first("gpu_name"), "gpus": first("gpu_count"),
                    "cpu": first("cpu_model"), "cpus": first("cpu_count"),
                    "world_sizes": sorted(set(rows["world_size"].dropna())), "rows": len(rows),
                    "ok": int((rows["status"] == "ok").sum()), "use": machine_use(rows.iloc[0].to_dict())})
    return pd.DataFrame(out)


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
    for row in res.ok[["machine", "config", "mode", "repeat", "step_times_ms", "noise_flags"]].to_dict("records"):
        disturbed = bool(disturbances(row["noise_flags"]))
        for i, text in enumerate(str(row["step_times_ms"] or "").split()):
            with contextlib.suppress(ValueError):
                value = float(text)
                if math.isfinite(value) and value > 0:
                    out.append({**{k: row[k] for k in ("machine", "config", "mode", "repeat")}, "step": i,
                                "step_ms": value, "disturbed": disturbed})
    return pd.DataFrame(out)
