"""The streaming client for the OpenAI-compatible /v1/completions and /v1/chat/completions.

HTTP library: httpx (async). The established clients split between aiohttp (vLLM's
`vllm bench serve`) and httpx (GuideLLM, and the openai client itself). httpx is chosen because
it is already installed with this project's dependencies (transformers and openai use it), is
actively maintained, has one timeout model for connect / read / pool, and streams a response
line by line (`aiter_lines`), which is all server-sent events need here: each `data: {...}`
line is one chunk, `data: [DONE]` ends the stream.

One request fills one RequestRecord: the send time, the arrival time of every chunk that
carried output text (time.perf_counter on receipt, relative to the point's start), the usage of
the last chunk (the engine's token counts) and, on failure, the HTTP status and the error's first
line. Only fields the engine accepts are sent (engines.Engine.request_fields).
"""
from __future__ import annotations

import json
import time

import httpx

from bench_core.serving.records import ERROR, RequestRecord

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def payload(endpoint: str, model: str, prompt: str, max_tokens: int, extra: dict) -> dict:
    body = {"model": model, "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True},
            "temperature": 0.0, **extra}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def new_client(connections: int, timeout_s: float) -> httpx.AsyncClient:
    """One connection pool for a point: as many connections as requests may be in flight; a
    read that waits longer than `timeout_s` for the next chunk fails the request (a stall)."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout_s, pool=None))


async def send(client: httpx.AsyncClient, url: str, body: dict, record: RequestRecord, t0: float) -> RequestRecord:
    """Stream one request into `record` (times relative to `t0`); never raises for a failed request."""
    record.send_s = time.perf_counter() - t0
    try:
        async with client.stream("POST", url, json=body) as response:
            record.http_status = response.status_code
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                return _failed(record, t0, f"HTTP {response.status_code}: {_detail(text)}")
            done = False
            async for line in response.aiter_lines():
                now = time.perf_counter() - t0
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                _take_chunk(record, json.loads(data), now)
            record.end_s = time.perf_counter() - t0
            if record.output_tokens is None:
                return _failed(record, t0, "stream ended without usage (the server closed it early)"
                                           if not done else "stream had no usage chunk")
    except (httpx.HTTPError, ValueError) as exc:
        return _failed(record, t0, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": "))
    return record


def _take_chunk(record: RequestRecord, chunk: dict, now: float) -> None:
    if "error" in chunk:  # an error sent inside the stream
        raise ValueError(f"error in stream: {str(chunk['error'])[:200]}")
    for choice in chunk.get("choices") or []:
        text = choice.get("text")
        if text is None:
            text = (choice.get("delta") or {}).get("content")
        if text:
            if record.first_chunk_s is None:
                record.first_chunk_s = now
            record.chunk_s.append(now)
            if record.reply is not None:  # kept only where a conversation goes on with it
                record.reply += text
        if choice.get("finish_reason"):
            record.finish_reason = str(choice["finish_reason"])
    usage = chunk.get("usage")
    if usage:
        record.prompt_tokens = usage.get("prompt_tokens")
        record.output_tokens = usage.get("completion_tokens")


def _failed(record: RequestRecord, t0: float, message: str) -> RequestRecord:
    record.status, record.error = ERROR, message[:300]
    record.end_s = time.perf_counter() - t0
    return record


def _detail(text: str) -> str:
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            text = str(data.get("detail") or data.get("error") or data.get("message") or text)
    except ValueError:
        pass
    return " ".join(text.split())[:200]
