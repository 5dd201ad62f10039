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
                 "trace_file")
# ... and its load: two loads of one model are two configurations (a ladder's points), never repeats of one.
SERVING_LOAD = ("concurrency", "request_rate", "burstiness", "turns", "think_time_s", "trace_time_scale")
# What identifies a workload: the same workload on two machines is comparable. A configuration
# is a workload on one machine (machine_label): the report's tables and summary.csv group by both.
WORKLOAD = ("model", "mode", "precision", "batch_size", "input_shape", "world_size", "compile", "channels_last",
            "parallelism", "tp_degree", "activation_checkpointing", *REQUEST_SHAPE, *SERVING_LOAD)
# Each field's value when it was not set: a label names a field only where it differs from this.
DEFAULTS = {**HASHED_WHEN_NOT, **SERVE_DEFAULTS, "compile": "off", "channels_last": False, "world_size": 1}


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
        if present(value) and value is not False and not is_default(name, value):
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
    cloud machines both called "vm") are two machines: their rows are not repeats of each other."""
    host = str(row["host"]) if present(row.get("host")) else "unknown host"
    uuid = str(row["gpu_uuid"]).strip().removeprefix("GPU-") if present(row.get("gpu_uuid")) else ""
    return f"{machine_kind(row)} · {host}" + (f" · GPU-{uuid[:8]}" if uuid else "")


def machine_kind(row: dict) -> str:
    """What a machine is, its GPU or CPU model ('NVIDIA H200'): machines of one kind are expected to
    measure alike, and how far they differ is itself a measurement (two instances of one kind)."""
    names = ("device_name", "gpu_name", "cpu_model", "device_type")
    return next((str(row[k]) for k in names if present(row.get(k))), "unknown device")


def present(value) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return str(value).strip() != ""
