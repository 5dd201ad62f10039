"""What a group's published pairs say of a prediction: its interval (the range of measured / predicted that holds
COVERAGE of the group's pairs, bench_core/predict/published.py), said in the words a person decides with, and the
published pair of the same two GPUs beside it. bench_core/predict/measured.py attaches them to each prediction.
"""
from __future__ import annotations

from dataclasses import dataclass

from bench_core.predict.groups import CPU_SOURCE, GROUPS
from bench_core.predict.model import Setup
from bench_core.predict.published import COVERAGE, QUANTILES, error_table


@dataclass(frozen=True)
class Band:
    """What a group's published pairs say of a prediction: measured / predicted lay within [low, high] on
    COVERAGE of them (published.interval); with the median |error| and the worst factor beside."""
    low: float
    high: float
    pairs: int
    median_abs_error: float
    worst_factor: float


def bands() -> dict[str, Band | None]:
    """Each group's interval from its published pairs, or None where no pair was measured (it would be a
    guess). A CPU source has none: it gives a bound, not a prediction."""
    table = {r["group"]: r for r in error_table()}
    return {g: Band(table[g]["interval_low"], table[g]["interval_high"], table[g]["pairs"],
                    table[g]["median_abs_error"], table[g]["worst_factor"])
            if g in table and g != CPU_SOURCE else None for g in GROUPS}


def band_text(group: str, band: Band | None) -> str:
    if group == CPU_SOURCE:
        return "none: a roofline bound (a CPU run's efficiency says nothing of a GPU's)"
    if band is None:
        return f"none: unvalidated ({group}: no measured pair)"
    return (f"{band.low:.2f}x-{band.high:.2f}x the prediction ({group}: {COVERAGE * 100:.0f} % of its {band.pairs} "
            f"published pairs measured within it, the {QUANTILES[0] * 100:.0f}th to {QUANTILES[1] * 100:.0f}th percentile "
            f"of measured / predicted; median error {band.median_abs_error * 100:.0f} %, the worst off by "
            f"{band.worst_factor:.1f}x)")


def in_words(src: Setup, dst: Setup, ratio: float, band: Band) -> str:
    """'the 1x H100-SXM5-80GB measures 0.85-0.97x the 1x H200-SXM-141GB on 80 % of comparable published pairs':
    the predicted ratio times the group's interval."""
    return (f"the {dst.gpus}x {dst.gpu.gpu} measures {ratio * band.low:.2f}-{ratio * band.high:.2f}x the "
            f"{src.gpus}x {src.gpu.gpu} on {COVERAGE * 100:.0f} % of comparable published pairs")


def pair_text(pair: dict | None) -> str | None:
    """A published pair of the same two GPUs, beside a prediction: its ratio, the model's, and its error."""
    if pair is None:
        return None
    workload = f"{pair['source']} {pair['model']} {pair['mode']} {pair['precision']} (as {pair['math_to']})"
    return (f"{workload}: {pair['gpu_to']} / {pair['gpu_from']} published "
            f"{pair['actual'] / pair['measured_from']:.2f}x, the model {pair['predicted'] / pair['measured_from']:.2f}x "
            f"(error {pair['error'] * 100:+.0f} %)")


def per_op_band(whole: float, group: str, band: Band | None, conf: dict) -> str:
    """What stands beside a per-op prediction: it has no published pairs (no published run carries its ops' times),
    so no interval of its own; the whole-step model's figure and its group's interval are said."""
    unit = conf.get("sample_unit") or "samples/s"
    said = (f"{whole * band.low:.4g}-{whole * band.high:.4g} {unit} on {COVERAGE * 100:.0f} % of its {band.pairs} "
            f"published pairs" if band else "no interval")
    return (f"none: the per-op path has no published pairs (no published run carries its ops' times); the whole-step "
            f"model puts it at {whole:.4g} {unit} ({group}: {said})")
