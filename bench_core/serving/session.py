"""Measuring a serve configuration against a ready server: untimed warm-up requests, then
`repeats` timed points of the configuration's load, each a result row whose figures come from
its per-request records (kept in a file beside the rows).

A `ServingSession` holds one server for several points (the SLO search and the tests measure many
loads on one server; a started engine takes long to warm up). launch.engine_server starts the
server and makes the session; closing the session stops the server's whole process tree,
whatever ends it (on Ctrl-C and SIGTERM the repeats that finished are attached to the
KeyboardInterrupt as `rows`, as the runner does).
"""
from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Callable

from bench_core.config.schema import BenchConfig
from bench_core.devices import resolve_device
from bench_core.errors import ConfigError, interrupted_by
from bench_core.measure import environment
from bench_core.measure.noise import flag_unstable_repeats
from bench_core.results.rows import error_message, failure_row, finish_row, run_fields
from bench_core.run.timing import Phases
from bench_core.serving import metrics
from bench_core.serving.client import ENDPOINTS
from bench_core.serving.energy import PointEnergy
from bench_core.serving.engines import Engine, resolve_engine
from bench_core.serving.load import Load, PointResult, run_point
from bench_core.serving.model_folder import folder_for, planned
from bench_core.serving.prompts import PromptMaker
from bench_core.serving.records import write_records
from bench_core.serving.server import Server, check_served
from bench_core.serving.traffic import Conversations, Traffic, check, context_of, describe

DEFAULT_DIR = Path("outputs") / "serving"
THROUGHPUT_UNIT = "served tokens/s"  # its own unit: never on one axis with generate's tokens/s


def records_dir() -> Path:
    """Where per-request records go: $BENCH_SERVING_DIR (bench run --out and sweeps set it to
    <out>/serving), else ./outputs/serving."""
    return Path(os.environ.get("BENCH_SERVING_DIR") or DEFAULT_DIR)


def prepare(cfg: BenchConfig) -> tuple[Engine, Path, bool]:
    """The engine, the model folder to serve (the user's, or the named shape written once) and
    whether the engine loads random weights itself."""
    engine = resolve_engine(cfg.engine)
    if not cfg.server_url:  # before the model folder is written: a refused command leaves nothing behind
        engine.check_installed()
    dummy = bool(engine.dummy_weights) and not cfg.model_dir
    # A prompt, trace line or conversation beyond the model's context: refused before any start, and for a
    # named model before its folder is written.
    if cfg.model_dir:
        folder = Path(cfg.model_dir)
        check_model_dir(folder, cfg)
        check(cfg, context_of(folder), lambda: tokenizer_of(folder))
    else:
        check(cfg, *planned(cfg.model))
        folder = folder_for(cfg.model, weights=not dummy)
    return engine, folder, dummy


def tokenizer_of(folder: Path):
    from transformers import AutoTokenizer  # heavy: only where it is needed
    return AutoTokenizer.from_pretrained(folder)


class ServingSession:
    """A ready server and the prompts of its model's tokenizer."""

    def __init__(self, cfg: BenchConfig, server: Server, folder: Path, progress: Callable[[str], None] | None = None):
        self.cfg, self.server, self.engine = cfg, server, server.engine
        self.say = progress or (lambda text: None)
        self.tokenizer = tokenizer_of(folder)
        self.prompts = PromptMaker(self.tokenizer, seed=cfg.seed)
        self.context = context_of(folder)
        self.next_index = 0  # every request of the session gets a new number: no prompt repeats
        self.model = check_served(server, cfg.served_model or str(folder))
        self.start_s = 0.0  # the server's start and this session's setup (open_server sets it): said once, by the
        #                     first configuration measured on it (a row's phase_times_s)

    def close(self) -> None:
        self.server.stop()

    def __enter__(self) -> "ServingSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- requests ---------------------------------------------------------------------------
    def _point(self, cfg: BenchConfig, requests: int, concurrency: int | None, rate: float | None,
               warm_up: bool = False) -> PointResult:
        """One point of cfg's traffic: `requests` requests (a trace's: at most as many as it has lines)."""
        traffic = Traffic(cfg, self.prompts, self.model, self.engine, self.tokenizer, self.context)
        requests = traffic.requests(requests)
        start = self.next_index
        self.next_index += requests
        talks = Conversations(traffic, cfg.turns) if cfg.turns > 1 and not warm_up else None
        arrivals = None if warm_up else traffic.arrivals(requests)
        load = Load(requests, concurrency=concurrency, rate=None if arrivals else rate, burstiness=cfg.burstiness,
                    seed=cfg.seed + start, max_error_rate=cfg.max_error_rate, timeout_s=cfg.request_timeout_s,
                    arrivals=arrivals, think_s=cfg.think_time_s if talks else 0.0, saturation_s=cfg.saturation_s,
                    workers=1 if warm_up or talks else cfg.client_workers)
        metrics_url = self.server.url + self.engine.metrics_path if self.engine.metrics_path else ""
        make = (lambda i, user: talks.body(start + i, user)) if talks else \
            (lambda i, user: traffic.body(start + i, i))
        return run_point(load, self.server.url + ENDPOINTS[cfg.endpoint], make, metrics_url,
                         after=talks.after if talks else None)

    def warm_up(self, cfg: BenchConfig) -> None:
        """Untimed requests (at most the point's concurrency at once); their failures end the run."""
        if not cfg.warmup_steps:
            return
        self.say(f"serve: {describe_load(cfg)}: {cfg.warmup_steps} warm-up requests")
        result = self._point(cfg, cfg.warmup_steps, min(cfg.concurrency or 1, cfg.warmup_steps), None, warm_up=True)
        failed = [r for r in result.records if not r.ok]
        if failed:
            raise ServingFailed(f"warm-up: {len(failed)} of {len(result.records)} requests failed; first: "
                                f"{failed[0].error}")

    def measure(self, cfg: BenchConfig) -> list[dict]:
        """`cfg.repeats` timed points of cfg's load on this server: one row each."""
        phases = Phases()  # where the configuration's time went: its rows' phase_times_s (a sweep's account)
        if self.start_s:
            phases.add("server_start", self.start_s)
            self.start_s = 0.0
        base = {**run_fields(cfg), **self.device_columns(cfg), **self.identity(cfg)}
        try:
            with phases("warmup"):
                self.warm_up(cfg)
        except ServingFailed as exc:
            return stamped([failure_row(base, "error", str(exc))], phases)
        rows: list[dict] = []
        try:
            for repeat in range(cfg.repeats):
                self.say(f"serve: {describe_load(cfg)}: repeat {repeat + 1}/{cfg.repeats}")
                with PointEnergy(cfg.device, self.server) as energy, phases("windows"):
                    result = self._point(cfg, cfg.steps, cfg.concurrency, cfg.request_rate)
                with phases("window_edges"):
                    rows.append(self.row(cfg, base, repeat, result, energy))
                if result.stopped:
                    break
        except KeyboardInterrupt as exc:
            flag_unstable_repeats(rows)
            exc.rows = stamped(rows + [failure_row({**base, "repeat": len(rows)}, "interrupted",
                                                   f"stopped by {interrupted_by(exc)} during repeat {len(rows)}")], phases)
            raise
        flag_unstable_repeats(rows)
        return stamped(rows, phases)

    def device_columns(self, cfg: BenchConfig) -> dict:
        """The environment and the device the server runs on: the configuration's, for a server this
        process started (first light: serve rows on an H200 said no device at all, and the report
        could not place them beside the other rows of the GPU); none for one attached by URL, whose
        device this process cannot see."""
        if not self.server.command:
            return environment.collect()
        device = resolve_device(cfg.device)
        return {**environment.collect(device), **environment.device_columns(device)}

    def identity(self, cfg: BenchConfig) -> dict:
        s = self.server
        return {"engine_version": s.version or None, "engine_command": shlex.join(s.command) if s.command else None,
                "served_model_id": self.model, "server_startup_s": s.startup_s, "task": "causal-lm",
                "input_shape": describe(cfg), "traffic": describe(cfg)}

    def row(self, cfg: BenchConfig, base: dict, repeat: int, result: PointResult, energy: PointEnergy) -> dict:
        figures = metrics.figures(result.records, slo_ttft_ms=cfg.slo_ttft_ms, slo_tpot_ms=cfg.slo_tpot_ms,
                                  client_cpu_s=result.client_cpu_s, loop_lag_ms=result.loop_lag_ms)
        telemetry = energy.columns(figures["output_tokens_total"])
        path = records_dir() / base["run_id"] / f"records-{repeat}.json"
        meta = {"run_id": base["run_id"], "repeat": repeat, "load": describe_load(cfg), "traffic": describe(cfg),
                "slo_ttft_ms": cfg.slo_ttft_ms, "slo_tpot_ms": cfg.slo_tpot_ms,
                "shared_prefix_len": cfg.shared_prefix_len, "client_cpu_s": result.client_cpu_s,
                "loop_lag_ms": result.loop_lag_ms, "wall_s": result.wall_s}
        write_records(path, result.records, meta)
        flags = [f for f in str(telemetry.pop("noise_flags", None) or "").split(";") if f]
        if figures["client_saturated"]:
            flags.append(f"client-saturated(cpu {figures['client_cpu_fraction'] or 0:.2f} of a core, loop lag p99 "
                         f"{figures['client_loop_lag_ms_p99'] or 0:.1f} ms)")
        if cfg.turns > 1:  # a note, not a disturbance: the traffic's design
            flags.append(f"conversation-prefix({cfg.turns} turns: each resends its history, which a prefix cache "
                         "holds; by design)")
        if cfg.shared_prefix_len:  # a note, not a disturbance: the load asked for it
            flags.append(f"shared-prefix({cfg.shared_prefix_len} of {cfg.prompt_len} prompt tokens common to every "
                         "request: a warm prefix cache may inflate throughput and shorten TTFT)")
        status, message = "ok", ""
        if result.stopped:
            status, message = "error", result.stopped
            figures["over_saturated"] = result.stopped.startswith("over-saturated")
        elif not figures["requests_ok"]:
            first = next((r.error for r in result.records if r.error), "no request completed")
            status, message = "error", f"every request failed; first: {first}"
        rate = figures["output_tokens_per_s"]
        price = cfg.price_per_hour
        return finish_row({
            **base, **figures, **result.server, **telemetry, "repeat": repeat, "status": status, "message": message,
            "records_file": str(path), "samples_per_s": figures["requests_per_s"], "sample_unit": "requests/s",
            "throughput": rate, "throughput_unit": THROUGHPUT_UNIT, "tokens_per_s": rate,
            "timed_s": figures["serve_window_s"], "timed_steps": figures["requests_sent"],
            "batch_size_actual": cfg.concurrency, "noise_flags": ";".join(flags) or None,
            "cost_per_million": price / (rate * 3600) * 1e6 if price and rate else None,
        })


def stamped(rows: list[dict], phases: Phases) -> list[dict]:
    """Every row of a configuration says where its time went (as the runner's rows do)."""
    for row in rows:
        row["phase_times_s"] = phases.text()
    return rows


class ServingFailed(Exception):
    """The server answered, but not well enough to measure (warm-up requests failed)."""


def describe_load(cfg: BenchConfig) -> str:
    if cfg.trace_file:
        cap = f", at most {cfg.concurrency} in flight" if cfg.concurrency else ""
        return f"trace replay (gaps x{cfg.trace_time_scale:g}{cap})"
    if cfg.turns > 1:
        return f"{cfg.concurrency} users in {cfg.turns}-turn conversations"
    if cfg.request_rate:
        cap = f", at most {cfg.concurrency} in flight" if cfg.concurrency else ""
        return f"{cfg.request_rate:g} requests/s (burstiness {cfg.burstiness:g}{cap})"
    return f"concurrency {cfg.concurrency}"


def check_model_dir(folder: Path, cfg: BenchConfig) -> None:
    """A user's folder: it must hold a config; a prompt + output beyond its context is refused."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError("model_dir", f"{folder} has no readable config.json ({error_message(exc)})") from None
    limit = config.get("max_position_embeddings")
    if limit and cfg.prompt_len + cfg.new_tokens > int(limit):
        raise ConfigError("prompt_len", f"prompt_len + new_tokens = {cfg.prompt_len + cfg.new_tokens} is beyond the "
                                        f"model's {limit} positions (max_position_embeddings of {folder})")
