"""The report's section on sequence workloads (rows in tokens/s: text models, and speech models'
generation): tokens/s and MFU by model and precision, the formula's FLOPs beside the counted ones;
and for generate, decode tokens/s against batch size beside time to first token, the
latency/throughput trade-off that decides how to serve.
"""
from __future__ import annotations

import pandas as pd

from bench_core.summary.charts import zero_axis
from bench_core.summary.html import (
    absent,
    columns_for,
    label_columns,
    paragraph,
    seaborn,
    section,
    show_figure,
    show_table,
    sort_table,
)
from bench_core.summary.load import WORKLOAD, Results
from bench_core.summary.tables import disturbed_marks, flag_disturbed
from bench_core.summary.text import num_text, wrap_text

TOKENS = "tokens/s"
GENERATE = "generate"
FRAMEWORK_NOTE = ("Generation figures are framework-level: transformers' eager generate (greedy, dynamic KV cache, "
                  "one batch of equal-length prompts, no request scheduling), as a training or research loop calls "
                  "it; they are not a serving engine's numbers (vLLM, TensorRT-LLM or TGI batch and page their "
                  "caches differently).")


def sequence_table(res: Results) -> pd.DataFrame:
    """Median per configuration of the token rates, MFU and both FLOP figures, rows in tokens/s only."""
    ok = res.ok[res.ok["throughput_unit"] == TOKENS]
    if ok.empty:
        return pd.DataFrame()
    first = lambda s: next((v for v in s if isinstance(v, str) and v), None)  # noqa: E731
    table = flag_disturbed(ok).groupby(["machine", *WORKLOAD], dropna=False, sort=False).agg(
        repeats=("throughput", "count"), disturbed=("_disturbed", "sum"), tokens_per_s=("tokens_per_s", "median"),
        sequences_per_s=("samples_per_s", "median"), mfu=("mfu", "median"),
        flops_per_sample=("flops_per_sample", "median"), flops_counted=("flops_per_sample_counted", "median"),
        flops_method=("flops_method", first), params_count=("params_count", "median"),
        attention=("attention_kernel", first), attn_implementation=("attn_implementation", first)).reset_index()
    table["flops"] = [("formula" if str(m).startswith("formula") else "counted") if isinstance(m, str) else ""
                      for m in table["flops_method"]]
    # Only a formula has a counted figure to agree with: a counted row's own ratio (1) would say nothing.
    table["formula_vs_counted"] = (table["flops_per_sample"] / table["flops_counted"]).where(table["flops"] == "formula")
    return sort_table(table)


def generation_table(res: Results) -> pd.DataFrame:
    """Generate rows per configuration: time to first token, decode rate, inter-token latency, memory."""
    ok = res.ok[res.ok["mode"] == GENERATE]
    if ok.empty:
        return pd.DataFrame()
    memory = ok["peak_mem_allocated_bytes"].fillna(ok["peak_rss_bytes"]) / 2**20
    table = flag_disturbed(ok).assign(_memory_mib=memory, _kv_mib=ok["kv_cache_bytes"] / 2**20).groupby(
        ["machine", *WORKLOAD], dropna=False, sort=False).agg(
        repeats=("throughput", "count"), disturbed=("_disturbed", "sum"),  # (prompt_len, new_tokens: in WORKLOAD)
        ttft_ms=("ttft_ms_median", "median"), ttft_ms_p95=("ttft_ms_p95", "median"),
        decode_tokens_per_s=("decode_tokens_per_s", "median"), itl_ms=("itl_ms_median", "median"),
        itl_ms_p95=("itl_ms_p95", "median"), tokens_per_s=("tokens_per_s", "median"),
        prefill_tokens_per_s=("prefill_tokens_per_s", "median"), audio_s_per_s=("audio_s_per_s", "median"),
        kv_cache_mib=("_kv_mib", "median"),
        peak_memory_mib=("_memory_mib", "median")).reset_index()
    return sort_table(table)


@section
def show_sequences(res: Results) -> None:
    table = sequence_table(res)
    if table.empty:
        absent("No sequence workload here (text models: bench models lists them; params/transformers.yaml runs some).")
        return
    show_table(table, columns_for(res, {
        "machine": "machine", "model": "model", "mode": "mode", "precision": "precision", "batch_size": "batch / device",
        "input_shape": "input", "world_size": "devices", "tokens_per_s": "tokens/s (median)",
        "sequences_per_s": "sequences/s", "mfu": "MFU", "flops": "MFU's FLOPs", "formula_vs_counted":
        "formula / counted FLOPs", "attention": "attention kernel", "repeats": "repeats", **marks(table)}))
    paragraph("MFU divides the standard transformer FLOPs (6N + 12·L·H·Q·T per trained token, 2N + 4·L·H·Q·T per "
              "forward token, PaLM appendix B, with N the parameters that multiply) by the time and the peak; the "
              "FLOP counter's figure for the same step stands beside it (formula / counted near 1: the two agree). "
              "Where no formula applies (an encoder-decoder's generation, a speech model) MFU divides the counted FLOPs.")
    generation = generation_table(res)
    if generation.empty:
        return
    sizes = generation.groupby(["machine", "model", "precision"], dropna=False)["batch_size"].nunique()
    if (sizes >= 2).any():  # a trade-off needs two batch sizes of one model at least
        show_generation_chart(generation)
    show_table(generation, columns_for(res, {
        "machine": "machine", "model": "model", "precision": "precision", "batch_size": "batch / device",
        "input_shape": "input", "ttft_ms": "time to first token, ms (median)", "ttft_ms_p95": "TTFT p95, ms",
        "decode_tokens_per_s": "decode tokens/s", "itl_ms": "inter-token latency, ms (median)",
        "itl_ms_p95": "ITL p95, ms", "tokens_per_s": "output tokens/s", "prefill_tokens_per_s": "prefill tokens/s",
        **({"audio_s_per_s": "audio s/s (speech: whole transcriptions)"} if generation["audio_s_per_s"].notna().any()
           else {}),
        "kv_cache_mib": "KV cache MiB", "peak_memory_mib": "peak memory MiB", "repeats": "repeats",
        **marks(generation)}))
    paragraph(FRAMEWORK_NOTE)


def marks(table: pd.DataFrame) -> dict:
    """The disturbed-repeats column ('⚠ 2 of 3') where a configuration has flagged repeats: set on `table`,
    and its header for show_table (none when nothing was flagged)."""
    if not table["disturbed"].any():
        return {}
    table["disturbed_text"] = disturbed_marks(table)
    return {"disturbed_text": "disturbed repeats"}


def show_generation_chart(table: pd.DataFrame) -> None:
    """Decode tokens/s (left) and time to first token (right) against batch size, a line per model."""
    import matplotlib.pyplot as plt
    sns = seaborn()
    several = table["machine"].nunique() > 1
    table = table.assign(curve=[label + (f" · {m}" if several else "") for label, m in
                                zip(label_columns(table, always=("precision",), never=("batch_size",)),
                                    table["machine"])])
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.9))
    for ax, metric, label in ((axes[0], "decode_tokens_per_s", "decode tokens/s (median)"),
                              (axes[1], "ttft_ms", "time to first token, ms (median)")):
        sns.lineplot(data=table, x="batch_size", y=metric, hue="curve", marker="o", ax=ax)
        sizes = sorted(table["batch_size"].dropna().unique())
        if len(sizes) > 1:
            ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [num_text(v) for v in sizes])
        ax.minorticks_off()
        zero_axis(ax.yaxis, table[metric])
        ax.set(xlabel="batch size (sequences per device)", ylabel=label, title=wrap_text(label, 60))
        ax.legend(fontsize=9)
    fig.suptitle("Serving trade-off: a larger batch decodes more tokens per second and waits longer for the "
                 "first one", y=1.02)
    fig.tight_layout()
    show_figure(fig, "Decode tokens/s and time to first token against batch size, per model and precision")
