"""Shared test set-up: tiny configurations that run the real code in a second or two."""
import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
# One OpenMP thread per test process (and the sweeps, kernels and workers it starts): the suite
# runs two pytest workers on two cores (pyproject addopts), and two workers each spinning two
# OpenMP threads made it slower than one worker. Nothing here measures multi-threaded speed.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from bench_core import BenchConfig  # noqa: E402

TINY = dict(model="resnet18", width=32, height=32, batch_size=2, steps=2, warmup_steps=1,
            repeats=1, min_seconds=0, device="cpu")


def tiny(**changes) -> BenchConfig:
    """A real configuration small enough for CI: resnet18, 32 px, batch 2, 2 steps."""
    return BenchConfig(**{**TINY, **changes})


@pytest.fixture
def tiny_config():
    return tiny
