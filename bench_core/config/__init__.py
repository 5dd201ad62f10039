"""Configuration: BenchConfig and its checks (schema.py), the keys and grids of a sweep file (sweepfile.py),
the YAML files both are read from (yamlfile.py) and every mistake of an input said at once (mistakes.py).

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
)
from bench_core.config.yamlfile import load_yaml_mapping  # noqa: F401 - re-exported
from bench_core.errors import (  # noqa: F401 - re-exported
    ConfigError,
)
