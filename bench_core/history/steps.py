"""Steps in a configuration's history: where the level of its runs shifts by more than the history's own
run-to-run noise, with an interval, and what differs between the runs either side. Several configurations
stepping on one date with the same change are one finding.

How a step is found. Each undisturbed run is one sample: the log of the geometric mean of its ok repeats (a run
with a disturbed repeat is shown, never used). ruptures' binary segmentation (Binseg, penalised, with a
least-squares cost over cumulative sums: 16 ms for 1,000 runs, where its PELT took 2-16 s) proposes where the
level shifts, with at least MIN_RUNS runs on each side: a single run, however far off, is never a step. Each
proposal is then judged with a t-interval of its shift: the difference of the mean logs of the stretches either
side, over the pooled run-to-run standard deviation of the whole line (the runs' residuals around their
stretches' levels, runs - stretches degrees of freedom), never below what the runs' own repeats show. A step
is called where the whole interval lies on one side of 1 and the shift is at least the minimum effect:
results.comparison's rule, as in bench diff and bench compare.
A proposal that fails is dropped (the weakest first) and the rest judged again. How often a steady history
shows a step anyway is measured (benchmarks/history_false_alarms.py, docs/history.md).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from bench_core.history.read import CAUSE_FIELDS, History
from bench_core.results.comparison import CONFIDENCE, MIN_EFFECT, Comparison, interval, t_quantile

MIN_RUNS = 2           # runs on each side of a step: one run is never a step
PENALTY = 5.0          # the search's penalty, x the line's noise variance x ln(runs) (calibrated: docs/history.md)
NOISE_FLOOR = 1e-3     # a line of identical runs still has a scale for the proposals
JUDGED = ("faster", "slower")
SHORT = {"model_code_sha256": 8}  # a hash shown by its first characters, as a name carried it


@dataclass(frozen=True)
class Level:
    """A stretch's geometric-mean throughput with its interval, over `runs` runs."""
    value: float
    low: float
    high: float
    runs: int
    since: str


@dataclass
class Fit:
    """A line's undisturbed runs (`runs`, in time order) cut into stretches of one level at `bounds` (the index of
    each later stretch's first run), each bound's comparison (after / before), the pooled run-to-run standard
    deviation of a run's log throughput and its degrees of freedom (0: no run-to-run spread measured)."""
    line: int
    runs: pd.DataFrame
    bounds: list[int] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    sd: float = math.nan
    df: int = 0

    def stretches(self) -> list[tuple[int, int]]:
        edges = [0, *self.bounds, len(self.runs)]
        return list(zip(edges[:-1], edges[1:]))

    def level(self, start: int, end: int, confidence: float = CONFIDENCE) -> Level:
        logs = self.runs["log_mean"].to_numpy()[start:end]
        half = t_quantile(0.5 + confidence / 2, self.df) * self.sd / math.sqrt(len(logs)) if self.df else math.nan
        mean = float(logs.mean())
        return Level(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(logs),
                     str(self.runs["date"].iloc[start]))

    def last_level(self, confidence: float = CONFIDENCE) -> Level | None:
        return self.level(*self.stretches()[-1], confidence) if len(self.runs) else None


@dataclass(frozen=True)
class Step:
    """One line's step: the stretches either side, the last run before it and the first after, their shift
    (after / before, with its interval) and what differs between those two runs."""
    line: int
    before: Level
    after: Level
    comparison: Comparison
    last_before: dict
    first_after: dict
    changes: tuple[tuple[str, str, str], ...]

    @property
    def date(self) -> str:
        return str(self.first_after["date"])


@dataclass
class Finding:
    """Steps of one or more configurations from one date with the same change: one finding."""
    number: int
    date: str
    changes: tuple[tuple[str, str, str], ...]
    steps: list[Step]


@dataclass
class Analysis:
    history: History
    fits: dict[int, Fit]
    findings: list[Finding]
    min_effect: float = MIN_EFFECT
    confidence: float = CONFIDENCE

    @property
    def steps(self) -> list[Step]:
        return [s for f in self.findings for s in f.steps]


def analyze(history: History, min_effect: float = MIN_EFFECT, confidence: float = CONFIDENCE) -> Analysis:
    """Every line's fit, and its steps gathered into findings (in date order)."""
    fits = {int(line): fit_line(int(line), runs, min_effect, confidence)
            for line, runs in history.runs.groupby("line", sort=True)}
    steps = [step for fit in fits.values() for step in steps_of(fit, confidence)]
    return Analysis(history, fits, gather(steps), min_effect, confidence)


def usable_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs a step may rest on: some repeat ran ok, none of them disturbed, a time to order by."""
    return runs[(runs["repeats_ok"] > 0) & (runs["disturbed_by"] == "") & runs["time"].notna()]


def fit_line(line: int, runs: pd.DataFrame, min_effect: float = MIN_EFFECT, confidence: float = CONFIDENCE) -> Fit:
    used = usable_runs(runs).sort_values("time", kind="stable").reset_index(drop=True)
    found = fit_logs(used["log_mean"].to_numpy(dtype=float), repeats_variance(used), min_effect, confidence)
    return Fit(line, used, *found)


def fit_logs(logs: np.ndarray, floor: float, min_effect: float = MIN_EFFECT, confidence: float = CONFIDENCE
             ) -> tuple[list[int], list[Comparison], float, int]:
    """The steps of one line's run logs, in time order (`floor`: the variance its repeats show): the bounds, their
    comparisons, the pooled run-to-run standard deviation and its degrees of freedom."""
    bounds = proposals(logs, floor) if len(logs) >= 2 * MIN_RUNS else []
    while True:
        sd, df = pooled_sd(logs, bounds, floor)
        comparisons = [shift(logs, bounds, i, sd, df, min_effect, confidence) for i in range(len(bounds))]
        weak = [i for i, c in enumerate(comparisons) if c.verdict not in JUDGED]
        if not weak:
            return bounds, comparisons, sd, df
        # (a shift of no spread at all is exact: nothing weaker)
        del bounds[min(weak, key=lambda i: abs(math.log(comparisons[i].ratio)) / (comparisons[i].se or math.inf))]


@functools.cache
def cumulative_l2() -> type:
    """The cost class, made on first use: ruptures imports scipy.stats and scipy.signal (1.1 s of CPU on a Zen 3),
    which every process that imports the history (a report's kernel) would pay for a History with no line long
    enough to search."""
    from ruptures.base import BaseCost

    class CumulativeL2(BaseCost):
        """ruptures' least-squares cost of a segment (the sum of squared deviations from its mean, as its "l2"), from
        cumulative sums: each segment in constant time, where "l2" takes the variance of the segment's values."""
        model = "l2-cumulative"
        min_size = MIN_RUNS

        def fit(self, signal):
            self.signal = np.asarray(signal, dtype=float).reshape(len(signal), -1)
            values = self.signal[:, 0]
            self.sums = np.concatenate([[0.0], np.cumsum(values)])
            self.squares = np.concatenate([[0.0], np.cumsum(values * values)])
            return self

        def error(self, start, end):
            total = self.sums[end] - self.sums[start]
            return max(float(self.squares[end] - self.squares[start] - total * total / (end - start)), 0.0)

    return CumulativeL2


def proposals(logs: np.ndarray, floor: float) -> list[int]:
    """Where binary segmentation puts the shifts of the mean, MIN_RUNS runs a side at least, its penalty scaled
    by the line's noise: the spread of successive differences (robust to the steps themselves), never below the
    repeats' own (`floor`, a variance) nor NOISE_FLOOR."""
    differences = np.diff(logs)
    scale = float(np.median(np.abs(differences))) / (0.6745 * math.sqrt(2)) if len(differences) else 0.0
    noise = max(scale ** 2, floor, NOISE_FLOOR ** 2)
    import ruptures
    found = ruptures.Binseg(custom_cost=cumulative_l2()(), min_size=MIN_RUNS, jump=1).fit(logs.reshape(-1, 1)).predict(
        pen=PENALTY * noise * math.log(len(logs)))
    return [int(b) for b in found[:-1]]


def repeats_variance(runs: pd.DataFrame) -> float:
    """The variance of a run's mean log throughput that its own repeats show (their variance / their count),
    averaged over the runs with two or more repeats; 0 where none has."""
    within = (runs["log_var"] / runs["repeats_ok"]).where(runs["repeats_ok"] > 1)
    within = within[np.isfinite(within)]
    return float(within.mean()) if len(within) else 0.0


def pooled_sd(logs: np.ndarray, bounds: list[int], floor: float) -> tuple[float, int]:
    """The run-to-run standard deviation of a run's log throughput around its stretch's level, pooled over the
    line's stretches, with runs - stretches degrees of freedom; never below the repeats' own (`floor`)."""
    edges = [0, *bounds, len(logs)]
    residuals = np.concatenate([logs[a:b] - logs[a:b].mean() for a, b in zip(edges[:-1], edges[1:]) if b > a]) \
        if len(logs) else np.array([])
    df = len(logs) - (len(edges) - 1)
    if df <= 0:
        return math.nan, 0
    return math.sqrt(max(float((residuals ** 2).sum()) / df, floor)), df


def shift(logs: np.ndarray, bounds: list[int], i: int, sd: float, df: int, min_effect: float,
          confidence: float) -> Comparison:
    """The shift at bounds[i]: the stretch after it over the stretch before, with its t-interval."""
    edges = [0, *bounds, len(logs)]
    before, after = logs[edges[i]:edges[i + 1]], logs[edges[i + 1]:edges[i + 2]]
    se = sd * math.sqrt(1 / len(before) + 1 / len(after))
    return interval(float(after.mean() - before.mean()), se, df, len(before), len(after), min_effect, confidence,
                    f"{len(before)} runs before, {len(after)} after; run-to-run sd {sd:.1%} ({df} degrees of freedom)")


def steps_of(fit: Fit, confidence: float = CONFIDENCE) -> list[Step]:
    stretches, records = fit.stretches(), fit.runs.to_dict("records")
    out = []
    for i, (bound, comparison) in enumerate(zip(fit.bounds, fit.comparisons)):
        before, after = records[bound - 1], records[bound]
        out.append(Step(fit.line, fit.level(*stretches[i], confidence), fit.level(*stretches[i + 1], confidence),
                        comparison, before, after, changes_between(before, after)))
    return out


def changes_between(before: dict, after: dict) -> tuple[tuple[str, str, str], ...]:
    """(field, old, new) for each CAUSE_FIELDS value that differs between two runs."""
    out = []
    for name in CAUSE_FIELDS:
        old, new = (value_text(name, run.get(name)) for run in (before, after))
        if old != new:
            out.append((name, old or "(none)", new or "(none)"))
    return tuple(out)


def value_text(name: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = str(value).strip()
    if text.endswith(".0") and text[:-2].isdigit():  # a count read as a float elsewhere: 2.0 is 2
        text = text[:-2]
    return text[:SHORT[name]] if name in SHORT else text


def gather(steps: list[Step]) -> list[Finding]:
    """Steps from one date with the same change are one finding; findings in date order."""
    groups: dict[tuple, list[Step]] = {}
    for step in sorted(steps, key=lambda s: (s.date, s.changes)):
        groups.setdefault((step.date, step.changes), []).append(step)
    return [Finding(n, date, changes, found) for n, ((date, changes), found) in enumerate(groups.items(), start=1)]
