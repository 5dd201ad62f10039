"""Capacity and fair A/B: `bench find-batch` (the largest per-device batch that runs) and
`bench compare` (two variants measured interleaved, with a ratio, its CI and a verdict).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bench_core.config import (DEFAULT_MAX_BATCH, MAX_BATCH, MIN_COMPILE_WARMUP_STEPS, BenchConfig, ConfigError,
                               check_known_keys)
from bench_core.devices import check_runnable, is_foreign_cpu_oom

Progress = Callable[[str], None]
# A probe is a real run, as short as it can be: first step, FLOP-count step, one timed step
# (with compile, MIN_COMPILE_WARMUP_STEPS warm-up steps: config refuses fewer).
# Training probes include backward and the optimizer step, so their memory is representative.
PROBE_SETTINGS = {"steps": 1, "warmup_steps": 1, "repeats": 1, "min_seconds": 0.0, "profile": False}
RAN = ("ok", "nan")  # a NaN loss still ran: it is a numerics problem, not a capacity one
# == find-batch ========================================================================

@dataclass
class BatchProbe:
    batch_size: int
    status: str                    # ok | nan | oom | error | unsupported (the runner's statuses)
    message: str | None
    step_time_ms: float | None     # the probe's one timed step (a hint, not a measurement)
    probe_s: float                 # wall seconds of the probe, build included
    purpose: str = "search"        # search | health check (a size that ran before, re-run)
    dirty: bool = False            # an out-of-memory that did not come from torch's allocator


@dataclass
class BatchSearch:
    """Grow (x2) until a batch fails or the cap is reached, then bisect between the last
    batch that ran and the first that failed."""
    config: dict
    max_batch_size: int
    batch_margin: float
    largest_ok: int | None = None      # largest batch that ran
    first_failed: int | None = None    # smallest batch that ran out of memory
    batch_size: int | None = None      # what to run: largest_ok, less batch_margin if out of memory bounded it
    stopped: str = ""                  # bracketed (found the edge) | max (cap reached) | none-fit | error
    message: str | None = None
    memory_limit_bytes: int | None = None  # CPU: address-space cap during the search
    isolated: bool = False             # each probe ran in a fresh process
    probes: list[BatchProbe] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.batch_size is not None and self.stopped in ("bracketed", "max")

    def summary(self) -> str:
        """One line, for a row's batch_search column and the sweep log: outcome and every probe."""
        trail = ", ".join(f"{p.batch_size} {p.status}" for p in self.probes)
        if self.stopped == "error":
            return f"batch search stopped by an error after {len(self.probes)} probes ({trail}): {self.message}"
        if self.stopped == "none-fit":
            return f"batch search: even batch 1 ran out of memory ({self.message})"
        edge = (f"{self.first_failed} ran out of memory" if self.first_failed
                else f"reached the cap max_batch_size {self.max_batch_size}")
        margin = f"; batch_margin {self.batch_margin:.0%} -> {self.batch_size}" if self.batch_size != self.largest_ok else ""
        return f"batch search: {self.largest_ok} ran, {edge} (probes: {trail}{margin})"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def format(self) -> str:
        c = self.config
        shape = f"{c['width']}x{c['height']}" + (f"x{c['depth']}" if c.get("depth") else "")
        where = "each probe in a fresh process" if self.isolated else "probes in this process"
        lines = [f"find-batch {c['model']} {c['mode']} {c['precision']} {shape} on {c['device']} ({where})"]
        for p in self.probes:
            timing = f"{p.step_time_ms:9.1f} ms/step" if p.step_time_ms else " " * 17
            note = f"  {p.message}" if p.message else ""
            check = " (health check)" if p.purpose != "search" else ""
            lines.append(f"  batch {p.batch_size:6d}  {p.status:11s} {timing}  ({p.probe_s:.1f} s){check}{note}")
        if self.memory_limit_bytes:
            lines.append(f"  (CPU probes ran under an address-space cap of {self.memory_limit_bytes / 2**30:.1f} GiB, "
                         "so running out of RAM is an error, not the OOM killer)")
        lines.append(self.summary())
        if self.ok:
            lines.append(f"largest batch that ran: {self.largest_ok}; first that failed: "
                         f"{self.first_failed or 'none up to the cap'}; use --batch-size {self.batch_size}")
        return "\n".join(lines)


def find_max_batch(cfg: BenchConfig, max_batch_size: int | None = None, start_batch_size: int = 1,
                   isolate: bool = False, progress: Progress | None = None) -> BatchSearch:
    """Search the largest per-device batch of `cfg` that runs, up to `max_batch_size` (default:
    cfg.max_batch_size); cfg.batch_size is ignored.

    When an out-of-memory bounds the search, the size to run is cfg.batch_margin below the
    largest that ran (a probe is 3 steps in a fresh state; a benchmark runs longer, beside
    what its process already holds), and bisection stops once the bracket is finer than half
    that margin: probing closer to an edge the run stays away from buys nothing.

    Out of memory (CUDA OOM, CPU allocation failure) marks a batch as too large; any other
    failure stops the search (`stopped == "error"`). Assumes memory grows with batch size.
    In-process probes see what earlier probes left behind (oneDNN caches kernels and
    scratchpads per shape: near the limit a CPU search can come out low); `isolate` runs each
    probe in a fresh process instead, like a sweep's runs, at the cost of an import per probe.
    """
    from bench_core.devices import Backend, resolve_device
    max_batch_size = _check_int("max_batch_size", cfg.max_batch_size if max_batch_size is None else max_batch_size, 1)
    start_batch_size = _check_int("batch_size", start_batch_size, 1)
    if start_batch_size > max_batch_size:
        raise ConfigError("batch_size", f"the search starts at {start_batch_size}, above max_batch_size "
                                        f"{max_batch_size}")
    if cfg.world_size > 1:
        raise ConfigError("nproc_per_node", "find-batch searches the per-device batch in one process; "
                                            "run it with nproc_per_node 1 and nnodes 1")
    say = progress or (lambda msg: None)
    search = BatchSearch(config=cfg.to_dict(), max_batch_size=max_batch_size, batch_margin=cfg.batch_margin,
                         isolated=isolate)
    device = resolve_device(cfg.device)

    def ran(batch: int, purpose: str = "search") -> bool:
        probe = _probe(cfg, batch, purpose, isolate)
        search.probes.append(probe)
        say(f"find-batch: batch {batch}{' (health check)' if purpose != 'search' else ''}: {probe.status}"
            + (f" ({probe.message})" if probe.message else ""))
        if probe.status in RAN:
            return True
        if probe.status != "oom":
            raise _SearchError(probe.message or probe.status)
        if purpose == "search" and probe.dirty and not isolate and any(p.status in RAN for p in search.probes):
            if not ran(last_ok_smallest(), "health check"):
                raise _SearchError(f"after '{probe.message}' at batch {batch}, batch {last_ok_smallest()} (which "
                                   "ran before) fails too: this process can no longer run the model (a library, "
                                   "e.g. oneDNN, keeps failing after an allocation failure inside it). Run "
                                   f"find-batch again in a fresh process with --max-batch-size {batch - 1}")
        return False

    def last_ok_smallest() -> int:
        return min(p.batch_size for p in search.probes if p.status in RAN)

    last_ok, first_bad = 0, None
    with _cpu_memory_cap(device.type) as search.memory_limit_bytes:
        try:
            batch = start_batch_size
            while True:  # grow
                if not ran(batch):
                    first_bad = batch
                    break
                last_ok = batch
                if batch >= max_batch_size:
                    break
                batch = min(batch * 2, max_batch_size)
            # bisect, until the bracket is finer than half the margin (exact with batch_margin 0)
            while first_bad is not None and first_bad - last_ok > max(1, int(last_ok * cfg.batch_margin / 2)):
                middle = (last_ok + first_bad) // 2
                if ran(middle):
                    last_ok = middle
                else:
                    first_bad = middle
        except _SearchError as exc:
            search.stopped, search.message = "error", str(exc)
        finally:
            if not isolate:  # isolated probes left nothing here (and this process holds no CUDA context)
                Backend.for_device(device).release_memory()
    search.largest_ok, search.first_failed = last_ok or None, first_bad
    if search.stopped == "error":
        return search
    if not last_ok:
        search.stopped = "none-fit"
        search.message = next(p.message for p in search.probes if p.batch_size == 1)
        return search
    search.stopped = "bracketed" if first_bad else "max"
    search.batch_size = max(1, math.floor(last_ok * (1.0 - cfg.batch_margin))) if first_bad else last_ok
    return search


class _SearchError(Exception):
    pass


def _probe(cfg: BenchConfig, batch_size: int, purpose: str = "search", isolate: bool = False) -> BatchProbe:
    """One real, short run at `batch_size`; the runner turns OOM into a row and frees memory."""
    settings = dict(PROBE_SETTINGS)
    if cfg.compile != "off":  # compiled probes warm up as a compiled run must (CUDA-graph pools included)
        settings["warmup_steps"] = MIN_COMPILE_WARMUP_STEPS
    probe_cfg = cfg.replace(batch_size=batch_size, **settings)
    start = time.perf_counter()
    row = _probe_in_child(probe_cfg) if isolate else probe_row(probe_cfg)
    # An OOM outside torch's allocator may leave oneDNN failing in this process: a health check follows.
    dirty = row["status"] == "oom" and row["device_type"] == "cpu" and is_foreign_cpu_oom(row["message"])
    return BatchProbe(batch_size=batch_size, status="oom" if dirty else row["status"], message=row["message"],
                      step_time_ms=row.get("step_time_ms_median"), probe_s=time.perf_counter() - start,
                      purpose=purpose, dirty=dirty)


def probe_row(cfg: BenchConfig) -> dict:
    """Run the probe here; only the columns the search needs."""
    from bench_core.runner import run_benchmark
    if cfg.compile != "off":
        # Each probe compiles from scratch, as a fresh process would: no dynamic-shape graph
        # from the previous probe's batch size, no cache-limit fallback to eager.
        import torch._dynamo
        torch._dynamo.reset()
    row = run_benchmark(cfg)[0]
    return {k: row[k] for k in ("status", "message", "device_type", "step_time_ms_median")}


def _probe_in_child(cfg: BenchConfig) -> dict:
    """The probe in a fresh Python process; a process killed by the kernel counts as out of memory."""
    row, status, why = in_fresh_process("probe", cfg)
    if row is not None:
        return row
    device_type = "cuda" if cfg.device.startswith("cuda") else cfg.device
    return {"status": status, "message": why, "device_type": device_type, "step_time_ms_median": None}


_CHILD = "import sys\nfrom bench_core.capacity import _child_main\n_child_main(*sys.argv[1:])"


def _child_main(kind: str, config_json: str, result_path: str) -> None:
    """In the fresh process: a probe (the columns the search needs) or a whole run (its rows)."""
    from bench_core.runner import run_benchmark
    cfg = BenchConfig.from_dict(json.loads(config_json))
    result = probe_row(cfg) if kind == "probe" else run_benchmark(cfg, progress=lambda msg: print(msg, flush=True))
    Path(result_path).write_text(json.dumps(result, default=str))


def in_fresh_process(kind: str, cfg: BenchConfig, progress: Progress | None = None):
    """A probe ('probe') or a benchmark ('run') of `cfg` in a fresh Python process, so it meets the
    memory a fresh process has: -> (result, None, None), or (None, status, why) if the process
    died. Killed by SIGKILL (the kernel's OOM killer) is `oom`. Its output lines go to `progress`."""
    import collections
    import signal
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory(prefix="bench-child-") as folder:
        result_path = Path(folder) / "result.json"
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, kind, json.dumps(cfg.to_dict()), str(result_path)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        last = collections.deque(["no output"], maxlen=1)
        for line in proc.stdout:
            if line.strip():
                last.append(line.strip())
                if progress:
                    progress(line.rstrip())
        code = proc.wait()
        if code == 0 and result_path.is_file():
            return json.loads(result_path.read_text()), None, None
    if code == -signal.SIGKILL:
        return None, "oom", f"{kind} process killed (SIGKILL, e.g. by the kernel's OOM killer)"
    return None, "error", f"{kind} process exited with {code}: {last[0]}"


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(name, f"must be a whole number >= {minimum}, got {value!r}")
    return value


@contextlib.contextmanager
def _cpu_memory_cap(device_type: str):
    """On CPU, running out of RAM ends in the kernel's OOM killer, not in an exception. Cap the
    address space at what is in use plus what is available, so the allocation fails instead."""
    import resource
    if device_type != "cpu":
        yield None
        return
    import psutil
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = psutil.Process().memory_info().vms + psutil.virtual_memory().available
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield soft  # already capped tighter (e.g. by the caller): keep it
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield cap
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def run_at_max_batch(cfg: BenchConfig, max_batch_size: int | None = None, isolate: bool = False, progress: Progress | None = None) -> tuple[BatchSearch, list[dict]]:
    """`batch_size: max` (run_benchmark comes here): an explicit search, then the run at the size found
    -- with `isolate`, in a fresh process too, like the probes: the same memory, not what this
    process holds after earlier configurations.

    Rows say what happened: batch_size_requested 'max', batch_size / batch_size_actual the size
    that ran, batch_search the search's one line (outcome and every probe), and config_hash the
    hash of the configuration as requested (so a sweep finds it complete). If nothing fits or
    the search fails, one failure row (oom / error) and no run.
    """
    from bench_core.runner import run_benchmark
    cfg = cfg.replace(batch_size=MAX_BATCH)  # what was asked for, whatever batch cfg named
    say = progress or (lambda msg: None)
    search = find_max_batch(cfg, max_batch_size=max_batch_size, isolate=isolate, progress=say)
    say(search.summary())
    if not search.ok:
        rows = [_failure(cfg, "oom" if search.stopped == "none-fit" else "error", search.summary())]
    elif isolate:
        found = cfg.replace(batch_size=search.batch_size)
        rows, status, why = in_fresh_process("run", found, progress)
        rows = rows or [_failure(found, status, why)]
    else:
        rows = run_benchmark(cfg.replace(batch_size=search.batch_size), progress)
    for row in rows:
        row.update(config_hash=cfg.config_hash(), batch_size_requested=MAX_BATCH, batch_search=search.summary())
    return search, rows


def _failure(cfg: BenchConfig, status: str, message: str) -> dict:
    from bench_core import environment
    from bench_core.devices import resolve_device
    from bench_core.runner import _failure_row, _run_id
    run = {"run_id": _run_id(cfg), "config_hash": cfg.config_hash(), **cfg.to_dict(), "data": "synthetic",
           **environment.collect(resolve_device(cfg.device))}
    return _failure_row(run, status, message)


def add_find_batch_arguments(p: argparse.ArgumentParser) -> None:
    from bench_core.cli import add_config_arguments, add_output_arguments
    p.epilog = f"""Grows the batch (x2 from --batch-size, default 1) until out of memory or --max-batch-size
(default {DEFAULT_MAX_BATCH}), then bisects. When out of memory bounded it, the size to use is
--batch-margin (default 10%) below the largest that ran, and bisection stops at half that margin;
--batch-margin 0 gives the exact edge. Each probe is a real run of 3 steps (train: forward,
backward, optimizer step; with --compile, 3 warm-up steps before the timed one); --steps/--repeats/
--min-seconds do not apply.
Any failure other than out-of-memory stops the search.
examples:
  bench find-batch --model resnet50 --mode train --precision amp-bf16 --device cuda
  bench find-batch --model resnet18 --width 64 --height 64 --device cpu --max-batch-size 512 --out outputs/capacity
In a sweep or `bench run`, batch_size max runs this search (each probe in a fresh process), then
the benchmark at the size found; its rows keep both sizes and the search (batch_search).
exit status: 0 found, 1 nothing fits or the search failed, 2 bad input."""
    add_config_arguments(p)
    p.add_argument("--isolate", action="store_true",
                   help="run each probe in a fresh process (an import per probe; exact for runs in fresh "
                        "processes, e.g. sweeps; in-process CPU probes can come out low near the limit)")
    p.add_argument("--out", metavar="DIR", help="write the search as DIR/find-batch/<id>.json")
    add_output_arguments(p)


def main_find_batch(args: argparse.Namespace) -> int:
    from bench_core.cli import EXIT_FAILED, EXIT_OK, config_from_args
    _refuse_flags(args, ("steps", "warmup_steps", "repeats", "min_seconds", "profile"),
                  "does not apply to find-batch: each probe is a fixed 3-step run")
    cfg = config_from_args(args)
    check_runnable(cfg)
    start = 1 if args.batch_size is None or cfg.batch_size == MAX_BATCH else cfg.batch_size
    search = find_max_batch(cfg, start_batch_size=start, isolate=args.isolate, progress=_progress(args))
    if args.out:
        path = _write_json(Path(args.out) / "find-batch", cfg, search.to_dict())
        _note(args, f"search written to {path}")
    print(json.dumps(search.to_dict(), indent=1, default=str) if args.json else search.format())
    return EXIT_OK if search.ok else EXIT_FAILED


# == compare ===========================================================================

CONFIDENCE = 0.95
# Two-sided 97.5% quantiles of Student's t by degrees of freedom (no scipy here); above 30
# the next lower tabulated df is used, which errs on the wide side.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
         18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060,
         26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}
# Keys that make no sense per variant in one interleaved process.
_NOT_PER_VARIANT = ("repeats", "nproc_per_node", "nnodes", "node_rank", "rdzv_endpoint", "profile")


def t_quantile_975(df: int) -> float:
    usable = [d for d in _T975 if d <= df]
    return _T975[max(usable)] if usable else math.inf


@dataclass
class RatioEstimate:
    """Geometric mean of per-round B/A throughput ratios with a t-interval on their logs."""
    ratio: float
    ci_low: float
    ci_high: float
    rounds: int

    @classmethod
    def from_pairs(cls, a: list[float], b: list[float]) -> "RatioEstimate":
        logs = [math.log(y / x) for x, y in zip(a, b)]
        mean = statistics.fmean(logs)
        half = t_quantile_975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.inf
        return cls(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(logs))

    def verdict(self, tolerance: float) -> tuple[str, str]:
        """faster / slower only when the CI excludes 1 AND the ratio is beyond the tolerance."""
        ci = f"{CONFIDENCE:.0%} CI {self.ci_low:.3f} to {self.ci_high:.3f}"
        if self.ci_low > 1.0 and self.ratio >= 1.0 + tolerance:
            return "faster", f"B is {self.ratio - 1:.1%} faster ({ci})"
        if self.ci_high < 1.0 and self.ratio <= 1.0 - tolerance:
            return "slower", f"B is {1 - self.ratio:.1%} slower ({ci})"
        if self.ci_low <= 1.0 <= self.ci_high:
            why = f"the {ci} includes 1"
        else:
            why = f"the difference {abs(self.ratio - 1):.1%} is within the tolerance {tolerance:.0%} ({ci})"
        return "same within noise", why


@dataclass
class Comparison:
    label_a: str
    label_b: str
    config_a: dict
    config_b: dict
    rounds: int
    tolerance: float
    order: list[str] = field(default_factory=list)           # "AB" or "BA" per round
    samples_per_s_a: list[float] = field(default_factory=list)
    samples_per_s_b: list[float] = field(default_factory=list)
    noisy_rounds: list[int] = field(default_factory=list)  # rounds where a row has noise_flags
    ratio: float | None = None          # B / A throughput (geometric mean over rounds)
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str | None = None          # faster | slower | same within noise | None (a variant failed)
    reason: str = ""
    rows_a: list[dict] = field(default_factory=list, repr=False)
    rows_b: list[dict] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return self.verdict is not None

    def to_dict(self) -> dict:
        """The comparison without its rows (those go to the results store)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("rows_a", "rows_b")}
        out["confidence"] = CONFIDENCE
        out["run_id_a"] = self.rows_a[0]["run_id"] if self.rows_a else None
        out["run_id_b"] = self.rows_b[0]["run_id"] if self.rows_b else None
        return out

    def format(self) -> str:
        c = self.config_a
        head = (f"compare {c['model']} {c['mode']} {c['precision']} batch {c['batch_size']} "
                f"{c['width']}x{c['height']} on {c['device']}: {self.rounds} rounds, interleaved (AB BA AB ...)")
        lines = [head, f"{'variant':32s} {'samples/s':>10s} {'step ms':>9s} {'first step ms':>14s} {'compile s':>10s}"]
        for name, label, rows in (("A", self.label_a, self.rows_a), ("B", self.label_b, self.rows_b)):
            ok = [r for r in rows if r["status"] == "ok"]
            if not ok:
                lines.append(f"{name} {label:30s} {rows[0]['status'] if rows else 'not run'}: "
                             f"{rows[0]['message'] if rows else ''}")
                continue
            first = ok[0]
            lines.append(f"{name} {label:30s} {statistics.median(r['samples_per_s'] for r in ok):10.4g} "
                         f"{statistics.median(r['step_time_ms_median'] for r in ok):9.4g} "
                         f"{first['first_step_ms'] or 0:14.1f} "
                         f"{'' if first['compile_s'] is None else format(first['compile_s'], '.1f'):>10s}")
        if self.samples_per_s_a:
            lines.append(f"{'round':>5s} {'order':>5s} {'A samples/s':>12s} {'B samples/s':>12s} {'B/A':>7s}")
            for i, (order, a, b) in enumerate(zip(self.order, self.samples_per_s_a, self.samples_per_s_b)):
                flag = "  noise flags" if i in self.noisy_rounds else ""
                lines.append(f"{i:5d} {order:>5s} {a:12.4g} {b:12.4g} {b / a:7.3f}{flag}")
        if self.noisy_rounds:
            lines.append(f"{len(self.noisy_rounds)} of {len(self.order)} rounds carry noise flags (other processes "
                         "on the device, high step-time CV): see the rows' noise_flags")
        if self.verdict:
            lines.append(f"B/A throughput = {self.ratio:.3f} ({CONFIDENCE:.0%} CI {self.ci_low:.3f} to "
                         f"{self.ci_high:.3f}, {self.rounds} rounds): {self.verdict.upper()} - {self.reason}")
        else:
            lines.append(f"no verdict: {self.reason}")
        return "\n".join(lines)


def compare(cfg_a: BenchConfig, cfg_b: BenchConfig, rounds: int = 8, tolerance: float = 0.02,
            labels: tuple[str, str] = ("as configured", "as configured"),
            progress: Progress | None = None) -> Comparison:
    """Build A and B once each, then alternate their timed windows: AB, BA, AB, ...

    Each round is one window (cfg.steps / cfg.min_seconds) per variant; the order flips every
    round so drift and "who runs second" cancel. Ratio = B/A samples/s, paired per round.
    """
    import torch
    rounds = _check_int("rounds", rounds, 2)
    if not 0.0 <= tolerance < 1.0:
        raise ConfigError("tolerance", f"must be a fraction in [0, 1), got {tolerance!r}")
    for cfg in (cfg_a, cfg_b):
        if cfg.batch_size == MAX_BATCH:
            raise ConfigError("batch_size", "compare needs a number for both variants (find the largest with "
                                            "bench find-batch)")
        if cfg.world_size > 1:
            raise ConfigError("nproc_per_node", "compare runs both variants in one process; use nproc_per_node 1")
        if cfg.profile:
            raise ConfigError("profile", "compare does not profile (profile with `bench run --profile`)")
    say = progress or (lambda msg: None)
    result = Comparison(labels[0], labels[1], cfg_a.to_dict(), cfg_b.to_dict(), rounds, tolerance)
    if cfg_a.compile != "off" or cfg_b.compile != "off":
        import torch._dynamo
        torch._dynamo.reset()  # compile from scratch, as a fresh process would
    default_threads = torch.get_num_threads()
    from bench_core.runner import Session
    sessions = {"A": Session(cfg_a, say, default_threads), "B": Session(cfg_b, say, default_threads)}
    rows = {"A": result.rows_a, "B": result.rows_b}
    try:
        for name, session in sessions.items():
            say(f"compare: building and warming up {name} ({labels['AB'.index(name)]})")
            if not session.open():
                rows[name].append(session.failure)
                result.reason = f"{name} failed to start: {session.failure['status']}: {session.failure['message']}"
                return result
        for round_index in range(rounds):
            order = "AB" if round_index % 2 == 0 else "BA"
            result.order.append(order)
            for name in order:
                row = sessions[name].window(round_index)
                rows[name].append(row)
                if row["status"] != "ok":
                    result.reason = f"{name} failed in round {round_index}: {row['status']}: {row['message']}"
                    return result
            a, b = result.rows_a[-1]["samples_per_s"], result.rows_b[-1]["samples_per_s"]
            if result.rows_a[-1].get("noise_flags") or result.rows_b[-1].get("noise_flags"):
                result.noisy_rounds.append(round_index)
            result.samples_per_s_a.append(a)
            result.samples_per_s_b.append(b)
            say(f"compare: round {round_index + 1}/{rounds} ({order}): A {a:.4g}, B {b:.4g} samples/s, B/A {b / a:.3f}")
    finally:
        for session in sessions.values():
            session.close()
        torch.set_num_threads(default_threads)
    estimate = RatioEstimate.from_pairs(result.samples_per_s_a, result.samples_per_s_b)
    result.ratio, result.ci_low, result.ci_high = estimate.ratio, estimate.ci_low, estimate.ci_high
    result.verdict, result.reason = estimate.verdict(tolerance)
    return result


def parse_overrides(items: list[str] | None, where: str) -> dict:
    """['compile=default', 'channels-last=true'] -> {'compile': 'default', 'channels_last': 'true'}."""
    values = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigError(where, f"expected KEY=VALUE (a BenchConfig field), got {item!r}")
        values[key] = value.strip()
    check_known_keys(values, BenchConfig.field_names(), where=where)
    for key in values:
        if key in _NOT_PER_VARIANT:
            raise ConfigError(key, f"cannot differ between variants of a compare ({where}); "
                                   f"allowed: any field except {', '.join(_NOT_PER_VARIANT)}")
    return values


def add_compare_arguments(p: argparse.ArgumentParser) -> None:
    from bench_core.cli import add_config_arguments, add_output_arguments
    p.epilog = """Builds A and B once each, then alternates one timed window of each per round (AB, BA, AB, ...).
Reports B/A throughput: the geometric mean of per-round ratios with a 95% t-interval, and a verdict:
faster / slower (the CI excludes 1 and the change exceeds --tolerance) or same within noise.
--repeats does not apply (use --rounds); --steps / --min-seconds size each window.
examples:
  bench compare --model resnet18 --width 64 --height 64 --batch-size 16 --device cpu --a compile=off --b compile=default
  bench compare --model resnet50 --precision amp-bf16 --device cuda --b channels_last=true --rounds 10 --out outputs/ab
exit status: 0 verdict given, 1 a variant failed (rows written with --out), 2 bad input."""
    add_config_arguments(p)
    p.add_argument("--a", dest="a", nargs="+", action="extend", metavar="KEY=VALUE",
                   help="overrides for variant A (BenchConfig fields, e.g. compile=off)")
    p.add_argument("--b", dest="b", nargs="+", action="extend", metavar="KEY=VALUE",
                   help="overrides for variant B (e.g. compile=default or channels_last=true)")
    p.add_argument("--rounds", type=int, default=8, metavar="N", help="rounds of A and B (default 8, at least 2)")
    p.add_argument("--tolerance", type=float, default=0.02, metavar="FRACTION",
                   help="changes smaller than this are 'same within noise' (default 0.02)")
    p.add_argument("--out", metavar="DIR", help="rows to DIR/runs/<run_id>/ (both variants) and the "
                                                "comparison to DIR/compare/<id>.json")
    add_output_arguments(p)


def main_compare(args: argparse.Namespace) -> int:
    from bench_core import results
    from bench_core.cli import EXIT_FAILED, EXIT_OK, config_from_args
    _refuse_flags(args, ("repeats",), "does not apply to compare: use --rounds")
    base = config_from_args(args)
    over_a, over_b = parse_overrides(args.a, "--a"), parse_overrides(args.b, "--b")
    cfg_a = BenchConfig.from_dict({**base.to_dict(), **over_a})
    cfg_b = BenchConfig.from_dict({**base.to_dict(), **over_b})
    for cfg in (cfg_a, cfg_b):
        check_runnable(cfg)
    labels = tuple(" ".join(f"{k}={v}" for k, v in over.items()) or "as configured" for over in (over_a, over_b))
    result = compare(cfg_a, cfg_b, rounds=args.rounds, tolerance=args.tolerance, labels=labels,
                     progress=_progress(args))
    if args.out:
        for rows in (result.rows_a, result.rows_b):
            if rows:
                results.write_run(args.out, rows[0]["run_id"], rows)
        path = _write_json(Path(args.out) / "compare", cfg_b, result.to_dict())
        _note(args, f"comparison written to {path}; rows under {Path(args.out) / 'runs'}")
    print(json.dumps(result.to_dict(), indent=1, default=str) if args.json else result.format())
    return EXIT_OK if result.ok else EXIT_FAILED


# == shared CLI pieces ==================================================================

def _refuse_flags(args, names: tuple[str, ...], why: str) -> None:
    for name in names:
        if getattr(args, name, None) is not None:
            raise ConfigError(name, why)


def _progress(args) -> Progress | None:
    return None if args.quiet or args.json else (lambda msg: print(msg, file=sys.stderr, flush=True))


def _note(args, message: str) -> None:
    if not args.json:
        print(message, file=sys.stderr)


def _write_json(folder: Path, cfg: BenchConfig, data: dict) -> Path:
    from bench_core.results import atomic_write_text
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    path = folder / f"{stamp}-{cfg.config_hash()}.json"
    atomic_write_text(path, json.dumps(data, indent=1, default=str))
    return path
