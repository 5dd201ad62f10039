"""Count what one sample of a published workload costs, for bench_core/data/workload_profiles.csv.

Runs `bench run` on this CPU at batch 1 and 2 (one timed step, one thread) and prints the profile row:
FLOPs per sample (counted), the bytes the FLOP ops and the other ops move (per sample a = 2 r2 - r1 and per
step b = 2 (r1 - r2), from the per-sample figures r1, r2 of the two batches), the gradient bytes (4 x
parameters) and the ops one step runs (the launch floor's count).

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/workload_profiles.py \
        --model resnet50 --mode infer --precision fp32 [--seq-len 128] [--model-arg ...]

The row goes to stdout in the CSV's column order; nothing is written to the repository.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path

COLUMNS = ("model", "mode", "input_shape", "precision", "flops_per_sample", "flop_op_bytes_per_sample",
           "flop_op_bytes_per_step", "other_bytes_per_sample", "other_bytes_per_step", "grad_bytes_per_step",
           "ops_per_step", "task", "source")


def counted(args: argparse.Namespace, batch: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "bench_core", "run", "--model", args.model, "--mode", args.mode,
               "--precision", args.precision, "--batch-size", str(batch), "--steps", "1", "--warmup-steps", "1",
               "--repeats", "1", "--device", "cpu", "--num-threads", "1", "--out", out, *extra]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        rows = [json.loads(p.read_text()) for p in Path(out).glob("runs/*/rows.json")]
    row = [r for rs in rows for r in (rs if isinstance(rs, list) else [rs]) if r.get("status") == "ok"][0]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--name", help="the name in the CSV (default: --model)")
    parser.add_argument("--mode", default="train")
    parser.add_argument("--precision", default="fp32", help="fp32, or amp-bf16 for the 'amp' profile")
    args, extra = parser.parse_known_args()
    r1, r2 = counted(args, 1, extra), counted(args, 2, extra)

    def split(key: str) -> tuple[float, float]:
        a, b = float(r1[key]), float(r2[key])
        return 2 * b - a, 2 * (a - b)

    flop_sample, flop_step = split("bytes_per_sample_flop_ops")
    other_sample, other_step = split("bytes_per_sample_other_ops")
    flops = r1.get("flops_per_sample_counted") or r1["flops_per_sample"]
    row = {"model": args.name or args.model, "mode": args.mode, "input_shape": r1["input_shape"],
           "precision": "fp32" if args.precision == "fp32" else "amp", "flops_per_sample": f"{float(flops):.6g}",
           "flop_op_bytes_per_sample": f"{flop_sample:.6g}", "flop_op_bytes_per_step": f"{flop_step:.6g}",
           "other_bytes_per_sample": f"{other_sample:.6g}", "other_bytes_per_step": f"{other_step:.6g}",
           "grad_bytes_per_step": f"{4.0 * float(r1['params_count']):.6g}" if args.mode == "train" else "0",
           "ops_per_step": str(int(r1["ops_per_step"])), "task": r1.get("task") or "",
           "source": (f"bench run --model {args.model} --mode {args.mode} --precision {args.precision} "
                      f"--batch-size 1 and 2 --device cpu {' '.join(extra)} (commit {r1.get('git_commit', '')[:7]})")
           .replace("  ", " ")}
    buffer = io.StringIO()
    csv.DictWriter(buffer, COLUMNS, lineterminator="\n").writerow(row)
    print(buffer.getvalue(), end="")


if __name__ == "__main__":
    main()
