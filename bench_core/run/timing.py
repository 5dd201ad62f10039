"""The timed window and the statistics of its step times.

A window runs until it has both `min_steps` steps and `min_seconds` seconds. Throughput is
samples in the window / window seconds, never a mean of per-step rates.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable

from bench_core.devices import Backend


@dataclass
class StepStats:
    count: int
    total_s: float
    median_ms: float
    mean_ms: float
    std_ms: float
    p5_ms: float
    p95_ms: float
    cv: float

    @classmethod
    def from_seconds(cls, step_s: list[float]) -> "StepStats":
        ms = sorted(s * 1000.0 for s in step_s)
        mean = statistics.fmean(ms)
        std = statistics.stdev(ms) if len(ms) > 1 else 0.0
        return cls(count=len(ms), total_s=sum(step_s), median_ms=statistics.median(ms), mean_ms=mean,
                   std_ms=std, p5_ms=percentile(ms, 5), p95_ms=percentile(ms, 95),
                   cv=std / mean if mean > 0 else math.nan)

    def to_columns(self) -> dict:
        return {"step_time_ms_median": self.median_ms, "step_time_ms_mean": self.mean_ms,
                "step_time_ms_std": self.std_ms, "step_time_ms_p5": self.p5_ms,
                "step_time_ms_p95": self.p95_ms, "step_time_cv": self.cv}


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass
class Window:
    """One timed window: its wall seconds and each step's seconds."""
    seconds: float
    step_s: list[float]

    @property
    def steps(self) -> int:
        return len(self.step_s)


def timed_window(step: Callable[[], object], backend: Backend, min_steps: int, min_seconds: float,
                 fixed_steps: int | None = None) -> Window:
    """Run `step` until both minimums are met. Nothing but the step runs between marks.

    On CUDA the loop condition reads the host clock, which runs ahead of the device by at
    most the launch queue; the window itself is measured by events, after one final sync.
    `fixed_steps` (distributed runs, where every rank must run the same number of steps)
    replaces the condition by a count agreed before the window.
    """
    backend.synchronize()
    clock = backend.new_clock()
    if fixed_steps is not None:
        clock.mark()
        for _ in range(fixed_steps):
            step()
            clock.mark()
    else:
        host_start = time.perf_counter()
        clock.mark()
        steps = 0
        while steps < min_steps or time.perf_counter() - host_start < min_seconds:
            step()
            clock.mark()
            steps += 1
    marks = clock.seconds()  # syncs once on CUDA
    return Window(seconds=marks[-1], step_s=[b - a for a, b in zip(marks, marks[1:])])


def time_one(step: Callable[[], object], backend: Backend) -> float:
    """Seconds of a single synchronized step (first step, compile)."""
    backend.synchronize()
    start = time.perf_counter()
    step()
    backend.synchronize()
    return time.perf_counter() - start
