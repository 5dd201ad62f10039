"""`bench sweep FILE`: run a params/*.yaml grid through notebooks/benchmark.ipynb with papermill. Its flags are
cli/flags.py's.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TextIO

from bench_core import results
from bench_core.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED, ConfigError
from bench_core.files import check_results_folder
from bench_core.predict.prices import report_choices
from bench_core.results.disturbed import disturbed_note
from bench_core.results.rows import error_message
from bench_core.sweep.execute import (
    Progress,
    find_template,
    run_sweep,
    sweep_lock,
)
from bench_core.sweep.plan import Execution, SweepPlan, check_sweep_folder, dry_run, load_sweep, with_runs


def main(args: argparse.Namespace) -> int:
    plan = load_sweep(args.file)
    plan.predict_gpus, plan.prices = report_choices(plan.predict_gpus, plan.prices)  # bad ones: exit 2 now
    if args.runs is not None:
        plan = with_runs(plan, args.runs)
    template = find_template(args.template)
    out = Path("outputs") / plan.out_name if args.out is None else args.out
    if args.dry_run:
        return dry_run(plan, Path(out).resolve())
    check_kernel(args.kernel)
    check_results_folder(out)  # before anything runs: a sweep that cannot save its rows does not start
    check_sweep_folder(out, plan)
    out_dir = Path(out).resolve()
    with sweep_lock(out_dir):
        try:
            status, closing = run_sweep(plan, out_dir, template, force=args.force, kernel=args.kernel,
                                        progress=SweepProgress(plan))
        except OSError as exc:  # a full disk, a folder gone read-only: say what is safe
            saved = sum(1 for _ in results.iter_rows(out_dir))
            print(f"bench sweep: error: could not write to {out_dir}: {exc.strerror or exc}; {saved} rows "
                  f"were saved before that (in {out_dir / 'runs'}), the configurations after them were not "
                  f"run. Free space and run the same command again: it resumes, skipping what is complete.",
                  file=sys.stderr)
            return EXIT_FAILED
        if status not in (EXIT_INTERRUPTED, EXIT_TERMINATED) and not args.no_report:
            status = max(status, report_step(out_dir, plan))
    # The tally's last word: figures of the directory measured beside other work say so, as bench run's do.
    note = disturbed_note(list(results.iter_rows(out_dir)))
    print(closing + (f"; {note}" if note else ""))
    return status


def check_kernel(name: str) -> None:
    """The Jupyter kernel the executions run on exists (else every execution would be a failed row)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel  # (0.2 s; papermill's child needs it anyway)
    specs = KernelSpecManager()
    try:
        specs.get_kernel_spec(name)
    except NoSuchKernel:
        raise ConfigError("kernel", f"no Jupyter kernel named {name!r}; allowed: "
                                    f"{', '.join(sorted(specs.find_kernel_specs()))} (jupyter kernelspec list)") from None


class SweepProgress(Progress):
    """Configurations done, the last finished configuration's median throughput and the time left,
    estimated from the executions that ran (a skipped one takes no time): one line that tqdm
    redraws on a terminal, a plain line per execution started and finished otherwise (a CI log)."""

    def __init__(self, plan: SweepPlan, stream: TextIO | None = None) -> None:
        self.name, self.stream = plan.name, stream or sys.stderr
        self.total, self.done = plan.measurements, 0  # configurations x runs
        self.ran, self.ran_s = 0, 0.0  # configurations of the executions that ran, and their seconds
        self.last = ""
        self.terminal = self.stream.isatty()
        self.bar = None  # drawn at the first execution, below what the sweep printed before it
        self.unit = "configurations" if plan.runs == 1 else "configuration runs"
        self.shown, self.started = 0, time.perf_counter()

    def skipped(self, execution: Execution) -> None:
        self._advance(len(execution.configs))

    def start(self, execution: Execution) -> None:
        self.shown = 0  # configurations of this execution already counted as done (running)
        self.started = time.perf_counter()
        self._show(f"running {execution.label}", with_last=False)

    def running(self, execution: Execution, done: int, last: str) -> None:
        """Each configuration of a running execution as its rows come (one execution per device: the whole sweep)."""
        if len(execution.models) == 1 or done <= self.shown or done >= len(execution.configs):
            return  # (an execution of one model is shown as it ends: its configurations take seconds)
        self.last = last or self.last
        # the time left: from this execution's configurations so far, until executions have finished
        self.ran, self.ran_s = self.ran + done - self.shown, self.ran_s + time.perf_counter() - self.started
        self.started = time.perf_counter()
        self._advance(done - self.shown, f"running {execution.label}")
        self.shown = done

    def finished(self, execution: Execution, seconds: float, last: str) -> None:
        left = len(execution.configs) - self.shown
        self.ran, self.ran_s, self.last = self.ran + left, self.ran_s + time.perf_counter() - self.started, last or self.last
        self._advance(left, f"finished {execution.label} in {_duration(seconds)}")

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def _advance(self, configurations: int, event: str = "") -> None:
        self.done += configurations
        if event:
            self._show(event, redraw=False)
        if self.terminal:
            self._bar().update(configurations)  # redraws, with the text _show left

    def _show(self, event: str, with_last: bool = True, redraw: bool = True) -> None:
        """On a terminal, the tail of the bar; in a log, one line (the one that starts an execution
        leaves out the last throughput: the line before it gave it)."""
        left = self.total - self.done
        if not self.ran:
            estimate = "time left: estimating"
        else:
            estimate = f"about {_duration(left * self.ran_s / self.ran)} left" if left else ""
        last = f"last {self.last}" if self.last else ""
        if self.terminal:  # the count is on the bar; the time left before the last figure, which a
            # disturbed mark lengthens, so that a narrow terminal cuts the figure's tail, not the estimate
            self._bar().set_postfix_str("; ".join(p for p in (event, estimate, last) if p), refresh=redraw)
        else:
            done = f"{self.done}/{self.total} {self.unit} done"
            self.write("bench sweep: " + "; ".join(p for p in (event, done, last if with_last else "", estimate) if p))

    def _bar(self):
        if self.bar is None:
            from tqdm import tqdm  # (only a sweep on a terminal draws a bar)
            self.bar = tqdm(total=self.total, initial=self.done, desc=self.name, file=self.stream, dynamic_ncols=True,
                            bar_format="{desc}: {n_fmt}/{total_fmt} " + self.unit + " |{bar}| {elapsed}{postfix}",
                            delay=0.5)  # drawn once it has something to say (set_postfix_str draws it)
        return self.bar


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 90 * 60 else f"{seconds / 3600:.1f} h"


def report_step(out_dir: Path, plan: SweepPlan | None = None) -> int:
    """The HTML report of this directory (predicting the GPUs the sweep file names, at its prices); a failure
    to build it is reported, never hides the rows."""
    # The report command's own module, imported when a report is made: with pandas, scipy and matplotlib
    # it costs 0.7 s at the start of every sweep (and of every SLURM task), --no-report or not.
    from bench_core.summary.report import build_report
    try:
        path = build_report(result_dirs=[out_dir], out_html=out_dir / "report.html",
                            predict_gpus=plan.predict_gpus if plan else None, prices=plan.prices if plan else None)
    except Exception as exc:  # noqa: BLE001 - the rows are safe; say why the report is missing
        print(f"bench sweep: report failed: {error_message(exc)}", file=sys.stderr)
        return EXIT_FAILED
    print(f"report: {path or out_dir / 'report.html'}")
    return EXIT_OK
