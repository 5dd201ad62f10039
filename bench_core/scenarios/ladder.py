"""`bench ladder`: the throughput-versus-interactivity frontier of one served model in one command. On one
server, a serve configuration is measured at a load that doubles (concurrency 1, 2, 4, ... or a request
rate) until the server saturates, and the ladder stops by itself and says why:

- saturated: output tokens/s rose by less than `min_gain` over the best point before (the throughput
  stopped rising: more load only queues);
- latency: p99 TTFT passed `max_ttft_ms`;
- failed: a point had no ok repeat (errors, or over-saturated inside the point);
- client: the client itself was saturated (its CPU or event loop set the pace), so a higher load would
  measure the client, not the server;
- the last rung: `max_points` points, still rising (raise it).

A concurrency rung sends at least two requests per user (steps, or twice the concurrency).

From the points: the Pareto frontier of output tokens/s per GPU against tokens/s per user (no other point
is better in both), with the cost per million output tokens along it where price_per_hour is given, and
the highest load meeting the SLO (serving.slo). Every figure comes from the points' rows, which come from
their records.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable

from bench_core.config.schema import BenchConfig
from bench_core.config.serve import LADDERS
from bench_core.errors import ConfigError
from bench_core.launch.engine_server import open_server
from bench_core.results.disturbed import disturbed_rows
from bench_core.serving.slo import SloAnswer, highest_meeting

SATURATED, LATENCY, FAILED, CLIENT, LAST_RUNG = "saturated", "latency", "failed", "client", "last rung"


@dataclass
class Rung:
    load: float
    rows: list[dict]

    @property
    def ok(self) -> list[dict]:
        return [r for r in self.rows if r.get("status") == "ok"]

    def median(self, name: str) -> float | None:
        values = [float(r[name]) for r in self.ok if r.get(name) is not None]
        return statistics.median(values) if values else None

    def point(self, kind: str) -> dict:
        """The rung as one point: medians over its ok repeats (what the frontier and the SLO read)."""
        names = ("requests_per_s", "output_tokens_per_s", "tokens_per_s_per_user", "ttft_ms_p50", "ttft_ms_p99",
                 "tpot_ms_p99", "cost_per_million", "client_cpu_fraction")
        return {"load": self.load, "request_rate": self.load if kind == "rate" else None,
                "concurrency": int(self.load) if kind == "concurrency" else None,
                "slo_met": bool(self.ok) and all(str(r.get("slo_met")).lower() == "true" for r in self.ok),
                "client_saturated": any(str(r.get("client_saturated")).lower() == "true" for r in self.rows),
                "status": "ok" if self.ok else self.rows[-1].get("status"),
                "message": "" if self.ok else self.rows[-1].get("message") or "",
                "disturbed": disturbed_rows(self.rows)[1],  # its flag names, '' when undisturbed
                **{n: self.median(n) for n in names}}


@dataclass
class Ladder:
    kind: str
    rungs: list[Rung] = field(default_factory=list)
    stop: str = ""           # SATURATED | LATENCY | FAILED | CLIENT | LAST_RUNG
    why: str = ""

    def points(self) -> list[dict]:
        return [r.point(self.kind) for r in self.rungs]

    def rows(self) -> list[dict]:
        return [row for rung in self.rungs for row in rung.rows]

    def slo(self) -> SloAnswer:
        return highest_meeting([p for p in self.points() if p["status"] == "ok"])


def check_ladder(kind: str, start: float, max_points: int, min_gain: float, max_ttft_ms: float) -> None:
    if kind not in LADDERS:
        raise ConfigError("ladder", f"got {kind!r}; allowed: {', '.join(LADDERS)}")
    if not (math.isfinite(start) and start > 0) or (kind == "concurrency" and start != int(start)):
        allowed = "a whole number >= 1" if kind == "concurrency" else "a finite number > 0"
        raise ConfigError("start", f"must be {allowed}, got {start:g}")
    if max_points < 2:
        raise ConfigError("max_points", f"must be >= 2 (a ladder compares a point with the one before), got {max_points}")
    if not 0 < min_gain < 10:
        raise ConfigError("min_gain", f"must be a fraction > 0 and below 10 (0.1: stop when throughput rises by less "
                                      f"than 10 %), got {min_gain:g}")
    if not max_ttft_ms > 0:
        raise ConfigError("max_ttft_ms", f"must be > 0 ms, got {max_ttft_ms:g}")


def rung_configs(cfg: BenchConfig, kind: str, start: float, max_points: int) -> list[tuple[float, BenchConfig]]:
    """(load, configuration) of every rung the ladder may climb, each checked as a configuration now: a load it
    refuses (a rate past the most allowed, more users than allowed) is bad input said before the server starts,
    naming the ladder's option, not a failure halfway up that loses the rungs measured."""
    rungs, load = [], float(start)
    for n in range(max_points):
        # Every user sends at least two requests: with fewer requests than users, some users would never
        # send and the rung would not be at its concurrency.
        changes = {"concurrency": int(load), "steps": max(cfg.steps, 2 * int(load))} if kind == "concurrency" \
            else {"request_rate": load}
        try:
            rungs.append((load, cfg.replace(**changes)))
        except ConfigError as exc:
            if n < 2:  # a ladder has at least two points: the first two are --start's
                raise ConfigError("start", f"point {n + 1} of the ladder, {kind} {load:g}, is refused ({exc}); "
                                           "allowed: a start whose first two points (it and its double) are "
                                           "allowed") from None
            top = start * 2 ** (max_points - 1)
            raise ConfigError("max_points", f"{max_points} points from {kind} {start:g} climb to {kind} {top:g}, and "
                                            f"point {n + 1} ({kind} {load:g}) is refused ({exc}); allowed: at most {n} "
                                            f"points from {kind} {start:g}, or a lower --start") from None
        load *= 2
    return rungs


def climb(cfg: BenchConfig, kind: str = "concurrency", start: float = 1, max_points: int = 8, min_gain: float = 0.1,
          max_ttft_ms: float = 5000.0, say: Callable[[str], None] | None = None, session=None) -> Ladder:
    """Measure cfg's load doubling from `start` on one server until it saturates (see the module's text)."""
    check_ladder(kind, start, max_points, min_gain, max_ttft_ms)
    rungs = rung_configs(cfg, kind, start, max_points)  # before the server starts
    say = say or (lambda text: None)
    ladder = Ladder(kind)
    own = session is None
    session = session or open_server(cfg, say)
    try:  # (each rung's measure warms the server up at its own load first)
        best = None
        for load, rung_cfg in rungs:
            rung = Rung(load, session.measure(rung_cfg))
            ladder.rungs.append(rung)
            point = rung.point(kind)
            say(f"ladder: {kind} {load:g}: {_point_text(point)}")
            if not rung.ok:
                ladder.stop, ladder.why = FAILED, f"{kind} {load:g} failed: {point['message']}"
                break
            if point["client_saturated"]:
                ladder.stop, ladder.why = CLIENT, (
                    f"the client was saturated at {kind} {load:g} (CPU {point['client_cpu_fraction'] or 0:.2f} of a "
                    "core, or its event loop late): a higher load would measure the client, not the server")
                break
            if point["ttft_ms_p99"] is not None and point["ttft_ms_p99"] > max_ttft_ms:
                ladder.stop, ladder.why = LATENCY, (f"p99 TTFT {point['ttft_ms_p99']:.0f} ms at {kind} {load:g} passed "
                                                    f"the bound of {max_ttft_ms:g} ms")
                break
            rate = point["output_tokens_per_s"] or 0.0
            if best is not None and rate < best[1] * (1 + min_gain):
                ladder.stop, ladder.why = SATURATED, (
                    f"saturated: output tokens/s {rate:.4g} at {kind} {load:g} is {rate / best[1] - 1:+.0%} on the "
                    f"best before ({best[1]:.4g} at {kind} {best[0]:g}), less than the {min_gain:.0%} a doubling "
                    "must add")
                break
            best = (load, rate) if best is None or rate > best[1] else best
        else:
            ladder.stop, ladder.why = LAST_RUNG, (f"{max_points} points and output tokens/s still rose by at least "
                                                  f"{min_gain:.0%} a doubling: raise --max-points to find the top")
    finally:
        if own:
            session.close()
    return ladder


def _point_text(point: dict) -> str:
    if point["status"] != "ok":
        return f"{point['status']}: {point['message'][:160]}"
    disturbed = f" [DISTURBED: {point['disturbed']}]" if point["disturbed"] else ""
    return (f"{point['output_tokens_per_s'] or 0:.4g} output tokens/s, {point['tokens_per_s_per_user'] or 0:.4g} "
            f"tokens/s per user, p99 TTFT {point['ttft_ms_p99'] or 0:.0f} ms, client CPU "
            f"{point['client_cpu_fraction'] or 0:.2f}{disturbed}")
