"""A serving point's figures, computed from its per-request records only (records in, figures
out), so that every figure of a row can be recomputed from the records file kept beside it.

- The window: from the first request's send to the last request's end.
- Throughput: completed (ok) requests, their output tokens and their prompt + output tokens
  (from the stream's usage) per second of the window. Tokens/s per user: each ok request's
  output tokens / its own end-to-end time, averaged.
- TTFT, TPOT = (e2e - TTFT) / (output tokens - 1), ITL (per chunk) and e2e: mean, p50, p90, p99
  over the ok requests (numpy's linear percentiles; ITL over every gap of every request).
- Achieved rate: (sent - 1) / (last send - first send), beside the rate asked for.
- Goodput: ok requests with TTFT <= the TTFT bound and TPOT <= the TPOT bound (a request of one
  output token has no TPOT and is judged on TTFT), per second, and their output tokens per second.
- Client saturation: the client's CPU time over the window above CLIENT_CPU_LIMIT of one core,
  or its event loop's p99 lag above LOOP_LAG_LIMIT_MS.
"""
from __future__ import annotations

import numpy as np

from bench_core.measure.noise import CLIENT_CPU_LIMIT, LOOP_LAG_LIMIT_MS
from bench_core.serving.records import RequestRecord

PERCENTILES = (50, 90, 99)
METRICS = ("ttft", "tpot", "itl", "e2e")


def stats(values: list[float], name: str) -> dict:
    """`<name>_ms_mean` and `<name>_ms_p50/p90/p99` (None when there are no values)."""
    out = {f"{name}_ms_mean": float(np.mean(values)) if values else None}
    for p in PERCENTILES:
        out[f"{name}_ms_p{p}"] = float(np.percentile(values, p)) if values else None
    return out


def window(records: list[RequestRecord]) -> tuple[float, float] | None:
    sent = [r.send_s for r in records]
    ends = [r.end_s for r in records if r.end_s is not None]
    return (min(sent), max(ends)) if sent and ends else None


def figures(records: list[RequestRecord], *, slo_ttft_ms: float, slo_tpot_ms: float,
            client_cpu_s: float = 0.0, loop_lag_ms: list[float] | None = None) -> dict:
    """Every figure of a serving row, from the records."""
    ok = [r for r in records if r.ok]
    span = window(records)
    seconds = (span[1] - span[0]) if span else 0.0
    per_s = (lambda n: n / seconds) if seconds > 0 else (lambda n: None)
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    sends = sorted(r.send_s for r in records)
    achieved = (len(sends) - 1) / (sends[-1] - sends[0]) if len(sends) > 1 and sends[-1] > sends[0] else None
    good = [r for r in ok if meets(r, slo_ttft_ms, slo_tpot_ms)]
    per_user = [r.output_tokens / (r.e2e_ms / 1e3) for r in ok if r.output_tokens and r.e2e_ms]
    failed = len(records) - len(ok)
    row = {
        "serve_window_s": seconds,
        "requests_sent": len(records), "requests_ok": len(ok), "request_errors": failed,
        "error_rate": failed / len(records) if records else None,
        "requests_per_s": per_s(len(ok)),
        "output_tokens_total": out_tokens, "prompt_tokens_total": prompt_tokens,
        "output_tokens_per_s": per_s(out_tokens), "total_tokens_per_s": per_s(out_tokens + prompt_tokens),
        "tokens_per_s_per_user": float(np.mean(per_user)) if per_user else None,
        "request_rate_achieved": achieved,
        "goodput_requests_per_s": per_s(len(good)),
        "goodput_tokens_per_s": per_s(sum(r.output_tokens or 0 for r in good)),
        "goodput_fraction": len(good) / len(records) if records else None,
    }
    row.update(stats([r.ttft_ms for r in ok if r.ttft_ms is not None], "ttft"))
    row.update(stats([r.tpot_ms for r in ok if r.tpot_ms is not None], "tpot"))
    row.update(stats([gap for r in ok for gap in r.itl_ms], "itl"))
    row.update(stats([r.e2e_ms for r in ok if r.e2e_ms is not None], "e2e"))
    row.update(traffic_figures(records))
    lags = loop_lag_ms or []
    row["client_cpu_fraction"] = client_cpu_s / seconds if seconds > 0 else None
    row["client_loop_lag_ms_p99"] = float(np.percentile(lags, 99)) if lags else None
    row["client_saturated"] = bool((row["client_cpu_fraction"] or 0) > CLIENT_CPU_LIMIT
                                   or (row["client_loop_lag_ms_p99"] or 0) > LOOP_LAG_LIMIT_MS)
    row["slo_met"] = slo_met(row, slo_ttft_ms, slo_tpot_ms)
    return row


def meets(record: RequestRecord, slo_ttft_ms: float, slo_tpot_ms: float) -> bool:
    if not record.ok or record.ttft_ms is None or record.ttft_ms > slo_ttft_ms:
        return False
    return record.tpot_ms is None or record.tpot_ms <= slo_tpot_ms


def slo_met(row: dict, slo_ttft_ms: float, slo_tpot_ms: float) -> bool:
    """A point meets the SLO when no request failed and its p99 TTFT and p99 TPOT are within the
    bounds (MLPerf Inference's Server-scenario rule, on p99)."""
    if row.get("request_errors") or not row.get("requests_ok"):
        return False
    ttft, tpot = row.get("ttft_ms_p99"), row.get("tpot_ms_p99")
    return ttft is not None and ttft <= slo_ttft_ms and (tpot is None or tpot <= slo_tpot_ms)


def traffic_figures(records: list[RequestRecord]) -> dict:
    """What the traffic's shape adds: mean lengths, how late sends were against their schedule, and, for
    conversations, the p50 TTFT of each turn and how many conversations there were."""
    ok = [r for r in records if r.ok]
    mean = lambda values: float(np.mean(values)) if values else None  # noqa: E731
    late = [(r.send_s - r.scheduled_s) * 1e3 for r in records if r.scheduled_s is not None]
    turns: dict[int, list[float]] = {}
    for r in ok:
        if r.turn is not None and r.ttft_ms is not None:
            turns.setdefault(r.turn, []).append(r.ttft_ms)
    by_turn = " · ".join(f"{t}: {float(np.percentile(v, 50)):.1f}" for t, v in sorted(turns.items())) or None
    talks = {r.conversation for r in records if r.conversation is not None}
    return {"prompt_tokens_mean": mean([r.prompt_tokens for r in ok if r.prompt_tokens is not None]),
            "output_tokens_mean": mean([r.output_tokens for r in ok if r.output_tokens is not None]),
            "send_lag_ms_p99": float(np.percentile(late, 99)) if late else None,
            "ttft_ms_p50_by_turn": by_turn, "conversations": len(talks) or None}
