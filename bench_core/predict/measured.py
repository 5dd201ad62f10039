"""Predictions from our own measured rows: each configuration of a results directory (median
samples/s over its ok repeats) carried to a GPU that was not measured, with the error band the
published pairs give the model.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from bench_core.errors import ConfigError
from bench_core.predict.model import TERMS, Profile, Setup, predict
from bench_core.predict.published import error_table
from bench_core.predict.specs import Spec, math_class, spec_for_device
from bench_core.results.rows import WORKLOAD
from bench_core.results.store import iter_rows

# What a row must carry to be predicted from.
NEEDED = ("samples_per_s", "flops_per_sample", "bytes_per_sample_flop_ops", "bytes_per_sample_other_ops")


def ok_rows(result_dir: str | Path) -> list[dict]:
    rows = [r for r in iter_rows(Path(result_dir)) if r.get("status") == "ok"]
    if not rows:
        raise ConfigError("from", f"{result_dir} has no ok rows (runs/*/rows.json with status ok): "
                                  "run `bench run --out DIR` first")
    return rows


def configurations(rows: list[dict]) -> list[dict]:
    """One entry per workload configuration and device: the median of its repeats."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(str(r.get(k)) for k in (*WORKLOAD, "device_name")), []).append(r)
    out = []
    for group in groups.values():
        first = group[0]
        merged = {k: first.get(k) for k in (*WORKLOAD, "device_type", "device_name", "peak_tflops", "peak_source",
                                            "params_count", "sample_unit")}
        for k in NEEDED:
            values = [float(r[k]) for r in group if isinstance(r.get(k), (int, float)) and r[k] > 0]
            merged[k] = statistics.median(values) if values else None
        merged["repeats"] = len(group)
        out.append(merged)
    return out


def profile_of(conf: dict) -> Profile:
    """The row's own counts, at its batch (the per-step bytes already spread over it)."""
    params = conf.get("params_count") or 0
    return Profile(conf["flops_per_sample"], conf["bytes_per_sample_flop_ops"], conf["bytes_per_sample_other_ops"],
                   grad_bytes=4.0 * params, source="counted on the measured run (bench_core/measure/flops.py)")


def source_setup(conf: dict) -> Setup:
    """The measured device: its spec sheet (a listed GPU); a CPU or an unlisted GPU by its measured
    or datasheet peak only (no memory bandwidth figure: its efficiency is against the compute ceiling)."""
    spec = spec_for_device(conf.get("device_name") or "") if conf.get("device_type") == "cuda" else None
    gpus = int(conf.get("world_size") or 1)
    if spec is not None and spec.predictable():
        return Setup(spec, math_class(conf["precision"], spec), gpus, 1, conf["batch_size"])
    peak = conf.get("peak_tflops")
    if not peak:
        raise ConfigError("from", f"{conf.get('device_name')} has no peak_tflops in its rows (run `bench peak`, "
                                  "then measure again): nothing to carry the efficiency from")
    cls = math_class(conf["precision"], Spec("", "", {"fp32": float(peak)}, {}))
    values = {"fp32": float(peak), cls: float(peak), "memory_gbps": math.inf, "memory_gb": math.inf,
              "link_gbps": math.inf}
    sources = {k: f"{conf.get('peak_source') or 'measured peak'}" for k in values}
    device = Spec(str(conf.get("device_name") or conf.get("device_type")), "", values, sources)
    return Setup(device, cls, gpus, 1, conf["batch_size"])


def band() -> float:
    """The model's stated error for a GPU not measured: the median |error| over the published
    GPU-to-GPU pairs (not over all pairs, where the easier scaling pairs pull the median down)."""
    return next(r for r in error_table() if r["group"] == "GPU to GPU")["median_abs_error"]


def predict_dir(result_dir: str | Path, gpus: list[Spec], devices: int = 1,
                terms: tuple[str, ...] = TERMS) -> tuple[list[dict], list[str]]:
    """Predicted rows for each configuration of `result_dir` on each GPU, and notes on what was skipped."""
    rows, notes = [], []
    error = band()
    for conf in configurations(ok_rows(result_dir)):
        missing = [k for k in NEEDED if not conf.get(k)]
        label = f"{conf['model']} {conf['mode']} {conf['precision']} bs {conf['batch_size']} on {conf.get('device_name')}"
        if missing:
            notes.append(f"{label}: no {', '.join(missing)} (measured before bench counted bytes?): not predicted")
            continue
        src = source_setup(conf)
        for spec in gpus:
            dst = Setup(spec, math_class(conf["precision"], spec), devices, 1, conf["batch_size"])
            p = predict(conf["samples_per_s"], src, dst, profile_of(conf), terms)
            rows.append({"model": conf["model"], "mode": conf["mode"], "precision": conf["precision"],
                         "batch_size": conf["batch_size"], "input_shape": conf["input_shape"],
                         "measured_on": f"{src.gpus}x {src.gpu.gpu}", "measured": conf["samples_per_s"],
                         "gpu": f"{devices}x {spec.gpu}", "predicted": p.value, "low": p.value * (1 - error),
                         "high": p.value * (1 + error), "band": error, "binds": p.target.binds,
                         "efficiency": p.efficiency, "math": dst.math, "sample_unit": conf.get("sample_unit"),
                         "note": p.note})
    return rows, notes
