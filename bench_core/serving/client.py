"""The streaming client for the OpenAI-compatible /v1/completions and /v1/chat/completions.

HTTP library: aiohttp, as vLLM's `vllm bench serve` and AIPerf use. It was httpx (GuideLLM's, and the
openai client's) until its cost was measured against an engine stand-in that answers at once
(tests/fast_engine.py, benchmarks/client_limit.py): httpx took 0.51 ms from the send to the response's
headers where aiohttp takes 0.23 ms and a bare socket 0.12 ms, and every millisecond of the client's is
added to the TTFT it reports. A response is read line by line (`response.content`), which is all
server-sent events need: each `data: {...}` line is one chunk, `data: [DONE]` ends the stream.

One request fills one RequestRecord: the send time, the arrival time of every chunk that
carried output text (time.perf_counter on receipt, relative to the point's start), the usage of
the last chunk (the engine's token counts) and, on failure, the HTTP status and the error's first
line. Only fields the engine accepts are sent (engines.Engine.request_fields).
"""
from __future__ import annotations

import asyncio
import json
import time

import aiohttp

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


def new_client(connections: int, timeout_s: float) -> aiohttp.ClientSession:
    """One connection pool for a point: as many connections as requests may be in flight (waiting for one
    is not a timeout); a read that waits longer than `timeout_s` for the next chunk fails the request (a
    stall), as does a connection not made within it."""
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=connections)
    timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=timeout_s, sock_read=timeout_s)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, read_bufsize=2**20)


async def send(client: aiohttp.ClientSession, url: str, body: dict, record: RequestRecord, t0: float) -> RequestRecord:
    """Stream one request into `record` (times relative to `t0`); never raises for a failed request."""
    record.send_s = time.perf_counter() - t0
    try:
        async with client.post(url, json=body) as response:
            record.http_status = response.status
            if response.status != 200:
                text = (await response.read()).decode(errors="replace")
                return _failed(record, t0, f"HTTP {response.status}: {_detail(text)}")
            done = False
            async for line in response.content:
                now = time.perf_counter() - t0
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                _take_chunk(record, json.loads(data), now)
            record.end_s = time.perf_counter() - t0
            if record.output_tokens is None:
                return _failed(record, t0, "stream ended without usage (the server closed it early)"
                                           if not done else "stream had no usage chunk")
    except aiohttp.ConnectionTimeoutError:
        return _failed(record, t0, f"ConnectTimeout: no connection within {client.timeout.sock_connect:g} s "
                                   "(request_timeout_s)")
    except asyncio.TimeoutError:  # aiohttp's read timeout is one
        return _failed(record, t0, f"ReadTimeout: no chunk for {client.timeout.sock_read:g} s (request_timeout_s)")
    except (aiohttp.ClientError, ValueError) as exc:
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
