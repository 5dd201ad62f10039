"""An engine stand-in that streams as fast as a client can read: an OpenAI-compatible /v1/completions that
answers every request at once with `max_tokens` chunks of one token each, the usage chunk and [DONE], in one
write (the whole body built once per length, sent with its Content-Length over a kept-alive connection).
It costs next to nothing per chunk, so what a client measures against it is the client's own cost: its
TTFT is the client's overhead, its chunks/s the client's limit.

    python tests/fast_engine.py PORT      # prints "ready" once it listens; stops on SIGTERM

Used by tests/test_serving.py (the client-saturated flag beyond the client's limit) and by
benchmarks/client_limit.py (the limit itself, in docs/serving.md).
"""
from __future__ import annotations

import asyncio
import functools
import json
import signal
import sys

CHUNK = b'data: {"id":"x","object":"text_completion","choices":[{"index":0,"text":" a","finish_reason":null}]}\n\n'


@functools.lru_cache(maxsize=64)
def body(tokens: int, prompt_tokens: int) -> bytes:
    usage = json.dumps({"id": "x", "object": "text_completion", "choices": [],
                        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": tokens,
                                  "total_tokens": prompt_tokens + tokens}}).encode()
    return CHUNK * tokens + b"data: " + usage + b"\n\ndata: [DONE]\n\n"


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            request = json.loads(await reader.readexactly(length)) if length else {}
            if head.startswith(b"GET"):
                payload, kind = b'{"data":[{"id":"stand-in"}]}', b"application/json"
            else:
                payload, kind = body(int(request.get("max_tokens") or 16), 8), b"text/event-stream"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\nContent-Length: " +
                         str(len(payload)).encode() + b"\r\n\r\n" + payload)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
