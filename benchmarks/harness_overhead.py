"""Harness overhead: the time bench_core adds to a step, against a bare loop of the same step (issue 59 item 2).

One model, batch, input and precision, measured by:
  bare         the simplest correct loop a person would write (built once, timed on the host clock between
               two synchronizes, as many steps as min_seconds takes);
  run          `bench run` in this process (run_benchmark: build, checks, warm-up, telemetry, one window);
  run-quiet    the same with the telemetry sampler off (a diagnostic: the sampler's share; not a default arm);
  bare-marks   the bare loop marking the harness's step clock after each step (a diagnostic: the clock's share,
               CUDA events on a GPU; not a default arm);
  run-process  `bench run --json` in a process of its own, `rounds` windows;
  notebook     notebooks/benchmark.ipynb through papermill (as bench sweep runs it), `rounds` windows.
The in-process arms are interleaved round by round (the bare loop first in even rounds, last in odd ones);
each process arm runs once, between rounds. Compared: seconds per step over a window (window seconds /
steps: what throughput divides by), the median over windows; the harness may add at most 1 %.

    .venv/bin/python benchmarks/harness_overhead.py                      # resnet18 infer, batch 16, 64 px, CPU
    .venv/bin/python benchmarks/harness_overhead.py --device cuda --batch-size 1 --size 224 --precision amp-bf16

On a shared machine the neighbours' load is in every figure: judge the 1 % on a quiet one.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from bench_core import BenchConfig, run_benchmark
from bench_core.devices import Backend, resolve_device
from bench_core.measure import telemetry
from bench_core.workload.models import resolve_model
from bench_core.workload.precision import resolve_precision
from sampler_overhead import NoSampler  # the script beside this one (on sys.path): the sampler's interface, reading nothing

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 0.01  # the harness may add 1 % to a step
DEFAULT_ARMS = ("bare", "run", "run-process", "notebook")


class BareLoop:
    """The loop a careful person writes: model and batch made once, autocast or a cast as the precision
    says, synchronize before and after the timed steps (no per-step clock)."""

    def __init__(self, cfg: BenchConfig):
        self.cfg, self.backend = cfg, Backend.for_device(resolve_device(cfg.device))
        device, precision = self.backend.device, resolve_precision(cfg.precision)
        self.default_threads = torch.get_num_threads()
        self.threads()
        self.backend.bind()
        self.backend.apply_knobs(precision, cfg.cudnn_benchmark)
        torch.manual_seed(cfg.seed)
        dtype = getattr(torch, precision.cast_dtype) if precision.cast_dtype else torch.float32
        self.model = resolve_model(cfg.model).build(cfg).to(device=device, dtype=dtype).train(cfg.mode == "train")
        self.x = torch.randn(cfg.batch_size, 3, cfg.height, cfg.width, device=device).to(dtype)
        self.y = torch.randint(0, 1000, (cfg.batch_size,), device=device)
        self.autocast = getattr(torch, precision.autocast_dtype) if precision.autocast_dtype else None
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-4, momentum=0.9) if cfg.mode == "train" else None
        for _ in range(max(cfg.warmup_steps, 1)):
            self.step()
        self.backend.synchronize()
        start = time.perf_counter()
        self.step()
        self.backend.synchronize()
        self.pace = max(time.perf_counter() - start, 1e-5)  # a step's seconds: how many marks a window needs

    def threads(self) -> None:
        """The harness's thread count (--threads), set again before each window: a run puts back its own."""
        torch.set_num_threads(self.cfg.num_threads or self.default_threads)

    def step(self) -> None:
        with torch.autocast(self.backend.type, dtype=self.autocast, enabled=self.autocast is not None):
            if self.opt is None:
                with torch.inference_mode():
                    self.model(self.x)
                return
            self.opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()

    def window(self, marks: bool = False) -> float:
        """Seconds per step over one window of at least cfg.steps steps and cfg.min_seconds seconds;
        `marks`: the harness's step clock marked after each step, as its window does."""
        self.threads()
        self.backend.synchronize()
        clock = self.backend.new_clock(expected_marks=1 + int(self.cfg.min_seconds / self.pace * 1.25) + self.cfg.steps) \
            if marks else None
        start, steps = time.perf_counter(), 0
        if clock:
            clock.mark()
        while steps < self.cfg.steps or time.perf_counter() - start < self.cfg.min_seconds:
            self.step()
            if clock:
                clock.mark()
            steps += 1
        self.backend.synchronize()
        return (time.perf_counter() - start) / steps


def per_step(row: dict) -> float:
    if row.get("status") != "ok":
        sys.exit(f"the harness run failed: {row.get('status')}: {row.get('message')}")
    return float(row["timed_s"]) / int(row["timed_steps"])


def run_in_process(cfg: BenchConfig, quiet: bool = False) -> list[float]:
    real = telemetry.Sampler
    telemetry.Sampler = NoSampler if quiet else real
    try:
        return [per_step(row) for row in run_benchmark(cfg)]
    finally:
        telemetry.Sampler = real


def cli_flags(cfg: BenchConfig) -> list[str]:
    return ["--model", cfg.model, "--mode", cfg.mode, "--precision", cfg.precision, "--batch-size",
            str(cfg.batch_size), "--width", str(cfg.width), "--height", str(cfg.height), "--device", cfg.device,
            "--steps", str(cfg.steps), "--min-seconds", str(cfg.min_seconds), "--warmup-steps",
            str(cfg.warmup_steps), "--repeats", str(cfg.repeats), "--num-threads", str(cfg.num_threads)]


def run_as_process(cfg: BenchConfig) -> list[float]:
    done = subprocess.run([sys.executable, "-m", "bench_core", "run", *cli_flags(cfg), "--json"],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode not in (0, 1):
        sys.exit(f"bench run exited {done.returncode}: {done.stderr[-2000:]}")
    return [per_step(row) for row in json.loads(done.stdout)]


def run_notebook(cfg: BenchConfig, scratch: Path) -> list[float]:
    import papermill  # only this arm needs it
    fields = {name: getattr(cfg, name) for name in ("model", "mode", "precision", "batch_size", "width", "height",
                                                     "device", "steps", "min_seconds", "warmup_steps", "repeats",
                                                     "num_threads")}
    run_name = f"harness-{time.time_ns()}"
    papermill.execute_notebook(str(ROOT / "notebooks" / "benchmark.ipynb"), str(scratch / f"{run_name}.ipynb"),
                               parameters={**fields, "out_dir": str(scratch), "run_name": run_name},
                               kernel_name="python3", progress_bar=False, cwd=str(ROOT / "notebooks"))
    rows = json.loads((scratch / "runs" / run_name / "rows.json").read_text())
    return [per_step(row) for row in (rows["rows"] if isinstance(rows, dict) else rows)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--mode", default="infer", choices=("infer", "train"))
    p.add_argument("--precision", default="fp32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--size", type=int, default=64, help="input width and height, px")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=10, help="at least this many steps a window")
    p.add_argument("--min-seconds", type=float, default=2.0, help="at least this long a window")
    p.add_argument("--rounds", type=int, default=3, help="windows of each arm")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--arms", default=",".join(DEFAULT_ARMS),
                   help=f"comma-separated, of bare, bare-marks, run, run-quiet, run-process, notebook "
                        f"(default {','.join(DEFAULT_ARMS)})")
    args = p.parse_args()
    arms = args.arms.split(",")
    cfg = BenchConfig(model=args.model, mode=args.mode, precision=args.precision, width=args.size, height=args.size,
                      batch_size=args.batch_size, steps=args.steps, min_seconds=args.min_seconds, warmup_steps=5,
                      repeats=1, device=args.device, num_threads=args.threads)
    windows: dict[str, list[float]] = {arm: [] for arm in arms}
    started = time.perf_counter()
    bare = BareLoop(cfg) if {"bare", "bare-marks"} & set(arms) else None
    processes = [arm for arm in ("run-process", "notebook") if arm in arms]
    with tempfile.TemporaryDirectory(prefix="harness-") as scratch:
        for round_ in range(args.rounds):
            order = [arm for arm in arms if arm in ("bare", "bare-marks", "run", "run-quiet")]
            for arm in order if round_ % 2 == 0 else order[::-1]:
                if arm.startswith("bare"):
                    windows[arm].append(bare.window(marks=arm == "bare-marks"))
                else:
                    windows[arm] += run_in_process(cfg, quiet=arm == "run-quiet")
            if round_ < len(processes):  # each process arm once, between rounds, with all its windows
                arm = processes[round_]
                many = cfg.replace(repeats=args.rounds)
                windows[arm] += run_as_process(many) if arm == "run-process" else run_notebook(many, Path(scratch))
        for arm in processes[args.rounds:]:
            many = cfg.replace(repeats=args.rounds)
            windows[arm] += run_as_process(many) if arm == "run-process" else run_notebook(many, Path(scratch))
    device = Backend.for_device(resolve_device(cfg.device)).device_name()
    print(f"{cfg.model} {cfg.mode} {cfg.precision} batch {cfg.batch_size} at {args.size} px on {device}, "
          f"{cfg.num_threads or torch.get_num_threads()} threads; {args.rounds} windows an arm; {time.perf_counter() - started:.0f} s")
    base = statistics.median(windows["bare"]) if windows.get("bare") else None
    print(f"{'arm':12s} {'ms/step (median)':>16s} {'windows':>40s} {'vs bare':>8s} {'added ms':>9s}")
    for arm, seconds in windows.items():
        median = statistics.median(seconds)
        each = " ".join(f"{s * 1e3:.3f}" for s in seconds)
        ratio = f"{median / base:8.3f}" if base and arm != "bare" else f"{'':8s}"
        added = f"{(median - base) * 1e3:+9.3f}" if base and arm != "bare" else f"{'':9s}"
        print(f"{arm:12s} {median * 1e3:16.3f} {each:>40s} {ratio} {added}")
    if base:
        worst = max((statistics.median(s) / base - 1, arm) for arm, s in windows.items() if arm != "bare")
        verdict = "within" if worst[0] <= BUDGET else "OVER"
        print(f"largest added time: {100 * worst[0]:+.2f} % ({worst[1]}): {verdict} the {100 * BUDGET:g} % budget")


if __name__ == "__main__":
    main()
