"""Harness overhead: bench_core's timed window vs a minimal hand-written loop.

Same model, batch, input and precision; interleaved (harness, hand, harness, hand, ...) over
several rounds; prints each round and the median ratio harness / hand (1.0 = no overhead).

    .venv/bin/python benchmarks/harness_overhead.py --model resnet50 --size 64 --batch-size 16 --rounds 5
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from bench_core import BenchConfig, run_benchmark
from bench_core.workload.models import resolve_model


def hand_loop(cfg: BenchConfig) -> float:
    """samples/s of the simplest correct loop a person would write."""
    torch.manual_seed(cfg.seed)
    model = resolve_model(cfg.model).build(cfg)
    x = torch.randn(cfg.batch_size, 3, cfg.height, cfg.width)
    y = torch.randint(0, 1000, (cfg.batch_size,))
    if cfg.mode == "train":
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)

        def step():
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            opt.step()
    else:
        model.eval()

        def step():
            with torch.inference_mode():
                model(x)
    for _ in range(cfg.warmup_steps):
        step()
    start = time.perf_counter()
    for _ in range(cfg.steps):
        step()
    return cfg.batch_size * cfg.steps / (time.perf_counter() - start)


def harness(cfg: BenchConfig) -> float:
    row = run_benchmark(cfg)[0]
    assert row["status"] == "ok", row["message"]
    return row["samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--modes", default="train,infer")
    args = parser.parse_args()
    for mode in args.modes.split(","):
        cfg = BenchConfig(model=args.model, mode=mode, width=args.size, height=args.size, batch_size=args.batch_size,
                          steps=args.steps, min_seconds=0, warmup_steps=3, repeats=1, device="cpu")
        ratios = []
        for round_ in range(args.rounds):
            # alternate which goes first, so drift does not favour one side
            first, second = (harness, hand_loop) if round_ % 2 == 0 else (hand_loop, harness)
            a, b = first(cfg), second(cfg)
            ours, theirs = (a, b) if first is harness else (b, a)
            ratios.append(ours / theirs)
            print(f"{mode} round {round_ + 1}: harness {ours:.2f} samples/s, hand loop {theirs:.2f} samples/s, "
                  f"ratio {ours / theirs:.3f}", flush=True)
        print(f"{mode}: median ratio harness / hand loop = {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {args.rounds} rounds)\n", flush=True)


if __name__ == "__main__":
    main()
