"""The regression gate's false-alarm and detection rates, measured: repeated trials of the README's
CI recipe (a sweep, another sweep of the same code, then `bench diff`), and of the same with a real
slowdown on the NEW side.

Each trial runs three sweeps of the sweep file, one after the other, each into its own folder:
  same     two sweeps of this checkout: `bench diff A B` should exit 0 (exit 1 is a false alarm)
  slower   a sweep of a test copy whose model input is --input-scale times wider under the same
           workload key (1.15: 15 % more pixels): `bench diff A SLOW` should exit 1
Exit 3 ('disturbed: re-measure') is counted apart: it is neither a pass nor a detection, and on a
quiet machine it should not happen. Run it on a quiet machine: nothing else running.

    .venv/bin/python benchmarks/gate_trial.py --trials 20                  # about 2 h on a quiet 2-core CPU
    .venv/bin/python benchmarks/gate_trial.py --trials 2 --out /tmp/trial  # a check that it works

A trial is three sweeps of params/ci-gate.yaml (its dry run estimates 1.7 min each on 2 cores; on a
busy 2-core VM they took 4.5 min) and two diffs. It prints one line per trial and then the rates,
with the command, the CPU and the time taken, and writes them to OUT/trials.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from bench_core.measure.noise import disturbances

ROOT = Path(__file__).resolve().parents[1]
# What sizes the image family's synthetic batch (bench_core/workload/vision.py); the slow copy widens it.
INPUT_LINE = "(cfg.batch_size, 3, cfg.height, cfg.width)"


def cpu_description() -> str:
    """'AMD EPYC 7B13, 2 CPUs, avx2 avx512f ...' from /proc/cpuinfo (lscpu's model name and flags)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("", platform.machine(), platform.processor()):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags) or "no avx2"
    return f"{model}, {os.cpu_count()} CPUs, {isa}"


def slow_copy(folder: Path, scale: float) -> dict:
    """A copy of bench_core whose synthetic input is `scale` times wider than the configuration says,
    and the environment that makes sweeps (and their notebook kernels) import it."""
    shutil.copytree(ROOT / "bench_core", folder / "bench_core", ignore=shutil.ignore_patterns("__pycache__"))
    tasks = folder / "bench_core" / "workload" / "vision.py"
    text = tasks.read_text()
    if text.count(INPUT_LINE) != 1:
        raise SystemExit(f"gate_trial: {tasks} no longer has {INPUT_LINE!r}: update INPUT_LINE")
    tasks.write_text(text.replace(INPUT_LINE, f"(cfg.batch_size, 3, cfg.height, round(cfg.width * {scale!r}))"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])),
           "BENCH_TEMPLATE": str(ROOT / "notebooks" / "benchmark.ipynb"),
           "BENCH_GIT_COMMIT": f"slow-copy-input-x{scale}"}
    where = subprocess.run([sys.executable, "-c", "import bench_core.workload.vision as t; print(t.__file__)"],
                           env=env, capture_output=True, text=True, check=True, cwd=folder).stdout.strip()
    if not where.startswith(str(folder)):
        raise SystemExit(f"gate_trial: the slow copy is not the bench_core imported ({where})")
    return env


def bench(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    # Not from the checkout's folder: `python -m` puts the working directory first on sys.path, which
    # would import this checkout's bench_core over the slow copy on PYTHONPATH.
    return subprocess.run([sys.executable, "-m", "bench_core", *args], capture_output=True, text=True, env=env,
                          cwd=tempfile.gettempdir())


def sweep(sweep_file: Path, out: Path, env: dict | None = None) -> float:
    """Seconds the sweep took."""
    started = time.time()
    done = bench(["sweep", str(sweep_file), "--out", str(out), "--no-report"], env)
    if done.returncode != 0:
        raise SystemExit(f"gate_trial: the sweep into {out} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return time.time() - started


def diff(old: Path, new: Path, extra: list[str]) -> dict:
    """bench diff's exit status and, per configuration, its ratio, verdict and 'detects'."""
    done = bench(["diff", str(old), str(new), "--json", *extra])
    if done.returncode == 2:
        raise SystemExit(f"gate_trial: bench diff {old} {new} refused its input:\n{done.stderr}")
    report = json.loads(done.stdout)
    return {"exit": done.returncode,
            "configurations": [{k: c[k] for k in ("configuration", "ratio", "low", "high", "verdict", "unit",
                                                  "detectable", "note")} for c in report["configurations"]]}


def measured(folder: Path) -> tuple[dict, int, int]:
    """Per mode, the geometric mean samples/s of every ok row (flagged or not), and how many rows
    carry a disturbing flag, of how many."""
    rows = pd.read_csv(folder / "results.csv")
    ok = rows[rows["status"] == "ok"]
    means = {mode: math.exp(group.map(math.log).mean()) for mode, group in ok.groupby("mode")["samples_per_s"]}
    return means, int((ok["noise_flags"].map(disturbances) != "").sum()), len(ok)


def summary_line(label: str, d: dict) -> str:
    parts = [f"{c['configuration'].split(' fp32')[0]} {c['ratio']:.3f} {c['verdict']} (detects {c['detectable']})"
             if c["ratio"] is not None else f"{c['configuration'].split(' fp32')[0]} {c['verdict']}"
             for c in d["configurations"]]
    return f"{label} exit {d['exit']}: " + "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--sweep", default=str(ROOT / "params" / "ci-gate.yaml"), help="the sweep file (the recipe)")
    parser.add_argument("--input-scale", type=float, default=1.15,
                        help="the slow copy's input width over the configured one (default 1.15)")
    parser.add_argument("--out", help="folder for the sweeps and trials.json (default: a new temporary folder)")
    parser.add_argument("--diff-args", default="", help="extra bench diff arguments, e.g. '--fail-above 10%%'")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="gate-trial-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    sweep_file, extra = Path(args.sweep).resolve(), shlex.split(args.diff_args)
    command = " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])
    env = slow_copy(out / "slow-copy", args.input_scale)
    print(f"gate_trial: {args.trials} trial(s) of {sweep_file.name} on {cpu_description()}; folders under {out}",
          flush=True)
    started, trials = time.time(), []
    for i in range(1, args.trials + 1):
        folder = out / f"trial-{i:02d}"
        t0 = time.time()
        seconds = [sweep(sweep_file, folder / name, with_env) for name, with_env in
                   (("a", None), ("b", None), ("slow", env))]
        same, slower = diff(folder / "a", folder / "b", extra), diff(folder / "a", folder / "slow", extra)
        (a, flagged_a, rows_a), (_, flagged_b, rows_b), (slow, flagged_s, rows_s) = (
            measured(folder / name) for name in ("a", "b", "slow"))
        trials.append({"trial": i, "same": same, "slower": slower, "seconds": round(time.time() - t0, 1),
                       "sweep_seconds": [round(v, 1) for v in seconds],
                       "slow_over_a": {mode: slow[mode] / a[mode] for mode in a if mode in slow},
                       "disturbed_rows": flagged_a + flagged_b + flagged_s, "rows": rows_a + rows_b + rows_s})
        print(f"trial {i:2d} ({time.time() - t0:.0f} s)  {summary_line('same', same)}  |  "
              f"{summary_line('slower', slower)}", flush=True)
    n = len(trials)

    def count(kind, code):
        return sum(t[kind]["exit"] == code for t in trials)
    # The slow copy's real effect, from every ok row whatever its flags (the gate's own ratios leave
    # disturbed repeats out, and may have none)
    ratios = [r for t in trials for r in t["slow_over_a"].values()]
    flagged, total = sum(t["disturbed_rows"] for t in trials), sum(t["rows"] for t in trials)
    sweeps = sorted(v for t in trials for v in t["sweep_seconds"][:2])  # this checkout's sweeps
    effect = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else math.nan
    result = {
        "command": command, "cpu": cpu_description(), "sweep": str(sweep_file), "trials": n,
        "minutes": round((time.time() - started) / 60, 1), "input_scale": args.input_scale,
        "sweep_minutes_median": round(sweeps[len(sweeps) // 2] / 60, 2) if sweeps else None,
        "false_alarms": count("same", 1), "same_passed": count("same", 0), "same_disturbed": count("same", 3),
        "detected": count("slower", 1), "slower_passed": count("slower", 0), "slower_disturbed": count("slower", 3),
        "slow_copy_ratio_geomean": effect, "disturbed_rows": flagged, "rows": total, "trial_details": trials,
    }
    (out / "trials.json").write_text(json.dumps(result, indent=1))
    print(f"\ncommand: {command}\ncpu: {result['cpu']}\n{n} trials in {result['minutes']} min "
          f"({result['minutes'] / max(n, 1):.1f} min a trial; one sweep of this checkout: median "
          f"{result['sweep_minutes_median']} min)")
    print(f"same code: {result['same_passed']}/{n} passed (exit 0), {result['false_alarms']}/{n} false alarms "
          f"(exit 1, rate {result['false_alarms'] / max(n, 1):.0%}), {result['same_disturbed']}/{n} disturbed (exit 3)")
    print(f"input x{args.input_scale} (the slow copy ran at {effect:.3f}x the speed: geometric mean of every "
          f"row, {len(ratios)} configuration-trials): {result['detected']}/{n} detected (exit 1, rate "
          f"{result['detected'] / max(n, 1):.0%}), {result['slower_passed']}/{n} passed, "
          f"{result['slower_disturbed']}/{n} disturbed")
    if flagged:
        print(f"warning: {flagged} of {total} rows carry a disturbing noise flag: the machine was not quiet, so these "
              "are not the quiet-machine rates")
    print(f"details: {out / 'trials.json'}")


if __name__ == "__main__":
    main()
