"""What a row read back from a run file may hold: flat columns, numbers where the schema has numbers, an ok row's
rates within what can be measured. A row that breaks it was edited or corrupted, not written by bench, and every
reader leaves its run out as damaged (store.load_run), naming the column and what it allows.
"""
from __future__ import annotations

import dataclasses
import functools

from bench_core.config.schema import MAX_BATCH, BenchConfig

# The measured columns that hold a number or nothing: the figures the commands compute with (the config's own
# numbers come from BenchConfig's types, number_columns). NaN and infinities are written as nothing.
MEASURED_NUMBERS = (
    "schema_version", "repeat", "batch_size_requested", "batch_size_actual", "global_batch_size", "world_size",
    "device_count", "params_count", "timed_steps", "timed_s", "timed_s_host", "samples_per_s", "throughput",
    "samples_per_s_per_device", "throughput_per_device", "batches_per_s", "mpx_per_s", "mvox_per_s", "s_per_iter",
    "step_time_ms_median", "step_time_ms_mean", "step_time_ms_std", "step_time_ms_p5", "step_time_ms_p95",
    "step_time_cv", "first_step_ms", "compile_s", "warmup_s", "peak_mem_allocated_bytes", "peak_mem_reserved_bytes",
    "peak_rss_bytes", "loss_final", "threads", "tokens_per_s", "output_tokens", "ttft_ms_median", "ttft_ms_p95",
    "prefill_tokens_per_s", "decode_s", "decode_tokens_per_s", "itl_ms_median", "itl_ms_p95", "kv_cache_bytes",
    "embedding_table_bytes", "embedding_bytes_per_s", "denoise_steps_per_s", "images_per_s", "audio_s_per_s",
    "output_cosine", "output_rel_error", "loss_rel_error", "power_w_mean", "power_w_max", "power_limit_w",
    "power_w_sampled", "energy_j", "gpu_util_pct_mean", "gpu_busy", "sm_clock_mhz_mean", "sm_clock_mhz_min",
    "gpu_mem_used_bytes", "gpu_temp_c_max", "cpu_util_pct_mean", "cpu_steal_cores", "flops_per_sample",
    "flops_per_sample_counted", "bytes_per_sample_flop_ops", "bytes_per_sample_other_ops", "ops_per_step",
    "achieved_tflops", "peak_tflops", "mfu", "mfu_rejected", "samples_per_j", "j_per_1k_samples",
    "samples_per_s_per_w", "cost_per_million_samples", "cost_per_million",
)
# An ok row's rates, which every comparison, trend and prediction divides, hold MIN_RATE to MAX_RATE (throughput may
# be empty: rows of schema 4 and older have none, and readers take samples_per_s). A trillion items a second is a
# thousand times a cluster of GPUs on the smallest model; one item in eleven days is longer than any timed window.
# Outside, a figure was edited or corrupted, not measured, and the intervals over its logarithm would overflow.
RATES, MIN_RATE, MAX_RATE = ("samples_per_s", "throughput"), 1e-6, 1e12
MAX_ALLOWED = ("batch_size", "batch_size_requested")  # columns that may also say max (an explicit batch search)
MAX_INT = 2 ** 63  # no count measured is larger, and a float of a far larger int may not exist
FLAT = frozenset({str, int, float, bool, type(None)})  # what a column of a row holds: JSON's scalars


@functools.cache
def number_columns() -> frozenset[str]:
    """The columns that hold a number or nothing: MEASURED_NUMBERS and the config's int and float fields."""
    config = {f.name for f in dataclasses.fields(BenchConfig)
              if {part.strip() for part in str(f.type).split("|")} & {"int", "float"}}
    return frozenset(config | set(MEASURED_NUMBERS))


def is_number(value) -> bool:
    """A finite int or float (by type: true and false are not numbers here)."""
    if type(value) is float:
        return value - value == 0.0  # (NaN and the infinities give NaN)
    return type(value) is int and -MAX_INT < value < MAX_INT


def row_problem(row) -> str | None:
    """Why `row`, read back from a run file, is not one bench wrote (edited, corrupted), naming the column and what it
    allows; None when it is. Every reader's rule (store.load_run); quick, as a history reads tens of thousands."""
    if type(row) is not dict:
        return f"{short_repr(row)} where a row belongs; allowed: an object of columns"
    if not FLAT.issuperset(map(type, row.values())):
        name = next(k for k, v in row.items() if type(v) not in FLAT)
        return f"{name} is {short_repr(row[name])}; allowed: text, a number, true/false or empty (rows are flat)"
    bad = {name for name in number_columns().intersection(row) if row[name] is not None and not is_number(row[name])
           and not (name in MAX_ALLOWED and row[name] == MAX_BATCH)}
    if bad:
        name = next(k for k in row if k in bad)  # the first in the row's own order
        return f"{name} is {short_repr(row[name])}; allowed: a finite number or empty"
    if str(row.get("status")).strip().lower() == "ok":  # as the readers take it
        for name in RATES:
            value = row.get(name)
            fits = is_number(value) and MIN_RATE <= value <= MAX_RATE
            if not fits and not (name == "throughput" and value is None):
                return f"status is ok but {name} is {short_repr(value)}; allowed: {MIN_RATE:g} to {MAX_RATE:g}"
    return None


def short_repr(value, limit: int = 40) -> str:
    """Empty for None, a list or an object by its kind (one nested deep has no repr), else the repr, cut."""
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    text = "empty" if value is None else repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
