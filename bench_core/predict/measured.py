"""Predictions from our own measured rows: each configuration of a results directory (median
samples/s over its ok repeats) carried to a GPU that was not measured, with an interval only
where pairs of its group were measured.

Each prediction belongs to one group, by what it is predicted from (bench_core/predict/groups.py):
GPU to GPU in training, inference, LLM training and small steps (where the launch floor is a quarter
or more of the step's ideal time, and the row was not measured busy). Each carries the interval that
holds 80 % of its group's published pairs (10th to 90th percentile of their errors, docs/prediction.md),
or says "unvalidated" with no interval where the group has none; beside it, the published pair of the
same two GPUs where one exists, and its cost per million items at a sourced or given price. A CPU source is no
prediction at all but the GPU's roofline bound for the counted work (a CPU's efficiency against its
own peak says nothing of a GPU's), with no band. A row in a precision its device only emulates is not
predicted from (its efficiency describes the emulation), nor a row of a GPU with no spec sheet (what its step owes
to memory is unknown), and a disturbed row says so.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from bench_core.errors import ConfigError
from bench_core.measure.noise import HOST_BOUND_BUSY, current_flags
from bench_core.predict import groups
from bench_core.predict.bands import Band, band_text, bands, in_words, pair_text, per_op_band
from bench_core.predict.groups import CPU_SOURCE, GPU_TRAINING, GROUPS, INFERENCE, LLM_TRAINING, SMALL_BATCH
from bench_core.predict.model import (TERMS, Profile, Setup, Times, floor_share, launch_floor, predict, times,
                                      without)
from bench_core.predict.ops import predict_step, table_of
from bench_core.predict.prices import Price, cost_per_million, prices_with
from bench_core.predict.published import COVERAGE, pair_between
from bench_core.predict.specs import Spec, math_class, predictable_names, spec_for_device
from bench_core.results.bound import host_bound
from bench_core.results.disturbed import RE_MEASURE, disturbances
from bench_core.results.keys import key_value, machine_label
from bench_core.results.rows import WORKLOAD
from bench_core.results.store import read_record

# What a row must carry to be predicted from.
NEEDED = ("samples_per_s", "flops_per_sample", "bytes_per_sample_flop_ops", "bytes_per_sample_other_ops")


def ok_rows(result_dir: str | Path) -> tuple[list[dict], list[str]]:
    """The ok rows of `result_dir`'s run files, and a line for each run file that cannot be read as rows (left out,
    as every command leaves it out)."""
    found, damaged = read_record(Path(result_dir))
    rows = [r for r in found if r.get("status") == "ok"]
    if not rows:
        said = "".join(f"; {path} is damaged ({why})" for path, why in damaged)
        raise ConfigError("from", f"{result_dir} has no ok rows (runs/*/rows.json with status ok){said}: "
                                  "run `bench run --out DIR` first")
    return rows, [f"{path} is damaged ({why}): that run is left out" for path, why in damaged]


def configurations(rows: list[dict]) -> list[dict]:
    """One entry per workload configuration and machine (results.keys: WORKLOAD and machine_label), the median of
    its repeats, from however many result folders hold them (`folders`: their names, where rows carry result_dir).
    Two machines are never pooled: their rows are not repeats of each other."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        # (the run settings as the report keys them; the machine as used: 1 and 2 CPU threads are two machines)
        groups.setdefault((*(str(key_value(r, k)) for k in WORKLOAD), machine_label(r)), []).append(r)
    out = []
    for group in groups.values():
        first = group[0]
        merged = {k: first.get(k) for k in (*WORKLOAD, "device_type", "device_name", "peak_tflops", "peak_source",
                                            "params_count", "sample_unit", "task", "precision_support",
                                            "concurrency", "ops_per_step")}
        merged["op_profile"] = next((r["op_profile"] for r in group if r.get("op_profile")), None)
        merged["machine"] = machine_label(first)
        merged["folders"] = tuple(dict.fromkeys(str(r["result_dir"]) for r in group if r.get("result_dir")))
        merged["noise_flags"] = ";".join(sorted({f for r in group for f in str(current_flags(r) or "").split(";")
                                                 if f})) or None  # under today's rules (older rows: power cap, host)
        for k in NEEDED:
            values = [float(r[k]) for r in group if isinstance(r.get(k), (int, float)) and r[k] > 0]
            merged[k] = statistics.median(values) if values else None
        # The workload's own unit (tokens for a sequence model's samples): what a cost per million counts.
        units = [r["throughput"] / r["samples_per_s"] for r in group
                 if isinstance(r.get("throughput"), (int, float)) and isinstance(r.get("samples_per_s"), (int, float))
                 and r["throughput"] > 0 and r["samples_per_s"] > 0]
        merged["units_per_sample"] = statistics.median(units) if units else 1.0
        merged["throughput_unit"] = (first.get("throughput_unit") if units else None) or first.get("sample_unit")
        merged["repeats"] = len(group)
        merged["gpu_busy"] = measured_busy(group)
        out.append(merged)
    return out


def ladder_key(conf: dict) -> tuple:
    """A configuration's settings and machine, its batch aside: the configurations of one ladder."""
    return (*(str(conf.get(k)) for k in WORKLOAD if k != "batch_size"), conf.get("machine"))


def ladders(confs: list[dict]) -> dict[tuple, dict[float, float]]:
    """ladder_key -> samples/s at each batch the machine measured the configuration at (the fill term: how full
    the source ran at each batch); a configuration measured at one batch has no ladder."""
    out: dict[tuple, dict[float, float]] = {}
    for conf in confs:
        if conf.get("samples_per_s") and conf.get("batch_size"):
            out.setdefault(ladder_key(conf), {})[float(conf["batch_size"])] = conf["samples_per_s"]
    return {k: v for k, v in out.items() if len(v) > 1}


# The settings of a configuration that a table of predictions would otherwise leave out, with the value
# that needs no word: two rows that differ only in one of them are told apart by it.
SETTINGS = (("compile", "off"), ("channels_last", False), ("parallelism", "ddp"), ("tp_degree", 1),
            ("activation_checkpointing", "none"))


def settings_text(conf: dict) -> str:
    """'compile default; channels_last; fsdp': the settings of `conf` that are not the plain default."""
    said = []
    for name, plain in SETTINGS:
        value = conf.get(name)
        if value in (None, "", plain) or str(value) == str(plain):
            continue
        said.append(name if value is True else f"{name} {value}" if name != "parallelism" else str(value))
    return "; ".join(said)


def profile_of(conf: dict) -> Profile:
    """The row's own counts, at its batch (the per-step bytes already spread over it)."""
    params = conf.get("params_count") or 0
    return Profile(conf["flops_per_sample"], conf["bytes_per_sample_flop_ops"], conf["bytes_per_sample_other_ops"],
                   grad_bytes=4.0 * params, source="counted on the measured run (bench_core/measure/flops.py)",
                   ops_per_step=float(eager_ops(conf) or 0.0))


def eager_ops(conf: dict) -> int | None:
    """The ops an eager step runs, a kernel each: what the launch floor and the host-bound term count. A
    compiled step fuses kernels (and CUDA graphs remove the host's part), so it has none."""
    return conf.get("ops_per_step") if str(conf.get("compile") or "off") == "off" else None


def source_setup(conf: dict) -> Setup:
    """The measured GPU by its spec sheet. A GPU without one (unlisted, or listed without its memory figures) is
    refused: what a step's time owes to memory is unknown there, so no efficiency can be carried to another GPU
    (taken as infinitely fast memory, a memory-bound row came out several times off)."""
    spec = source_sheet(conf)
    return Setup(spec, math_class(conf["precision"], spec), int(conf.get("world_size") or 1), 1, conf["batch_size"])


def source_sheet(conf: dict) -> Spec:
    """The spec sheet of the GPU a configuration was measured on, or a one-line ConfigError naming the GPU and the
    GPUs that have one."""
    name = str(conf.get("device_name") or "").strip()
    spec = spec_for_device(name)
    if spec is not None and spec.predictable():
        return spec
    which = repr(name) if name else "the GPU (its rows name none)"
    raise ConfigError("from", f"{which} has no spec sheet (memory bandwidth and size, interconnect, peaks) in "
                              f"bench_core/data/gpu_peaks.csv, so nothing measured on it can be carried to another "
                              f"GPU; GPUs with one: {', '.join(predictable_names())}")


def measured_host_bound(conf: dict) -> str:
    """'gpu busy 17%' where a GPU row was measured host-bound (noise_flags), else ''."""
    return host_bound(conf.get("noise_flags")) if conf.get("device_type") == "cuda" else ""


def measured_busy(rows: list[dict]) -> tuple[float, str] | None:
    """How busy the GPU was over a configuration's repeats (their median) and how it was measured: the
    profiler's gpu_busy, else NVML's share of time a kernel ran; None for CPU rows and where neither was read."""
    if not rows or rows[0].get("device_type") != "cuda":
        return None
    for key, scale, how in (("gpu_busy", 1.0, ""), ("gpu_util_pct_mean", 0.01, " by NVML utilization")):
        values = [float(r[key]) * scale for r in rows if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
        if values:
            return statistics.median(values), how
    return None


def measured_gpu_bound(conf: dict) -> str:
    """'gpu busy 90% by NVML utilization' where a GPU row was measured busy (HOST_BOUND_BUSY or more: its step is
    the GPU's, whatever its launch floor says), else ''."""
    busy = conf.get("gpu_busy")
    return f"gpu busy {busy[0]:.0%}{busy[1]}" if busy and busy[0] >= HOST_BOUND_BUSY else ""


def group_of(conf: dict, src: Setup | None = None) -> str:
    """Which group's measured pairs (if any) stand behind a prediction from `conf` (measured on `src`). A GPU row
    measured host-bound is a small step whatever its ops count says: its time is the host's; one measured busy
    is not, whatever its launch floor says: its time is the GPU's."""
    if measured_host_bound(conf):
        return SMALL_BATCH
    profile = profile_of(conf)
    share = floor_share(profile, src) if src else None
    if measured_gpu_bound(conf):  # (also where its ops were not counted: the small-batch rule would guess)
        share = 0.0
    return groups.group_of(conf.get("device_type"), conf.get("mode"), conf.get("task"), conf.get("batch_size"), share)


def refusal(conf: dict) -> str | None:
    """Why a configuration cannot stand for a GPU, or None."""
    if conf.get("mode") == "serve":
        return ("a serving point: `bench predict` models one training or inference step from its counted FLOPs "
                "and bytes, and a serve row has a server's requests, not steps")
    if conf.get("precision_support") == "emulated":
        return (f"{conf['precision']} is emulated on {conf.get('device_name')}: its efficiency describes the "
                "emulation, not a GPU's tensor cores; measure fp32 (native) there to predict from")
    return None


def predict_dir(result_dir: str | Path, gpus: list[Spec], devices: int = 1, terms: tuple[str, ...] = TERMS,
                prices: dict[str, Price] | None = None, per_op: bool = True) -> tuple[list[dict], list[str]]:
    """Predicted rows for each configuration of `result_dir` on each GPU, and notes on what was skipped.
    prices: GPU name -> Price (default: the shipped on-demand prices, prices.prices_with()); per_op: a GPU row with
    its ops' table is predicted op by op (predict/ops.py), else every row by the whole-step model. Where nothing
    can be predicted because the rows' GPU has no spec sheet, a one-line ConfigError says so."""
    measured, damaged = ok_rows(result_dir)
    rows, notes = predict_rows(measured, gpus, devices, terms, prices, per_op)
    if not rows:
        for conf in configurations(measured):
            if conf.get("device_type") == "cuda" and not refusal(conf):
                source_sheet(conf)  # (raises for a GPU without a spec sheet)
    return rows, damaged + notes


def predict_rows(measured_rows: list[dict], gpus: list[Spec], devices: int = 1, terms: tuple[str, ...] = TERMS,
                 prices: dict[str, Price] | None = None, per_op: bool = True) -> tuple[list[dict], list[str]]:
    """predict_dir for ok rows from anywhere (a report's folders together: configurations() pools one configuration
    of one machine across them, and says which folders it came from)."""
    rows, notes, group_bands = [], [], bands()  # (one error table for the rows, not one a configuration)
    confs = configurations(measured_rows)
    found_ladders = ladders(confs)
    for conf in confs:
        found, note = predict_conf(conf, gpus, devices, terms, prices, group_bands, per_op,
                                   found_ladders.get(ladder_key(conf)))
        rows += found
        notes += [note] if note else []
    return rows, notes


def predict_conf(conf: dict, gpus: list[Spec], devices: int = 1, terms: tuple[str, ...] = TERMS,
                 prices: dict[str, Price] | None = None, group_bands: dict[str, Band | None] | None = None,
                 per_op: bool = True, ladder: dict[float, float] | None = None) -> tuple[list[dict], str | None]:
    """One configuration (configurations()) predicted on each GPU, or a note on why it is not; `group_bands`:
    bands(), where the caller predicts many; per_op: as predict_dir; `ladder`: samples/s at each batch the same
    machine measured the configuration at (ladders(): the fill term)."""
    prices = prices_with() if prices is None else prices
    size = f"concurrency {conf.get('concurrency')}" if conf.get("mode") == "serve" else f"bs {conf['batch_size']}"
    label = (f"{conf['model']} {conf['mode']} {conf['precision']} {size} on "
             f"{conf.get('device_name') or 'a device the row does not name'}")
    why = refusal(conf)
    missing = [k for k in NEEDED if not conf.get(k)]
    if why or missing:
        return [], f"{label}: {why or 'no ' + ', '.join(missing) + ' in its rows'}: not predicted"
    bound = group_of(conf) == CPU_SOURCE
    try:  # a bound needs no source device: only the counts and the target's ceilings
        src = None if bound else source_setup(conf)
    except ConfigError as exc:
        return [], f"{label}: {str(exc).split(': ', 1)[-1]}: not predicted"
    group = group_of(conf, src)
    # A small batch whose ops were not counted (rows older than ops_per_step) and not measured host-bound is
    # predicted without the host-bound term, and the group's interval measures the model with it: no interval fits.
    uncounted = group == SMALL_BATCH and not eager_ops(conf) and not measured_host_bound(conf)
    group_band, rows = (bands() if group_bands is None else group_bands)[group], []
    sheet = without("achieved", terms)
    for spec in gpus:
        dst = Setup(spec, math_class(conf["precision"], spec), devices, 1, conf["batch_size"])
        if bound:  # (a prediction is capped by the launch floor in predict(); a bound here)
            t = times(profile_of(conf), dst, sheet)  # at the datasheet's ceilings: nothing runs faster
            value, binds, efficiency, note = roofline(t, dst), t.binds, None, BOUND_NOTE
            floor = launch_floor(devices, conf["batch_size"], eager_ops(conf))
            if floor is not None and floor[0] < value:  # the host cannot launch the step's kernels any faster
                value, binds = floor
        else:
            p = predict(conf["samples_per_s"], src, dst, profile_of(conf), terms, measured_host_bound(conf),
                        measured_gpu_bound(conf), ladder=ladder)
            value, binds, efficiency, note = p.value, p.target.binds, p.efficiency, p.note
        whole, path = value, "whole step" if bound or not table_of(conf)[0] else "whole step (asked for)"
        if not bound and per_op and table_of(conf)[0] and devices == src.gpus:
            value, binds, note = per_op_prediction(conf, src, dst)
            path = "per op"
        # Faster than its own roofline: against the datasheet's ceilings, which no kernel exceeds.
        above = None if bound else above_roofline(datasheet_efficiency(conf, src, sheet), src, dst,
                                                  roofline(times(profile_of(conf), dst, sheet), dst))
        band = None if uncounted or above or path == "per op" else group_band
        band_said = (UNCOUNTED if uncounted else ABOVE_BAND if above else per_op_band(whole, group, group_band,
                     conf) if path == "per op" else band_text(group, band))
        if band is not None:  # in the words a person decides with: what the target measures against the source
            band_said = f"{in_words(src, dst, value / conf['samples_per_s'], band)}; {band_said}"
        pair = None if bound else pair_between(src.gpu.gpu, spec.gpu, (src.gpus, devices), conf["model"],
                                                conf["mode"], dst.math, conf["batch_size"])
        rows.append({"model": conf["model"], "mode": conf["mode"], "precision": conf["precision"],
                     "batch_size": conf["batch_size"], "input_shape": conf["input_shape"],
                     "settings": settings_text(conf),
                     "measured_on": f"{int(conf.get('world_size') or 1)}x {conf.get('device_name')}" if bound
                     else f"{src.gpus}x {src.gpu.gpu}", "measured": conf["samples_per_s"],
                     "gpu": f"{devices}x {spec.gpu}", "devices": devices, "predicted": value, "kind": "bound" if bound else "prediction",
                     "group": group, "coverage": COVERAGE if band else None, "band_text": band_said,
                     "low": value * band.low if band else None, "high": value * band.high if band else None,
                     "ratio": None if bound else value / conf["samples_per_s"],
                     "published_pair": pair_text(pair), "published_pair_error": pair["error"] if pair else None,
                     "binds": binds, "efficiency": efficiency, "above_roofline": above, "math": dst.math,
                     "path": path, "whole_step": None if bound else whole, "machine": conf["machine"],
                     "folders": ", ".join(conf["folders"]),
                     "sample_unit": conf.get("sample_unit") or "samples/s",
                     # A bound uses the run's counts, never its timing: a disturbed CPU run bounds a GPU as well.
                     "disturbed": (f"disturbed ({disturbances(conf['noise_flags'])}): {RE_MEASURE}"
                                   if disturbances(conf.get("noise_flags")) and not bound else None),
                     "note": note, **costs(conf, value, band, devices, prices.get(spec.gpu))})
    return rows, None


def per_op_prediction(conf: dict, src: Setup, dst: Setup) -> tuple[float, str, str]:
    """(samples/s, binds, note) of the per-op path (predict/ops.py) from the row's op table."""
    kinds, meta = table_of(conf)
    measured_step = src.gpus * conf["batch_size"] / conf["samples_per_s"]
    found = predict_step(kinds, meta, measured_step, src, dst, bool(measured_host_bound(conf)))
    value = dst.gpus * conf["batch_size"] / found.step_s
    floor = launch_floor(dst.gpus, conf["batch_size"], eager_ops(conf))
    if floor is not None and floor[0] < value:
        return floor[0], floor[1], "per op, capped by the launch floor"
    return value, found.binds(), (f"each op of the row's profile scaled by its roofline on {dst.gpu.gpu} over its "
                                  f"roofline on {src.gpu.gpu}; the host's gaps carried unchanged")


def costs(conf: dict, value: float, band: Band | None, devices: int, price: Price | None) -> dict:
    """A prediction in the workload's own unit (tokens/s for a sequence model) and what a million of its
    items cost on the predicted GPUs at `price`, with the cost at each end of the interval."""
    per = conf.get("units_per_sample") or 1.0
    cost = cost_per_million(price, devices, value * per)
    return {"throughput_unit": conf.get("throughput_unit") or conf.get("sample_unit") or "samples/s",
            "predicted_throughput": value * per, "price_per_hour": price.price_per_hour if price else None,
            "currency": price.currency if price else None, "price_from": price.text() if price else None,
            "cost_per_million": cost,
            "cost_low": cost / band.high if cost and band else None,  # the faster end of the interval costs less
            "cost_high": cost / band.low if cost and band else None}


def datasheet_efficiency(conf: dict, src: Setup, terms: tuple[str, ...]) -> float:
    """The measured throughput over the roofline at the source's datasheet ceilings (the all-reduce left out)."""
    t = times(profile_of(conf), src, terms)
    budget = src.gpus * conf["batch_size"] / conf["samples_per_s"] - t.comm_s
    if budget <= 0:
        budget = src.gpus * conf["batch_size"] / conf["samples_per_s"]
    return conf["batch_size"] * t.sample_s / budget


def above_roofline(efficiency: float | None, src: Setup | None, dst: Setup, target_roofline: float) -> str | None:
    """What a measured efficiency above 1 says, or None: the source ran faster than its roofline for the
    counted FLOPs and bytes, so the count holds more than the GPU did (the byte count takes every byte
    from memory: data a step reuses from cache is counted again; or the row was counted by an older
    counter). The efficiency is carried over as measured, so the prediction keeps the two GPUs' ratio of
    ceilings and stands above the target's roofline for the same counts; it gets no interval (its
    group's pairs were counted right)."""
    if efficiency is None or efficiency <= 1:
        return None
    return (f"efficiency {efficiency:.1%} on {src.gpu.gpu}: faster than notebook-bench's roofline for the counted "
            f"FLOPs and bytes, so the count holds more than the GPU moved (data reused from cache, which the count "
            f"leaves out, or a count by an older version: re-measure to recount); carried over as measured, the "
            f"prediction stands above {dst.gpu.gpu}'s roofline for these counts ({target_roofline:.4g}/s)")


ABOVE_BAND = ("none: its source ran above its own roofline (efficiency above 100 %), so its counts are not like those "
              "of the pairs an interval comes from")
UNCOUNTED = ("none: unvalidated (small batches: no count of an eager step's kernels (a compiled step, or a run from "
             "before bench counted them), so the host-bound term its group's pairs were measured with cannot apply)")
BOUND_NOTE = ("the GPU's roofline bound for the counted FLOPs and bytes (efficiency 1: no efficiency carried over "
              "from the CPU)")


def roofline(t: Times, target: Setup) -> float:
    """Samples/s at the target's ceilings with nothing lost: an upper bound, not a prediction."""
    batch = target.batch or 1.0
    return target.gpus * batch / (batch * t.sample_s + t.comm_s)
