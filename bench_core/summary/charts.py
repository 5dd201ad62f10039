"""Charts that read at a glance: each category a horizontal row with its label whole (never rotated,
never cut), one panel per group holding only its own rows (no empty slots), an axis that shows a
difference only as large as it is (a log axis spans at least MIN_LOG_SPAN, a bar axis starts at
zero), one tick format (num_text: 300, 1,000, 11,600), a width that fits a 1,400 px page (its PNG, in the
report) and a JupyterLab output area (its SVG, sized by figures.fit_svg).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench_core.summary.html import show_figure
from bench_core.summary.text import num_text, wrap_text

FIG_WIDTH_IN = 11.0          # 990 CSS px as shown (html.DISPLAY_DPI): the page's width, never scaled down
ROW_IN = 0.34                # height of one category row
PANEL_EXTRA_IN = 0.9         # a panel's title and tick labels
MIN_LOG_SPAN = 10.0          # a log axis spans at least this factor: a 0.2 % difference stays 0.2 % wide
LABEL_WIDTH = 42             # characters of a category label before it wraps
MARK_COLOUR = "#b35900"
PALETTE = ("#1f5fa8", "#e08214", "#2a9d5c", "#c0392b", "#7b4ea3", "#8c6d31", "#d45d9e", "#555555")


def can_compare(values) -> bool:
    """A chart compares: it needs two or more figures (one figure is read from its table)."""
    return int(np.isfinite(pd.to_numeric(pd.Series(values), errors="coerce")).sum()) >= 2


def log_axis(axis, values, min_span: float = MIN_LOG_SPAN) -> None:
    """A log axis around `values`, widened to span at least `min_span`, ticked 1-2-5 (or 1-10-100
    when that is too dense) with plain, distinct labels."""
    from matplotlib import ticker
    values = pd.to_numeric(pd.Series(values), errors="coerce")
    values = values[np.isfinite(values) & (values > 0)]
    if values.empty:
        return
    lo, hi = float(values.min()), float(values.max())
    centre, half = math.sqrt(lo * hi), max(math.sqrt(hi / lo), math.sqrt(min_span)) * 1.15
    lo, hi = centre / half, centre * half
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    for mantissas in ((1, 2, 5), (1, 1.5, 2, 3, 5, 7)):  # 1-2-5, or denser for a narrow axis
        ticks = [m * 10.0 ** e for e in decades for m in mantissas if lo <= m * 10.0 ** e <= hi]
        if len(ticks) >= 3:
            break
    if len(ticks) > 9:
        ticks = [t for t in ticks if math.isclose(10 ** round(math.log10(t)), t)]
    ax, is_x = axis.axes, axis is axis.axes.xaxis
    (ax.set_xscale if is_x else ax.set_yscale)("log")
    (ax.set_xlim if is_x else ax.set_ylim)(lo, hi)
    axis.set_major_locator(ticker.FixedLocator(ticks))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: num_text(v)))
    axis.set_minor_locator(ticker.NullLocator())


def drop_blank_minor_ticks(axis) -> None:
    """No minor ticks on `axis` when none would show: no tick mark (the report's style draws none), no
    grid line, no label (a log axis spanning more than a decade labels only its decades). Blank, each
    is still five artists placed and measured at every draw: on a log axis, about 24 of them."""
    import matplotlib
    from matplotlib import ticker
    rc = matplotlib.rcParams
    is_x = axis is axis.axes.xaxis
    marks = (rc["xtick.bottom"] or rc["xtick.top"]) if is_x else (rc["ytick.left"] or rc["ytick.right"])
    grid = rc["axes.grid"] and rc["axes.grid.which"] in ("minor", "both")
    if not marks and not grid and not any(axis.get_minor_formatter().format_ticks(axis.get_minorticklocs())):
        axis.set_minor_locator(ticker.NullLocator())


def zero_axis(axis, values) -> None:
    """A linear axis from zero to a little past the largest value, plain tick labels."""
    from matplotlib import ticker
    values = pd.to_numeric(pd.Series(values), errors="coerce")
    top = float(values[np.isfinite(values)].max()) if np.isfinite(values).any() else 1.0
    ax = axis.axes
    (ax.set_xlim if axis is ax.xaxis else ax.set_ylim)(0, top * 1.1 if top > 0 else 1.0)
    axis.set_major_locator(ticker.MaxNLocator(nbins=6))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: num_text(v)))


def category_chart(table: pd.DataFrame, panel_order: list, hue_order: list, xlabel: str, title: str, alt: str,
                   kind: str = "dot", mark_legend: str = "") -> None:
    """One row per label, one colour per hue, one panel per `panel` (stacked, sharing the x axis).

    `table` has panel, label, hue, value, and for dots low/high (a bar from low to high) and marked
    (a figure to mark with `mark_legend`'s symbol, its first character). kind "dot": log axis; "bar":
    bars from zero."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    panels = [p for p in panel_order if (table["panel"] == p).any()]
    labels = {p: sorted(table[table["panel"] == p]["label"].unique()) for p in panels}
    heights = [PANEL_EXTRA_IN + ROW_IN * len(labels[p]) * max(1.0, 0.45 * len(hue_order)) for p in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(FIG_WIDTH_IN, sum(heights) + 0.8), sharex=True,
                             squeeze=False, gridspec_kw={"height_ratios": heights})
    colours = {h: PALETTE[i % len(PALETTE)] for i, h in enumerate(hue_order)}
    step = 0.7 / max(1, len(hue_order))
    offsets = {h: (i - (len(hue_order) - 1) / 2) * step for i, h in enumerate(hue_order)}
    marked_any = False
    for ax, p in zip(axes[:, 0], panels):
        rows = {label: i for i, label in enumerate(labels[p][::-1])}  # the first label at the top
        part = table[table["panel"] == p]
        for record in part.to_dict("records"):
            y = rows[record["label"]] + (-offsets[record["hue"]])
            colour = colours[record["hue"]]
            if kind == "bar":
                ax.barh(y, record["value"], height=step * 0.9, color=colour)
            else:
                low, high = record.get("low"), record.get("high")
                if pd.notna(low) and pd.notna(high):
                    ax.plot([low, high], [y, y], color=colour, linewidth=2, solid_capstyle="butt")
                ax.plot(record["value"], y, "o", color=colour, markersize=7, zorder=3)
            if record.get("marked"):
                marked_any = True
                end = max(v for v in (record["value"], record.get("high")) if pd.notna(v))
                ax.annotate(mark_legend[:1], (end, y), xytext=(5, 0), textcoords="offset points", va="center",
                            color=MARK_COLOUR, fontsize=11, fontweight="bold")
        ax.set_yticks(list(rows.values()), [wrap_text(label, LABEL_WIDTH) for label in rows])
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.grid(axis="y", visible=False)
        ax.set_title(str(p), loc="left", fontsize=11, fontweight="bold")
    bottom = axes[-1, 0]
    if kind == "bar":
        zero_axis(bottom.xaxis, table["value"])
    else:
        log_axis(bottom.xaxis, pd.concat([table["value"], table.get("low", pd.Series(dtype=float)),
                                          table.get("high", pd.Series(dtype=float))]))
    bottom.set_xlabel(xlabel)
    for ax in axes[:, 0]:
        ax.tick_params(axis="x", labelbottom=True)
    handles = [Patch(color=colours[h]) if kind == "bar" else Line2D([], [], marker="o", color=colours[h])
               for h in hue_order]
    names = [str(h) for h in hue_order]
    if marked_any:
        handles.append(Line2D([], [], marker=f"${mark_legend[:1]}$", linestyle="", color=MARK_COLOUR, markersize=10))
        names.append(mark_legend)
    fig.suptitle(title, x=0.01, ha="left", fontsize=12)
    fig.legend(handles, names, loc="upper left", bbox_to_anchor=(0.01, 0.0), ncol=min(4, len(names)),
               frameon=False, fontsize=10)
    fig.tight_layout()
    show_figure(fig, alt)
