"""Configuration: BenchConfig and its checks (schema.py) and the keys and grids of a sweep file (sweepfile.py).

Plain data: importing it imports no torch. This face re-exports what callers use.
"""
from __future__ import annotations

from bench_core.config.schema import (  # noqa: F401 - re-exported
    COMPILE_MODES,
    DEFAULT_MAX_BATCH,
    MAX_BATCH,
    MIN_COMPILE_WARMUP_STEPS,
    MODES,
    OPTIMIZERS,
    SEARCH_FIELDS,
    BenchConfig,
    check_known_keys,
    load_yaml_mapping,
)
from bench_core.errors import (  # noqa: F401 - re-exported
    ConfigError,
)
