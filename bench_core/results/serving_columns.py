"""The columns of a serving point (mode serve, bench_core/serving): the engine, its requests and tokens, the
latency percentiles, goodput and the client's load, each with what it means. Part of results/rows.py's
schema, between the measured columns and the efficiency ones.
"""
from __future__ import annotations

SERVING_COLUMNS = [
    ("engine_version", "serve: the serving engine's version (its installed package, or its /version answer)"),
    ("engine_command", "serve: the command line the server was started with (empty when attached to server_url)"),
    ("served_model_id", "serve: the model name the requests sent"),
    ("server_startup_s", "serve: seconds from the server's start to its first healthy answer"),
    ("records_file", "serve: the point's per-request records (JSON): every figure of the row is recomputable "
                     "from it (bench_core.serving.metrics.figures)"),
    ("serve_window_s", "serve: seconds from the first request's send to the last request's end"),
    ("requests_sent", "serve: requests sent in the point (failed ones included)"),
    ("requests_ok", "serve: requests that streamed to their end with a usage count"),
    ("request_errors", "serve: failed requests (HTTP errors, dropped streams, stalls, cancelled at the error limit)"),
    ("error_rate", "serve: request_errors / requests_sent"),
    ("requests_per_s", "serve: ok requests / serve_window_s"),
    ("request_rate_achieved", "serve: (sent - 1) / (last send - first send): the rate the client achieved, beside "
                              "request_rate asked for"),
    ("output_tokens_total", "serve: output tokens of the ok requests, from the stream's usage"),
    ("prompt_tokens_total", "serve: prompt tokens of the ok requests, from the stream's usage"),
    ("output_tokens_per_s", "serve: output_tokens_total / serve_window_s"),
    ("total_tokens_per_s", "serve: (prompt + output tokens) / serve_window_s"),
    ("tokens_per_s_per_user", "serve: mean over ok requests of output tokens / the request's end-to-end time"),
    *[(f"{m}_ms_{s}", f"serve: {what}, ms, {s} over the ok requests")
      for m, what in (("ttft", "time to first token (first chunk with text - send)"),
                      ("tpot", "time per output token, (e2e - TTFT) / (output tokens - 1)"),
                      ("itl", "inter-chunk latency (gaps between chunks with text; a chunk may hold several tokens)"),
                      ("e2e", "end-to-end request latency (end of stream - send)"))
      for s in ("mean", "p50", "p90", "p99")],
    ("goodput_requests_per_s", "serve: ok requests with TTFT <= slo_ttft_ms and TPOT <= slo_tpot_ms, per second"),
    ("goodput_tokens_per_s", "serve: output tokens of those requests per second"),
    ("goodput_fraction", "serve: requests meeting both bounds / requests_sent"),
    ("slo_met", "serve: no request failed, p99 TTFT <= slo_ttft_ms and p99 TPOT <= slo_tpot_ms"),
    ("server_queue_max", "serve: most requests waiting in the server's queue during the point (its Prometheus "
                         "metrics: vLLM, SGLang, TGI); empty where the engine serves none"),
    ("server_running_max", "serve: most requests the server ran at once during the point (Prometheus)"),
    ("server_kv_cache_max", "serve: highest KV-cache use during the point, a fraction (Prometheus: vLLM, SGLang)"),
    ("energy_j_per_output_token", "serve: energy_j / output_tokens_total: joules of the server's device (NVML on a "
                                  "GPU; on a CPU the RAPL package, every process on it) per output token of the ok "
                                  "requests, over the point (a server this process started; empty when attached)"),
    ("client_cpu_fraction", "serve: the client process's CPU seconds / serve_window_s (1 = one core busy)"),
    ("client_loop_lag_ms_p99", "serve: p99 of how late the client's event loop woke a 10 ms timer, ms"),
    ("client_saturated", "serve: client_cpu_fraction > 0.9 or client_loop_lag_ms_p99 > the limit: the client, not "
                         "only the server, may have set the pace (flagged client-saturated)"),
    ("traffic", "serve: the traffic's design in words: lengths (fixed or their distribution), a prompt file, a trace "
                "replay, or multi-turn conversations (a prefix they share by design is named here, not a fault)"),
    ("prompt_tokens_mean", "serve: mean prompt tokens of the ok requests (the engine's usage)"),
    ("output_tokens_mean", "serve: mean output tokens of the ok requests (the engine's usage)"),
    ("send_lag_ms_p99", "serve, open loop: p99 of how late each request was sent after its scheduled arrival (the "
                        "rate's or the trace's), ms: the arrivals the server saw against those asked for"),
    ("ttft_ms_p50_by_turn", "serve, multi-turn: the p50 TTFT of each turn, 'turn: ms' (a working prefix cache makes "
                            "later turns, whose history it holds, start faster than their longer prompts would)"),
    ("conversations", "serve, multi-turn: conversations the point's requests belonged to"),
    ("prefix_cache_hit_rate", "serve: the server's prefix-cache hit rate over the point, from its Prometheus "
                              "counters (vLLM: hits / queries, in tokens; SGLang: cache_hit_rate); empty where the "
                              "engine exposes none"),
    ("over_saturated", "serve, open loop: true when the point stopped because requests arrived faster than they "
                       "finished for saturation_s while the queue grew"),
]
