"""`bench sweep FILE`: run a params/*.yaml grid through notebooks/benchmark.ipynb with papermill.

The whole file is validated first (every BenchConfig built, every device resolved): a bad key
or value is one line and exit 2, before anything is written. Then one papermill execution per
(device, model) -- all its precisions, modes and batch sizes share one kernel (each run sets and
restores the process-wide numerics knobs it needs), so the kernel start, imports and the device's
context are paid once per model -- each kept as DIR/runs/<run_name>/benchmark.ipynb beside its
rows.json; DIR/results.csv gathers every row.

Each execution runs in a child process (`python -m bench_core.sweep --child SPEC`) started in a
session of its own, because that makes every failure mode killable and classifiable:
- a per-execution timeout (`timeout_s`) or Ctrl-C kills the whole tree -- child, Jupyter kernel
  (which jupyter_client starts in yet another session) and any torchrun workers -- via psutil;
- the child dies with the sweep (Linux PR_SET_PDEATHSIG) and the kernel with the child
  (ipykernel's parent poller), so a SIGKILLed sweep leaves nothing measuring in the background;
- the child writes its outcome (ok, papermill's `ename: evalue`, or a dead kernel) to a file.
It costs about a second per execution (a Python start and `import papermill`).

Re-running a sweep skips executions whose configurations are all complete (status ok, or
unsupported, which a re-run cannot change) and re-runs the rest; `--force` re-runs all. A lock
on DIR/.sweep.lock refuses a second sweep into the same directory.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from bench_core import results
from bench_core.config import BenchConfig, ConfigError, check_known_keys, load_yaml_mapping
from bench_core.results import error_message, first_line
from bench_core.notebook import COMPLETE_STATUSES, LIST_FIELDS, describe, record_missing, rows_by_config, safe_name

SWEEP_KEYS = ("name", "description", "grid", "settings", "timeout_s", "emulated")
# What a sweep does with a precision this machine only emulates (bench sysinfo): run it (marked
# emulated in every row and chart) or leave it out of the plan (said before it starts and in the report).
EMULATED_CHOICES = ("run", "skip")
SELECTOR_KEYS = ("description", "use")
SELECTOR_CHOICES = ("gpu", "mps", "cpu")
MAX_CONFIGS = 10_000  # a typo like batch_size: [1, ..., 100000] should not plan a year of work
TEMPLATE_ENV = "BENCH_TEMPLATE"
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
KILL_GRACE_S = 3.0
INTERRUPTED = "stopped (Ctrl-C or SIGTERM) before this configuration finished"
RUNNING_MARK = ".running"  # in a run directory while its execution runs; left behind only by a killed sweep


# -- the plan ---------------------------------------------------------------------------------

@dataclass
class Execution:
    """One papermill execution: every precision x mode x batch size of one (device, model, ...)."""
    run_name: str
    configs: list[BenchConfig]

    def parameters(self, out_dir: Path, force: bool) -> dict[str, Any]:
        values = self.configs[0].to_dict()
        for name in LIST_FIELDS:
            values[name] = _unique(getattr(cfg, name) for cfg in self.configs)
        return {**values, "out_dir": str(out_dir), "run_name": self.run_name, "force": force}

    @property
    def label(self) -> str:
        first = self.configs[0]
        return f"{first.model} {'/'.join(_unique(c.precision for c in self.configs))} on {first.device}"


@dataclass
class SweepPlan:
    name: str
    configs: list[BenchConfig]
    executions: list[Execution]
    timeout_s: float | None = None
    text: str = ""                      # the sweep file as written (saved as DIR/sweep.yaml)
    source: str = ""
    notes: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # emulated precisions left out (emulated: skip)


def load_sweep(path: str | Path) -> SweepPlan:
    """Read, select (`use:`) and validate a sweep file; ConfigError on any problem."""
    path = Path(path)
    data = load_yaml_mapping(path, "sweep")
    notes = []
    if "use" in data:
        check_known_keys(data, list(SELECTOR_KEYS), where=f"sweep selector {path.name}")
        choice, chosen = _select(data["use"], path)
        notes.append(f"{path.name} selected {chosen.name} ({choice})")
        path = chosen
        data = load_yaml_mapping(path, "sweep")
        if "use" in data:
            raise ConfigError("use", f"{path.name} is itself a selector; point `use` at a sweep file")
    plan = parse_sweep(data, default_name=path.stem)
    plan.text, plan.source, plan.notes = path.read_text(), str(path), notes + plan.notes
    return plan


def _select(use: Any, path: Path) -> tuple[str, Path]:
    """`use: {gpu: FILE, cpu: FILE}` picks by the hardware present (mps falls back to cpu)."""
    if not isinstance(use, dict) or not use:
        raise ConfigError("use", f"must map {', '.join(SELECTOR_CHOICES)} to sweep files, got {use!r}")
    check_known_keys(use, list(SELECTOR_CHOICES), where="use")
    if "cpu" not in use:
        raise ConfigError("use", "needs a `cpu` entry: the file to run when no GPU is present")
    from bench_core.devices import available_devices
    present = available_devices().split(", ")
    has_gpu = any(name.startswith("cuda") for name in present)
    choice = "gpu" if has_gpu and "gpu" in use else "mps" if "mps" in present and "mps" in use else "cpu"
    target = use[choice]
    if not isinstance(target, str) or not target.strip():
        raise ConfigError("use", f"{choice}: must be a sweep file name, got {target!r}")
    chosen = (path.parent / target).resolve()
    if not chosen.is_file():
        raise ConfigError("use", f"{choice}: no such sweep file: {chosen}")
    return choice, chosen


def parse_sweep(data: Any, default_name: str = "sweep") -> SweepPlan:
    """Validate a sweep dict and expand it into configurations and executions."""
    if not isinstance(data, dict):
        raise ConfigError("sweep", f"must be a mapping of keys to values, got {type(data).__name__}")
    check_known_keys(data, list(SWEEP_KEYS), where="sweep file")
    name = data.get("name", default_name)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", name):
        raise ConfigError("name", f"must be a folder name (letters, digits, '.', '_', '-'), got {name!r}")
    if not isinstance(data.get("description", ""), str):
        raise ConfigError("description", f"must be text, got {data['description']!r}")
    timeout_s = _timeout(data.get("timeout_s"))
    fields = BenchConfig.field_names()

    settings = data.get("settings") or {}
    if not isinstance(settings, dict):
        raise ConfigError("settings", f"must be a mapping of BenchConfig fields to values, got {settings!r}")
    check_known_keys(settings, fields, where="settings")

    grids = _grids(data.get("grid"), fields)
    count = sum(math.prod(len(values) for values in grid.values()) for grid in grids)
    if count > MAX_CONFIGS:
        raise ConfigError("grid", f"expands to {count} configurations; at most {MAX_CONFIGS} per sweep")

    emulated = data.get("emulated", "run")
    if emulated not in EMULATED_CHOICES:
        raise ConfigError("emulated", f"got {emulated!r}; allowed: {', '.join(EMULATED_CHOICES)}")

    configs, seen = [], set()
    for grid in grids:
        for combo in itertools.product(*grid.values()):
            chosen = dict(zip(grid, combo))
            cfg = _config({**settings, **chosen}, chosen, settings)
            if cfg.config_hash() not in seen:
                seen.add(cfg.config_hash())
                configs.append(cfg)
    configs, notes, skipped = _emulated(configs, emulated)
    if not configs:
        raise ConfigError("emulated", "skip leaves no configuration: every precision of this sweep is emulated "
                                      "here; " + "; ".join(notes))
    return SweepPlan(name=name, configs=configs, executions=plan_executions(configs), timeout_s=timeout_s,
                     notes=notes, skipped=skipped)


def _emulated(configs: list[BenchConfig], policy: str) -> tuple[list[BenchConfig], list[str], list[dict]]:
    """Find the precisions this machine only emulates; leave them out when the policy says skip."""
    from bench_core.capability import EMULATED
    from bench_core.devices import Backend, resolve_device
    from bench_core.precision import resolve_precision
    found: dict[tuple[str, str], Any] = {}
    for cfg in configs:
        key = (cfg.device, cfg.precision, cfg.mode)
        if key not in found:
            backend = Backend.for_device(resolve_device(cfg.device))
            found[key] = backend.support(resolve_precision(cfg.precision), cfg.mode)
    notes, skipped = [], []
    for (device, precision, mode), support in found.items():
        if support.level != EMULATED:
            continue
        count = sum(1 for c in configs if (c.device, c.precision, c.mode) == (device, precision, mode))
        if policy == "skip":
            notes.append(f"{precision} {mode} is emulated on {device}, so its {count} configuration(s) are left out "
                         f"(emulated: skip): {support.reason}")
            skipped.append({"device": device, "precision": precision, "mode": mode, "configurations": count,
                            "reason": support.reason})
        else:
            notes.append(f"{precision} {mode} is emulated on {device}: its {count} configuration(s) run slowly and "
                         f"are marked emulated: {support.reason}")
    left_out = {(s["device"], s["precision"], s["mode"]) for s in skipped}
    kept = [c for c in configs if (c.device, c.precision, c.mode) not in left_out]
    return kept, notes, skipped


def _timeout(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError("timeout_s", f"must be a positive number of seconds per execution, got {value!r}")
    return float(value)


def _grids(grid: Any, fields: list[str]) -> list[dict[str, list]]:
    """`grid` is a mapping (every combination) or a list of mappings (the union of their combinations).

    A grid value wins over the same field in settings (settings are the defaults of every entry).
    """
    if grid is None:
        return [{}]
    entries = grid if isinstance(grid, list) else [grid]
    if not entries:
        raise ConfigError("grid", "is an empty list; give a mapping of fields to lists of values")
    grids = []
    for index, entry in enumerate(entries):
        where = "grid" if not isinstance(grid, list) else f"grid entry {index + 1}"
        if not isinstance(entry, dict):
            raise ConfigError("grid", f"{where} must be a mapping of BenchConfig fields to lists of values, "
                                      f"got {entry!r}")
        check_known_keys(entry, fields, where=where)
        expanded = {}
        for key, values in entry.items():
            values = values if isinstance(values, list) else [values]
            if not values:
                raise ConfigError(key, f"has an empty list in {where}; give at least one value")
            expanded[key] = values
        grids.append(expanded)
    return grids


def _config(values: dict, chosen: dict, settings: dict) -> BenchConfig:
    """One BenchConfig; its error names the field and, when the field is not a setting, the grid combination."""
    from bench_core.devices import resolve_device
    try:
        cfg = BenchConfig.from_dict(values)
        resolve_device(cfg.device)  # an absent device is bad input here, as for `bench run`
        # More processes than this machine has devices is not refused here: a scaling sweep
        # (1, 2, 4, 8 devices) runs what fits and records the rest as `unsupported` rows.
    except ConfigError as exc:
        if not exc.field.isidentifier():  # already quoted by ConfigError: pass it on as it is
            raise
        problem = str(exc)[len(exc.field) + 2:]
        if len(chosen) > 1 and exc.field not in settings:
            combo = ", ".join(f"{k}={v!r}" for k, v in chosen.items() if k != exc.field)
            problem = f"{problem} (grid combination: {combo})"
        raise ConfigError(exc.field, problem) from None
    return cfg


def plan_executions(configs: list[BenchConfig]) -> list[Execution]:
    """Group configurations that differ only in precision, mode and batch size into one execution.

    The template runs every precision x mode x batch size it is given; a group that is not such a
    product (e.g. train at 32 and infer at 64) is split by precision, then by mode, until it is.
    """
    groups: dict[str, list[BenchConfig]] = {}
    for cfg in configs:
        key = json.dumps({k: v for k, v in cfg.to_dict().items() if k not in LIST_FIELDS}, sort_keys=True, default=str)
        groups.setdefault(key, []).append(cfg)
    executions = []
    for group in groups.values():
        parts = [group]
        for name in ("precision", "mode"):
            if all(_is_product(part) for part in parts):
                break
            parts = [[c for c in part if getattr(c, name) == value]
                     for part in parts for value in _unique(getattr(c, name) for c in part)]
        executions += [Execution(run_name=_run_name(part), configs=part) for part in parts]
    return executions


def _is_product(configs: list[BenchConfig]) -> bool:
    return math.prod(len(_unique(getattr(c, name) for c in configs)) for name in LIST_FIELDS) == len(configs)


def _run_name(configs: list[BenchConfig]) -> str:
    """Stable across re-runs (so completed work is found), different when any setting differs."""
    import hashlib
    from bench_core.devices import resolve_device
    first = configs[0]
    digest = hashlib.sha256(" ".join(sorted(c.config_hash() for c in configs)).encode()).hexdigest()[:8]
    device = str(resolve_device(first.device))
    precisions = "-".join(_unique(c.precision for c in configs))
    return safe_name(f"{device}-{first.model}-{precisions}-{digest}")


def _unique(values) -> list:
    return list(dict.fromkeys(values))


# -- the command ------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """sweep file (YAML):
  name: tiny                 # output folder name (default: the file name)
  timeout_s: 1800            # optional: seconds allowed per papermill execution
  emulated: skip             # optional: leave out precisions this machine only emulates (default: run)
  grid:                      # every combination is one configuration (any BenchConfig field);
    model: [resnet50, mobilenet_v3_large]   # a list of such mappings runs the union of their grids
    precision: [fp32, amp-bf16]
    mode: [train, infer]
    batch_size: [16, max]    # max: the largest batch that fits, found by a search recorded in the rows
  settings:                  # shared by all configurations (any BenchConfig field)
    width: 64
    height: 64
    max_batch_size: 256      # cap of that search

examples:
  bench sweep params/cpu-quick.yaml                 # writes outputs/cpu-quick/{results.csv,report.html}
  bench sweep params/tensorpix.yaml --out outputs/tensorpix-a100
  bench sweep params/default.yaml --force           # measure everything again
  bench sweep params/default.yaml --dry-run         # what would run, and about how long
exit status: 0 every configuration ok (or unsupported), 1 a configuration failed, 2 bad input,
130 interrupted."""
    p.add_argument("file", metavar="FILE", help="sweep file (params/*.yaml)")
    p.add_argument("--out", metavar="DIR", help="output directory (default: outputs/<name>)")
    p.add_argument("--force", action="store_true", help="re-run configurations that are already complete")
    p.add_argument("--no-report", action="store_true", help="skip building DIR/report.html")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (executions, configurations, estimated time) and run nothing")
    p.add_argument("--template", metavar="IPYNB",
                   help=f"notebook template (default: ${TEMPLATE_ENV}, else notebooks/benchmark.ipynb of the project)")
    p.add_argument("--kernel", default="python3", help="Jupyter kernel name (default: python3, this environment)")


def main(args: argparse.Namespace) -> int:
    plan = load_sweep(args.file)
    template = find_template(args.template)
    out_dir = Path(args.out or Path("outputs") / plan.name).resolve()
    if args.dry_run:
        return dry_run(plan, out_dir)
    with sweep_lock(out_dir):
        return run_sweep(plan, out_dir, template, force=args.force, build_report=not args.no_report,
                         kernel=args.kernel)


def find_template(override: str | None = None) -> Path:
    """The template: --template, else $BENCH_TEMPLATE, else notebooks/benchmark.ipynb of the project
    (beside the bench_core package in a checkout or editable install), else of the current directory."""
    import bench_core
    given = override or os.environ.get(TEMPLATE_ENV)
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            source = "--template" if override else f"${TEMPLATE_ENV}"
            raise ConfigError("template", f"notebook not found: {path} (from {source})")
        return path.resolve()
    candidates = [Path(bench_core.__file__).resolve().parents[1] / "notebooks" / "benchmark.ipynb",
                  Path.cwd() / "notebooks" / "benchmark.ipynb"]
    for path in candidates:
        if path.is_file():
            return path
    raise ConfigError("template", f"notebooks/benchmark.ipynb not found (looked in {candidates[0].parent} and "
                                  f"{candidates[1].parent}); pass --template or set ${TEMPLATE_ENV}")


@contextlib.contextmanager
def sweep_lock(out_dir: Path) -> Iterator[None]:
    """One sweep per output directory: a second one is refused with the holder's pid."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        handle = open(out_dir / ".sweep.lock", "a+")
    except OSError as exc:
        raise ConfigError("out", f"cannot use {out_dir} as the output directory: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise ConfigError("out", f"{out_dir} is in use by another bench sweep (pid {holder}); "
                                     "wait for it to finish or choose another --out") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()  # releases the lock (the kernel also releases it if this process dies)


@dataclass
class Tally:
    complete: int = 0
    skipped: int = 0
    unsupported: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    not_run: int = 0

    def line(self, total: int) -> str:
        failed = sum(self.failed.values())
        detail = f" ({', '.join(f'{n} {s}' for s, n in sorted(self.failed.items()))})" if failed else ""
        unsupported = f", {self.unsupported} unsupported" if self.unsupported else ""
        not_run = f", {self.not_run} not run" if self.not_run else ""
        return (f"{total} configurations: {self.complete} complete, {self.skipped} skipped (already complete)"
                f"{unsupported}, {failed} failed{detail}{not_run}")


def run_sweep(plan: SweepPlan, out_dir: Path, template: Path, force: bool = False, build_report: bool = True,
              kernel: str = "python3") -> int:
    """Run (or resume) every execution of the plan into out_dir; return the exit status."""
    from tqdm import tqdm

    from bench_core import environment
    from bench_core.devices import resolve_device

    results.atomic_write_text(out_dir / "sweep.yaml", _sweep_header(plan) + plan.text)
    env = environment.collect(resolve_device(plan.configs[0].device))
    results.atomic_write_text(out_dir / "environment.json", json.dumps(env, indent=1, default=str))
    results.atomic_write_text(out_dir / "plan.json", json.dumps(_plan_json(plan), indent=1))
    for note in plan.notes:
        print(f"bench sweep: {note}", file=sys.stderr)
    print(f"bench sweep: {plan_summary(plan)}", file=sys.stderr)

    tally = Tally()
    started = time.perf_counter()
    bar = tqdm(total=len(plan.configs), unit="config", desc=plan.name, file=sys.stderr, dynamic_ncols=True)
    index, running = 0, False
    restore = _sigterm_as_interrupt()
    previous_sigint = signal.getsignal(signal.SIGINT)
    try:
        for index, execution in enumerate(plan.executions):
            statuses = _statuses(out_dir, execution)
            if not force and _is_complete(execution, statuses):
                tally.skipped += len(execution.configs)
                bar.update(len(execution.configs))
                continue
            note = _redo_note(out_dir, execution, statuses)
            if note and not force:
                bar.write(note, file=sys.stderr)
            bar.set_postfix_str(execution.label)
            _drop_unfinished_rows(out_dir, execution)
            running = True
            mark = out_dir / "runs" / execution.run_name / RUNNING_MARK
            results.atomic_write_text(mark, str(os.getpid()))
            try:
                outcome = execute(execution, out_dir, template, plan.timeout_s, force, kernel)
                _record_outcome(out_dir, execution, outcome, env)
            finally:  # Ctrl-C included; only a SIGKILL leaves the mark
                mark.unlink(missing_ok=True)
            running = False
            _count(tally, _statuses(out_dir, execution), already=set() if force else _done(statuses))
            bar.update(len(execution.configs))
    except KeyboardInterrupt:
        with contextlib.suppress(ValueError):  # a second Ctrl-C must not cut the clean-up short
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        bar.close()
        if running:
            _record_outcome(out_dir, plan.executions[index], Outcome("interrupted", INTERRUPTED), env)
            _count(tally, _statuses(out_dir, plan.executions[index]), already=set() if force else _done(statuses))
        tally.not_run += sum(len(e.configs) for e in plan.executions[index + running:])
        print(f"bench sweep: interrupted; {tally.line(len(plan.configs))}; rows in {out_dir / 'results.csv'}")
        return EXIT_INTERRUPTED
    finally:
        restore()
        with contextlib.suppress(ValueError):  # not the main thread
            signal.signal(signal.SIGINT, previous_sigint)
        bar.close()
    with results.locked(out_dir):
        results.rebuild_csv(out_dir)

    status = EXIT_FAILED if tally.failed else EXIT_OK
    if build_report:
        status = max(status, _build_report(out_dir))
    minutes = (time.perf_counter() - started) / 60
    print(f"bench sweep: {tally.line(len(plan.configs))} in {minutes:.1f} min; rows in {out_dir / 'results.csv'}")
    return status


def _redo_note(out_dir: Path, execution: Execution, statuses: dict[str, str]) -> str | None:
    """Say why an execution that ran before runs again (a half-finished directory is recognised)."""
    run_dir = out_dir / "runs" / execution.run_name
    missing = len(execution.configs) - sum(s in COMPLETE_STATUSES for s in statuses.values())
    if (run_dir / RUNNING_MARK).exists():
        return (f"redo {execution.run_name}: left unfinished by a sweep that was killed; "
                f"{missing} of {len(execution.configs)} configurations missing")
    if statuses:
        return f"redo {execution.run_name}: {missing} of {len(execution.configs)} configurations missing or failed"
    return None


def _is_complete(execution: Execution, statuses: dict[str, str]) -> bool:
    return len(statuses) == len(execution.configs) and all(s in COMPLETE_STATUSES for s in statuses.values())


def _statuses(out_dir: Path, execution: Execution) -> dict[str, str]:
    """config_hash -> worst status of its rows, for the configurations of this execution that have rows."""
    grouped = rows_by_config(results.read_run(out_dir / "runs" / execution.run_name) or [])
    found = {}
    for cfg in execution.configs:
        rows = grouped.get(cfg.config_hash())
        if rows:
            bad = [r.get("status") for r in rows if r.get("status") not in COMPLETE_STATUSES]
            found[cfg.config_hash()] = str(bad[0]) if bad else str(rows[0].get("status"))
    return found


def _drop_unfinished_rows(out_dir: Path, execution: Execution) -> None:
    """Failed rows of a configuration about to run again go first, so that a failure now cannot be
    mistaken for the old one (the notebook would drop them too, if it gets that far)."""
    rows = results.read_run(out_dir / "runs" / execution.run_name) or []
    grouped = rows_by_config(rows)
    stale = {cfg.config_hash() for cfg in execution.configs
             if any(r.get("status") not in COMPLETE_STATUSES for r in grouped.get(cfg.config_hash(), []))}
    if stale:
        results.write_run(out_dir, execution.run_name, [r for r in rows if str(r.get("config_hash")) not in stale])


def _done(statuses: dict[str, str]) -> set[str]:
    return {h for h, status in statuses.items() if status in COMPLETE_STATUSES}


def _count(tally: Tally, statuses: dict[str, str], already: set[str] = frozenset()) -> None:
    """Tally each configuration once; those complete before this execution (kept by the notebook) are skipped."""
    for config_hash, status in statuses.items():
        if config_hash in already:
            tally.skipped += 1
        elif status == "ok":
            tally.complete += 1
        elif status == "unsupported":
            tally.unsupported += 1
        else:
            tally.failed[status] = tally.failed.get(status, 0) + 1


def _record_outcome(out_dir: Path, execution: Execution, outcome: "Outcome", env: dict) -> None:
    """Configurations the execution left without rows get a row saying why."""
    if outcome.status == "ok":
        status, message = "error", "the notebook finished without writing rows for this configuration"
    else:
        status, message = outcome.status, outcome.message
    columns = set(results.columns())
    extra = {k: v for k, v in env.items() if k in columns}  # failure rows still say which machine
    record_missing(out_dir, execution.run_name, execution.configs, status, message, extra)


# The plan's time estimate, from what a configuration costs beyond its timed windows (measured on
# 2-core CPUs with the default suite: a kernel start with torch and the model libraries imported,
# then per configuration the build, cold first step, FLOP count and warm-up, per repeat the
# window's slack past min_seconds). Meant to land within 2x of the real time, not closer.
EXECUTION_START_S = 6.0
CONFIG_BUILD_S = 3.0
REPEAT_SLACK_S = 0.3
PROBE_S = 8.0  # one batch-size probe in a fresh process (batch_size max)


def estimate_seconds(plan: SweepPlan) -> float:
    """A rough wall time for the plan, printed before it starts: never a measurement."""
    total = EXECUTION_START_S * len(plan.executions)
    for cfg in plan.configs:
        total += CONFIG_BUILD_S + cfg.repeats * (cfg.min_seconds + REPEAT_SLACK_S)
        if cfg.batch_size == "max":
            total += PROBE_S * max(1, math.ceil(math.log2(max(cfg.max_batch_size, 2))))
    return total


def plan_summary(plan: SweepPlan) -> str:
    """The one line a sweep prints before it starts."""
    seen = {k: _unique(getattr(c, k) for c in plan.configs) for k in ("model", "precision", "mode", "device")}
    parts = ", ".join(f"{len(v)} {k}{'s' if len(v) > 1 else ''}" for k, v in seen.items())
    minutes = estimate_seconds(plan) / 60
    return (f"plan: {len(plan.configs)} configuration(s) in {len(plan.executions)} execution(s) ({parts}); "
            f"about {minutes:.1f} min (an estimate; bench sweep --dry-run lists them)")


def dry_run(plan: SweepPlan, out_dir: Path) -> int:
    """Print every execution and its configurations; run and write nothing."""
    print(f"bench sweep: {plan_summary(plan)}; output would go to {out_dir}")
    for note in plan.notes:
        print(f"note: {note}")
    for execution in plan.executions:
        first = execution.configs[0]
        print(f"{execution.run_name}: {first.model} {first.precision} on {first.device}, {first.width}x{first.height}"
              f", repeats {first.repeats}, min {first.min_seconds:g} s, {first.steps} steps, warm-up {first.warmup_steps}")
        for cfg in execution.configs:
            print(f"  {cfg.mode:<5} batch {cfg.batch_size}")
    return EXIT_OK


def _sweep_header(plan: SweepPlan) -> str:
    lines = [f"# bench sweep: copy of {plan.source}"] + [f"# {note}" for note in plan.notes]
    return "\n".join(lines) + "\n"


def _plan_json(plan: SweepPlan) -> dict:
    return {"name": plan.name, "timeout_s": plan.timeout_s, "skipped": plan.skipped, "executions": [
        {"run_name": e.run_name, "configurations": [describe(c) for c in e.configs]} for e in plan.executions]}


def _build_report(out_dir: Path) -> int:
    """The HTML report of this directory; a failure to build it is reported, never hides the rows."""
    try:
        from bench_core.report import build_report
    except ImportError:
        print("bench sweep: report not built (bench_core.report.build_report is not available)", file=sys.stderr)
        return EXIT_FAILED
    try:
        path = build_report(result_dirs=[out_dir], out_html=out_dir / "report.html")
    except Exception as exc:  # noqa: BLE001 - the rows are safe; say why the report is missing
        print(f"bench sweep: report failed: {error_message(exc)}", file=sys.stderr)
        return EXIT_FAILED
    print(f"report: {path or out_dir / 'report.html'}")
    return EXIT_OK




# -- one execution in a child process ----------------------------------------------------------

@dataclass
class Outcome:
    status: str            # ok | error | crashed | timeout
    message: str = ""


def execute(execution: Execution, out_dir: Path, template: Path, timeout_s: float | None, force: bool,
            kernel: str = "python3") -> Outcome:
    """Run the template for one execution in a child process; kill its tree on timeout or Ctrl-C."""
    run_dir = out_dir / "runs" / execution.run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in run_dir.glob(".rows.json.*.tmp"):  # left by a process killed mid-write
        stale.unlink(missing_ok=True)
    outcome_path = run_dir / ".outcome.json"
    outcome_path.unlink(missing_ok=True)
    spec = {"template": str(template), "output": str(run_dir / "benchmark.ipynb"), "cwd": str(run_dir),
            "parameters": execution.parameters(out_dir, force), "kernel": kernel,
            "outcome": str(outcome_path), "parent_pid": os.getpid()}
    spec_path = run_dir / ".execution.json"
    results.atomic_write_text(spec_path, json.dumps(spec, indent=1))
    with open(run_dir / "papermill.log", "w") as log:
        child = subprocess.Popen([sys.executable, "-m", "bench_core.sweep", "--child", str(spec_path)],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True, env=_child_env())
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_tree(child.pid)
            child.wait()
            message = f"execution exceeded timeout_s={timeout_s:g} s; its processes were killed"
            _banner(run_dir / "benchmark.ipynb", f"Stopped by bench sweep: {message}.")
            return Outcome("timeout", message)
        except BaseException:  # Ctrl-C, SIGTERM: take the kernel down with us
            kill_tree(child.pid)
            child.wait()
            _banner(run_dir / "benchmark.ipynb", f"Interrupted: {INTERRUPTED}.")
            raise
    try:
        found = json.loads(outcome_path.read_text())
        return Outcome(found["status"], found.get("message", ""))
    except (OSError, ValueError, KeyError):
        return Outcome("crashed", f"the papermill process exited with status {child.returncode} without an "
                                  f"outcome (see {run_dir / 'papermill.log'})")


def _child_env() -> dict:
    env = dict(os.environ)
    # MPLBACKEND=Agg (headless runs) would stop the kernel's inline figures; the notebook picks its own.
    env.pop("MPLBACKEND", None)
    return env


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every descendant, including ones in other sessions (the kernel)."""
    import psutil
    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(procs, timeout=KILL_GRACE_S)


def _banner(notebook: Path, text: str) -> None:
    """Put a note at the top of a notebook that was stopped from outside (papermill could not)."""
    import nbformat
    try:
        nb = nbformat.read(notebook, as_version=4)
    except Exception:  # noqa: BLE001 - absent or cut off mid-write: nothing to annotate
        return
    cell = nbformat.v4.new_markdown_cell(f'<span style="color:red; font-size:1.5em;">{text}</span>')
    cell.metadata["tags"] = ["bench-sweep-banner"]
    nb.cells = [c for c in nb.cells if "bench-sweep-banner" not in c.metadata.get("tags", [])]
    nb.cells.insert(0, cell)
    results.atomic_write_text(notebook, nbformat.writes(nb))


def _sigterm_as_interrupt():
    """SIGTERM (a scheduler, `kill`) stops the sweep as cleanly as Ctrl-C does."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        return lambda: None
    return lambda: signal.signal(signal.SIGTERM, previous)


# The child: runs papermill for one execution and writes its outcome.

def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGTERM this process when the sweep dies, even by SIGKILL."""
    if sys.platform.startswith("linux"):
        import ctypes
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the sweep died before prctl took effect
        os._exit(EXIT_INTERRUPTED)


def _on_term(signum, frame):
    import psutil
    with contextlib.suppress(psutil.Error):
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
    os._exit(128 + signum)


def child_main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    signal.signal(signal.SIGTERM, _on_term)
    _die_with_parent(spec["parent_pid"])
    import papermill as pm
    from nbclient.exceptions import DeadKernelError
    try:
        pm.execute_notebook(spec["template"], spec["output"], parameters=spec["parameters"],
                            kernel_name=spec["kernel"], progress_bar=False, log_output=False, cwd=spec["cwd"],
                            start_timeout=180, extra_arguments=["--IPKernelApp.log_level=CRITICAL"])
        outcome = Outcome("ok")
    except pm.PapermillExecutionError as exc:
        outcome = Outcome("error", f"{exc.ename}: {first_line(str(exc.evalue))}")
    except DeadKernelError as exc:
        outcome = Outcome("crashed", f"the kernel died (DeadKernelError: {first_line(str(exc)) or 'Kernel died'})")
        _banner(Path(spec["output"]), f"The kernel died during this execution: {outcome.message}.")
    except Exception as exc:  # noqa: BLE001 - kernel failed to start, notebook unreadable, ...
        outcome = Outcome("error", error_message(exc))
    results.atomic_write_text(Path(spec["outcome"]), json.dumps(outcome.__dict__))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.exit(child_main(sys.argv[2]))
    sys.exit("usage: python -m bench_core.sweep --child SPEC.json (internal; use `bench sweep FILE`)")
