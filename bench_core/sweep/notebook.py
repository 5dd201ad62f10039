"""What the template notebook (notebooks/benchmark.ipynb) calls: its parameters become
BenchConfigs, the configurations run and their rows are recorded, then table, plot, environment.

A notebook cell holds narrative and one call; every loop lives here, tested.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import math
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from bench_core import results
from bench_core.config.schema import BenchConfig, check_known_keys
from bench_core.errors import ConfigError
from bench_core.launch.dispatch import run_benchmark
from bench_core.launch.servers import Servers
from bench_core.results.disturbed import RE_MEASURE, disturbances, disturbed_rows
from bench_core.measure import environment
from bench_core.results.rows import failure_row, new_run_id, run_fields
from bench_core.run.runner import old_objects_frozen
from bench_core.workload.models import resolve_model

# Parameters of the template that are not BenchConfig fields: where rows go, and whether
# configurations already complete in that run directory are measured again; and, from bench sweep,
# the exact configurations of the execution (see expand_configurations).
RUN_PARAMETERS = ("out_dir", "run_name", "force", "configurations")
# A configuration is complete when every row of it has one of these statuses: re-running
# cannot change an 'unsupported' (the device lacks the precision), so it is not redone.
COMPLETE_STATUSES = ("ok", "unsupported")
# Fields that may be lists in one execution: every precision x mode x batch size of one model on
# one device. They share a process safely: each run sets the process-wide numerics knobs (TF32,
# cudnn.benchmark) it needs, records what it read back and restores them when it closes.
LIST_FIELDS = ("precision", "mode", "batch_size")


@dataclass
class NotebookRun:
    """The validated parameters of one notebook execution."""
    configs: list[BenchConfig]
    out_dir: Path
    run_name: str
    force: bool = False

    @property
    def run_dir(self) -> Path:
        return self.out_dir / "runs" / self.run_name

    def plan(self):
        """One line per configuration and whether this execution will measure it."""
        import pandas as pd
        done = set() if self.force else complete_hashes(results.read_run(self.run_dir) or [])
        return pd.DataFrame([{**describe(cfg), "action": "kept (already complete)" if cfg.config_hash() in done
                              else "measure"} for cfg in self.configs])

    def _repr_html_(self) -> str:
        from html import escape
        head = (f"<p>{len(self.configs)} configuration(s); rows go to <code>{escape(str(self.run_dir))}"
                f"/rows.json</code> and <code>{escape(str(self.out_dir))}/results.csv</code></p>")
        return head + self.plan().to_html(index=False)


# -- parameters -> configs ---------------------------------------------------------------

def from_parameters(namespace: dict[str, Any], names_before: Iterable[str] = ()) -> NotebookRun:
    """Validate the notebook's parameters (its globals minus `names_before`) through BenchConfig.

    papermill only logs an unknown `-p name value`; here a typo is a ConfigError naming it.
    """
    allowed = BenchConfig.field_names() + list(RUN_PARAMETERS)
    skip = set(names_before) | _IPYTHON_NAMES
    # Known names always count (even if a cell was re-run out of order); `names_before` only
    # keeps the notebook's own imports from being taken for unknown parameters.
    given = {name: value for name, value in namespace.items() if name in allowed or
             (name not in skip and not name.startswith("_") and not _is_machinery(value))}
    check_known_keys(given, allowed, where="notebook parameters")
    fields = {name: value for name, value in given.items() if name not in RUN_PARAMETERS}
    configs = expand_configurations(fields, given.get("configurations")) if given.get("configurations") \
        else expand(fields)
    run_name = given.get("run_name") or default_run_name(configs)
    if not isinstance(run_name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", run_name):
        raise ConfigError("run_name", f"must be a folder name of letters, digits, '.', '_' or '-', got {run_name!r}")
    out_dir = given.get("out_dir") or "outputs/notebook"
    if not isinstance(out_dir, (str, Path)):
        raise ConfigError("out_dir", f"must be a folder path, got {out_dir!r}")
    force = given.get("force", False)
    if not isinstance(force, bool):
        raise ConfigError("force", f"must be true or false, got {force!r}")
    return NotebookRun(configs=configs, out_dir=Path(out_dir).expanduser().resolve(), run_name=run_name, force=force)


_IPYTHON_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}


def _is_machinery(value: Any) -> bool:
    """Modules, functions and classes in the namespace are not parameters."""
    import types
    return isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type))


def expand(values: dict[str, Any]) -> list[BenchConfig]:
    """BenchConfigs for every precision x mode x batch size; each of the three may be a single value or a list."""
    if not isinstance(values, dict):
        raise ConfigError("config", f"must be a mapping of field names to values, got {type(values).__name__}")
    lists = []
    for name in LIST_FIELDS:
        value = values.get(name, getattr(BenchConfig, name))
        if isinstance(value, (list, tuple)):
            if not value:
                raise ConfigError(name, "the list is empty; give at least one value")
            lists.append(list(value))
        else:
            lists.append([value])
    configs, seen = [], set()
    for combination in itertools.product(*lists):
        cfg = BenchConfig.from_dict({**values, **dict(zip(LIST_FIELDS, combination))})
        if cfg.config_hash() not in seen:  # 'train' and 'Train' are one configuration
            seen.add(cfg.config_hash())
            configs.append(cfg)
    return configs


def expand_configurations(values: dict[str, Any], configurations: Any) -> list[BenchConfig]:
    """BenchConfigs from a list of the fields in which each differs from `values` (what bench sweep passes:
    any set of configurations of one model, e.g. train at 128 tokens and generate with a 64-token prompt,
    which no precision x mode x batch-size product gives)."""
    if not isinstance(configurations, list) or not all(isinstance(c, dict) for c in configurations):
        raise ConfigError("configurations", f"must be a list of mappings of BenchConfig fields, got {configurations!r}")
    listed = [name for name in LIST_FIELDS if isinstance(values.get(name), (list, tuple))]
    if listed:
        raise ConfigError(listed[0], "must be one value when configurations are given (each configuration says its own)")
    configs, seen = [], set()
    for changes in configurations:
        cfg = BenchConfig.from_dict({**values, **changes})
        if cfg.config_hash() not in seen:
            seen.add(cfg.config_hash())
            configs.append(cfg)
    return configs


def default_run_name(configs: list[BenchConfig]) -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    first = configs[0]
    return safe_name(f"{first.model}-{first.precision}-{first.device}-{stamp}")


def safe_name(text: str) -> str:
    """A folder name from model/device names (timm:x, cuda:0)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-") or "run"


def describe(cfg: BenchConfig) -> dict:
    return {"model": cfg.model, "mode": cfg.mode, "precision": cfg.precision, "batch_size": cfg.batch_size,
            "input": resolve_model(cfg.model).task.input_text(cfg), "device": cfg.device,
            "config_hash": cfg.config_hash()}


# -- completeness (shared with bench sweep) -------------------------------------------------

def rows_by_config(rows: Iterable[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for row in rows:
        grouped.setdefault(str(row.get("config_hash")), []).append(row)
    return grouped


def complete_hashes(rows: Iterable[dict]) -> set[str]:
    """Configurations whose rows all carry a final status (ok, or unsupported here)."""
    return {h for h, group in rows_by_config(rows).items()
            if group and all(r.get("status") in COMPLETE_STATUSES for r in group)}


# -- running -----------------------------------------------------------------------------

def run(plan: NotebookRun, progress: Callable[[str], None] | None = print) -> list[dict]:
    """Measure every configuration not yet complete in the run directory; return all their rows.

    Rows are written after each configuration, so a crash keeps what finished. Rows of the
    configurations about to be measured are dropped first: a configuration without rows
    afterwards is one that did not finish (bench sweep marks it crashed / timeout).
    """
    existing = results.read_run(plan.run_dir) or []
    done = set() if plan.force else complete_hashes(existing)
    pending = [cfg for cfg in plan.configs if cfg.config_hash() not in done]
    pending_hashes = {cfg.config_hash() for cfg in pending}
    rows = [r for r in existing if str(r.get("config_hash")) not in pending_hashes]
    kept = done & {cfg.config_hash() for cfg in plan.configs}
    if pending and len(rows) != len(existing):
        results.write_run(plan.out_dir, plan.run_name, rows)
    say = progress or (lambda msg: None)
    if kept:
        say(f"{len(kept)} configuration(s) already complete in {plan.run_dir}: kept, not re-run")
    # one full collection for the execution, not one per configuration; a serving engine started once for the
    # serve configurations of one server (the loads of a ladder), stopped at the end
    with old_objects_frozen(), Servers() as servers:
        for cfg in pending:
            with warnings.catch_warnings(record=True) as caught, profiles_under(plan.out_dir):
                warnings.simplefilter("always")
                new_rows = run_benchmark(cfg, progress=say, servers=servers)
            # Warnings would print to stderr (a red box in the HTML); show them once, as text.
            for message in sorted({f"{w.category.__name__}: {w.message}" for w in caught}):
                say(f"warning: {message}")
            rows += new_rows
            results.write_run(plan.out_dir, plan.run_name, rows)
    wanted = {cfg.config_hash() for cfg in plan.configs}
    return [r for r in rows if str(r.get("config_hash")) in wanted]


@contextlib.contextmanager
def profiles_under(out_dir: Path) -> Iterator[None]:
    """Profiles (profile=True) go to out_dir/profiles/, like `bench run --out`'s, rather than to
    run.profiling's ./outputs/profiles/ of the kernel's folder (notebooks/ in JupyterLab); a
    $BENCH_PROFILE_DIR set by the user stands. The variable reaches torchrun workers too. Serving
    records (mode serve) go to out_dir/serving/ the same way ($BENCH_SERVING_DIR)."""
    set_here = []
    for name, sub in (("BENCH_PROFILE_DIR", "profiles"), ("BENCH_SERVING_DIR", "serving")):
        if not os.environ.get(name):
            os.environ[name] = str(out_dir / sub)
            set_here.append(name)
    try:
        yield
    finally:
        for name in set_here:
            os.environ.pop(name, None)


def failure_rows(configs: list[BenchConfig], status: str, message: str, extra: dict | None = None) -> list[dict]:
    """One row per configuration that has no result, saying why (crashed, timeout, interrupted)."""
    return [failure_row({**(extra or {}), **run_fields(cfg), "run_id": new_run_id(cfg, suffix=status)}, status, message)
            for cfg in configs]


def record_missing(out_dir: Path, run_name: str, configs: list[BenchConfig], status: str, message: str,
                   extra: dict | None = None) -> list[BenchConfig]:
    """Give every configuration without rows in the run directory a failure row; return them."""
    existing = results.read_run(Path(out_dir) / "runs" / run_name) or []
    have = set(rows_by_config(existing))
    missing = [cfg for cfg in configs if cfg.config_hash() not in have]
    if missing:
        results.write_run(out_dir, run_name, existing + failure_rows(missing, status, message, extra))
    return missing


# -- showing -----------------------------------------------------------------------------

_TABLE_COLUMNS = {
    "model": "model", "mode": "mode", "precision": "precision", "batch_size": "batch", "input_shape": "input",
    "status": "status", "repeats_ok": "repeats ok", "samples_per_s": "samples/s (median)",
    "samples_per_s_min": "min", "samples_per_s_max": "max", "step_time_ms_median": "step ms (median)",
    "step_time_cv": "CV", "first_step_ms": "first step ms", "peak_mem_mib": "peak mem MiB", "message": "message",
    "batch_search": "batch search", "disturbed": "disturbed",
}


def result_table(rows: list[dict]):
    """One line per configuration: median throughput over repeats and its range. A configuration whose repeats
    ran beside other processes (or on a throttled device) says so in a `disturbed` column, its figures in red:
    as `bench run`'s table and the sweep's progress lines mark them."""
    import pandas as pd
    if not rows:
        return pd.DataFrame(columns=list(_TABLE_COLUMNS.values()))
    lines = []
    for group in rows_by_config(rows).values():
        ok = [r for r in group if r.get("status") == "ok"]
        rates = [r["samples_per_s"] for r in ok if r.get("samples_per_s") is not None]
        steps = [r["step_time_ms_median"] for r in ok if r.get("step_time_ms_median") is not None]
        cvs = [r["step_time_cv"] for r in ok if r.get("step_time_cv") is not None]
        first = group[0]
        mem = first.get("peak_mem_allocated_bytes") or first.get("peak_rss_bytes")
        statuses = sorted({r.get("status") for r in group})
        hit, flags = disturbed_rows(ok)
        lines.append({
            "model": first.get("model"), "mode": first.get("mode"), "precision": first.get("precision"),
            "batch_size": _batch_text(first), "input_shape": first.get("input_shape"),
            "status": ", ".join(str(s) for s in statuses), "repeats_ok": f"{len(ok)}/{len(group)}",
            "samples_per_s": _median(rates), "samples_per_s_min": min(rates) if rates else None,
            "samples_per_s_max": max(rates) if rates else None, "step_time_ms_median": _median(steps),
            "step_time_cv": _median(cvs), "first_step_ms": first.get("first_step_ms"),
            "peak_mem_mib": mem / 2**20 if mem else None,
            "message": "; ".join(sorted({str(r["message"]) for r in group if r.get("message")})),
            "batch_search": first.get("batch_search"),
            "disturbed": f"DISTURBED {hit}/{len(ok)}: {flags}: {RE_MEASURE}" if hit else "-",
        })
    table = pd.DataFrame(lines)
    if table["batch_search"].isna().all():
        table = table.drop(columns="batch_search")
    marked = table["disturbed"] != "-"
    if not marked.any():
        table = table.drop(columns="disturbed")
    table = table.rename(columns=_TABLE_COLUMNS)
    figures = [_TABLE_COLUMNS[k] for k in ("samples_per_s", "samples_per_s_min", "samples_per_s_max",
                                            "step_time_ms_median", "disturbed") if _TABLE_COLUMNS[k] in table]
    red = pd.DataFrame("", index=table.index, columns=table.columns)
    red.loc[marked, figures] = "color: #b00020"
    return table.style.hide(axis="index").format(precision=1, na_rep="").apply(lambda _: red, axis=None)


def _batch_text(row: dict) -> str:
    """'12', or '12 (max)' when batch_size max found it by search ('max' alone when the search failed)."""
    size = row.get("batch_size")
    if row.get("batch_size_requested") == "max" and size != "max":
        return f"{size} (max)"
    return str(size)


def _median(values: list[float]) -> float | None:
    import statistics
    return statistics.median(values) if values else None


STEP_CHART_WIDTH_IN = 8.0
STEP_PANEL_HEIGHT_IN = 3.3


def plot_step_times(rows: list[dict]):
    """Per-step time of every timed window, one panel per configuration; the first (cold) step
    and the mean warm-up step drawn beside it, since rows keep no per-step warm-up times."""
    import matplotlib.pyplot as plt
    groups = [g for g in rows_by_config(rows).values() if any(r.get("step_times_ms") for r in g)]
    if not groups:
        print("No timed window to plot (no configuration finished with status ok).")
        return None
    from matplotlib.ticker import LogFormatterSciNotation, MaxNLocator
    plain = _plain_log_labels(LogFormatterSciNotation)
    cols = min(len(groups), 2)
    nrows = math.ceil(len(groups) / cols)
    # JupyterLab shows the SVG at its own size, not shrunk to the output area: 8 inches (768 px)
    # fits the output area of a laptop's browser window beside the file browser.
    width, height = min(5.2 * cols, STEP_CHART_WIDTH_IN), STEP_PANEL_HEIGHT_IN * nrows
    fig, axes = plt.subplots(nrows, cols, figsize=(width, height), squeeze=False)
    # Margins in inches, the same for every panel (tight_layout measured every tick label of every panel for
    # them: a quarter of the cell's CPU for a sweep's 19 panels)
    fig.subplots_adjust(left=0.75 / width, right=1 - 0.15 / width, bottom=0.55 / height, top=1 - 0.35 / height,
                        wspace=0.9 / (width / cols - 0.9), hspace=0.95 / (STEP_PANEL_HEIGHT_IN - 0.95))
    for ax, group in zip(axes.flat, groups):
        first = group[0]
        offset = 0
        for row in group:
            times = [float(t) for t in str(row.get("step_times_ms") or "").split()]
            if not times:
                continue
            flags = disturbances(row.get("noise_flags"))
            ax.plot(range(offset + 1, offset + len(times) + 1), times, marker=".", linewidth=1,
                    linestyle=":" if flags else "-",
                    label=f"repeat {row.get('repeat')} (timed" + (f"; DISTURBED: {flags})" if flags else ")"))
            offset += len(times)
        if first.get("first_step_ms"):
            ax.scatter([0], [first["first_step_ms"]], marker="X", s=70, color="black", zorder=3,
                       label="first step (cold, untimed)")
        warm = _warmup_step_ms(first)
        if warm:
            ax.axhline(warm, color="grey", linestyle="--", linewidth=1, label="mean warm-up step (untimed)")
        ax.set_yscale("log")
        # plain numbers (2, 5, 10, 20 ms): the log axis's own labels are mathtext, laid out by a parser, a second
        # of the cell's CPU for a sweep's panels, in each of its two image formats
        ax.yaxis.set_major_formatter(plain())
        ax.yaxis.set_minor_formatter(plain(labelOnlyBase=False))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.set_xlabel("step (timed windows of all repeats, in order)")
        ax.set_ylabel("step time, ms (log)")
        ax.set_title(f"{first.get('model')} {first.get('mode')} {first.get('precision')} "
                     f"batch {first.get('batch_size')}", fontsize=10)
        ax.legend(fontsize=7, loc="upper right")  # ("best" searched every point of every panel: seconds)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    return fig


def _plain_log_labels(formatter: type) -> type:
    """A log axis's formatter that labels the ticks matplotlib's would label (which minor ones, by the span
    shown), as plain numbers (200, 500) rather than its mathtext (2 x 10^2)."""
    class Plain(formatter):
        def __call__(self, x, pos=None):
            return f"{x:g}" if super().__call__(x, pos) else ""
    return Plain


def _warmup_step_ms(row: dict) -> float | None:
    # The runner times warm-up steps 2..N together (step 1 is the first step, one more counts FLOPs).
    steps = (row.get("warmup_steps") or 0) - 1
    if row.get("warmup_s") and steps > 0:
        return row["warmup_s"] * 1e3 / steps
    return None


_ENV_FIELDS = ("host", "device_name", "device_type", "device_count", "os", "python_version", "cpu_model", "cpu_count",
               "threads", "torch_version", "torchvision_version", "timm_version", "cuda_version", "cudnn_version",
               "driver_version", "gpu_name", "gpu_memory_bytes", "project_version", "git_commit")


def environment_table(rows: list[dict]):
    """The machine and software the rows were measured on (from the rows; live if there are none)."""
    import pandas as pd
    if rows:
        source = {name: rows[0].get(name) for name in _ENV_FIELDS}
    else:
        source = {name: value for name, value in environment.collect().items() if name in _ENV_FIELDS}
    return pd.DataFrame([{"field": k, "value": v} for k, v in source.items() if v not in (None, "")]) \
        .style.hide(axis="index")
