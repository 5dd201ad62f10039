"""How busy the GPU was: its kernel time per step against the window's step time (gpu_busy), from
torch.profiler over a few steps after the timed windows (never inside them), and the host-bound flag
(measure/noise.py) where the GPU spent most of the step waiting for the host.

What counts as the device's work is the union of its activity on its own clock: on CUDA the kernels,
memcpys and memsets CUPTI records, on every stream. The profiler slows the host (each op and launch is
recorded), not the kernels, so the union is divided by the step of the unprofiled window:
gpu_busy = (device time per profiled step) / (timed_s / timed_steps), at most 1.

CPU rows get none, by choice: a CPU runs its ops itself, so no device waits on the host, and the profiler
cannot split an op's dispatch from its arithmetic there (the time inside ATen ops, under the profiler,
was 0.63-0.69 of a step of 100 4x4 Linear layers that any GPU would run host-bound, and the profiled op
time exceeded the unprofiled step). The CPU path below (ATen op time) is the stand-in the tests drive.

The same profiled steps give the row its op table (op_profile, measure/op_table.py): each op the step runs is
counted (FLOPs, bytes, cache reuse: measure/op_counts.py) and wrapped in a profiler label, so the kernels under
the label are that op's measured time; kernels outside every label (a collective launched from a hook) are one
line of their own. An eager step only: a compiled one runs fused kernels no op accounts for. `bench predict`
scales each op by its own bound on another GPU (predict/ops.py). Counting ops adds host time to the profiled
steps, never device time, and gpu_busy divides by the unprofiled window, so gpu_busy is the same with or without.
"""
from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
import warnings
from typing import Callable, Iterable

from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, schedule

from bench_core.measure import noise
from bench_core.measure.op_counts import LABEL, OpRecorder
from bench_core.measure.op_table import OpKind, table, to_json
from bench_core.run import ddp
from bench_core.run.comm_overlap import Interval, length

BUSY_STEPS = 3          # profiled steps; the kernels' time is on the device clock, so a few suffice
BUSY_BUDGET_S = 2.0     # long steps get fewer (at least one): the extra time stays about this (+ one warm-up step)
METHOD = "torch.profiler, {steps} step(s) after the windows: the GPU's kernel, memcpy and memset time (their union, " \
         "on the GPU's clock) per step / the window's mean step; mean over ranks"
NOT_ON = {"cpu": "not measured: a CPU row (the CPU runs its ops itself: no device waits on the host)",
          "mps": "not measured: torch.profiler records no MPS device activity"}


def device_intervals(events: Iterable, device_type: str) -> list[Interval]:
    """The device's busy intervals (us) among the profiler's events: CUDA activity (kernels, memcpy, memset) on
    a GPU, not the GPU-side spans of record_function annotations (ProfilerStep#, a library's labels: they
    cover the idle gaps too); on the CPU stand-in, the aten:: operators (the CPU's 'kernels', dispatch included)."""
    if device_type == "cuda":
        return [(float(e.time_range.start), float(e.time_range.end)) for e in events
                if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]
    return [(float(e.time_range.start), float(e.time_range.end)) for e in events
            if e.device_type == DeviceType.CPU and e.name.startswith("aten::")]


def device_seconds(step: Callable[[], object], backend, steps: int) -> tuple[float, float]:
    """Run `step` `steps` times under torch.profiler -> (the device's busy seconds per step, the profiled steps'
    own wall seconds per step on the host clock: slowed by the profiler on a GPU, so not what gpu_busy divides by)."""
    busy_s, wall_s, _ = profiled(step, backend, steps)
    return busy_s, wall_s


def profiled(step: Callable[[], object], backend, steps: int, ops: bool = False) -> tuple[float, float, str | None]:
    """device_seconds, and with `ops` the step's op table of the same profiled steps (op_profile's JSON), else None."""
    on_gpu = backend.type == "cuda"
    if on_gpu:
        # Kineto leaves CUPTI attached after a profile unless TEARDOWN_CUPTI=1, and CUDA work after it runs 10-20 %
        # slower (pytorch/pytorch#144455): the next configuration's windows in this process (a sweep's precisions)
        # would pay for this measurement. Asked for unless set (torch sets 0 itself where CUDA graphs need it).
        os.environ.setdefault("TEARDOWN_CUPTI", "1")
    else:
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # (as run/profiling.py: no Kineto lines on a CPU host)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    recorded: dict = {}
    recorder = OpRecorder(annotate=True) if ops else None
    # One step under the profiler first, not recorded: its start-up cost (Kineto, CUPTI) lands there.
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                 on_trace_ready=lambda prof: recorded.update(events=prof.events())) as prof:
        step()
        backend.synchronize()
        prof.step()
        start = time.perf_counter()
        with recorder if recorder is not None else contextlib.nullcontext():
            for _ in range(steps):
                step()
            backend.synchronize()
        wall = time.perf_counter() - start
    backend.synchronize()  # a CUDA call: Kineto's pending teardown runs on one, here rather than in a later step
    events = recorded.get("events") or []
    busy_s = length(device_intervals(events, backend.type)) / 1e6 / steps
    return busy_s, wall / steps, op_profile(events, recorder, backend.type, steps, busy_s) if recorder else None


def op_profile(events, recorder: OpRecorder, device_type: str, steps: int, busy_s: float) -> str:
    """The op table of the profiled steps as JSON: each op's time is the device time under its label (the CPU
    time inside it on the CPU stand-in); device time under no label is the line '(outside ops)'."""
    seconds: list[float | None] = [None] * len(recorder.calls)
    for e in events:
        if e.device_type == DeviceType.CPU and e.name.startswith(LABEL):
            index = int(e.name[len(LABEL):])
            if index < len(seconds):
                us = e.device_time_total if device_type == "cuda" else e.cpu_time_total
                seconds[index] = (seconds[index] or 0.0) + us / 1e6
    kinds = table(recorder.calls, [s or 0.0 for s in seconds], steps)
    if device_type == "cuda":
        kernels_s = sum(e.time_range.elapsed_us() for e in events if e.device_type == DeviceType.CUDA
                        and not getattr(e, "is_user_annotation", False)) / 1e6 / steps
        outside = kernels_s - sum(k.seconds or 0.0 for k in kinds)
        if outside > 0:
            kinds.append(OpKind("(outside ops)", "other", seconds=outside))
    return to_json(kinds, steps=steps, busy_s=float(f"{busy_s:.6g}"), device=device_type)


def steps_for(step_s: float) -> int:
    """BUSY_STEPS, or fewer for a long step: the measurement's extra time stays near BUSY_BUDGET_S."""
    return max(1, min(BUSY_STEPS, int(BUSY_BUDGET_S / step_s))) if step_s > 0 else BUSY_STEPS


def window_step_s(row: dict) -> float | None:
    """The window's mean step, seconds."""
    seconds, steps = row.get("timed_s"), row.get("timed_steps")
    return seconds / steps if seconds and steps else None


def measure(step: Callable[[], object], backend, steps: int) -> tuple[float | None, str]:
    """(device seconds per step, the method) on a GPU; (None, why) where it is not measured or failed."""
    device_s, method, _ = measure_with_ops(step, backend, steps)
    return device_s, method


def measure_with_ops(step: Callable[[], object], backend, steps: int, ops: bool = False
                     ) -> tuple[float | None, str, str | None]:
    """measure, and with `ops` the op table of the same profile (None where not taken). A failure of the op table
    alone leaves gpu_busy measured without it."""
    if backend.type != "cuda":
        return None, NOT_ON.get(backend.type, f"not measured: a {backend.type} row"), None
    table_json = None
    try:
        try:
            per_step, _, table_json = profiled(step, backend, steps, ops)
        except Exception as exc:  # noqa: BLE001 - the op table is the extra: measure gpu_busy without it
            if not ops:
                raise
            warnings.warn(f"op table failed, gpu_busy measured without it: {type(exc).__name__}: {exc}", stacklevel=2)
            per_step, _, table_json = profiled(step, backend, steps)
    except Exception as exc:  # noqa: BLE001 - the rows stand; the column says why it is empty
        warnings.warn(f"gpu_busy profile failed: {type(exc).__name__}: {exc}", stacklevel=2)
        return None, f"not measured: the profiler failed ({type(exc).__name__}: {exc})", None
    if per_step <= 0:
        return None, "not measured: the profile recorded no GPU activity (is CUPTI available to this user?)", None
    return per_step, METHOD.format(steps=steps), table_json


def apply(rows: list[dict], device_s: float | None, method: str, op_table: str | None = None) -> None:
    """In place: each ok row's gpu_busy (device time per step over its own window's mean step, at most 1),
    gpu_busy_method and op_profile (the op table of the same profile), and the host-bound flag where it is low (noise.host_bound_flag; without gpu_busy a GPU
    row's NVML utilization stands in, and the flag says so)."""
    for row in rows:
        if row.get("status") != "ok":
            continue
        step_s = window_step_s(row)
        busy = min(1.0, device_s / step_s) if device_s is not None and step_s else None
        row.update(gpu_busy=busy, gpu_busy_method=method, op_profile=op_table if busy is not None else None)
        flag = noise.host_bound_flag(row)
        if flag:
            row["noise_flags"] = ";".join(f for f in [*(row.get("noise_flags") or "").split(";"), flag] if f)


def record(step: Callable[[], object], backend, rows: list[dict]) -> None:
    """The runner's hook after the windows, on every rank (a sharded step holds collectives): measure over a
    few steps, then the mean over the ranks into every row."""
    step_times = [s for s in (window_step_s(r) for r in rows) if s]
    steps = steps_for(statistics.median(step_times)) if step_times else BUSY_STEPS
    eager = all(str(r.get("compile") or "off") == "off" for r in rows)  # a compiled step's kernels are fused
    device_s, method, op_table = measure_with_ops(step, backend, steps, ops=eager)
    (mean,) = ddp.mean_over_ranks([math.nan if device_s is None else device_s])
    if math.isnan(mean) and device_s is not None:
        method = "not measured: another rank's profile failed or recorded no GPU activity"
    apply(rows, None if math.isnan(mean) else mean, method, op_table)
