"""`bench compare`'s rounds measured beside other processes: where interleaving still gives a verdict.

A and B run back to back in every round, so a disturbance common to both windows (a neighbour keeping a
core busy all along) slows both and cancels in the round's ratio B/A: that is what interleaving is for.
Rounds flagged only for other processes (LOAD_FLAGS; the hypervisor's steal of this VM's cores, cpu-steal,
is such a load too) are therefore judged, and the verdict says that it was measured under load, where B/A
does not move with the load: neither with its level (the other processes' and the steal's cores in a round;
0 in a quiet one) nor with how unevenly it fell on the two windows (B's
cores minus A's). A slope of log B/A against either whose 95 % interval excludes 0 means the ratio itself
moves with the load, and the verdict stays 'disturbed: re-measure'. A steady load cannot show whether the
ratio would differ on an idle machine (A at 2 threads loses more to a busy core than B at 1): the verdict
says how many cores were busy, as a fact about the measurement, not a correction of it. Rounds with any
other disturbing flag (the device throttled, its clock fell, the repeats disagreed) stay left out.
`bench diff` compares separate runs, which share no disturbance: it stays strict.
"""
from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

from bench_core.results.comparison import (
    CONFIDENCE,
    DISTURBED,
    MIN_EFFECT,
    Comparison,
    compare_paired,
    flag_names,
    join,
    t_quantile,
    usable_or_nan,
)

LOAD_FLAGS = ("other-processes-on-cpu", "cpu-steal", "other-processes-on-device")
# Rounds a verdict under load rests on: fewer cannot show whether the ratio moves with the load.
MIN_ROUNDS = 4
# A load that varies by less than this many cores over the rounds is steady: the sampler's own reading moves
# that much (the threshold above which measure/noise.py flags other processes at all, FOREIGN_CPU_CORES), and a
# slope over such a span is noise. Over a wider span, B/A moves with the load when its slope's interval
# excludes 0 and the change it implies across the span is at least the minimum effect.
MIN_LOAD_SPAN = 0.25
_CORES = re.compile(r"(?:other-processes-on-cpu|cpu-steal)\(\s*([0-9.]+)\s*cores?\)")


def load_cores(noise_flags) -> float:
    """Other processes' load in a row's noise_flags: the cores of 'other-processes-on-cpu(0.94 cores)' and of
    'cpu-steal(0.31 cores)' added, 1.0 for 'other-processes-on-device(...)' (a process on the device, not a share of
    it) alone, 0.0 when none."""
    text = noise_flags if isinstance(noise_flags, str) else ""
    found = _CORES.findall(text)
    if found:
        return sum(float(cores) for cores in found)
    return 1.0 if "other-processes-on" in text else 0.0


def compare_rounds(baseline, candidate, disturbed, loads=None, *, min_effect: float = MIN_EFFECT,
                   confidence: float = CONFIDENCE) -> tuple[Comparison, str]:
    """Paired rounds judged as compare_paired judges them; where that leaves too few undisturbed rounds and
    the others were disturbed by other processes alone, judged under load (the module's rule).

    disturbed: per round, the disturbing flags of either side (results.disturbed.disturbances). loads: per
    round, (A's cores, B's cores) of other processes (load_cores of each row's noise_flags); without it a
    round flagged for load counts 1.0 on both sides. Returns (the comparison, '' or the line saying it was
    measured under load)."""
    plain = compare_paired(baseline, candidate, disturbed=disturbed, min_effect=min_effect, confidence=confidence)
    if plain.verdict != DISTURBED:
        return plain, ""
    names = [flag_names(f) for f in disturbed]
    loads = list(loads) if loads is not None else [(1.0, 1.0) if n else (0.0, 0.0) for n in names]
    kept = [i for i, n in enumerate(names) if set(n) <= set(LOAD_FLAGS)]
    loaded = [i for i in kept if names[i]]
    other = sorted({f for i, n in enumerate(names) if i not in kept for f in n})
    set_aside = f"{len(names) - len(kept)} round(s) left out as disturbed ({', '.join(other)})" if other else ""
    if not loaded or len(kept) < MIN_ROUNDS:
        why = (f"{len(kept)} round(s) without other disturbances: at least {MIN_ROUNDS} show whether B/A moves with "
               "the load") if loaded else ""
        return dataclasses.replace(plain, reason=join(plain.reason, why)), ""
    base = [list(baseline)[i] for i in kept]
    cand = [list(candidate)[i] for i in kept]
    pairs = np.column_stack([usable_or_nan(base), usable_or_nan(cand)])
    usable = np.isfinite(pairs).all(axis=1)
    logs = np.log(pairs[usable, 1]) - np.log(pairs[usable, 0])
    a_load = np.array([float(loads[i][0]) for i in kept])[usable]
    b_load = np.array([float(loads[i][1]) for i in kept])[usable]
    for x, what in (((a_load + b_load) / 2, "the load's level (other processes' cores in a round)"),
                    (b_load - a_load, "how unevenly the load fell on A's and B's windows")):
        moved = slope_text(x, logs, confidence, min_effect)
        if moved:
            return Comparison(None, None, None, DISTURBED, join(f"B/A moved with {what}: {moved}", set_aside),
                              plain.n_baseline, plain.n_candidate, confidence, min_effect), ""
    judged = compare_paired(base, cand, min_effect=min_effect, confidence=confidence)
    busy = (a_load + b_load)[(a_load + b_load) > 0] / 2
    span = f"{busy.min():.2f}" if np.ptp(busy) < 0.005 else f"{busy.min():.2f}-{busy.max():.2f}"
    line = (f"measured under load: {len(loaded)} of {len(names)} rounds ran beside other processes ({span} cores "
            "busy); A and B alternated, so a steady load slows both and cancels in B/A, and B/A did not move with "
            "the load; on an idle machine B/A may differ where A and B use the cores differently")
    return dataclasses.replace(judged, reason=join(line, judged.reason, set_aside)), line


def slope_text(x: np.ndarray, y: np.ndarray, confidence: float = CONFIDENCE, min_effect: float = MIN_EFFECT) -> str:
    """'' when log ratio y does not move with load x: x spans less than MIN_LOAD_SPAN, the least-squares slope's
    interval includes 0, or the change it implies across x's span is under `min_effect`; else the slope and its
    interval in words."""
    n = len(x)
    if n < 3 or np.ptp(x) < MIN_LOAD_SPAN:
        return ""
    dx = x - x.mean()
    slope = float((dx * (y - y.mean())).sum() / (dx ** 2).sum())
    residual = y - y.mean() - slope * dx
    se = math.sqrt(float((residual ** 2).sum()) / (n - 2) / float((dx ** 2).sum()))
    half = t_quantile(0.5 + confidence / 2, n - 2) * se
    if slope - half <= 0.0 <= slope + half or abs(math.exp(slope * np.ptp(x)) - 1) < min_effect:
        return ""
    change = math.exp(slope) - 1
    return (f"{change:+.1%} in B/A per core of load ({confidence:.0%} interval {math.exp(slope - half) - 1:+.1%} to "
            f"{math.exp(slope + half) - 1:+.1%}) over {n} rounds")
