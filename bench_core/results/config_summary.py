"""The short tables of an output folder, rewritten with results.csv: summary.csv, one line per
configuration (repeats, median throughput and its spread, step time, MFU, memory, energy,
parameters), and machines.csv, one line per machine with its environment, written once there
instead of in every line. A summary line's `machine` is the key of its machine's line.

Numbers are rounded to 6 significant digits (far finer than run-to-run noise), so that a line
pastes into a spreadsheet or a paper as it is. Plain Python (csv, statistics): cheap enough to
run after every run of a sweep.
"""
from __future__ import annotations

import csv
import io
import math
import statistics
from pathlib import Path

from bench_core.results.disturbed import disturbed_rows
from bench_core.results.keys import WORKLOAD, key_value, load_text, machine_label
from bench_core.results.rows import environment_columns, schema
from bench_core.workload.user_code import model_identity

SUMMARY_FILE, MACHINES_FILE = "summary.csv", "machines.csv"
DIGITS = 6  # significant digits of a number in summary.csv
JOIN = " | "  # values that differ within one line, in the order they first appear

_MEANING = dict(schema())

# (column, description), in file order. Numbers are over the ok repeats; empty when none ran.
SUMMARY_COLUMNS = [
    ("machine", "the machine, '<device> · <host>', and on a GPU '· GPU-<first 8 of its UUID>': one GPU instance "
                "(as the report names it; two GPUs of one kind behind one host name are two machines); a CPU used "
                "otherwise than whole says how, '<CPU> (1 thread) · <host>' (rows at 1 and 2 threads are two lines, "
                "never repeats of one): its line in machines.csv"),
    *[(name, _MEANING[name].removeprefix("config: ")) for name in WORKLOAD],
    ("load", "mode serve: the point's load in words (users, requests/s, a trace, turns), from the columns before; "
             "a serving point has a load where other modes have a batch size (its batch_size is left empty)"),
    ("precision_support", "native | emulated: whether the device runs the precision in hardware"),
    ("threads", "torch intra-op threads the repeats ran with"),
    ("status", "ok: every repeat ok; partial: some repeats failed; else the latest failure's status "
               "(oom, nan, error, unsupported, crashed, timeout, interrupted; invalid: marked ok without a "
               "positive throughput)"),
    ("repeats_ok", "repeats with status ok (over every run of this configuration in the folder)"),
    ("repeats_total", "rows of this configuration: repeats, and one row per run that did not run"),
    ("runs", "runs of this configuration recorded in the folder"),
    ("message", "the latest failure's message; empty when every repeat is ok"),
    ("repeats_disturbed", "ok repeats flagged as disturbed (other processes, throttling, clock drops, repeats that "
                          "disagree): their figures are not to be trusted; re-measure on a quiet machine"),
    ("disturbed_by", "the disturbing flags of those repeats, comma separated; empty when none"),
    ("samples_per_s_median", "median samples_per_s of the ok repeats (all devices together)"),
    ("sample_unit", "what a sample is: images/s, volumes/s or sequences/s"),
    ("throughput_median", "median throughput of the ok repeats in the workload's own unit (throughput_unit): "
                          "samples/s for images and volumes, tokens/s for text"),
    ("throughput_unit", "images/s, volumes/s or tokens/s"),
    ("samples_per_s_min", "slowest ok repeat, samples/s"),
    ("samples_per_s_q25", "25th percentile of the ok repeats, samples/s (linear interpolation, as pandas)"),
    ("samples_per_s_q75", "75th percentile of the ok repeats, samples/s"),
    ("samples_per_s_max", "fastest ok repeat, samples/s"),
    ("samples_per_s_spread_pct", "(max - min) / median x 100: how far the repeats disagree, %"),
    ("step_time_ms_median", "median over the ok repeats of each repeat's median step time, ms"),
    ("mfu_median", "median MFU of the ok repeats (empty where no peak is known)"),
    ("peak_mem_bytes", "largest peak memory of the ok repeats: torch's peak allocated on the device (CUDA, "
                       "MPS), else the process's peak RSS"),
    ("peak_mem_source", "allocated (torch's allocator on the device) | rss (the whole process)"),
    ("energy_j_per_sample", "median over the ok repeats of one device's joules per sample; empty when energy "
                            "was not measured"),
    ("params_count", "parameters of the model (empty when it was never built)"),
]

_PER_RUN = ("rank_devices", "precision_support_reason")  # environment columns that belong to a run, not a machine
MACHINE_COLUMNS = [("machine", "the key summary.csv lines carry")] + [
    (name, _MEANING[name]) for name in ("device_type", "device_name", "device_count", *environment_columns())
    if name not in _PER_RUN]


def summary_texts(rows: list[dict]) -> dict[str, str]:
    """{file name: its text}: machines.csv and summary.csv of `rows` (results.csv's rows, in its order), which
    results.store writes beside it."""
    return {MACHINES_FILE: _csv_text(MACHINE_COLUMNS, machine_lines(rows)),
            SUMMARY_FILE: _csv_text(SUMMARY_COLUMNS, summary_lines(rows))}


def configuration_key(row: dict) -> tuple:
    """The machine and the workload (rows.WORKLOAD): rows with the same key are repeats of one configuration."""
    return (machine_label(row), *(_text(model_identity(key_value(row, name)) if name == "model" else
                                        key_value(row, name)) for name in WORKLOAD))


def summary_lines(rows: list[dict]) -> list[dict]:
    """One line per configuration, in the order configurations first appear."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(configuration_key(row), []).append(row)
    return [_summary_line(group) for group in groups.values()]


def machine_lines(rows: list[dict]) -> list[dict]:
    """One line per machine: each environment column, values that differ between runs joined with ' | '."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(machine_label(row), []).append(row)
    return [{"machine": machine, **{name: _joined(group, name) for name, _ in MACHINE_COLUMNS[1:]}}
            for machine, group in groups.items()]


def _summary_line(group: list[dict]) -> dict:
    first = group[0]
    ok, failed = [], []
    for row in group:
        (ok if row.get("status") == "ok" and _measured(row) else failed).append(row)
    load = load_text(first)
    line = {"machine": machine_label(first), **{name: key_value(first, name) for name in WORKLOAD}, "load": load or None,
            "model": model_identity(first.get("model")),  # one model across edits of its file (user_code)
            "precision_support": _joined(group, "precision_support"), "threads": _joined(ok or group, "threads"),
            "status": "ok" if not failed else ("partial" if ok else _failure_status(failed[-1])),
            "repeats_ok": len(ok), "repeats_total": len(group), "runs": len({row.get("run_id") for row in group}),
            "message": _failure_message(failed[-1]) if failed else None,
            "params_count": next((row["params_count"] for row in group if _number(row.get("params_count"))), None)}
    if load:
        line["batch_size"] = None  # a serving point's batch_size is the config's default, never used
    line["repeats_disturbed"], line["disturbed_by"] = disturbed_rows(ok)
    speeds = _numbers(ok, "samples_per_s")
    if not speeds:
        return line
    median = statistics.median(speeds)
    q25, q75 = _quartiles(speeds)
    allocated = _numbers(ok, "peak_mem_allocated_bytes")
    memory = allocated or _numbers(ok, "peak_rss_bytes")
    energy = _numbers(ok, "j_per_1k_samples")
    sample_unit, unit = _units(ok[0])
    throughput = _numbers(ok, "throughput") if unit != sample_unit else speeds
    line.update(samples_per_s_median=median, sample_unit=sample_unit, throughput_unit=unit,
                throughput_median=_median(throughput),
                samples_per_s_min=min(speeds), samples_per_s_q25=q25, samples_per_s_q75=q75,
                samples_per_s_max=max(speeds), samples_per_s_spread_pct=(max(speeds) - min(speeds)) / median * 100,
                step_time_ms_median=_median(_numbers(ok, "step_time_ms_median")),
                mfu_median=_median(_numbers(ok, "mfu")),
                peak_mem_bytes=int(max(memory)) if memory else None,
                peak_mem_source=("allocated" if allocated else "rss") if memory else None,
                energy_j_per_sample=statistics.median(energy) / 1000 if energy else None)
    return line


def _measured(row: dict) -> bool:
    """A finished measurement has a positive, finite throughput (as the report's check)."""
    value = _number(row.get("samples_per_s"))
    return value is not None and value > 0


def _failure_status(row: dict) -> str:
    status = _text(row.get("status")) or "unknown"
    return "invalid" if status == "ok" else status  # ok, but no positive finite throughput


def _failure_message(row: dict) -> str | None:
    if row.get("status") == "ok":
        return f"impossible measurement: samples_per_s={row.get('samples_per_s')}"
    return row.get("message")


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q25, _, q75 = statistics.quantiles(values, n=4, method="inclusive")  # numpy's and pandas' default
    return q25, q75


def _units(row: dict) -> tuple[str | None, str | None]:
    """(sample_unit, throughput_unit) as the row says them; rows of schema 4 and older have neither:
    an image (3-dim sample) or a volume (4-dim), counted in samples."""
    if _text(row.get("throughput_unit")):
        return _text(row.get("sample_unit")) or None, _text(row["throughput_unit"])
    unit = {3: "images/s", 4: "volumes/s"}.get(len(_text(row.get("input_shape")).split("x")))
    return unit, unit


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _number(value) -> float | None:
    """A finite number, or None (empty cell, text, NaN, infinity)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _numbers(rows: list[dict], name: str) -> list[float]:
    return [n for n in (_number(row.get(name)) for row in rows) if n is not None]


def _text(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value).strip()


def _joined(rows: list[dict], name: str) -> str:
    return JOIN.join(dict.fromkeys(t for t in (_text(row.get(name)) for row in rows) if t))


def _csv_text(columns: list[tuple[str, str]], lines: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[name for name, _ in columns], extrasaction="ignore")
    writer.writeheader()
    for line in lines:
        writer.writerow({k: _cell(v) for k, v in line.items()})
    return buffer.getvalue()


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}")
    return value
