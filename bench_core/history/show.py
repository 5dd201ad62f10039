"""The report's History section (notebooks/summary.ipynb, so JupyterLab shows the same): a chart per unit with each
configuration a line over time, its steps marked and its disturbed runs hollow; the table of steps with their
intervals and what changed; each configuration's latest level with its interval; the disturbed runs. Drawn only
where the folders hold runs of more than one date; otherwise one line says what would draw it.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from bench_core.history.read import History, read_history
from bench_core.history.steps import Analysis, analyze
from bench_core.history.text import NOTHING_CHANGED, changes_text, change_text, date_span, level_text, lines_table, \
    method_text
from bench_core.results.comparison import MIN_EFFECT
from bench_core.summary.charts import FIG_WIDTH_IN, MARK_COLOUR, log_axis
from bench_core.summary.html import absent, note, paragraph, section, show_figure, show_table
from bench_core.summary.load import Results
from bench_core.summary.text import num_text

LEGEND_LINES = 16  # past this many configurations on a chart, its legend names only those that stepped
BARS_UP_TO = 60    # runs of a line drawn with their repeats' interval (past it, a bar a run is a smear)
DOTS_UP_TO = 250   # runs of a line drawn as dots (past it, a line alone)
COLOURS = 20       # matplotlib's tab20, then the same colours dashed


@section
def show_history(results, min_effect: float = MIN_EFFECT) -> None:
    """The History section of the folders of `results` (a summary.load.Results, or a list of folders)."""
    dirs = results.dirs if isinstance(results, Results) else list(results)
    history = read_history([d for d in dirs if Path(d).is_dir()])  # (the Overview names a missing folder)
    if not history.has_trend:
        absent("No history: these folders hold one folder's runs of one date. Folders of runs from several dates "
               "(one a night, or one folder that runs append to) draw each configuration's trend, its steps and what "
               "changed there (`bench history`, docs/history.md).")
        return
    analysis = analyze(history, min_effect)
    runs = history.runs
    disturbed = int((runs["disturbed_by"] != "").sum())
    paragraph(f"{len(runs)} runs of {len(history.lines)} configuration(s) on {history.lines['machine'].nunique()} "
              f"machine(s), {date_span(runs['date'])}: {len(analysis.steps)} step(s) in {len(analysis.findings)} "
              f"finding(s); {disturbed} run(s) with a disturbed repeat, drawn hollow and never used. "
              + method_text(analysis))
    for line in history.notes:
        note(line)
    for unit in history.lines["unit"].drop_duplicates():
        history_chart(analysis, unit)
    steps_table(analysis)
    show_table(lines_table(analysis).drop(columns=["unit"]), {
        "configuration": "configuration", "machine": "machine", "runs": "runs", "disturbed": "disturbed",
        "failed": "failed", "dates": "dates", "steps": "steps", "level": "latest level [95% CI]",
        "since": "since"})
    disturbed_table(history)


def history_chart(analysis: Analysis, unit: str) -> None:
    """One chart of the configurations measured in `unit`: a line each, over time, on a log axis."""
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib import colormaps
    from matplotlib.lines import Line2D
    history = analysis.history
    lines = history.lines[history.lines["unit"] == unit]
    runs = history.runs[history.runs["line"].isin(lines["line"]) & (history.runs["repeats_ok"] > 0)]
    if runs.empty:
        return
    several_machines = lines["machine"].nunique() > 1
    stepped = {s.line for s in analysis.steps}
    fig, ax = plt.subplots(figsize=(FIG_WIDTH_IN, 5.0))
    palette = colormaps["tab20"].colors
    handles, names = [], []
    for i, line in enumerate(lines.to_dict("records")):
        mine = runs[runs["line"] == line["line"]]
        colour, dashes = palette[i % COLOURS], "-" if i < COLOURS else "--"
        clean, hit = mine[mine["disturbed_by"] == ""], mine[mine["disturbed_by"] != ""]
        ax.plot(naive(clean["time"]), clean["value"], dashes, marker="o" if len(mine) <= DOTS_UP_TO else None,
                markersize=4, linewidth=1.2, color=colour)
        if len(mine) <= BARS_UP_TO:
            ax.vlines(naive(clean["time"]), clean["low"], clean["high"], color=colour, linewidth=1, alpha=0.6)
        ax.plot(naive(hit["time"]), hit["value"], "o", markersize=7, markerfacecolor="white", color=colour)
        fit = analysis.fits.get(int(line["line"]))
        if fit is not None and fit.bounds:  # each stretch's level, where the line stepped
            for start, end in fit.stretches():
                level = fit.level(start, end, analysis.confidence).value
                ax.plot(naive(fit.runs["time"].iloc[[start, end - 1]]), [level, level],
                        color=colour, linewidth=4, alpha=0.35, solid_capstyle="butt")
        if len(lines) <= LEGEND_LINES or line["line"] in stepped:
            handles.append(Line2D([], [], color=colour, linestyle=dashes, marker="o", markersize=4))
            names.append(f"{line['label']} · {line['machine']}" if several_machines else line["label"])
    for finding in analysis.findings:
        mine = [s for s in finding.steps if s.line in set(lines["line"])]
        if not mine:
            continue
        at = min(s.last_before["time"] + (s.first_after["time"] - s.last_before["time"]) / 2 for s in mine)
        at = at.tz_convert(None) if at.tzinfo else at
        ax.axvline(at, color=MARK_COLOUR, linestyle=":", linewidth=1.5)
        ax.annotate(f"#{finding.number}", (at, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", color=MARK_COLOUR, fontweight="bold")
    for artist in (*ax.lines, *ax.collections):  # thousands of points: an image in the SVG too, not paths
        artist.set_rasterized(len(runs) > DOTS_UP_TO)
    values = pd.concat([runs["value"], runs["low"], runs["high"]])
    log_axis(ax.yaxis, values[np.isfinite(values)], min_span=2.0)
    ax.set_ylabel(unit)
    ax.set_title(f"History in {unit}: a line per configuration, a dot per run with its repeats' 95 % interval"
                 + (f" (bars where a line has at most {BARS_UP_TO} runs)" if len(runs) > BARS_UP_TO else ""),
                 loc="left", fontsize=11)
    if (runs["disturbed_by"] != "").any():
        handles.append(Line2D([], [], marker="o", linestyle="", markerfacecolor="white", color="#555555"))
        names.append("run with a disturbed repeat (not used)")
    if analysis.findings:
        handles.append(Line2D([], [], color=MARK_COLOUR, linestyle=":"))
        names.append("step (#: the table below)")
    fig.legend(handles, names, loc="upper left", bbox_to_anchor=(0.01, 0.0), ncol=2, frameon=False, fontsize=8)
    dates = mdates.AutoDateLocator(minticks=3, maxticks=8)
    ax.xaxis.set_major_locator(dates)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(dates))  # never rotated: a year once, then days
    fig.tight_layout()
    alt = (f"History in {unit}: {len(lines)} configuration(s), {len(runs)} runs, {len(analysis.steps)} step(s)"
           + ("; the legend names the configurations that stepped" if len(lines) > LEGEND_LINES else ""))
    show_figure(fig, alt)


def naive(times: pd.Series) -> pd.Series:
    """UTC times without their zone, as matplotlib's date axis takes them."""
    return times.dt.tz_convert(None) if getattr(times.dt, "tz", None) is not None else times


def steps_table(analysis: Analysis) -> None:
    """A row per step: its finding, date, configuration, shift with interval, the levels either side, the cause."""
    if not analysis.findings:
        paragraph("No step: no configuration's level shifted beyond its runs' own run-to-run noise.")
        return
    lines = analysis.history.lines.set_index("line")
    rows = [{"finding": f"#{f.number}", "from": f.date, "configuration": lines.at[s.line, "label"],
             "machine": lines.at[s.line, "machine"], "change": change_text(s),
             "before": level_text(s.before, lines.at[s.line, "unit"]), "after": level_text(s.after),
             "runs": f"{s.before.runs} / {s.after.runs}",
             "folders": f"{s.last_before['result_dir']} -> {s.first_after['result_dir']}",
             "changed": changes_text(f.changes)}
            for f in analysis.findings for s in f.steps]
    show_table(pd.DataFrame(rows), {
        "finding": "finding", "from": "from", "configuration": "configuration", "machine": "machine",
        "change": "change [95% CI]", "before": "before [95% CI]", "after": "after [95% CI]",
        "runs": "runs before / after", "folders": "between the folders",
        "changed": "what changed (last run before -> first after)"}, every_row=True)
    if any(changes_text(f.changes) == NOTHING_CHANGED for f in analysis.findings):
        note("A step with no recorded change: " + NOTHING_CHANGED + ".")


def disturbed_table(history: History) -> None:
    hit = history.runs[history.runs["disturbed_by"] != ""]
    if hit.empty:
        return
    lines = history.lines.set_index("line")
    rows = [{"date": r["date"], "configuration": lines.at[r["line"], "label"],
             "machine": lines.at[r["line"], "machine"],
             "figure": interval_text(r, lines.at[r["line"], "unit"]), "flags": r["disturbed_by"]}
            for r in hit.to_dict("records")]
    paragraph(f"Runs with a disturbed repeat ({len(rows)}): drawn hollow, never used to find a step or as a gate's "
              "baseline.")
    show_table(pd.DataFrame(rows), {"date": "date", "configuration": "configuration", "machine": "machine",
                                    "figure": "run [95% CI of its repeats]", "flags": "disturbed by"})


def interval_text(run: dict, unit: str) -> str:
    inner = f" [{num_text(run['low'])}-{num_text(run['high'])}]" if math.isfinite(run["low"]) \
        else " (one repeat: no interval)"
    return f"{num_text(run['value'])}{inner} {unit}"
