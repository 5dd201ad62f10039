"""The report's Memory table: what each configuration was estimated to need before its model was built
(`bench memory`, a row's mem_estimate_bytes) beside the peak measured on a GPU; a row recorded by an earlier
estimator (the kept GPU runs) is estimated again from its configuration by today's (run/memory_estimate.py).
"""
from __future__ import annotations

import math

import pandas as pd

from bench_core.config.schema import BenchConfig
from bench_core.summary.html import drop_constant, note, paragraph, show_table
from bench_core.summary.text import sig_text
from bench_core.workload.models import resolve_model
from bench_core.workload.precision import resolve_precision


TRACED = "traced on fake tensors"  # how an estimate of today's estimator begins its account
KEYS = ["machine", "model", "mode", "precision", "batch_size", "input_shape", "channels_last", "compile",
        "parallelism", "activation_checkpointing", "world_size"]


def config_of_row(row) -> BenchConfig:
    """The configuration a row ran, from its own columns (ConfigError where today's checks refuse it)."""
    values = {}
    for name in BenchConfig.field_names():
        value = row.get(name)
        value = value.item() if hasattr(value, "item") else value  # numpy's scalars, as pandas gives them
        if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
            continue
        values[name] = int(value) if isinstance(value, float) and value.is_integer() else value
    return BenchConfig.from_dict(values)


def estimate_again(row) -> tuple[float, str] | None:
    """Today's estimate of a row's configuration, on the device type it ran on: for rows whose own estimate
    was made before the step was traced (it left out activations). None where it cannot be made."""
    # torch (2 s of a report's CPU): imported only for a report with such rows
    from bench_core.run.memory_estimate import estimate
    if str(row.get("model") or "").startswith("code:"):
        return None  # a report never imports your code: a model of your own is named as code:<file>:<function>
    try:
        cfg = config_of_row(row)
        spec = resolve_model(cfg.model)
        found = estimate(spec.task, spec, cfg, resolve_precision(cfg.precision), str(row.get("device_type") or "cuda"))
    except Exception:  # noqa: BLE001 - a configuration today's checks refuse: the row's own estimate stands
        return None
    return (found.total, found.text()) if found else None


def estimate_table(ok: pd.DataFrame) -> pd.DataFrame:
    """Each configuration's memory estimate, said before its model was built (bench memory), beside the peak
    measured on a GPU (torch's peak allocated; a CPU has no per-configuration peak) and measured / estimate.
    A configuration whose rows were estimated before the step was traced is estimated again (`when`)."""
    if "mem_estimate_bytes" not in ok or ok["mem_estimate_bytes"].isna().all():
        return pd.DataFrame()
    rows = ok.dropna(subset=["mem_estimate_bytes"])
    number = lambda name: pd.to_numeric(rows[name], errors="coerce") if name in rows else \
        pd.Series(float("nan"), index=rows.index)  # noqa: E731
    rows = rows.assign(estimate_bytes=number("mem_estimate_bytes"),
                       peak_gib=number("peak_mem_allocated_bytes").where(rows["device_type"] == "cuda") / 2**30)
    table = rows.groupby([k for k in KEYS if k in rows], dropna=False, sort=False).agg(
        estimate_bytes=("estimate_bytes", "median"), peak_gib=("peak_gib", "median"),
        how=("mem_estimate", "first"), first=("mem_estimate", lambda s: s.index[0])).reset_index()
    when = []
    for i, line in table.iterrows():
        again = None if TRACED in str(line["how"]) else estimate_again(rows.loc[line["first"]])
        if again:
            when.append(f"again, by today's estimator (at run time: {line['estimate_bytes'] / 2**30:.3g} GiB)")
            table.loc[i, ["estimate_bytes", "how"]] = again
        else:
            when.append("at run time")
    table = table.drop(columns="first").assign(estimate_gib=table["estimate_bytes"] / 2**30, when=when)
    return table.assign(ratio=table["peak_gib"] / table["estimate_gib"])


def show_estimates(ok: pd.DataFrame) -> None:
    table = estimate_table(ok)
    if table.empty:
        return
    paragraph("What each configuration needs, estimated before its model is built (`bench memory`): one step run "
              "on fake tensors, its peak counted op by op (parameters, gradients, optimizer state, the activations "
              "autograd keeps at the precision autocast gives them, the transients around the peak), beside the "
              "peak torch allocated on a GPU. Not counted: cuDNN and cuBLAS workspaces (a small inference step shows "
              "them: measured / estimate above 1) and the allocator's cached blocks (the reserved memory, above the "
              "allocated peak: `bench memory` states by how much). Below 1, the estimate is too high.")
    columns = {"machine": "machine", "model": "model", "mode": "mode", "precision": "precision", "batch_size": "batch",
               "input_shape": "input", "channels_last": "channels_last", "compile": "compile",
               "parallelism": "parallelism", "activation_checkpointing": "checkpointing", "world_size": "devices",
               "estimate_gib": "estimate, GiB", "peak_gib": "measured peak, GiB (GPU)", "ratio": "measured / estimate",
               "when": "estimated", "how": "how it was estimated"}
    shown = drop_constant(table, columns, keep=())
    show_table(shown, {k: v for k, v in columns.items() if k in shown}, number_text=sig_text)
    if (table["when"] != "at run time").any():
        note("Rows estimated before the step was traced (their estimate left out the activations, or counted them "
             "by a formula) are estimated again from their own configuration by today's estimator; the run's own "
             "figure is beside it.")
    if table["how"].astype(str).str.contains("activations not estimated").any():
        note("Where 'how' says 'activations not estimated', the step could not be traced: the estimate is a floor, "
             "far below the peak at large batches.")
    if table["peak_gib"].isna().any():
        note("No measured peak beside CPU rows: a CPU process's peak resident memory spans its whole life, not "
             "one configuration (peak_rss_bytes in results.csv).")
