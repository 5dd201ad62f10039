"""How the report shows things: escaped HTML tables, figures at a fixed size, number formats, chart helpers.
"""
from __future__ import annotations

import contextlib
import functools
import html
import io
import warnings

import numpy as np
import pandas as pd

from bench_core.results.rows import error_message
from bench_core.summary.load import PRECISION_ORDER, Results
from bench_core.summary.text import int_text, is_present, num_text

DISPLAY_DPI = 90             # CSS pixels per inch of a chart as shown
PIXEL_RATIO = 2              # charts are rendered at 2x for sharp text on high-dpi screens
NUMBER_CELL = "text-align:right;white-space:nowrap"
TEXT_CELL = "text-align:left"


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def display_obj(obj) -> None:
    from IPython.display import display
    display(obj)


def show_html(markup: str) -> None:
    from IPython.display import HTML
    display_obj(HTML(markup))


def note(text: str) -> None:
    """One escaped line of text (used for 'no data' and caveats)."""
    show_html(f'<p style="color:#555"><em>{esc(text)}</em></p>')


def paragraph(text: str) -> None:
    show_html(f"<p>{esc(text)}</p>")


def table_html(table: pd.DataFrame, columns: dict[str, str] | None = None) -> str:
    """An HTML table with every cell escaped; numbers formatted for reading and right-aligned.

    `columns` maps column -> header (and picks and orders the columns shown).
    """
    if columns:
        table = table[[c for c in columns if c in table.columns]].rename(columns=columns)
    numeric = [pd.api.types.is_numeric_dtype(table[c]) and not pd.api.types.is_bool_dtype(table[c])
               for c in table.columns]
    head = "".join(f'<th style="text-align:{"right" if n else "left"}">{esc(c)}</th>'
                   for c, n in zip(table.columns, numeric))
    body = []
    for values in table.itertuples(index=False, name=None):
        cells = "".join(f'<td style="{NUMBER_CELL if n else TEXT_CELL}">{esc(cell_text(v, n))}</td>'
                        for v, n in zip(values, numeric))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def cell_text(value, numeric: bool) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if numeric:
        return num_text(value)
    return str(value) if is_present(value) else ""


def show_table(table: pd.DataFrame, columns: dict[str, str] | None = None) -> None:
    show_html(table_html(table, columns))


def show_figure(fig, alt: str) -> None:
    """Embed a chart as a 2x PNG shown at its natural size (base64 in the page: it opens offline)."""
    import base64

    import matplotlib.pyplot as plt
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DISPLAY_DPI * PIXEL_RATIO, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    png = buffer.getvalue()
    width_px = int.from_bytes(png[16:20], "big") // PIXEL_RATIO  # the PNG IHDR chunk holds the width
    show_html(f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}" width="{width_px}" '
              f'style="max-width:100%;height:auto" alt="{esc(alt)}">')


def section(func):
    """A section that cannot be drawn says why in one line instead of stopping the report."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            # A library's warning (numpy's "Mean of empty slice", with the path of its source
            # file) would be printed into the report: a section says what it means itself.
            with plot_style(), warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                return func(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the rest of the report must still render
            import matplotlib.pyplot as plt
            plt.close("all")
            note(f"This section could not be drawn from these results ({error_message(exc)}).")
    return wrapper


@contextlib.contextmanager
def plot_style():
    import matplotlib
    import seaborn as sns
    with warnings.catch_warnings():
        # Library deprecation chatter would print to stderr, a red box in the HTML; it is not about our data.
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        with matplotlib.rc_context({"figure.max_open_warning": 0}), sns.axes_style("whitegrid"), \
                sns.plotting_context("notebook", font_scale=0.9):
            yield


def chart_rows(ok: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """One batch size per (machine, model, mode, precision, input) on the fewest devices: the largest that ran."""
    if ok.empty:
        return ok, ""
    single = ok[ok["world_size"] == ok.groupby("machine")["world_size"].transform("min")]
    keys = ["machine", "model", "mode", "precision", "input_shape", "compile", "channels_last"]
    largest = single.groupby(keys, dropna=False)["batch_size"].transform("max")
    data = single[single["batch_size"] == largest]
    caveat = ""
    if len(data) < len(ok):
        caveat = ("This chart shows, for each model, mode and precision, the largest batch size that ran on the "
                  "fewest devices; other batch sizes and device counts are under Batch size and Scaling.")
    return data.assign(label=label_columns(data, never=("batch_size", "world_size"))), caveat


def label_columns(table: pd.DataFrame, always: tuple[str, ...] = (), never: tuple[str, ...] = ()) -> list[str]:
    """Short labels: the model, the `always` columns, plus whatever else varies in this table."""
    optional = ["input_shape", "batch_size", "world_size", "compile", "channels_last"]
    varying = [c for c in optional if c in table and c not in never and table[c].nunique(dropna=False) > 1]
    fmt = {"precision": str, "mode": str, "input_shape": str, "batch_size": lambda v: f"bs{int_text(v)}",
           "world_size": lambda v: f"x{int_text(v)}", "compile": lambda v: f"compile={v}",
           "channels_last": lambda v: "channels_last" if v else "nchw"}
    return [" ".join([str(row.get("model") or "?")]
                     + [fmt[c](row.get(c)) if is_present(row.get(c)) else "?" for c in (*always, *varying)])
            for row in table.to_dict("records")]


def columns_for(res: Results, columns: dict[str, str]) -> dict[str, str]:
    """The columns to show: no machine column when every row comes from one machine."""
    return {k: v for k, v in columns.items() if k != "machine" or len(res.machines) > 1}


def device_names(res: Results) -> dict[str, str]:
    """machine label -> the device name in its rows (what reference figures are matched against)."""
    return {m: str(d) for m, d in zip(res.rows["machine"], res.rows["device_name"]) if is_present(d)}


def date_range(stamps: pd.Series) -> str:
    days = sorted({str(v)[:10] for v in stamps if is_present(v)})
    return "" if not days else days[0] if len(days) == 1 else f"{days[0]} – {days[-1]}"


def ordered(values: pd.Series, preferred: list[str] | None) -> list[str]:
    present = list(dict.fromkeys(v for v in values if is_present(v)))
    if not preferred:
        return sorted(present)
    return [p for p in preferred if p in present] + sorted(v for v in present if v not in preferred)


def sort_table(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return table
    rank = {p: i for i, p in enumerate(PRECISION_ORDER)}
    keys = [k for k in ("machine", "model", "mode", "precision", "batch_size", "world_size") if k in table]
    order = table.assign(_mode=table["mode"].map({"train": 0, "infer": 1}) if "mode" in table else 0,
                         _precision=table["precision"].map(rank) if "precision" in table else 0)
    keys = [{"mode": "_mode", "precision": "_precision"}.get(k, k) for k in keys]
    return table.loc[order.sort_values(keys, na_position="last").index].reset_index(drop=True)


def drop_constant(table: pd.DataFrame, columns: dict[str, str], keep: tuple[str, ...]) -> pd.DataFrame:
    """Hide columns that say the same thing on every row (machine when there is one, compile when off)."""
    drop = [c for c in columns if c in table and c not in keep and table[c].nunique(dropna=False) <= 1
            and c in ("machine", "world_size", "compile", "channels_last", "input_shape", "mpx_per_s", "mvox_per_s")]
    drop += [c for c in ("mpx_per_s", "mvox_per_s", "peak_memory_mib") if c in table and table[c].isna().all()]
    return table.drop(columns=list(dict.fromkeys(drop)))


def plain_log_ticks(axis) -> None:
    """Log-axis tick labels as plain numbers (300, 1,000), not powers of ten."""
    from matplotlib import ticker
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: num_text(v)))
    axis.set_minor_formatter(ticker.LogFormatter(labelOnlyBase=False, minor_thresholds=(1.5, 0.6)))


def rotate_ticks(g) -> None:
    for ax in g.axes.flat:
        for label in ax.get_xticklabels():
            label.set_rotation(30)
            label.set_horizontalalignment("right")


