"""The keys of a sweep file and its grids: plain data, checked before anything runs.
"""
from __future__ import annotations

import math
from typing import Any

from bench_core.config.mistakes import Mistakes
from bench_core.config.schema import check_known_keys
from bench_core.errors import ConfigError

SWEEP_KEYS = ("name", "description", "grid", "settings", "timeout_s", "emulated", "runs", "executions",
              "predict_gpus", "price")  # the last two are the report's: the GPUs it predicts, and their prices

# What one papermill execution (a kernel, a notebook) holds: every configuration of one model on one device (a
# crash or a kernel's memory is one model's), or every configuration of one device (the process start, the
# kernel's imports and the notebook's tables paid once: about 10 s of a 2-core CPU's time each, where each of a
# quick CPU sweep's models ran two or three configurations of a few seconds).
EXECUTION_CHOICES = ("model", "device")


# What a sweep does with a precision this machine only emulates (bench sysinfo): run it (marked
# emulated in every row and chart) or leave it out of the plan (said before it starts and in the report).
EMULATED_CHOICES = ("run", "skip")


SELECTOR_KEYS = ("description", "use")
SELECTOR_CHOICES = ("gpu", "mps", "cpu")
MAX_CONFIGS = 10_000  # a typo like batch_size: [1, ..., 100000] should not plan a year of work


def parse_timeout(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError("timeout_s", f"must be a positive number of seconds per model of an execution, got {value!r}")
    return float(value)


MAX_RUNS = 20


def parse_runs(value: Any) -> int:
    """How many separate runs (processes) measure each configuration: 1, or more for comparisons that
    must hold from one run to the next (bench diff uses the runs as its samples)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RUNS:
        raise ConfigError("runs", f"must be a whole number from 1 to {MAX_RUNS} (separate runs of each "
                                  f"configuration), got {value!r}")
    return value


def grids(grid: Any, fields: list[str], found: Mistakes | None = None) -> list[dict[str, list]]:
    """`grid` is a mapping (every combination) or a list of mappings (the union of their combinations).

    A grid value wins over the same field in settings (settings are the defaults of every entry).
    """
    if grid is None:
        return [{}]
    entries = grid if isinstance(grid, list) else [grid]
    if not entries:
        raise ConfigError("grid", "is an empty list; give a mapping of fields to lists of values")
    # Every entry's mistakes at once: kept in `found` (the entries without one are returned), else raised.
    grids, mine = [], found is None
    found = Mistakes() if found is None else found
    for index, entry in enumerate(entries):
        where = "grid" if not isinstance(grid, list) else f"grid entry {index + 1}"
        with found.kept():
            grids.append(_entry(entry, where, fields))
    if mine:
        found.raise_any("the grid")
    return grids


def _entry(entry: Any, where: str, fields: list[str]) -> dict[str, list]:
    if not isinstance(entry, dict):
        raise ConfigError("grid", f"{where} must be a mapping of BenchConfig fields to lists of values, got {entry!r}")
    if not entry:  # it would run one configuration of pure defaults without a word
        named = "" if where == "grid" else where + " "
        raise ConfigError("grid", f"{named}is empty; give a mapping of fields to lists of values (for one "
                                  "configuration, leave grid out and put its fields under settings)")
    found = Mistakes()
    with found.kept():
        check_known_keys(entry, fields, where=where)
    expanded = {}
    for key, values in entry.items():
        values = values if isinstance(values, list) else [values]
        if not values:
            found.add(ConfigError(key, f"has an empty list in {where}; give at least one value"))
        expanded[key] = values
    found.raise_any(where)
    return expanded
