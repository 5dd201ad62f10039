"""A new run judged against the history's last stable stretch (`bench history DIR... --new NEW`): for each
configuration and machine of NEW, its undisturbed runs over the runs since the history's last step, a ratio
with its t-interval on the history's own run-to-run noise (steps.py: the same pooled standard deviation, so
one new run is judged as a step would be, one run against a measured stretch instead of against one earlier
run); a regression where it is slower by more than the threshold with the whole interval below 1, or where it
fails now and ran ok before; 'disturbed: re-measure' where NEW's runs were disturbed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bench_core.history.read import WORKLOAD, History
from bench_core.history.steps import Analysis, changes_between, usable_runs
from bench_core.results.comparison import DISTURBED, Comparison, interval
from bench_core.summary.text import num_text

FAIL_ABOVE = 0.05  # as bench diff's
UNTIMED = "no timestamp"  # NEW's runs cannot be placed after the history (read.untimed_notes names them)
# Verdicts that judge nothing (no interval): listed, never a pass of the gate on their own.
UNJUDGED = ("no history", "history too short", DISTURBED, UNTIMED)


@dataclass
class Gate:
    """One row per configuration and machine of NEW (`table`), and the rule it was judged by."""
    table: pd.DataFrame
    fail_above: float
    new_dirs: list
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> pd.DataFrame:
        return self.table[self.table["regression"]]

    @property
    def disturbed(self) -> pd.DataFrame:
        return self.table[self.table["verdict"] == DISTURBED]

    @property
    def judged(self) -> int:
        return int((~self.table["verdict"].isin(UNJUDGED)).sum())


COLUMNS = ["configuration", "machine", "stretch", "stretch_value", "stretch_level", "new_value", "unit", "ratio", "low",
           "high", "change", "detectable", "verdict", "regression", "reason", "changes"]


def judge(history: Analysis, new: History, fail_above: float = FAIL_ABOVE) -> Gate:
    """NEW's configurations against `history`'s (an Analysis of the folders before it)."""
    old_lines = {line_key(r): int(r["line"]) for r in history.history.lines.to_dict("records")}
    rows = []
    for line in new.lines.to_dict("records"):
        runs = new.line_runs(line["line"])
        found = old_lines.get(line_key(line))
        fit = history.fits.get(found) if found is not None else None
        rows.append(judge_line(line, runs, fit, history, fail_above))
    table = pd.DataFrame(rows, columns=COLUMNS)
    if len(table):
        table = table.sort_values(["regression", "configuration"], ascending=[False, True], kind="stable")
    return Gate(table.reset_index(drop=True), fail_above, new.dirs, new.notes)


def line_key(line: dict) -> tuple:
    return (str(line["machine"]), *(str(line.get(k)) if not pd.isna(line.get(k)) else "" for k in WORKLOAD))


def judge_line(line: dict, runs: pd.DataFrame, fit, history: Analysis, fail_above: float) -> dict:
    out = {"configuration": line["label"], "machine": line["machine"], "unit": line["unit"], "stretch": "",
           "stretch_value": math.nan, "stretch_level": "", "new_value": math.nan, "ratio": math.nan, "low": math.nan, "high": math.nan,
           "change": "", "detectable": "", "verdict": "", "regression": False, "reason": "", "changes": ""}
    ok, clean = runs[runs["repeats_ok"] > 0], usable_runs(runs)
    if len(ok) and ok["time"].isna().all():
        return {**out, "verdict": UNTIMED, "reason": "the new runs' rows have no readable timestamp; allowed: ISO "
                                                     "8601 (2026-11-27T14:08:26+00:00)"}
    if fit is None or not len(fit.runs):
        return {**out, "verdict": "no history", "reason": "no undisturbed run of this configuration on this machine "
                                                          "in the history"}
    start, end = fit.stretches()[-1]
    level = fit.level(start, end, history.confidence)
    inner = f" [{num_text(level.low)}-{num_text(level.high)}]" if math.isfinite(level.low) else ""
    out.update(stretch=f"{level.runs} run(s) since {level.since}", stretch_value=level.value,
               stretch_level=f"{num_text(level.value)}{inner}")
    last = fit.runs.iloc[end - 1].to_dict()
    if not len(ok):
        status = str(runs["status"].iloc[0]) if len(runs) else "no rows"
        return {**out, "verdict": "fails now", "regression": True, "reason": f"new: {status}; ran ok before"}
    if not len(clean):
        flags = ", ".join(dict.fromkeys(f for text in ok["disturbed_by"] for f in text.split(", ") if f))
        return {**out, "verdict": DISTURBED, "new_value": geometric(ok),
                "reason": f"every new run had a disturbed repeat ({flags}): re-measure on a quiet machine"}
    out["new_value"] = geometric(clean)
    out["changes"] = "; ".join(f"{f} {a} -> {b}" for f, a, b in changes_between(last, clean.iloc[0].to_dict()))
    if not fit.df or end - start < 2:
        return {**out, "verdict": "history too short",
                "reason": f"{end - start} undisturbed run(s) since the last step: at least 2 are needed to measure "
                          "how far a run shifts from the next"}
    stretch = fit.runs["log_mean"].to_numpy()[start:end]
    new_logs = clean["log_mean"].to_numpy(dtype=float)
    se = fit.sd * math.sqrt(1 / len(stretch) + 1 / len(new_logs))
    c: Comparison = interval(float(new_logs.mean() - stretch.mean()), se, fit.df, len(stretch), len(new_logs),
                             history.min_effect, history.confidence,
                             f"run-to-run sd {fit.sd:.1%} over the history ({fit.df} degrees of freedom)")
    left = len(ok) - len(clean)
    reason = c.reason + (f"; {left} disturbed new run(s) left out" if left else "")
    detectable = c.detectable(fail_above)
    return {**out, "ratio": c.ratio, "low": c.low, "high": c.high, "verdict": c.verdict, "reason": reason,
            "change": f"{c.ratio - 1:+.1%} [{c.low - 1:+.1%}, {c.high - 1:+.1%}]",
            "detectable": "" if detectable is None else f"{detectable:.0%}", "regression": c.regressed(fail_above)}


def geometric(runs: pd.DataFrame) -> float:
    logs = runs["log_mean"].to_numpy(dtype=float)
    return float(np.exp(logs.mean())) if len(logs) else math.nan
