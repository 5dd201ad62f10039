"""Serving under load: a causal LM behind an engine's OpenAI-compatible API (vLLM, SGLang, TensorRT-LLM, TGI, llama.cpp, transformers serve), measured from the outside at set concurrency or request rates, with per-request records, latency percentiles, goodput and the highest load meeting an SLO.

Records in, figures out: engines (the presets), ready (waiting for health), server (what is
served), model_folder (an offline model folder), prompts (exact-length synthetic prompts),
client (the streaming requests), records (one per request), load (closed and open loops, the
client's own load), metrics (figures from records), slo (the search) and session (a
configuration's points and rows). Starting and stopping a server process is launch's job
(launch.engine_server, through the one supervisor).
"""
