"""The report's sections on speed: headline, relative speed, throughput, AMP, compile and channels_last,
batch size, memory. Every comparison states its 95 % interval and verdict (summary.effects).
"""
from __future__ import annotations

import pandas as pd

from bench_core.results.disturbed import disturbances
from bench_core.results.comparison import DISTURBED
from bench_core.summary.charts import can_compare, category_chart, zero_axis
from bench_core.summary.effects import float8_notes, settings_effects
from bench_core.summary.html import (
    absent,
    chart_rows,
    columns_for,
    drop_constant,
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
    with_varying,
)
from bench_core.summary.load import MODE_ORDER, PRECISION_ORDER, Results
from bench_core.summary.memory_table import show_estimates
from bench_core.summary.ratio_chart import show_ratio_chart
from bench_core.summary.tables import (
    DISTURBED_MARK,
    DISTURBED_WHY,
    KNEE_FRACTION,
    amp_speedup_table,
    batch_curves,
    disturbed_marks,
    emulation_notes,
    headline_table,
    knee_points,
    marked,
    relative_speed,
)
from bench_core.summary.text import num_text, short_list, sig_text, wrap_text


@section
def show_headline(res: Results) -> None:
    table = headline_table(res)
    if table.empty:
        note("No successful rows: nothing to summarise (see Failures for what went wrong)." if len(res.rows) else
             "No result rows: nothing to summarise (see Overview for what was read).")
        return
    table["IQR of repeats"] = [f"{sig_text(a)} – {sig_text(b)}" for a, b in zip(table["q25"], table["q75"])]
    # A precision this machine only emulates is named so beside its figures (emulation_notes say why).
    table["precision"] = [f"{p} (emulated)" if e else p for p, e in zip(table["precision"], table["emulated"])]
    table["disturbed_text"] = disturbed_marks(table)
    units = list(dict.fromkeys(table["throughput_unit"]))
    if len(units) > 1:
        paragraph(f"One table per unit ({', '.join(units)}): a sort never puts one unit's numbers among another's.")
    for unit in units:
        part = table[table["throughput_unit"] == unit].copy()
        for name in ("batch_size", "world_size", "repeats"):  # counts: whole numbers, not 3 significant figures
            if part[name].notna().all() and (part[name] % 1 == 0).all():
                part[name] = part[name].astype("int64")
        # samples/s beside throughput only where they differ (text: sequences/s beside tokens/s)
        samples = [u for u in dict.fromkeys(part["sample_unit"].dropna()) if u != unit]
        samples_header = f"{samples[0]} (median)" if len(samples) == 1 else "samples/s (median)"
        if not samples:
            part["samples_per_s"] = float("nan")
        columns = {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision",
                   "batch_size": "batch", "load": "load", "input_shape": "input", "world_size": "devices",
                   "compile": "compile", "channels_last": "channels_last"}
        columns = {**with_varying(part, columns), "throughput": f"{unit} (median)",
                   "IQR of repeats": "IQR of repeats", "samples_per_s": samples_header,
                   "step_time_ms": "step ms (median)", "mvox_per_s": "MVox/s",
                   "images_per_s": "images/s at its denoising steps", "peak_memory_mib": "torch peak MiB",
                   "repeats": "repeats", "disturbed_text": "disturbed repeats"}
        if not part["disturbed"].any():
            columns.pop("disturbed_text")
        shown = drop_constant(part.drop(columns=["mpx_per_s"]), columns, keep=("model", "mode", "precision",
                                                                               "batch_size"))
        if len(units) > 1:
            paragraph(f"In {unit} ({len(part)} configuration{'' if len(part) == 1 else 's'}):")
        show_table(shown, columns, number_text=sig_text, every_row=True)
    disturbed = table[table["disturbed"] > 0]
    if len(disturbed):
        note(f"{DISTURBED_MARK} n of m: n of the configuration's m repeats were flagged as disturbed ({DISTURBED_WHY}); "
             f"{len(disturbed)} of {len(table)} configurations have such repeats. Their medians include them: "
             "re-measure them on a quiet machine. Each flag is listed under Efficiency.")
    searched = res.rows[(res.rows["status"] == "ok") & res.rows["batch_searched"]]
    for _, row in searched.drop_duplicates(["machine", "config"]).iterrows():
        note(f"{row['config']} on {row['machine']}: batch_size max, {row.get('batch_search') or 'found by search'}")
    failed = res.rows[res.rows["status"] != "ok"]["config"].nunique()
    if failed:
        note(f"{failed} configuration(s) have rows that did not succeed: see Failures.")


@section
def show_relative_speed(res: Results, baseline: str | None = None) -> None:
    table, per_machine, chosen, why = relative_speed(res, baseline)
    if res.ok["machine"].nunique() < 2:
        absent(f"One machine only ({chosen or 'none'}): add another machine's result directory "
               "(bench report DIR_A DIR_B) to compare them here." if chosen else "No successful rows to compare.")
        return
    items = "".join(f"<li><strong>{esc(r['machine'])}</strong>: {esc(r['summary'])}.</li>"
                    for r in per_machine.to_dict("records"))
    items = items or "<li>No configuration ran on both the baseline and another machine.</li>"
    show_html(f"<p>Baseline: <strong>{esc(chosen)}</strong> ({esc(why)}). Each ratio is a machine's throughput "
              "over the baseline's for the same configuration (above 1: faster), with its 95 % interval from the "
              "repeats of both; the verdict and the interval are explained under Method. Against the baseline:</p>"
              f"<ul>{items}</ul>")
    if table.empty:
        return
    several = table["machine"].nunique() > 1
    show_ratio_chart(table, [f"{c} · {m}" if several else c for c, m in zip(table["config"], table["machine"])],
                     "Throughput relative to the baseline: ratio and 95 % interval",
                     "Point chart: each machine's throughput over the baseline's per configuration, with intervals",
                     xlabel="× the baseline's throughput (log scale; above 1 is faster)")
    few_repeats_note(table, "config")
    show_per_unit(table, {"config": "configuration", "machine": "machine", "baseline_median": "baseline, {unit}",
                          "median": "this machine, {unit}", "text": "× baseline [95% CI], verdict",
                          "baseline_repeats": "baseline repeats", "repeats_text": "repeats"})


def show_per_unit(table: pd.DataFrame, columns: dict[str, str]) -> None:
    """One table per throughput unit ('{unit}' in a header becomes it): figures in different units
    never share a sorted column."""
    units = list(dict.fromkeys(table["throughput_unit"]))
    for unit in units:
        part = table[table["throughput_unit"] == unit]
        if len(units) > 1:
            paragraph(f"In {unit} ({len(part)} comparison{'' if len(part) == 1 else 's'}):")
        show_table(part, {k: v.format(unit=unit) for k, v in columns.items()}, number_text=sig_text)  # as the Headline


def few_repeats_note(table: pd.DataFrame, label: str) -> None:
    """Name the comparisons drawn hollow (a ratio without an interval is not a finding) and those not
    judged because their repeats were disturbed."""
    few = table[table["verdict"] == "too few repeats"]
    if len(few) == len(table):
        note("Too few repeats for an interval in every comparison here (hollow markers): each side needs at least "
             "2 repeats, so these ratios are not findings.")
    elif len(few):
        note(f"Too few repeats for an interval (hollow markers; each side needs at least 2 repeats): "
             f"{short_list(dict.fromkeys(few[label]))}.")
    disturbed = table[table["verdict"] == DISTURBED]
    if len(disturbed):  # left out of the chart: their repeats were disturbed, so there is nothing to judge
        note(f"Disturbed, re-measure (not judged, not drawn: too few repeats left once those flagged as disturbed "
             f"were left out; see Method): {short_list(dict.fromkeys(disturbed[label]))}.")


@section
def show_throughput(res: Results) -> None:
    data, caveat = chart_rows(res.ok)
    if data.empty:
        absent("No successful rows: no throughput chart.")
        return
    units = list(dict.fromkeys(data["throughput_unit"]))
    if len(units) > 1:
        note(f"One chart per unit ({', '.join(units)}): throughputs in different units never share an axis.")
    for unit in units:
        throughput_chart(data[data["throughput_unit"] == unit], unit)
    if caveat:
        note(caveat)


def throughput_chart(data, unit: str) -> None:
    """Median throughput by model and precision, one panel per mode, in one unit; a figure with
    disturbed repeats carries DISTURBED_MARK."""
    several = data["machine"].nunique() > 1
    hue = "machine" if several else "precision"
    data = data.assign(_disturbed=[bool(disturbances(v)) for v in data["noise_flags"]],
                       panel=[f"{p} · {m}" if several else m for p, m in zip(data["precision"], data["mode"])])
    table = data.groupby(["panel", "label", hue], dropna=False, sort=False).agg(
        value=("throughput", "median"), low=("throughput", lambda s: s.quantile(0.25)),
        high=("throughput", lambda s: s.quantile(0.75)), marked=("_disturbed", "any")).reset_index()
    if not can_compare(table["value"]):
        absent(f"One figure in {unit}, nothing to compare it with in a chart: it is in the Headline table "
               "(a sweep of two or more configurations draws it).")
        return
    modes = ordered(data["mode"], MODE_ORDER)
    panels = [f"{p} · {m}" for p in ordered(data["precision"], PRECISION_ORDER) for m in modes] if several else modes
    category_chart(table.rename(columns={hue: "hue"}), panels,
                   ordered(data[hue], PRECISION_ORDER if hue == "precision" else None),
                   f"{unit} (log scale)", f"Throughput in {unit}: median of repeats, bar = interquartile range",
                   f"Throughput in {unit} by model and precision, log scale" + disturbed_alt(int(table["marked"].sum())),
                   mark_legend=f"{DISTURBED_MARK} repeats flagged as disturbed: re-measure")


def disturbed_alt(count: int) -> str:
    """What a chart's marks say, for its text alternative."""
    if not count:
        return ""
    return f"; {DISTURBED_MARK} marks {count} figure{'' if count == 1 else 's'} with repeats flagged as disturbed"


@section
def show_amp_speedup(res: Results) -> None:
    table = amp_speedup_table(res)
    if table.empty:
        skipped = " ".join(emulation_notes(res, table))  # why the sweep ran no reduced precision here, if it said
        absent("No AMP speed-up: it needs fp32 and a reduced precision (amp-fp16, amp-bf16, fp16, bf16, tf32) "
               "of the same workload on the same machine." + (f" {skipped}" if skipped else ""))
        return
    several = table["machine"].nunique() > 1
    best = table["batches"] != "the same"
    table = table.assign(label=[f"{w}{' (each at its best)' if b else ''}" + (f" · {m}" if several else "")
                                for w, m, b in zip(label_columns(table, always=("mode", "precision")),
                                                   table["machine"], best)])
    if best.any():
        paragraph("Where a precision ran at another batch or layout than fp32 (each the largest batch it fits, as "
                  "lambdal measures them), it is also compared at its own best against fp32 at fp32's best: the "
                  "highest median throughput each ran at, said in 'compared at'. That answers 'how much faster is "
                  "it, each run as well as it runs', not the speed-up of the precision alone at one batch.")
    show_ratio_chart(table, list(table["label"]), "Speed-up of each reduced precision over fp32: ratio and 95 % interval",
                     "Point chart: speed-up of each reduced precision over fp32, with intervals",
                     xlabel="speed-up over fp32 (log scale; above 1 is faster)")
    few_repeats_note(table, "label")
    show_per_unit(table, columns_for(res, {"machine": "machine", "model": "model", "mode": "mode",
                                           "precision": "precision", "batch_size": "batch", "input_shape": "input",
                                           "world_size": "devices", "batches": "compared at",
                                           "fp32": "fp32, {unit} (median)",
                                           "throughput": "this precision, {unit} (median)",
                                           "text": "speed-up over fp32 [95% CI], verdict",
                                           "baseline_repeats": "fp32 repeats", "repeats_text": "repeats"}))
    for line in emulation_notes(res, table):
        paragraph(line)


@section
def show_settings_effects(res: Results) -> None:
    table = settings_effects(res)
    notes = float8_notes(res)  # an fp8 row not compared, or run eager: said whether or not a table follows
    if table.empty:
        absent("No torch.compile, channels_last or float8 comparison: no workload here ran both with and without "
               "compile, both with and without channels_last, or in fp8 and amp-bf16 with one compile setting, on "
               "the same machine (a sweep grid with compile: [off, default] or channels_last: [false, true] gives "
               "one).")
        for line in notes:
            paragraph(line)
        return
    several = table["machine"].nunique() > 1
    other = [(" channels_last" if cl is True else "") if s.startswith("compile") else
             (f" compile={c}" if c != "off" else "") for s, c, cl in
             zip(table["setting"], table["compile"], table["channels_last"])]
    workload = label_columns(table, always=("mode", "precision"), never=("compile", "channels_last"))
    table = table.assign(workload=[w + o + (f" · {m}" if several else "")
                                   for w, o, m in zip(workload, other, table["machine"])])
    if len(table) > 3:
        show_ratio_chart(table, [f"{s}: {w}" for s, w in zip(table["setting"], table["workload"])],
                         "With the setting over without: ratio and 95 % interval",
                         "Point chart: throughput with torch.compile or channels_last over without, with intervals",
                         xlabel="× the throughput without the setting (log scale; above 1 is faster)")
    few_repeats_note(table, "workload")
    show_table(table, {"setting": "setting", "workload": "workload", "baseline_median": "without (median samples/s)",
                       "median": "with (median samples/s)", "text": "with / without [95% CI], verdict",
                       "n_baseline": "repeats without", "n_candidate": "repeats with"})
    for line in notes:
        paragraph(line)


@section
def show_batch_curves(res: Results) -> None:
    import matplotlib.pyplot as plt
    sns = seaborn()
    curves = batch_curves(res)
    if curves.empty:
        absent("No batch-size curve: no workload ran at two or more batch sizes (params/batch-sweep.yaml does).")
        return
    knees = knee_points(curves)
    paragraph(f"The knee (★) is the smallest batch size whose median throughput reaches "
              f"{KNEE_FRACTION:.0%} of the best throughput on that curve: past it, a larger batch buys little "
              "speed and costs memory and step time.")
    curves = curves.assign(curve=label_columns(curves, always=("precision",), never=("batch_size",)))
    hit = curves.groupby("curve")["disturbed"].transform("sum") > 0  # a curve resting on disturbed repeats: marked
    curves = curves.assign(curve=[marked(c, d) for c, d in zip(curves["curve"], hit)])
    knees = knees.assign(curve=label_columns(knees, always=("precision",)), disturbed_text=disturbed_marks(knees))
    several = curves["machine"].nunique() > 1
    # A panel per machine, mode and unit: throughputs in different units never share an axis.
    panels = [(m, mode, unit) for m in dict.fromkeys(curves["machine"]) for mode in ordered(curves["mode"], MODE_ORDER)
              for unit in dict.fromkeys(curves["throughput_unit"])
              if ((curves["machine"] == m) & (curves["mode"] == mode) & (curves["throughput_unit"] == unit)).any()]
    fig, axes = plt.subplots(len(panels), 2, figsize=(11, 3.7 * len(panels)), squeeze=False)
    for i, (machine, mode, unit) in enumerate(panels):
        here = (curves["machine"] == machine) & (curves["mode"] == mode) & (curves["throughput_unit"] == unit)
        part = curves[here]
        k = knees[(knees["machine"] == machine) & (knees["mode"] == mode) & (knees["throughput_unit"] == unit)]
        metrics = (("throughput", "knee_throughput", f"{unit} (median)"),
                   ("step_time_ms", "knee_step_time_ms", "step time, ms (median)"))
        for j, (metric, knee_metric, ylabel) in enumerate(metrics):
            ax = axes[i][j]
            sns.lineplot(data=part, x="batch_size", y=metric, hue="curve", marker="o", ax=ax)
            ax.scatter(k["knee_batch_size"], k[knee_metric], marker="*", s=260, color="black", zorder=5,
                       label=f"knee ({KNEE_FRACTION:.0%} of best)")
            ax.set_xscale("log", base=2)
            sizes = sorted(part["batch_size"].dropna().unique())
            ax.set_xticks(sizes, [num_text(v) for v in sizes])
            ax.minorticks_off()
            zero_axis(ax.yaxis, part[metric])  # from zero: a flat curve looks flat
            ax.set(xlabel="batch size per device (log scale)", ylabel=ylabel,
                   title=wrap_text(f"{mode} · {machine}" if several else mode, 60))
            ax.legend(fontsize=9)
    fig.tight_layout()
    show_figure(fig, "Throughput and step time against batch size; the knee is marked with a star")
    show_table(knees, columns_for(res, {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision",
                       "input_shape": "input", "world_size": "devices", "batch_sizes": "batch sizes tried",
                       "knee_batch_size": "knee batch", "knee_throughput": "throughput at knee",
                       "knee_step_time_ms": "step ms at knee", "best_batch_size": "best batch",
                       "best_throughput": "best throughput", "throughput_unit": "unit",
                       **({"disturbed_text": "disturbed repeats"} if knees["disturbed"].any() else {})}))
    if knees["disturbed"].any():
        note(f"{DISTURBED_MARK} n of m: n of the curve's m repeats were flagged as disturbed ({DISTURBED_WHY}): "
             "its medians include them; re-measure on a quiet machine.")


@section
def show_memory(res: Results) -> None:
    data, caveat = chart_rows(res.ok)
    if data.empty:
        absent("No successful rows: no memory chart.")
        return
    show_estimates(res.ok)
    # torch's peak allocated only: a CPU process's peak RSS spans its whole life, the same for train
    # and infer and for every configuration the process ran before, so a chart of it compares nothing.
    data = data.assign(memory_mib=data["peak_mem_allocated_bytes"] / 2**20).dropna(subset=["memory_mib"])
    if (res.ok["device_type"] != "cuda").any():
        absent("No memory chart for CPU rows: the figure there is the peak resident memory (RSS) of the process over "
             "its whole life, the same for train and infer and for every configuration the process ran before; it "
             "is in results.csv (peak_rss_bytes), not compared here.")
    if data.empty:
        return
    several = data["machine"].nunique() > 1
    hue = "machine" if several else "precision"
    data = data.assign(panel=[f"{p} · {m}" if several else m for p, m in zip(data["precision"], data["mode"])])
    table = data.groupby(["panel", "label", hue], dropna=False, sort=False).agg(
        value=("memory_mib", "median")).reset_index()
    if not can_compare(table["value"]):
        return
    modes = ordered(data["mode"], MODE_ORDER)
    panels = [f"{p} · {m}" for p in ordered(data["precision"], PRECISION_ORDER) for m in modes] if several else modes
    category_chart(table.rename(columns={hue: "hue"}), panels,
                   ordered(data[hue], PRECISION_ORDER if hue == "precision" else None), "torch peak allocated, MiB",
                   "Peak memory: torch's peak allocated during the run (median of repeats)",
                   "Peak memory by model and precision", kind="bar")
    note("The figure is torch's peak allocated memory during the run (reserved and device-used memory are in "
         "results.csv).")
    if caveat:
        note(caveat)
