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
from bench_core.predict.measured import predict_dir
from bench_core.predict.published import COVERAGE, QUANTILES
from bench_core.predict.prices import parse_prices, prices_with
from bench_core.predict.specs import gpu_list, spec, spec_for_device
from bench_core.summary.charts import drop_blank_minor_ticks
from bench_core.summary.html import note, paragraph, section, show_figure, show_table
from bench_core.summary.load import Results

MAX_CHARTS = 6


def predicted_table(res: Results, gpus=None, prices=None) -> tuple[pd.DataFrame, list[str]]:
    """Predicted rows for every configuration of every result directory on `gpus` (names; default the GPUs a
    person compares today, specs.COMPARED_TODAY), priced at `prices` (NAME=PRICE texts or {NAME: PRICE}, over
    the shipped on-demand prices), and notes on what was skipped. A GPU measured in any of the report's
    folders is not predicted: its measured figure is in the report already."""
    specs = [spec(name) for name in gpu_list(gpus)]
    priced = prices_with(parse_prices(prices))
    rows, notes = [], []
    for directory in res.dirs:
        try:
            found, skipped = predict_dir(directory, specs, prices=priced)
        except ConfigError as exc:  # a folder is named, never its local path (the report is shared)
            notes.append(str(exc).replace(str(directory), Path(directory).name))
            continue
        rows += found
        notes += skipped
    measured = measured_gpus(res) | {r["measured_on"] for r in rows}
    return pd.DataFrame([r for r in rows if r["gpu"] not in measured]), notes


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
    import matplotlib.pyplot as plt
    groups = list(table.groupby(["model", "mode", "precision", "batch_size"], sort=False))[:MAX_CHARTS]
    fig, axes = plt.subplots(len(groups), 1, figsize=(8, 1.2 + 0.45 * sum(g["gpu"].nunique() + 1 for _, g in groups)),
                             squeeze=False)
    for ax, ((model, mode, precision, batch), group) in zip(axes[:, 0], groups):
        measured = group.drop_duplicates("measured_on")
        several = len(measured) > 1
        labels = [f"{m} (measured)" for m in measured["measured_on"]] + [
            f"{g} ({'at most' if k == 'bound' else 'predicted'}{f' from {m}' if several else ''})"
            for g, m, k in zip(group["gpu"], group["measured_on"], group["kind"])]
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
        ax.set_title(f"{model} {mode} {precision}, batch {batch}", fontsize=10, loc="right")
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
    groups = table.drop_duplicates("group")
    said = "; ".join(groups["band_text"])
    paragraph(f"Predicted, not measured: each configuration carried to GPUs that were not measured "
              f"(`bench predict`; docs/prediction.md). The model puts the FLOPs and bytes counted in the run "
              f"against each GPU's datasheet peak and memory bandwidth and carries the measured efficiency "
              f"over, capped by the launch floor (the step's kernels x the host's time per kernel); 'binds' says "
              f"which ceiling dominates. Each prediction carries the interval that holds {COVERAGE * 100:.0f} % of "
              f"the published pairs of its group (the {QUANTILES[0] * 100:.0f}th to {QUANTILES[1] * 100:.0f}th "
              f"percentile of measured / predicted), only where such pairs were measured; from a CPU run the figure "
              f"is the GPU's roofline bound, 'at most', with no interval and no efficiency carried over. Here: {said}.")
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
    shown = table.assign(
        predicted_band=[f"{lo:.4g} – {hi:.4g}" if pd.notna(lo) else text for lo, hi, text in
                        zip(table["low"], table["high"], table["band_text"])],
        predicted_text=[f"{'at most ' if k == 'bound' else ''}{v:.4g} {u}" for v, k, u in
                        zip(table["predicted"], table["kind"], table["sample_unit"])],
        measured_text=[f"{v:.4g} {u}" for v, u in zip(table["measured"], table["sample_unit"])],
        ratio_text=[f"{r:.2f}x" if pd.notna(r) else "" for r in table["ratio"]],
        cost_text=[f"{'at least ' if k == 'bound' else ''}{c:.3g} {cur} per million {u.removesuffix('/s')}"
                   if pd.notna(c) else "no sourced price" for c, k, cur, u in
                   zip(table["cost_per_million"], table["kind"], table["currency"], table["throughput_unit"])])
    show_table(shown, {"model": "model", "mode": "mode", "precision": "precision", "batch_size": "batch",
                       "settings": "settings",
                       "measured_on": "measured on", "measured_text": "measured", "gpu": "GPU (predicted)",
                       "predicted_text": "predicted", "ratio_text": "x measured",
                       "predicted_band": f"{COVERAGE * 100:.0f} % interval", "cost_text": "cost",
                       "price_from": "price", "published_pair": "published pair of these GPUs",
                       "binds": "binds", "efficiency": "efficiency carried over",
                       "above_roofline": "above its own roofline", "disturbed": "disturbed"})
