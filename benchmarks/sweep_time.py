"""Where a sweep's wall time goes, and whether its overhead stays within budget (issue 61 item 5).

`bench sweep` records each cause as it happens (bench_core/sweep/timing.py) into DIR/timing.json. This
prints that account for a finished sweep, or first runs a sweep of small configurations (two models, three
configurations each, in two executions: what a real sweep pays per execution and per configuration) and
prints it with the verdict: the overhead, everything but first steps, warm-ups and timed windows, at most
BUDGET_S a configuration.

    .venv/bin/python benchmarks/sweep_time.py outputs/default          # an existing sweep's account
    .venv/bin/python benchmarks/sweep_time.py --run                    # the small sweep on the CPU
    .venv/bin/python benchmarks/sweep_time.py --run --device cuda      # the same on a GPU

On a shared machine the seconds are the neighbours' too: judge the budget on a quiet one.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from bench_core.sweep import timing

BUDGET_S = 3.0  # overhead a configuration may cost (issue 61 item 5)


def small_sweep(device: str) -> dict:
    """Three configurations of each of two models at sizes that run in a second or so each; on a GPU the
    shapes a person measures at batch 1 and 64 (the overhead is what is judged, not the speed)."""
    gpu = device.startswith("cuda")
    size = 224 if gpu else 32
    return {"name": "sweep-time", "description": "small configurations: what a sweep pays besides measuring",
            "timeout_s": 300,
            "grid": [{"model": ["resnet18"], "mode": ["train", "infer"], "precision": ["amp-bf16" if gpu else "fp32"],
                      "width": [size], "height": [size], "batch_size": [64 if gpu else 2]},
                     {"model": ["resnet18"], "mode": ["infer"], "precision": ["amp-bf16" if gpu else "fp32"],
                      "width": [size], "height": [size], "batch_size": [1]},
                     {"model": ["llama-tiny"], "mode": ["train", "infer"], "precision": ["fp32"], "batch_size": [2],
                      "seq_len": [64]},
                     {"model": ["llama-tiny"], "mode": ["generate"], "precision": ["fp32"], "batch_size": [2],
                      "prompt_len": [32], "new_tokens": [8]}],
            "settings": {"device": device, "steps": 5, "warmup_steps": 2, "min_seconds": 0.5, "repeats": 2}}


def run_small_sweep(device: str, out_dir: Path) -> None:
    sweep_file = out_dir / "sweep-time.yaml"
    sweep_file.write_text(yaml.safe_dump(small_sweep(device), sort_keys=False))
    done = subprocess.run([sys.executable, "-m", "bench_core", "sweep", str(sweep_file), "--out", str(out_dir / "out"),
                           "--no-report", "--force"], text=True, capture_output=True)
    if done.returncode != 0:
        sys.exit(f"the sweep failed (exit {done.returncode}):\n{done.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, nargs="?", help="a finished sweep's output folder")
    parser.add_argument("--run", action="store_true", help="run the small sweep first (into a temporary folder)")
    parser.add_argument("--device", default="cpu", help="with --run: cpu or cuda (default cpu)")
    args = parser.parse_args()
    if args.run == bool(args.out_dir):
        parser.error("give a sweep's output folder, or --run")
    with tempfile.TemporaryDirectory(prefix="sweep-time-") as scratch:
        out_dir = args.out_dir
        if args.run:
            run_small_sweep(args.device, Path(scratch))
            out_dir = Path(scratch) / "out"
        path = out_dir / timing.SWEEP_FILE
        if not path.is_file():
            sys.exit(f"{path} not found: a sweep records it since schema 9 (bench sweep DIR)")
        account = json.loads(path.read_text())
        print(timing.table(account))
        per = account["overhead_s_per_configuration"]
        if per is not None:
            verdict = "within" if per <= BUDGET_S else "OVER"
            print(f"overhead {per:.2f} s a configuration: {verdict} the budget of {BUDGET_S:g} s")


if __name__ == "__main__":
    main()
