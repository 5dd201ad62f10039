"""The highest load that meets a latency SLO, from measured points.

Default bounds: MLPerf Inference's Server scenario for Llama-3.1-8B interactive, p99 TTFT <= 500
ms and p99 TPOT <= 30 ms (MLPerf Inference v5.0 rules, "llama3.1-8b-interactive"; Llama-2-70B
uses 2000 / 200 ms, interactive 450 / 40 ms).

The search walks the points in increasing load (request rate, or concurrency for closed-loop
points) and stops at the first that misses: the answer is the last point that met, so it meets
the bounds and the next higher measured point does not. A point that failed (no rows, errors)
misses.

The frontier of a set of points: those no other point beats in both output tokens/s (per GPU) and
tokens/s per user (InferenceX's throughput-interactivity frontier, vLLM's plot_pareto).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

MLPERF_TTFT_MS = 500.0
MLPERF_TPOT_MS = 30.0
SLO_SOURCE = "MLPerf Inference Server scenario, Llama-3.1-8B interactive: p99 TTFT <= 500 ms, p99 TPOT <= 30 ms"


@dataclass
class SloAnswer:
    best: dict | None            # the point that meets, or None when the lowest already misses
    first_miss: dict | None      # the next higher point, which misses (None: every point met)
    checked: list[dict]

    def headline(self, ttft_ms: float, tpot_ms: float) -> str:
        bounds = f"p99 TTFT <= {ttft_ms:g} ms and p99 TPOT <= {tpot_ms:g} ms"
        if self.best is None:
            return f"no measured load meets {bounds}"
        what = (f"{self.best['request_rate']:g} requests/s" if self.best.get("request_rate")
                else f"concurrency {self.best['concurrency']}")
        tail = "" if self.first_miss else " (the highest load measured; it may go higher)"
        return (f"at most {what} ({self.best.get('requests_per_s') or 0:.2f} requests/s, "
                f"{self.best.get('output_tokens_per_s') or 0:.1f} output tokens/s) with {bounds}{tail}")


def load_of(point: dict) -> float:
    return float(point.get("request_rate") or point.get("concurrency") or 0)


def highest_meeting(points: Iterable[dict], met: Callable[[dict], bool] = lambda p: bool(p.get("slo_met"))) -> SloAnswer:
    """The last point, in increasing load, before the first that misses."""
    ordered = sorted(points, key=load_of)
    best, checked = None, []
    for point in ordered:
        checked.append(point)
        if not met(point):
            return SloAnswer(best, point, checked)
        best = point
    return SloAnswer(best, None, checked)


def search(measure: Callable[[float], dict], loads: Iterable[float]) -> SloAnswer:
    """Measure `loads` in increasing order, stopping after the first point that misses."""
    checked = []
    for load in sorted(loads):
        point = measure(load)
        checked.append(point)
        if not point.get("slo_met"):
            break
    return highest_meeting(checked)


def frontier(points: list[dict], x: str = "tokens_per_s_per_user", y: str = "output_tokens_per_s") -> list[dict]:
    """The Pareto frontier: the points no other point beats in both x and y (higher is better in each),
    in increasing x. A point without both figures is left out."""
    known = [p for p in points if p.get(x) is not None and p.get(y) is not None]
    best = [p for p in known if not any(q[x] >= p[x] and q[y] >= p[y] and (q[x] > p[x] or q[y] > p[y])
                                        for q in known)]
    return sorted(best, key=lambda p: p[x])
