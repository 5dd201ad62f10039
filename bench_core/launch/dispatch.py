"""run_benchmark(BenchConfig) -> result rows: the one entry point for running a configuration.

Mode serve drives a serving engine from the outside (launch.engine_server starts or attaches to
the server, bench_core.serving measures it under load); `batch_size: max` first searches for the largest batch that fits (launch.batch_search, each
probe in a fresh process), then runs at that size; any other batch size runs where
launch.placement puts it (here, or on torchrun workers).
"""
from __future__ import annotations

from bench_core.config.schema import MAX_BATCH, BenchConfig
from bench_core.launch.batch_search import run_at_max_batch
from bench_core.launch.placement import run_placed
from bench_core.launch.servers import Servers
from bench_core.run.runner import Progress


def run_benchmark(cfg: BenchConfig, progress: Progress | None = None, servers: Servers | None = None) -> list[dict]:
    """Run one configuration; return one row per repeat (or one row saying why not). `servers`: where a serve
    configuration leaves its server open for the next one of the same server (a sweep's execution)."""
    if cfg.mode == "serve":
        # Lazy: mode serve's own module and its HTTP client (aiohttp), 0.3-0.5 s of every kernel's and
        # bench process's start, where most never serve.
        from bench_core.launch.engine_server import run_serving
        return run_serving(cfg, progress, servers)
    if cfg.batch_size == MAX_BATCH:
        return run_at_max_batch(cfg, isolate=True, progress=progress)[1]
    return run_placed(cfg, progress)
