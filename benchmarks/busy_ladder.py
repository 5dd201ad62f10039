"""The GPU check of gpu_busy and the host-bound flag (issue 59 item 1): the resnet18 inference ladder of the kept
H200 run (amp-bf16, 224 px) in one process, each batch's rows with gpu_busy beside NVML's utilization, then the
first batch again, after every other batch's profile, to show that no measurement left CUDA slower.

What must hold on a GPU (the script says each and exits 1 where one does not):
- the small batches (1, 16) are host-bound(gpu busy N%), the large ones (64, 256) are not;
- gpu_busy was measured (the profiler saw kernels: gpu_busy_method is not 'not measured'), and lies within 0.15
  of NVML's utilization over the window (two measures of one thing: kernel time against wall time);
- batch 1 measured again at the end runs within 5 % of its first run (a CUPTI left attached costs 10-20 %).

    PYTHONPATH=. python benchmarks/busy_ladder.py                  # on the GPU: about 1-2 minutes
    PYTHONPATH=. python benchmarks/busy_ladder.py --device cpu --width 32 --height 32 --precision fp32   # rehearsal
"""
from __future__ import annotations

import argparse
import statistics
import sys

from bench_core import BenchConfig
from bench_core.results.bound import host_bound
from bench_core.run.runner import run_here

SMALL, LARGE = (1, 16), (64, 256)


def ladder_rows(args: argparse.Namespace, batch: int) -> list[dict]:
    cfg = BenchConfig(model="resnet18", mode="infer", precision=args.precision, batch_size=batch, width=args.width,
                      height=args.height, device=args.device, repeats=args.repeats, min_seconds=args.min_seconds,
                      steps=20, warmup_steps=10)
    return [r for r in run_here(cfg) if r["status"] == "ok"]


def line(batch: int, rows: list[dict]) -> str:
    rate = statistics.median(r["samples_per_s"] for r in rows)
    step = statistics.median(r["step_time_ms_median"] for r in rows)
    busy = [r["gpu_busy"] for r in rows]
    util = [r["gpu_util_pct_mean"] for r in rows]
    flags = sorted({host_bound(r["noise_flags"]) or "-" for r in rows})
    return (f"batch {batch:4d}: {rate:10.1f} samples/s, step {step:7.3f} ms, gpu_busy {busy}, NVML util % {util}, "
            f"host-bound: {', '.join(flags)}; {rows[0]['gpu_busy_method']}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--precision", default="amp-bf16")
    p.add_argument("--width", type=int, default=224)
    p.add_argument("--height", type=int, default=224)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--min-seconds", type=float, default=2.0)
    args = p.parse_args()
    found, problems = {}, []
    for batch in (*SMALL, *LARGE):
        found[batch] = ladder_rows(args, batch)
        print(line(batch, found[batch]), flush=True)
    again = ladder_rows(args, SMALL[0])
    print("again " + line(SMALL[0], again), flush=True)
    if args.device != "cuda":
        print("not a GPU: gpu_busy is not measured here (a rehearsal of the script only)")
        return 0
    for batch, rows in found.items():
        flagged = all(host_bound(r["noise_flags"]) for r in rows)
        if flagged != (batch in SMALL):
            problems.append(f"batch {batch}: host-bound {flagged}, expected {batch in SMALL}")
        for r in rows:
            if r["gpu_busy"] is None:
                problems.append(f"batch {batch}: gpu_busy not measured ({r['gpu_busy_method']})")
            elif r["gpu_util_pct_mean"] is not None and abs(r["gpu_busy"] - r["gpu_util_pct_mean"] / 100) > 0.15:
                problems.append(f"batch {batch}: gpu_busy {r['gpu_busy']:.2f} against NVML {r['gpu_util_pct_mean']:.0f} %")
    first = statistics.median(r["samples_per_s"] for r in found[SMALL[0]])
    last = statistics.median(r["samples_per_s"] for r in again)
    if last < 0.95 * first:
        problems.append(f"batch {SMALL[0]} after the other profiles: {last:.1f} against {first:.1f} samples/s")
    print("\n".join(problems) or "all held")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
