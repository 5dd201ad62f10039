"""CPU time of the FLOP-count step (measure/flops.count_flops) against one plain step, per model.

Each configuration is built by run_benchmark as a run builds it; where the runner counts its FLOPs,
the same step runs plain and counted (and with --old, counted by the implementation flops-lite
replaced), interleaved, `--repeats` times. CPU time (process_time) of this process; the median of
each is printed. Run on a quiet machine, with one thread:

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/flops_count_cost.py --repeats 7 --old
"""
from __future__ import annotations

import argparse
import statistics
import time

from bench_core import BenchConfig, run_benchmark
from bench_core.measure import flops

ONE_STEP = dict(steps=1, warmup_steps=0, repeats=1, min_seconds=0, device="cpu")
CONFIGS = {
    "resnet18 train": dict(model="resnet18", width=32, height=32, batch_size=2),
    "mobilenet_v3_large train": dict(model="mobilenet_v3_large", width=32, height=32, batch_size=2),
    "maskrcnn train": dict(model="maskrcnn_resnet50_fpn_v2", width=64, height=64, batch_size=1),
    "maskrcnn infer": dict(model="maskrcnn_resnet50_fpn_v2", width=64, height=64, batch_size=1, mode="infer"),
    "llama-tiny train": dict(model="llama-tiny", seq_len=16, batch_size=2),
    "llama-tiny generate": dict(model="llama-tiny", mode="generate", prompt_len=16, new_tokens=6, batch_size=2),
    "whisper-micro train": dict(model="whisper-micro", seq_len=16, batch_size=2),
    "sd-unet-tiny train": dict(model="sd-unet-tiny", latent_size=8, batch_size=2),
    "dlrm train": dict(model="dlrm", num_tables=4, rows_per_table=1000, embedding_dim=16, indices_per_lookup=3,
                       batch_size=8),
}


def cpu_seconds(call) -> float:
    start = time.process_time()
    call()
    return time.process_time() - start


def measure(cfg: BenchConfig, repeats: int, counts: dict) -> dict[str, float]:
    """Median CPU seconds of one plain step of `cfg`'s eager step, and of one step counted by each of
    `counts` (name -> a count_flops), interleaved."""
    times: dict[str, list[float]] = {"plain": [], **{name: [] for name in counts}}
    real = flops.count_flops

    def timed(step):
        step()  # warm-up, as the runner's first step is
        for _ in range(repeats):
            times["plain"].append(cpu_seconds(step))
            for name, count in counts.items():
                times[name].append(cpu_seconds(lambda: count(step)))
        return real(step)

    flops.count_flops = timed  # the runner calls flops.count_flops: it finds this one
    try:
        row = run_benchmark(cfg)[0]
    finally:
        flops.count_flops = real
    assert row["status"] == "ok", row["message"]
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--old", action="store_true",
                        help="also the implementation it replaced (benchmarks/flops_count_equality.py's copy)")
    parser.add_argument("--only", nargs="*", help="configuration names (default: all)")
    args = parser.parse_args()
    counts = {"count": flops.count_flops}
    if args.old:
        from flops_count_equality import old_count_flops  # the script beside this one (on sys.path)
        counts = {"old_count": old_count_flops, **counts}
    names = ["plain", *counts]
    print(f"{'configuration':26s}" + "".join(f"{name + '_step_s':>18s}" for name in names)
          + "".join(f"{name + '/plain':>18s}" for name in counts))
    for name, values in CONFIGS.items():
        if args.only and name not in args.only:
            continue
        seconds = measure(BenchConfig(**{**ONE_STEP, **values}), args.repeats, counts)
        print(f"{name:26s}" + "".join(f"{seconds[n]:18.4f}" for n in names)
              + "".join(f"{seconds[n] / seconds['plain']:18.2f}" for n in counts), flush=True)


if __name__ == "__main__":
    main()
