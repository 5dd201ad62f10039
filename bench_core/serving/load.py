"""The load shapes of a serving point, and the watch on the client itself.

- Closed loop (`concurrency` N, no rate): N users, each sending its next request as soon as its
  last one ends, until the point's requests are sent.
- Open loop (`request_rate` R): arrivals with gamma-distributed gaps of mean 1/R (burstiness 1:
  Poisson; below 1 burstier, above 1 more even: vLLM's definition), from a fixed seed; an
  optional `concurrency` caps the requests in flight (a request waits for a slot, and its
  scheduled time is kept so the wait shows).
- A trace (`arrivals`): the sends at the trace's times instead of drawn gaps.
- Conversations: a closed loop whose users each carry a state (make_body is given the user, `after`
  is told each of its finished requests) and wait `think_s` between their requests.
- Worker processes (`workers` > 1, as vLLM's and GuideLLM's clients use them where one event loop cannot
  read every chunk on time): the point's requests, built here, are dealt round-robin to processes of
  their own, each with its own loop and connections, started together at one instant on the machine's
  one monotonic clock; their records are put back on this process's clock. Each stops on its own share
  (error rate, over-saturation); the client's CPU is the busiest worker's. Conversations stay in one
  process (a user's history lives in it).
- A point stops early when its error rate passes `max_error_rate` (after MIN_FOR_ERROR_RATE
  finished requests), or, in an open loop, when it is over-saturated: over the last `saturation_s`
  requests arrived more than OVER_ARRIVALS times as fast as they finished and at least OVER_BACKLOG
  more wait than at its start (the queue grows without bound; GuideLLM stops such a point too). The
  requests in flight are cancelled and recorded as such.

The client must not be the bottleneck: the point's process CPU time and the event loop's lag
(a task that sleeps LAG_TICK_S and records how late it wakes) are measured with it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import os
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Callable

from bench_core.errors import die_with_parent
from bench_core.serving.client import new_client, send
from bench_core.serving.records import CANCELLED, RequestRecord
from bench_core.serving.server_metrics import Scraper

LAG_TICK_S = 0.01
MIN_FOR_ERROR_RATE = 5
SATURATION_TICK_S = 0.25
OVER_ARRIVALS = 1.1   # arrivals / completions over the window
OVER_BACKLOG = 5      # requests the backlog grew by over the window


@dataclass
class Load:
    requests: int
    concurrency: int | None = None
    rate: float | None = None        # requests/s; None: closed loop
    burstiness: float = 1.0
    seed: int = 0
    max_error_rate: float = 1.0      # stop the point above this fraction of failed requests
    timeout_s: float = 60.0          # longest wait for the next chunk of a request
    arrivals: list[float] | None = None  # a trace's send times (s from the first); replaces rate's gaps
    think_s: float = 0.0             # closed loop: a user's wait after each finished request
    saturation_s: float = 15.0       # open loop: the window of the over-saturation stop
    workers: int = 1                 # client processes sharing the point (independent requests only)
    start_at: float | None = None    # perf_counter at which to start (a worker waits for its siblings)

    @property
    def open_loop(self) -> bool:
        return bool(self.rate or self.arrivals)

    def gaps(self) -> list[float]:
        """The arrival process: seconds between successive sends (the first at 0)."""
        if self.arrivals:  # from the point's start: a worker's share of a trace starts at its first arrival
            return [self.arrivals[0]] + [b - a for a, b in zip(self.arrivals, self.arrivals[1:])]
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


def run_point(load: Load, url: str, make_body: Callable[[int, int | None], tuple[dict, RequestRecord]],
              metrics_url: str = "", after: Callable[[int, RequestRecord], None] | None = None) -> PointResult:
    """Send `load.requests` requests (`make_body(i, user)` gives request i's body and its empty record;
    user is None in an open loop; `after(user, record)` hears of each finished closed-loop request);
    with `metrics_url`, scrape the server's Prometheus metrics meanwhile.

    Where an event loop already runs in this thread (a notebook kernel's: a sweep runs each
    configuration inside one), the point runs on a thread of its own with its own loop."""
    if load.workers > 1 and after is None:
        return _run_in_workers(load, url, make_body, metrics_url)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_run(load, url, make_body, metrics_url, after))
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bench-serving-point") as pool:
        return pool.submit(asyncio.run, _run(load, url, make_body, metrics_url, after)).result()


async def _run(load: Load, url: str, make_body, metrics_url: str = "", after=None) -> PointResult:
    records: list[RequestRecord] = []
    lags: list[float] = []
    stop = asyncio.Event()
    stopped = ""
    if load.start_at is not None:
        await asyncio.sleep(max(0.0, load.start_at - time.perf_counter()))
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

        async def one(i: int, scheduled: float | None, slots: asyncio.Semaphore | None, who: int | None = None) -> None:
            body, record = make_body(i, who)
            record.scheduled_s = scheduled
            records.append(record)
            try:
                if slots is None:
                    await send(client, url, body, record, t0)
                else:
                    async with slots:
                        await send(client, url, body, record, t0)
            except asyncio.CancelledError:
                record.status, record.error = CANCELLED, "cancelled: the point stopped (error-rate limit or over-saturated)"
                record.end_s = time.perf_counter() - t0
                raise
            if over_limit():
                stop.set()
            if after is not None and who is not None:
                after(who, record)

        saturation = asyncio.create_task(_watch_saturation(records, load, stop, t0)) if load.open_loop else None
        if load.open_loop:
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

            async def user(who: int) -> None:
                for i in counter:
                    if stop.is_set():
                        return
                    await one(i, None, None, who)
                    if load.think_s:
                        try:
                            await asyncio.wait_for(stop.wait(), timeout=load.think_s)
                        except asyncio.TimeoutError:
                            pass

            tasks = {asyncio.create_task(user(who)) for who in range(min(in_flight, load.requests))}
            await _finish(tasks, stop)
        said = ""
        if saturation is not None:
            saturation.cancel()
            (said,) = await asyncio.gather(saturation, return_exceptions=True)
        if scraping:
            scraping.cancel()
            await asyncio.gather(scraping, return_exceptions=True)
            await scraper.scrape(client)  # the counters at the end of the point (prefix-cache hits)
        if stop.is_set():
            failed = sum(not r.ok for r in records)
            stopped = said if isinstance(said, str) and said else (
                f"stopped at the error-rate limit: {failed} of {len(records)} requests failed "
                f"(max_error_rate {load.max_error_rate:g})")
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    watcher.cancel()
    return PointResult(sorted(records, key=lambda r: r.index), t0, wall, cpu, lags, stopped,
                       scraper.figures() if scraper else {})


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


async def _watch_saturation(records: list[RequestRecord], load: Load, stop: asyncio.Event, t0: float) -> str:
    """Sample the backlog (sent, not finished) every SATURATION_TICK_S; when, over the last saturation_s,
    requests arrived more than OVER_ARRIVALS times as fast as they finished and the backlog grew by at
    least OVER_BACKLOG, stop the point and say so (returned, for the row's message)."""
    samples: list[tuple[float, int, int]] = []  # (time, sent, finished)
    try:
        while True:
            await asyncio.sleep(SATURATION_TICK_S)
            now = time.perf_counter() - t0
            samples.append((now, len(records), sum(r.end_s is not None for r in records)))
            if now - samples[0][0] < load.saturation_s:
                continue
            old = next(s for s in samples if s[0] >= now - load.saturation_s)
            arrived, finished = samples[-1][1] - old[1], samples[-1][2] - old[2]
            grew = (samples[-1][1] - samples[-1][2]) - (old[1] - old[2])
            if arrived > OVER_ARRIVALS * finished and grew >= OVER_BACKLOG:
                stop.set()
                return (f"over-saturated: over the last {load.saturation_s:g} s, {arrived} requests arrived and "
                        f"{finished} finished, and the queue grew by {grew} to {samples[-1][1] - samples[-1][2]}: the "
                        "server cannot keep up with this load, so the point stopped (its figures would only "
                        "measure the queue)")
    except asyncio.CancelledError:
        return ""


START_SLACK_S = 0.2  # from the workers' being ready (started, this module imported) to the point's start


def _run_in_workers(load: Load, url: str, make_body, metrics_url: str) -> PointResult:
    """The point on `load.workers` processes (spawned: nothing of this process's state is copied), each
    sending every workers-th request of the point, at the same instant and the same due times."""
    import dataclasses
    import multiprocessing
    requests = [make_body(i, None) for i in range(load.requests)]
    due = list(itertools.accumulate(load.gaps()))
    workers = min(load.workers, load.requests)
    context = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=context, initializer=die_with_parent,
                                                  # each dies with the process that runs the point, even by SIGKILL,
                                                  # so no client is left sending (or waiting on a trace's far arrival)
                                                  initargs=(os.getpid(), signal.SIGKILL, 1))
    pids: list[int] = []
    try:
        pids = list(pool.map(_ready, [START_SLACK_S] * workers))  # each on a process of its own, ready to send
        start = time.perf_counter() + START_SLACK_S
        shares = []
        for w in range(workers):
            mine = list(range(w, load.requests, workers))
            users = None if load.concurrency is None else max(1, len(range(w, load.concurrency, workers)))
            share = dataclasses.replace(load, requests=len(mine), concurrency=users, workers=1, start_at=start,
                                        arrivals=[due[i] for i in mine] if load.open_loop else None, rate=None)
            shares.append((share, url, [requests[i] for i in mine], metrics_url if w == 0 else ""))
        parts = list(pool.map(_worker, shares))
    except BaseException:
        # Ctrl-C, SIGTERM: a share may wait an hour for its trace's next arrival, and a pool's shutdown waits
        # for every share (a stop hung there, its workers left behind): the workers are killed instead. Every
        # process of the pool, not only those that answered _ready (under load a worker can take two of those
        # tasks, or the stop come before they answer): a full suite run found both workers left waiting.
        for pid in set(pids) | set(getattr(pool, "_processes", None) or {}):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    records = []
    for part in parts:  # every worker's times onto the point's start (one monotonic clock for the machine)
        shift = part.started - start
        for r in part.records:
            for name in ("send_s", "first_chunk_s", "end_s", "scheduled_s"):
                value = getattr(r, name)
                setattr(r, name, None if value is None else value + shift)
            r.chunk_s = [t + shift for t in r.chunk_s]
            records.append(r)
    return PointResult(sorted(records, key=lambda r: r.index), start, max(p.started + p.wall_s for p in parts) - start,
                       max(p.client_cpu_s for p in parts), [lag for p in parts for lag in p.loop_lag_ms],
                       "; ".join(p.stopped for p in parts if p.stopped), parts[0].server)


def _worker(share) -> PointResult:
    """One worker process's part of a point: its requests, prebuilt, in order (see _run_in_workers)."""
    load, url, requests, metrics_url = share
    return asyncio.run(_run(load, url, lambda i, user: requests[i], metrics_url))


def _ready(pause: float) -> int:
    """A worker's first task: it is started and has imported this module; held for `pause` so that every
    worker of the pool takes one. Its process id (a stop kills the workers)."""
    time.sleep(pause)
    return os.getpid()
