"""Overhead of the telemetry sampler on the step time, measured.

One run_benchmark call with 2 x ROUNDS repeats on the same model and step; the runner's
`telemetry.Sampler` is swapped for a factory that hands out the real sampler or a no-op one
in A B B A order, so drift on the machine cancels. Prints each window, the median step time
per arm, the overhead, and the sampler thread's own CPU time and cost per reading.

    .venv/bin/python benchmarks/sampler_overhead.py --model resnet18 --size 64 --batch-size 8 \
        --mode train --rounds 6 --steps 5 --min-seconds 2 [--threads 1] [--interval 0.01]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from bench_core import BenchConfig, run_benchmark

from bench_core.measure import telemetry
from bench_core.devices import Backend

RealSampler = telemetry.Sampler


class NoSampler:
    """The sampler's interface, doing nothing."""

    def __init__(self, backend, **_):
        self.thread_cpu_s, self.ticks = 0.0, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def columns(self) -> dict:
        return {}


class Alternating:
    """Stands in for telemetry.Sampler in the runner: on/off in the given order."""

    def __init__(self, order: list[str], interval_s: float | None):
        self.order, self.interval_s, self.handed = iter(order), interval_s, []

    def __call__(self, backend):
        arm = next(self.order)
        sampler = RealSampler(backend, interval_s=self.interval_s) if arm == "on" else NoSampler(backend)
        self.handed.append((arm, sampler))
        return sampler


def abba(rounds: int) -> list[str]:
    order = []
    for i in range(rounds):
        order += ["on", "off"] if i % 2 == 0 else ["off", "on"]
    return order


def cost_per_reading_us(device: str, readings: int = 2000) -> float:
    """CPU microseconds of one reading of every counter, timed in this thread."""
    with RealSampler(Backend.for_device(torch.device(device)), interval_s=3600) as sampler:
        start = time.thread_time()
        for _ in range(readings):
            sampler._read(time.perf_counter())
        return (time.thread_time() - start) / readings * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--size", type=int, default=64, help="input width and height, px")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--mode", default="train", choices=("train", "infer"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--rounds", type=int, default=4, help="A B pairs (windows = 2 x rounds)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--min-seconds", type=float, default=2.0)
    p.add_argument("--interval", type=float, default=None, help="sampler interval, s (default: the module's)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = p.parse_args()

    order = abba(args.rounds)
    factory = Alternating(order, args.interval)
    cfg = BenchConfig(model=args.model, width=args.size, height=args.size, batch_size=args.batch_size,
                      mode=args.mode, device=args.device, steps=args.steps, min_seconds=args.min_seconds,
                      warmup_steps=3, repeats=len(order), num_threads=args.threads)
    telemetry.Sampler = factory
    try:
        rows = run_benchmark(cfg)
    finally:
        telemetry.Sampler = RealSampler
    if any(r["status"] != "ok" for r in rows):
        raise SystemExit(f"run failed: {rows[0]['status']}: {rows[0]['message']}")

    print(f"{args.model} {args.mode} {args.size}px batch {args.batch_size} on {rows[0]['device_name']}, "
          f"{rows[0]['threads']} threads, load avg {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'window':>6} {'sampler':>7} {'steps':>5} {'median ms':>9} {'samples/s':>9} {'ticks':>5} {'thread cpu ms':>13}")
    by_arm: dict[str, list[float]] = {"on": [], "off": []}
    thread_share = []
    for i, (row, (arm, sampler)) in enumerate(zip(rows, factory.handed)):
        by_arm[arm].append(row["step_time_ms_median"])
        if arm == "on":
            thread_share.append(sampler.thread_cpu_s / row["timed_s"])
        print(f"{i:>6} {arm:>7} {row['timed_steps']:>5} {row['step_time_ms_median']:>9.2f} "
              f"{row['samples_per_s']:>9.2f} {sampler.ticks:>5} {sampler.thread_cpu_s * 1e3:>13.2f}")
    on, off = statistics.median(by_arm["on"]), statistics.median(by_arm["off"])
    pairs = [a / b for a, b in zip(by_arm["on"], by_arm["off"])]
    print(f"median step: with sampler {on:.2f} ms, without {off:.2f} ms: overhead {100 * (on / off - 1):+.2f}% "
          f"(per-pair ratios {' '.join(f'{r:.3f}' for r in pairs)})")
    print(f"sampler thread CPU: {100 * statistics.median(thread_share):.3f}% of one core during the window; "
          f"one reading of every counter: {cost_per_reading_us(args.device):.0f} us")


if __name__ == "__main__":
    main()
