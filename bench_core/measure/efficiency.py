"""Columns derived from a measured row: achieved FLOP/s and MFU, energy per sample, perf per
watt, cost per million samples, and the noise flags (noise.py) that say a row may be disturbed.

A flag never removes a row; it only says why a reader should doubt it.
"""
from __future__ import annotations

from bench_core.measure import mfu_peak
from bench_core.measure.noise import noise_flags
from bench_core.workload.precision import resolve_precision


def derive(row: dict, cfg) -> dict:
    """Derived columns of one finished row (runner: `row.update(derive(row, cfg))`)."""
    out = _flops_columns(row)
    out.update(_energy_columns(row))
    out.update(_cost_columns(row, cfg))
    out["noise_flags"] = ";".join(noise_flags({**row, **out}, cfg)) or None
    return out


def _flops_columns(row: dict) -> dict:
    per_sample, samples_per_s = row.get("flops_per_sample"), row.get("samples_per_s")
    achieved = per_sample * samples_per_s / 1e12 if per_sample and samples_per_s else None
    out = {"achieved_tflops": achieved}
    if not row.get("device_type") or not row.get("precision") or row.get("mfu_note"):
        return out  # mfu_note: the task says why MFU does not apply (memory-bound lookups): no peak, no MFU
    # Measure a missing CPU peak only when there is something to divide (it takes ~1-2 s).
    peak = mfu_peak.peak_for(row["device_type"], row.get("device_name"), row["precision"],
                          threads=row.get("threads"), measure=achieved is not None)
    out.update(peak_tflops=peak.tflops, peak_source=peak.source)
    if achieved is not None and peak.tflops:
        mfu = achieved / (peak.tflops * (row.get("world_size") or 1))
        # Above 1 the peak is wrong, not the row: no figure is shown, the flag carries the value.
        out["mfu"], out["mfu_rejected"] = (mfu, None) if mfu <= 1 else (None, mfu)
    if resolve_precision(row["precision"]).float8_recipe:
        # Which peak fp8 MFU divides by is disputed (torchtitan's users asked): the FP8 one (mfu) and the
        # BF16 one, both stated.
        bf16 = mfu_peak.peak_for(row["device_type"], row.get("device_name"), "amp-bf16", measure=False)
        out["peak_tflops_bf16"] = bf16.tflops
        if achieved is not None and bf16.tflops:
            out["mfu_bf16_peak"] = achieved / (bf16.tflops * (row.get("world_size") or 1))
    return out


def _energy_columns(row: dict) -> dict:
    """Per device: energy and power are one device's, so the throughput is too."""
    per_device = row.get("samples_per_s_per_device") or row.get("samples_per_s")
    energy_j, power_w, seconds = row.get("energy_j"), row.get("power_w_mean"), row.get("timed_s")
    out = {}
    if per_device and power_w:
        out["samples_per_s_per_w"] = per_device / power_w
    if per_device and energy_j and seconds:
        out["samples_per_j"] = per_device * seconds / energy_j
    elif "samples_per_s_per_w" in out:
        out["samples_per_j"] = out["samples_per_s_per_w"]  # samples/s per W = samples per J
    if out.get("samples_per_j"):
        out["j_per_1k_samples"] = 1000.0 / out["samples_per_j"]
    return out


def _cost_columns(row: dict, cfg) -> dict:
    price = getattr(cfg, "price_per_hour", None)
    samples_per_s = row.get("samples_per_s")
    if price is None or not samples_per_s:
        return {}
    per_second = price * (row.get("world_size") or 1) / 3600.0
    throughput = row.get("throughput") or samples_per_s
    return {"cost_per_million_samples": per_second / samples_per_s * 1e6, "cost_per_million": per_second / throughput * 1e6}


