"""How a timed window's step boundaries are marked on each device: the host clock (CPU), CUDA events on the
device's own stream (no sync inside the window), or a sync before each host clock read (devices without
usable events: MPS). A Backend hands out its own (new_clock); nothing else makes one.
"""
from __future__ import annotations

import time
from typing import Callable

import torch


class StepClock:
    """Marks step boundaries; `seconds()` returns them relative to the first mark."""

    def __init__(self) -> None:
        self._marks: list[float] = []

    def mark(self) -> None:
        self._marks.append(time.perf_counter())

    def seconds(self) -> list[float]:
        start = self._marks[0]
        return [t - start for t in self._marks]


class CudaStepClock(StepClock):
    """CUDA events at each boundary: no sync inside the window, one sync when it is read.

    Events go on `device`'s own current stream, not on the current device's: with two GPUs in
    one process (bench compare), the current device is whichever was set last, and events on
    the other, idle GPU would time how fast the host queues work.

    A mark inside the window only records an event: the stream is looked up once, and the
    `expected_marks` events are made (and recorded once, which creates them in the driver) before
    the window. A step of 2 ms at batch 1 is the host's time, and each mark's Python (an Event
    object, a Stream object, the device look-up) was part of it. Marks past the expected ones make
    their event as they go."""

    def __init__(self, device: torch.device, expected_marks: int = 0) -> None:
        super().__init__()
        self._device = device
        self._stream = torch.cuda.current_stream(device)
        self._ready = [torch.cuda.Event(enable_timing=True) for _ in range(expected_marks)]
        for event in self._ready:
            event.record(self._stream)
        self._ready.reverse()  # popped from the end, in the order they were made

    def mark(self) -> None:
        event = self._ready.pop() if self._ready else torch.cuda.Event(enable_timing=True)
        event.record(self._stream)
        self._marks.append(event)

    def seconds(self) -> list[float]:
        self._marks[-1].synchronize()
        start = self._marks[0]
        return [0.0] + [start.elapsed_time(e) / 1000.0 for e in self._marks[1:]]


class SyncedClock(StepClock):
    """For devices without usable events: sync before every host clock read."""

    def __init__(self, synchronize: Callable[[], None]):
        super().__init__()
        self._synchronize = synchronize

    def mark(self) -> None:
        self._synchronize()
        super().mark()
