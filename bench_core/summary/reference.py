"""Published figures (bench_core/data/reference.csv) matched against our rows.
"""
from __future__ import annotations

import functools
import importlib.resources
import math
import re

import pandas as pd

from bench_core.summary.load import WORKLOAD, Results
from bench_core.summary.text import is_present


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
    if not is_present(device_name):
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
