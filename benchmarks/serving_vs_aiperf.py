"""Our serving client beside NVIDIA AIPerf on one server: TTFT p50 and output tokens/s, interleaved.

Starts one `transformers serve` (continuous batching, CPU) on the llama-tiny model folder (random
weights and an offline tokenizer, written once: bench_core.serving.model_folder), then runs, in
turn, our client (one repeat of mode serve) and `aiperf profile` at the same load: the same
concurrency, request count, warm-up requests, prompt and output lengths, the completions
endpoint, streaming. AIPerf is told `--use-server-token-count` (else it re-tokenizes the output
text, and a random-weight model's text re-tokenizes into several times the tokens the engine
produced) and `--use-legacy-max-tokens` (transformers serve answers 422 to
`max_completion_tokens`). Its figures are read from its own JSON export
(profile_export_aiperf.json: time_to_first_token.p50, output_token_throughput.avg).

Rounds alternate the order (ours then AIPerf, then AIPerf then ours, ...) so a drift of the
machine falls on both. Prints each run, the median of each client and the ratio of the medians
(ours / AIPerf): the issue's check is that both ratios lie within 15 % of 1. Run it on a quiet
machine: both clients share the cores with the server, and AIPerf runs several processes. On a
machine of few cores, `--server-cpus 0` keeps the server on CPU 0 and both clients on the others
(AIPerf's several processes otherwise take the server's cores and lengthen every request it times).

    .venv/bin/python benchmarks/serving_vs_aiperf.py --runs 5 --concurrency 4 --requests 20 \\
        --prompt-len 64 --new-tokens 32 --warmup 4 [--server-cpus 0] [--aiperf /tmp/cmpvenv/bin/aiperf] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os

import psutil
import statistics
import tempfile
from pathlib import Path

from bench_core.config.schema import BenchConfig
from bench_core.launch.engine_server import open_server
from bench_core.launch.supervisor import Child
from bench_core.serving.model_folder import folder_for

AIPERF_LIMIT_S = 1800.0


def aiperf_command(aiperf: str, url: str, folder: Path, args, artifact_dir: Path, seed: int) -> list[str]:
    return [aiperf, "profile", "--model", str(folder), "--tokenizer", str(folder), "--url", url,
            "--endpoint-type", "completions", "--streaming", "--use-server-token-count", "--use-legacy-max-tokens",
            "--concurrency", str(args.concurrency), "--request-count", str(args.requests),
            "--warmup-request-count", str(args.warmup), "--num-dataset-entries", str(args.requests),
            "--synthetic-input-tokens-mean", str(args.prompt_len), "--synthetic-input-tokens-stddev", "0",
            "--output-tokens-mean", str(args.new_tokens), "--output-tokens-stddev", "0",
            "--random-seed", str(seed), "--no-gpu-telemetry", "--no-server-metrics", "--ui", "none",
            "--artifact-dir", str(artifact_dir)]


def run_aiperf(aiperf: str, url: str, folder: Path, args, artifact_dir: Path, seed: int) -> dict:
    """One AIPerf run at the load; its own export's TTFT p50 and output tokens/s."""
    artifact_dir.mkdir(parents=True, exist_ok=True)
    # No HF_HUB_OFFLINE: with it AIPerf 0.13 looks the tokenizer up in the hub's cache (snapshot_download)
    # and refuses a folder path; without it a path is loaded as a folder, with no hub call.
    outcome = Child(aiperf_command(aiperf, url, folder, args, artifact_dir, seed),
                    log_path=artifact_dir / "aiperf-console.log").wait(AIPERF_LIMIT_S)
    export = artifact_dir / "profile_export_aiperf.json"
    if outcome.returncode != 0 or not export.exists():
        raise SystemExit(f"aiperf failed (exit {outcome.returncode}, timed out: {outcome.timed_out}): "
                         f"{outcome.last_line()}; log {artifact_dir / 'aiperf-console.log'}")
    data = json.loads(export.read_text())
    count = data.get("request_count", {}).get("avg")
    errors = data.get("error_summary") or []
    return {"client": "aiperf", "ttft_ms_p50": data["time_to_first_token"]["p50"],
            "output_tokens_per_s": data["output_token_throughput"]["avg"],
            "output_tokens_per_request": data.get("output_sequence_length", {}).get("avg"),
            "requests_ok": count, "errors": sum(int(e.get("count", 0)) for e in errors if isinstance(e, dict))}


def run_ours(session, cfg: BenchConfig) -> dict:
    row = session.measure(cfg)[0]
    if row["status"] != "ok":
        raise SystemExit(f"our client's run failed: {row['message']}")
    per_request = row["output_tokens_total"] / row["requests_ok"] if row["requests_ok"] else None
    return {"client": "ours", "ttft_ms_p50": row["ttft_ms_p50"], "output_tokens_per_s": row["output_tokens_per_s"],
            "output_tokens_per_request": per_request, "requests_ok": row["requests_ok"],
            "errors": row["request_errors"], "flags": row["noise_flags"] or ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each client, interleaved")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--requests", type=int, default=20, help="timed requests per run")
    parser.add_argument("--warmup", type=int, default=4, help="untimed requests before each run")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--aiperf", default="/tmp/cmpvenv/bin/aiperf", help="the aiperf program (its own venv)")
    parser.add_argument("--out", type=Path, default=None, help="records and AIPerf artifacts (default: a temp dir)")
    parser.add_argument("--server-cpus", default=None, help="CPUs for the server (e.g. 0 or 0,1); the clients get "
                                                            "the others (default: all share all)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="serving-vs-aiperf-"))
    os.environ["BENCH_SERVING_DIR"] = str(out / "ours")  # our per-request records and the server's log
    folder = folder_for("llama-tiny")
    cfg = BenchConfig(model="llama-tiny", mode="serve", device="cpu", model_dir=str(folder),
                      prompt_len=args.prompt_len, new_tokens=args.new_tokens, concurrency=args.concurrency,
                      steps=args.requests, warmup_steps=args.warmup, repeats=1, request_timeout_s=300)
    results = []
    with open_server(cfg, progress=print) as session:
        print(f"server: {session.server.url} ({session.engine.name} {session.server.version}), model {folder}")
        if args.server_cpus is not None:
            pin(session.server.pids(), {int(c) for c in args.server_cpus.split(",")})
        for round_ in range(args.runs):
            order = ("ours", "aiperf") if round_ % 2 == 0 else ("aiperf", "ours")
            for client in order:
                if client == "ours":
                    result = run_ours(session, cfg)
                else:
                    result = run_aiperf(args.aiperf, session.server.url, folder, args,
                                        out / "aiperf" / f"run{round_}", seed=round_)
                results.append({"round": round_, **result})
                print(f"  round {round_} {client:<6} TTFT p50 {result['ttft_ms_p50']:8.1f} ms  "
                      f"output {result['output_tokens_per_s']:8.2f} tokens/s")
    print_table(results)
    print(f"records and artifacts: {out}")


def pin(server_pids: set[int], server_cpus: set[int]) -> None:
    """The server's processes on server_cpus; this process (our client, and AIPerf, started after) on the rest."""
    clients = set(os.sched_getaffinity(0)) - server_cpus
    if not clients:
        raise SystemExit(f"--server-cpus {sorted(server_cpus)} leaves no CPU for the clients")
    for pid in server_pids:
        for thread in psutil.Process(pid).threads():  # every thread: torch's pool is already started
            os.sched_setaffinity(thread.id, server_cpus)
    os.sched_setaffinity(0, clients)
    print(f"server on CPU(s) {sorted(server_cpus)}, clients on {sorted(clients)}")


def print_table(results: list[dict]) -> None:
    print(f"\n{'round':>5} {'client':<7} {'TTFT p50 ms':>12} {'output tokens/s':>16} {'tokens/request':>15} "
          f"{'ok':>4} {'errors':>6}  flags")
    for r in results:
        per = r["output_tokens_per_request"]
        print(f"{r['round']:>5} {r['client']:<7} {r['ttft_ms_p50']:>12.1f} {r['output_tokens_per_s']:>16.2f} "
              f"{per if per is None else round(per, 1)!s:>15} {r['requests_ok']!s:>4} {r['errors']!s:>6}  "
              f"{r.get('flags', '')}")
    medians = {c: {k: statistics.median(r[k] for r in results if r["client"] == c)
                   for k in ("ttft_ms_p50", "output_tokens_per_s")} for c in ("ours", "aiperf")}
    for c, m in medians.items():
        print(f"median  {c:<7} {m['ttft_ms_p50']:>12.1f} {m['output_tokens_per_s']:>16.2f}")
    for k, what in (("ttft_ms_p50", "TTFT p50"), ("output_tokens_per_s", "output tokens/s")):
        ratio = medians["ours"][k] / medians["aiperf"][k]
        verdict = "within 15 %" if abs(ratio - 1) <= 0.15 else "NOT within 15 %"
        print(f"ratio of medians, ours / aiperf, {what}: {ratio:.3f} ({verdict})")


if __name__ == "__main__":
    main()
