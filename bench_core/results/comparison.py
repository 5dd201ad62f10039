"""One comparison of two sets of throughputs: the ratio (candidate / baseline), its confidence
interval and a verdict. `bench compare`, `bench diff` and the report all say "faster" this way.

Why a t-interval on log throughput, and not a bootstrap (scipy.stats.bootstrap was considered):
a benchmark has 2-10 repeats per configuration. A bootstrap resamples only the spread those few
repeats happened to show, so its intervals are too narrow at that size: a 95 % percentile
bootstrap of the difference of mean logs covered the true ratio in 81 % of 200 seeded trials
with 3 repeats a side, 87 % with 5 and 93 % with 10 (3 % lognormal noise). Student's t is exact
for normal data at any n and widens honestly as n falls (the 97.5 % quantile is 12.7 at 1 degree
of freedom, 2.8 at 4); Welch's t covered 95-97 % in the same trials (tests/test_comparison.py).
Logs, because timing noise is multiplicative (a slow window is slower by a factor), so log
throughput is close to normal, and a difference of mean logs is the log of a ratio of geometric
means: exponentiated, the interval is an interval for that ratio, the same whichever side is
called the baseline.

Rows (compare_rows) add what a set of bare numbers cannot say: which repeats were disturbed (left
out; too few left gives DISTURBED), which share a run, and how far a run may shift when a side has
only one (RUN_SHIFT: stated, since one run cannot measure it).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

MIN_EFFECT = 0.02      # changes under 2 % are "no clear difference"
CONFIDENCE = 0.95
POWER = 0.95           # 'detectable': the slowdown this comparison would call 19 times in 20
DISTURBED = "disturbed: re-measure"
VERDICTS = ("faster", "slower", "no clear difference", "too few repeats", "no data", DISTURBED)

# How far a whole run can shift from one process to the next: the standard deviation of a run's log
# throughput, stated per device type, for sides measured in one run (the evidence is in METHOD_TEXT).
# A type not listed gets the largest.
RUN_SHIFT = {"cpu": 0.10, "mps": 0.10, "cuda": 0.07}

METHOD_TEXT = (
    "Speed is compared as a ratio of geometric-mean throughputs (new / old, or B / A: above 1 is "
    "faster) with a 95 % confidence interval from Student's t on log throughput: Welch's t-interval "
    "(unequal variances) for two independent sets of samples, a one-sample t-interval on the per-round "
    "log ratios for interleaved A/B rounds, exponentiated back to a ratio. Logs, because timing noise "
    "is multiplicative; t rather than a bootstrap, because with 2-10 samples a bootstrap interval is "
    "too narrow. "
    "A whole run (one process) can shift against the next by more than its repeats vary: two sweeps "
    "of the same code, one run each, measured 10-15 % apart for one model on a shared 2-core VM, and "
    "20 % apart (resnet18 training at 32 px, a quiet 2-core AMD EPYC), and single models move 5-9 % "
    "between runs of the same build in TorchBench. So where both sides have "
    "2 or more runs (bench sweep --runs N, or params/ci-gate.yaml), each run's geometric mean is one "
    "sample and the interval measures that shift. Where a side has one run, the samples are the "
    "repeats and the interval adds a stated run-to-run shift it cannot measure: a standard deviation "
    f"of {RUN_SHIFT['cpu']:.0%} of a run's throughput on CPU and MPS, {RUN_SHIFT['cuda']:.0%} on CUDA "
    "(conservative: 20 % between two runs is about two standard deviations of a run's spread of 7-8 %; "
    "no GPU has been measured yet, so CUDA's is TorchBench's 5-9 % read the same way, rounded up), so "
    "one run a side only calls large changes (about 40 % on CPU), and bench diff says how large "
    "(its detectable slowdown). Two sides measured in one process (the precisions, compile modes and "
    "layouts of one model share a sweep's execution) share the shift and get no such term; machines "
    "and device counts are separate processes and get it. "
    "Only undisturbed measurements are judged: repeats flagged other-processes-on-cpu, cpu-steal, "
    "other-processes-on-device, throttle, clock-drop, unstable-repeats or (serving) client-saturated are left "
    "out, and when too few are left for an interval the verdict is 'disturbed: re-measure', never faster or slower. "
    "power-capped and host-bound rows are judged (a re-measure gives the same), and the comparison says what bound "
    "them: across machines, host-bound rows compare the hosts, not the GPUs. "
    "A result is called faster or slower only when the whole interval lies on one side of 1 and the "
    "ratio differs from 1 by at least the minimum effect (2 % unless set otherwise); otherwise there "
    "is no clear difference. With fewer than 2 usable samples on a side there is no interval and no "
    "verdict (too few repeats). Non-positive or missing throughputs are left out."
)


@dataclass(frozen=True)
class Comparison:
    """candidate / baseline throughput with its interval and a verdict (see the module docstring)."""

    ratio: float | None     # candidate / baseline (geometric means); higher = candidate faster
    low: float | None       # CI bounds of the ratio
    high: float | None
    verdict: str            # one of VERDICTS
    reason: str             # one line: why this verdict
    n_baseline: int
    n_candidate: int
    confidence: float = CONFIDENCE
    min_effect: float = MIN_EFFECT
    se: float | None = None     # standard error of the log ratio (None without an interval)
    df: float | None = None     # its degrees of freedom (inf when it rests on a stated shift alone)

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def text(self) -> str:
        """'1.84x [1.79-1.90] faster', '1.20x (too few repeats for an interval)', 'no data',
        'disturbed: re-measure'."""
        if self.verdict == DISTURBED:
            return DISTURBED
        if self.ratio is None:
            return "no data"
        if not self.has_interval:
            return f"{self.ratio:.2f}x (too few repeats for an interval)"
        return f"{self.ratio:.2f}x [{self.low:.2f}-{self.high:.2f}] {self.verdict}"

    def regressed(self, fail_above: float) -> bool:
        """The gate's rule (bench diff): slower by more than `fail_above` with the whole interval below 1."""
        return self.has_interval and self.high < 1.0 and self.ratio <= 1.0 - fail_above

    def detectable(self, threshold: float | None = None, power: float = POWER) -> float | None:
        """The smallest slowdown (a fraction: 0.12 is 12 % slower) this comparison would have called
        `power` of the time at its noise: the decision needs the interval's top below 1 and the
        change at least `threshold` (default the minimum effect; bench diff passes its --fail-above),
        so a true log change must clear that cut by t(power) standard errors. None without an interval."""
        if self.se is None or self.df is None:
            return None
        threshold = self.min_effect if threshold is None else threshold
        cut = max(t_quantile(0.5 + self.confidence / 2, self.df) * self.se, -math.log(1.0 - threshold))
        return 1.0 - math.exp(-(cut + t_quantile(power, self.df) * self.se))


def t_quantile(q: float, df: float) -> float:
    """Student's t quantile (scipy.stats.t.ppf), from scipy.special: importing scipy.stats took 0.4 s
    of every report's start, scipy.special 0.1 s. Imported at the first interval (a lazy import:
    0.27 s of CPU), not with this module: `bench report`'s own process imports it through the
    summary package and never computes one (its kernel does)."""
    from scipy import special
    return float(special.stdtrit(df, q))


def usable(samples) -> np.ndarray:
    """The samples that can be compared: finite and positive (a throughput of 0 or NaN is a failed
    or damaged measurement, not a slow one)."""
    values = usable_or_nan(list(samples))
    return values[np.isfinite(values)]


def compare_samples(baseline, candidate, *, shift_sd: float = 0.0, min_effect: float = MIN_EFFECT,
                    confidence: float = CONFIDENCE) -> Comparison:
    """Two independent sets of throughputs (e.g. the same configuration in two result directories):
    Welch's t-interval on log throughput, exponentiated (a ratio of geometric means).

    shift_sd: the standard deviation, on the log ratio, of a shift the samples cannot show (a whole
    run moving against the next when a side has one run); added to the variance with no degrees of
    freedom of its own (it is stated, not estimated), so the t quantile follows Welch-Satterthwaite
    over the measured parts only."""
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
    change = log_b.mean() - log_a.mean()
    ratio = math.exp(change)
    if len(a) < 2 or len(b) < 2:
        return Comparison(ratio, None, None, "too few repeats",
                          join(f"{len(a)} baseline and {len(b)} candidate repeat(s): an interval needs at least 2 "
                               "on each side", note), len(a), len(b), confidence, min_effect)
    var_a, var_b = log_a.var(ddof=1) / len(a), log_b.var(ddof=1) / len(b)
    measured, stated = var_a + var_b, shift_sd ** 2
    if measured + stated == 0:  # no spread at all and nothing stated: the ratio is exact
        return decide(ratio, ratio, ratio, len(a), len(b), min_effect, confidence,
                      join("no spread in either side's repeats", note), se=0.0, df=math.inf)
    # Welch-Satterthwaite; the stated part has infinite degrees of freedom, so it adds no term below
    df = (measured + stated) ** 2 / (var_a ** 2 / (len(a) - 1) + var_b ** 2 / (len(b) - 1)) if measured else math.inf
    return interval(change, math.sqrt(measured + stated), df, len(a), len(b), min_effect, confidence, note)


def compare_paired(baseline, candidate, *, disturbed=None, min_effect: float = MIN_EFFECT,
                   confidence: float = CONFIDENCE) -> Comparison:
    """Paired rounds (bench compare: baseline[i] and candidate[i] ran back to back): a one-sample
    t-interval on the per-round log ratios, exponentiated. A round with an unusable value on
    either side is left out whole.

    disturbed: per round, the disturbing flags of either side's row (results.disturbed.disturbances;
    '' when none). Such rounds are left out, as compare_rows leaves out disturbed repeats; when too
    few are left for an interval the verdict is DISTURBED, never faster or slower."""
    base, cand = list(baseline), list(candidate)
    flags = [flag_names(f) for f in (disturbed if disturbed is not None else [""] * len(base))]
    if len(base) != len(cand) or len(flags) != len(base):
        raise ValueError(f"paired samples need the same number of rounds, got {len(base)}, {len(cand)} "
                         f"and {len(flags)} disturbance entries")
    hit = [bool(f) for f in flags]
    if not any(hit):
        return _paired(base, cand, min_effect, confidence)
    found = sorted({name for f in flags for name in f})
    kept = _paired([v for v, h in zip(base, hit) if not h], [v for v, h in zip(cand, hit) if not h],
                   min_effect, confidence)
    dropped = f"{sum(hit)} of {len(base)} rounds left out as disturbed ({', '.join(found)})"
    if not kept.has_interval:
        return Comparison(None, None, None, DISTURBED, join(dropped, "too few undisturbed left for an interval"),
                          kept.n_baseline, kept.n_candidate, confidence, min_effect)
    return dataclasses.replace(kept, reason=join(kept.reason, dropped))


def _paired(base: list, cand: list, min_effect: float, confidence: float) -> Comparison:
    check_settings(min_effect, confidence)
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
                      join("the same ratio in every round", note), se=0.0, df=math.inf)
    se = float(logs.std(ddof=1) / math.sqrt(len(logs)))
    return interval(float(logs.mean()), se, len(logs) - 1, len(a), len(b), min_effect, confidence, note)


def interval(change: float, se: float, df: float, n_a: int, n_b: int, min_effect: float, confidence: float,
             note: str) -> Comparison:
    """The t-interval of a log change with its standard error and degrees of freedom, as a ratio."""
    half = t_quantile(0.5 + confidence / 2, df) * se
    return decide(math.exp(change), math.exp(change - half), math.exp(change + half), n_a, n_b, min_effect,
                  confidence, note, se=se, df=df)


def decide(ratio: float, low: float, high: float, n_a: int, n_b: int, min_effect: float, confidence: float,
           note: str = "", *, se: float | None = None, df: float | None = None) -> Comparison:
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
    return Comparison(ratio, low, high, verdict, join(why, note), n_a, n_b, confidence, min_effect, se, df)


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


ONE_RUN = "repeats, 1 run"        # a side has one run: the interval adds the stated run shift
SAME_RUNS = "repeats, one process"  # both sides measured in one process: the run shift is shared


def run_shift(device_types) -> float:
    """The stated run shift for rows of these device types: the largest that applies."""
    found = {str(t) for t in device_types if isinstance(t, str) and t}
    return max((RUN_SHIFT.get(t, max(RUN_SHIFT.values())) for t in found), default=max(RUN_SHIFT.values()))


@dataclass(frozen=True)
class RowsComparison:
    """compare_rows' answer: the comparison, its sample unit, the two geometric means its ratio
    divides, and the disturbed repeats it left out on each side with their flags."""

    comparison: Comparison
    unit: str                    # "runs, 3 vs 3", ONE_RUN or SAME_RUNS
    baseline_mean: float         # geometric mean over runs of each run's undisturbed repeats; NaN if none
    candidate_mean: float
    left_out: tuple[int, int] = (0, 0)
    disturbed_by: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    runs_given: tuple[int, int] = (0, 0)   # runs on each side before the disturbed repeats were left out
    runs_used: tuple[int, int] = (0, 0)    # runs on each side with an undisturbed repeat: those judged


def compare_rows(baseline: pd.DataFrame, candidate: pd.DataFrame, *, value: str = "samples_per_s",
                 run: str = "run_id", disturbed: str = "disturbed_by", device: str = "device_type",
                 separate_runs: bool | None = None, min_effect: float = MIN_EFFECT,
                 confidence: float = CONFIDENCE) -> RowsComparison:
    """Two sets of result rows (one per repeat) of one workload compared from their undisturbed repeats.

    - `disturbed` names a column holding each row's disturbing flags (comma separated, empty when
      none; results.disturbed.disturbances decides them): those repeats are left out, and when too few
      are left for an interval the verdict is DISTURBED, never faster or slower.
    - With 2 or more runs on both sides each run's geometric mean is one sample, so the interval
      measures how much a whole run shifts from one process to the next.
    - Otherwise the repeats are the samples. When the sides ran in separate processes
      (`separate_runs`; None: unless both have the same run ids), the interval adds the stated
      RUN_SHIFT of their `device` type, which one run a side cannot measure."""
    kept, left_out, flags = [], [], []
    given = tuple(len(run_means(rows, value, run)) for rows in (baseline, candidate))
    for rows in (baseline, candidate):
        names = (rows[disturbed].map(flag_names) if disturbed in rows
                 else pd.Series([()] * len(rows), index=rows.index, dtype=object))
        hit = names.map(bool)
        kept.append(rows[~hit])
        left_out.append(int(hit.sum()))
        flags.append(tuple(sorted({f for found in names[hit] for f in found})))
    (base, cand), runs = kept, [run_means(rows, value, run) for rows in kept]
    if len(runs[0]) >= 2 and len(runs[1]) >= 2:
        compared = compare_samples(runs[0], runs[1], min_effect=min_effect, confidence=confidence)
        unit = f"runs, {len(runs[0])} vs {len(runs[1])}"
    else:
        if separate_runs is None:
            separate_runs = not (run in baseline and run in candidate
                                 and set(baseline[run].dropna()) == set(candidate[run].dropna()))
        shift = run_shift(pd.concat([baseline.get(device, pd.Series(dtype=object)),
                                     candidate.get(device, pd.Series(dtype=object))])) if separate_runs else 0.0
        shift_sd = shift * math.sqrt(1 / max(len(runs[0]), 1) + 1 / max(len(runs[1]), 1))
        compared = compare_samples(base[value], cand[value], shift_sd=shift_sd, min_effect=min_effect,
                                   confidence=confidence)
        unit = ONE_RUN if separate_runs else SAME_RUNS
        if shift and compared.has_interval:
            compared = dataclasses.replace(compared, reason=join(
                compared.reason, f"a side has one run: the interval adds a stated run-to-run shift of {shift:.0%} "
                                 "a run, which one run cannot measure"))
    dropped = [f"{n} {side} repeat(s) left out as disturbed ({', '.join(f)})"
               for side, n, f in (("baseline", left_out[0], flags[0]), ("candidate", left_out[1], flags[1])) if n]
    if dropped and not compared.has_interval:
        compared = Comparison(None, None, None, DISTURBED, join(*dropped, "too few undisturbed left for an interval"),
                              compared.n_baseline, compared.n_candidate, confidence, min_effect)
    elif dropped:
        compared = dataclasses.replace(compared, reason=join(compared.reason, *dropped))
    return RowsComparison(compared, unit, geometric_mean(runs[0]) if runs[0] else geometric_mean(base[value]),
                          geometric_mean(runs[1]) if runs[1] else geometric_mean(cand[value]),
                          (left_out[0], left_out[1]), (flags[0], flags[1]), given, (len(runs[0]), len(runs[1])))


def flag_names(value) -> tuple[str, ...]:
    """The flag names in a cell: a list, or text separated by commas or semicolons ('' / NaN: none)."""
    if isinstance(value, (list, tuple, set)):
        items = list(value)
    elif isinstance(value, str):
        items = value.replace(";", ",").split(",")
    else:
        items = []
    return tuple(dict.fromkeys(str(i).split("(")[0].strip() for i in items if str(i).strip()))


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
