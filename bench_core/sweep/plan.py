"""A sweep file as a plan: its configurations, grouped into papermill executions, and an estimate.

One papermill execution per (device, model): all its configurations (precisions, modes, batch sizes,
input shapes) share one kernel (each run sets and restores the process-wide numerics knobs it needs),
so the kernel start, imports and the device's context are paid once per model; or, where the sweep file
says `executions: device`, once per device for all its models.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_core.capability import EMULATED
from bench_core.config.mistakes import ConfigErrors, Mistakes
from bench_core.config.schema import BenchConfig, check_known_keys
from bench_core.results.keys import load_text
from bench_core.config.sweepfile import (
    EMULATED_CHOICES,
    EXECUTION_CHOICES,
    MAX_CONFIGS,
    SELECTOR_CHOICES,
    SELECTOR_KEYS,
    SWEEP_KEYS,
    grids,
    parse_runs,
    parse_timeout,
)
from bench_core.config.yamlfile import load_yaml_mapping
from bench_core.devices import Backend, available_devices, resolve_device
from bench_core.errors import EXIT_OK, ConfigError
from bench_core.measure import telemetry
from bench_core.sweep.notebook import describe, safe_name
from bench_core.workload.precision import resolve_precision


@dataclass
class Execution:
    """One papermill execution: every configuration of one model (or, `executions: device`, of all the
    sweep's models) on one device."""
    run_name: str
    configs: list[BenchConfig]

    @property
    def models(self) -> list[str]:
        return unique(c.model for c in self.configs)

    def parameters(self, out_dir: Path, force: bool) -> dict[str, Any]:
        """The template's parameters: the first configuration's fields, and each configuration as the
        fields in which it differs from them (the first: none)."""
        values = self.configs[0].to_dict()
        configurations = [{k: v for k, v in cfg.to_dict().items() if v != values[k]} for cfg in self.configs]
        return {**values, "configurations": configurations, "out_dir": str(out_dir), "run_name": self.run_name,
                "force": force}

    @property
    def label(self) -> str:
        first, models = self.configs[0], self.models
        named = first.model if len(models) == 1 else f"{len(models)} models"
        return f"{named} {'/'.join(unique(c.precision for c in self.configs))} on {first.device}"


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
    runs: int = 1                       # separate runs of each configuration (runs: N)
    # The report's: the GPUs it predicts and their prices per GPU-hour, as the file gives them (its keys
    # predict_gpus and price; checked by the command, bench_core.predict.prices.report_choices).
    predict_gpus: Any = None
    prices: Any = None
    folder: str = ""                    # its folder under outputs/: the name, or a selector's own file name

    @property
    def out_name(self) -> str:
        return self.folder or self.name

    @property
    def measurements(self) -> int:
        """Configurations times runs: what the sweep's progress and tally count."""
        return sum(len(e.configs) for e in self.executions)


def with_runs(plan: SweepPlan, runs: int) -> SweepPlan:
    """The plan with each execution run `runs` times, each run in its own folder (the first keeps the
    plain name, so a sweep run once before is its first run): every execution once, then again, so a
    slow drift of the machine spreads over all configurations instead of falling on one."""
    runs = parse_runs(runs)
    single = plan.executions[:len(plan.executions) // plan.runs]  # the first run's block
    executions = [Execution(run_name=e.run_name if r == 1 else f"{e.run_name}-run{r}", configs=e.configs)
                  for r in range(1, runs + 1) for e in single]
    return dataclasses.replace(plan, executions=executions, runs=runs)


def load_sweep(path: str | Path) -> SweepPlan:
    """Read, select (`use:`) and validate a sweep file; ConfigError on any problem."""
    path = Path(path)
    data = load_yaml_mapping(path, "sweep")
    notes, folder = [], ""
    if "use" in data:
        # The results of `bench sweep params/default.yaml` go to outputs/default on every machine,
        # whichever file it selected there (the README, the Makefile and the Docker image say so).
        check_known_keys(data, list(SELECTOR_KEYS), where=f"sweep selector {path.name}")
        choice, chosen = _select(data["use"], path)
        folder = path.stem
        notes.append(f"{path.name} selected {chosen.name} ({choice}); its results go to outputs/{folder} unless --out "
                     "says otherwise")
        path = chosen
        data = load_yaml_mapping(path, "sweep")
        if "use" in data:
            raise ConfigError("use", f"{path.name} is itself a selector; point `use` at a sweep file")
    plan = parse_sweep(data, default_name=path.stem, where=str(path))
    plan.text, plan.source, plan.notes, plan.folder = path.read_text(), str(path), notes + plan.notes, folder
    return plan


def _select(use: Any, path: Path) -> tuple[str, Path]:
    """`use: {gpu: FILE, cpu: FILE}` picks by the hardware present (mps falls back to cpu)."""
    if not isinstance(use, dict) or not use:
        raise ConfigError("use", f"must map {', '.join(SELECTOR_CHOICES)} to sweep files, got {use!r}")
    check_known_keys(use, list(SELECTOR_CHOICES), where="use")
    if "cpu" not in use:
        raise ConfigError("use", "needs a `cpu` entry: the file to run when no GPU is present")
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


def parse_sweep(data: Any, default_name: str = "sweep", where: str = "the sweep file") -> SweepPlan:
    """Validate a sweep dict and expand it into configurations and executions. Every mistake is said at once
    (config.mistakes): each part is checked on its own, then every combination the rest allows."""
    if not isinstance(data, dict):
        raise ConfigError("sweep", f"must be a mapping of keys to values, got {type(data).__name__}")
    found = Mistakes()
    with found.kept():
        check_known_keys(data, list(SWEEP_KEYS), where="sweep file")
    name = data.get("name", default_name)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", name):
        found.add(ConfigError("name", f"must be a folder name (letters, digits, '.', '_', '-'), got {name!r}"))
    if not isinstance(data.get("description", ""), str):
        found.add(ConfigError("description", f"must be text, got {data['description']!r}"))
    timeout_s = None
    with found.kept():
        timeout_s = parse_timeout(data.get("timeout_s"))
    with found.kept():
        parse_runs(data.get("runs", 1))
    emulated = data.get("emulated", "run")
    if emulated not in EMULATED_CHOICES:
        found.add(ConfigError("emulated", f"got {emulated!r}; allowed: {', '.join(EMULATED_CHOICES)}"))
    per = data.get("executions", "model")
    if per not in EXECUTION_CHOICES:
        found.add(ConfigError("executions", f"got {per!r}; allowed: {', '.join(EXECUTION_CHOICES)} (one papermill "
                                            "execution per model on each device, or per device)"))
    fields = BenchConfig.field_names()

    settings = data.get("settings") or {}
    if not isinstance(settings, dict):
        found.add(ConfigError("settings", f"must be a mapping of BenchConfig fields to values, got {settings!r}"))
        settings = {}
    with found.kept():
        check_known_keys(settings, fields, where="settings")
    settings = {k: v for k, v in settings.items() if k in fields}  # the known ones still check every combination

    entries = []
    with found.kept():
        entries = grids(data.get("grid"), fields, found)
    count = sum(math.prod(len(values) for values in grid.values()) for grid in entries)
    if count > MAX_CONFIGS:
        found.add(ConfigError("grid", f"expands to {count} configurations; at most {MAX_CONFIGS} per sweep"))
        entries = []

    configs = _configs(entries, settings, found)
    found.raise_any(where)
    configs, notes, skipped = _emulated(configs, emulated)
    if not configs:
        raise ConfigError("emulated", "skip leaves no configuration: every precision of this sweep is emulated "
                                      "here; " + "; ".join(notes))
    plan = SweepPlan(name=name, configs=configs, executions=plan_executions(configs, per=per), timeout_s=timeout_s,
                     notes=notes, skipped=skipped, predict_gpus=data.get("predict_gpus"), prices=data.get("price"))
    return with_runs(plan, data.get("runs", 1))


def _configs(entries: list[dict[str, list]], settings: dict, found: Mistakes) -> list[BenchConfig]:
    """Every combination's BenchConfig, each once; a mistake met in several combinations is said once, with
    how many it is in."""
    configs, seen, wrong = [], set(), {}
    for grid in entries:
        for combo in itertools.product(*grid.values()):
            chosen = dict(zip(grid, combo))
            try:
                cfg = _config({**settings, **chosen}, chosen, settings)
            except ConfigError as exc:
                for error in getattr(exc, "errors", [exc]):
                    wrong.setdefault(str(error).split(" (grid combination: ")[0], []).append(error)
                continue
            if cfg.config_hash() not in seen:
                seen.add(cfg.config_hash())
                configs.append(cfg)
    for first, *others in wrong.values():
        if others and first.field.isidentifier() and "grid combination" in str(first):
            first = ConfigError(first.field, f"{str(first)[len(first.field) + 2:-1]}; and {len(others)} more)")
        found.add(first)
    return configs


def _emulated(configs: list[BenchConfig], policy: str) -> tuple[list[BenchConfig], list[str], list[dict]]:
    """Find the precisions this machine only emulates; leave them out when the policy says skip."""
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


def _config(values: dict, chosen: dict, settings: dict) -> BenchConfig:
    """One BenchConfig; each of its errors names the field and, when the field is not a setting, the grid
    combination."""
    try:
        cfg = BenchConfig.from_dict(values)
        resolve_device(cfg.device)  # an absent device is bad input here, as for `bench run`
        # More processes than this machine has devices is not refused here: a scaling sweep
        # (1, 2, 4, 8 devices) runs what fits and records the rest as `unsupported` rows.
    except ConfigError as exc:
        errors = [_in_combination(e, chosen, settings) for e in getattr(exc, "errors", [exc])]
        raise errors[0] if len(errors) == 1 else ConfigErrors(errors) from None
    return cfg


def _in_combination(exc: ConfigError, chosen: dict, settings: dict) -> ConfigError:
    if not exc.field.isidentifier():  # already quoted by ConfigError: pass it on as it is
        return exc
    problem = str(exc)[len(exc.field) + 2:]
    if len(chosen) > 1 and exc.field not in settings:
        combo = ", ".join(f"{k}={v!r}" for k, v in chosen.items() if k != exc.field)
        problem = f"{problem} (grid combination: {combo})"
    return ConfigError(exc.field, problem)


def plan_executions(configs: list[BenchConfig], apart=None, per: str = "model") -> list[Execution]:
    """One execution per (device, model), whatever its configurations: they share a kernel (each run
    sets and restores the process-wide numerics knobs it needs), so the process and kernel start and
    the imports are paid once per model (the template takes the exact list: Execution.parameters);
    `per` "device": once per device. `apart(cfg)`, when given, splits them further: bench slurm keeps
    each job shape (nodes x processes x GPUs) apart, since one array task has one shape."""
    groups: dict[tuple, list[BenchConfig]] = {}
    for cfg in configs:
        model = cfg.model if per == "model" else None
        groups.setdefault((cfg.device, model, apart(cfg) if apart else None), []).append(cfg)
    return [Execution(run_name=_run_name(group), configs=group) for group in groups.values()]


def _run_name(configs: list[BenchConfig]) -> str:
    """Stable across re-runs (so completed work is found), different when any setting differs."""
    import hashlib

    first = configs[0]
    digest = hashlib.sha256(" ".join(sorted(c.config_hash() for c in configs)).encode()).hexdigest()[:8]
    device = _device_label(first.device)
    precisions = "-".join(unique(c.precision for c in configs))
    models = unique(c.model for c in configs)
    named = first.model if len(models) == 1 else f"{len(models)}-models"
    return safe_name(f"{device}-{named}-{precisions}-{digest}")


def _device_label(name: str) -> str:
    """The device a run folder is named for: as resolved here (cuda -> cuda:0), or as written when
    this machine lacks it (bench slurm plans executions for the cluster's nodes)."""
    try:
        return str(resolve_device(name))
    except ConfigError:
        return name


def unique(values) -> list:
    return list(dict.fromkeys(values))


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
    for cfg in plan.configs * plan.runs:
        total += CONFIG_BUILD_S + cfg.repeats * (cfg.min_seconds + REPEAT_SLACK_S)
        if cfg.batch_size == "max":
            total += PROBE_S * max(1, math.ceil(math.log2(max(cfg.max_batch_size, 2))))
    return total


def plan_summary(plan: SweepPlan, listed: bool = False) -> str:
    """The one line a sweep prints before it starts (`listed`: the dry run, which lists them below it)."""
    seen = {k: unique(getattr(c, k) for c in plan.configs) for k in ("model", "precision", "mode", "device")}
    parts = ", ".join(f"{len(v)} {k}{'s' if len(v) > 1 else ''}" for k, v in seen.items())
    minutes = estimate_seconds(plan) / 60
    runs = f", each in {plan.runs} separate runs" if plan.runs > 1 else ""
    where = "" if listed else "; bench sweep --dry-run lists them"
    return (f"plan: {len(plan.configs)} configuration(s){runs} in {len(plan.executions)} execution(s) ({parts}); "
            f"about {minutes:.1f} min (an estimate{where})")


def dry_run(plan: SweepPlan, out_dir: Path) -> int:
    """Print every execution and its configurations; run and write nothing."""
    busy = telemetry.BusyNow()
    print(f"bench sweep: {plan_summary(plan, listed=True)}; output would go to {out_dir}")
    for note in plan.notes:
        print(f"note: {note}")
    loaded = busy.text()
    if loaded:
        print(f"note: {loaded}")
    for execution in plan.executions:
        first = execution.configs[0]
        inputs = [describe(cfg)["input"] for cfg in execution.configs]
        shared = f", {inputs[0]}" if len(set(inputs)) == 1 else ""
        print(f"{execution.run_name}: {execution.label}{shared}, repeats {first.repeats}, "
              f"min {first.min_seconds:g} s, {first.steps} steps, warm-up {first.warmup_steps}")
        width = max(len(c.precision) for c in execution.configs)
        modes = max(len(c.mode) for c in execution.configs)
        several = len(execution.models) > 1  # (executions: device: each line names its model)
        names = max(len(c.model) for c in execution.configs)
        for cfg, shape in zip(execution.configs, inputs):  # a configuration a line: precision, mode, batch (input)
            load = load_text(cfg.to_dict()) or f"batch {cfg.batch_size}"  # a serving point's load: it has no batch
            model = f"{cfg.model:<{names}} " if several else ""
            print(f"  {model}{cfg.precision:<{width}} {cfg.mode:<{modes}} {load}" + ("" if shared else f", {shape}"))
    return EXIT_OK


def sweep_header(plan: SweepPlan) -> str:
    lines = [f"# bench sweep: copy of {plan.source}"] + [f"# {note}" for note in plan.notes]
    return "\n".join(lines) + "\n"


def plan_json(plan: SweepPlan) -> dict:
    return {"name": plan.name, "timeout_s": plan.timeout_s, "skipped": plan.skipped, "executions": [
        {"run_name": e.run_name, "configurations": [describe(c) for c in e.configs]} for e in plan.executions]}


def check_sweep_folder(out_dir: Path | str, plan: SweepPlan, field: str = "out") -> None:
    """A sweep's folder is new, bench's own (files.check_results_folder), and no other sweep's: a sweep
    rewrites its sweep.yaml and plan.json, so another sweep's (another name) would lose its record and
    mix its rows with this one's. The same sweep again resumes it."""
    path = Path(out_dir) / "plan.json"
    if not path.exists():
        return
    try:
        other = json.loads(path.read_text()).get("name")
    except (OSError, ValueError, AttributeError, RecursionError):
        other = None
    if not isinstance(other, str):
        raise ConfigError(field, f"{out_dir} holds a plan.json that no bench sweep wrote, which this sweep would "
                                 "replace; allowed: a new or empty folder, or this sweep's own")
    if other != plan.name:
        raise ConfigError(field, f"{out_dir} holds the sweep {other!r}, which a sweep named {plan.name!r} would "
                                 f"overwrite; allowed: another --out (bench report reads several folders), or the "
                                 f"sweep {other!r} again to resume it")
