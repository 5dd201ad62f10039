"""How many runs a side a comparison needs to see a slowdown, from the run-to-run spread it measured:
"how many runs do I need to see a 3 % drop?".

The gate (bench diff) calls a regression when the whole 95 % interval of new/old lies below 1 and the
change is at least its threshold (--fail-above). With n runs a side, each run one sample and both sides
spread alike (a standard deviation `sd` of log throughput a run), the interval's half-width is
t(0.975, 2n-2) x sd x sqrt(2/n); a true slowdown is caught 19 times in 20 (POWER) when it clears that cut,
or the threshold where that is larger, by t(0.95, 2n-2) standard errors: Comparison.detectable's rule,
solved for n. A threshold at or above the slowdown never calls it, whatever the runs: the answer then
names a threshold that can (half the slowdown).
"""
from __future__ import annotations

import math

from bench_core.results.comparison import CONFIDENCE, POWER, t_quantile

MAX_RUNS = 100   # past this the answer is "more than 100": re-measure on a quieter machine instead
DROPS = (0.03, 0.05, 0.10)  # the slowdowns bench diff answers for


def detectable_with(runs: int, sd: float, threshold: float, confidence: float = CONFIDENCE,
                    power: float = POWER) -> float:
    """The smallest slowdown (a fraction) `runs` runs a side would call `power` of the time at a run-to-run
    standard deviation `sd` of log throughput, with the gate's `threshold`."""
    df = 2 * runs - 2
    se = sd * math.sqrt(2 / runs)
    cut = max(t_quantile(0.5 + confidence / 2, df) * se, -math.log(1.0 - threshold))
    return 1.0 - math.exp(-(cut + t_quantile(power, df) * se))


def runs_to_detect(drop: float, sd: float, threshold: float, confidence: float = CONFIDENCE,
                   power: float = POWER) -> int | None:
    """The fewest runs a side (at least 2) that catch a slowdown of `drop` `power` of the time; None when no
    number up to MAX_RUNS does (or the threshold is at or above the drop: nothing under it is called)."""
    if threshold >= drop or not sd > 0:
        return None if threshold >= drop else 2
    for runs in range(2, MAX_RUNS + 1):
        if detectable_with(runs, sd, threshold, confidence, power) <= drop:
            return runs
    return None


def runs_text(sd: float, threshold: float, drops=DROPS) -> str:
    """'3 %: 46 runs with --fail-above 1.5 %, 5 %: 17 runs with --fail-above 2.5 %, 10 %: 6 runs (a slowdown at
    or under --fail-above 5 % is never called)': for each slowdown, the runs a side that catch it at this
    spread, with the gate's threshold, or with one that can (half the slowdown) where the gate's cannot."""
    parts, lower = [], False
    for drop in drops:
        usable = threshold if threshold < drop else drop / 2
        lower |= usable != threshold
        runs = runs_to_detect(drop, sd, usable)
        count = f"{runs} runs" if runs else f"more than {MAX_RUNS} runs"
        parts.append(f"{drop:.0%}: {count}" + ("" if usable == threshold else f" with --fail-above {usable:.1%}"))
    return ", ".join(parts) + (f" (a slowdown at or under --fail-above {threshold:.0%} is never called)" if lower else "")
