"""One configuration in this process -> result rows: build, warm up, time, measure, record.

A failure is a result: OOM, NaN loss, an exception or an unsupported precision each
becomes a row with its status and message.
"""
from __future__ import annotations

import contextlib
import gc
import time
import warnings
from typing import Callable, Iterator

import torch

from bench_core.capability import EMULATED, UNSUPPORTED, Support, emulated_warning
from bench_core.config.schema import BenchConfig
from bench_core.devices import Backend, numerics_state, resolve_device, restore_numerics
from bench_core.errors import ConfigError, from_outside, interrupted_by, when_stuck
from bench_core.measure import efficiency, environment, flops, mfu_peak, noise, telemetry
from bench_core.results.disturbed import disturbances
from bench_core.results.rows import error_message, failure_row, finish_row, run_fields
from bench_core.run import busy, comm_overlap, ddp, estimate, float8, memory_estimate, profiling, reference, sharding
from bench_core.run.step import make_step
from bench_core.run.timing import Phases, StepStats, Window, generation_columns, time_one, timed_window
from bench_core.workload.family import Task, first_tensor
from bench_core.workload.models import count_parameters, resolve_model
from bench_core.workload.precision import EmulatedPrecisionWarning, Precision, resolve_precision

Progress = Callable[[str], None]


@contextlib.contextmanager
def old_objects_frozen() -> Iterator[None]:
    """For a benchmark session (one run, a sweep's configurations, a find-batch search): each
    configuration's clean-state gc.collect (Backend.release_memory) walks only what the session made.

    A full collection walks every object in the process: with torch, pandas and IPython imported,
    0.15-0.2 s per configuration or probe on a 2-core EPYC, more than half of a CPU find-batch.
    So: one full collection now (nothing left over from before survives it as garbage), then the
    survivors are frozen (gc.freeze: later collections skip them) until the session ends. Models,
    optimizers and tensors the session makes are collected as before. Where objects are frozen
    already (an enclosing session, a test harness, a pre-fork server) nothing changes."""
    if gc.get_freeze_count():
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run_here(cfg: BenchConfig, progress: Progress | None = None) -> list[dict]:
    """Run one configuration in this process (a torchrun worker runs its rank here); one row per
    repeat, or one row saying why not. bench_core.launch.dispatch decides where a run goes."""
    with old_objects_frozen():
        return _run_here(cfg, progress)


def _run_here(cfg: BenchConfig, progress: Progress | None) -> list[dict]:
    progress = progress or (lambda msg: None)
    if cfg.compile != "off":
        # Compile from scratch, as a fresh process would. Otherwise an earlier compiled run in this process
        # (a notebook, a sweep, find-batch) leaves dynamo's code cache behind: a new batch size recompiles
        # with the batch dimension marked dynamic, and a third run reuses that graph (compile_s ~0.1 s).
        import torch._dynamo
        torch._dynamo.reset()
    session = Session(cfg, progress)
    try:
        with when_stuck(session.keep_finished):  # a stop inside one long op: the watchdog keeps them
            if not session.open():
                return [session.failure]
            for repeat in range(cfg.repeats):
                session.window(repeat)
                if session.failure:
                    return [session.failure]
        rows = session.rows
        noise.flag_unstable_repeats(rows)
        with session.phases("gpu_busy"):  # after every window: how busy the GPU was (host-bound)
            busy.record(session.step, session.backend, rows)
        with session.phases("after_windows"):
            if cfg.mode == "train" and session.ctx.world_size > 1:  # every rank profiles the step: it holds collectives
                comm_overlap.record(session.step, session.backend, rows)
            if cfg.profile:
                profiling.profile_after_window(session.step, session.backend, cfg, rows, rank=session.ctx.rank)
        return rows
    except KeyboardInterrupt as exc:
        session.keep_finished(exc)
        raise
    finally:
        with session.phases("release"):
            session.close()
        session.stamp_phases()


class Session:
    """One configuration built and warmed up once; `window(repeat)` times one repeat -> one row.

    run_benchmark opens one per run; `bench compare` keeps two open and alternates their
    windows. A failure (OOM, error, unsupported) becomes `self.failure`, a row saying why.
    """

    def __init__(self, cfg: BenchConfig, progress: Progress | None = None, default_threads: int | None = None):
        self.cfg = cfg
        self.progress = progress or (lambda msg: None)
        self.default_threads = default_threads or torch.get_num_threads()
        # TF32 and cudnn.benchmark as the caller had them, put back by close(). Taken here, not at
        # open(): `bench compare` makes both sessions before opening either.
        self.numerics_before = numerics_state()
        self.run = run_fields(cfg)
        self.ctx = ddp.context()
        self.backend: Backend | None = None
        self.precision: Precision | None = None
        self.spec = self.step = self.last = self.fixed_steps = self.step_s = None
        self.failure: dict | None = None
        self.stopped: dict | None = None  # the interrupted row of a stop before the last window (keep_finished)
        self.rows: list[dict] = []  # every finished window's row, kept before its progress line
        self.phases = Phases()  # seconds outside the first step, warm-up and windows, by phase

    def open(self) -> bool:
        """Resolve the device, build and warm up; False (and `self.failure`) if that failed."""
        cfg, run, ctx = self.cfg, self.run, self.ctx
        try:
            device = resolve_device(cfg.device, ctx.local_rank)
        except ConfigError as exc:
            self.failure = failure_row(run, "unsupported", str(exc))
            return False
        self.backend = backend = Backend.for_device(device)
        self.precision = resolve_precision(cfg.precision)
        with self.phases("environment"):
            run.update(environment.collect(device))
            run.update(**environment.device_columns(device), world_size=ctx.world_size, dist_backend=ctx.backend or None)
        with self.phases("capability"):
            found = backend.support(self.precision, cfg.mode)
        # A precision the device runs can still lack a kernel some of the task's ops need.
        task_reason = resolve_model(cfg.model).task.unsupported_precision(self.precision, device.type)
        if task_reason:
            found = Support(UNSUPPORTED, task_reason)
        run.update(precision_support=found.level, precision_support_reason=found.reason)
        if not found.runs:
            self.failure = failure_row(run, "unsupported", found.reason)
            return False
        if found.level == EMULATED:
            # Asked for explicitly, it runs (people want to see what it costs); one warning per
            # precision and process, the same text in a terminal and in a notebook's output.
            warnings.warn(emulated_warning(self.precision, found), EmulatedPrecisionWarning, stacklevel=2)
        backend.bind()  # this process benchmarks: the only place a CUDA context is made
        with self.phases("build"):  # what its named phases inside leave: the model, casts, workload, wraps
            return self._guarded(self._build) is not None

    def stamp_phases(self) -> None:
        """Every row of this configuration says where its process spent the time outside the windows."""
        text = self.phases.text()
        for row in self.rows + [r for r in (self.failure, self.stopped) if r]:
            row["phase_times_s"] = text

    def keep_finished(self, exc: KeyboardInterrupt) -> None:
        """Ctrl-C or SIGTERM: the repeats that finished are kept, the rest is one interrupted row (none when
        every window had finished: a stop in the profile after them leaves the configuration whole); the
        caller (bench run, a notebook) finds them on the exception and records them."""
        if len(self.rows) < self.cfg.repeats:
            self.stopped = failure_row(dict(self.run), "interrupted", f"stopped by {interrupted_by(exc)} after "
                                                                      f"{len(self.rows)} of {self.cfg.repeats} repeats")
            self.stopped["repeat"] = len(self.rows)
        self.stamp_phases()  # (again at close, with the release: the watchdog's stop never gets there)
        exc.rows = self.rows + ([self.stopped] if self.stopped else [])

    def window(self, repeat: int) -> dict:
        """One timed window -> one row (the failure row if it failed)."""
        with self.phases("window_edges"):  # telemetry's start and stop, the row: the window itself is its own
            return self._guarded(self._window, repeat) or self.failure

    def close(self) -> None:
        """Free the model, restore the threads and the numerics knobs (TF32, cudnn.benchmark):
        the next configuration, or the notebook cell after a run, starts as this one did."""
        self.step = self.last = None
        torch.set_num_threads(self.default_threads)
        restore_numerics(self.numerics_before)
        if self.backend is not None:
            self.backend.release_memory()

    def _apply_knobs(self) -> None:
        # Process-wide knobs, set before every window: another open session may have changed them.
        torch.set_num_threads(self.cfg.num_threads or self.default_threads)
        self.run.update(self.backend.apply_knobs(self.precision, self.cfg.cudnn_benchmark),
                        threads=torch.get_num_threads())

    def _build(self) -> bool:
        cfg, run, backend, precision, ctx = self.cfg, self.run, self.backend, self.precision, self.ctx
        device = backend.device
        self._apply_knobs()
        self.spec = spec = resolve_model(cfg.model)
        task = spec.task
        run.update(task.config_facts(cfg))  # before the build: a build that fails says them too
        phases = self.phases
        processes = cfg.nproc_per_node if ctx.world_size > 1 else 1
        with phases("memory_estimate"):  # nothing allocated: what the parameter count says, then fake tensors
            least = memory_estimate.floor(task, spec, cfg, precision)
            run.update(least.columns() if least else {})
            memory_estimate.check_fits(least, backend, processes)  # too large for any trace: an oom row at once
            needed = memory_estimate.estimate(task, spec, cfg, precision, device.type)
        run.update(needed.columns() if needed else {})
        memory_estimate.check_fits(needed, backend, processes)
        # A variant against its reference (fp32 eager NCHW; float8: amp-bf16 eager), built and freed here, outside
        # every window.
        with phases("output_check"):
            run.update(reference.check_outputs(cfg, spec, backend, make_step, ctx.world_size))
        run["mem_before_build_bytes"] = backend.in_use_bytes()
        torch.manual_seed(cfg.seed)  # the check drew from the generator: the same weights as without it
        with torch.device(device):  # random weights made on the device: an 8B model never sits in host memory
            model = spec.build(cfg).to(device)
        run["params_count"] = count_parameters(model)  # every later row of this run carries it
        sample_unit, throughput_unit = task.units(cfg)
        run.update(task=task.name, sample_unit=sample_unit, throughput_unit=throughput_unit, mfu_note=task.mfu_note,
                   **task.model_facts(model))
        formula = task.formula_flops(model, cfg)  # before any cast: it counts parameters, not bytes
        with phases("peak"):
            peak = mfu_peak.peak_for(device.type, backend.device_name(), precision.name, threads=torch.get_num_threads(),
                                  measure=estimate.may_be_long(cfg, formula)) if formula else None
        warned = estimate.check_formula(cfg, task, formula, peak)  # before any step
        input_dtype = getattr(torch, precision.cast_dtype) if precision.cast_dtype else torch.float32
        if precision.cast_dtype:
            model = model.to(input_dtype)
        if cfg.channels_last:
            model = model.to(memory_format=torch.channels_last)
        model.train(cfg.mode == "train")
        # Tensor-parallel peers share a batch: the workload's part of the global batch is the data-parallel rank's.
        workload = task.make_workload(spec, cfg, device, input_dtype, rank=ctx.rank // cfg.tp_degree)
        run["input_shape"] = task.sample_shape(cfg)
        run.update(float8.convert(model, precision))  # before tensor parallel and FSDP wrap its linear layers
        model, facts, precision = sharding.wrap(model, task, cfg, precision, device)
        run.update(facts)

        eager_step, eager_last = make_step(cfg, model, workload, precision, device)
        self.step, self.last = eager_step, eager_last
        if cfg.compile != "off":
            compiled = torch.compile(model, mode=None if cfg.compile == "default" else cfg.compile)
            self.step, self.last = make_step(cfg, compiled, workload, precision, device)

        self.progress(f"{cfg.model} {cfg.mode} {cfg.precision} bs={cfg.batch_size}: warm-up")
        backend.reset_peak_memory()
        with phases("first_step"):
            first_s = time_one(self.step, backend)
        estimate.say_warmup(self.progress, cfg, first_s, run)
        if not warned:
            estimate.check_first_step(cfg, task, first_s)
        losses = [self._loss()]
        run["first_step_ms"] = first_s * 1e3
        run["compile_s"] = first_s if cfg.compile != "off" else None
        with phases("flop_count"):
            counted = flops.count_flops(eager_step)  # outside any window; doubles as a warm-up step
        run.update(float8.eager_note(cfg, counted.ops, run.get("reference_ops_per_step")))  # why eager fp8 is slow
        losses.append(self._loss(eager_last))  # the count's step is the eager one: its loss, not the compiled step's again
        # With compile on, the eager step has its own optimizer: once counted, drop it, or its
        # state (momentum, Adam moments: up to 2x the parameters) stays on the device all run.
        del eager_step, eager_last
        warm_start = time.perf_counter()
        for done in range(max(cfg.warmup_steps - 1, 0)):
            self.step()
            losses.append(self._loss())
            estimate.say_warmup_step(self.progress, cfg, done, first_s)
        backend.synchronize()
        run["warmup_s"] = time.perf_counter() - warm_start
        phases.add("warmup", run["warmup_s"])
        if cfg.mode == "train":  # each rank's loss is of its part of the global batch: the mean is the batch's
            run["warmup_losses"] = " ".join(f"{loss:.9g}" for loss in ddp.mean_over_ranks(losses))
        self.step_s = per_step_estimate = run["warmup_s"] / (cfg.warmup_steps - 1) if cfg.warmup_steps > 1 else first_s
        if cfg.compile == "off" and cfg.warmup_steps > 1:
            # The counted step is one of the warm-up's steps (warmup_steps_left): as long as a plain one of them is
            # warm-up, the rest is the counting's own cost (an eager step beside a compiled one is no warm-up of it)
            phases.move("flop_count", "warmup", per_step_estimate)
        self.fixed_steps = ddp.agree_steps(cfg, per_step_estimate)
        run.update(workload.facts)  # what the workload learnt in its first steps (a KV cache's size)
        run.update(batch_size_actual=cfg.batch_size, global_batch_size=cfg.batch_size * (ctx.world_size // cfg.tp_degree),
                   **_flops_fields(counted, formula, cfg.batch_size, run.get("attn_implementation")))
        return True

    def _window(self, repeat: int) -> dict:
        cfg, backend, ctx = self.cfg, self.backend, self.ctx
        self._apply_knobs()
        ddp.barrier()
        # Each window's own peak: not the build's, the FLOP-count step's or compilation's.
        backend.reset_peak_memory()
        inner_marks = (cfg.new_tokens or 0) if cfg.mode == "generate" else 0  # generate marks each new token
        with telemetry.Sampler(backend) as sampler, _no_recompile(cfg.compile), self.phases("windows"):
            window = timed_window(self.step, backend, cfg.steps, cfg.min_seconds, fixed_steps=self.fixed_steps,
                                  step_s=self.step_s, marks_per_step=1 + inner_marks)
        window = ddp.slowest(window)
        row = {**self.run, "repeat": repeat,
               **_throughput(cfg, self.spec.task, window, self.run["global_batch_size"], ctx.world_size),
               **(generation_columns(window, self.run["global_batch_size"], cfg.prompt_len, cfg.new_tokens)
                  if cfg.mode == "generate" else {}),
               **ddp.memory_over_ranks(backend.memory_stats()), **ddp.telemetry_over_ranks(sampler.columns()),
               **_finiteness(cfg, self.last[0])}
        row["status"] = "ok" if row["loss_finite"] else "nan"
        row["message"] = None if row["loss_finite"] else \
            f"non-finite {'loss' if cfg.mode == 'train' else 'output'} in repeat {repeat}"
        row.update(efficiency.derive(row, cfg))
        row = finish_row(row)
        self.rows.append(row)  # before the line that says so: a signal after it cannot lose the row
        # Numbered as the rows and the table number them (from 0), with the count beside it; a figure measured
        # beside other processes (or a throttled device) says so on its own line, in a terminal and a notebook alike.
        flags = disturbances(row.get("noise_flags"))
        mark = f"[{row['status']}, DISTURBED: {flags}]" if flags else f"[{row['status']}]"
        self.progress(f"{cfg.model} {cfg.mode} {cfg.precision} bs={cfg.batch_size}: repeat {repeat} "
                      f"({repeat + 1} of {cfg.repeats}) {row['throughput']:.1f} {row['throughput_unit']} {mark}")
        return row

    def _loss(self, last: list | None = None) -> float:
        """The last step's loss (train), read outside any timed window: the warm-up's losses show that
        a sharded run computes what one process computes. `last`: another step's output list (the eager step)."""
        tensor = first_tensor((last or self.last)[0]) if self.cfg.mode == "train" else None
        return float(tensor.detach().float()) if tensor is not None and tensor.numel() == 1 else float("nan")

    def _guarded(self, method, *args):
        try:
            return method(*args)
        except BaseException as exc:  # noqa: BLE001 - every failure must become a row, a model's sys.exit() too
            if from_outside(exc):  # Ctrl-C, SIGTERM: the run stops (its finished repeats are kept)
                raise
            status = "oom" if self.backend.is_oom(exc) else "error"
            self.failure = failure_row(self.run, status, error_message(exc))
            return None


@contextlib.contextmanager
def _no_recompile(compile_mode: str):
    """A recompilation inside the timed window is an error, not a slowdown."""
    if compile_mode == "off":
        yield
        return
    import torch._dynamo
    previous = torch._dynamo.config.error_on_recompile
    torch._dynamo.config.error_on_recompile = True
    try:
        yield
    finally:
        torch._dynamo.config.error_on_recompile = previous


def _throughput(cfg, task: Task, window: Window, global_batch: int, world_size: int) -> dict:
    stats = StepStats.from_seconds(window.step_s)
    samples = global_batch * window.steps
    seconds = window.seconds
    return {
        "timed_steps": window.steps, "timed_s": seconds, "timed_s_host": window.host_seconds,
        "samples_per_s": samples / seconds, "throughput": task.throughput(cfg, samples / seconds),
        "samples_per_s_per_device": samples / seconds / world_size,
        "throughput_per_device": task.throughput(cfg, samples / seconds) / world_size,
        "batches_per_s": window.steps * world_size / seconds,
        **task.throughput_columns(cfg, samples / seconds),
        "s_per_iter": seconds / window.steps,
        **stats.to_columns(),
        "step_times_ms": " ".join(f"{s * 1e3:.3f}" for s in window.step_s),
    }


# The attention kernel when transformers asked for SDPA and no fused kernel ran: SDPA's math
# fallback decomposes into matmuls before dispatch, so no kernel of its own is seen.
SDPA_MATH = "math (no fused kernel)"


def _flops_fields(counted: flops.Counted, formula: tuple[float, str] | None, batch: int, attn: str | None) -> dict:
    """FLOPs per sample as MFU divides them: the task's formula where it has one, else counted;
    the counter's figure always beside it, and the attention kernels the counted step dispatched."""
    per_sample_counted = counted.flops / batch if counted.flops else None
    if formula is not None:
        per_sample, method = formula
    else:
        per_sample, method = per_sample_counted, (flops.COUNTED if counted.flops else None)
    kernel = ", ".join(counted.attention_kernels) or (SDPA_MATH if attn == "sdpa" else None)
    return {"flops_per_sample": per_sample, "flops_method": method, "flops_per_sample_counted": per_sample_counted,
            "attention_kernel": kernel,
            "bytes_per_sample_flop_ops": counted.flop_op_bytes / batch if counted.flop_op_bytes else None,
            "bytes_per_sample_other_ops": counted.other_bytes / batch if counted.other_bytes else None,
            "ops_per_step": counted.ops or None}


def _finiteness(cfg, output) -> dict:
    tensor = first_tensor(output)
    if tensor is None:
        return {"loss_final": None, "loss_finite": True}
    finite = bool(torch.isfinite(tensor.detach()).all())
    loss = float(tensor.detach().float()) if cfg.mode == "train" and tensor.numel() == 1 else None
    return {"loss_final": loss, "loss_finite": finite}
