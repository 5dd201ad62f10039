"""The report's sections on trust and context: step times, scaling, efficiency, references, failures, environment, method.
"""
from __future__ import annotations

import pandas as pd

from bench_core.measure import noise
from bench_core.results.comparison import METHOD_TEXT
from bench_core.results.fidelity import METHOD_TEXT as FIDELITY_TEXT
from bench_core.summary.charts import can_compare, category_chart, log_axis
from bench_core.summary.html import (
    absent,
    columns_for,
    datatable_html,
    device_names,
    esc,
    label_columns,
    note,
    ordered,
    paragraph,
    seaborn,
    section,
    show_figure,
    show_html,
    show_table,
)
from bench_core.summary.load import MODE_ORDER, PRECISION_ORDER, Results
from bench_core.summary.reference import (
    load_reference,
    matched_reference_scaling,
    reference_matches,
    reference_scaling,
)
from bench_core.summary.tables import (
    DISTURBED_MARK,
    DISTURBED_WHY,
    disturbed_marks,
    efficiency_table,
    environment_table,
    failures_table,
    marked,
    method_settings,
    noise_table,
    scaling_table,
    step_times_long,
)
from bench_core.summary.text import is_present, num_text, with_currency, wrap_text


@section
def show_step_times(res: Results) -> None:
    import matplotlib.pyplot as plt
    sns = seaborn()
    steps = step_times_long(res)
    if steps.empty:
        absent("No per-step times in these rows (the step_times_ms column is empty or absent).")
        return
    several = steps["machine"].nunique() > 1
    steps = steps.assign(who=steps["config"] + (" · " + steps["machine"] if several else ""))
    hit = steps.groupby("who")["disturbed"].transform("any")
    steps = steps.assign(who=[marked(w, d) for w, d in zip(steps["who"], hit)])
    order = sorted(steps["who"].unique())
    fig, ax = plt.subplots(figsize=(9.5, 1.2 + 0.38 * len(order)))
    sns.boxplot(data=steps, y="who", x="step_ms", order=order, whis=(0, 100), showfliers=False, color="#cfe0f3",
                log_scale=True, ax=ax)
    sns.stripplot(data=steps, y="who", x="step_ms", order=order, size=3, color="#1f4e79", alpha=0.6, jitter=0.2,
                  ax=ax)
    log_axis(ax.xaxis, steps["step_ms"], min_span=3)
    ax.set(xlabel="step time, ms (log scale)", ylabel="",
           title="Every timed step of every repeat (box: quartiles, whiskers: min–max)")
    show_figure(fig, "Distribution of step times per configuration" + (f"; {DISTURBED_MARK} marks configurations "
                                                                     "with repeats flagged as disturbed" if hit.any() else ""))
    if hit.any():
        note(f"{DISTURBED_MARK}: some of the configuration's repeats were flagged as disturbed ({DISTURBED_WHY}): "
             "their steps are drawn with the others; re-measure on a quiet machine.")


@section
def show_scaling(res: Results) -> None:
    import matplotlib.pyplot as plt
    table = scaling_table(res)
    reference = reference_scaling()
    matched = matched_reference_scaling(table, reference, device_names(res))
    if table.empty:
        absent("No scaling data: every configuration ran on one device count. A sweep over devices "
             "(params/scaling.yaml, or bench run --nproc-per-node N) fills this section.")
    else:
        table = table.assign(curve=label_columns(table, always=("precision",), never=("world_size",)))
        hit = table.groupby("curve")["disturbed"].transform("sum") > 0
        table = table.assign(curve=[marked(c, d) for c, d in zip(table["curve"], hit)],
                             disturbed_text=disturbed_marks(table))
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        top = float(table["world_size"].max())
        ax.plot([1, top], [1, top], color="grey", linestyle="--", label="ideal (speed-up = devices)")
        for label, group in table.groupby("curve", sort=False):
            scaling_curve(ax, group, wrap_text(label, 50))
        for label, group in (matched.groupby("label", sort=False) if not matched.empty else []):
            group = group[group["gpus"] <= max(top, 8)]
            ax.plot(group["gpus"], group["speedup"], marker="s", linestyle=":", color="black", alpha=0.6,
                    label=label)
        devices = sorted(set(table["world_size"].dropna()) | {1})
        ax.set_xticks(devices, [num_text(v) for v in devices])
        ax.set(xlabel="devices (world size)", ylabel="speed-up over 1 device",
               title="Scaling (bars: 95 % interval; hollow: too few repeats for one)")
        ax.legend(fontsize=9)
        show_figure(fig, "Speed-up against the number of devices with 95 % intervals, and the ideal line")
        show_table(table, columns_for(res, {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision",
                           "batch_size": "batch / device", "input_shape": "input", "world_size": "devices",
                           "nodes": "nodes", "samples_per_s": "samples/s", "samples_per_s_per_device":
                           "samples/s per device", "text": "speed-up vs 1 device [95% CI], verdict",
                           "efficiency_text": "scaling efficiency [95% CI]", "repeats": "repeats",
                           **({"disturbed_text": "disturbed repeats"} if hit.any() else {})}))
        paragraph("Speed-up is the ratio of geometric-mean throughputs over the repeats on N devices and on 1 device, "
                  "with its 95 % interval (see Method); scaling efficiency is speed-up / N, its interval the same "
                  "interval divided by N.")
        if table["speedup"].isna().any():
            note("Speed-up and efficiency are empty where the same workload has no 1-device run.")
    columns = {"source": "source", "gpu": "GPU", "precision": "precision", "batch_size": "batch / GPU",
               "gpus": "GPUs", "nodes": "nodes", "value": "images/s", "speedup": "speed-up",
               "efficiency": "scaling efficiency", "note": "note"}
    if not matched.empty:
        paragraph("Published DLPerf figures for the same GPU and workload, beside ours:")
        show_table(matched, columns)
    elif not reference.empty:
        note("No result here ran on DLPerf's hardware (Tesla V100-SXM2-16GB, ResNet-50 training at 224 px); "
             "its published scaling, for context:")
        show_html(f"<details><summary>DLPerf ResNet-50 v1.5 scaling on V100 ({len(reference)} rows)</summary>"
                  f"{datatable_html(reference, columns)}</details>")


def scaling_curve(ax, curve: pd.DataFrame, label: str) -> None:
    """One scaling curve: speed-up with its interval as error bars; a point without one drawn hollow."""
    curve = curve.dropna(subset=["speedup"])
    below = (curve["speedup"] - curve["low"]).fillna(0).clip(lower=0)
    above = (curve["high"] - curve["speedup"]).fillna(0).clip(lower=0)
    line = ax.errorbar(curve["world_size"], curve["speedup"], yerr=[below, above], marker="o", capsize=4,
                       label=label)
    bare = curve[curve["low"].isna() & (curve["world_size"] != 1)]
    ax.plot(bare["world_size"], bare["speedup"], "o", markerfacecolor="white", markeredgewidth=1.6,
            markeredgecolor=line.lines[0].get_color(), zorder=4)


@section
def show_efficiency(res: Results) -> None:
    table = efficiency_table(res)
    if table.empty:
        absent("No successful rows: no efficiency figures.")
        return
    wanted = {"MFU": "mfu", "energy per sample": "j_per_1k_samples", "perf per watt": "samples_per_s_per_w",
              "cost per million samples": "cost_per_million_samples"}
    without_mfu = table["mfu_note"].map(is_present)  # the task says why MFU does not apply (recommendation)
    for reason, models in table[without_mfu].groupby("mfu_note")["model"]:
        note(f"No MFU for {', '.join(sorted(set(models)))}: {reason}.")
    for what, column in wanted.items():
        if table[column].notna().any() or (column == "mfu" and without_mfu.all()):
            continue
        reason = {"mfu": "no peak FLOP/s is known for these devices (run `bench peak` on a CPU machine; "
                         "GPUs need an entry in the peak table)",
                  "j_per_1k_samples": "no energy or power was measured (no NVML GPU, no readable RAPL counter)",
                  "samples_per_s_per_w": "no power was measured",
                  "cost_per_million_samples": "no price was given (--price-per-hour, or per device in the sweep "
                                              "file)"}[column]
        note(f"No {what}: {reason}.")
    notes = sorted({str(v) for v in table["telemetry_note"] if is_present(v)})
    if notes:
        note("Telemetry notes: " + "; ".join(notes))
    several = table["machine"].nunique() > 1
    table = table.assign(mfu_pct=table["mfu"] * 100, embedding_gb_per_s=table["embedding_bytes_per_s"] / 1e9,
                         label=label_columns(table, always=("precision",) if several else ()))
    hue = "machine" if several else "precision"
    for column, xlabel in (("mfu_pct", "MFU, % of peak"), ("j_per_1k_samples", "joules per 1000 samples"),
                           ("cost_per_million_samples", with_currency("cost per million samples", table))):
        data = table.dropna(subset=[column])
        if not can_compare(data[column]):  # one figure is read from the table below
            continue
        bars = data.groupby(["mode", "label", hue], dropna=False, sort=False).agg(value=(column, "median"))
        category_chart(bars.reset_index().rename(columns={"mode": "panel", hue: "hue"}),
                       ordered(data["mode"], MODE_ORDER),
                       ordered(data[hue], PRECISION_ORDER if hue == "precision" else None), xlabel,
                       f"{xlabel[0].upper()}{xlabel[1:]} (median of repeats)", xlabel, kind="bar")
    columns = {"machine": "machine", "config": "configuration", "samples_per_s": "samples/s",
               "achieved_tflops": "achieved TFLOP/s", "peak_tflops": "peak TFLOP/s", "mfu_pct": "MFU %",
               "peak_source": "peak source", "embedding_gb_per_s": "embedding GB/s", "power_w_mean": "mean power W",
               "samples_per_j": "samples/J",
               "j_per_1k_samples": "J / 1k samples", "samples_per_s_per_w": "samples/s per W",
               "energy_method": "energy from", "price_per_hour": with_currency("price / hour", table),
               "cost_per_million_samples": with_currency("cost / million samples", table)}
    table["disturbed_text"] = disturbed_marks(table)
    columns["disturbed_text"] = "disturbed repeats"
    show_table(table, {k: v for k, v in columns.items() if k in ("machine", "config", "samples_per_s")
                       or (table[k].notna().any() if k != "disturbed_text" else table["disturbed"].any())})
    flagged = noise_table(res)
    if flagged.empty:
        note("Noise flags: no row was flagged (checks: step-time CV, throttling, clocks, other processes "
             "on the device).")
    else:
        kinds = pd.Series([part.split("(")[0].strip() for flags in flagged["noise_flags"]
                           for part in str(flags).split(";") if part.strip()]).value_counts()
        bound = [name for name in ("host-bound", "power-capped") if name in kinds]
        paragraph(f"Noise flags: {len(flagged)} of {len(res.ok)} successful rows are flagged ("
                  + ", ".join(f"{name}: {n}" for name, n in kinds.items())
                  + "); they are kept in every figure above, never dropped."
                  + (f" {' and '.join(bound)} say what bound a row (the host, the GPU's power cap), not that it was "
                     "disturbed: a re-measure gives the same, and such rows are judged in every comparison."
                     if bound else ""))
        show_html(f"<details><summary>The {len(flagged)} flagged rows</summary>"
                  + datatable_html(flagged, columns_for(res, {"machine": "machine", "config": "configuration", "repeat": "repeat",
                                         "noise_flags": "flags", "step_time_cv": "step-time CV"}))
                  + "</details>")


@section
def show_references(res: Results) -> None:
    matched = reference_matches(res)
    ref = load_reference()
    columns = columns_for(res, {"machine": "machine", "config": "configuration", "precision": "precision",
                                "ours": "ours (median)", "ours_iqr": "ours (IQR)", "repeats": "repeats",
                                "disturbed": "disturbed repeats (left out)",
                                "published": "published", "published_std": "± (published)", "unit": "unit",
                                "comparison": "ours vs published [95% CI]", "source": "source",
                                "gpu": "published GPU", "published_precision": "published precision",
                                "published_batch_size": "published batch", "note": "note"})
    if not len(matched) or not (matched["disturbed"] > 0).any():
        columns.pop("disturbed", None)  # a column of zeros says nothing
    outside = matched[~matched["own"]] if len(matched) else matched
    if len(outside):
        paragraph("Our repeats beside each published figure for the same GPU, model, mode, precision, input size "
                  "and device count (ours vs published above 1: ours is faster). Where the published figure has a "
                  "spread (mean ± std), the ratio of our geometric mean to it has a 95 % interval: Student's t on "
                  "log scale at our repeats' degrees of freedom, with the published std taken as the uncertainty "
                  "of its mean (its number of iterations is not published, so the interval errs wide). Where it "
                  "is a single number, the ratio is our median over it, with no interval: our IQR shows our own "
                  "spread. An interval covers measurement noise only, not differences of setup (software, data, "
                  "timing method) between theirs and ours; where the figure is defined otherwise than ours (a "
                  "precision name that covers several of ours, another batch), the ratio says so beside it.")
        show_table(outside, columns)
    else:
        devices = sorted(set(device_names(res).values())) or ["none"]
        note(f"No matching reference hardware: these results ran on {', '.join(devices)}; the published figures "
             "are for NVIDIA GPUs (a match needs the same GPU, model, mode, precision, input size and device "
             "count).")
    own = matched[matched["own"]] if len(matched) else matched
    if len(own):
        paragraph("notebook-bench's own earlier runs of the same configurations on the same GPU (gpu/runs/, kept in "
                  "its repository): ours, not outside validation. How far two runs of one kind of GPU agree; never "
                  "a row of this report, which the Machines section compares.")
        show_table(own, {k: v.replace("published", "kept run") for k, v in columns.items()
                         if k not in ("published_std", "published_precision")})
    sources = ref.groupby("source", sort=False)["url_or_citation"].first()
    show_html("<p>Sources: " + "; ".join(f"<strong>{esc(s)}</strong>: {esc(u)}" for s, u in sources.items())
              + " (notebook-bench: our own kept runs, set apart above, never as outside validation).</p>")
    show_html(f"<details><summary>All {len(ref)} published figures (click to open)</summary>"
              + datatable_html(ref, {"source": "source", "gpu": "GPU", "gpus": "GPUs", "model": "model", "mode": "mode",
                                 "precision": "precision", "batch_size": "batch / GPU", "input_shape": "input",
                                 "value": "value", "value_std": "±", "unit": "unit", "note": "note"})
              + "</details>")


@section
def show_failures(res: Results) -> None:
    table = failures_table(res)
    if table.empty:
        note("No failures: every row has status ok." if len(res.rows) else "No rows, so no failures either.")
        return
    counts = table["status"].value_counts()
    paragraph(f"{len(table)} row(s) did not succeed: " + ", ".join(f"{n} {s}" for s, n in counts.items())
              + ". Failures are results: each keeps its status and message.")
    show_table(table, columns_for(res, {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision",
                       "batch_size": "batch", "repeat": "repeat", "status": "status", "message": "message",
                       "run_id": "run id", "result_dir": "result directory"}))


@section
def show_environment(res: Results) -> None:
    table = environment_table(res)
    if table.empty:
        note("No rows, so no environment to show.")
        return
    show_table(table)


@section
def show_method_settings(res: Results) -> None:
    table = method_settings(res)
    if table.empty:
        note("No successful rows: no timing settings to show.")
        return
    paragraph("The settings these results used:")
    show_table(table, {"machine": "machine", "timer": "timer", "warmup_steps": "warm-up steps (untimed)",
                       "min_steps": "min timed steps", "min_seconds": "min timed seconds",
                       "timed_steps": "timed steps that ran", "repeats": "repeats"})
    paragraph("Comparisons (machines, precisions, compile and channels_last, device counts, published "
              "figures): " + METHOD_TEXT)
    paragraph(FIDELITY_TEXT)
    paragraph("Noise flags: a row is flagged, never dropped, when one of these holds. Each flag in the "
              "Efficiency section carries the measured value beside its threshold.")
    show_table(pd.DataFrame(noise.noise_rules()), {"flag": "flag", "threshold": "threshold", "why": "why"})
    paragraph("Peaks (MFU): on a GPU the dense datasheet figure for the precision's tensor cores; on a CPU the "
              "best of a large linear and a 3x3 convolution measured on the precision's own kernel path "
              "(autocast where the workload autocasts). No peak is below the device's fp32 peak: the hardware "
              "can always compute in fp32, so an emulated precision is divided by the fp32 peak. An MFU above 1 "
              "is never shown: the row is flagged instead.")
