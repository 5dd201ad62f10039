"""The settings of mode serve (bench_core/serving): their names, defaults and checks. They are
BenchConfig fields (a sweep or a notebook takes them unchanged); outside mode serve they must be
empty, so every other configuration keeps its hash.
"""
from __future__ import annotations

from bench_core.config.traffic import check_trace_span, parse_length_dist, read_prompt_file, read_trace
from bench_core.config.values import as_choice, as_float, as_int, as_str
from bench_core.errors import ConfigError

SERVE_FIELDS = ("engine", "server_url", "served_model", "model_dir", "server_args", "endpoint", "concurrency",
                "request_rate", "burstiness", "request_timeout_s", "server_timeout_s", "slo_ttft_ms", "slo_tpot_ms",
                "max_error_rate", "shared_prefix_len", "length_dist", "prompt_file", "trace_file", "trace_time_scale",
                "turns", "think_time_s", "saturation_s", "client_workers")
SERVE_DEFAULTS = {"engine": "transformers", "endpoint": "completions", "burstiness": 1.0, "request_timeout_s": 120.0,
                  "server_timeout_s": 600.0, "slo_ttft_ms": 500.0, "slo_tpot_ms": 30.0, "max_error_rate": 0.5,
                  "shared_prefix_len": 0, "length_dist": "fixed", "trace_time_scale": 1.0, "turns": 1, "think_time_s": 0.0,
                  "saturation_s": 15.0, "client_workers": 1}
ENDPOINTS = ("completions", "chat")
# What `bench ladder` doubles: concurrent users (closed loop) or the request rate (open loop).
LADDERS = ("concurrency", "rate")
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
    if cfg.request_rate is None and cfg.concurrency is None and not cfg.trace_file:  # a trace: uncapped
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
    validate_traffic(cfg)


def validate_traffic(cfg) -> None:
    """Lengths, prompt and trace files, conversations: each checked, and the combinations that contradict."""
    cfg.length_dist = parse_length_dist(cfg.length_dist).text()
    for name in ("prompt_file", "trace_file"):
        value = getattr(cfg, name)
        setattr(cfg, name, (as_str(name, value).strip() or None) if value is not None else None)
    if cfg.prompt_file and cfg.trace_file:
        raise ConfigError("trace_file", "a trace sets each request's lengths, a prompt_file its text: give one of them")
    for name in ("prompt_file", "trace_file"):
        if getattr(cfg, name) and cfg.length_dist != "fixed":
            raise ConfigError("length_dist", f"{cfg.length_dist} contradicts {name}, which sets each request's "
                                             "lengths; allowed with it: fixed")
    if cfg.prompt_file:
        read_prompt_file(cfg.prompt_file)
    if cfg.trace_file:
        read_trace(cfg.trace_file)
        if cfg.request_rate:
            raise ConfigError("request_rate", "the trace sets the arrivals (scale them with trace_time_scale); "
                                              "leave request_rate empty")
    cfg.trace_time_scale = as_float("trace_time_scale", cfg.trace_time_scale, minimum=float("-inf"))
    if cfg.trace_time_scale <= 0:
        raise ConfigError("trace_time_scale", f"must be a positive number, got {cfg.trace_time_scale:g}")
    if cfg.trace_file:
        check_trace_span(cfg.trace_file, cfg.steps, cfg.trace_time_scale)
    cfg.turns = as_int("turns", cfg.turns, minimum=1)
    cfg.think_time_s = as_float("think_time_s", cfg.think_time_s)
    if cfg.turns > 1:
        for name in ("prompt_file", "trace_file", "request_rate"):
            if getattr(cfg, name):
                raise ConfigError("turns", f"{cfg.turns} turns are conversations of concurrency users in a closed "
                                           f"loop; {name} contradicts it: leave it empty")
    cfg.client_workers = as_int("client_workers", cfg.client_workers, minimum=1)
    if cfg.client_workers > 1 and cfg.turns > 1:
        raise ConfigError("client_workers", f"{cfg.client_workers} processes cannot share the conversations of "
                                            f"{cfg.turns} turns (each keeps its history in one process); allowed: 1")
    cfg.saturation_s = as_float("saturation_s", cfg.saturation_s, minimum=float("-inf"))
    if cfg.saturation_s <= 0:
        raise ConfigError("saturation_s", f"must be a positive number of seconds, got {cfg.saturation_s:g}")


def check_shared_prefix(cfg) -> None:
    """After the model has filled prompt_len: the shared prefix leaves at least one unique token."""
    if cfg.mode == "serve" and cfg.shared_prefix_len >= cfg.prompt_len:
        raise ConfigError("shared_prefix_len", f"must be < prompt_len ({cfg.prompt_len}): at least one token of each "
                                               f"prompt stays unique; allowed: 0 to {cfg.prompt_len - 1}, got "
                                               f"{cfg.shared_prefix_len}")
