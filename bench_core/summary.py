"""The analysis behind notebooks/summary.ipynb: load result directories, tables, charts, references.

Notebook cells only call the `show_*` functions. Every string from the data reaches the HTML
through `html.escape` or `DataFrame.to_html(escape=True)`; charts are PNG, so no text from the
data is ever pasted into markup unescaped. Results are read from CSV only (nothing unpickled).
"""
from __future__ import annotations

import contextlib
import functools
import html
import importlib.resources
import io
import json
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench_core import efficiency, results
from bench_core.results import error_message

KNEE_FRACTION = 0.9          # the knee: smallest batch reaching 90% of the curve's best throughput
DISPLAY_DPI = 90             # CSS pixels per inch of a chart as shown
PIXEL_RATIO = 2              # charts are rendered at 2x for sharp text on high-dpi screens
PRECISION_ORDER = ["fp32", "tf32", "fp16", "bf16", "amp-fp16", "amp-bf16"]
EMULATED = "emulated"  # capability.EMULATED, spelled here so the summary never imports torch
EMULATED_SUFFIX = " (emulated)"
MODE_ORDER = ["train", "infer"]
NUMBER_CELL = "text-align:right;white-space:nowrap"
TEXT_CELL = "text-align:left"
# What identifies a workload: the same workload on two machines is comparable.
WORKLOAD = ["model", "mode", "precision", "batch_size", "input_shape", "world_size", "compile", "channels_last"]
NUMERIC = [
    "schema_version", "repeat", "batch_size", "width", "height", "depth", "steps", "min_seconds", "warmup_steps",
    "repeats", "num_threads", "nproc_per_node", "nnodes", "price_per_hour",
    "batch_size_requested", "batch_size_actual", "global_batch_size", "world_size", "device_count", "timed_steps",
    "timed_s", "samples_per_s", "samples_per_s_per_device", "batches_per_s", "mpx_per_s", "mvox_per_s", "s_per_iter",
    "step_time_ms_median", "step_time_ms_mean", "step_time_ms_std", "step_time_ms_p5", "step_time_ms_p95",
    "step_time_cv", "first_step_ms", "compile_s", "warmup_s", "peak_mem_allocated_bytes", "peak_mem_reserved_bytes",
    "peak_rss_bytes", "loss_final", "threads", "power_w_mean", "power_w_max", "energy_j", "gpu_util_pct_mean",
    "sm_clock_mhz_mean", "sm_clock_mhz_min", "gpu_mem_used_bytes", "gpu_temp_c_max", "cpu_util_pct_mean",
    "flops_per_sample", "achieved_tflops", "peak_tflops", "mfu", "samples_per_j", "j_per_1k_samples",
    "samples_per_s_per_w", "cost_per_million_samples",
]
ENVIRONMENT_FIELDS = [
    "host", "device_type", "device_name", "device_count", "gpu_name", "gpu_count", "gpu_memory_bytes",
    "gpu_compute_capability", "driver_version", "cuda_version", "cudnn_version", "cpu_model", "cpu_count",
    "threads", "torch_threads", "os", "python_version", "torch_version", "torchvision_version", "timm_version",
    "smp_version", "project_version", "git_commit", "tf32_enabled", "cudnn_benchmark_enabled", "dist_backend",
    "rank_devices", "result_dir",
]


# -- loading ------------------------------------------------------------------------------

@dataclass
class Results:
    """Every row of every result directory, plus one-line notes on what is missing or odd."""

    rows: pd.DataFrame
    dirs: list[Path]
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> pd.DataFrame:
        return self.rows[self.rows["status"] == "ok"]

    @property
    def machines(self) -> list[str]:
        return list(dict.fromkeys(self.rows["machine"])) if len(self.rows) else []


def load_results(result_dirs) -> Results:
    """Read DIR/results.csv of each directory (as text, then typed); never fails on odd content."""
    dirs = [Path(d) for d in ([result_dirs] if isinstance(result_dirs, (str, Path)) else result_dirs)]
    frames, notes = [], []
    expected = results.columns()
    for d in dirs:
        frame = _read_csv(d / "results.csv", notes)
        if frame is None:
            continue
        if frame.empty:
            notes.append(f"{d}: results.csv has no rows yet.")
            continue
        missing = [c for c in expected if c not in frame.columns]
        if missing:
            versions = ", ".join(sorted(set(frame.get("schema_version", pd.Series(["?"])).fillna("?").astype(str))))
            notes.append(f"{d}: rows of schema version {versions} lack {len(missing)} of the current "
                         f"(v{results.SCHEMA_VERSION}) columns: {_short_list(missing)}; sections that need them "
                         "say so.")
        frame["result_dir"] = str(d)
        frames.append(frame)
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=expected + ["result_dir"])
    rows = _typed(rows.reindex(columns=list(dict.fromkeys(expected + list(rows.columns)))))
    unknown = sorted(set(rows["status"]) - set(results.STATUSES))
    if unknown:
        notes.append(f"Unknown status values {_short_list(unknown)}: shown under Failures as they are.")
    return Results(rows=rows, dirs=dirs, notes=notes)


def _read_csv(path: Path, notes: list[str]) -> pd.DataFrame | None:
    if not path.is_file():
        notes.append(f"{path.parent}: no results.csv (nothing has finished there yet).")
        return None
    bad_lines: list = []
    try:
        # The python engine lets a malformed line (a torn write, a stray edit) be skipped and counted.
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""], engine="python",
                            on_bad_lines=lambda line: bad_lines.append(line) and None)
        if bad_lines:
            notes.append(f"{path.parent}: {len(bad_lines)} malformed line(s) of results.csv skipped.")
        return frame
    except pd.errors.EmptyDataError:
        notes.append(f"{path.parent}: results.csv is empty.")
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as exc:
        notes.append(f"{path.parent}: results.csv could not be read ({error_message(exc)}).")
    return None


def _typed(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows.copy()
    # batch_size max (an explicit search) is text in a numeric column: keep the fact before coercing.
    rows["batch_searched"] = rows["batch_size_requested"].astype(str).str.strip().str.lower() == "max"
    for name in NUMERIC:
        rows[name] = pd.to_numeric(rows[name], errors="coerce")
    rows["status"] = rows["status"].fillna("unknown").astype(str).str.strip().str.lower().replace("", "unknown")
    rows["world_size"] = rows["world_size"].fillna(1)
    rows["compile"] = rows["compile"].fillna("off")
    rows["channels_last"] = rows["channels_last"].astype(str).str.lower().isin(["true", "1"])
    for name in ("model", "mode", "precision", "input_shape", "message", "host", "device_name"):
        rows[name] = rows[name].astype(object).where(rows[name].notna(), None)
    # An emulated precision is its own label in every table and chart: it can't pass for native.
    emulated = rows["precision_support"].astype(str).str.strip().str.lower() == EMULATED
    rows["precision"] = rows["precision"].where(~emulated | rows["precision"].isna(),
                                                rows["precision"].astype(str) + EMULATED_SUFFIX)
    rows["machine"] = [_machine_label(r) for r in rows.to_dict("records")]
    rows["config"] = [_config_label(r) for r in rows.to_dict("records")]
    return rows


def _machine_label(row: dict) -> str:
    names = ("device_name", "gpu_name", "cpu_model", "device_type")
    device = next((str(row[k]) for k in names if _present(row.get(k))), "unknown device")
    host = str(row["host"]) if _present(row.get("host")) else "unknown host"
    return f"{device} · {host}"


def _config_label(row: dict) -> str:
    parts = [str(row.get(k) or "?") for k in ("model", "mode", "precision")]
    parts.append(f"bs{_int_text(row.get('batch_size'))}")
    if _present(row.get("input_shape")):
        parts.append(str(row["input_shape"]))
    if _present(row.get("world_size")) and row["world_size"] > 1:
        parts.append(f"x{_int_text(row['world_size'])} devices")
    if row.get("compile") not in (None, "off") and _present(row.get("compile")):
        parts.append(f"compile={row['compile']}")
    if row.get("channels_last") is True:
        parts.append("channels_last")
    return " ".join(parts)


# -- tables (pure functions: DataFrames in, DataFrames out) ----------------------------------

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
    return _sorted(table.reset_index())


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
    return _sorted(table)


def emulation_notes(res: Results, speedups: pd.DataFrame) -> list[str]:
    """Why emulated precisions are slow, in words, with what they cost here; and which a sweep left out."""
    lines = []
    rows = res.ok[res.ok["precision"].astype(str).str.endswith(EMULATED_SUFFIX)]
    for (machine, precision), group in rows.groupby(["machine", "precision"], sort=False):
        reason = next((str(v) for v in group["precision_support_reason"] if _present(v)), "no reason recorded")
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
    return _sorted(med[sizes >= 2])


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
    first = lambda s: next((str(v) for v in s if _present(v)), None)  # noqa: E731
    table = ok.groupby(["machine", "config", *WORKLOAD], dropna=False, sort=False).agg(
        samples_per_s=("samples_per_s", "median"), achieved_tflops=("achieved_tflops", "median"),
        peak_tflops=("peak_tflops", "median"), mfu=("mfu", "median"), peak_source=("peak_source", first),
        power_w_mean=("power_w_mean", "median"), samples_per_j=("samples_per_j", "median"),
        j_per_1k_samples=("j_per_1k_samples", "median"), samples_per_s_per_w=("samples_per_s_per_w", "median"),
        energy_method=("energy_method", first), price_per_hour=("price_per_hour", "median"),
        cost_per_million_samples=("cost_per_million_samples", "median"), telemetry_note=("telemetry_note", first),
    ).reset_index()
    return _sorted(table)


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
            seen = [_num(v) if isinstance(v, float) else str(v) for v in dict.fromkeys(rows[name]) if _present(v)]
            if name == "gpu_memory_bytes":
                seen = [f"{float(v) / 2**30:.1f} GiB" if _is_number(v) else v for v in seen]
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
        return ", ".join(_num(v) for v in sorted(set(s.dropna()))) or "?"
    table = ok.groupby("machine", sort=False).agg(
        warmup_steps=("warmup_steps", values), min_steps=("steps", values), min_seconds=("min_seconds", values),
        repeats=("repeats", values), timed_steps=("timed_steps", values),
        timer=("device_type", lambda s: ", ".join(sorted({_timer(v) for v in s})))).reset_index()
    return table


def _timer(device_type) -> str:
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


# -- published reference figures --------------------------------------------------------------

@functools.cache
def load_reference() -> pd.DataFrame:
    """The published figures shipped with the package (bench_core/data/reference.csv), one source per row."""
    path = importlib.resources.files("bench_core") / "data" / "reference.csv"
    with importlib.resources.as_file(path) as p:
        table = pd.read_csv(p, dtype=str, keep_default_na=False)
    for name in ("gpus", "nodes", "batch_size", "value", "value_std"):
        table[name] = pd.to_numeric(table[name], errors="coerce")
    return table


def gpu_matches(device_name, gpu_match: str) -> bool:
    """Every token of the reference's `gpu_match` appears in our device name ('v100 16gb' ~ 'Tesla V100-SXM2-16GB')."""
    if not _present(device_name):
        return False
    ours = set(re.split(r"[^a-z0-9]+", str(device_name).lower()))
    return all(token in ours for token in gpu_match.lower().split())


def reference_matches(res: Results) -> pd.DataFrame:
    """Our median beside each published figure with the same GPU, model, mode, precision, input and devices."""
    ok = res.ok
    if ok.empty:
        return pd.DataFrame()
    ref = load_reference()
    keys = ["machine", "device_name", *WORKLOAD]
    med = ok.groupby(keys, dropna=False).agg(samples_per_s=("samples_per_s", "median"),
                                             s_per_iter=("s_per_iter", "median"),
                                             mvox_per_s=("mvox_per_s", "median")).reset_index()
    out = []
    for ours in med.to_dict("records"):
        for r in ref.to_dict("records"):
            if (r["model"] == ours["model"] and r["mode"] == ours["mode"]
                    and ours["precision"] in r["match_precisions"].split()
                    and r["input_shape"] == ours["input_shape"] and r["gpus"] == ours["world_size"]
                    and gpu_matches(ours["device_name"], r["gpu_match"])):
                value = ours.get(r["metric"])
                higher_better = r["metric"] != "s_per_iter"
                speed = (value / r["value"] if higher_better else r["value"] / value) if value else math.nan
                out.append({"machine": ours["machine"], "model": ours["model"], "mode": ours["mode"],
                            "precision": ours["precision"], "input_shape": ours["input_shape"],
                            "devices": ours["world_size"], "batch_size": ours["batch_size"],
                            "ours": value, "source": r["source"], "gpu": r["gpu"],
                            "published_precision": r["precision"], "published_batch_size": r["batch_size"],
                            "published": r["value"], "published_std": r["value_std"], "unit": r["unit"],
                            "ours_vs_published": speed, "note": r["note"], "url_or_citation": r["url_or_citation"]})
    return pd.DataFrame(out)


def reference_scaling() -> pd.DataFrame:
    """DLPerf's scaling runs as a table like ours (speed-up and efficiency over its 1-GPU run)."""
    ref = load_reference()
    ref = ref[ref["source"] == "DLPerf"]
    out = []
    for _, group in ref.groupby(["gpu", "precision", "batch_size"], sort=False):
        base = group[group["gpus"] == 1]["value"]
        group = group.assign(speedup=group["value"] / (float(base.iloc[0]) if len(base) else math.nan))
        group["efficiency"] = group["speedup"] / group["gpus"]
        out.append(group)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


# -- display helpers (the only place that makes HTML) --------------------------------------------

def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _display(obj) -> None:
    from IPython.display import display
    display(obj)


def show_html(markup: str) -> None:
    from IPython.display import HTML
    _display(HTML(markup))


def note(text: str) -> None:
    """One escaped line of text (used for 'no data' and caveats)."""
    show_html(f'<p style="color:#555"><em>{esc(text)}</em></p>')


def paragraph(text: str) -> None:
    show_html(f"<p>{esc(text)}</p>")


def table_html(table: pd.DataFrame, columns: dict[str, str] | None = None) -> str:
    """An HTML table with every cell escaped; numbers formatted for reading and right-aligned.

    `columns` maps column -> header (and picks and orders the columns shown).
    """
    if columns:
        table = table[[c for c in columns if c in table.columns]].rename(columns=columns)
    numeric = [pd.api.types.is_numeric_dtype(table[c]) and not pd.api.types.is_bool_dtype(table[c])
               for c in table.columns]
    head = "".join(f'<th style="text-align:{"right" if n else "left"}">{esc(c)}</th>'
                   for c, n in zip(table.columns, numeric))
    body = []
    for values in table.itertuples(index=False, name=None):
        cells = "".join(f'<td style="{NUMBER_CELL if n else TEXT_CELL}">{esc(_cell_text(v, n))}</td>'
                        for v, n in zip(values, numeric))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _cell_text(value, numeric: bool) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if numeric:
        return _num(value)
    return str(value) if _present(value) else ""


def show_table(table: pd.DataFrame, columns: dict[str, str] | None = None) -> None:
    show_html(table_html(table, columns))


def show_figure(fig, alt: str) -> None:
    """Embed a chart as a 2x PNG shown at its natural size (base64 in the page: it opens offline)."""
    import base64
    import matplotlib.pyplot as plt
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DISPLAY_DPI * PIXEL_RATIO, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    png = buffer.getvalue()
    width_px = int.from_bytes(png[16:20], "big") // PIXEL_RATIO  # the PNG IHDR chunk holds the width
    show_html(f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}" width="{width_px}" '
              f'style="max-width:100%;height:auto" alt="{esc(alt)}">')


def section(func):
    """A section that cannot be drawn says why in one line instead of stopping the report."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            with _plot_style():
                return func(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the rest of the report must still render
            import matplotlib.pyplot as plt
            plt.close("all")
            note(f"This section could not be drawn from these results ({error_message(exc)}).")
    return wrapper


@contextlib.contextmanager
def _plot_style():
    import matplotlib
    import seaborn as sns
    with warnings.catch_warnings():
        # Library deprecation chatter would print to stderr, a red box in the HTML; it is not about our data.
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        with matplotlib.rc_context({"figure.max_open_warning": 0}), sns.axes_style("whitegrid"), \
                sns.plotting_context("notebook", font_scale=0.9):
            yield


# -- sections (called by the notebook, one per section) ------------------------------------------

@section
def show_overview(res: Results, title: str = "") -> None:
    rows = res.rows
    lines = [f"<p><strong>{esc(title)}</strong></p>" if title else ""]
    if rows.empty:
        lines.append(f"<p>No result rows in {esc(', '.join(str(d) for d in res.dirs))}: every section below "
                     "says what is missing. Run <code>bench sweep</code> or <code>bench run --out DIR</code> "
                     "first.</p>")
    else:
        counts = rows["status"].value_counts()
        status = ", ".join(f"{n} {esc(s)}" for s, n in counts.items())
        lines.append(f"<p>{len(rows)} result rows ({status}) from {len(res.dirs)} result "
                     f"director{'y' if len(res.dirs) == 1 else 'ies'}, {len(res.machines)} machine"
                     f"{'' if len(res.machines) == 1 else 's'}, {rows['config'].nunique()} configurations. "
                     "Throughput is the median over repeats; the spread is the interquartile range of the "
                     "repeats.</p>")
    show_html("".join(lines))
    per_dir = []
    for d in res.dirs:
        in_dir = rows[rows["result_dir"] == str(d)]
        per_dir.append({"result directory": str(d), "rows": len(in_dir), "ok": int((in_dir["status"] == "ok").sum()),
                        "not ok": int((in_dir["status"] != "ok").sum()),
                        "machines": " | ".join(dict.fromkeys(in_dir["machine"])),
                        "measured (UTC)": _date_range(in_dir["timestamp"]),
                        "schema versions": ", ".join(_num(v) for v in sorted(set(in_dir["schema_version"].dropna())))})
    show_table(pd.DataFrame(per_dir))
    for text in res.notes:
        note(text)


@section
def show_headline(res: Results) -> None:
    table = headline_table(res)
    if table.empty:
        note("No successful rows: nothing to summarise (see Failures for what went wrong).")
        return
    table["IQR of repeats"] = [f"{_num(a)} – {_num(b)}" for a, b in zip(table["q25"], table["q75"])]
    columns = {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision",
               "batch_size": "batch / device", "input_shape": "input", "world_size": "devices",
               "compile": "compile", "channels_last": "channels_last", "samples_per_s": "samples/s (median)",
               "IQR of repeats": "IQR of repeats", "step_time_ms": "step ms (median)", "mpx_per_s": "MPx/s",
               "mvox_per_s": "MVox/s", "peak_memory_mib": "peak memory MiB", "repeats": "repeats"}
    show_table(_drop_constant(table, columns, keep=("model", "mode", "precision", "batch_size")), columns)
    searched = res.rows[(res.rows["status"] == "ok") & res.rows["batch_searched"]]
    for _, row in searched.drop_duplicates(["machine", "config"]).iterrows():
        note(f"{row['config']} on {row['machine']}: batch_size max, {row.get('batch_search') or 'found by search'}")
    failed = res.rows[res.rows["status"] != "ok"]["config"].nunique()
    if failed:
        note(f"{failed} configuration(s) have rows that did not succeed: see Failures.")


@section
def show_relative_speed(res: Results, baseline: str | None = None) -> None:
    med, per_machine, chosen, why = relative_speed(res, baseline)
    if med.empty:
        note(f"One machine only ({chosen or 'none'}): add another machine's result directory "
             "(bench report DIR_A DIR_B) to compare them here." if chosen else "No successful rows to compare.")
        return
    items = "".join(
        f"<li><strong>{esc(r['machine'])}</strong> runs at <strong>{r['speed_vs_baseline']:.2f}×</strong> the "
        f"baseline's throughput (geometric mean over {r['shared_configs']} shared configuration"
        f"{'' if r['shared_configs'] == 1 else 's'}; range {r['min']:.2f}× – {r['max']:.2f}×)</li>"
        for r in per_machine.to_dict("records"))
    items = items or "<li>No configuration ran on both the baseline and another machine.</li>"
    show_html(f"<p>Baseline: <strong>{esc(chosen)}</strong> ({esc(why)}).</p><ul>{items}</ul>")
    ratio = med.div(med[chosen], axis=0)
    shown = ratio.dropna(how="all")
    if not shown.empty:
        _relative_heatmap(shown)
    table = med.reset_index()
    for m in med.columns:
        table[m] = [f"{_num(v)} ({r:.2f}×)" if pd.notna(r) else _num(v) for v, r in zip(med[m], ratio[m])]
    table.columns = ["configuration", *[f"{m}: samples/s (× baseline)" for m in med.columns]]
    show_table(table)


def _relative_heatmap(ratio: pd.DataFrame) -> None:
    """Configurations x machines, each cell the speed over the baseline; blue faster, red slower."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    fig, ax = plt.subplots(figsize=(2.2 + 1.9 * len(ratio.columns), 1.0 + 0.42 * len(ratio)))
    annot = ratio.map(lambda v: "" if pd.isna(v) else f"{v:.2f}×")
    log_ratio = np.log2(ratio.astype(float))
    limit = max(1.0, float(np.nanmax(np.abs(log_ratio.to_numpy()))))
    sns.heatmap(log_ratio, annot=annot, fmt="", cmap="RdBu", center=0, vmin=-limit, vmax=limit, cbar=False,
                linewidths=0.5, ax=ax)
    ax.set(xlabel="", ylabel="", title="Throughput relative to the baseline (median samples/s; >1 is faster)")
    ax.set_xticklabels([_wrap(t.get_text()) for t in ax.get_xticklabels()], rotation=0)
    show_figure(fig, "Heatmap: throughput of each machine relative to the baseline, per configuration")


@section
def show_throughput(res: Results) -> None:
    import seaborn as sns
    data, caveat = _chart_rows(res.ok)
    if data.empty:
        note("No successful rows: no throughput chart.")
        return
    several = data["machine"].nunique() > 1
    hue = "machine" if several else "precision"
    g = sns.catplot(data=data, kind="point", x="label", y="samples_per_s", hue=hue, col="mode",
                    row="precision" if several else None, order=sorted(data["label"].unique()),
                    hue_order=_order(data[hue], PRECISION_ORDER if hue == "precision" else None),
                    col_order=_order(data["mode"], MODE_ORDER),
                    row_order=_order(data["precision"], PRECISION_ORDER) if several else None,
                    estimator="median", errorbar=("pi", 50), dodge=0.35, linestyle="none", marker="o",
                    capsize=0.12, height=3.4, aspect=max(1.2, 0.28 * data["label"].nunique()), sharey=True)
    g.set(yscale="log")
    for ax in g.axes.flat:
        _plain_log_ticks(ax.yaxis)
    g.set_axis_labels("", "samples/s (log scale)")
    g.set_titles("{col_name}" if not several else "{row_name} · {col_name}")
    _rotate(g)
    g.figure.suptitle("Throughput: median of repeats, bars = interquartile range", y=1.03)
    show_figure(g.figure, "Throughput by model and precision, train and infer, log scale")
    if caveat:
        note(caveat)


@section
def show_amp_speedup(res: Results) -> None:
    import seaborn as sns
    table = amp_speedup_table(res)
    if table.empty:
        note("No AMP speed-up: it needs fp32 and a reduced precision (amp-fp16, amp-bf16, fp16, bf16, tf32) "
             "of the same workload on the same machine.")
        for line in emulation_notes(res, table):
            paragraph(line)
        return
    table = table.assign(label=_labels(table))
    several = table["machine"].nunique() > 1
    g = sns.catplot(data=table, kind="bar", x="label", y="speedup", hue="precision", col="mode",
                    row="machine" if several else None, order=sorted(table["label"].unique()),
                    hue_order=_order(table["precision"], PRECISION_ORDER), col_order=_order(table["mode"], MODE_ORDER),
                    errorbar=None, height=3.2, aspect=max(1.2, 0.3 * table["label"].nunique()), sharey=True)
    for ax in g.axes.flat:
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
        for container in ax.containers:
            ax.bar_label(container, fmt="%.2f×", fontsize=8, padding=2)
    g.set_axis_labels("", "speed-up over fp32 (×)")
    g.set_titles("{col_name}" if not several else "{row_name} · {col_name}")
    _rotate(g)
    show_figure(g.figure, "Speed-up of each reduced precision over fp32")
    show_table(table, _for(res, {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision",
                       "batch_size": "batch / device", "input_shape": "input", "world_size": "devices",
                       "fp32": "fp32 samples/s", "samples_per_s": "samples/s", "speedup": "speed-up over fp32"}))
    for line in emulation_notes(res, table):
        paragraph(line)


@section
def show_batch_curves(res: Results) -> None:
    import matplotlib.pyplot as plt
    import seaborn as sns
    curves = batch_curves(res)
    if curves.empty:
        note("No batch-size curve: no workload ran at two or more batch sizes (params/batch-sweep.yaml does).")
        return
    knees = knee_points(curves)
    paragraph(f"The knee (★) is the smallest batch size whose median throughput reaches "
              f"{KNEE_FRACTION:.0%} of the best throughput on that curve: past it, a larger batch buys little "
              "speed and costs memory and step time.")
    curves = curves.assign(curve=_labels(curves, always=("precision",), never=("batch_size",)))
    knees = knees.assign(curve=_labels(knees, always=("precision",)))
    several = curves["machine"].nunique() > 1
    panels = [(m, mode) for m in dict.fromkeys(curves["machine"]) for mode in _order(curves["mode"], MODE_ORDER)
              if ((curves["machine"] == m) & (curves["mode"] == mode)).any()]
    metrics = (("samples_per_s", "knee_samples_per_s", "samples/s (median)"),
               ("step_time_ms", "knee_step_time_ms", "step time, ms (median)"))
    fig, axes = plt.subplots(len(panels), 2, figsize=(11, 3.7 * len(panels)), squeeze=False)
    for i, (machine, mode) in enumerate(panels):
        part = curves[(curves["machine"] == machine) & (curves["mode"] == mode)]
        k = knees[(knees["machine"] == machine) & (knees["mode"] == mode)]
        for j, (metric, knee_metric, ylabel) in enumerate(metrics):
            ax = axes[i][j]
            sns.lineplot(data=part, x="batch_size", y=metric, hue="curve", marker="o", ax=ax)
            ax.scatter(k["knee_batch_size"], k[knee_metric], marker="*", s=260, color="black", zorder=5,
                       label=f"knee ({KNEE_FRACTION:.0%} of best)")
            ax.set_xscale("log", base=2)
            sizes = sorted(part["batch_size"].dropna().unique())
            ax.set_xticks(sizes, [_num(v) for v in sizes])
            ax.minorticks_off()
            ax.set(xlabel="batch size per device (log scale)", ylabel=ylabel,
                   title=_wrap(f"{mode} · {machine}" if several else mode, 60))
            ax.legend(fontsize=7)
    fig.tight_layout()
    show_figure(fig, "Throughput and step time against batch size; the knee is marked with a star")
    show_table(knees, _for(res, {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision",
                       "input_shape": "input", "world_size": "devices", "batch_sizes": "batch sizes tried",
                       "knee_batch_size": "knee batch", "knee_samples_per_s": "samples/s at knee",
                       "knee_step_time_ms": "step ms at knee", "best_batch_size": "best batch",
                       "best_samples_per_s": "best samples/s"}))


@section
def show_memory(res: Results) -> None:
    import seaborn as sns
    data, caveat = _chart_rows(res.ok)
    if data.empty:
        note("No successful rows: no memory chart.")
        return
    data = data.assign(memory_mib=peak_memory_mib(data)).dropna(subset=["memory_mib"])
    if data.empty:
        note("No memory was recorded in these rows (peak_mem_allocated_bytes and peak_rss_bytes are empty).")
        return
    several = data["machine"].nunique() > 1
    g = sns.catplot(data=data, kind="bar", x="label", y="memory_mib", hue="machine" if several else "precision",
                    col="mode", row="precision" if several else None, order=sorted(data["label"].unique()),
                    hue_order=None if several else _order(data["precision"], PRECISION_ORDER),
                    col_order=_order(data["mode"], MODE_ORDER), estimator="median", errorbar=None,
                    height=3.2, aspect=max(1.2, 0.28 * data["label"].nunique()))
    g.set_axis_labels("", "peak memory, MiB")
    g.set_titles("{col_name}" if not several else "{row_name} · {col_name}")
    _rotate(g)
    show_figure(g.figure, "Peak memory by model and precision")
    kinds = set(data["device_type"].dropna())
    if kinds - {"cuda"}:
        note("On CPU the figure is the peak resident memory (RSS) of the process that ran the configuration, over "
             "its whole life: configurations that shared a process carry the peak of the ones before them.")
    if "cuda" in kinds:
        note("On CUDA the figure is torch's peak allocated memory during the run (reserved and device-used "
             "memory are in results.csv).")
    if caveat:
        note(caveat)


@section
def show_step_times(res: Results) -> None:
    import matplotlib.pyplot as plt
    import seaborn as sns
    steps = step_times_long(res)
    if steps.empty:
        note("No per-step times in these rows (the step_times_ms column is empty or absent).")
        return
    several = steps["machine"].nunique() > 1
    steps = steps.assign(who=steps["config"] + (" · " + steps["machine"] if several else ""))
    order = sorted(steps["who"].unique())
    fig, ax = plt.subplots(figsize=(9.5, 1.2 + 0.38 * len(order)))
    sns.boxplot(data=steps, y="who", x="step_ms", order=order, whis=(0, 100), showfliers=False, color="#cfe0f3",
                log_scale=True, ax=ax)
    sns.stripplot(data=steps, y="who", x="step_ms", order=order, size=3, color="#1f4e79", alpha=0.6, jitter=0.2,
                  ax=ax)
    _plain_log_ticks(ax.xaxis)
    ax.set(xlabel="step time, ms (log scale)", ylabel="",
           title="Every timed step of every repeat (box: quartiles, whiskers: min–max)")
    show_figure(fig, "Distribution of step times per configuration")


@section
def show_scaling(res: Results) -> None:
    import matplotlib.pyplot as plt
    table = scaling_table(res)
    reference = reference_scaling()
    matched = _matched_reference_scaling(table, reference, _device_names(res))
    if table.empty:
        note("No scaling data: every configuration ran on one device count. A sweep over devices "
             "(params/scaling.yaml, or bench run --nproc-per-node N) fills this section.")
    else:
        table = table.assign(curve=_labels(table, always=("precision",), never=("world_size",)))
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        top = float(table["world_size"].max())
        ax.plot([1, top], [1, top], color="grey", linestyle="--", label="ideal (speed-up = devices)")
        for label, group in table.groupby("curve", sort=False):
            ax.plot(group["world_size"], group["speedup"], marker="o", label=_wrap(label, 50))
        for label, group in (matched.groupby("label", sort=False) if not matched.empty else []):
            group = group[group["gpus"] <= max(top, 8)]
            ax.plot(group["gpus"], group["speedup"], marker="s", linestyle=":", color="black", alpha=0.6,
                    label=label)
        devices = sorted(set(table["world_size"].dropna()) | {1})
        ax.set_xticks(devices, [_num(v) for v in devices])
        ax.set(xlabel="devices (world size)", ylabel="speed-up over 1 device", title="Scaling")
        ax.legend(fontsize=7)
        show_figure(fig, "Speed-up against the number of devices, with the ideal line")
        show_table(table, _for(res, {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision",
                           "batch_size": "batch / device", "input_shape": "input", "world_size": "devices",
                           "nodes": "nodes", "samples_per_s": "samples/s", "samples_per_s_per_device":
                           "samples/s per device", "speedup": "speed-up vs 1 device",
                           "efficiency": "scaling efficiency", "repeats": "repeats"}))
        if table["speedup"].isna().any():
            note("Speed-up and efficiency are empty where the same workload has no 1-device run.")
    columns = {"source": "source", "gpu": "GPU", "precision": "precision", "batch_size": "batch / GPU",
               "gpus": "GPUs", "nodes": "nodes", "value": "images/s", "speedup": "speed-up",
               "efficiency": "scaling efficiency", "note": "note"}
    if not matched.empty:
        paragraph("Published DLPerf figures for the same GPU and workload, beside ours:")
        show_table(matched, columns)
    elif not reference.empty:
        note("No result here ran on DLPerf's hardware (Tesla V100-SXM2-16GB, ResNet-50 training at 224 px); "
             "its published scaling, for context:")
        show_html(f"<details><summary>DLPerf ResNet-50 v1.5 scaling on V100 ({len(reference)} rows)</summary>"
                  f"{table_html(reference, columns)}</details>")


def _matched_reference_scaling(table: pd.DataFrame, reference: pd.DataFrame, devices: dict) -> pd.DataFrame:
    """DLPerf's rows for the GPU and workload of one of our scaling curves."""
    if table.empty or reference.empty:
        return pd.DataFrame()
    out = []
    for ours in table.drop_duplicates(["machine", "model", "mode", "precision", "input_shape"]).to_dict("records"):
        device = devices.get(ours["machine"])
        for (gpu, precision), group in reference.groupby(["gpu", "precision"], sort=False):
            r = group.iloc[0]
            if (gpu_matches(device, r["gpu_match"]) and r["model"] == ours["model"] and r["mode"] == ours["mode"]
                    and ours["precision"] in r["match_precisions"].split()
                    and r["input_shape"] == ours["input_shape"]):
                out.append(group.assign(label=f"DLPerf {gpu} {precision} (published)"))
    return pd.concat(out, ignore_index=True).drop_duplicates(["gpu", "precision", "gpus"]) if out else pd.DataFrame()


@section
def show_efficiency(res: Results) -> None:
    import seaborn as sns
    table = efficiency_table(res)
    if table.empty:
        note("No successful rows: no efficiency figures.")
        return
    wanted = {"MFU": "mfu", "energy per sample": "j_per_1k_samples", "perf per watt": "samples_per_s_per_w",
              "cost per million samples": "cost_per_million_samples"}
    for what, column in wanted.items():
        if table[column].notna().any():
            continue
        reason = {"mfu": "no peak FLOP/s is known for these devices (run `bench peak` on a CPU machine; "
                         "GPUs need an entry in the peak table)",
                  "j_per_1k_samples": "no energy or power was measured (no NVML GPU, no readable RAPL counter)",
                  "samples_per_s_per_w": "no power was measured",
                  "cost_per_million_samples": "no price was given (--price-per-hour, or per device in the sweep "
                                              "file)"}[column]
        note(f"No {what}: {reason}.")
    notes = sorted({str(v) for v in table["telemetry_note"] if _present(v)})
    if notes:
        note("Telemetry notes: " + "; ".join(notes))
    several = table["machine"].nunique() > 1
    table = table.assign(mfu_pct=table["mfu"] * 100, label=_labels(table, always=("precision",) if several else ()))
    for column, ylabel in (("mfu_pct", "MFU, % of peak"), ("j_per_1k_samples", "joules per 1000 samples"),
                           ("cost_per_million_samples", "cost per million samples")):
        data = table.dropna(subset=[column])
        if data.empty:
            continue
        g = sns.catplot(data=data, kind="bar", x="label", y=column, hue="machine" if several else "precision",
                        col="mode", order=sorted(data["label"].unique()), col_order=_order(data["mode"], MODE_ORDER),
                        hue_order=None if several else _order(data["precision"], PRECISION_ORDER),
                        estimator="median", errorbar=None,
                        height=3.2, aspect=max(1.2, 0.28 * data["label"].nunique()))
        g.set_axis_labels("", ylabel)
        g.set_titles("{col_name}")
        _rotate(g)
        show_figure(g.figure, ylabel)
    columns = {"machine": "machine", "config": "configuration", "samples_per_s": "samples/s",
               "achieved_tflops": "achieved TFLOP/s", "peak_tflops": "peak TFLOP/s", "mfu_pct": "MFU %",
               "peak_source": "peak source", "power_w_mean": "mean power W", "samples_per_j": "samples/J",
               "j_per_1k_samples": "J / 1k samples", "samples_per_s_per_w": "samples/s per W",
               "energy_method": "energy from", "price_per_hour": "price / hour",
               "cost_per_million_samples": "cost / million samples"}
    show_table(table, {k: v for k, v in columns.items() if k in ("machine", "config", "samples_per_s")
                       or table[k].notna().any()})
    flagged = noise_table(res)
    if flagged.empty:
        note("Noise flags: no row was flagged (checks: step-time CV, throttling, clocks, other processes "
             "on the device).")
    else:
        kinds = pd.Series([part.split("(")[0].strip() for flags in flagged["noise_flags"]
                           for part in str(flags).split(";") if part.strip()]).value_counts()
        paragraph(f"Noise flags: {len(flagged)} of {len(res.ok)} successful rows may have been disturbed ("
                  + ", ".join(f"{name}: {n}" for name, n in kinds.items())
                  + "); they are kept in every figure above, never dropped.")
        show_html(f"<details><summary>The {len(flagged)} flagged rows</summary>"
                  + table_html(flagged, _for(res, {"machine": "machine", "config": "configuration", "repeat": "repeat",
                                         "noise_flags": "flags", "step_time_cv": "step-time CV"}))
                  + "</details>")


@section
def show_references(res: Results) -> None:
    matched = reference_matches(res)
    ref = load_reference()
    if not matched.empty:
        paragraph("Our median beside each published figure for the same GPU, model, mode, precision, input size "
                  "and device count (ours vs published > 1: ours is faster).")
        show_table(matched, _for(res, {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision",
                             "input_shape": "input", "devices": "devices", "batch_size": "batch",
                             "ours": "ours", "published": "published", "published_std": "± (published)",
                             "unit": "unit", "ours_vs_published": "ours vs published", "source": "source",
                             "gpu": "published GPU", "published_precision": "published precision",
                             "published_batch_size": "published batch", "note": "note"}))
    else:
        devices = sorted(set(_device_names(res).values())) or ["none"]
        note(f"No matching reference hardware: these results ran on {', '.join(devices)}; the published figures "
             "are for NVIDIA GPUs (a match needs the same GPU, model, mode, precision, input size and device "
             "count).")
    sources = ref.groupby("source", sort=False)["url_or_citation"].first()
    show_html("<p>Sources: " + "; ".join(f"<strong>{esc(s)}</strong>: {esc(u)}" for s, u in sources.items())
              + "</p>")
    show_html(f"<details><summary>All {len(ref)} published figures (click to open)</summary>"
              + table_html(ref, {"source": "source", "gpu": "GPU", "gpus": "GPUs", "model": "model", "mode": "mode",
                                 "precision": "precision", "batch_size": "batch / GPU", "input_shape": "input",
                                 "value": "value", "value_std": "±", "unit": "unit", "note": "note"})
              + "</details>")


@section
def show_failures(res: Results) -> None:
    table = failures_table(res)
    if table.empty:
        note("No failures: every row has status ok." if len(res.rows) else "No rows, so no failures either.")
        return
    counts = table["status"].value_counts()
    paragraph(f"{len(table)} row(s) did not succeed: " + ", ".join(f"{n} {s}" for s, n in counts.items())
              + ". Failures are results: each keeps its status and message.")
    show_table(table, _for(res, {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision",
                       "batch_size": "batch", "repeat": "repeat", "status": "status", "message": "message",
                       "run_id": "run id", "result_dir": "result directory"}))


@section
def show_environment(res: Results) -> None:
    table = environment_table(res)
    if table.empty:
        note("No rows, so no environment to show.")
        return
    show_table(table)


@section
def show_method_settings(res: Results) -> None:
    table = method_settings(res)
    if table.empty:
        note("No successful rows: no timing settings to show.")
        return
    paragraph("The settings these results used:")
    show_table(table, {"machine": "machine", "timer": "timer", "warmup_steps": "warm-up steps (untimed)",
                       "min_steps": "min timed steps", "min_seconds": "min timed seconds",
                       "timed_steps": "timed steps that ran", "repeats": "repeats"})
    paragraph("Noise flags: a row is flagged, never dropped, when one of these holds. Each flag in the "
              "Efficiency section carries the measured value beside its threshold.")
    show_table(pd.DataFrame(efficiency.noise_rules()), {"flag": "flag", "threshold": "threshold", "why": "why"})
    paragraph("Peaks (MFU): on a GPU the dense datasheet figure for the precision's tensor cores; on a CPU the "
              "best of a large linear and a 3x3 convolution measured on the precision's own kernel path "
              "(autocast where the workload autocasts). No peak is below the device's fp32 peak: the hardware "
              "can always compute in fp32, so an emulated precision is divided by the fp32 peak. An MFU above 1 "
              "is never shown: the row is flagged instead.")


# -- small helpers ------------------------------------------------------------------------------

def _chart_rows(ok: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """One batch size per (machine, model, mode, precision, input) on the fewest devices: the largest that ran."""
    if ok.empty:
        return ok, ""
    single = ok[ok["world_size"] == ok.groupby("machine")["world_size"].transform("min")]
    keys = ["machine", "model", "mode", "precision", "input_shape", "compile", "channels_last"]
    largest = single.groupby(keys, dropna=False)["batch_size"].transform("max")
    data = single[single["batch_size"] == largest]
    caveat = ""
    if len(data) < len(ok):
        caveat = ("This chart shows, for each model, mode and precision, the largest batch size that ran on the "
                  "fewest devices; other batch sizes and device counts are under Batch size and Scaling.")
    return data.assign(label=_labels(data, never=("batch_size", "world_size"))), caveat


def _labels(table: pd.DataFrame, always: tuple[str, ...] = (), never: tuple[str, ...] = ()) -> list[str]:
    """Short labels: the model, the `always` columns, plus whatever else varies in this table."""
    optional = ["input_shape", "batch_size", "world_size", "compile", "channels_last"]
    varying = [c for c in optional if c in table and c not in never and table[c].nunique(dropna=False) > 1]
    fmt = {"precision": str, "mode": str, "input_shape": str, "batch_size": lambda v: f"bs{_int_text(v)}",
           "world_size": lambda v: f"x{_int_text(v)}", "compile": lambda v: f"compile={v}",
           "channels_last": lambda v: "channels_last" if v else "nchw"}
    return [" ".join([str(row.get("model") or "?")]
                     + [fmt[c](row.get(c)) if _present(row.get(c)) else "?" for c in (*always, *varying)])
            for row in table.to_dict("records")]


def _for(res: Results, columns: dict[str, str]) -> dict[str, str]:
    """The columns to show: no machine column when every row comes from one machine."""
    return {k: v for k, v in columns.items() if k != "machine" or len(res.machines) > 1}


def _device_names(res: Results) -> dict[str, str]:
    """machine label -> the device name in its rows (what reference figures are matched against)."""
    return {m: str(d) for m, d in zip(res.rows["machine"], res.rows["device_name"]) if _present(d)}


def _date_range(stamps: pd.Series) -> str:
    days = sorted({str(v)[:10] for v in stamps if _present(v)})
    return "" if not days else days[0] if len(days) == 1 else f"{days[0]} – {days[-1]}"


def _order(values: pd.Series, preferred: list[str] | None) -> list[str]:
    present = list(dict.fromkeys(v for v in values if _present(v)))
    if not preferred:
        return sorted(present)
    return [p for p in preferred if p in present] + sorted(v for v in present if v not in preferred)


def _sorted(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return table
    rank = {p: i for i, p in enumerate(PRECISION_ORDER)}
    keys = [k for k in ("machine", "model", "mode", "precision", "batch_size", "world_size") if k in table]
    order = table.assign(_mode=table["mode"].map({"train": 0, "infer": 1}) if "mode" in table else 0,
                         _precision=table["precision"].map(rank) if "precision" in table else 0)
    keys = [{"mode": "_mode", "precision": "_precision"}.get(k, k) for k in keys]
    return table.loc[order.sort_values(keys, na_position="last").index].reset_index(drop=True)


def _drop_constant(table: pd.DataFrame, columns: dict[str, str], keep: tuple[str, ...]) -> pd.DataFrame:
    """Hide columns that say the same thing on every row (machine when there is one, compile when off)."""
    drop = [c for c in columns if c in table and c not in keep and table[c].nunique(dropna=False) <= 1
            and c in ("machine", "world_size", "compile", "channels_last", "input_shape", "mpx_per_s", "mvox_per_s")]
    drop += [c for c in ("mpx_per_s", "mvox_per_s", "peak_memory_mib") if c in table and table[c].isna().all()]
    return table.drop(columns=list(dict.fromkeys(drop)))


def _plain_log_ticks(axis) -> None:
    """Log-axis tick labels as plain numbers (300, 1,000), not powers of ten."""
    from matplotlib import ticker
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: _num(v)))
    axis.set_minor_formatter(ticker.LogFormatter(labelOnlyBase=False, minor_thresholds=(1.5, 0.6)))


def _rotate(g) -> None:
    for ax in g.axes.flat:
        for label in ax.get_xticklabels():
            label.set_rotation(30)
            label.set_horizontalalignment("right")


def _wrap(text: str, width: int = 28) -> str:
    import textwrap
    return "\n".join(textwrap.wrap(str(text), width)) or str(text)


def _num(value) -> str:
    """A number as a person reads it: 22,551 / 367.3 / 1.56 / 0.000117."""
    if value is None or isinstance(value, str):
        return value or ""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(v):
        return ""
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 0.01:
        return f"{v:.3g}"
    return f"{v:.2e}"


def _int_text(value) -> str:
    return _num(value) if _is_number(value) else str(value)


def _is_number(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _present(value) -> bool:
    if value is None:
        return False
    if value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return False
    return str(value).strip() != ""  # the text "nan" is a status, not a missing value


def _short_list(items, limit: int = 6) -> str:
    items = [str(i) for i in items]
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


