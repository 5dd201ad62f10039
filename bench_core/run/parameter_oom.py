"""An `oom` row said before torch or transformers is imported: a configuration whose parameters (and in training
their gradients and optimizer state) alone exceed the CPU's free memory, counted from an `hf:` config.json of a
known decoder family (workload/decoder_params.py). A 1.2-trillion-parameter Llama is said too large in a fraction
of a second, where importing torch and transformers to check its configuration took 6-8 s of a 2-core CPU.

The row is the one the run itself writes at its memory floor (runner.Session._build: memory_estimate.floor, then
check_fits), in the same words, with what only torch can say left empty (measure/fingerprint.machine_columns names
it). It is said only where that verdict is certain; anywhere else (another model or precision, a GPU, several
processes, a batch search, a configuration its own check would refuse) this says nothing and the run goes on
as it would have.
"""
from __future__ import annotations

import time

from bench_core.config.schema import MAX_BATCH, BenchConfig
from bench_core.errors import ConfigError, error_message
from bench_core.host import available_memory_bytes, cpu_model
from bench_core.measure.fingerprint import machine_columns, slurm_job
from bench_core.results.rows import failure_row, run_fields
from bench_core.run.memory_floor import beyond_free, parameter_floor
from bench_core.workload.decoder_params import parameter_count
from bench_core.workload.models import resolved_as
from bench_core.workload.text import known_decoder_spec

MODES = ("train", "infer", "generate")  # (serve drives a server; its memory is the engine's)
FLOAT32_BYTES = 4  # fp32: a parameter, its gradient and each optimizer state (memory_estimate._parameter_bytes)


def parameter_oom_rows(values: dict) -> list[dict] | None:
    """The one `oom` row of the configuration `values` (BenchConfig fields, as a command line gives them), where
    its parameters alone certainly exceed the CPU's free memory; None where that is not certain."""
    started = time.perf_counter()
    prefix, _, inner = str(values.get("model", "")).strip().partition(":")
    spec = known_decoder_spec(inner) if prefix == "hf" and inner else None
    if spec is None:
        return None
    try:
        with resolved_as(spec):  # the configuration's own checks, against the model as the file gives it
            cfg = BenchConfig.from_dict(dict(values))
    except ConfigError:
        return None  # the configuration's own check, with transformers, says what is wrong
    # One process on the CPU (the device it can see without torch), fp32 (native on every CPU; a reduced
    # precision's support is torch's answer), a batch given (a search writes its own row), a mode run here.
    if cfg.device != "cpu" or cfg.world_size != 1 or cfg.precision != "fp32" or cfg.batch_size == MAX_BATCH \
            or cfg.mode not in MODES:
        return None
    count = parameter_count(spec.builder.config)
    least = parameter_floor(count, count, FLOAT32_BYTES, cfg, 1, spec.task.memory_needed(cfg))
    beyond = beyond_free(least, available_memory_bytes(), "cpu")
    if beyond is None:
        return None  # it may fit: the run's own estimate decides
    run = {**run_fields(cfg), **machine_columns(), **slurm_job(),
           "device_type": "cpu", "device_name": cpu_model(), "device_count": 1, "dist_backend": None,
           "precision_support": "native",  # fp32 on any CPU (capability.cpu_support); its reason names torch's
           "precision_support_reason": None,  # dispatch level, not known without torch
           # On the CPU the run sets strict fp32 and no cudnn.benchmark (Backend.apply_knobs) and torch reads them
           # back so; torch's threads are known only where num_threads sets them, its flags' text not at all.
           "tf32_enabled": False, "cudnn_benchmark_enabled": False, "threads": cfg.num_threads or None,
           **spec.task.config_facts(cfg), **least.columns()}
    row = failure_row(run, "oom", error_message(MemoryError(beyond)))
    row["phase_times_s"] = f"memory_estimate={time.perf_counter() - started:.3f}"
    return [row]
