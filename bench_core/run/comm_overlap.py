"""The share of a training step spent in collectives that no compute overlapped (exposed communication),
from torch.profiler over one extra step after the timed windows (never inside them).

Which intervals count:
- CUDA (nccl): device activity. A kernel whose name holds "nccl" is a collective; every other kernel (and
  memcpy / memset) is compute. Kernels run on several streams, so FSDP's all-gather of the next block can hide behind this
  block's matmuls: only the time a collective kernel ran with no compute kernel running is exposed.
- CPU (gloo): gloo runs each collective on its own thread, recorded as a `gloo:<op>` event there; compute
  is the `aten::` operators of every other thread (the training thread). Time in a gloo op while the
  training thread ran no operator (it waited) is exposed.
The step's wall time is the profiled step's span, from its first recorded event to its last.
"""
from __future__ import annotations

import math
import os
import warnings
from typing import Callable, Iterable

from bench_core.run import ddp

Interval = tuple[float, float]

METHOD = {
    "cuda": "torch.profiler, 1 step after the windows: time a nccl kernel ran with no other kernel running, "
            "over the step's span; mean over ranks",
    "cpu": "torch.profiler, 1 step after the windows: time a gloo collective (its own thread) ran while the "
           "training threads ran no aten operator, over the step's span; mean over ranks",
}


def merged(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of intervals as sorted, disjoint intervals (empty ones dropped)."""
    out: list[list[float]] = []
    for start, end in sorted((s, e) for s, e in intervals if e > s):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def length(intervals: Iterable[Interval]) -> float:
    return sum(end - start for start, end in merged(intervals))


def exposed_share(comm: Iterable[Interval], compute: Iterable[Interval], span: Interval) -> float:
    """The fraction of `span` during which some collective ran and no compute did:
    |(union(comm) - union(compute)) within span| / |span|. NaN for an empty span."""
    lo, hi = span
    if hi <= lo:
        return math.nan
    clip = [(max(s, lo), min(e, hi)) for s, e in merged(comm)]
    busy = merged((max(s, lo), min(e, hi)) for s, e in compute)
    exposed = 0.0
    for start, end in clip:
        covered = sum(max(0.0, min(end, b_end) - max(start, b_start)) for b_start, b_end in busy)
        exposed += max(0.0, end - start - covered)
    return exposed / (hi - lo)


def classify(events, on_gpu: bool) -> tuple[list[Interval], list[Interval], Interval] | None:
    """(collective intervals, compute intervals, the step's span) from the profiler's events (FunctionEvent:
    name, thread, device_type, time_range in us); None where no collective was recorded."""
    from torch.autograd import DeviceType
    comm: list[Interval] = []
    compute: list[Interval] = []
    spans: list[Interval] = []
    gloo_threads = {e.thread for e in events if e.name.startswith("gloo:")}
    for e in events:
        interval = (float(e.time_range.start), float(e.time_range.end))
        spans.append(interval)
        if on_gpu:
            if e.device_type != DeviceType.CUDA:
                continue
            (comm if "nccl" in e.name.lower() else compute).append(interval)
        elif e.name.startswith("gloo:"):
            comm.append(interval)
        elif e.name.startswith("aten::") and e.thread not in gloo_threads:
            compute.append(interval)
    if not comm or not spans:
        return None
    return comm, compute, (min(s for s, _ in spans), max(e for _, e in spans))


def measure(step: Callable[[], object], backend) -> tuple[float | None, str]:
    """Profile one step -> (exposed share or None, the method, or why there is none). A profiler that fails
    leaves the share empty with the reason; the caller's measured rows stand."""
    on_gpu = backend.type == "cuda"
    if not on_gpu:
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # (as run/profiling.py: no Kineto lines on a CPU host)
    try:
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
        with profile(activities=activities) as prof:
            step()
            backend.synchronize()
        found = classify(prof.events(), on_gpu)
    except Exception as exc:  # noqa: BLE001 - a missing profile is said, not fatal
        warnings.warn(f"exposed-communication profile failed: {type(exc).__name__}: {exc}", stacklevel=2)
        return None, f"not measured: the profiler failed ({type(exc).__name__}: {exc})"
    if found is None:
        return None, "not measured: the profiled step recorded no collective (nccl kernel or gloo op)"
    return exposed_share(*found), METHOD["cuda" if on_gpu else "cpu"]


def record(step: Callable[[], object], backend, rows: list[dict]) -> None:
    """Every rank (its step holds collectives): measure, then the mean over the ranks into every row's
    exposed_comm_share and exposed_comm_method (empty, with the reason, if any rank could not say)."""
    share, method = measure(step, backend)
    (mean,) = ddp.mean_over_ranks([math.nan if share is None else share])
    if math.isnan(mean) and share is not None:
        method = "not measured: another rank's profile recorded no collective or failed"
    for row in rows:
        row.update(exposed_comm_share=None if math.isnan(mean) else mean, exposed_comm_method=method)
