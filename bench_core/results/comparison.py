"""One comparison of two sets of throughputs: the ratio (candidate / baseline), its confidence
interval and a verdict. `bench compare`, `bench diff` and the report all say "faster" this way.

Why a t-interval on log throughput, and not a bootstrap (scipy.stats.bootstrap was considered):
a benchmark has 2-10 repeats per configuration. A bootstrap resamples only the spread those few
repeats happened to show, so its intervals are too narrow at that size: a 95 % percentile
bootstrap of the difference of mean logs covered the true ratio in 81 % of 200 seeded trials
with 3 repeats a side, 87 % with 5 and 93 % with 10 (3 % lognormal noise). Student's t is exact
for normal data at any n and widens honestly as n falls (the 97.5 % quantile is 12.7 at 1 degree
of freedom, 2.8 at 4); Welch's t covered 95-97 % in the same trials (tests/test_comparison.py).
Logs, because timing noise
is multiplicative (a slow window is slower by a factor), so log throughput is close to normal,
and a difference of mean logs is the log of a ratio of geometric means: exponentiated, the
interval is an interval for that ratio, the same whichever side is called the baseline.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

MIN_EFFECT = 0.02      # changes under 2 % are "no clear difference"
CONFIDENCE = 0.95
VERDICTS = ("faster", "slower", "no clear difference", "too few repeats", "no data")

METHOD_TEXT = (
    "Speed is compared as a ratio of geometric-mean throughputs (new / old, or B / A: above 1 is "
    "faster) with a 95 % confidence interval from Student's t on log throughput: Welch's t-interval "
    "(unequal variances) for two independent sets of repeats, a one-sample t-interval on the per-round "
    "log ratios for interleaved A/B rounds, exponentiated back to a ratio. Where both sides have 2 or "
    "more runs (bench sweep --runs N), each run's geometric mean is one sample, so the interval covers "
    "how much a whole run shifts from one process to the next; otherwise the repeats of one run are "
    "the samples, and that shift is not in the interval. Logs, because timing noise "
    "is multiplicative; t rather than a bootstrap, because with 2-10 repeats a bootstrap interval is "
    "too narrow. A result is called faster or slower only when the whole interval lies on one side of "
    "1 and the ratio differs from 1 by at least the minimum effect (2 % unless set otherwise); "
    "otherwise there is no clear difference. With fewer than 2 usable repeats on a side there is no "
    "interval and no verdict (too few repeats). Non-positive or missing throughputs are left out."
)


@dataclass(frozen=True)
class Comparison:
    """candidate / baseline throughput with its interval and a verdict (see the module docstring)."""

    ratio: float | None     # candidate / baseline (geometric means); higher = candidate faster
    low: float | None       # CI bounds of the ratio
    high: float | None
    verdict: str            # "faster" | "slower" | "no clear difference" | "too few repeats" | "no data"
    reason: str             # one line: why this verdict
    n_baseline: int
    n_candidate: int
    confidence: float = CONFIDENCE
    min_effect: float = MIN_EFFECT

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def text(self) -> str:
        """'1.84x [1.79-1.90] faster', '1.20x (too few repeats for an interval)', 'no data'."""
        if self.ratio is None:
            return "no data"
        if not self.has_interval:
            return f"{self.ratio:.2f}x (too few repeats for an interval)"
        return f"{self.ratio:.2f}x [{self.low:.2f}-{self.high:.2f}] {self.verdict}"


def usable(samples) -> np.ndarray:
    """The samples that can be compared: finite and positive (a throughput of 0 or NaN is a failed
    or damaged measurement, not a slow one)."""
    values = usable_or_nan(list(samples))
    return values[np.isfinite(values)]


def compare_samples(baseline, candidate, *, min_effect: float = MIN_EFFECT,
                    confidence: float = CONFIDENCE) -> Comparison:
    """Two independent sets of repeat throughputs (e.g. the same configuration in two result
    directories): Welch's t-interval on log throughput, exponentiated (a ratio of geometric means)."""
    check_settings(min_effect, confidence)
    given_a, given_b = list(baseline), list(candidate)
    a, b = usable(given_a), usable(given_b)
    dropped = [f"{given - len(kept)} non-positive or NaN {side} repeat(s) left out"
               for side, given, kept in (("baseline", len(given_a), a), ("candidate", len(given_b), b))
               if len(kept) < given]
    if len(a) == 0 or len(b) == 0:
        empty = [f"no {side} repeats" if not given else f"every {side} repeat is non-positive or NaN ({given} left out)"
                 for side, given, kept in (("baseline", len(given_a), a), ("candidate", len(given_b), b))
                 if len(kept) == 0]
        return Comparison(None, None, None, "no data", "; ".join(empty), len(a), len(b), confidence, min_effect)
    note = "; ".join(dropped)
    log_a, log_b = np.log(a), np.log(b)
    ratio = math.exp(log_b.mean() - log_a.mean())
    if len(a) < 2 or len(b) < 2:
        return Comparison(ratio, None, None, "too few repeats",
                          join(f"{len(a)} baseline and {len(b)} candidate repeat(s): an interval needs at least 2 "
                               "on each side", note), len(a), len(b), confidence, min_effect)
    if np.ptp(log_a) == 0 and np.ptp(log_b) == 0:  # no spread at all: t is undefined, the ratio is exact
        return decide(ratio, ratio, ratio, len(a), len(b), min_effect, confidence,
                      join("no spread in either side's repeats", note))
    with warnings.catch_warnings():  # nearly identical repeats: scipy warns of precision loss; the CI is still right
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = stats.ttest_ind(log_b, log_a, equal_var=False).confidence_interval(confidence)
    return decide(ratio, math.exp(low), math.exp(high), len(a), len(b), min_effect, confidence, note)


def compare_paired(baseline, candidate, *, min_effect: float = MIN_EFFECT,
                   confidence: float = CONFIDENCE) -> Comparison:
    """Paired rounds (bench compare: baseline[i] and candidate[i] ran back to back): a one-sample
    t-interval on the per-round log ratios, exponentiated. A round with an unusable value on
    either side is left out whole."""
    check_settings(min_effect, confidence)
    base, cand = list(baseline), list(candidate)
    if len(base) != len(cand):
        raise ValueError(f"paired samples need the same number of rounds, got {len(base)} and {len(cand)}")
    pairs = np.column_stack([usable_or_nan(base), usable_or_nan(cand)]) if base else np.empty((0, 2))
    kept = pairs[np.isfinite(pairs).all(axis=1)]
    a, b = kept[:, 0], kept[:, 1]
    if len(kept) == 0:
        why = "no round has a usable (positive, finite) throughput on both sides" if base else "no rounds"
        return Comparison(None, None, None, "no data", why, 0, 0, confidence, min_effect)
    logs = np.log(b) - np.log(a)
    ratio = math.exp(logs.mean())
    dropped = len(base) - len(kept)
    note = f"{dropped} round(s) without a usable throughput left out" if dropped else ""
    if len(logs) < 2:
        return Comparison(ratio, None, None, "too few repeats",
                          join(f"{len(logs)} usable round: an interval needs at least 2", note),
                          len(a), len(b), confidence, min_effect)
    if np.ptp(logs) == 0:
        return decide(ratio, ratio, ratio, len(a), len(b), min_effect, confidence,
                      join("the same ratio in every round", note))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = stats.ttest_1samp(logs, 0.0).confidence_interval(confidence)
    return decide(ratio, math.exp(low), math.exp(high), len(a), len(b), min_effect, confidence, note)


def decide(ratio: float, low: float, high: float, n_a: int, n_b: int, min_effect: float, confidence: float,
           note: str = "") -> Comparison:
    """The verdict: faster / slower only when the whole interval is on one side of 1 AND the ratio
    is at least min_effect away from 1; otherwise no clear difference, saying which test failed."""
    ci = f"{confidence:.0%} interval {low:.3f} to {high:.3f}"
    if low > 1.0 and ratio >= 1.0 + min_effect:
        verdict, why = "faster", f"{ratio - 1:.1%} faster; the {ci} is above 1"
    elif high < 1.0 and ratio <= 1.0 - min_effect:
        verdict, why = "slower", f"{1 - ratio:.1%} slower; the {ci} is below 1"
    elif low <= 1.0 <= high:
        verdict, why = "no clear difference", f"the {ci} includes 1"
    else:
        verdict, why = "no clear difference", (f"the change {abs(ratio - 1):.1%} is under the minimum effect "
                                               f"{min_effect:.0%} ({ci})")
    return Comparison(ratio, low, high, verdict, join(why, note), n_a, n_b, confidence, min_effect)


def usable_or_nan(samples: list) -> np.ndarray:
    """The samples as floats, NaN where one is not a positive finite number (text, None, 0, inf)."""
    values = np.asarray(pd.to_numeric(pd.Series(samples, dtype=object), errors="coerce"), dtype=float)
    return np.where(np.isfinite(values) & (values > 0), values, np.nan)


def check_settings(min_effect: float, confidence: float) -> None:
    if not 0.0 <= min_effect < 1.0:
        raise ValueError(f"min_effect must be a fraction in [0, 1), got {min_effect!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


ONE_RUN = "repeats, 1 run"  # the unit when a side has a single run: its interval leaves out run-to-run shift


def compare_rows(baseline: pd.DataFrame, candidate: pd.DataFrame, *, value: str = "samples_per_s",
                 run: str = "run_id", min_effect: float = MIN_EFFECT,
                 confidence: float = CONFIDENCE) -> tuple[Comparison, str, float, float]:
    """Two sets of result rows (one per repeat) of one workload compared, choosing the sample: with 2 or
    more runs on both sides each run's geometric mean is one sample, so the interval covers how much a
    whole run shifts from one process to the next; otherwise the repeats are the samples, and the unit
    says whether a side had a single run. Returns the comparison, the unit ("runs, 3 vs 3",
    "repeats, 1 run" or "repeats") and the two geometric means the ratio divides."""
    base_runs, cand_runs = run_means(baseline, value, run), run_means(candidate, value, run)
    if len(base_runs) >= 2 and len(cand_runs) >= 2:
        base, cand, unit = base_runs, cand_runs, f"runs, {len(base_runs)} vs {len(cand_runs)}"
    else:
        base, cand = list(baseline[value]), list(candidate[value])
        unit = ONE_RUN if min(len(base_runs), len(cand_runs)) == 1 else "repeats"
    compared = compare_samples(base, cand, min_effect=min_effect, confidence=confidence)
    return compared, unit, geometric_mean(base), geometric_mean(cand)


def run_means(rows: pd.DataFrame, value: str = "samples_per_s", run: str = "run_id") -> list[float]:
    """One sample per run: the geometric mean of its usable repeats (runs with none left out)."""
    if run not in rows:
        return []
    means = [geometric_mean(group) for _, group in rows.groupby(run, sort=False)[value]]
    return [m for m in means if math.isfinite(m)]


def geometric_mean(samples) -> float:
    """Of the usable (positive, finite) samples; NaN when there is none."""
    values = usable(samples)
    return float(np.exp(np.log(values).mean())) if len(values) else math.nan


def compare_groups(frame: pd.DataFrame, keys: list[str], value: str = "samples_per_s", side_column: str = "side",
                   baseline="baseline", candidate="candidate", *, min_effect: float = MIN_EFFECT,
                   confidence: float = CONFIDENCE) -> pd.DataFrame:
    """compare_samples per group of `keys` in a long table (one row per repeat, `side_column`
    saying baseline or candidate): one row per group with ratio, low, high, verdict, reason,
    n_baseline, n_candidate and text. A group missing on one side gets verdict "no data"."""
    columns = list(keys) + ["ratio", "low", "high", "verdict", "reason", "n_baseline", "n_candidate", "text"]
    out = []
    for key, group in frame.groupby(list(keys), dropna=False, sort=True):
        side = group[side_column]
        c = compare_samples(group.loc[side == baseline, value], group.loc[side == candidate, value],
                            min_effect=min_effect, confidence=confidence)
        out.append([*(key if isinstance(key, tuple) else (key,)), c.ratio, c.low, c.high, c.verdict, c.reason,
                    c.n_baseline, c.n_candidate, c.text()])
    return pd.DataFrame(out, columns=columns)
