"""Dense peak FLOP/s, the figure MFU divides by: the `Peak` record, and for GPUs the spec-sheet table
(data/gpu_peaks.csv: dense peaks per precision class, memory, links, power, each with its source).
Free of torch, so the report's kernel reads the table without importing it; CPU peaks are measured
in measure/mfu_peak.py.
"""
from __future__ import annotations

import csv
import functools
import re
from dataclasses import dataclass
from pathlib import Path

GPU_PEAKS_CSV = Path(__file__).resolve().parents[1] / "data" / "gpu_peaks.csv"
# The peak class each precision is compared with: the dense tensor-core peak of its compute
# dtype, except strict fp32, which runs on the non-tensor FP32 units.
PEAK_CLASS = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "amp-fp16": "fp16",
              "bf16": "bf16", "amp-bf16": "bf16", "fp8-tensorwise": "fp8", "fp8-rowwise": "fp8"}
# A CPU peak is the best of two ops on the workload's kernel path (autocast where it autocasts),


@dataclass(frozen=True)
class Peak:
    tflops: float | None   # dense peak TFLOP/s of one device, None when unknown
    source: str            # where it comes from, or why it is unknown


@functools.cache
def gpu_spec_table() -> tuple[dict, ...]:
    """Every row of the spec-sheet table (gpu, gpu_pattern, quantity, value, source)."""
    with open(GPU_PEAKS_CSV, newline="") as handle:
        lines = [line for line in handle if line.strip() and not line.startswith("#")]
    return tuple(csv.DictReader(lines))


# The quantities of the table that are dense peaks (TFLOP/s); the others are memory, link, power.
PEAK_QUANTITIES = ("fp32", "tf32", "fp16", "bf16", "fp8")


def gpu_peak_table() -> tuple[dict, ...]:
    """The dense-peak rows of the spec-sheet table."""
    return tuple(r for r in gpu_spec_table() if r["quantity"] in PEAK_QUANTITIES)


# A peak value other than a number: the GPU has no tensor cores for the class (the fp32 peak
# applies: the dtype runs through fp32 math), or the vendor publishes no dense figure.
NO_UNITS, UNPUBLISHED = "none", "unpublished"


def _tflops(row: dict | None) -> float | None:
    return None if row is None or row["value"] in (NO_UNITS, UNPUBLISHED) else float(row["value"])


def gpu_peak(gpu_name: str, precision: str) -> Peak:
    """Dense peak from the table: the first row whose pattern matches the whole GPU name. Never
    below the fp32 row: a GPU without tensor cores for the dtype (bf16 before Ampere) still
    computes in fp32, so its emulated rows are divided by the fp32 peak. A figure the vendor
    does not publish leaves MFU empty."""
    peak_class = PEAK_CLASS.get(precision)
    if "MIG" in gpu_name:
        return Peak(None, f"'{gpu_name}' is a MIG slice: its share of the peak is unknown; mfu left empty")
    rows = [r for r in gpu_peak_table() if re.fullmatch(r["gpu_pattern"], gpu_name.strip(), re.IGNORECASE)]
    if not rows:
        return Peak(None, f"unknown GPU '{gpu_name}': not in {GPU_PEAKS_CSV.name}; mfu left empty")
    by_class = {}
    for row in rows:
        by_class.setdefault(row["quantity"], row)
    own, fp32 = by_class.get(peak_class), by_class.get("fp32")
    for row in (own, fp32):
        if row is not None and row["value"] == UNPUBLISHED:
            return Peak(None, f"no dense {row['quantity']} figure for {gpu_name}: {row['source']}; mfu left empty")
    own_tflops, fp32_tflops = _tflops(own), _tflops(fp32)
    if own_tflops is not None and (fp32_tflops is None or own_tflops >= fp32_tflops):
        return Peak(own_tflops, f"datasheet, dense {peak_class}: {own['source']}")
    if fp32_tflops is not None:
        why = own["source"] if own is not None and own["value"] == NO_UNITS else \
            f"no dense {peak_class} figure above it: no {peak_class} tensor cores?"
        return Peak(fp32_tflops, f"the fp32 peak ({why}): {fp32['source']}")
    return Peak(None, f"{gpu_name} has no dense {peak_class} peak in {GPU_PEAKS_CSV.name} "
                      f"(no {peak_class} tensor cores?); mfu left empty")
