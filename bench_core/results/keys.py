"""What makes two rows one configuration: the workload (WORKLOAD) run on one machine (machine_label).
Plain data, no pandas: results.csv's summaries and the report group rows by these keys.
"""
from __future__ import annotations

import math


# What identifies a workload: the same workload on two machines is comparable. A configuration
# is a workload on one machine (machine_label): the report's tables and summary.csv group by both.
WORKLOAD = ("model", "mode", "precision", "batch_size", "input_shape", "world_size", "compile", "channels_last",
            "parallelism", "tp_degree", "activation_checkpointing")


def machine_label(row: dict) -> str:
    """`<device> · <host>`: the machine a row ran on, as the report and machines.csv name it."""
    names = ("device_name", "gpu_name", "cpu_model", "device_type")
    device = next((str(row[k]) for k in names if present(row.get(k))), "unknown device")
    host = str(row["host"]) if present(row.get("host")) else "unknown host"
    return f"{device} · {host}"


def present(value) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return str(value).strip() != ""
