"""How often `bench history` calls a step in a steady history (a false alarm), and how often it finds a real one,
measured two ways, as bench diff's gate was (benchmarks/gate_trial.py, tests/test_comparison.py):

  simulate  seeded histories through the real step finder (bench_core/history/steps.fit_logs): each run's log
            throughput is its level, plus a run-to-run shift (--run-sd, default 5 %: TorchBench's single models
            move 5-9 % between runs of one build), plus the mean of its repeats' noise (--repeat-sd 2 %, 3
            repeats). Steady: one level; stepped: --step slower from the middle run on. Seconds.
  real      trials of real runs of this checkout on this machine: --runs runs of one tiny configuration
            (resnet18, 32 px, bench run), dated a day apart, then `bench history` over them; every step found is
            a false alarm (the code never changed). Minutes a trial; run it on a quiet machine.

    .venv/bin/python benchmarks/history_false_alarms.py simulate --trials 2000
    .venv/bin/python benchmarks/history_false_alarms.py real --trials 10 --runs 12
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_core.history.steps import fit_logs

ROOT = Path(__file__).resolve().parents[1]


def simulated(rng: np.random.Generator, runs: int, run_sd: float, repeat_sd: float, repeats: int,
              step: float = 0.0) -> tuple[np.ndarray, float]:
    """One line's runs in time order as the step finder takes them: each run's mean log throughput, and the
    variance of a run's mean that its repeats show (steps.repeats_variance)."""
    shifts = rng.normal(0.0, run_sd, runs) + np.where(np.arange(runs) >= runs // 2, math.log(1 - step), 0.0)
    logs = shifts[:, None] + rng.normal(0.0, repeat_sd, (runs, repeats))
    return logs.mean(axis=1), float((logs.var(axis=1, ddof=1) / repeats).mean())


def simulate(trials: int, runs: int, run_sd: float, repeat_sd: float, repeats: int, step: float,
             seed: int = 0) -> dict:
    """False alarms per steady history, and the share of stepped histories whose step was found (slower, within
    one run of where it was made)."""
    rng = np.random.default_rng(seed)
    alarms = sum(bool(fit_logs(*simulated(rng, runs, run_sd, repeat_sd, repeats))[0]) for _ in range(trials))
    found = 0
    for _ in range(trials):
        bounds, comparisons, _, _ = fit_logs(*simulated(rng, runs, run_sd, repeat_sd, repeats, step))
        found += any(abs(b - runs // 2) <= 1 and c.verdict == "slower" for b, c in zip(bounds, comparisons))
    return {"runs": runs, "trials": trials, "run_sd": run_sd, "repeat_sd": repeat_sd, "repeats": repeats,
            "step": step, "false_alarm_rate": alarms / trials, "detection_rate": found / trials}


def real(trials: int, runs: int, out: Path) -> dict:
    """Real runs of one tiny configuration, dated a day apart, then bench history: steps found are false alarms."""
    flags = ["--model", "resnet18", "--width", "32", "--height", "32", "--batch-size", "2", "--steps", "10",
             "--warmup-steps", "3", "--repeats", "3", "--min-seconds", "0", "--device", "cpu", "-q"]
    outcomes = []
    for trial in range(trials):
        folder = out / f"trial-{trial}"
        for run in range(runs):
            night = folder / f"night-{run:02d}"
            subprocess.run([sys.executable, "-m", "bench_core", "run", *flags, "--out", str(night)], check=True,
                           capture_output=True, cwd=ROOT)
            redate(night, f"2026-01-{run + 1:02d}")
        done = subprocess.run([sys.executable, "-m", "bench_core", "history", *map(str, sorted(folder.iterdir())),
                               "--json"], capture_output=True, text=True, cwd=ROOT)
        found = json.loads(done.stdout)
        disturbed = sum(c["disturbed"] for c in found["configurations"])
        outcomes.append({"trial": trial, "steps": sum(len(f["steps"]) for f in found["findings"]),
                         "disturbed_runs": disturbed})
        print(f"trial {trial}: {outcomes[-1]['steps']} step(s), {disturbed} disturbed run(s)", flush=True)
    alarms = sum(o["steps"] > 0 for o in outcomes)
    return {"trials": trials, "runs": runs, "false_alarm_rate": alarms / trials, "outcomes": outcomes}


def redate(folder: Path, day: str) -> None:
    """A run measured today, dated `day` (its time of day kept): one real run stands for one night."""
    from bench_core import results
    for path in folder.glob("runs/*/rows.json"):
        rows = json.loads(path.read_text())
        path.write_text(json.dumps([dict(r, timestamp=day + str(r["timestamp"])[10:]) for r in rows]))
    results.rebuild_csv(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="how", required=True)
    sim = sub.add_parser("simulate")
    sim.add_argument("--trials", type=int, default=2000)
    sim.add_argument("--runs", type=int, nargs="+", default=[6, 12, 30, 100])
    sim.add_argument("--run-sd", type=float, default=0.05)
    sim.add_argument("--repeat-sd", type=float, default=0.02)
    sim.add_argument("--repeats", type=int, default=3)
    sim.add_argument("--step", type=float, default=0.15)
    rl = sub.add_parser("real")
    rl.add_argument("--trials", type=int, default=10)
    rl.add_argument("--runs", type=int, default=12)
    rl.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    started = time.perf_counter()
    if args.how == "simulate":
        found = [simulate(args.trials, n, args.run_sd, args.repeat_sd, args.repeats, args.step) for n in args.runs]
        for f in found:
            print(f"{f['runs']:4d} runs: false alarms {f['false_alarm_rate']:.1%} of {f['trials']} steady histories; "
                  f"a {f['step']:.0%} step found in {f['detection_rate']:.1%}")
    else:
        out = args.out or Path(tempfile.mkdtemp(prefix="history-trial-"))
        try:
            found = real(args.trials, args.runs, out)
        finally:
            if args.out is None:
                shutil.rmtree(out, ignore_errors=True)
        print(f"real: false alarms in {found['false_alarm_rate']:.0%} of {found['trials']} histories of "
              f"{found['runs']} runs")
    print(json.dumps({"how": args.how, "seconds": time.perf_counter() - started, "results": found}))


if __name__ == "__main__":
    main()
