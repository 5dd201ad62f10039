"""The timed window and the statistics of its step times, and of the phases inside a step; and
the seconds a configuration spends outside its windows, by phase.

A window runs until it has both `min_steps` steps and `min_seconds` seconds. Throughput is
samples in the window / window seconds, never a mean of per-step rates. A step may mark the
window's clock inside itself (generate: after each new token), so its phases (prefill, decode)
are timed on the same clock as the window, and never outside it.
"""
from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from bench_core.devices import Backend


class Phases:
    """Seconds a configuration spends in each phase outside its timed windows (building, checking,
    counting, the first step, ...), timed as each happens: `with phases("build"): ...`. A phase
    entered inside another is its own: the outer one counts only the rest. A phase entered twice
    adds up. What a GPU hour is spent on besides measuring (a row's phase_times_s, a sweep's timing.json)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._inner: list[float] = []  # per open phase: seconds of the phases inside it so far

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        self._inner.append(0.0)
        try:
            yield
        finally:
            spent = time.perf_counter() - start
            self.seconds[name] = self.seconds.get(name, 0.0) + spent - self._inner.pop()
            if self._inner:
                self._inner[-1] += spent

    def add(self, name: str, seconds: float) -> None:
        """A phase timed elsewhere (inside the open phase, if any: that one counts only the rest)."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        if self._inner:
            self._inner[-1] += seconds

    def move(self, source: str, target: str, seconds: float) -> None:
        """Up to `seconds` of one phase's time counted as another's (a step that was both)."""
        moved = max(min(seconds, self.seconds.get(source, 0.0)), 0.0)
        if moved:
            self.seconds[source] -= moved
            self.seconds[target] = self.seconds.get(target, 0.0) + moved

    def text(self) -> str | None:
        """'environment=0.012 build=0.410 ...' (a row's phase_times_s); None when nothing was timed."""
        return " ".join(f"{name}={s:.3f}" for name, s in self.seconds.items()) or None


def parse_phases(text: str | None) -> dict[str, float]:
    """A row's phase_times_s back into {phase: seconds} ({} when empty)."""
    found = {}
    for item in str(text or "").split():
        name, _, value = item.partition("=")
        with contextlib.suppress(ValueError):
            found[name] = float(value)
    return found


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
    """One timed window: its wall seconds, each step's seconds and, per step, the marks the step
    made inside itself (seconds from the step's start; empty lists when it made none)."""
    seconds: float
    step_s: list[float]
    inner_s: list[list[float]] = field(default_factory=list)
    # The same window on the host clock: from just before the first mark to just after the final
    # synchronize. On CUDA the marks are device events, so the two must agree to within the launch
    # queue's depth; a gap says the events or the synchronization are wrong (None: not measured).
    host_seconds: float | None = None

    @property
    def steps(self) -> int:
        return len(self.step_s)


def expected_steps(min_steps: int, min_seconds: float, step_s: float | None, fixed_steps: int | None = None) -> int:
    """How many steps a window will likely run: the agreed count, else enough for both minimums at the
    warm-up's pace, with a margin (a window that runs longer makes its extra marks as it goes)."""
    if fixed_steps is not None:
        return fixed_steps
    by_time = math.ceil(min_seconds / step_s * 1.25) + 2 if step_s and step_s > 0 else 0
    return max(min_steps, min(by_time, 100_000))


def timed_window(step: Callable[..., object], backend: Backend, min_steps: int, min_seconds: float,
                 fixed_steps: int | None = None, step_s: float | None = None, marks_per_step: int = 1) -> Window:
    """Run `step(mark)` until both minimums are met. Nothing but the step runs between marks;
    `mark` (called by a step that times its phases) marks the same clock inside the step.

    On CUDA the loop condition reads the host clock, which runs ahead of the device by at
    most the launch queue; the window itself is measured by events, after one final sync.
    `fixed_steps` (distributed runs, where every rank must run the same number of steps)
    replaces the condition by a count agreed before the window. `step_s` (the warm-up's pace)
    and `marks_per_step` (1 + the marks a step makes inside itself) let the clock prepare its
    marks before the window (expected_steps).
    """
    backend.synchronize()
    clock = backend.new_clock(1 + marks_per_step * expected_steps(min_steps, min_seconds, step_s, fixed_steps))
    inside = [0]  # marks the running step made inside itself
    per_step: list[int] = []

    def mark_inside() -> None:
        clock.mark()
        inside[0] += 1

    def one_step() -> None:
        inside[0] = 0
        step(mark_inside)
        clock.mark()
        per_step.append(inside[0])

    host_start = time.perf_counter()
    if fixed_steps is not None:
        clock.mark()
        for _ in range(fixed_steps):
            one_step()
    else:
        clock.mark()
        while len(per_step) < min_steps or time.perf_counter() - host_start < min_seconds:
            one_step()
    backend.synchronize()
    host_seconds = time.perf_counter() - host_start
    marks = clock.seconds()
    step_s, inner_s, start = [], [], 0
    for count in per_step:
        end = start + count + 1
        step_s.append(marks[end] - marks[start])
        inner_s.append([t - marks[start] for t in marks[start + 1:end]])
        start = end
    return Window(seconds=marks[-1], step_s=step_s, inner_s=inner_s, host_seconds=host_seconds)


def generation_columns(window: Window, global_batch: int, prompt_len: int | None, new_tokens: int) -> dict:
    """Generate's phases, each step one generate call whose inner marks end its new tokens: time to
    first token (the prefill: step start to the first token's mark), decode (first token's mark to
    the step's end: new_tokens - 1 tokens), and the inter-token latencies between the marks."""
    ttft = [marks[0] for marks in window.inner_s]
    decode = [seconds - marks[0] for seconds, marks in zip(window.step_s, window.inner_s)]
    gaps = sorted((b - a) * 1e3 for marks in window.inner_s for a, b in zip(marks, marks[1:]))
    ttft_ms = sorted(t * 1e3 for t in ttft)
    return {
        "output_tokens": min(len(marks) for marks in window.inner_s),
        "ttft_ms_median": statistics.median(ttft_ms), "ttft_ms_p95": percentile(ttft_ms, 95),
        # None where the prompt is not tokens (speech: the audio is the prompt)
        "prefill_tokens_per_s": global_batch * prompt_len * len(ttft) / sum(ttft) if prompt_len else None,
        "decode_s": sum(decode),
        "decode_tokens_per_s": global_batch * (new_tokens - 1) * len(decode) / sum(decode),
        "itl_ms_median": statistics.median(gaps), "itl_ms_p95": percentile(gaps, 95),
    }


def time_one(step: Callable[..., object], backend: Backend) -> float:
    """Seconds of a single synchronized step (first step, compile)."""
    backend.synchronize()
    start = time.perf_counter()
    step()
    backend.synchronize()
    return time.perf_counter() - start
