"""The settings of mode serve (bench_core/serving): their names, defaults and checks. They are
BenchConfig fields (a sweep or a notebook takes them unchanged); outside mode serve they must be
empty, so every other configuration keeps its hash.
"""
from __future__ import annotations

from bench_core.config.values import as_choice, as_float, as_int, as_str
from bench_core.errors import ConfigError

SERVE_FIELDS = ("engine", "server_url", "served_model", "model_dir", "server_args", "endpoint", "concurrency",
                "request_rate", "burstiness", "request_timeout_s", "server_timeout_s", "slo_ttft_ms", "slo_tpot_ms",
                "max_error_rate", "shared_prefix_len")
SERVE_DEFAULTS = {"engine": "transformers", "endpoint": "completions", "burstiness": 1.0, "request_timeout_s": 120.0,
                  "server_timeout_s": 600.0, "slo_ttft_ms": 500.0, "slo_tpot_ms": 30.0, "max_error_rate": 0.5,
                  "shared_prefix_len": 0}
ENDPOINTS = ("completions", "chat")
# Limits that catch a typo (a million users, a billion requests/s) rather than a real load.
MAX_CONCURRENCY, MAX_REQUEST_RATE = 100_000, 1_000_000.0


def validate_serving(cfg) -> None:
    """Refuse serve fields outside mode serve; in it, fill the defaults and check each value.
    (The engine's name is checked against its presets by bench_core.serving when it runs.)"""
    if cfg.mode != "serve":
        for name in SERVE_FIELDS:
            if getattr(cfg, name) not in (None, ""):
                raise ConfigError(name, f"applies to mode serve only (mode is {cfg.mode})")
            setattr(cfg, name, None)
        return
    for name, default in SERVE_DEFAULTS.items():
        if getattr(cfg, name) in (None, ""):
            setattr(cfg, name, default)
    for name in ("engine", "server_url", "served_model", "model_dir", "server_args"):
        value = getattr(cfg, name)
        setattr(cfg, name, (as_str(name, value) or None) if value is not None else None)
    cfg.engine = cfg.engine.lower()
    cfg.endpoint = as_choice("endpoint", cfg.endpoint, ENDPOINTS)
    cfg.concurrency = as_int("concurrency", cfg.concurrency, minimum=1, optional=True)
    if cfg.concurrency is not None and cfg.concurrency > MAX_CONCURRENCY:
        raise ConfigError("concurrency", f"must be <= {MAX_CONCURRENCY}, got {cfg.concurrency}")
    cfg.request_rate = as_float("request_rate", cfg.request_rate, minimum=float("-inf"), optional=True)
    if cfg.request_rate is not None and not 0 < cfg.request_rate <= MAX_REQUEST_RATE:
        raise ConfigError("request_rate", f"must be > 0 and <= {MAX_REQUEST_RATE:g} requests/s (leave it empty for a "
                                          f"closed loop), got {cfg.request_rate:g}")
    if cfg.request_rate is None and cfg.concurrency is None:
        cfg.concurrency = 1
    for name in ("burstiness", "request_timeout_s", "server_timeout_s", "slo_ttft_ms", "slo_tpot_ms"):
        value = as_float(name, getattr(cfg, name), minimum=float("-inf"))
        if value <= 0:
            raise ConfigError(name, f"must be a positive number, got {value:g}")
        setattr(cfg, name, value)
    cfg.max_error_rate = as_float("max_error_rate", cfg.max_error_rate)
    if cfg.max_error_rate > 1:
        raise ConfigError("max_error_rate", f"must be a fraction in [0, 1], got {cfg.max_error_rate:g}")
    cfg.shared_prefix_len = as_int("shared_prefix_len", cfg.shared_prefix_len, minimum=0)


def check_shared_prefix(cfg) -> None:
    """After the model has filled prompt_len: the shared prefix leaves at least one unique token."""
    if cfg.mode == "serve" and cfg.shared_prefix_len >= cfg.prompt_len:
        raise ConfigError("shared_prefix_len", f"must be < prompt_len ({cfg.prompt_len}): at least one token of each "
                                               f"prompt stays unique; allowed: 0 to {cfg.prompt_len - 1}, got "
                                               f"{cfg.shared_prefix_len}")
