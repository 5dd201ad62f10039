"""Predictions from our own measured rows: each configuration of a results directory (median
samples/s over its ok repeats) carried to a GPU that was not measured, with an error band only
where pairs of its group were measured.

Each prediction belongs to one group, by what it is predicted from (GROUPS): GPU to GPU in
training at a batch the published pairs cover is the one group with measured pairs today (its band
is their median error); inference, LLM training and small batches have none, so their predictions
say "unvalidated" and carry no band; a CPU source is no prediction at all but the GPU's roofline
bound for the counted work (a CPU's efficiency against its own peak says nothing of a GPU's), with
no band. A row in a precision its device only emulates is not predicted from (its efficiency
describes the emulation), and a disturbed row says so.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from bench_core.errors import ConfigError
from bench_core.predict import groups
from bench_core.predict.groups import CPU_SOURCE, GPU_TRAINING, GROUPS, INFERENCE, LLM_TRAINING, SMALL_BATCH
from bench_core.predict.model import TERMS, Profile, Setup, Times, predict, times
from bench_core.predict.published import error_table
from bench_core.predict.specs import Spec, math_class, spec_for_device
from bench_core.results.disturbed import RE_MEASURE, disturbances
from bench_core.results.rows import WORKLOAD
from bench_core.results.store import iter_rows

# What a row must carry to be predicted from.
NEEDED = ("samples_per_s", "flops_per_sample", "bytes_per_sample_flop_ops", "bytes_per_sample_other_ops")
# The launch floor: an eager step runs its ops one by one, and the host spends at least this long on each
# (Python, the dispatcher's layers, cudaLaunchKernel) however small its kernel, so no GPU runs the step in
# less than ops_per_step x this. 5 us is the low end of the 5-25 us of CPU-side dispatch one op costs in
# eager PyTorch on a current GPU server (jiahuanglin.xyz, "From PyTorch op to kernel launch", GPU kernel
# serving lesson 18: cudaLaunchKernel alone 1-3 us): the floor is a lower bound of the step, so a
# prediction capped by it stays an upper bound. Not yet taken from a GPU run of ours (a batch ladder of one
# small model on the lent GPU would give it: issue 53).
HOST_S_PER_OP = 5e-6
FLOOR_SOURCE = ("5 us a kernel: the low end of eager PyTorch's 5-25 us of host time per op (jiahuanglin.xyz, "
                "'From PyTorch op to kernel launch'), not yet measured on a GPU here")


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
                                            "params_count", "sample_unit", "task", "precision_support",
                                            "concurrency", "ops_per_step")}
        merged["noise_flags"] = ";".join(sorted({f for r in group for f in str(r.get("noise_flags") or "").split(";")
                                                 if f})) or None
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


def group_of(conf: dict) -> str:
    """Which group's measured pairs (if any) stand behind a prediction from `conf`."""
    return groups.group_of(conf.get("device_type"), conf.get("mode"), conf.get("task"), conf.get("batch_size"))


def bands() -> dict[str, tuple[float, int] | None]:
    """Each group's band and the pairs behind it: the median |error| of the published pairs of that
    group, or None where no pair was measured (the band would be a guess)."""
    gpu = next(r for r in error_table() if r["group"] == "GPU to GPU")
    return {GPU_TRAINING: (gpu["median_abs_error"], gpu["pairs"]), INFERENCE: None, LLM_TRAINING: None,
            SMALL_BATCH: None, CPU_SOURCE: None}


def band() -> float:
    """The band of the one group with measured pairs (GPU to GPU in training)."""
    return bands()[GPU_TRAINING][0]


def band_text(group: str, measured: tuple[float, int] | None) -> str:
    if group == CPU_SOURCE:
        return "none: a roofline bound (a CPU run's efficiency says nothing of a GPU's)"
    if measured is None:
        return f"none: unvalidated ({group}: no measured pair)"
    error, pairs = measured
    return f"±{error:.0%} ({group}: median error of {pairs} published pairs)"


def refusal(conf: dict) -> str | None:
    """Why a configuration cannot stand for a GPU, or None."""
    if conf.get("mode") == "serve":
        return ("a serving point: `bench predict` models one training or inference step from its counted FLOPs "
                "and bytes, and a serve row has a server's requests, not steps")
    if conf.get("precision_support") == "emulated":
        return (f"{conf['precision']} is emulated on {conf.get('device_name')}: its efficiency describes the "
                "emulation, not a GPU's tensor cores; measure fp32 (native) there to predict from")
    return None


def predict_dir(result_dir: str | Path, gpus: list[Spec], devices: int = 1,
                terms: tuple[str, ...] = TERMS) -> tuple[list[dict], list[str]]:
    """Predicted rows for each configuration of `result_dir` on each GPU, and notes on what was skipped."""
    rows, notes = [], []
    measured_bands = bands()
    for conf in configurations(ok_rows(result_dir)):
        size = f"concurrency {conf.get('concurrency')}" if conf.get("mode") == "serve" else f"bs {conf['batch_size']}"
        label = (f"{conf['model']} {conf['mode']} {conf['precision']} {size} on "
                 f"{conf.get('device_name') or 'a device the row does not name'}")
        why = refusal(conf)
        missing = [k for k in NEEDED if not conf.get(k)]
        if why or missing:
            notes.append(f"{label}: {why or 'no ' + ', '.join(missing) + ' in its rows'}: not predicted")
            continue
        group = group_of(conf)
        bound = group == CPU_SOURCE
        try:  # a bound needs no source device: only the counts and the target's ceilings
            src = None if bound else source_setup(conf)
        except ConfigError as exc:
            notes.append(f"{label}: {str(exc).split(': ', 1)[-1]}: not predicted")
            continue
        measured = measured_bands[group]
        for spec in gpus:
            dst = Setup(spec, math_class(conf["precision"], spec), devices, 1, conf["batch_size"])
            if bound:
                t = times(profile_of(conf), dst, terms)
                value, binds, efficiency, note = roofline(t, dst), t.binds, None, BOUND_NOTE
            else:
                p = predict(conf["samples_per_s"], src, dst, profile_of(conf), terms)
                value, binds, efficiency, note = p.value, p.target.binds, p.efficiency, p.note
            ops = conf.get("ops_per_step")
            floor = devices * conf["batch_size"] / (float(ops) * HOST_S_PER_OP) if ops else None
            if floor is not None and floor < value:  # the host cannot launch the step's kernels any faster
                value, binds = floor, f"launch floor ({int(ops):,} kernels a step x {HOST_S_PER_OP * 1e6:g} us)"
            error = measured[0] if measured else None
            rows.append({"model": conf["model"], "mode": conf["mode"], "precision": conf["precision"],
                         "batch_size": conf["batch_size"], "input_shape": conf["input_shape"],
                         "measured_on": f"{int(conf.get('world_size') or 1)}x {conf.get('device_name')}" if bound
                         else f"{src.gpus}x {src.gpu.gpu}", "measured": conf["samples_per_s"],
                         "gpu": f"{devices}x {spec.gpu}", "predicted": value, "kind": "bound" if bound else "prediction",
                         "group": group, "band": error, "band_text": band_text(group, measured),
                         "low": value * (1 - error) if error else None, "high": value * (1 + error) if error else None,
                         "binds": binds, "efficiency": efficiency, "math": dst.math,
                         "sample_unit": conf.get("sample_unit") or "samples/s",
                         "disturbed": (f"disturbed ({disturbances(conf['noise_flags'])}): {RE_MEASURE}"
                                       if disturbances(conf.get("noise_flags")) else None),
                         "note": note})
    return rows, notes


BOUND_NOTE = ("the GPU's roofline bound for the counted FLOPs and bytes (efficiency 1: no efficiency carried over "
              "from the CPU)")


def roofline(t: Times, target: Setup) -> float:
    """Samples/s at the target's ceilings with nothing lost: an upper bound, not a prediction."""
    batch = target.batch or 1.0
    return target.gpus * batch / (batch * t.sample_s + t.comm_s)
