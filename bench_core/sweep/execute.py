"""Running a sweep: `bench sweep FILE` runs a params/*.yaml grid through notebooks/benchmark.ipynb with papermill.

The whole file is validated first (every BenchConfig built, every device resolved): a bad key
or value is one line and exit 2, before anything is written. Then one papermill execution per
(device, model) -- all its precisions, modes and batch sizes share one kernel (each run sets and
restores the process-wide numerics knobs it needs), so the kernel start, imports and the device's
context are paid once per model -- each kept as DIR/runs/<run_name>/benchmark.ipynb beside its
rows.json; DIR/results.csv gathers every row.

Each execution runs in a child process (`python -m bench_core.sweep.child SPEC`, sweep/child.py) under
launch.supervisor, because that makes every failure mode killable and classifiable:
- a per-execution timeout (`timeout_s`) or Ctrl-C kills the whole tree -- child, Jupyter kernel
  (which jupyter_client starts in yet another session) and any torchrun workers;
- the child dies with the sweep (Linux PR_SET_PDEATHSIG) and the kernel with the child
  (ipykernel's parent poller), so a SIGKILLed sweep leaves nothing measuring in the background;
- the child writes its outcome (ok, papermill's `ename: evalue`, or a dead kernel) to a file.
It costs about a second per execution (a Python start and `import papermill`).

Where the sweep's wall time went is recorded as it goes (sweep/timing.py): each execution's account in
its run directory, the sweep's in DIR/timing.json and a table at its end.

Re-running a sweep skips executions whose configurations are all complete (status ok, or
unsupported, which a re-run cannot change) and re-runs the rest; `--force` re-runs all. A lock
on DIR/.sweep.lock refuses a second sweep into the same directory.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from filelock import FileLock, Timeout

from bench_core import results
from bench_core.devices import resolve_device
from bench_core.errors import (
    EXIT_FAILED,
    EXIT_OK,
    ConfigError,
    interrupted_by,
    interrupted_exit,
    interrupts_held,
)
from bench_core.files import TEMPLATE_ENV, shipped_notebook
from bench_core.launch.supervisor import python_command, supervise
from bench_core.measure import environment, telemetry
from bench_core.results.disturbed import RE_MEASURE, disturbed_rows
from bench_core.sweep import timing
from bench_core.sweep.child import Outcome, banner
from bench_core.sweep.notebook import COMPLETE_STATUSES, record_missing, rows_by_config
from bench_core.sweep.plan import (
    Execution,
    SweepPlan,
    estimate_seconds,
    plan_json,
    plan_summary,
    sweep_header,
)

INTERRUPTED = "stopped (Ctrl-C or SIGTERM) before this configuration finished"
RUNNING_MARK = ".running"  # in a run directory while its execution runs; left behind only by a killed sweep


def find_template(override: str | None = None) -> Path:
    """The template: --template, else $BENCH_TEMPLATE, else the project's notebooks/benchmark.ipynb
    (shipped in the package: files.shipped_notebook)."""
    given = override or os.environ.get(TEMPLATE_ENV)
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            source = "--template" if override else f"${TEMPLATE_ENV}"
            raise ConfigError("template", f"notebook not found: {path} (from {source})")
        return path.resolve()
    path = shipped_notebook("benchmark.ipynb")
    if not path.is_file():
        raise ConfigError("template", f"benchmark.ipynb not found in {path.parent} (an incomplete install? "
                                      f"reinstall notebook-bench); pass --template or set ${TEMPLATE_ENV}")
    return path.resolve()


@contextlib.contextmanager
def sweep_lock(out_dir: Path) -> Iterator[None]:
    """One sweep per output directory: a second one is refused with the holder's pid. The lock
    is released when this process ends, however it ends (filelock: fcntl or msvcrt)."""
    lock = FileLock(out_dir / ".sweep.lock")
    pid_file = out_dir / ".sweep.pid"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        lock.acquire(timeout=0)
    except Timeout:
        holder = pid_file.read_text().strip() if pid_file.is_file() else "unknown"
        raise ConfigError("out", f"{out_dir} is in use by another bench sweep (pid {holder}); "
                                 "wait for it to finish or choose another --out") from None
    except OSError as exc:
        raise ConfigError("out", f"cannot use {out_dir} as the output directory: {exc.strerror or exc}") from None
    try:
        pid_file.write_text(str(os.getpid()))
        yield
    finally:
        lock.release()


@dataclass
class Tally:
    complete: int = 0
    skipped: int = 0
    unsupported: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    not_run: int = 0

    def line(self, total: int, runs: int = 1) -> str:
        failed = sum(self.failed.values())
        detail = f" ({', '.join(f'{n} {s}' for s, n in sorted(self.failed.items()))})" if failed else ""
        unsupported = f", {self.unsupported} unsupported" if self.unsupported else ""
        not_run = f", {self.not_run} not run" if self.not_run else ""
        what = f"{total} configurations" if runs == 1 else f"{total // runs} configurations x {runs} runs"
        return (f"{what}: {self.complete} complete, {self.skipped} skipped (already complete)"
                f"{unsupported}, {failed} failed{detail}{not_run}")


class Progress:
    """What run_sweep reports as it goes; the command draws it (cli/sweep.py), this one is silent."""

    def skipped(self, execution: Execution) -> None:
        """An execution whose configurations are all complete already."""

    def start(self, execution: Execution) -> None:
        """An execution starts."""

    def running(self, execution: Execution, done: int, last: str) -> None:
        """While an execution runs: `done` of its configurations have rows; `last`: the latest's throughput."""

    def finished(self, execution: Execution, seconds: float, last: str) -> None:
        """An execution ended after `seconds`; `last`: its last configuration's throughput (last_throughput)."""

    def write(self, text: str) -> None:
        print(text, file=sys.stderr)

    def close(self) -> None:
        """The sweep ended (or was interrupted)."""


def run_sweep(plan: SweepPlan, out_dir: Path, template: Path, force: bool = False,
              kernel: str = "python3", progress: Progress | None = None) -> tuple[int, str]:
    """Run (or resume) every execution of the plan into out_dir, telling `progress` as it goes; return
    the exit status and the closing line (the tally), which the command prints last, after the report."""
    started, busy = time.time(), telemetry.BusyNow()
    results.atomic_write_text(out_dir / "sweep.yaml", sweep_header(plan) + plan.text)
    env = environment.collect(resolve_device(plan.configs[0].device))
    results.atomic_write_text(out_dir / "environment.json", json.dumps(env, indent=1, default=str))
    results.atomic_write_text(out_dir / "plan.json", json.dumps(plan_json(plan), indent=1))
    for note in plan.notes:
        print(f"bench sweep: {note}", file=sys.stderr)
    print(f"bench sweep: {plan_summary(plan)}", file=sys.stderr)
    loaded = busy.text()  # measured over the set-up above: no wait of its own
    if loaded:
        print(f"bench sweep: {loaded}", file=sys.stderr)
    try:
        return run_executions(plan, out_dir, template, force, kernel, progress, env)
    finally:  # interrupted too: what ran is accounted (a sweep that ran nothing keeps the last one's)
        account = timing.sweep_account(started, time.time(), timing.read_executions(out_dir, since=started))
        if account["executions"]:
            timing.write_sweep(out_dir, account)
            print(timing.table(account), file=sys.stderr)


def run_executions(plan: SweepPlan, out_dir: Path, template: Path, force: bool = False, kernel: str = "python3",
                   progress: Progress | None = None, env: dict | None = None) -> tuple[int, str]:
    """The executions of the plan, resumed (complete ones skipped), into out_dir; the sweep's own
    files (sweep.yaml, plan.json) are the caller's. A SLURM array task runs its one execution here.
    `env`: the environment failure rows carry (collected here when not given)."""
    env = env if env is not None else environment.collect(resolve_device(plan.configs[0].device))
    tally = Tally()
    started = time.perf_counter()
    progress = progress or Progress()
    index, running = 0, False
    try:  # (SIGTERM arrives as errors.Terminated, a KeyboardInterrupt: `bench` sets that up)
        for index, execution in enumerate(plan.executions):
            statuses = _statuses(out_dir, execution)
            if not force and _is_complete(execution, statuses):
                tally.skipped += len(execution.configs)
                progress.skipped(execution)
                continue
            note = _redo_note(out_dir, execution, statuses)
            if note and not force:
                progress.write(note)
            progress.start(execution)
            _drop_unfinished_rows(out_dir, execution)
            running = True
            mark = out_dir / "runs" / execution.run_name / RUNNING_MARK
            results.atomic_write_text(mark, str(os.getpid()))
            execution_started, spawned = time.perf_counter(), time.time()
            try:
                outcome = execute(execution, out_dir, template, plan.timeout_s, force, kernel,
                                  on_rows=lambda done, e=execution: progress.running(e, done, last_throughput(out_dir, e)))
                _record_outcome(out_dir, execution, outcome, env)
            finally:  # Ctrl-C included; only a SIGKILL leaves the mark
                mark.unlink(missing_ok=True)
            measured = {c.config_hash() for c in execution.configs} - (set() if force else _done(statuses))
            timing.write_execution(mark.parent, timing.execution_account(mark.parent, spawned, time.time(),
                                                                         outcome.marks, measured))
            running = False
            _count(tally, _statuses(out_dir, execution), already=set() if force else _done(statuses))
            progress.finished(execution, time.perf_counter() - execution_started, last_throughput(out_dir, execution))
    except KeyboardInterrupt as exc:
        progress.close()
        with interrupts_held():
            if running:
                _record_outcome(out_dir, plan.executions[index], Outcome("interrupted", INTERRUPTED), env)
                _count(tally, _statuses(out_dir, plan.executions[index]), already=set() if force else _done(statuses))
        tally.not_run += sum(len(e.configs) for e in plan.executions[index + running:])
        return interrupted_exit(exc), (f"bench sweep: interrupted ({interrupted_by(exc)}); "
                                       f"{tally.line(plan.measurements, plan.runs)}; rows in {out_dir / 'results.csv'}")
    finally:
        progress.close()
    with results.locked(out_dir):
        results.rebuild_csv(out_dir)

    status = EXIT_FAILED if tally.failed else EXIT_OK
    minutes = (time.perf_counter() - started) / 60
    return status, (f"bench sweep: {tally.line(plan.measurements, plan.runs)} in {minutes:.1f} min"
                    f"{against_estimate(plan, out_dir, minutes)}; rows in {out_dir / 'results.csv'}")


def against_estimate(plan: SweepPlan, out_dir: Path, minutes: float) -> str:
    """' (estimated 1.7 min; 12 of 20 repeats ran beside other processes: disturbed, re-measure on a quiet
    machine)' where the sweep took more than twice the plan's estimate or its repeats were disturbed, so that a
    slow sweep on a busy machine says why; '' otherwise."""
    rows = [r for e in plan.executions for r in results.read_run(out_dir / "runs" / e.run_name) or []]
    hit, flags = disturbed_rows(rows)
    ok = sum(r.get("status") == "ok" for r in rows)
    estimated = estimate_seconds(plan) / 60
    if not hit and minutes <= 2 * estimated:
        return ""
    busy = f"; {hit} of {ok} repeats were disturbed ({flags}): {RE_MEASURE}" if hit else ""
    return f" (estimated {estimated:.1f} min, for an idle machine{busy})"


def last_throughput(out_dir: Path, execution: Execution) -> str:
    """'resnet18 fp32 infer bs 8: 1,234 images/s', the median of the ok repeats of the execution's last
    configuration that has rows (or its status, when none is ok)."""
    grouped = rows_by_config(results.read_run(out_dir / "runs" / execution.run_name) or [])
    found = [grouped[c.config_hash()] for c in execution.configs if grouped.get(c.config_hash())]
    if not found:
        return ""
    line = results.summary_lines(found[-1])[0]
    name = f"{line['model']} {line['precision']} {line['mode']} bs {line['batch_size']}"
    median = line.get("throughput_median")  # in throughput_unit: a text model's tokens/s, not its sequences/s
    if median is None:
        return f"{name}: {line['status']}"
    unit = line.get("throughput_unit") or "samples/s"
    text = f"{name}: {median:,.0f} {unit}" if median >= 100 else f"{name}: {median:.3g} {unit}"
    if line.get("repeats_disturbed"):  # the figure is shown, and said to be untrustworthy (short: a bar's width)
        text += f" [DISTURBED {line['repeats_disturbed']}/{line['repeats_ok']}: {line['disturbed_by']}]"
    return text


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


def execute(execution: Execution, out_dir: Path, template: Path, timeout_s: float | None, force: bool,
            kernel: str = "python3", on_rows: Callable[[int], None] | None = None) -> Outcome:
    """Run the template for one execution in a child process; kill its tree on timeout (timeout_s a model of it)
    or Ctrl-C. `on_rows(done)`: as the kernel writes the rows of another configuration, how many have rows."""
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
    command = python_command("-m", "bench_core.sweep.child", str(spec_path))
    limit_s = timeout_s * len(execution.models) if timeout_s else None
    try:
        outcome = supervise(command, env=_child_env(), limit_s=limit_s, log_path=run_dir / "papermill.log",
                            tick=_rows_watch(run_dir, execution, on_rows) if on_rows else None)
    except BaseException:  # Ctrl-C, SIGTERM: the supervisor took the kernel down with it
        banner(run_dir / "benchmark.ipynb", f"Interrupted: {INTERRUPTED}.")
        raise
    if outcome.timed_out:
        models = len(execution.models)
        each = f" a model, {limit_s:g} s for its {models} models" if models > 1 else ""
        message = f"execution exceeded timeout_s={timeout_s:g} s{each}; its processes were killed"
        banner(run_dir / "benchmark.ipynb", f"Stopped by bench sweep: {message}.")
        return Outcome("timeout", message)
    try:
        found = json.loads(outcome_path.read_text())
        return Outcome(found["status"], found.get("message", ""), found.get("marks") or {})
    except (OSError, ValueError, KeyError):
        if outcome.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM):
            # Stopped from outside, not crashed: SLURM (scancel, requeue, a time limit) signals every
            # process of a job at once, and the child can end before this process's own SIGTERM lands.
            return Outcome("interrupted", INTERRUPTED)
        return Outcome("crashed", f"the papermill process exited with status {outcome.returncode} without an "
                                  f"outcome (see {run_dir / 'papermill.log'})")


def _rows_watch(run_dir: Path, execution: Execution, on_rows: Callable[[int], None]) -> Callable[[], None]:
    """A tick for the supervisor: when the run's rows file changes, how many of the execution's configurations
    have rows, said to `on_rows` when it grows (a sweep of one execution per device shows each configuration)."""
    path, wanted, seen = run_dir / "rows.json", {c.config_hash() for c in execution.configs}, {"stamp": None, "done": 0}

    def tick() -> None:
        with contextlib.suppress(OSError):
            stamp = path.stat().st_mtime_ns
            if stamp != seen["stamp"]:
                seen["stamp"] = stamp
                done = len(wanted & set(rows_by_config(results.read_run(run_dir) or [])))
                if done > seen["done"]:
                    seen["done"] = done
                    on_rows(done)
    return tick


def _child_env() -> dict:
    env = dict(os.environ)
    # MPLBACKEND=Agg (headless runs) would stop the kernel's inline figures; the notebook picks its own.
    env.pop("MPLBACKEND", None)
    return env
