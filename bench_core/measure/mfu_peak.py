"""The dense peak FLOP/s that MFU divides by: for GPUs the datasheet table (measure/peaks.py), on CPU
measured on the workload's kernel path and cached per machine (`bench peak`), a measurement held down by
another process measured again once the machine is quiet.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

from bench_core.capability import cpu_facts, cpu_model
from bench_core.files import atomic_write_text, cache_folder, locked
from bench_core.measure.peaks import Peak, gpu_peak
from bench_core.workload.precision import resolve_precision

# each grown until one call takes MIN_OP_S: a square linear of N, and a 3x3 conv of
# CPU_PEAK_CONV_CHANNELS channels at CPU_PEAK_CONV_SIZE px over a growing batch.
PEAK_METHOD = "v2: best of linear and conv on the workload path"
CPU_MATMUL_SIZES = (256, 512, 1024, 2048, 4096)
CPU_CONV_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CPU_PEAK_CONV_CHANNELS, CPU_PEAK_CONV_SIZE = 64, 32  # small first: an emulated conv runs at < 1 GFLOP/s
MIN_OP_S = 0.05
CPU_PEAK_BUDGET_S = 1.0                # timed repeats per op after the size is chosen
CPU_PEAK_REPEATS = (5, 20)             # at least / at most, the least only within CPU_PEAK_MAX_S
CPU_PEAK_MAX_S = 3.0                   # per op: a slow (emulated) path stops here with fewer repeats
# 1-min load average per core above which a measured peak is marked suspect (the run that
# triggers the measurement itself accounts for about one per core).
BUSY_LOAD_PER_CORE = 1.5


def peak_for(device_type: str, device_name: str | None, precision: str, threads: int | None = None,
             measure: bool = True) -> Peak:
    """The dense peak one device reaches in `precision`: GPU table, or measured on CPU."""
    if device_type == "cuda":
        return gpu_peak(device_name or "", precision)
    if device_type == "cpu":
        return cpu_peak(precision, threads, measure=measure)
    return Peak(None, f"no peak for {device_type}: no dense per-precision figure is published; mfu left empty")


# -- GPUs: datasheet table ----------------------------------------------------------------------


# -- CPU: measured on the workload's kernel path, cached per machine ------------------------------

def cache_path() -> Path:
    return cache_folder("") / "cpu_peak.json"


def _cpu_path(prec) -> str:
    """The kernel path a precision's workload takes: fp32, a pure cast, or autocast."""
    if prec.autocast_dtype:
        return f"autocast {prec.autocast_dtype}"
    return f"cast {prec.cast_dtype}" if prec.cast_dtype else "float32"


def _cache_key(path: str, threads: int) -> str:
    import torch
    facts = cpu_facts()
    env = "".join(f" {k}={v}" for k, v in facts.dispatch_env)
    # PEAK_METHOD in the key: peaks measured another way (v1: one square mm) are never reused.
    return (f"{cpu_model()} | torch {torch.__version__} | {facts.torch_capability}{env} | {threads} threads | "
            f"{path} | {PEAK_METHOD}")


def _read_cache() -> dict:
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _busy(load: float | None, cores: int | None) -> bool:
    """A load that lowers a measured peak (and so inflates every MFU divided by it)."""
    return load is not None and load > BUSY_LOAD_PER_CORE * (cores or 1)


def _measured_busy(entry: dict) -> bool:
    """Measured under load, and not since confirmed by a quiet measurement that did not beat it."""
    return _busy(entry.get("load_avg_1m"), entry.get("cpu_count")) and "quiet_check" not in entry


def _to_measure(entry: dict | None, fewer: dict | None = None) -> bool:
    """No peak cached, or one measured on a busy machine (or below what fewer threads did: `fewer`) while this
    one is quiet now."""
    doubtful = _measured_busy(entry) or _below(entry, fewer) if entry is not None else False
    return entry is None or (doubtful and not _busy(os.getloadavg()[0], os.cpu_count()))


def _below(entry: dict | None, fewer: dict | None) -> bool:
    """A peak lower than fewer threads of the same path reached, and not since confirmed by a quiet measurement:
    more threads never lower what the hardware can do, so another process held it down (a 2-thread fp32 peak
    measured at load 2.6 on 2 cores, below the load average's threshold, was 46 of the 1-thread's 77 GFLOP/s,
    and a model's MFU came out above 1)."""
    return (entry is not None and fewer is not None and entry["tflops"] < fewer["tflops"]
            and "quiet_check" not in entry and "below_fewer_checked" not in entry)


def _fewer_threads(path: str, threads: int) -> dict | None:
    """The best cached peak of `path` with fewer threads (a floor: the machine can always run on fewer)."""
    cache = _read_cache()
    found = [cache[key] for t in range(1, threads) if (key := _cache_key(path, t)) in cache]
    return max(found, key=lambda entry: entry["tflops"], default=None)


def _source(entry: dict) -> str:
    text = (f"measured: {entry['op']} {entry['path']}, {entry['threads']} threads, "
            f"best of {entry['repeats']} ({entry['measured_at'][:10]})")
    if "quiet_check" in entry:
        check = entry["quiet_check"]
        text += (f"; measured under load {entry['load_avg_1m']:.1f}, then again on a quiet machine "
                 f"({check['measured_at'][:10]}: {check['tflops']:.3g} TFLOP/s, not higher)")
    if _measured_busy(entry):
        text += (f"; measured under load {entry['load_avg_1m']:.1f} on {entry.get('cpu_count') or 1} cores: "
                 "measured again once the machine is quiet, or now with `bench peak --force`")
    if "held_over" in entry:
        over = entry["held_over"]
        text += (f"; the {entry['threads']}-thread peak held: {over['threads']} threads measured only "
                 f"{over['tflops']:.3g} TFLOP/s ({over['measured_at'][:10]}, load {over.get('load_avg_1m') or 0:.1f}), "
                 + ("no more on a quiet machine either" if over.get("checked") else
                    "held down by another process: measured again once the machine is quiet, or now with "
                    "`bench peak --force`"))
    return text


def cpu_peak(precision: str, threads: int | None = None, measure: bool = True, force: bool = False) -> Peak:
    """The peak MFU divides by on this CPU: the best of linear and conv on the precision's own
    kernel path, and never below the fp32 peak (the hardware can always compute in fp32; a slow
    emulation is the workload using the machine badly, not a lower ceiling). Measured (a few
    seconds, under a lock so parallel runs measure once) when not cached and `measure` is true."""
    import torch
    prec = resolve_precision(precision)
    if prec.tf32:
        return Peak(None, "tf32 has no CPU peak (a CUDA tensor-core mode)")
    threads = threads or torch.get_num_threads()
    fp32 = _path_peak("float32", threads, measure, force)
    path = _cpu_path(prec)
    if fp32 is None:
        return Peak(None, f"no measured peak for {threads} threads yet: run `bench peak`")
    if path == "float32":
        return Peak(fp32["tflops"], _source(fp32))
    own = _path_peak(path, threads, measure, force)
    if own is None:
        return Peak(None, f"no measured {path} peak for {threads} threads yet: run `bench peak`")
    if own["tflops"] >= fp32["tflops"]:
        return Peak(own["tflops"], _source(own))
    return Peak(fp32["tflops"], f"the fp32 peak held: {path} reached only {own['tflops']:.3g} TFLOP/s, below "
                                f"fp32 (emulated?), and no peak is below fp32; {_source(fp32)}")


def _path_peak(path: str, threads: int, measure: bool, force: bool) -> dict | None:
    """The cached peak of `path`; measured when there is none, and again when the cached one was
    measured on a busy machine and this one is quiet now (the higher of the two is kept: a peak is
    the best the machine was seen to do; a busy one that the quiet one did not beat is checked, and
    not measured again)."""
    key = _cache_key(path, threads)
    entry = None if force else _read_cache().get(key)
    fewer = _fewer_threads(path, threads)
    if measure and _to_measure(entry, fewer):
        with locked(cache_path().parent):
            entry = None if force else _read_cache().get(key)  # another process may have measured
            if _to_measure(entry, fewer):
                fresh = measure_path_peak(path, threads)
                if entry is None or fresh["tflops"] >= entry["tflops"]:
                    entry = fresh
                else:  # the load did not hold the first one down: it stands, and is not measured again
                    entry = {**entry, "quiet_check": {k: fresh[k] for k in ("tflops", "measured_at", "load_avg_1m")}}
                if _below(entry, fewer):  # quiet, and still below fewer threads: this machine's own (SMT siblings)
                    entry = {**entry, "below_fewer_checked": True}
                cache = _read_cache()
                cache[key] = entry
                atomic_write_text(cache_path(), json.dumps(cache, indent=1, sort_keys=True))
    if entry is not None and fewer is not None and fewer["tflops"] > entry["tflops"]:
        # What fewer threads did is a floor of this many threads' peak (never shown, nor cached, as more)
        over = {k: entry.get(k) for k in ("threads", "tflops", "measured_at", "load_avg_1m")}
        return {**fewer, "held_over": {**over, "checked": bool(entry.get("below_fewer_checked"))}}
    return entry


def measure_path_peak(path: str, threads: int) -> dict:
    """Best TFLOP/s of a square linear and of a 3x3 conv on `path` ('float32', 'cast bfloat16',
    'autocast float16', ...) with `threads` threads.

    Each op grows until one call takes MIN_OP_S (small ones under-use the cores and the path is
    not yet in steady state); then repeats run for CPU_PEAK_BUDGET_S. Best, not median: the peak
    is what the hardware can do, and a disturbed repeat is slower, never faster.
    """
    import contextlib

    import torch
    import torch.nn.functional as F
    kind, _, dtype_name = path.partition(" ")
    dtype = getattr(torch, dtype_name or "float32")
    data_dtype = dtype if kind == "cast" else torch.float32

    def context():
        return torch.autocast("cpu", dtype=dtype) if kind == "autocast" else contextlib.nullcontext()

    def linear(n):
        x, w = torch.randn(n, n, dtype=data_dtype), torch.randn(n, n, dtype=data_dtype)
        return (lambda: F.linear(x, w)), 2 * n ** 3, f"{n}x{n} linear"

    def conv(batch):
        c, hw = CPU_PEAK_CONV_CHANNELS, CPU_PEAK_CONV_SIZE
        x = torch.randn(batch, c, hw, hw, dtype=data_dtype)
        w = torch.randn(c, c, 3, 3, dtype=data_dtype)
        return (lambda: F.conv2d(x, w, padding=1)), 2 * batch * c * c * 9 * hw * hw, \
            f"{batch}x{c}x{hw}x{hw} 3x3 conv"

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    best = None
    try:
        with torch.inference_mode(), context():
            for make, sizes in ((linear, CPU_MATMUL_SIZES), (conv, CPU_CONV_BATCHES)):
                result = _best_of(make, sizes)
                if best is None or result["tflops"] > best["tflops"]:
                    best = result
    finally:
        torch.set_num_threads(previous)
    return {**best, "path": path, "threads": threads, "statistic": "best", "method": PEAK_METHOD,
            "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "load_avg_1m": os.getloadavg()[0], "cpu_count": os.cpu_count()}


def _seconds(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _best_of(make, sizes) -> dict:
    for size in sizes:
        call, flop, op = make(size)
        call()  # warm-up: allocation, kernel selection
        one_s = min(_seconds(call), _seconds(call))  # a disturbed call must not stop the growth early
        if one_s >= MIN_OP_S:
            break
    least, most = CPU_PEAK_REPEATS
    times = [one_s]
    deadline = time.perf_counter() + CPU_PEAK_BUDGET_S
    started = time.perf_counter()
    while len(times) < most and (time.perf_counter() < deadline or
                                 (len(times) < least and time.perf_counter() - started < CPU_PEAK_MAX_S)):
        times.append(_seconds(call))
    return {"tflops": flop / min(times) / 1e12, "median_tflops": flop / sorted(times)[len(times) // 2] / 1e12,
            "op": op, "repeats": len(times)}


# -- `bench peak` ---------------------------------------------------------------------------------


