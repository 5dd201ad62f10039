"""What makes two rows one configuration: the workload (WORKLOAD) run on one machine (machine_label).
Plain data, no pandas: results.csv's summaries and the report group rows by these keys.
"""
from __future__ import annotations

import math

from bench_core.config.schema import HASHED_WHEN_NOT
from bench_core.config.serve import SERVE_DEFAULTS


# A serving point's requests (mode serve, config/serve.py): their engine, endpoint and shape (input_shape
# says the prompt and output lengths; these say how they vary, what they share, where they come from) ...
REQUEST_SHAPE = ("engine", "endpoint", "prompt_len", "new_tokens", "length_dist", "shared_prefix_len", "prompt_file",
                 "trace_file", "server_args", "model_dir", "server_url")
# ... and its load: two loads of one model are two configurations (a ladder's points), never repeats of one.
SERVING_LOAD = ("concurrency", "request_rate", "burstiness", "turns", "think_time_s", "trace_time_scale")
# Settings of a run that change its speed and are the same on any machine, so they are part of the workload: the
# optimizer (adam's step does three times sgd's work on the parameters; train only), cudnn.benchmark (another
# convolution algorithm; CUDA only) and the nodes the processes are spread over (8 processes on one node or on
# two: the gradients cross the network). Not keyed, because they do not change what a window measures: the
# seed (the same shapes and work), warm-up steps (untimed; a short warm-up shows as disagreeing repeats, which
# are flagged), steps, min_seconds and repeats (a window's length and how many), profile (after the windows),
# the timeouts and the price. The data is always synthetic and made once on the device (rows' `data`): there is
# no host-side data setting to key on. The thread count and the CPU's dispatch level are part of the machine
# as used, not of the workload: machine_use.
RUN_SETTINGS = ("optimizer", "cudnn_benchmark", "nnodes")
# What identifies a workload: the same workload on two machines is comparable. A configuration
# is a workload on one machine (machine_label): the report's tables and summary.csv group by both.
WORKLOAD = ("model", "mode", "precision", "batch_size", "input_shape", "world_size", "compile", "channels_last",
            "parallelism", "tp_degree", "activation_checkpointing", *RUN_SETTINGS, *REQUEST_SHAPE, *SERVING_LOAD)
# Each field's value when it was not set: a label names a field only where it differs from this.
DEFAULTS = {**HASHED_WHEN_NOT, **SERVE_DEFAULTS, "compile": "off", "channels_last": False, "world_size": 1,
            "optimizer": "sgd", "cudnn_benchmark": True, "nnodes": 1}


def key_value(row: dict, name: str):
    """A row's value of a WORKLOAD field as the key reads it: a setting that does not apply to the row is None
    (the optimizer outside train, cudnn.benchmark off CUDA, where only False differs from the default: a CPU
    and a GPU machine still compare), so that rows alike in all that applies are one configuration; rows
    written before a setting existed take its default."""
    value = row.get(name)
    if name == "optimizer":
        return (value if present(value) else DEFAULTS[name]) if row.get("mode") == "train" else None
    if name == "cudnn_benchmark":  # off on CUDA is its own configuration; on, or on a device without cuDNN, none
        off = present(value) and str(value).strip().lower() in ("false", "0", "0.0")
        return False if off and str(row.get("device_type") or "cuda").strip() == "cuda" else None
    if name == "nnodes":
        return _whole(value) or DEFAULTS[name]  # 1, 1.0 and '1' are one key
    return value


def load_text(row: dict) -> str:
    """A serving point's load in words ('8 users', '2.5 requests/s, at most 16 in flight', 'trace x0.5,
    4 turns'); '' for a row without one (every mode but serve)."""
    def number(name) -> float | None:
        try:
            value = float(row.get(name))
        except (TypeError, ValueError):  # unset (None), or text that is no number
            return None
        return value if math.isfinite(value) else None
    rate, users = number("request_rate"), number("concurrency")
    scale, turns = number("trace_time_scale"), number("turns")
    parts = []
    if present(row.get("trace_file")):
        parts.append(f"trace x{scale:g}" if scale is not None else "trace")
    if rate is not None:
        burst = number("burstiness")
        parts.append(f"{rate:g} requests/s" + (f" (burstiness {burst:g})" if burst not in (None, 1.0) else ""))
    if users is not None:
        parts.append(f"at most {users:g} in flight" if parts else f"{users:g} user{'' if users == 1 else 's'}")
    if turns is not None and turns > 1:
        think = number("think_time_s")
        parts.append(f"{turns:g} turns" + (f", {think:g} s to think" if think else ""))
    return ", ".join(parts)


def set_fields(row: dict, names) -> list[str]:
    """'name=value' for each of `names` the row sets, other than to its default (DEFAULTS)."""
    out = []
    for name in names:
        value = row.get(name)
        if present(value) and (value is not False or name in DEFAULTS) and not is_default(name, value):
            out.append(f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}")
    return out


def is_default(name: str, value) -> bool:
    """Whether `value` is the field's default (1.0 is 1, 'True' is True)."""
    default = DEFAULTS.get(name)
    if default is None:
        return False
    try:
        return float(value) == float(default)
    except (TypeError, ValueError):
        return str(value).strip().lower() == str(default).lower()


def machine_label(row: dict) -> str:
    """`<device> · <host>`, and on a GPU its instance, `· GPU-<first 8 of its UUID>`: the machine a row
    ran on, as the report and machines.csv name it. Two GPUs of one kind behind one host name (two
    cloud machines both called "vm") are two machines: their rows are not repeats of each other. A CPU
    used otherwise than whole (machine_use) is named so: `<CPU> (1 thread) · <host>`."""
    host = str(row["host"]) if present(row.get("host")) else "unknown host"
    uuid = str(row["gpu_uuid"]).strip().removeprefix("GPU-") if present(row.get("gpu_uuid")) else ""
    return f"{machine_kind(row)} · {host}" + (f" · GPU-{uuid[:8]}" if uuid else "")


def machine_kind(row: dict) -> str:
    """What a machine is, its GPU or CPU model ('NVIDIA H200'), with how a CPU was used where not whole
    ('AMD EPYC 7B13 (1 thread)'): machines of one kind are expected to measure alike, and how far they
    differ is itself a measurement (two instances of one kind)."""
    names = ("device_name", "gpu_name", "cpu_model", "device_type")
    device = next((str(row[k]) for k in names if present(row.get(k))), "unknown device")
    use = machine_use(row)
    return f"{device} ({use})" if use else device


def machine_use(row: dict) -> str:
    """How much of a CPU a CPU row used, where it was not all of it, the default way: '1 thread' when its
    torch threads (per process: a scaling run of 1 and 2 processes at 1 thread each, as the README says to
    compare them, is one machine) are not the host's CPU count, and the dispatch level
    forced by ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA ('ATEN_CPU_CAPABILITY=avx2'); '' otherwise, and for
    GPU rows (their steps run on the device: the host's threads launch them). Two runs of one CPU at 1 and 2
    threads measure two things: they are two machines as used, never repeats of one configuration. Keyed
    on the threads that ran (a row's `threads`; else those asked for, else the process's), not on the request, so
    that OMP_NUM_THREADS=1 is seen too; a CPU's default (all its cores) carries no label, so two machines of
    different sizes are still compared, each used whole."""
    if str(row.get("device_type") or "").strip() != "cpu":
        return ""
    parts = []
    # (a row that failed before its threads were set: those asked for, else the process's default)
    threads = _whole(row.get("threads")) or _whole(row.get("num_threads")) or _whole(row.get("torch_threads"))
    cpus = _whole(row.get("cpu_count"))
    if threads and cpus and threads != cpus:  # per process: 1 and 2 processes at 1 thread each are one machine
        parts.append(f"{threads} thread{'' if threads == 1 else 's'}")
    dispatch = row.get("cpu_dispatch_env")
    if present(dispatch):
        parts.append(" ".join(str(dispatch).split()))
    return ", ".join(parts)


def _whole(value) -> int | None:
    """A positive whole number from a cell (2, 2.0, '2'), else None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) and number >= 1 and number == int(number) else None


def present(value) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return str(value).strip() != ""
