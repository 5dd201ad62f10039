"""Where one configuration of a fixed batch size runs: in this process, or on torchrun workers
when it asks for more than one process (and this process is not already one of them)."""
from __future__ import annotations

from bench_core.config.schema import BenchConfig
from bench_core.errors import ConfigError
from bench_core.launch import torchrun
from bench_core.measure import environment
from bench_core.results.rows import failure_row, run_fields
from bench_core.run import ddp
from bench_core.run.runner import Progress, run_here


def run_placed(cfg: BenchConfig, progress: Progress | None = None) -> list[dict]:
    """One row per repeat, or one row saying why not. With nproc_per_node > 1 (or nnodes > 1),
    torchrun workers run it and this returns the combined rows that the writer rank made."""
    if cfg.world_size > 1 and not ddp.in_worker():
        try:
            return torchrun.launch(cfg, progress=progress)
        except ConfigError as exc:  # more workers than devices: a sweep records it and goes on
            return [failure_row({**run_fields(cfg), **environment.collect()}, "unsupported", str(exc))]
    return run_here(cfg, progress)
