"""The report's Memory table: what each configuration was estimated to need before its model was built
(`bench memory`, a row's mem_estimate_bytes) beside the peak measured on a GPU.
"""
from __future__ import annotations

import pandas as pd

from bench_core.summary.html import drop_constant, note, paragraph, show_table
from bench_core.summary.text import sig_text


def estimate_table(ok: pd.DataFrame) -> pd.DataFrame:
    """Each configuration's memory estimate, said before its model was built (bench memory), beside the peak
    measured on a GPU (torch's peak allocated; a CPU has no per-configuration peak) and measured / estimate."""
    if "mem_estimate_bytes" not in ok or ok["mem_estimate_bytes"].isna().all():
        return pd.DataFrame()
    rows = ok.dropna(subset=["mem_estimate_bytes"])
    number = lambda name: pd.to_numeric(rows[name], errors="coerce") if name in rows else \
        pd.Series(float("nan"), index=rows.index)  # noqa: E731
    rows = rows.assign(estimate_gib=number("mem_estimate_bytes") / 2**30,
                       peak_gib=number("peak_mem_allocated_bytes").where(rows["device_type"] == "cuda") / 2**30)
    keys = ["machine", "model", "mode", "precision", "batch_size", "parallelism", "world_size"]
    table = rows.groupby([k for k in keys if k in rows], dropna=False, sort=False).agg(
        estimate_gib=("estimate_gib", "median"), peak_gib=("peak_gib", "median"),
        how=("mem_estimate", "first")).reset_index()
    return table.assign(ratio=table["peak_gib"] / table["estimate_gib"])


def show_estimates(ok: pd.DataFrame) -> None:
    table = estimate_table(ok)
    if table.empty:
        return
    paragraph("What each configuration was estimated to need before its model was built (`bench memory`: parameters, "
              "gradients, optimizer state and, where the model states them or autograd's saved tensors were counted "
              "on the meta device, activations), beside the peak measured on a GPU. The estimate leaves out the "
              "framework's workspaces and the allocator's slack, so measured / estimate sits a little above 1 where "
              "activations are counted; where 'how' says 'activations not estimated', it is a floor, far below the "
              "peak at large batches; below 1, the estimate is too high.")
    columns = {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision", "batch_size": "batch",
               "parallelism": "parallelism", "world_size": "devices", "estimate_gib": "estimate, GiB",
               "peak_gib": "measured peak, GiB (GPU)", "ratio": "measured / estimate", "how": "how it was estimated"}
    shown = drop_constant(table, columns, keep=())
    show_table(shown, {k: v for k, v in columns.items() if k in shown}, number_text=sig_text)
    if table["peak_gib"].isna().any():
        note("No measured peak beside CPU rows: a CPU process's peak resident memory spans its whole life, not "
             "one configuration (peak_rss_bytes in results.csv).")
