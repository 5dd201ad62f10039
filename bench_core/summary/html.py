"""How the report shows things: interactive tables (sort, search) and static ones, every cell escaped;
figures at a fixed size; the report's title; chart helpers.
"""
from __future__ import annotations

import contextlib
import functools
import html
import re
import sys
import warnings

import numpy as np
import pandas as pd
from itables import init_notebook_mode, to_html_datatable

from bench_core.results.rows import error_message
from bench_core.summary.figures import (  # noqa: F401 - re-exported: charts are shown from here as before
    DISPLAY_DPI,
    PIXEL_RATIO,
    PNG_COMPRESS_LEVEL,
    png_bytes,
    show_figure,
    tight_boxes,
)
from bench_core.summary.load import (
    LABELLED_WHEN_SET,
    PRECISION_ORDER,
    REQUEST_SHAPE,
    RUN_SETTINGS,
    SERVING_LOAD,
    WORKLOAD,
    Results,
    is_default,
)
from bench_core.summary.text import applies, int_text, is_present, num_text

NUMBER_CELL = "text-align:right;white-space:nowrap"
TEXT_CELL = "text-align:left"
DEFAULT_TITLE = "Benchmark report"
# seaborn imports these as it is imported (for its KDE and its clustermap), about 0.7 s of every report's
# CPU, for plots the report never draws: see seaborn().
SEABORN_UNUSED_SCIPY = ("scipy.stats", "scipy.cluster")
# The configuration fields a table or label shows (summary.load.WORKLOAD): a serving point's load in words
# stands for its fields, and input_shape for the prompt and output lengths.
SHOWN_FIELDS = ("model", "mode", "precision", "batch_size", "load", "input_shape",
                *[f for f in WORKLOAD if f not in SERVING_LOAD and f not in ("model", "mode", "precision", "batch_size",
                                                                             "input_shape", "prompt_len", "new_tokens")])
# Fields that are empty where they do not apply (a request's shape outside mode serve): no '?' for them.
NOT_APPLICABLE_WHEN_EMPTY = ("load", *REQUEST_SHAPE, *RUN_SETTINGS)
FIELD_HEADERS = {"batch_size": "batch", "input_shape": "input", "world_size": "devices", "compile": "compile",
                 "channels_last": "channels_last", "tp_degree": "tensor-parallel degree",
                 "activation_checkpointing": "activation checkpointing", "shared_prefix_len": "shared prefix tokens",
                 "length_dist": "lengths", "load": "load", "cudnn_benchmark": "cudnn.benchmark",
                 "nnodes": "nodes", "server_args": "server arguments"}
TABLE_PAGE_ROWS = 25         # a longer table gets pages, a search box and a page-length menu
# Text reads from the left, numbers line up on the right (JupyterLab's style puts every cell right).
TABLE_CSS = (".dt-container table.dataTable th, .dt-container table.dataTable td {text-align: left} "
             ".dt-container table.dataTable th.dt-type-numeric {text-align: right} "
             ".dt-container table.dataTable td.dt-type-numeric {text-align: right; white-space: nowrap}")
# A table wider than this (its narrowest layout: every word whole, every number on one line) cannot fit the
# report's page (1,200 px less its margins) nor a JupyterLab output area: DataTables then scrolls it in a box
# of at most WIDE_TABLE_HEIGHT, its header kept, so that the sideways scroll bar is on screen with the rows it
# moves (at the table's foot, past the screen, the table read as cut on the right). A table read at a glance
# (every_row: every row on the page) is left whole.
PAGE_PX = 1100
WIDE_TABLE_HEIGHT = "70vh"
CHAR_PX, CELL_PAD_PX = 7.2, 22  # DataTables' compact cells: 13 px sans-serif, 4 + 17 px of padding


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
    show_html(f'<p style="color:#555"><em>{text_html(text)}</em></p>')


ABSENT_CLASS = "nb-absent"


def absent(text: str) -> None:
    """A section's 'nothing to show here, and what would fill it': shown as a note, and marked, so that
    `bench report` moves a section whose only output this is into one list, "Not measured in these
    results" (summary/absent.py), instead of drawing its heading over an empty space."""
    show_html(f'<p class="{ABSENT_CLASS}" style="color:#555"><em>{text_html(text)}</em></p>')


def paragraph(text: str) -> None:
    show_html(f"<p>{text_html(text)}</p>")


def text_html(text: str) -> str:
    """Text escaped, with `a command` or `a_column` shown as code, as in the notebook's markdown."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(text))


def table_html(table: pd.DataFrame, columns: dict[str, str] | None = None) -> str:
    """A static HTML table (for a page without scripts; the report's tables are datatable_html), every
    cell escaped, numbers formatted for reading and right-aligned.

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


def show_table(table: pd.DataFrame, columns: dict[str, str] | None = None, **options) -> None:
    """A datatable_html table (`options`: its number_text and every_row)."""
    show_html(datatable_html(table, columns, **options))


def init_tables() -> None:
    """Embed the table library (DataTables, shipped in itables) in the notebook once, before any table:
    every table after it sorts and filters in the browser, with nothing loaded from the network.

    ITables (2.9.1, and its main branch) displays its dark-theme script before the library that
    script awaits (`window._itables_<version>`). A page that has both outputs before any script
    runs (the HTML report) does not mind; JupyterLab runs each output's scripts as the output
    arrives, so the script found no library yet and the page raised "Cannot destructure property
    'set_or_remove_dark_class' ... as it is undefined". The same two outputs are shown here with the
    library first."""
    from IPython.utils.capture import capture_output
    with capture_output(stdout=False, stderr=False) as shown:
        init_notebook_mode(all_interactive=False, connected=False)
    for output in sorted(shown.outputs, key=lambda o: "set_or_remove_dark_class" in o.data.get("text/html", "")):
        output.display()


def datatable_html(table: pd.DataFrame, columns: dict[str, str] | None = None, number_text=num_text,
                   every_row: bool = False) -> str:
    """A table that sorts (click a header) and, past TABLE_PAGE_ROWS rows, pages and searches;
    `every_row`: one page of every row, never paged (a table read at a glance must hide nothing).

    Every cell is escaped (itables' allow_html stays off). Numbers read as `number_text` writes them
    and sort by value: itables sends each float as [text, number], the text from pandas' float_format.
    `columns` maps column -> header (and picks and orders the columns shown).
    """
    if columns:
        table = table[[c for c in columns if c in table.columns]].rename(columns=columns)
    shown = pd.DataFrame({i: _cells(table.iloc[:, i]) for i in range(table.shape[1])}, index=range(len(table)))
    shown.columns = [str(c) for c in table.columns]
    pages = [[TABLE_PAGE_ROWS, 100, -1], [TABLE_PAGE_ROWS, 100, "all"]]
    paging = {"paging": False, "layout": {"topStart": None, "topEnd": None, "bottomStart": None}} if every_row \
        else {"lengthMenu": pages, "pageLength": TABLE_PAGE_ROWS}
    if not every_row and narrowest_px(shown, number_text) > PAGE_PX:  # its scroll bar on screen, header kept
        paging.update(scrollX=True, scrollY=WIDE_TABLE_HEIGHT, scrollCollapse=True)
    with pd.option_context("display.float_format", number_text):
        return to_html_datatable(shown, connected=False, allow_html=False, showIndex=False, maxBytes=0,
                                 classes="display compact", style="width:auto;margin:0", **paging,
                                 display_logo_when_loading=False, css=TABLE_CSS,
                                 text_in_header_can_be_selected=False)  # a click anywhere on a header sorts


def narrowest_px(shown: pd.DataFrame, number_text=num_text) -> float:
    """About how wide a table is at its narrowest, in CSS pixels: per column its longest word (of the header
    and the text cells) or its longest number (never broken), at DataTables' compact font and padding."""
    def longest(values, numeric: bool) -> int:
        texts = [number_text(v) if numeric else str(v) for v in values]
        return max((len(t) if numeric else max((len(w) for w in t.split()), default=0) for t in texts), default=0)
    total = 0.0
    for name in shown.columns:
        column = shown[name]
        numeric = pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)
        finite = column[np.isfinite(column)] if numeric else column
        total += max(longest([name], False), longest(finite, numeric)) * CHAR_PX + CELL_PAD_PX
    return total


def _cells(column: pd.Series) -> np.ndarray | list:
    """Numbers as floats (formatted and sorted by the table), yes/no for booleans, text for the rest."""
    values = column.to_numpy()
    if pd.api.types.is_bool_dtype(column):
        return ["yes" if v else "no" for v in values]
    if pd.api.types.is_integer_dtype(column) and column.notna().all():
        return column.to_numpy(dtype="int64")  # a count is shown as one, never through the float format
    if pd.api.types.is_numeric_dtype(column):
        # A missing number is sent as -inf: num_text shows it as an empty cell (pandas would write
        # "NaN", its float_format is not called for a missing value) and it sorts below every
        # number, as DataTables sorts an empty numeric cell.
        numbers = column.astype(float)
        return numbers.where(numbers.notna(), -np.inf).to_numpy()
    return [cell_text(v, isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_)))
            for v in values]


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


def seaborn():
    """seaborn, imported (once) without SEABORN_UNUSED_SCIPY: the charts' only way to import it.

    Marked absent while seaborn is imported, they are left out as seaborn leaves them out where scipy is
    not installed: its KDE uses its own copy of gaussian_kde, its clustermap cannot cluster; the box,
    strip, line and scatter plots drawn here use neither. The marks are removed afterwards, so that
    `import scipy.stats` in a notebook cell still works. (A lazy import: seaborn is heavy.)"""
    if "seaborn" not in sys.modules:
        marked = [name for name in SEABORN_UNUSED_SCIPY if name not in sys.modules]
        sys.modules.update(dict.fromkeys(marked))
        try:
            import seaborn
        finally:
            for name in marked:
                if sys.modules.get(name, "") is None:
                    del sys.modules[name]
    return sys.modules["seaborn"]


@contextlib.contextmanager
def plot_style():
    import matplotlib
    sns = seaborn()
    with warnings.catch_warnings():
        # Library deprecation chatter would print to stderr, a red box in the HTML; it is not about our data.
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        with matplotlib.rc_context({"figure.max_open_warning": 0}), sns.axes_style("whitegrid"), \
                sns.plotting_context("notebook", font_scale=0.9):
            yield


def chart_rows(ok: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """One batch size per configuration but for its batch (machine, model, mode, precision, input, ...) on the
    fewest devices: the largest that ran."""
    if ok.empty:
        return ok, ""
    single = ok[ok["world_size"] == ok.groupby("machine")["world_size"].transform("min")]
    keys = ["machine", *[f for f in SHOWN_FIELDS if f in single and f not in ("batch_size", "world_size")]]
    largest = single.groupby(keys, dropna=False)["batch_size"].transform("max")
    # (a serving point has no batch: each load is its own figure)
    data = single[(single["batch_size"] == largest) | (single["batch_size"].isna() & largest.isna())]
    caveat = ""
    if len(data) < len(ok):
        caveat = ("This chart shows, for each model, mode and precision, the largest batch size that ran on the "
                  "fewest devices; other batch sizes and device counts are under Batch size and Scaling.")
    return data.assign(label=label_columns(data, never=("batch_size", "world_size"))), caveat


def label_columns(table: pd.DataFrame, always: tuple[str, ...] = (), never: tuple[str, ...] = ()) -> list[str]:
    """Short labels: the model, the `always` columns, plus every other configuration field that varies in
    this table (SHOWN_FIELDS but mode and precision, which a label names only in `always`: rows that differ
    only in a field the label leaves out would look alike)."""
    varying = [c for c in SHOWN_FIELDS if c in table and c not in (*never, *always, "model", "mode", "precision")
               and table[c].nunique(dropna=False) > 1]  # (mode and precision: a chart's panels and colours)
    # A row names only the fields its family has: a text model's label does not end in "nchw".
    return [" ".join([str(row.get("model") or "?")] + [part for c in (*always, *varying)
                                                       if applies(row, c) and (part := field_text(c, row.get(c), row))])
            for row in table.to_dict("records")]


def field_text(name: str, value, row: dict) -> str:
    """One field in a label: 'bs64', 'x2', 'compile=default', 'nchw', '8 users', 'parallelism=fsdp'; '' for a
    field that does not apply to the row (a serving point's batch, another mode's request shape)."""
    if not is_present(value):
        return "" if name in NOT_APPLICABLE_WHEN_EMPTY or (name == "batch_size" and is_present(row.get("load"))) \
            else "?"
    if name in LABELLED_WHEN_SET and is_default(name, value):
        return ""  # (as the configuration's own label: parallelism=fsdp beside a plain run, not =ddp on every one)
    fmt = {"precision": str, "mode": str, "input_shape": str, "load": str, "batch_size": lambda v: f"bs{int_text(v)}",
           "world_size": lambda v: f"x{int_text(v)}", "compile": lambda v: f"compile={v}",
           "channels_last": lambda v: "channels_last" if v else "nchw"}
    return fmt[name](value) if name in fmt else f"{name}={num_text(value) if isinstance(value, float) else value}"


def with_varying(table: pd.DataFrame, columns: dict[str, str]) -> dict[str, str]:
    """`columns` and, after them, every configuration field (SHOWN_FIELDS) that varies in `table` and is not
    among them yet: a table shows every field in which its rows differ."""
    extra = {c: FIELD_HEADERS.get(c, c.replace("_", " ")) for c in SHOWN_FIELDS
             if c in table and c not in columns and table[c].nunique(dropna=False) > 1}
    return {**columns, **extra}


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
    """Hide columns that say the same thing on every row (machine when there is one, compile when off, any
    configuration field that does not vary), and columns with nothing in them (a serving table's batch)."""
    constant_ok = ("machine", *SHOWN_FIELDS, "mpx_per_s", "mvox_per_s")
    drop = [c for c in columns if c in table and c not in keep and table[c].nunique(dropna=False) <= 1
            and c in constant_ok]
    drop += [c for c in columns if c in table and c not in ("model", "mode", "precision") and table[c].isna().all()]
    drop += [c for c in ("mpx_per_s", "mvox_per_s", "images_per_s", "peak_memory_mib", "samples_per_s", "sample_unit")
             if c in table and table[c].isna().all()]
    return table.drop(columns=list(dict.fromkeys(drop)))
