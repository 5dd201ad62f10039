"""`batch_size: max` and `bench find-batch`: the largest per-device batch that runs, found by an
explicit search (grow, then bisect) of short real runs, each probe in a fresh process when asked.

A sharded configuration on several processes of one node (fsdp, fsdp-tp) is searched the same way, every
probe a run of all its processes (torchrun) at one per-rank batch: a probe out of memory on any rank is
out of memory for the configuration, so every rank runs the batch found. Its per-rank memory estimate
(run/memory_estimate.py) bounds the search first, where the free memory is known without taking any of it
(CPU: the node's available memory shared by its processes): a batch beyond it is not tried.

Without a start batch (find-batch without --batch-size, `batch_size: max`), the first probe is the largest batch
whose estimate fits the device's memory less the caching allocator's headroom: the search grows and bisects from
near the edge instead of doubling up from 1.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench_core.config.schema import (
    MAX_BATCH,
    MIN_COMPILE_WARMUP_STEPS,
    BenchConfig,
    check_spread_search,
)
from bench_core.config.values import check_int
from bench_core.devices import Backend, is_foreign_cpu_oom, resolve_device
from bench_core.errors import ConfigError
from bench_core.launch.placement import run_placed
from bench_core.launch.supervisor import python_command, supervise
from bench_core.measure import environment
from bench_core.results.disturbed import disturbances
from bench_core.results.rows import failure_row, run_fields
from bench_core.run import memory_estimate
from bench_core.run.runner import Progress, old_objects_frozen
from bench_core.workload.models import resolve_model
from bench_core.workload.precision import resolve_precision

# A probe is a real run, as short as it can be: first step, FLOP-count step, one timed step
# (with compile, MIN_COMPILE_WARMUP_STEPS warm-up steps: config refuses fewer).
# Training probes include backward and the optimizer step, so their memory is representative.
PROBE_SETTINGS = {"steps": 1, "warmup_steps": 1, "repeats": 1, "min_seconds": 0.0, "profile": False}


RAN = ("ok", "nan")  # a NaN loss still ran: it is a numerics problem, not a capacity one
# A batch too small for the model to train: BatchNorm needs more than one value per channel (a
# resnet at 32 px has 1x1 maps at its end, so batch 1 gives one). torch says so in this error; the
# search then grows the batch, as if it had run, until one runs: a size that small is not the edge.
TOO_SMALL = "too-small"
TOO_SMALL_MESSAGE = "Expected more than 1 value per channel when training"


@dataclass
class BatchProbe:
    batch_size: int
    status: str                    # ok | nan | oom | error | unsupported (the runner's statuses), or too-small
    message: str | None
    step_time_ms: float | None     # the probe's one timed step (a hint, not a measurement)
    probe_s: float                 # wall seconds of the probe, build included
    purpose: str = "search"        # search | health check (a size that ran before, re-run)
    dirty: bool = False            # an out-of-memory that did not come from torch's allocator
    params_count: int | None = None  # the model's parameters, when the probe built it
    precision_support: str | None = None  # native | emulated | unsupported, as the probe's row says
    disturbed_by: str = ""         # the disturbing noise flags of its row (results.disturbed), '' when none


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
    estimate_bound: int | None = None  # several processes: the largest batch whose per-rank estimate fits
    estimate_note: str | None = None   # the estimate that bounded it (of the batch after it) and the limit
    estimate_start: int | None = None  # the first probe, from the memory estimate (no start batch given)
    probes: list[BatchProbe] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.batch_size is not None and self.stopped in ("bracketed", "max")

    @property
    def params_count(self) -> int | None:
        """The model's parameters, from the first probe that built it (None if none did)."""
        return next((p.params_count for p in self.probes if p.params_count is not None), None)

    def summary(self) -> str:
        """One line, for a row's batch_search column and the sweep log: outcome and every probe."""
        trail = ", ".join(f"{p.batch_size} {p.status}" for p in self.probes)
        if self.stopped == "error":
            return f"batch search stopped by an error after {len(self.probes)} probes ({trail}): {self.message}"
        if self.stopped == "none-fit" and not self.probes:
            return f"batch search: even batch 1 does not fit by the per-rank memory estimate ({self.estimate_note})"
        if self.stopped == "none-fit":
            smallest = next(p.batch_size for p in self.probes if p.status == "oom")
            return f"batch search: even batch {smallest} ran out of memory ({self.message})"
        edge = (f"{self.first_failed} ran out of memory" if self.first_failed
                else f"reached the per-rank memory estimate's bound {self.max_batch_size} ({self.estimate_note})"
                if self.estimate_bound == self.max_batch_size
                else f"reached the cap max_batch_size {self.max_batch_size}")
        margin = f"; batch_margin {self.batch_margin:.0%} -> {self.batch_size}" if self.batch_size != self.largest_ok \
            else ""
        start = f"; first probe {self.estimate_start} from the memory estimate" if self.estimate_start else ""
        return f"batch search: {self.largest_ok} ran, {edge} (probes: {trail}{margin}{start})"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def format(self) -> str:
        c = self.config
        shape = f"{c['width']}x{c['height']}" + (f"x{c['depth']}" if c.get("depth") else "")
        where = "each probe in a fresh process" if self.isolated else "probes in this process"
        # As bench run's table: an emulated precision's step times are software, said in the title.
        emulated = (f" (EMULATED: {c['precision']} runs in software here: not what a GPU would show)"
                    if any(p.precision_support == "emulated" for p in self.probes) else "")
        lines = [f"find-batch {c['model']} {c['mode']} {c['precision']}{emulated} {shape} on {c['device']} ({where})"]
        for p in self.probes:
            timing = f"{p.step_time_ms:9.1f} ms/step" if p.step_time_ms else " " * 17
            note = f"  {p.message}" if p.message else ""
            check = " (health check)" if p.purpose != "search" else ""
            note += f"  DISTURBED: {p.disturbed_by}" if p.disturbed_by else ""  # marked where it is shown
            lines.append(f"  batch {p.batch_size:6d}  {p.status:11s} {timing}  ({p.probe_s:.1f} s){check}{note}")
        if self.memory_limit_bytes:
            lines.append(f"  (CPU probes ran under an address-space cap of {self.memory_limit_bytes / 2**30:.1f} GiB, "
                         "so running out of RAM is an error, not the OOM killer)")
        lines.append(self.summary())
        if self.ok:
            lines.append(f"largest batch that ran: {self.largest_ok}; first that failed: "
                         f"{self.first_failed or 'none up to the cap'}; use --batch-size {self.batch_size}")
        return "\n".join(lines)


def find_max_batch(cfg: BenchConfig, max_batch_size: int | None = None, start_batch_size: int | None = 1,
                   isolate: bool = False, progress: Progress | None = None) -> BatchSearch:
    """Search the largest per-device batch of `cfg` that runs, up to `max_batch_size` (default:
    cfg.max_batch_size), from `start_batch_size` (None: from the memory estimate); cfg.batch_size is ignored.

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
    max_batch_size = check_int("max_batch_size", cfg.max_batch_size if max_batch_size is None else max_batch_size, 1)
    start_batch_size = check_int("batch_size", start_batch_size, 1) if start_batch_size is not None else None
    if start_batch_size is not None and start_batch_size > max_batch_size:
        raise ConfigError("batch_size", f"the search starts at {start_batch_size}, above max_batch_size "
                                        f"{max_batch_size}")
    check_spread_search(cfg)
    spread = cfg.world_size > 1  # every probe is a torchrun launch: fresh processes already
    say = progress or (lambda msg: None)
    search = BatchSearch(config=cfg.to_dict(), max_batch_size=max_batch_size, batch_margin=cfg.batch_margin,
                         isolated=isolate or spread)
    device = resolve_device(cfg.device)
    if spread:
        _bound_by_estimate(search, cfg, device)
        if search.estimate_bound == 0:
            search.stopped, search.message = "none-fit", search.estimate_note
            return search
        max_batch_size = search.max_batch_size
        isolate = False
    if start_batch_size is None:
        start_batch_size = _start_from_estimate(search, cfg, device, max_batch_size)
        if search.estimate_start:  # a probe near the memory's edge can take minutes: say what comes first
            say(f"find-batch: first probe at batch {start_batch_size}, the largest whose memory estimate fits")

    def ran(batch: int, purpose: str = "search") -> bool | None:
        """True: it ran; False: out of memory; None: too small to train (grow past it)."""
        probe = _probe(cfg, batch, purpose, isolate)
        search.probes.append(probe)
        if probe.status == "error" and TOO_SMALL_MESSAGE in (probe.message or "") and \
                not any(p.status in RAN for p in search.probes):
            probe.status = TOO_SMALL
        say(f"find-batch: batch {batch}{' (health check)' if purpose != 'search' else ''}: {probe.status}"
            + (f" ({probe.message})" if probe.message else ""))
        if probe.status in RAN:
            return True
        if probe.status == TOO_SMALL:
            return None
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
    # (several processes: no address-space cap here; each worker refuses a batch beyond its estimate itself)
    cap = contextlib.nullcontext() if spread else _cpu_memory_cap(device.type)
    with old_objects_frozen(), cap as search.memory_limit_bytes:
        try:
            batch = start_batch_size
            while True:  # grow
                outcome = ran(batch)
                if outcome is False:
                    first_bad = batch
                    break
                last_ok = batch if outcome else last_ok
                if batch >= max_batch_size:
                    if not last_ok:
                        raise _SearchError(f"every batch up to max_batch_size {max_batch_size} is too small for "
                                           f"{cfg.model} to train: {search.probes[-1].message}")
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
        search.message = next(p.message for p in search.probes if p.status == "oom")
        return search
    search.stopped = "bracketed" if first_bad else "max"
    search.batch_size = max(1, math.floor(last_ok * (1.0 - cfg.batch_margin))) if first_bad else last_ok
    return search


class _SearchError(Exception):
    pass


def _bound_by_estimate(search: BatchSearch, cfg: BenchConfig, device) -> None:
    """Several processes: the search's cap lowered to the largest batch whose per-rank estimate fits the
    rank's share of free memory, where that is known here without taking any (CPU). On CUDA this process
    opens no CUDA context (it would hold memory on a rank's GPU): each worker's own estimate check refuses a
    batch beyond it within seconds, before allocating (an oom probe)."""
    limit = Backend.for_device(device).free_memory_bytes(cfg.nproc_per_node) if device.type == "cpu" else None
    if limit is None:
        return
    spec = resolve_model(cfg.model)
    found = memory_estimate.largest_batch_that_fits(spec.task, spec, cfg, resolve_precision(cfg.precision), limit,
                                                    device.type)
    if found is None:
        return
    search.estimate_bound, beyond = found
    search.estimate_note = (f"batch {search.estimate_bound + 1 if search.estimate_bound else 1}: {beyond.text()}; "
                            f"{limit / memory_estimate.GIB:.4g} GiB free per rank of {cfg.nproc_per_node}")
    search.max_batch_size = max(1, min(search.max_batch_size, search.estimate_bound))


def _start_from_estimate(search: BatchSearch, cfg: BenchConfig, device, max_batch_size: int) -> int:
    """The first probe: the largest batch whose memory estimate fits the device's memory (what is free here;
    a GPU's size) less the caching allocator's headroom (RESERVED_OVER_ALLOCATED), so that it most likely
    runs and the search only grows past it and bisects; 1 where there is no estimate or no size."""
    # A GPU's size (from its properties: its free memory would open a CUDA context here), else what is free here
    limit = environment.collect(device).get("gpu_memory_bytes") or \
        Backend.for_device(device).free_memory_bytes(cfg.nproc_per_node)
    spec = resolve_model(cfg.model)
    found = memory_estimate.largest_batch_that_fits(
        spec.task, spec, cfg, resolve_precision(cfg.precision),
        int(limit / memory_estimate.RESERVED_OVER_ALLOCATED), device.type) if limit else None
    if not found or not found[0]:
        return 1
    search.estimate_start = min(found[0], max_batch_size)
    return search.estimate_start


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
                      purpose=purpose, dirty=dirty, params_count=row.get("params_count"),
                      precision_support=row.get("precision_support"), disturbed_by=disturbances(row.get("noise_flags")))


def probe_row(cfg: BenchConfig) -> dict:
    """Run the probe here; only the columns the search needs."""
    if cfg.compile != "off":
        # Each probe compiles from scratch, as a fresh process would: no dynamic-shape graph
        # from the previous probe's batch size, no cache-limit fallback to eager.
        import torch._dynamo
        torch._dynamo.reset()
    row = run_placed(cfg)[0]
    return {k: row.get(k) for k in ("status", "message", "device_type", "step_time_ms_median", "params_count",
                                    "precision_support", "noise_flags")}


def _probe_in_child(cfg: BenchConfig) -> dict:
    """The probe in a fresh Python process; a process killed by the kernel counts as out of memory."""
    row, status, why = in_fresh_process("probe", cfg)
    if row is not None:
        return row
    device_type = "cuda" if cfg.device.startswith("cuda") else cfg.device
    return {"status": status, "message": why, "device_type": device_type, "step_time_ms_median": None}


_CHILD = ("import sys\nfrom bench_core.errors import end_process\nfrom bench_core.launch.batch_search import _child_main\n"
          "_child_main(*sys.argv[1:])\nend_process(0)")


def _child_main(kind: str, config_json: str, result_path: str) -> None:
    """In the fresh process: a probe (the columns the search needs) or a whole run (its rows)."""
    cfg = BenchConfig.from_dict(json.loads(config_json))
    result = probe_row(cfg) if kind == "probe" else run_placed(cfg, progress=lambda msg: print(msg, flush=True))
    Path(result_path).write_text(json.dumps(result, default=str))


def in_fresh_process(kind: str, cfg: BenchConfig, progress: Progress | None = None):
    """A probe ('probe') or a benchmark ('run') of `cfg` in a fresh Python process, so it meets the
    memory a fresh process has: -> (result, None, None), or (None, status, why) if the process
    died. Killed by SIGKILL (the kernel's OOM killer) is `oom`. Its output lines go to `progress`."""
    with tempfile.TemporaryDirectory(prefix="bench-child-") as folder:
        result_path = Path(folder) / "result.json"

        def show(line: str) -> bool:
            if progress and line.strip():
                progress(line)
            return False  # kept in the tail too: its last line explains a failure
        outcome = supervise(python_command("-c", _CHILD, kind, json.dumps(cfg.to_dict()), str(result_path)),
                            on_line=show)
        if outcome.returncode == 0 and result_path.is_file():
            return json.loads(result_path.read_text()), None, None
    if outcome.killed_by_sigkill:
        return None, "oom", f"{kind} process killed (SIGKILL, e.g. by the kernel's OOM killer)"
    return None, "error", f"{kind} process exited with {outcome.returncode}: {outcome.last_line()}"


@contextlib.contextmanager
def _cpu_memory_cap(device_type: str):
    """On CPU, running out of RAM ends in the kernel's OOM killer, not in an exception. Cap the
    address space at what is in use plus what is available, so the allocation fails instead.
    Where there is no RLIMIT_AS (Windows), no cap: a probe too large fails as the OS decides."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on the machines the tests run on
        resource = None
    if device_type != "cpu" or resource is None:
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
    cfg = cfg.replace(batch_size=MAX_BATCH)  # what was asked for, whatever batch cfg named
    say = progress or (lambda msg: None)
    search = find_max_batch(cfg, max_batch_size=max_batch_size, start_batch_size=None, isolate=isolate, progress=say)
    say(search.summary())
    if not search.ok:
        rows = [_failure(cfg, "oom" if search.stopped == "none-fit" else "error", search.summary(),
                         search.params_count)]
    elif isolate and cfg.world_size == 1:  # (torchrun's workers are fresh processes already)
        found = cfg.replace(batch_size=search.batch_size)
        rows, status, why = in_fresh_process("run", found, progress)
        rows = rows or [_failure(found, status, why, search.params_count)]
    else:
        rows = run_placed(cfg.replace(batch_size=search.batch_size), progress)
    for row in rows:
        row.update(config_hash=cfg.config_hash(), batch_size_requested=MAX_BATCH, batch_search=search.summary())
    return search, rows


def _failure(cfg: BenchConfig, status: str, message: str, params_count: int | None) -> dict:
    # The probes built the model (unless the first failed before): its size is known all the same.
    return failure_row({**run_fields(cfg), **environment.collect(resolve_device(cfg.device)),
                        "params_count": params_count}, status, message)
