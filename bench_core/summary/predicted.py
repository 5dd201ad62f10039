"""The report's "Predicted GPUs" section: what `bench predict` gives for GPUs that were not measured,
beside what was measured, drawn apart (hollow, hatched, labelled "predicted" or, from a CPU run,
"at most": a roofline bound) with the interval of its group's published pairs where they were measured
(docs/prediction.md). A predicted figure is never mixed into a measured one: it has its own rows,
bars and column.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench_core.errors import ConfigError
from bench_core.predict.bands import band_text, bands
from bench_core.predict.measured import ok_rows, predict_rows
from bench_core.predict.published import COVERAGE, QUANTILES
from bench_core.predict.prices import parse_prices, prices_with
from bench_core.predict.specs import gpu_list, spec, spec_for_device
from bench_core.summary.charts import drop_blank_minor_ticks
from bench_core.summary.html import note, paragraph, section, show_figure, show_table
from bench_core.summary.load import Results

MAX_CHARTS = 6


def predicted_table(res: Results, gpus=None, prices=None) -> tuple[pd.DataFrame, list[str]]:
    """Predicted rows for every configuration of the report's folders on `gpus` (names; default the GPUs a
    person compares today, specs.COMPARED_TODAY), priced at `prices` (NAME=PRICE texts or {NAME: PRICE}, over
    the shipped on-demand prices), and notes on what was skipped. The folders' rows are taken together: one
    configuration of one machine found in several folders is one prediction, from all its repeats, and says which
    folders (`folders`). A GPU measured in any of the report's folders is not predicted: its measured figure is in
    the report already."""
    specs = [spec(name) for name in gpu_list(gpus)]
    priced = prices_with(parse_prices(prices))
    rows, notes = [], []
    names = res.names or [Path(d).name for d in res.dirs]
    for directory, name in zip(res.dirs, names):
        try:  # a folder is named, never its local path (the report is shared)
            rows += [{**r, "result_dir": name} for r in ok_rows(directory)[0]]
        except ConfigError as exc:
            notes.append(str(exc).replace(str(directory), name))
    found, skipped = predict_rows(rows, specs, prices=priced) if rows else ([], [])
    measured = measured_gpus(res) | {r["measured_on"] for r in found}
    table = pd.DataFrame([r for r in found if r["gpu"] not in measured])
    return (with_labels(table, len(res.dirs) > 1) if not table.empty else table), notes + skipped


def with_labels(table: pd.DataFrame, several_folders: bool) -> pd.DataFrame:
    """The table with `configuration` (model, mode, precision, batch and the settings that tell it apart) and
    `source` (the machine and, in a report of several folders, the folders it came from: a configuration
    measured apart in two folders or on two machines is two lines that say which is which)."""
    configuration = [f"{m} {mode} {p}, batch {b}" + (f" ({s})" if s else "") for m, mode, p, b, s in
                     zip(table["model"], table["mode"], table["precision"], table["batch_size"], table["settings"])]
    source = [m + (f" · {f}" if several_folders and f else "") for m, f in zip(table["machine"], table["folders"])]
    return table.assign(configuration=configuration, source=source)


def measured_gpus(res: Results) -> set[str]:
    """The GPUs the report's folders measured, as predictions name them ('1x H100-SXM5-80GB')."""
    ok = res.ok
    if not len(ok) or "device_type" not in ok:
        return set()
    gpus = ok[ok["device_type"] == "cuda"]
    sizes = gpus["world_size"] if "world_size" in gpus else pd.Series(1, index=gpus.index)
    return {f"{int(size) if pd.notna(size) else 1}x {found.gpu}" for name, size in zip(gpus["device_name"], sizes)
            if (found := spec_for_device(str(name))) is not None}


def _chart(table: pd.DataFrame) -> None:
    """One panel per configuration (as the table names it), each predicted GPU once per machine it was predicted
    from: a configuration found in several folders of one machine is one prediction, never one bar per folder."""
    import matplotlib.pyplot as plt
    groups = list(table.groupby("configuration", sort=False))[:MAX_CHARTS]
    sizes = [g["source"].nunique() + len(g) for _, g in groups]
    fig, axes = plt.subplots(len(groups), 1, figsize=(8, 1.2 + 0.45 * sum(sizes)), squeeze=False)
    for ax, (configuration, group) in zip(axes[:, 0], groups):
        measured = group.drop_duplicates("source")
        several = len(measured) > 1
        labels = [f"{m} (measured{f', {src}' if several else ''})" for m, src in
                  zip(measured["measured_on"], measured["source"])] + [
            f"{g} ({'at most' if k == 'bound' else 'predicted'}{f' from {src}' if several else ''})"
            for g, src, k in zip(group["gpu"], group["source"], group["kind"])]
        y = range(len(labels))
        ax.barh(list(y)[:len(measured)], measured["measured"], color="tab:blue", label="measured")
        banded = group["low"].notna().to_numpy()
        bound = (group["kind"] == "bound").to_numpy()
        label = ("roofline bound (from a CPU run: no interval)" if bound.all() else
                 f"predicted (bar: the {COVERAGE * 100:.0f} % interval of its group's published pairs)")
        ax.barh(list(y)[len(measured):], group["predicted"], fill=False, hatch="///", edgecolor="tab:orange",
                label=label, xerr=[(group["predicted"] - group["low"]).where(banded, 0),
                                   (group["high"] - group["predicted"]).where(banded, 0)], ecolor="tab:orange")
        ax.set_yticks(list(y), labels)
        ax.invert_yaxis()
        ax.set_xscale("log")
        unit = group["sample_unit"].dropna().iloc[0] if group["sample_unit"].notna().any() else "samples/s"
        ax.set_xlabel(unit)
        ax.set_title(configuration, fontsize=10, loc="right")
        drop_blank_minor_ticks(ax.xaxis)
    axes[0, 0].legend(loc="lower left", bbox_to_anchor=(0, 1.08), ncols=2, fontsize=8, frameon=False)
    fig.tight_layout()
    show_figure(fig, "Measured throughput (solid) beside predicted throughput of GPUs not measured (hatched, with "
                     f"the {COVERAGE * 100:.0f} % interval of its group's published pairs)")


@section
def show_predicted(res: Results, gpus=None, prices=None) -> None:
    table, notes = predicted_table(res, gpus, prices)
    if notes:
        more = f" (and {len(notes) - 1} more like it)" if len(notes) > 1 else ""
        note(f"Not predicted: {notes[0]}{more}.")
    if table.empty:
        note("Nothing to predict from: no ok row with the FLOP and byte counts `bench predict` needs.")
        return
    bands_now = bands()
    said = "; ".join(band_text(g, bands_now[g]) for g in dict.fromkeys(table["group"]))
    paragraph(f"Predicted, not measured: each configuration carried to GPUs that were not measured "
              f"(`bench predict`; docs/prediction.md). The whole-step model puts the FLOPs and bytes counted in the "
              f"run against each GPU's peak and memory bandwidth as microbenchmarks reach them, scales the part of "
              f"the measured step those explain by the two GPUs' ceilings and the rest by their SM issue rates, "
              f"capped by the launch floor (the step's kernels x the host's time per kernel); a GPU row whose "
              f"profile kept its ops' table is predicted op by op instead ('path'). Each whole-step prediction "
              f"carries the interval that holds {COVERAGE * 100:.0f} % of the published pairs of its group (the "
              f"{QUANTILES[0] * 100:.0f}th to {QUANTILES[1] * 100:.0f}th percentile of measured / predicted), only "
              f"where such pairs were measured; from a CPU run the figure is the GPU's roofline bound, 'at most', "
              f"with no interval. A configuration found in several of the report's folders on one machine is one "
              f"prediction from all its repeats ('measured on' names the folders). Here: {said}.")
    if table["price_from"].notna().any():
        paragraph("Cost per million items (the workload's own unit: images, tokens) = price x GPUs / (predicted "
                  "items/s x 3600) x 1e6, at an on-demand price per GPU-hour: "
                  + "; ".join(dict.fromkeys(f"{g.split('x ', 1)[-1]} {t}" for g, t in
                                            zip(table["gpu"], table["price_from"]) if pd.notna(t)))
                  + " (bench_core/data/gpu_prices.csv, each with its source page; prices change, and differ 2-4x "
                    "between providers: give yours as `bench report --price NAME=PRICE`).")
    beside = list(dict.fromkeys(table["published_pair"].dropna()))
    if beside:
        paragraph("Published pairs of the same two GPUs, and the model's error on them (the error to expect on "
                  "these predictions): " + "; ".join(beside) + ".")
    _chart(table)
    shown, details = shown_tables(table)
    show_table(shown, SHOWN)
    paragraph("What binds each prediction, its interval in words, the published pair of the same GPUs and what else "
              "it says (the table above stays narrow enough for the page):")
    show_table(details, DETAILS)


# The table a page of the report can hold (1,400 px): short cells only; what takes a sentence is in DETAILS below it.
SHOWN = {"configuration": "configuration", "source": "measured on", "measured_text": "measured",
         "gpu": "GPU (predicted)", "predicted_text": "predicted", "ratio_text": "x measured",
         "predicted_band": f"{COVERAGE * 100:.0f} % interval", "path": "path", "cost_text": "cost per million"}
DETAILS = {"prediction": "prediction", "binds": "binds", "more": "interval in words, published pair, price, flags"}


def shown_tables(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the narrow table, the details table) of the predicted rows: numbers in short cells in the first, every
    sentence in the second."""
    shown = table.assign(
        predicted_band=[f"{lo:,.4g}-{hi:,.4g}" if pd.notna(lo) else "none (below)" for lo, hi in
                        zip(table["low"], table["high"])],
        predicted_text=[f"{'at most ' if k == 'bound' else ''}{v:,.4g}" for v, k in
                        zip(table["predicted"], table["kind"])],
        measured_text=[f"{v:,.4g} {u}" for v, u in zip(table["measured"], table["sample_unit"])],
        ratio_text=[f"{r:.2f}x" if pd.notna(r) else "" for r in table["ratio"]],
        cost_text=[f"{'at least ' if k == 'bound' else ''}{c:.3g} {cur}" if pd.notna(c) else "no price"
                   for c, k, cur in zip(table["cost_per_million"], table["kind"], table["currency"])])
    more = [[t for t in (band, pair, f"price: {price}" if isinstance(price, str) else None,
                         f"efficiency carried over {e:.0%}" if pd.notna(e) else None, above, disturbed)
             if isinstance(t, str) and t]
            for band, pair, price, e, above, disturbed in
            zip(table["band_text"], table["published_pair"], table["price_from"], table["efficiency"],
                table["above_roofline"], table["disturbed"])]
    details = pd.DataFrame({"prediction": [f"{c} on {g} (from {s})" for c, g, s in
                                           zip(table["configuration"], table["gpu"], table["source"])],
                            "binds": table["binds"], "more": ["; ".join(m) for m in more]})
    return shown, details
