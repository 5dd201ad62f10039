"""`bench acceptance`: does everything work on this machine, and how fast? One command, a few
minutes: the environment, `bench sysinfo`, the acceptance sweep through the real pipeline
(`bench sweep`: papermill and the template notebook, every family and GPU path once), `bench
selftest --quick`, `bench report`; then the checks that must hold on a GPU, each judged from the
rows just written, and a table of them (bench_core/summary/acceptance.py).

Written for the first run on a lent GPU machine (docs/development.md#first-light-on-a-lent-gpu):
each step runs as a child process within its share of one time budget, so a step that hangs or
crashes costs its own share and the rest still runs; whatever was measured stays in the output
folder, and the table says what passed, what failed and what could not be checked. On a machine
without a GPU the same command rehearses itself with the CPU sweep (params/acceptance.yaml picks).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil
import torch

from bench_core.files import atomic_write_text
from bench_core.launch.supervisor import python_command, supervise
from bench_core.measure import environment

SWEEP = "params/acceptance.yaml"           # selects gpu-acceptance.yaml or acceptance-cpu.yaml
DEFAULT_OUT = "outputs/acceptance"
DEFAULT_BUDGET_S = 540.0
# Shares of what is left of the budget when a step starts; the sweep gets the rest, less what the
# steps after it are kept (so a sweep that runs long cannot starve them).
RESERVED_AFTER_SWEEP_S = {"selftest": 180.0, "report": 30.0}


@dataclass
class Step:
    name: str
    args: list[str]              # bench arguments (run as `python -m bench_core ARGS`)
    log: str                     # file name under the output folder
    most_s: float                # at most this long, whatever the budget says
    keep_after_s: float = 0.0    # seconds of the budget kept for the steps after this one


@dataclass
class StepResult:
    name: str
    returncode: int | None
    seconds: float
    timed_out: bool
    last_line: str


@dataclass
class Acceptance:
    out: Path
    budget_s: float
    steps: list[StepResult] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)   # processes the steps left running
    skipped: tuple[str, ...] = ()                          # steps left out on purpose (--skip)


# Steps a run may leave out (--skip): the selftest's three minutes belong to a machine's first run, not to a
# comparison's second; the sweep is what every run is for.
SKIPPABLE = ("sysinfo", "selftest", "report")


def plan(out: Path, sweep: str = SWEEP, skip: tuple[str, ...] = ()) -> list[Step]:
    """The steps, in order: the sweep first (what is measured matters most), then the selftest
    and the report, each kept its share of the budget; less the `skip`ped ones, whose share the sweep gets."""
    kept = {name: s for name, s in RESERVED_AFTER_SWEEP_S.items() if name not in skip}
    steps = [
        Step("sysinfo", ["sysinfo"], "sysinfo.txt", 120.0),
        Step("sweep", ["sweep", sweep, "--out", str(out), "--no-report"], "sweep.log", math.inf,
             keep_after_s=sum(kept.values())),
        Step("selftest", ["selftest", "--quick", "--out", str(out / "selftest.json")], "selftest.log", 600.0,
             keep_after_s=kept.get("report", 0.0)),
        Step("report", ["report", str(out)], "report.log", 600.0),
    ]
    return [step for step in steps if step.name not in skip]


def run(out: Path, budget_s: float = DEFAULT_BUDGET_S, sweep: str = SWEEP,
        say: Callable[[str], None] = print, skip: tuple[str, ...] = ()) -> Acceptance:
    """Every step in turn (less the `skip`ped ones), each within its share of `budget_s`; then what was left
    running."""
    out.mkdir(parents=True, exist_ok=True)
    deadline, token = time.monotonic() + budget_s, uuid.uuid4().hex
    env = {**os.environ, RUN_MARK: token}
    result = Acceptance(out, budget_s, skipped=tuple(skip))
    write_environment(out)
    for name in skip:
        say(f"== {name}: left out (--skip)")
    for step in plan(out, sweep, skip):
        left = deadline - time.monotonic() - step.keep_after_s
        limit = min(step.most_s, left)
        if limit < 10:
            say(f"== {step.name}: skipped, {max(left, 0):.0f} s of the budget left")
            result.steps.append(StepResult(step.name, None, 0.0, True, "not started: budget spent"))
            continue
        say(f"== {step.name} (at most {limit:.0f} s): bench {' '.join(step.args)}")
        # Every line shown as it comes (say returns None: no line is claimed, the tail keeps them).
        outcome = supervise(python_command("-m", "bench_core", *step.args), env=env, limit_s=limit,
                            log_path=out / step.log, on_line=lambda line: say(f"   {line}"))
        result.steps.append(StepResult(step.name, outcome.returncode, round(outcome.seconds, 1), outcome.timed_out,
                                       outcome.last_line("")[:300]))
        ended = "stopped at its limit" if outcome.timed_out else f"exit {outcome.returncode}"
        say(f"== {step.name}: {ended} after {outcome.seconds:.0f} s")
    result.leftovers = leftover_processes(token)
    return result


# -- what the run leaves beside the rows ------------------------------------------------------------

def write_environment(out: Path) -> None:
    """environment.json (this package's fingerprint of the machine) and, where there is one, the
    driver's own account of the GPU (`nvidia-smi -q`)."""
    try:
        device = torch.device("cuda", 0) if torch.cuda.is_available() else None
        env = environment.collect(device)
    except Exception as exc:  # noqa: BLE001 - a broken environment is itself a finding
        env = {"error": f"{type(exc).__name__}: {exc}"}
    atomic_write_text(out / "environment.json", json.dumps(env, indent=1, default=str))
    if shutil.which("nvidia-smi"):
        try:
            text = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            text = f"nvidia-smi -q failed: {exc}"
        atomic_write_text(out / "nvidia-smi.txt", text)


RUN_MARK = "BENCH_ACCEPTANCE_RUN"   # in every step's environment, so in everything the steps start


def leftover_processes(token: str) -> list[str]:
    """Processes still running that carry this run's mark in their environment: a server, kernel
    or worker one of its steps started and should have stopped. Marked, not matched by command
    line: another run on the same machine (or another test of the same suite) is not this one's."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.info["pid"] == os.getpid():
            continue
        try:
            marked = proc.environ().get(RUN_MARK) == token
        except (psutil.Error, OSError):
            continue  # gone, or another user's: not ours
        if marked:
            found.append(f"{proc.info['pid']}: {' '.join(proc.info.get('cmdline') or [])[:120]}")
    return found
