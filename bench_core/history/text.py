"""A history's findings and a gate's verdicts in words, for a terminal or a CI log (bench history) and for the
report's tables (show.py): one wording, each figure with its interval.
"""
from __future__ import annotations

import math

import pandas as pd

from bench_core.history.gate import Gate
from bench_core.history.steps import MIN_RUNS, Analysis, Finding, Level, Step, usable_runs
from bench_core.summary.diff import aligned
from bench_core.summary.text import num_text

NOTHING_CHANGED = ("no recorded field differs (versions, commits, the model file's hash, host, threads): the "
                   "cause is outside the record (the machine's load, a setting not recorded, code outside it)")


def method_text(analysis: Analysis) -> str:
    return (f"A step: a shift of a configuration's level between stretches of at least {MIN_RUNS} undisturbed runs "
            "(each run the geometric mean of its ok repeats), proposed by ruptures' binary segmentation and called "
            f"only where the whole {analysis.confidence:.0%} t-interval of the shift, on the history's own run-to-run "
            f"noise, lies on one side of 1 and the shift is at least {analysis.min_effect:.0%}; a run with a disturbed "
            "repeat is shown and never used; a single run is never a step.")


def pct(ratio: float) -> str:
    return f"{ratio - 1:+.1%}" if ratio is not None and math.isfinite(ratio) else ""


def change_text(step_or_comparison) -> str:
    """'-48.1 % [-52.0 %, -44.0 %]': the shift and its interval."""
    c = getattr(step_or_comparison, "comparison", step_or_comparison)
    return f"{pct(c.ratio)} [{pct(c.low)}, {pct(c.high)}]"


def level_text(level: Level, unit: str = "") -> str:
    """'51.2 [50.1-52.3] images/s': a stretch's level with its interval (none without run-to-run spread)."""
    inner = f" [{num_text(level.low)}-{num_text(level.high)}]" if math.isfinite(level.low) else ""
    return f"{num_text(level.value)}{inner}" + (f" {unit}" if unit else "")


def changes_text(changes) -> str:
    return "; ".join(f"{name} {old} -> {new}" for name, old, new in changes) or NOTHING_CHANGED


def line_of(analysis: Analysis, line: int) -> dict:
    found = analysis.history.lines[analysis.history.lines["line"] == line]
    return found.iloc[0].to_dict()


def step_line(analysis: Analysis, step: Step) -> str:
    line = line_of(analysis, step.line)
    return (f"{line['label']} on {line['machine']}: {change_text(step)}, {level_text(step.before)} -> "
            f"{level_text(step.after, line['unit'])} ({step.before.runs} runs before, {step.after.runs} after; "
            f"between {step.last_before['result_dir']} and {step.first_after['result_dir']})")


def finding_lines(analysis: Analysis, finding: Finding) -> list[str]:
    head = (f"#{finding.number} from {finding.date}: {len(finding.steps)} configuration(s) "
            f"{direction(finding)}; what changed: {changes_text(finding.changes)}")
    return [head] + [f"    {step_line(analysis, s)}" for s in finding.steps]


def direction(finding: Finding) -> str:
    slower = sum(s.comparison.verdict == "slower" for s in finding.steps)
    faster = len(finding.steps) - slower
    return " and ".join(p for p in (f"{slower} slower" if slower else "", f"{faster} faster" if faster else "") if p)


def lines_table(analysis: Analysis) -> pd.DataFrame:
    """One row per configuration and machine: its runs, the disturbed ones, its steps and its latest level."""
    runs = analysis.history.runs
    out = []
    for line in analysis.history.lines.to_dict("records"):
        fit = analysis.fits.get(int(line["line"]))
        mine = runs[runs["line"] == line["line"]]
        level = fit.last_level(analysis.confidence) if fit is not None else None
        out.append({"configuration": line["label"], "machine": line["machine"], "unit": line["unit"],
                    "runs": len(mine), "disturbed": int((mine["disturbed_by"] != "").sum()),
                    "failed": int((mine["repeats_ok"] == 0).sum()),
                    "dates": date_span(mine["date"]),
                    "steps": sum(s.line == line["line"] for s in analysis.steps),
                    "level": level_text(level, line["unit"]) if level else "",
                    "since": f"{level.since} ({level.runs} runs)" if level else ""})
    return pd.DataFrame(out, columns=["configuration", "machine", "unit", "runs", "disturbed", "failed", "dates",
                                      "steps", "level", "since"])


def date_span(dates: pd.Series) -> str:
    found = sorted(d for d in set(dates) if d)
    return "" if not found else found[0] if len(found) == 1 else f"{found[0]} - {found[-1]}"


def history_text(analysis: Analysis) -> str:
    h = analysis.history
    runs, used = h.runs, usable_runs(h.runs)
    disturbed = int((runs["disturbed_by"] != "").sum())
    lines = [f"bench history: {h.rows} rows, {len(runs)} runs of {len(h.lines)} configuration(s) on "
             f"{h.lines['machine'].nunique()} machine(s), {date_span(runs['date']) or 'no dates'}; {disturbed} run(s) "
             f"with a disturbed repeat (shown, not used), {int((runs['repeats_ok'] == 0).sum())} failed"]
    if analysis.findings:
        lines.append(f"steps ({len(analysis.steps)} in {len(analysis.findings)} finding(s); change after/before with "
                     f"its {analysis.confidence:.0%} interval):")
        for finding in analysis.findings:
            lines += ["  " + text for text in finding_lines(analysis, finding)]
    else:
        lines.append("no step: no configuration's level shifted beyond its runs' own run-to-run noise")
    short = int((used.groupby("line").size().reindex(h.lines["line"], fill_value=0) < 2 * MIN_RUNS).sum()) \
        if len(h.lines) else 0
    if short:
        lines.append(f"{short} configuration(s) have fewer than {2 * MIN_RUNS} undisturbed runs: no step can be "
                     "found in them yet")
    if len(h.lines):
        lines.append(aligned(lines_table(analysis)))
    lines.append("method: " + method_text(analysis))
    return "\n".join(lines)


def gate_text(gate: Gate, analysis: Analysis) -> str:
    shown = {"configuration": "configuration", "machine": "machine", "stretch": "last stable stretch",
             "stretch_level": "stretch [95% CI]", "new_value": "new", "unit": "unit", "change": "new/stretch [95% CI]",
             "detectable": "detectable slowdown", "verdict": "verdict", "changes": "what changed"}
    table = gate.table.assign(verdict=[("REGRESSION: " if r else "") + v for r, v in
                                       zip(gate.table["regression"], gate.table["verdict"])])
    lines = [f"bench history: gate: {', '.join(str(d) for d in gate.new_dirs)} against each configuration's last "
             f"stable stretch in {len(analysis.history.dirs)} folder(s); a regression: slower by more than "
             f"{gate.fail_above:.0%} with the whole interval below 1, or failing where it ran ok",
             aligned(table[list(shown)].rename(columns=shown))]
    found, disturbed = len(gate.regressions), len(gate.disturbed)
    if found:
        lines.append(f"{found} regression(s) (exit 1): " + "; ".join(
            f"{r.configuration} on {r.machine}: {r.change or r.verdict} ({r.reason})"
            for r in gate.regressions.itertuples()))
    elif disturbed:
        lines.append(f"no regression among what could be judged; {disturbed} disturbed: re-measure (exit 3)")
    else:
        lines.append(f"no regression in {gate.judged} configuration(s) judged")
    return "\n".join(lines)


def analysis_dict(analysis: Analysis) -> dict:
    def level(lv: Level) -> dict:
        return {"value": lv.value, "low": finite(lv.low), "high": finite(lv.high), "runs": lv.runs, "since": lv.since}
    findings = []
    for f in analysis.findings:
        steps = [{"configuration": (line := line_of(analysis, s.line))["label"], "machine": line["machine"],
                  "unit": line["unit"], "ratio": s.comparison.ratio, "low": s.comparison.low, "high": s.comparison.high,
                  "verdict": s.comparison.verdict, "reason": s.comparison.reason, "before": level(s.before),
                  "after": level(s.after), "last_run_before": s.last_before["run_id"],
                  "first_run_after": s.first_after["run_id"]} for s in f.steps]
        findings.append({"number": f.number, "date": f.date, "changes": [list(c) for c in f.changes], "steps": steps})
    return {"rows": analysis.history.rows, "runs": len(analysis.history.runs), "findings": findings,
            "configurations": lines_table(analysis).to_dict("records"), "notes": analysis.history.notes,
            "min_effect": analysis.min_effect, "confidence": analysis.confidence, "method": method_text(analysis)}


def finite(value):
    return value if value is not None and math.isfinite(value) else None
