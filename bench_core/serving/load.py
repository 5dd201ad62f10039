"""The load shapes of a serving point, and the watch on the client itself.

- Closed loop (`concurrency` N, no rate): N users, each sending its next request as soon as its
  last one ends, until the point's requests are sent.
- Open loop (`request_rate` R): arrivals with gamma-distributed gaps of mean 1/R (burstiness 1:
  Poisson; below 1 burstier, above 1 more even: vLLM's definition), from a fixed seed; an
  optional `concurrency` caps the requests in flight (a request waits for a slot, and its
  scheduled time is kept so the wait shows).
- A point stops early when its error rate passes `max_error_rate` (after MIN_FOR_ERROR_RATE
  finished requests): the requests in flight are cancelled and recorded as such.

The client must not be the bottleneck: the point's process CPU time and the event loop's lag
(a task that sleeps LAG_TICK_S and records how late it wakes) are measured with it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import random
import time
from dataclasses import dataclass, field
from typing import Callable

from bench_core.serving.client import new_client, send
from bench_core.serving.records import CANCELLED, RequestRecord
from bench_core.serving.server_metrics import Scraper

LAG_TICK_S = 0.01
MIN_FOR_ERROR_RATE = 5


@dataclass
class Load:
    requests: int
    concurrency: int | None = None
    rate: float | None = None        # requests/s; None: closed loop
    burstiness: float = 1.0
    seed: int = 0
    max_error_rate: float = 1.0      # stop the point above this fraction of failed requests
    timeout_s: float = 60.0          # longest wait for the next chunk of a request

    def gaps(self) -> list[float]:
        """The arrival process: seconds between successive sends (the first at 0)."""
        if not self.rate:
            return [0.0] * self.requests
        rng = random.Random(self.seed)
        shape = self.burstiness
        return [0.0] + [rng.gammavariate(shape, 1.0 / (self.rate * shape)) for _ in range(self.requests - 1)]


@dataclass
class PointResult:
    records: list[RequestRecord]
    started: float                   # perf_counter at the point's start (the records' zero)
    wall_s: float
    client_cpu_s: float
    loop_lag_ms: list[float] = field(default_factory=list)
    stopped: str = ""                # why the point stopped early ('' when it ran to the end)
    server: dict = field(default_factory=dict)  # peaks of the server's own metrics (server_metrics)


def run_point(load: Load, url: str, make_body: Callable[[int], tuple[dict, RequestRecord]],
              metrics_url: str = "") -> PointResult:
    """Send `load.requests` requests (`make_body(i)` gives request i's body and its empty record);
    with `metrics_url`, scrape the server's Prometheus metrics meanwhile.

    Where an event loop already runs in this thread (a notebook kernel's: a sweep runs each
    configuration inside one), the point runs on a thread of its own with its own loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_run(load, url, make_body, metrics_url))
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bench-serving-point") as pool:
        return pool.submit(asyncio.run, _run(load, url, make_body, metrics_url)).result()


async def _run(load: Load, url: str, make_body, metrics_url: str = "") -> PointResult:
    records: list[RequestRecord] = []
    lags: list[float] = []
    stop = asyncio.Event()
    stopped = ""
    cpu0, t0 = time.process_time(), time.perf_counter()
    watcher = asyncio.create_task(_watch_loop(lags, stop))
    in_flight = load.concurrency or load.requests
    scraper = Scraper(metrics_url) if metrics_url else None
    async with new_client(in_flight + 1, load.timeout_s) as client:
        scraping = asyncio.create_task(scraper.run(client)) if scraper else None
        tasks: set[asyncio.Task] = set()

        def over_limit() -> bool:
            finished = [r for r in records if r.end_s is not None]
            failed = sum(not r.ok for r in finished)
            return len(finished) >= MIN_FOR_ERROR_RATE and failed / len(finished) > load.max_error_rate

        async def one(i: int, scheduled: float | None, slots: asyncio.Semaphore | None) -> None:
            body, record = make_body(i)
            record.scheduled_s = scheduled
            records.append(record)
            try:
                if slots is None:
                    await send(client, url, body, record, t0)
                else:
                    async with slots:
                        await send(client, url, body, record, t0)
            except asyncio.CancelledError:
                record.status, record.error = CANCELLED, "cancelled: the point stopped (error-rate limit)"
                record.end_s = time.perf_counter() - t0
                raise
            if over_limit():
                stop.set()

        if load.rate:
            slots = asyncio.Semaphore(load.concurrency) if load.concurrency else None
            due = 0.0
            for i, gap in enumerate(load.gaps()):
                due += gap
                wait = due - (time.perf_counter() - t0)
                if wait > 0:
                    try:
                        await asyncio.wait_for(stop.wait(), timeout=wait)
                    except asyncio.TimeoutError:
                        pass
                if stop.is_set():
                    break
                tasks.add(asyncio.create_task(one(i, due, slots)))
            await _finish(tasks, stop)
        else:
            counter = iter(range(load.requests))

            async def user() -> None:
                for i in counter:
                    if stop.is_set():
                        return
                    await one(i, None, None)

            tasks = {asyncio.create_task(user()) for _ in range(min(in_flight, load.requests))}
            await _finish(tasks, stop)
        if scraping:
            scraping.cancel()
            await asyncio.gather(scraping, return_exceptions=True)
        if stop.is_set():
            failed = sum(not r.ok for r in records)
            stopped = (f"stopped at the error-rate limit: {failed} of {len(records)} requests failed "
                       f"(max_error_rate {load.max_error_rate:g})")
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    watcher.cancel()
    return PointResult(sorted(records, key=lambda r: r.index), t0, wall, cpu, lags, stopped,
                       scraper.peaks if scraper else {})


async def _finish(tasks: set[asyncio.Task], stop: asyncio.Event) -> None:
    """Wait for every task; when `stop` is set first, cancel what is still running."""
    pending = set(tasks)
    while pending:
        stopper = asyncio.create_task(stop.wait())
        done, pending = await asyncio.wait(pending | {stopper}, return_when=asyncio.FIRST_COMPLETED)
        pending.discard(stopper)
        if stopper in done:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            return
        stopper.cancel()
        for task in done:
            if task is not stopper and not task.cancelled() and task.exception():
                raise task.exception()


async def _watch_loop(lags: list[float], stop: asyncio.Event) -> None:
    """How late the event loop wakes a task that asked to sleep LAG_TICK_S (ms, each tick)."""
    while True:
        before = time.perf_counter()
        await asyncio.sleep(LAG_TICK_S)
        lags.append(max(0.0, (time.perf_counter() - before - LAG_TICK_S) * 1e3))
