"""The model against every published pair: two published figures of one workload, from one run group
(same source, same software), on two GPUs or on N GPUs against fewer. Each member is predicted
from the other; bench_core/predict/tables.py writes the error table docs/prediction.md states.

The rows are bench_core/data/reference.csv (the report's published figures; `spec_gpu` names the
spec sheet, `network_gbps` the link between nodes, `run_group` what was measured together); what a
sample costs is bench_core/data/workload_profiles.csv (counted by `bench run` on CPU).
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import replace
import math
import statistics

from bench_core.predict.ceilings import left_out, measured_gpus
from bench_core.measure.op_table import from_json
from bench_core.predict.groups import GROUPS, SMALL_STEP_FLOOR_SHARE, group_of
from bench_core.predict.model import TERMS, TESTED, Profile, Setup, floor_share, predict, relative_error, without
from bench_core.predict.specs import Spec, data_rows, math_class, specs

# Which profile a precision's bytes come from: fp32 and TF32 move 4-byte activations, the rest 2.
PROFILE_PRECISION = {"fp32": "fp32", "tf32": "fp32"}


@functools.cache
def op_tables() -> dict[tuple, tuple]:
    """(model, mode, input_shape, fp32 | amp, batch) -> the step's op table at that batch (workload_ops.csv, counted
    by benchmarks/op_profiles.py on fake tensors at each published batch)."""
    return {(r["model"], r["mode"], r["input_shape"], r["precision"], float(r["batch"])): tuple(from_json(r["ops"])[0])
            for r in data_rows("workload_ops.csv")}


def with_ops(profile: Profile, key: tuple, batch: float | None) -> Profile:
    """`profile` with its op table at `batch` where one was counted (the batch rounded as the tables were)."""
    ops = op_tables().get((*key, float(round(batch)))) if batch else None
    return replace(profile, ops=ops, ops_batch=batch) if ops else profile


@functools.cache
def tasks() -> dict[str, str]:
    """model -> task (classification, masked-lm, causal-lm), from workload_profiles.csv."""
    return {r["model"]: r["task"] for r in data_rows("workload_profiles.csv")}


@functools.cache
def profiles() -> dict[tuple, Profile]:
    """(model, mode, input_shape, fp32 | amp) -> Profile, from workload_profiles.csv."""
    out = {}
    for r in data_rows("workload_profiles.csv"):
        out[(r["model"], r["mode"], r["input_shape"], r["precision"])] = Profile(
            float(r["flops_per_sample"]), float(r["flop_op_bytes_per_sample"]), float(r["other_bytes_per_sample"]),
            float(r["flop_op_bytes_per_step"]), float(r["other_bytes_per_step"]), float(r["grad_bytes_per_step"]),
            r["source"], float(r["ops_per_step"] or 0.0))
    return out


def profile_key(row: dict, math: str) -> tuple:
    return (row["model"], row["mode"], row["input_shape"], PROFILE_PRECISION.get(math, "amp"))


@functools.cache
def published_rows() -> tuple[dict, ...]:
    """Published throughput rows a prediction can use: a spec sheet with memory figures, samples/s."""
    by_name = {s.gpu: s for s in specs()}
    out = []
    for r in data_rows("reference.csv"):
        spec = by_name.get(r["spec_gpu"])
        if r["metric"] != "samples_per_s" or spec is None or not spec.predictable():
            continue
        out.append({**r, "spec": spec, "value": float(r["value"]), "gpus": int(r["gpus"]), "nodes": int(r["nodes"]),
                    "batch": float(r["batch_size"]) if r["batch_size"] else None,
                    "network_gbps": float(r["network_gbps"]) if r["network_gbps"] else None})
    return tuple(out)


def setup_of(row: dict, terms: tuple[str, ...], batch: float | None) -> Setup:
    """A published row as a Setup. Its fp32 is TF32 where its software says so (match_precisions lists
    tf32: NGC containers) and the GPU has TF32 units: the software-default term."""
    spec: Spec = row["spec"]
    ours = row["match_precisions"].split()  # our precisions the published one matches; the first is its own
    tf32 = "software-default" in terms and "tf32" in ours
    return Setup(spec, math_class(ours[0], spec, fp32_means_tf32=tf32), row["gpus"], row["nodes"],
                 batch, row["network_gbps"])


def batch_of(row: dict, partner: dict, rows: tuple[dict, ...]) -> float | None:
    """The per-GPU batch: stated; else the partner's, scaled by memory (the batch a larger memory
    allows); else the median samples per GB of memory of the rows of the same workload and
    precision that state a batch (another table of the source), times this GPU's memory."""
    if row["batch"]:
        return row["batch"]
    memory = row["spec"].number("memory_gb")
    if partner["batch"]:
        return partner["batch"] * memory / partner["spec"].number("memory_gb")
    stated = [r["batch"] / r["spec"].number("memory_gb") for r in rows
              if r["batch"] and (r["model"], r["mode"], r["precision"], r["input_shape"])
              == (row["model"], row["mode"], row["precision"], row["input_shape"])]
    return statistics.median(stated) * memory if stated else None


@functools.cache
def _batch_one_rows() -> dict[tuple, dict]:
    return {_table_key(r): r for r in published_rows() if r["batch"] == 1}


def _table_key(row: dict) -> tuple:
    """One published table's configuration, batch aside: the same page and table, GPU, precision and workload."""
    return (row["url_or_citation"], row["spec"].gpu, row["gpus"], row["precision"], row["model"], row["mode"],
            row["input_shape"])


@functools.cache
def _ladders() -> dict[tuple, dict[float, float]]:
    out: dict[tuple, dict[float, float]] = {}
    for r in published_rows():
        if r["batch"]:
            out.setdefault(_table_key(r), {})[r["batch"]] = r["value"]
    return out


def ladder_of(row: dict) -> dict[float, float] | None:
    """Samples/s at each batch `row`'s source published its table at (the same page, table, GPU, precision and
    workload; the fill term), or None where it published one batch."""
    found = _ladders().get(_table_key(row))
    return found if found and len(found) > 1 else None


def host_step_of(row: dict, terms: tuple[str, ...] = TERMS) -> float | None:
    """The host's time per step on `row`'s machine (seconds), where its source published the same table at batch 1
    and that step is small (its launch floor a quarter or more of its ideal time on that GPU: the host's time, not
    the GPU's): the same ops are launched at any batch, so no GPU runs the step in less. None elsewhere."""
    one = _batch_one_rows().get(_table_key(row))
    if one is None:
        return None
    setup = setup_of(one, terms, 1.0)
    profile = profiles().get(profile_key(one, setup.math))
    share = floor_share(profile, setup, terms) if profile is not None else None
    if share is None or share < SMALL_STEP_FLOOR_SHARE:
        return None
    return one["gpus"] / one["value"]


def pairs() -> list[tuple[dict, dict]]:
    """Every ordered pair (source row, target row) of one run group and workload that differ in the GPU
    or in the GPU count, not both (the pair isolates one change)."""
    rows = published_rows()
    key = ("run_group", "model", "mode", "precision", "input_shape")
    out = []
    for _, group in itertools.groupby(sorted(rows, key=lambda r: [r[k] for k in key]), key=lambda r: [r[k] for k in key]):
        group = list(group)
        for a, b in itertools.permutations(group, 2):
            if (a["spec"].gpu == b["spec"].gpu) != (a["gpus"] == b["gpus"]):
                out.append((a, b))
    return out


SCALING, GPU_TO_GPU = "scaling (N GPUs)", "GPU to GPU"


def pair_kind(a: dict, b: dict) -> str:
    return SCALING if a["spec"].gpu == b["spec"].gpu else GPU_TO_GPU


@functools.cache
def predictions(terms: tuple[str, ...] = TERMS) -> tuple[dict, ...]:
    """One row per ordered pair: what was predicted from what, the prediction, the error."""
    return predicted_pairs(terms)


def predicted_pairs(terms: tuple[str, ...] = TERMS) -> tuple[dict, ...]:
    """predictions(), computed now (not kept): under ceilings.left_out() the figures differ."""
    rows = published_rows()
    out = []
    for a, b in pairs():
        math_a = setup_of(a, terms, None).math
        profile = profiles().get(profile_key(a, math_a))
        if profile is None:
            continue
        src = setup_of(a, terms, batch_of(a, b, rows))
        dst = setup_of(b, terms, batch_of(b, a, rows))
        key = profile_key(a, math_a)
        p = predict(a["value"], src, dst, with_ops(profile, key, src.batch), terms,
                    target_profile=with_ops(profile, key, dst.batch), host_step_s=host_step_of(a, terms),
                    ladder=ladder_of(a))
        kind = pair_kind(a, b)
        group = kind if kind != GPU_TO_GPU else group_of("cuda", a["mode"], tasks().get(a["model"]), src.batch,
                                                         floor_share(profile, src, terms))
        out.append({"workload": f"{a['model']} {a['mode']} {a['input_shape']}", "model": a["model"],
                    "precision": a["precision"], "run_group": a["run_group"], "kind": kind, "group": group,
                    "batch": src.batch,
                    "from": f"{a['gpus']}x {a['spec'].gpu} ({src.math})", "to": f"{b['gpus']}x {b['spec'].gpu} ({dst.math})",
                    "measured_from": a["value"], "actual": b["value"], "predicted": p.value,
                    "error": relative_error(p.value, b["value"]), "binds": p.target.binds, "source": a["source"],
                    "mode": a["mode"], "gpu_from": a["spec"].gpu, "gpu_to": b["spec"].gpu, "gpus_from": a["gpus"],
                    "gpus_to": b["gpus"], "math_from": src.math, "math_to": dst.math})
    return tuple(out)


# The interval a prediction carries: the range of measured / predicted that holds COVERAGE of its group's
# pairs, from the QUANTILES[0] to the QUANTILES[1] quantile (asymmetric where the errors are). A median
# |error| read as a band held for only half of its pairs (51 % of GPU-to-GPU training's).
COVERAGE = 0.8
QUANTILES = (0.1, 0.9)


def interval(ratios: list[float]) -> tuple[float, float]:
    """The QUANTILES of measured / predicted, each taken at the pair at or beyond it (rounded outward, no
    interpolation), so the interval holds at least COVERAGE of the pairs, its ends among them."""
    ordered = sorted(ratios)
    last = len(ordered) - 1
    return ordered[math.floor(QUANTILES[0] * last)], ordered[math.ceil(QUANTILES[1] * last)]


# Math classes that run at one width: a bf16 prediction is nearest a published fp16 pair, tf32 an fp32 one.
WIDTH = {"fp32": 32, "tf32": 32, "fp16": 16, "bf16": 16, "fp8": 8}


def pair_between(gpu_from: str, gpu_to: str, gpus: tuple[int, int], model: str, mode: str, cls: str,
                 batch: float | None = None) -> dict | None:
    """The published pair (the full model's prediction of it) nearest to a prediction from `gpu_from` to
    `gpu_to` at these GPU counts in this mode: of the same math class `cls` if there is one, else of the same
    width (fp16 for bf16); then of the same model; among equals, the nearest batch. None where the two GPUs
    were never published together in this mode."""
    found = [r for r in predictions() if (r["kind"], r["gpu_from"], r["gpu_to"], r["gpus_from"], r["gpus_to"], r["mode"])
             == (GPU_TO_GPU, gpu_from, gpu_to, *gpus, mode)]

    def distance(r: dict) -> tuple:
        far = abs(math.log(r["batch"] / batch)) if r["batch"] and batch else math.inf
        return r["math_to"] != cls, WIDTH.get(r["math_to"]) != WIDTH.get(cls), r["model"] != model, far
    return min(found, key=distance, default=None)


def summarize(rows, by: str | None) -> list[dict]:
    """Median and worst |error| (and the worst factor off), the COVERAGE interval of measured / predicted
    and the share of the pairs inside it, per value of `by` and over all."""
    groups = {}
    for r in rows:
        groups.setdefault(r[by] if by else "all pairs", []).append(r)
    if by:
        groups["all pairs"] = list(rows)
    out = []
    for name, group in groups.items():
        errors = [abs(r["error"]) for r in group]
        factors = [max(r["predicted"] / r["actual"], r["actual"] / r["predicted"]) for r in group]
        worst = max(group, key=lambda r: abs(r["error"]))
        ratios = [r["actual"] / r["predicted"] for r in group]
        low, high = interval(ratios)
        out.append({"group": name, "pairs": len(group), "median_abs_error": statistics.median(errors),
                    "worst_abs_error": max(errors), "worst_factor": max(factors),
                    "within_15pct": sum(e <= 0.15 for e in errors) / len(errors),
                    "interval_low": low, "interval_high": high,
                    "inside_interval": sum(low <= x <= high for x in ratios) / len(ratios),
                    "worst_pair": f"{worst['from']} -> {worst['to']} ({worst['precision']})"})
    return out


def error_table(terms: tuple[str, ...] = TERMS) -> list[dict]:
    """The held-out error per workload, per group of predictions (GPU-to-GPU pairs: the band each group
    carries), for the scaling pairs and over all. Nothing in the model is fitted (every number is a
    datasheet figure, a count, or the other member of the pair), so each pair is predicted without its
    own source's figures beyond the measured member: the error is held out."""
    rows = predictions(terms)
    by_group = summarize(rows, "group")
    order = {g: i for i, g in enumerate((*GROUPS, SCALING, "all pairs"))}
    return ([r for r in summarize(rows, "model") if r["group"] != "all pairs"]
            + sorted(by_group, key=lambda r: order.get(r["group"], len(order))))


def group_sources() -> dict[str, str]:
    """Per group, the published workloads whose pairs it holds (source, model, mode: pairs), from the data."""
    counts: dict[str, dict[str, int]] = {}
    for r in predictions():
        name = f"{r['source']} {r['model']} {r['mode']}"
        counts.setdefault(r["group"], {}).setdefault(name, 0)
        counts[r["group"]][name] += 1
    return {g: ", ".join(f"{name} ({n})" for name, n in sorted(c.items())) for g, c in counts.items()}


def ablations() -> list[dict]:
    """The overall median and worst error of the full model and of the model without each term, and the median error
    of the GPU-to-GPU training and the inference pairs (the groups issue 66 sets targets for)."""
    out = []
    tested = [("with per-op (tested, off)", (*TERMS, "per-op")), ("with per-op and cache (tested, off)", (*TERMS, *TESTED))]
    for name, terms in [("full model", TERMS)] + [(f"without {t}", without(t)) for t in TERMS] + tested:
        rows = predictions(terms)
        total = summarize(rows, None)[0]
        per_group = {f"median_{g}": statistics.median(abs(r["error"]) for r in rows if r["group"] == g)
                     for g in ABLATION_GROUPS}
        out.append({"model": name, **{k: total[k] for k in ("pairs", "median_abs_error", "worst_abs_error",
                                                            "worst_factor", "within_15pct", "interval_low",
                                                            "interval_high")}, **per_group})
    return out


ABLATION_GROUPS = ("GPU to GPU in training", "inference")


def held_out_by_gpu() -> list[dict]:
    """Per GPU with microbenchmark figures of its own (ceilings.py): the median error of its GPU-to-GPU pairs with
    its figures, and with them held out (it takes the median fraction of the other GPUs' figures, as a GPU never
    measured does). The fraction a GPU without figures gets is chosen from the data of the others: this is its
    error on what was left out."""
    out = []
    for gpu in measured_gpus():
        def mine(rows):
            return [r for r in rows if r["kind"] == GPU_TO_GPU and gpu in (r["gpu_from"], r["gpu_to"])]
        with_own = mine(predictions())
        if not with_own:
            continue
        with left_out(gpu):
            held = mine(predicted_pairs())
        out.append({"gpu": gpu, "pairs": len(with_own),
                    "median_abs_error": statistics.median(abs(r["error"]) for r in with_own),
                    "held_out_median_abs_error": statistics.median(abs(r["error"]) for r in held),
                    "held_out_within_15pct": sum(abs(r["error"]) <= 0.15 for r in held) / len(held)})
    return out
