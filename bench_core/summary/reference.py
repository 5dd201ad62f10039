"""Published figures (bench_core/data/reference.csv) and notebook-bench's own runs on lent GPUs
(bench_core/data/measured.csv, from gpu/runs/), matched against our rows, and ours compared with
each: with a 95 % interval where the figure has a spread, a plain ratio where not.
"""
from __future__ import annotations

import functools
import importlib.resources
import math
import re
import statistics

import numpy as np
import pandas as pd

from bench_core.predict.specs import spec_for_device
from bench_core.results.bound import comparison_note
from bench_core.results.disturbed import disturbances
from bench_core.results.comparison import (
    CONFIDENCE,
    DISTURBED,
    MIN_EFFECT,
    Comparison,
    decide,
    t_quantile,
    usable,
)
from bench_core.summary.load import WORKLOAD, Results, config_label, load_text
from bench_core.summary.text import is_number, is_present, num_text


MEASURED_SOURCE = "notebook-bench"
MEASURED_CSV = "measured.csv"


@functools.cache
def load_reference() -> pd.DataFrame:
    """The published figures shipped with the package (bench_core/data/reference.csv), one source per row,
    and after them what notebook-bench itself measured on real GPUs (measured.csv: see measured_lines)."""
    tables = []
    for name in ("reference.csv", MEASURED_CSV):
        path = importlib.resources.files("bench_core") / "data" / name
        with importlib.resources.as_file(path) as p:
            tables.append(pd.read_csv(p, dtype=str, keep_default_na=False))
    table = pd.concat(tables, ignore_index=True)
    for name in ("gpus", "nodes", "batch_size", "value", "value_std"):
        table[name] = pd.to_numeric(table[name], errors="coerce")
    return table


MEASURED_METRICS = {"serve": "output_tokens_per_s"}  # else samples_per_s


def measured_lines(rows: list[dict], run_name: str) -> list[dict]:
    """reference.csv's lines for the ok rows of one kept GPU run (gpu/runs/<run_name>): one per
    configuration, its median over repeats, named by source notebook-bench and the run, so reports
    set today's rows beside what the project measured on that GPU before (`python gpu/keep_run.py`
    writes them; tests/test_acceptance.py checks they are the kept runs' own)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("device_type") == "cuda":
            key = (*(str(r.get(k)) for k in WORKLOAD), str(r.get("gpu_name")))
            groups.setdefault(key, []).append(r)
    out = []
    for group in groups.values():
        first = group[0]
        metric = MEASURED_METRICS.get(first["mode"], "samples_per_s")
        values = sorted(float(r[metric]) for r in group if r.get(metric) is not None)
        if not values:
            continue
        spec = spec_for_device(first["gpu_name"])
        setup = ", ".join(part for part in (
            "channels_last" if first.get("channels_last") else "",
            f"compile {first['compile']}" if first.get("compile") not in (None, "off") else "",
            first["parallelism"] if first.get("parallelism") not in (None, "ddp") else "",
            load_text(first)) if part)
        out.append({
            "source": MEASURED_SOURCE, "model": first["model"], "mode": first["mode"], "precision": first["precision"],
            "match_precisions": first["precision"], "gpu": first["gpu_name"],
            "gpu_match": " ".join(t for t in re.split(r"[^a-z0-9]+", first["gpu_name"].lower()) if t),
            "gpus": first["world_size"], "nodes": 1, "batch_size": first.get("batch_size_actual") or "",
            "input_shape": first["input_shape"], "metric": metric, "value": f"{statistics.median(values):.6g}",
            "value_std": "", "unit": first.get("sample_unit") if metric == "samples_per_s" else "output tokens/s",
            "note": (f"measured by notebook-bench ({setup + '; ' if setup else ''}{len(values)} repeat(s), "
                     f"{first['timestamp'][:10]}, commit {first.get('git_commit')}, torch {first.get('torch_version')}, "
                     f"driver {first.get('driver_version')})"),
            "url_or_citation": f"gpu/runs/{run_name} in notebook-bench's repository",
            "spec_gpu": spec.gpu if spec else "", "network_gbps": "", "run_group": f"notebook-bench {run_name}",
            "run_ids": " ".join(sorted({str(r["run_id"]) for r in group})),
            "config": config_label({**first, "load": load_text(first) or None})})
    return sorted(out, key=lambda line: (line["model"], line["mode"], line["precision"], str(line["batch_size"]),
                                         line["note"]))


def gpu_matches(device_name, gpu_match: str) -> bool:
    """Every token of the reference's `gpu_match` appears in our device name ('v100 16gb' ~ 'Tesla V100-SXM2-16GB')."""
    if not is_present(device_name):
        return False
    ours = set(re.split(r"[^a-z0-9]+", str(device_name).lower()))
    return all(token in ours for token in gpu_match.lower().split())


def reference_matches(res: Results) -> pd.DataFrame:
    """Our repeats beside each published figure with the same GPU, model, mode, precision, input and
    devices: our median and IQR, the published value, and ours over published (see published_comparison).
    notebook-bench's own kept runs (measured.csv) are matched too, `own` True, but never a line made from
    rows of this report (a row is never compared with itself, nor with another of this report's rows: the
    Machines section compares those). `defined_differently` says where the published figure is not
    defined as ours (a precision name that stands for several of ours, another or an unstated batch), and
    the comparison's text says it beside the ratio."""
    ok = res.ok
    if ok.empty:
        return pd.DataFrame()
    ref = load_reference()
    here = set(res.rows["run_id"].dropna().astype(str))
    ref = ref[pd.Series([not (set(str(ids).split()) & here) if is_present(ids) else True
                         for ids in ref.get("run_ids", pd.Series("", index=ref.index))], index=ref.index, dtype=bool)]
    keys = ["machine", "device_name", "config", *WORKLOAD]
    out = []
    for key, group in ok.groupby(keys, dropna=False, sort=False):
        ours = dict(zip(keys, key))
        for r in ref.to_dict("records"):
            if r["source"] == MEASURED_SOURCE and r.get("config") != ours["config"]:
                continue  # our own kept runs: the same configuration (batch, layout, compile, load) or none
            if (r["model"] == ours["model"] and r["mode"] == ours["mode"]
                    and ours["precision"] in r["match_precisions"].split()
                    and r["input_shape"] == ours["input_shape"] and r["gpus"] == ours["world_size"]
                    and gpu_matches(ours["device_name"], r["gpu_match"])):
                # Judged from undisturbed repeats only, as every comparison is; how many were left out is said.
                hit = group["noise_flags"].map(lambda f: bool(disturbances(f)))
                values = pd.to_numeric(group.loc[~hit, r["metric"]], errors="coerce").dropna()
                c = published_comparison(values, r["value"], r["value_std"], higher_better=r["metric"] != "s_per_iter")
                if hit.any() and not len(values):
                    c = {"ratio": math.nan, "low": math.nan, "high": math.nan, "verdict": DISTURBED,
                         "text": f"{DISTURBED}: every one of our {len(group)} repeats was flagged as disturbed"}
                elif hit.any():
                    c["text"] = f"{c['text']}; {int(hit.sum())} of our {len(group)} repeats left out as disturbed"
                # ours host-bound: the same GPU on another machine, so the ratio compares the hosts
                hosts = comparison_note([("ours", group.to_dict("records"))], across_machines=True)
                differs = definition_differences(r, ours)
                if differs:
                    c["text"] = f"{c['text']}; defined differently: {differs}"
                out.append({"machine": ours["machine"], "config": ours["config"], "model": ours["model"],
                            "mode": ours["mode"],
                            "precision": ours["precision"], "input_shape": ours["input_shape"],
                            "devices": ours["world_size"], "batch_size": ours["batch_size"],
                            "ours": values.median() if len(values) else math.nan,
                            "ours_iqr": (f"{num_text(values.quantile(0.25))} – {num_text(values.quantile(0.75))}"
                                         if len(values) else ""), "repeats": len(values),
                            "disturbed": int(hit.sum()),
                            "source": r["source"], "gpu": r["gpu"],
                            "published_precision": r["precision"], "published_batch_size": r["batch_size"],
                            "published": r["value"], "published_std": r["value_std"], "unit": r["unit"],
                            "ours_vs_published": c["ratio"], "low": c["low"], "high": c["high"],
                            "verdict": c["verdict"], "comparison": "; ".join(t for t in (c["text"], hosts) if t), "note": r["note"],
                            "url_or_citation": r["url_or_citation"], "own": r["source"] == MEASURED_SOURCE,
                            "run_group": r.get("run_group"),
                            "defined_differently": differs})
    return pd.DataFrame(out)


def definition_differences(published: dict, ours: dict) -> str:
    """How a published figure is defined otherwise than our configuration, in words ('' when alike):
    its precision name standing for several of ours (lambdal's "FP32" is TF32 on Ampere and newer, the
    NGC default), another batch, or a batch it does not state."""
    parts = []
    names = str(published["match_precisions"]).split()
    if len(names) > 1:
        parts.append(f"their {published['precision']} may be any of {', '.join(names)} (ours: {ours['precision']}; "
                     "see the note)")
    batch = published.get("batch_size")
    if not is_number(batch):
        parts.append("their batch is not stated")
    elif is_number(ours.get("batch_size")) and float(batch) != float(ours["batch_size"]):
        parts.append(f"their batch {num_text(batch)}, ours {num_text(ours['batch_size'])}")
    return "; ".join(parts)


def published_comparison(ours, published: float, published_std: float = math.nan, *,
                         higher_better: bool = True) -> dict:
    """Our repeats against one published figure: ratio (above 1: ours is faster), 95 % interval,
    verdict and text.

    A published figure with a spread (mean ± std, the 3D UNet benchmarks) gets an interval: on log
    scale, our repeats' variance of the mean plus the published relative std squared, with Student's
    t at our repeats' degrees of freedom. Both choices err wide: the std is of single iterations and
    their count is not published, so it overstates the uncertainty of the published mean; and our
    degrees of freedom are the fewest Welch's could give. A single published number has no spread,
    so there is no interval: the plain ratio of our median to it, labelled as such.
    """
    values = usable(ours)
    sign = 1.0 if higher_better else -1.0
    if not len(values) or not (is_number(published) and published > 0):
        return {"ratio": math.nan, "low": math.nan, "high": math.nan, "verdict": "no data", "text": "no data"}
    if not is_number(published_std) or published_std < 0:
        ratio = (float(np.median(values)) / published) ** sign
        return {"ratio": ratio, "low": math.nan, "high": math.nan, "verdict": "no interval",
                "text": f"ratio {ratio:.2f} (published figure has no spread: no interval)"}
    logs = np.log(values)
    shift = sign * (logs.mean() - math.log(published))
    ratio = math.exp(shift)
    if len(values) < 2:
        c = Comparison(ratio, None, None, "too few repeats", "one repeat of ours", 1, len(values))
    else:
        half = t_quantile(0.5 + CONFIDENCE / 2, len(values) - 1) * math.sqrt(
            logs.var(ddof=1) / len(values) + (published_std / published) ** 2)
        c = decide(ratio, math.exp(shift - half), math.exp(shift + half), 1, len(values), MIN_EFFECT, CONFIDENCE)
    return {"ratio": ratio, "low": c.low if c.has_interval else math.nan,
            "high": c.high if c.has_interval else math.nan, "verdict": c.verdict, "text": c.text()}


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


def matched_reference_scaling(table: pd.DataFrame, reference: pd.DataFrame, devices: dict) -> pd.DataFrame:
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
