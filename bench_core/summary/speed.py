"""The report's sections on speed: overview, headline, relative speed, throughput, AMP, batch size, memory.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from bench_core.summary.html import (
    chart_rows,
    columns_for,
    date_range,
    drop_constant,
    esc,
    label_columns,
    note,
    ordered,
    paragraph,
    plain_log_ticks,
    rotate_ticks,
    section,
    show_figure,
    show_html,
    show_table,
)
from bench_core.summary.load import MODE_ORDER, PRECISION_ORDER, Results
from bench_core.summary.tables import (
    KNEE_FRACTION,
    amp_speedup_table,
    batch_curves,
    emulation_notes,
    headline_table,
    knee_points,
    peak_memory_mib,
    relative_speed,
)
from bench_core.summary.text import num_text, wrap_text


@section
def show_overview(res: Results, title: str = "") -> None:
    rows = res.rows
    lines = [f"<p><strong>{esc(title)}</strong></p>" if title else ""]
    if rows.empty:
        lines.append(f"<p>No result rows in {esc(', '.join(str(d) for d in res.dirs))}: every section below "
                     "says what is missing. Run <code>bench sweep</code> or <code>bench run --out DIR</code> "
                     "first.</p>")
    else:
        counts = rows["status"].value_counts()
        status = ", ".join(f"{n} {esc(s)}" for s, n in counts.items())
        lines.append(f"<p>{len(rows)} result rows ({status}) from {len(res.dirs)} result "
                     f"director{'y' if len(res.dirs) == 1 else 'ies'}, {len(res.machines)} machine"
                     f"{'' if len(res.machines) == 1 else 's'}, {rows['config'].nunique()} configurations. "
                     "Throughput is the median over repeats; the spread is the interquartile range of the "
                     "repeats.</p>")
    show_html("".join(lines))
    per_dir = []
    for d in res.dirs:
        in_dir = rows[rows["result_dir"] == str(d)]
        per_dir.append({"result directory": str(d), "rows": len(in_dir), "ok": int((in_dir["status"] == "ok").sum()),
                        "not ok": int((in_dir["status"] != "ok").sum()),
                        "machines": " | ".join(dict.fromkeys(in_dir["machine"])),
                        "measured (UTC)": date_range(in_dir["timestamp"]),
                        "schema versions": ", ".join(num_text(v) for v in sorted(set(in_dir["schema_version"].dropna())))})
    show_table(pd.DataFrame(per_dir))
    for text in res.notes:
        note(text)


@section
def show_headline(res: Results) -> None:
    table = headline_table(res)
    if table.empty:
        note("No successful rows: nothing to summarise (see Failures for what went wrong).")
        return
    table["IQR of repeats"] = [f"{num_text(a)} – {num_text(b)}" for a, b in zip(table["q25"], table["q75"])]
    columns = {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision",
               "batch_size": "batch / device", "input_shape": "input", "world_size": "devices",
               "compile": "compile", "channels_last": "channels_last", "samples_per_s": "samples/s (median)",
               "IQR of repeats": "IQR of repeats", "step_time_ms": "step ms (median)", "mpx_per_s": "MPx/s",
               "mvox_per_s": "MVox/s", "peak_memory_mib": "peak memory MiB", "repeats": "repeats"}
    show_table(drop_constant(table, columns, keep=("model", "mode", "precision", "batch_size")), columns)
    searched = res.rows[(res.rows["status"] == "ok") & res.rows["batch_searched"]]
    for _, row in searched.drop_duplicates(["machine", "config"]).iterrows():
        note(f"{row['config']} on {row['machine']}: batch_size max, {row.get('batch_search') or 'found by search'}")
    failed = res.rows[res.rows["status"] != "ok"]["config"].nunique()
    if failed:
        note(f"{failed} configuration(s) have rows that did not succeed: see Failures.")


@section
def show_relative_speed(res: Results, baseline: str | None = None) -> None:
    med, per_machine, chosen, why = relative_speed(res, baseline)
    if med.empty:
        note(f"One machine only ({chosen or 'none'}): add another machine's result directory "
             "(bench report DIR_A DIR_B) to compare them here." if chosen else "No successful rows to compare.")
        return
    items = "".join(
        f"<li><strong>{esc(r['machine'])}</strong> runs at <strong>{r['speed_vs_baseline']:.2f}×</strong> the "
        f"baseline's throughput (geometric mean over {r['shared_configs']} shared configuration"
        f"{'' if r['shared_configs'] == 1 else 's'}; range {r['min']:.2f}× – {r['max']:.2f}×)</li>"
        for r in per_machine.to_dict("records"))
    items = items or "<li>No configuration ran on both the baseline and another machine.</li>"
    show_html(f"<p>Baseline: <strong>{esc(chosen)}</strong> ({esc(why)}).</p><ul>{items}</ul>")
    ratio = med.div(med[chosen], axis=0)
    shown = ratio.dropna(how="all")
    if not shown.empty:
        _relative_heatmap(shown)
    table = med.reset_index()
    for m in med.columns:
        table[m] = [f"{num_text(v)} ({r:.2f}×)" if pd.notna(r) else num_text(v) for v, r in zip(med[m], ratio[m])]
    table.columns = ["configuration", *[f"{m}: samples/s (× baseline)" for m in med.columns]]
    show_table(table)


def _relative_heatmap(ratio: pd.DataFrame) -> None:
    """Configurations x machines, each cell the speed over the baseline; blue faster, red slower."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    fig, ax = plt.subplots(figsize=(2.2 + 1.9 * len(ratio.columns), 1.0 + 0.42 * len(ratio)))
    annot = ratio.map(lambda v: "" if pd.isna(v) else f"{v:.2f}×")
    log_ratio = np.log2(ratio.astype(float))
    limit = max(1.0, float(np.nanmax(np.abs(log_ratio.to_numpy()))))
    sns.heatmap(log_ratio, annot=annot, fmt="", cmap="RdBu", center=0, vmin=-limit, vmax=limit, cbar=False,
                linewidths=0.5, ax=ax)
    ax.set(xlabel="", ylabel="", title="Throughput relative to the baseline (median samples/s; >1 is faster)")
    ax.set_xticklabels([wrap_text(t.get_text()) for t in ax.get_xticklabels()], rotation=0)
    show_figure(fig, "Heatmap: throughput of each machine relative to the baseline, per configuration")


@section
def show_throughput(res: Results) -> None:
    import seaborn as sns
    data, caveat = chart_rows(res.ok)
    if data.empty:
        note("No successful rows: no throughput chart.")
        return
    several = data["machine"].nunique() > 1
    hue = "machine" if several else "precision"
    g = sns.catplot(data=data, kind="point", x="label", y="samples_per_s", hue=hue, col="mode",
                    row="precision" if several else None, order=sorted(data["label"].unique()),
                    hue_order=ordered(data[hue], PRECISION_ORDER if hue == "precision" else None),
                    col_order=ordered(data["mode"], MODE_ORDER),
                    row_order=ordered(data["precision"], PRECISION_ORDER) if several else None,
                    estimator="median", errorbar=("pi", 50), dodge=0.35, linestyle="none", marker="o",
                    capsize=0.12, height=3.4, aspect=max(1.2, 0.28 * data["label"].nunique()), sharey=True)
    g.set(yscale="log")
    for ax in g.axes.flat:
        plain_log_ticks(ax.yaxis)
    g.set_axis_labels("", "samples/s (log scale)")
    g.set_titles("{col_name}" if not several else "{row_name} · {col_name}")
    rotate_ticks(g)
    g.figure.suptitle("Throughput: median of repeats, bars = interquartile range", y=1.03)
    show_figure(g.figure, "Throughput by model and precision, train and infer, log scale")
    if caveat:
        note(caveat)


@section
def show_amp_speedup(res: Results) -> None:
    import seaborn as sns
    table = amp_speedup_table(res)
    if table.empty:
        note("No AMP speed-up: it needs fp32 and a reduced precision (amp-fp16, amp-bf16, fp16, bf16, tf32) "
             "of the same workload on the same machine.")
        for line in emulation_notes(res, table):
            paragraph(line)
        return
    table = table.assign(label=label_columns(table))
    several = table["machine"].nunique() > 1
    g = sns.catplot(data=table, kind="bar", x="label", y="speedup", hue="precision", col="mode",
                    row="machine" if several else None, order=sorted(table["label"].unique()),
                    hue_order=ordered(table["precision"], PRECISION_ORDER), col_order=ordered(table["mode"], MODE_ORDER),
                    errorbar=None, height=3.2, aspect=max(1.2, 0.3 * table["label"].nunique()), sharey=True)
    for ax in g.axes.flat:
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
        for container in ax.containers:
            ax.bar_label(container, fmt="%.2f×", fontsize=8, padding=2)
    g.set_axis_labels("", "speed-up over fp32 (×)")
    g.set_titles("{col_name}" if not several else "{row_name} · {col_name}")
    rotate_ticks(g)
    show_figure(g.figure, "Speed-up of each reduced precision over fp32")
    show_table(table, columns_for(res, {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision",
                       "batch_size": "batch / device", "input_shape": "input", "world_size": "devices",
                       "fp32": "fp32 samples/s", "samples_per_s": "samples/s", "speedup": "speed-up over fp32"}))
    for line in emulation_notes(res, table):
        paragraph(line)


@section
def show_batch_curves(res: Results) -> None:
    import matplotlib.pyplot as plt
    import seaborn as sns
    curves = batch_curves(res)
    if curves.empty:
        note("No batch-size curve: no workload ran at two or more batch sizes (params/batch-sweep.yaml does).")
        return
    knees = knee_points(curves)
    paragraph(f"The knee (★) is the smallest batch size whose median throughput reaches "
              f"{KNEE_FRACTION:.0%} of the best throughput on that curve: past it, a larger batch buys little "
              "speed and costs memory and step time.")
    curves = curves.assign(curve=label_columns(curves, always=("precision",), never=("batch_size",)))
    knees = knees.assign(curve=label_columns(knees, always=("precision",)))
    several = curves["machine"].nunique() > 1
    panels = [(m, mode) for m in dict.fromkeys(curves["machine"]) for mode in ordered(curves["mode"], MODE_ORDER)
              if ((curves["machine"] == m) & (curves["mode"] == mode)).any()]
    metrics = (("samples_per_s", "knee_samples_per_s", "samples/s (median)"),
               ("step_time_ms", "knee_step_time_ms", "step time, ms (median)"))
    fig, axes = plt.subplots(len(panels), 2, figsize=(11, 3.7 * len(panels)), squeeze=False)
    for i, (machine, mode) in enumerate(panels):
        part = curves[(curves["machine"] == machine) & (curves["mode"] == mode)]
        k = knees[(knees["machine"] == machine) & (knees["mode"] == mode)]
        for j, (metric, knee_metric, ylabel) in enumerate(metrics):
            ax = axes[i][j]
            sns.lineplot(data=part, x="batch_size", y=metric, hue="curve", marker="o", ax=ax)
            ax.scatter(k["knee_batch_size"], k[knee_metric], marker="*", s=260, color="black", zorder=5,
                       label=f"knee ({KNEE_FRACTION:.0%} of best)")
            ax.set_xscale("log", base=2)
            sizes = sorted(part["batch_size"].dropna().unique())
            ax.set_xticks(sizes, [num_text(v) for v in sizes])
            ax.minorticks_off()
            ax.set(xlabel="batch size per device (log scale)", ylabel=ylabel,
                   title=wrap_text(f"{mode} · {machine}" if several else mode, 60))
            ax.legend(fontsize=7)
    fig.tight_layout()
    show_figure(fig, "Throughput and step time against batch size; the knee is marked with a star")
    show_table(knees, columns_for(res, {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision",
                       "input_shape": "input", "world_size": "devices", "batch_sizes": "batch sizes tried",
                       "knee_batch_size": "knee batch", "knee_samples_per_s": "samples/s at knee",
                       "knee_step_time_ms": "step ms at knee", "best_batch_size": "best batch",
                       "best_samples_per_s": "best samples/s"}))


@section
def show_memory(res: Results) -> None:
    import seaborn as sns
    data, caveat = chart_rows(res.ok)
    if data.empty:
        note("No successful rows: no memory chart.")
        return
    data = data.assign(memory_mib=peak_memory_mib(data)).dropna(subset=["memory_mib"])
    if data.empty:
        note("No memory was recorded in these rows (peak_mem_allocated_bytes and peak_rss_bytes are empty).")
        return
    several = data["machine"].nunique() > 1
    g = sns.catplot(data=data, kind="bar", x="label", y="memory_mib", hue="machine" if several else "precision",
                    col="mode", row="precision" if several else None, order=sorted(data["label"].unique()),
                    hue_order=None if several else ordered(data["precision"], PRECISION_ORDER),
                    col_order=ordered(data["mode"], MODE_ORDER), estimator="median", errorbar=None,
                    height=3.2, aspect=max(1.2, 0.28 * data["label"].nunique()))
    g.set_axis_labels("", "peak memory, MiB")
    g.set_titles("{col_name}" if not several else "{row_name} · {col_name}")
    rotate_ticks(g)
    show_figure(g.figure, "Peak memory by model and precision")
    kinds = set(data["device_type"].dropna())
    if kinds - {"cuda"}:
        note("On CPU the figure is the peak resident memory (RSS) of the process that ran the configuration, over "
             "its whole life: configurations that shared a process carry the peak of the ones before them.")
    if "cuda" in kinds:
        note("On CUDA the figure is torch's peak allocated memory during the run (reserved and device-used "
             "memory are in results.csv).")
    if caveat:
        note(caveat)
