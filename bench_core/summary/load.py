"""Result directories into one typed table: the rows, their machines, and what could not be read.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench_core import results
from bench_core.results import store
from bench_core.measure.noise import current_flags
from bench_core.results.keys import (  # noqa: F401 - WORKLOAD and machine_label re-exported
    REQUEST_SHAPE,
    SERVING_LOAD,
    RUN_SETTINGS,
    WORKLOAD,
    is_default,
    key_value,
    load_text,
    machine_kind,
    machine_label,
    set_fields,
)
from bench_core.results.rows import error_message
from bench_core.summary.text import int_text, is_present, short_list
from bench_core.workload.user_code import model_identity

PRECISION_ORDER = ["fp32", "tf32", "fp16", "bf16", "amp-fp16", "amp-bf16"]
EMULATED = "emulated"  # capability.EMULATED, spelled here so the summary never imports torch
EMULATED_SUFFIX = " (emulated)"
MODE_ORDER = ["train", "infer"]


NUMERIC = [
    "schema_version", "repeat", "batch_size", "width", "height", "depth", "steps", "min_seconds", "warmup_steps",
    "repeats", "num_threads", "nproc_per_node", "nnodes", "price_per_hour",
    "batch_size_requested", "batch_size_actual", "global_batch_size", "world_size", "device_count", "timed_steps",
    "timed_s", "timed_s_host", "samples_per_s", "samples_per_s_per_device", "batches_per_s", "mpx_per_s", "mvox_per_s", "s_per_iter",
    "step_time_ms_median", "step_time_ms_mean", "step_time_ms_std", "step_time_ms_p5", "step_time_ms_p95",
    "step_time_cv", "first_step_ms", "compile_s", "warmup_s", "peak_mem_allocated_bytes", "peak_mem_reserved_bytes",
    "peak_rss_bytes", "params_count", "loss_final", "threads", "power_w_mean", "power_w_max", "power_w_sampled", "energy_j",
    "gpu_util_pct_mean", "sm_clock_mhz_mean", "sm_clock_mhz_min", "gpu_mem_used_bytes", "gpu_temp_c_max",
    "cpu_util_pct_mean", "cpu_steal_cores", "flops_per_sample", "achieved_tflops", "peak_tflops", "mfu", "samples_per_j",
    "j_per_1k_samples", "samples_per_s_per_w", "cost_per_million_samples",
    "seq_len", "prompt_len", "new_tokens", "throughput", "tokens_per_s", "output_tokens", "ttft_ms_median",
    "ttft_ms_p95", "prefill_tokens_per_s", "decode_s", "decode_tokens_per_s", "itl_ms_median", "itl_ms_p95",
    "kv_cache_bytes", "flops_per_sample_counted", "cost_per_million",
    "num_tables", "rows_per_table", "embedding_dim", "indices_per_lookup", "zipf_exponent", "embedding_table_bytes",
    "embedding_bytes_per_s",
    "latent_size", "denoise_steps", "audio_frames", "denoise_steps_per_s", "images_per_s", "audio_s_per_s",
    "output_cosine", "output_rel_error", "loss_rel_error", "gpu_busy", "power_limit_w",
]


ENVIRONMENT_FIELDS = [
    "host", "device_type", "device_name", "device_count", "gpu_name", "gpu_count", "gpu_memory_bytes",
    "gpu_compute_capability", "driver_version", "cuda_version", "cudnn_version", "cpu_model", "cpu_count",
    "threads", "torch_threads", "os", "python_version", "torch_version", "torchvision_version", "timm_version",
    "smp_version", "transformers_version", "diffusers_version", "project_version", "git_commit", "tf32_enabled", "cudnn_benchmark_enabled",
    "dist_backend", "rank_devices", "slurm_job_id", "slurm_node", "slurm_exclusive", "result_dir",
]


@dataclass
class Results:
    """Every row of every result directory, plus one-line notes on what is missing or odd.

    `names` are the directories as the report shows them (dir_names): rows carry theirs in result_dir."""

    rows: pd.DataFrame
    dirs: list[Path]
    notes: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    @property
    def ok(self) -> pd.DataFrame:
        return self.rows[self.rows["status"] == "ok"]

    @property
    def machines(self) -> list[str]:
        return list(dict.fromkeys(self.rows["machine"])) if len(self.rows) else []


def load_results(result_dirs) -> Results:
    """Read DIR/results.csv of each directory (as text, then typed); never fails on odd content."""
    dirs = [Path(d) for d in ([result_dirs] if isinstance(result_dirs, (str, Path)) else result_dirs)]
    names = dir_names(dirs)
    frames, notes = [], []
    expected = results.columns()
    for d, name in zip(dirs, names):
        frame = read_record(d, name, notes)
        if frame is None:
            continue
        if frame.empty:
            notes.append(f"{name}: results.csv has no rows yet.")
            continue
        missing = [c for c in expected if c not in frame.columns]
        if missing:
            versions = ", ".join(sorted(set(frame.get("schema_version", pd.Series(["?"])).fillna("?").astype(str))))
            notes.append(f"{name}: rows of schema version {versions} lack {len(missing)} of the current "
                         f"(v{results.SCHEMA_VERSION}) columns: {short_list(missing)}; sections that need them "
                         "say so.")
        frame["result_dir"] = name
        frames.append(frame)
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=expected + ["result_dir"])
    rows = typed_rows(rows.reindex(columns=list(dict.fromkeys(expected + list(rows.columns)))))
    unknown = sorted(set(rows["status"]) - set(results.STATUSES))
    if unknown:
        notes.append(f"Unknown status values {short_list(unknown)}: shown under Failures as they are.")
    impossible = mark_impossible(rows)
    if impossible:
        notes.append(f"{impossible} row(s) marked ok hold impossible numbers (a throughput that is not a positive "
                     "finite number, an infinite or negative time): shown as invalid under Failures and left out "
                     "of every table, chart and comparison.")
    return Results(rows=rows, dirs=dirs, notes=notes, names=names)


def newest_result_dir(root) -> list[Path]:
    """The result directory under `root` written last (its results.csv, or its newest run file), as
    a one-item list for load_results: what the summary notebook opens when no directory is given
    (`make report` writes outputs/default, notebooks/benchmark.ipynb outputs/lab). None there:
    [root/default], which the report then says has no results."""
    def written(d: Path) -> float:
        files = [d / "results.csv", *d.glob("runs/*/rows.json")]
        return max((f.stat().st_mtime for f in files if f.is_file()), default=-1.0)
    found = [(written(d), d) for d in sorted(Path(root).glob("*")) if d.is_dir()]
    found = [(t, d) for t, d in found if t >= 0]
    return [max(found)[1]] if found else [Path(root) / "default"]


def dir_names(dirs: list[Path]) -> list[str]:
    """Each directory by its folder name (a report never shows a local path), with the parent's
    name where two share one (a/lab, b/lab), and a number where that is not enough."""
    paths = [Path(d).resolve() for d in dirs]
    names = [p.name or str(p) for p in paths]
    names = [f"{p.parent.name}/{n}" if names.count(n) > 1 else n for p, n in zip(paths, names)]
    return [f"{n} ({i + 1})" if names.count(n) > 1 else n for i, n in enumerate(names)]


# A finished measurement has a positive, finite throughput; no measured column is infinite and
# no time or rate is negative. Anything else was damaged on the way (or edited by hand).
MUST_BE_POSITIVE = ("samples_per_s",)
NOT_NEGATIVE = ("samples_per_s_per_device", "batches_per_s", "s_per_iter", "step_time_ms_median", "step_time_ms_mean",
                "step_time_ms_p5", "step_time_ms_p95", "window_s", "first_step_ms")


def mark_impossible(rows: pd.DataFrame) -> int:
    """Rows with status ok but impossible numbers become status 'invalid' (with the reason)."""
    if rows.empty:
        return 0
    ok = rows["status"] == "ok"
    reasons = pd.Series("", index=rows.index)
    for name in MUST_BE_POSITIVE:
        if name in rows:
            value = pd.to_numeric(rows[name], errors="coerce")
            bad = ok & ~(np.isfinite(value) & (value > 0))
            reasons[bad] += f"{name}=" + value[bad].astype(str) + " "
    for name in [c for c in NOT_NEGATIVE if c in rows]:
        value = pd.to_numeric(rows[name], errors="coerce")
        bad = ok & (np.isinf(value) | (value < 0))
        reasons[bad] += f"{name}=" + value[bad].astype(str) + " "
    invalid = reasons != ""
    rows.loc[invalid, "status"] = "invalid"
    rows.loc[invalid, "message"] = "impossible measurement: " + reasons[invalid].str.strip()
    return int(invalid.sum())


def read_record(result_dir: Path, name: str, notes: list[str]) -> pd.DataFrame | None:
    """A directory's rows as text: from its run files (runs/*/rows.json, the record) where it has any,
    else from results.csv. Nothing is written: a results.csv that holds other rows than its run files
    (a sweep stopped between the two writes, an edit) is named in a note and left as it is; one
    written under another schema version is read as it is (load_results says which columns it lacks)."""
    if not any(result_dir.glob("runs/*/rows.json")):
        return _read_csv(result_dir / "results.csv", name, notes)
    rows, damaged = store.read_record(result_dir)
    if damaged:
        which = "; ".join(f"{path.relative_to(result_dir)}: {why}" for path, why in damaged[:3]) + \
            ("; ..." if len(damaged) > 3 else "")
        notes.append(f"{name}: {len(damaged)} run file(s) could not be read as rows (cut off or edited: {which}): "
                     "those runs are left out.")
    listed = _row_ids(result_dir / "results.csv")
    recorded = {(str(r.get("run_id")), str(r.get("repeat"))) for r in rows}
    if listed is not None and listed != recorded:
        notes.append(f"{name}: results.csv lists {len(listed - recorded)} row(s) its run files do not hold and lacks "
                     f"{len(recorded - listed)} they do: this report reads the run files (the record); results.csv "
                     "is left as it is (the next run into the folder rewrites it).")
    if not rows:
        return None
    return pd.read_csv(io.StringIO(results.csv_text(rows)), dtype=str, keep_default_na=False, na_values=[""])


def _row_ids(path: Path) -> set[tuple[str, str]] | None:
    """(run_id, repeat) of each line of a results.csv; None when there is none to compare."""
    if not path.is_file():
        return None
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, usecols=lambda c: c in ("run_id", "repeat"),
                            engine="python", on_bad_lines="skip")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError, OSError):
        return set()
    if "run_id" not in frame:
        return set()
    return set(zip(frame["run_id"], frame.get("repeat", pd.Series("", index=frame.index))))


def _read_csv(path: Path, name: str, notes: list[str]) -> pd.DataFrame | None:
    if not path.is_file():
        notes.append(f"{name}: no results.csv (nothing has finished there yet).")
        return None
    bad_lines: list = []
    try:
        # The python engine lets a malformed line (a torn write, a stray edit) be skipped and counted.
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""], engine="python",
                            on_bad_lines=lambda line: bad_lines.append(line) and None)
        if bad_lines:
            notes.append(f"{name}: {len(bad_lines)} malformed line(s) of results.csv skipped.")
        return frame
    except pd.errors.EmptyDataError:
        notes.append(f"{name}: results.csv is empty.")
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else error_message(exc)  # no path
        notes.append(f"{name}: results.csv could not be read ({reason}).")
    return None


def typed_rows(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows.copy()
    # batch_size max (an explicit search) is text in a numeric column: keep the fact before coercing.
    rows["batch_searched"] = rows["batch_size_requested"].astype(str).str.strip().str.lower() == "max"
    # All numeric columns in one frame: assigning them one by one leaves ~100 blocks, and pandas then
    # warns (PerformanceWarning, "highly fragmented") at the next new column.
    numbers = pd.DataFrame({name: pd.to_numeric(rows[name], errors="coerce").astype(float) for name in NUMERIC},
                           index=rows.index)
    rows = pd.concat([rows.drop(columns=NUMERIC), numbers], axis=1).copy()  # copy: one block per dtype
    rows["status"] = rows["status"].fillna("unknown").astype(str).str.strip().str.lower().replace("", "unknown")
    rows["world_size"] = rows["world_size"].fillna(1)
    rows["compile"] = rows["compile"].fillna("off")
    # Rows of schema 5 and older trained with DDP, no tensor parallel, no checkpointing (the columns' defaults).
    rows["parallelism"] = rows["parallelism"].fillna("ddp")
    rows["tp_degree"] = pd.to_numeric(rows["tp_degree"], errors="coerce").fillna(1)
    rows["activation_checkpointing"] = rows["activation_checkpointing"].fillna("none")
    rows["channels_last"] = rows["channels_last"].astype(str).str.lower().isin(["true", "1"])
    for name in ("model", "mode", "precision", "input_shape", "message", "host", "device_name"):
        rows[name] = rows[name].astype(object).where(rows[name].notna(), None)
    # One model across edits of its file: an older row's code:net.py:build@3f2a1c9d is code:net.py:build.
    rows["model"] = rows["model"].map({m: model_identity(m) for m in rows["model"].dropna().unique()}).where(
        rows["model"].notna(), None)
    # An emulated precision is its own label in every table and chart: it can't pass for native.
    emulated = rows["precision_support"].astype(str).str.strip().str.lower() == EMULATED
    rows["precision"] = rows["precision"].where(~emulated | rows["precision"].isna(),
                                                rows["precision"].astype(str) + EMULATED_SUFFIX)
    fill_units(rows)
    # Flags under today's rules: an older row's power cap and host-bound step said as a new row says them.
    rows["noise_flags"] = [current_flags(r) for r in rows.to_dict("records")]
    records = rows.to_dict("records")
    for name in RUN_SETTINGS:  # as the key reads them: a setting that does not apply to a row is empty
        rows[name] = pd.Series([key_value(r, name) for r in records], index=rows.index, dtype=object)
    rows["nnodes"] = pd.to_numeric(rows["nnodes"], errors="coerce").astype(float)  # one type: 1 and 1.0 are one key
    rows["machine"] = [machine_label(r) for r in records]
    rows["kind"] = [machine_kind(r) for r in records]
    # A serving point has a load where other modes have a batch; its batch_size is a default it never used.
    rows["load"] = [load_text(r) or None for r in records]
    rows["batch_size"] = rows["batch_size"].where(rows["load"].isna())
    rows["config"] = [config_label(r) for r in rows.to_dict("records")]
    return rows


def fill_units(rows: pd.DataFrame) -> None:
    """Rows of schema 4 and older have no throughput columns: they measured images (3-dim sample)
    or volumes (4-dim), so throughput is their samples/s in that unit."""
    dims = rows["input_shape"].astype(str).str.count("x") + 1
    guessed = dims.map({3: "images/s", 4: "volumes/s"}).fillna("samples/s")
    for name in ("throughput_unit", "sample_unit"):
        rows[name] = rows[name].where(rows[name].map(is_present), guessed)
    rows["throughput"] = rows["throughput"].fillna(rows["samples_per_s"])
    rows["cost_per_million"] = rows["cost_per_million"].fillna(rows["cost_per_million_samples"])


def unit_items(unit: str) -> str:
    """'tokens/s' -> 'tokens': what a unit counts."""
    return str(unit).removesuffix("/s")


# Fields a configuration's label names where they are set to other than their default (keys.DEFAULTS).
LABELLED_WHEN_SET = ("parallelism", "tp_degree", "activation_checkpointing", *RUN_SETTINGS, "engine", "endpoint",
                     "length_dist", "shared_prefix_len", "prompt_file", "trace_file", "server_args", "model_dir",
                     "server_url")


def config_label(row: dict) -> str:
    """The configuration in words: every field of WORKLOAD that tells it from another (a serving point's
    load in place of a batch, any other field where it is not at its default), so two configurations
    never share a label."""
    parts = [str(row.get(k) or "?") for k in ("model", "mode", "precision")]
    parts.append(str(row["load"]) if is_present(row.get("load")) else f"bs{int_text(row.get('batch_size'))}")
    if is_present(row.get("input_shape")):
        parts.append(str(row["input_shape"]))
    if is_present(row.get("world_size")) and row["world_size"] > 1:
        parts.append(f"x{int_text(row['world_size'])} devices")
    if row.get("compile") not in (None, "off") and is_present(row.get("compile")):
        parts.append(f"compile={row['compile']}")
    if row.get("channels_last") is True:
        parts.append("channels_last")
    return " ".join(parts + set_fields(row, LABELLED_WHEN_SET))
