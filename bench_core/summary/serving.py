"""The report's Serving section: mode serve rows (bench_core/serving), each load point the median
of its repeats with a 95 % interval across them, in their own units: output tokens/s of the server
against p99 latency, tokens/s per user against tokens/s per GPU, the TTFT and TPOT percentiles of
each point, and the highest load meeting the SLO per machine, engine and model (serving.slo, on
the measured points).

The interval is the Method's: Student's t on the logs of the repeats' values (results.comparison's
t_quantile, CONFIDENCE and usable), exponentiated, so it is an interval of their geometric mean;
with fewer than 2 usable repeats there is none. Repeats flagged as disturbed are counted beside it.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench_core.results.comparison import CONFIDENCE, t_quantile, usable
from bench_core.serving.slo import frontier, highest_meeting
from bench_core.summary.html import absent, columns_for, note, paragraph, section, show_figure, show_table
from bench_core.summary.load import Results
from bench_core.summary.tables import disturbed_marks, flag_disturbed
from bench_core.summary.text import currency_text, is_present, num_text, with_currency

FIGURES = ("requests_per_s", "output_tokens_per_s", "tokens_per_s_per_user", "ttft_ms_p50", "ttft_ms_p90",
           "prefix_cache_hit_rate", "prompt_tokens_mean", "output_tokens_mean", "send_lag_ms_p99",
           "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p90", "tpot_ms_p99", "e2e_ms_p99", "error_rate",
           "request_rate_achieved", "goodput_requests_per_s", "cost_per_million", "energy_j_per_output_token")
# A curve: one server's points under one kind of load, with one request shape (two shapes are two curves) ...
CURVE = ("machine", "engine", "model", "precision", "input_shape", "endpoint", "length_dist", "shared_prefix_len",
         "prompt_file", "trace_file", "burstiness", "turns", "think_time_s", "trace_time_scale", "load_kind")
# ... and a point, one load on it.
POINT = (*CURVE, "load")
# The figures whose spread across repeats the points table shows.
WITH_INTERVAL = ("output_tokens_per_s", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p99")


def interval(values) -> tuple[float, float]:
    """The 95 % t-interval of the repeats' geometric mean (the Method's, on logs); NaN with fewer
    than 2 usable (finite, positive) values."""
    logs = np.log(usable(values))
    if len(logs) < 2:
        return math.nan, math.nan
    half = t_quantile(0.5 + CONFIDENCE / 2, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
    return math.exp(logs.mean() - half), math.exp(logs.mean() + half)


def interval_text(low, high) -> str:
    return f"{num_text(low)} – {num_text(high)}" if is_present(low) and is_present(high) else ""


def serving_points(res: Results) -> pd.DataFrame:
    """One line per measured point (machine, engine, model, shape, load): medians over the ok
    repeats, the 95 % interval of WITH_INTERVAL's figures (<figure>_low, <figure>_high); slo_met
    only when every repeat met it; the repeats and how many were disturbed; the bounds the rows
    were judged by."""
    rows = res.ok
    rows = rows[rows["mode"] == "serve"] if "mode" in rows else rows.iloc[0:0]
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(
        load_kind=["rate" if is_present(r) else "concurrency" for r in rows["request_rate"]],
        load=[float(r) if is_present(r) else float(c) for r, c in zip(rows["request_rate"], rows["concurrency"])],
        engine=rows["engine"].fillna("?"), **{c: None for c in CURVE if c not in rows and c != "load_kind"})
    numeric = {c: pd.to_numeric(rows[c], errors="coerce") for c in FIGURES if c in rows}
    rows = flag_disturbed(rows.assign(**numeric, slo_met=rows["slo_met"].astype(str).str.lower() == "true"))
    grouped = rows.groupby(list(POINT), sort=True, dropna=False)
    table = grouped[[c for c in FIGURES if c in rows]].median()
    for figure in WITH_INTERVAL:
        bounds = [interval(group) for _, group in grouped[figure]] if figure in rows else [(math.nan,) * 2] * len(table)
        table[f"{figure}_low"], table[f"{figure}_high"] = [b[0] for b in bounds], [b[1] for b in bounds]
    for text in ("ttft_ms_p50_by_turn", "currency"):  # words: the first repeat's (a conversation's TTFT by turn)
        if text in rows:
            table[text] = grouped[text].first()
    table["slo_met"] = grouped["slo_met"].all()
    table["repeats"] = grouped.size()
    table["disturbed"] = grouped["_disturbed"].sum()
    for bound in ("slo_ttft_ms", "slo_tpot_ms"):
        table[bound] = grouped[bound].first().astype(float)
    return table.reset_index()


def slo_answers(points: pd.DataFrame) -> pd.DataFrame:
    """Per curve (machine, engine, model, request shape, load kind): the highest load meeting the SLO."""
    lines = []
    for key, group in points.groupby(list(CURVE), sort=True, dropna=False):
        records = [{**p, "request_rate": p["load"] if p["load_kind"] == "rate" else None,
                    "concurrency": int(p["load"]) if p["load_kind"] == "concurrency" else None}
                   for p in group.to_dict("records")]
        answer = highest_meeting(records)
        ttft, tpot = group["slo_ttft_ms"].iloc[0], group["slo_tpot_ms"].iloc[0]
        best = answer.best or {}
        lines.append({**dict(zip(CURVE, key)), "curve": group["curve"].iloc[0] if "curve" in group else "",
                      "headline": answer.headline(ttft, tpot),
                      "cost_per_million": best.get("cost_per_million"),
                      "energy_j_per_output_token": best.get("energy_j_per_output_token")})
    return pd.DataFrame(lines)


def curve_labels(points: pd.DataFrame) -> list[str]:
    """Each point's curve in words: engine, model and load kind, and whatever else tells its curve from
    another here (precision, the request shape, the machine): two request shapes are never one line."""
    varying = [c for c in CURVE if c not in ("engine", "model", "load_kind")
               and (c == "input_shape" or points[c].nunique(dropna=False) > 1)]

    def text(row: dict) -> str:
        shape = [str(row[c]) if c in ("machine", "precision", "input_shape") else f"{c}={row[c]}"
                 for c in varying if is_present(row[c]) and c != "machine"]
        where = f" · {row['machine']}" if "machine" in varying else ""
        return f"{row['engine']} {row['model']} ({row['load_kind']})" + "".join(f", {s}" for s in shape) + where
    return [text(r) for r in points.to_dict("records")]


@section
def show_serving(res: Results) -> None:
    points = serving_points(res)
    if points.empty:
        absent("No serving rows (mode serve): params/serving.yaml, or bench run --mode serve, fills this section.")
        return
    points = points.assign(curve=curve_labels(points))
    if points.groupby("curve").size().max() >= 2:
        draw_curves(points)
        show_frontier(points, res)
    else:  # a chart of one point compares nothing: its figures are in the tables below
        note("One load measured per engine and model: its figures are in the tables below. Two or more loads "
             "(bench ladder, or params/serving.yaml) draw throughput against latency and the frontier.")
    answers = slo_answers(points)
    paragraph("The highest measured load meeting the SLO (no failed request, p99 TTFT and p99 TPOT within the "
              "bounds; default bounds: MLPerf Inference, Llama-3.1-8B interactive, 500 ms / 30 ms). The search "
              "stops at the first load that misses: the next higher point measured does not meet it.")
    show_table(answers, columns_for(res, {"curve": "server, model, load and request",
                                          "headline": "highest load meeting the SLO",
                                          "cost_per_million": with_currency("cost per million output tokens",
                                                                            points),
                                          "energy_j_per_output_token": "J per output token"}))
    paragraph(f"Each point: the median of its repeats, and for output tokens/s, TTFT and TPOT the "
              f"{CONFIDENCE * 100:.0f} % interval across them (Student's t on the logs of the repeats' values, as the "
              "Method section compares throughputs; none with one repeat). A wide interval says the repeats "
              "disagree: measure more of them, on a quiet machine.")
    points = points.assign(
        disturbed_repeats=disturbed_marks(points),
        **{f"{f}_ci": [interval_text(lo, hi) for lo, hi in zip(points[f"{f}_low"], points[f"{f}_high"])]
           for f in WITH_INTERVAL})
    ci = f"{CONFIDENCE * 100:.0f} % interval"
    show_table(points, columns_for(res, {
        "curve": "server, model, load and request", "load_kind": "load",
        "load": "rate / users", "requests_per_s": "requests/s", "request_rate_achieved": "rate achieved",
        "output_tokens_per_s": "output tokens/s", "output_tokens_per_s_ci": f"output tokens/s, {ci}",
        "tokens_per_s_per_user": "tokens/s per user", "ttft_ms_p50": "TTFT p50 ms", "ttft_ms_p50_ci": f"TTFT p50, {ci}",
        "ttft_ms_p99": "TTFT p99 ms", "ttft_ms_p99_ci": f"TTFT p99, {ci}", "tpot_ms_p50": "TPOT p50 ms",
        "tpot_ms_p99": "TPOT p99 ms", "tpot_ms_p99_ci": f"TPOT p99, {ci}", "e2e_ms_p99": "e2e p99 ms",
        "error_rate": "error rate", "prompt_tokens_mean": "prompt tokens (mean)",
        "output_tokens_mean": "output tokens (mean)", "send_lag_ms_p99": "sent late p99 ms",
        "prefix_cache_hit_rate": "prefix-cache hit rate", "ttft_ms_p50_by_turn": "TTFT p50 by turn, ms",
        "goodput_requests_per_s": "goodput requests/s", "energy_j_per_output_token": "J per output token",
        "slo_met": "SLO met", "repeats": "repeats", "disturbed_repeats": "disturbed repeats"}))


def draw_curves(points: pd.DataFrame) -> None:
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(13.5, 4.0))
    for label, group in points.groupby("curve", sort=True):
        group = group.sort_values("load")
        axes[0].plot(group["output_tokens_per_s"], group["ttft_ms_p99"], marker="o", label=label)
        axes[1].plot(group["output_tokens_per_s"], group["tpot_ms_p99"], marker="o", label=label)
        axes[2].plot(group["output_tokens_per_s"], group["tokens_per_s_per_user"], marker="o", label=label)
    ttft, tpot = points["slo_ttft_ms"].iloc[0], points["slo_tpot_ms"].iloc[0]
    axes[0].axhline(ttft, color="grey", linestyle="--", label=f"SLO {num_text(ttft)} ms")
    axes[1].axhline(tpot, color="grey", linestyle="--", label=f"SLO {num_text(tpot)} ms")
    axes[0].set(xlabel="output tokens/s (server)", ylabel="p99 TTFT, ms", title="Throughput against p99 TTFT")
    axes[1].set(xlabel="output tokens/s (server)", ylabel="p99 TPOT, ms", title="Throughput against p99 TPOT")
    axes[2].set(xlabel="output tokens/s per GPU (one server)", ylabel="output tokens/s per user",
                title="Per user against per GPU")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    show_figure(fig, "Serving: output tokens/s against p99 TTFT and p99 TPOT, and tokens/s per user against "
                     "tokens/s per GPU, one curve per engine, model and load kind")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, metric in zip(axes, ("ttft", "tpot")):
        for label, group in points.groupby("curve", sort=True):
            group = group.sort_values("load")
            for p, style in ((50, "-"), (90, "--"), (99, ":")):
                ax.plot(group["load"], group[f"{metric}_ms_p{p}"], linestyle=style, marker="o",
                        label=f"{label} p{p}")
        ax.set(xlabel="load (requests/s, or concurrent users)", ylabel=f"{metric.upper()}, ms",
               title=f"{metric.upper()} p50 / p90 / p99 at each load")
        ax.legend(fontsize=6)
    fig.tight_layout()
    show_figure(fig, "TTFT and TPOT percentiles (p50, p90, p99) against the load")


def frontier_points(points: pd.DataFrame) -> pd.DataFrame:
    """Per machine, engine, model and traffic: the points on the Pareto frontier of output tokens/s (one server,
    per GPU) against tokens/s per user, in increasing tokens/s per user (serving.slo.frontier)."""
    lines = []
    for _, group in points.groupby([c for c in CURVE if c != "load_kind"], sort=True, dropna=False):
        lines += frontier([p for p in group.to_dict("records") if is_present(p.get("tokens_per_s_per_user"))
                           and is_present(p.get("output_tokens_per_s"))])
    return pd.DataFrame(lines)


def show_frontier(points: pd.DataFrame, res: Results) -> None:
    import matplotlib.pyplot as plt
    front = frontier_points(points)
    if len(front) < 2:
        note("No throughput / interactivity frontier: it needs two or more points of one served model and traffic "
             "(bench ladder measures them).")
        return
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for label, group in points.groupby("curve", sort=True):
        ax.scatter(group["tokens_per_s_per_user"], group["output_tokens_per_s"], alpha=0.35, label=f"{label}: points")
    for label, group in front.groupby("curve", sort=True):
        ax.plot(group["tokens_per_s_per_user"], group["output_tokens_per_s"], marker="o", label=f"{label}: frontier")
        for p in group.to_dict("records"):
            cost = f", {num_text(p['cost_per_million'])}/M" if is_present(p.get("cost_per_million")) else ""
            ax.annotate(f"{p['load_kind'][0]}={num_text(p['load'])}{cost}", (p["tokens_per_s_per_user"],
                        p["output_tokens_per_s"]), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set(xlabel="interactivity: output tokens/s per user", ylabel="throughput: output tokens/s per GPU (one server)",
           title="Throughput against interactivity: the frontier")
    ax.legend(fontsize=7)
    fig.tight_layout()
    show_figure(fig, "The throughput / interactivity frontier: output tokens/s per GPU against tokens/s per user, "
                     "each point labelled with its load (c = users, r = requests/s) and its cost per million output "
                     "tokens where price_per_hour was given")
    paragraph("The frontier: the measured points that no other point of the same model and traffic beats in both "
              "output tokens/s per GPU and tokens/s per user (InferenceX's chart; vLLM's plot_pareto). Left of it, "
              "a server is fast for each user and idle in between; right along it, it serves more at a cost in each "
              f"user's speed. The cost per million output tokens is in {currency_text(front) or 'no currency'}; a server "
              "of several GPUs counts as one here (its rows do not say how many).")
    show_table(front, columns_for(res, {"curve": "server, model, load and request", "load_kind": "load",
                                        "load": "rate / users",
                                        "tokens_per_s_per_user": "tokens/s per user",
                                        "output_tokens_per_s": "output tokens/s per GPU", "ttft_ms_p99": "TTFT p99 ms",
                                        "cost_per_million": with_currency("cost per million output tokens", front)}))
