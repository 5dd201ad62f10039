"""The chart every comparison in the report uses: one ratio per line with its 95 % interval as an
error bar, on a log scale around a line at 1, coloured by verdict; a ratio without an interval
(too few repeats) is a hollow marker.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from bench_core.results.comparison import MIN_EFFECT
from bench_core.summary.html import show_figure
from bench_core.summary.text import wrap_text

COLOURS = {"faster": "#1f5fa8", "slower": "#c0392b", "no clear difference": "#6b6b6b",
           "too few repeats": "#6b6b6b"}
LEGEND = {"faster": "faster (interval above 1)", "slower": "slower (interval below 1)",
          "no clear difference": "no clear difference", "too few repeats": "too few repeats: no interval (hollow)"}


TEXT_CHARS = 44  # the comparison's words beside each row, folded at this width


def show_ratio_chart(table: pd.DataFrame, labels: list[str], title: str, alt: str,
                     xlabel: str = "ratio (log scale; above 1 is faster)") -> None:
    """`table` has ratio, low, high, verdict and text (from effects.compare_variants); `labels`
    names each row. The first row is drawn at the top; the text of each comparison is written at
    the right edge so the numbers can be read off the chart."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    keep = table["ratio"].notna().to_numpy()
    rows, labels = table[keep], [wrap_text(t, 60) for t, k in zip(labels, keep) if k]
    if len(rows) < 2:  # one comparison: a chart of it compares nothing, the table above has its figures
        return
    y = np.arange(len(rows))[::-1]
    # Each comparison's words beside its row, folded so that the figure with them stays within the page
    # (a long verdict, with its output check and emulation, once made it 1,347 px wide), rows spaced for them.
    texts = [wrap_text(str(t), TEXT_CHARS) for t in rows["text"]]
    lines = max(t.count("\n") + 1 for t in texts)
    fig, ax = plt.subplots(figsize=(7.0, 1.3 + 0.34 * len(rows) * max(1.0, 0.6 * lines)))
    ax.axvspan(1 - MIN_EFFECT, 1 + MIN_EFFECT, color="#ececec", zorder=0)
    ax.axvline(1.0, color="black", linewidth=1, zorder=1)
    for yi, row, text in zip(y, rows.to_dict("records"), texts):
        colour = COLOURS.get(row["verdict"], "#6b6b6b")
        if pd.notna(row["low"]) and pd.notna(row["high"]):
            ax.errorbar(row["ratio"], yi, xerr=[[row["ratio"] - row["low"]], [row["high"] - row["ratio"]]], fmt="o",
                        color=colour, ecolor=colour, elinewidth=1.6, capsize=3, markersize=6, zorder=3)
        else:
            ax.plot(row["ratio"], yi, "o", markerfacecolor="white", markeredgecolor=colour, markeredgewidth=1.6,
                    markersize=7, zorder=3)
        ax.annotate(text, (1.01, yi), xycoords=("axes fraction", "data"), va="center", fontsize=8.5,
                    color=colour)
    values = pd.concat([rows["ratio"], rows["low"], rows["high"]]).dropna()
    lo, hi = min(values.min(), 1 - MIN_EFFECT), max(values.max(), 1 + MIN_EFFECT)
    pad = (np.log(hi) - np.log(lo)) * 0.08
    ax.set_xscale("log")
    ax.set_xlim(np.exp(np.log(lo) - pad), np.exp(np.log(hi) + pad))
    ratio_ticks(ax)
    ax.set_yticks(y, labels)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.grid(axis="y", visible=False)
    ax.set(xlabel=xlabel, title=title)
    shown = [v for v in LEGEND if (rows["verdict"] == v).any()]
    handles = [Line2D([], [], marker="o", linestyle="", color=COLOURS[v],
                      markerfacecolor="white" if v == "too few repeats" else COLOURS[v]) for v in shown]
    handles.append(plt.Rectangle((0, 0), 1, 1, color="#ececec"))
    ax.legend(handles, [LEGEND[v] for v in shown] + [f"within ±{MIN_EFFECT:.0%}: below the minimum effect"],
              fontsize=9, loc="upper center", bbox_to_anchor=(0.5, 0), borderaxespad=6,
              ncol=min(3, len(handles)), frameon=False)
    show_figure(fig, alt)


# Tick sets for the log ratio axis, sparsest first: the densest that spans the axis with at most 9 ticks is used.
TICK_LEVELS = (
    (0.001, 0.01, 0.1, 1, 10, 100, 1000),
    (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100),
    (0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10, 15, 20, 30, 50),
    (0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4, 5),
    (0.8, 0.85, 0.9, 0.95, 1, 1.05, 1.1, 1.15, 1.2, 1.3),
    (0.9, 0.92, 0.94, 0.96, 0.98, 1, 1.02, 1.04, 1.06, 1.08, 1.1),
)


def ratio_ticks(ax) -> None:
    """Plain tick labels (0.5×, 1×, 2×) on the log ratio axis, dense enough for a narrow range."""
    from matplotlib import ticker
    low, high = ax.get_xlim()
    ticks = [t for t in TICK_LEVELS[0] if low <= t <= high]
    for level in TICK_LEVELS[1:]:  # a level counts only if it spans the whole axis
        inside = [t for t in level if low <= t <= high]
        if level[0] <= low and level[-1] >= high and len(ticks) < len(inside) <= 9:
            ticks = inside
    ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
