"""The serving client's own limit: against an engine stand-in that streams as fast as the client can read
(tests/fast_engine.py, on a core of its own), how much the client adds to TTFT p50, and how many chunks per
second it takes in, as the streams in flight and the chunks per request grow.

The stand-in answers at once: a TTFT measured against it is the client's own overhead (building the request,
the connection pool, the event loop, parsing). The limit is the most streams (and chunks/s) at which that
stays under 1 ms; beyond it the row's client-saturated flag (client CPU above 0.9 of a core, or the loop's
p99 lag above 50 ms) should fire.

    .venv/bin/python benchmarks/client_limit.py [--chunks 16 128] [--streams 1 2 4 ... 256] [--workers N] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

from bench_core.serving import metrics
from bench_core.serving.client import payload
from bench_core.serving.load import Load, run_point
from bench_core.serving.records import RequestRecord

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MS = 1.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def point(url: str, streams: int, chunks: int, requests: int, workers: int = 1) -> dict:
    def make(i, user):
        return payload("completions", "stand-in", "hello", chunks, {}), RequestRecord(i, 1, chunks)
    result = run_point(Load(requests, concurrency=streams, timeout_s=60, workers=workers), url, make)
    figures = metrics.figures(result.records, slo_ttft_ms=500, slo_tpot_ms=30, client_cpu_s=result.client_cpu_s,
                              loop_lag_ms=result.loop_lag_ms)
    received = sum(len(r.chunk_s) for r in result.records if r.ok)
    return {"streams": streams, "chunks_per_request": chunks, "requests": requests,
            "ok": figures["requests_ok"], "ttft_ms_p50": figures["ttft_ms_p50"], "ttft_ms_p99": figures["ttft_ms_p99"],
            "chunks_per_s": received / figures["serve_window_s"] if figures["serve_window_s"] else None,
            "client_cpu_fraction": figures["client_cpu_fraction"],
            "client_loop_lag_ms_p99": figures["client_loop_lag_ms_p99"],
            "client_saturated": figures["client_saturated"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    parser.add_argument("--chunks", type=int, nargs="+", default=[16, 128])
    parser.add_argument("--requests-per-stream", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1, help="client processes (mode serve's client_workers)")
    parser.add_argument("--json", metavar="OUT", help="write every point as JSON")
    args = parser.parse_args()
    port = free_port()
    cpus = sorted(os.sched_getaffinity(0))
    engine = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fast_engine.py"), str(port)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert engine.stdout.readline().strip() == "ready"
        if len(cpus) > 1 and args.workers == 1:  # the stand-in on the last CPU, the one client process on the others
            os.sched_setaffinity(engine.pid, {cpus[-1]})
            os.sched_setaffinity(0, set(cpus[:-1]))
        url = f"http://127.0.0.1:{port}/v1/completions"
        point(url, 4, 16, 32)  # warm: imports, the first connections
        rows = []
        print(f"{'streams':>7} {'chunks/req':>10} {'TTFT p50 ms':>11} {'TTFT p99 ms':>11} {'chunks/s':>10} "
              f"{'client CPU':>10} {'lag p99 ms':>10} saturated")
        for chunks in args.chunks:
            for streams in args.streams:
                row = point(url, streams, chunks, max(args.requests_per_stream * streams, 32), args.workers)
                rows.append(row)
                print(f"{streams:>7} {chunks:>10} {row['ttft_ms_p50']:>11.3f} {row['ttft_ms_p99']:>11.3f} "
                      f"{row['chunks_per_s']:>10.0f} {row['client_cpu_fraction']:>10.2f} "
                      f"{row['client_loop_lag_ms_p99']:>10.2f} {row['client_saturated']}", flush=True)
        for chunks in args.chunks:
            within = [r for r in rows if r["chunks_per_request"] == chunks and r["ttft_ms_p50"] < LIMIT_MS]
            best = max(within, key=lambda r: r["streams"], default=None)
            said = (f"{best['streams']} streams, {best['chunks_per_s']:.0f} chunks/s" if best else
                    f"none: even 1 stream adds {LIMIT_MS:g} ms or more")
            print(f"{chunks} chunks a request: the most streams with TTFT p50 under {LIMIT_MS:g} ms: {said}")
        print(f"median client CPU over all points: {statistics.median(r['client_cpu_fraction'] for r in rows):.2f}")
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    finally:
        engine.terminate()
        engine.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
