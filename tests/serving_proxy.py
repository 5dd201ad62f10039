"""A small HTTP proxy in front of a real serving engine, for the faults a real engine will not
produce on demand: an HTTP error status, a connection dropped mid-stream, a stall. Every
`every`-th POST gets the fault (1: all of them); GETs (health, models) always pass through.
Runs its own event loop on a thread; the port comes from the OS."""
from __future__ import annotations

import asyncio
import threading

FAULTS = ("pass", "status", "drop", "stall")


class FaultProxy:
    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.fault, self.status, self.every = "pass", 500, 1
        self.posts = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def set(self, fault: str, status: int = 500, every: int = 1) -> "FaultProxy":
        assert fault in FAULTS
        self.fault, self.status, self.every, self.posts = fault, status, every, 0
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _shutdown(self) -> None:
        self.server.close()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # one request at a time on this connection (HTTP/1.1 keep-alive)
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                body = await reader.readexactly(length) if length else b""
                fault = "pass"
                if head.startswith(b"POST"):
                    self.posts += 1
                    fault = self.fault if self.posts % self.every == 0 else "pass"
                if fault == "status":
                    text = b'{"detail": "injected by the fault proxy"}'
                    writer.write(b"HTTP/1.1 %d Injected\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                                 b"\r\n%s" % (self.status, len(text), text))
                    await writer.drain()
                    continue
                await self._relay(head, body, writer, fault)
                return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _relay(self, head: bytes, body: bytes, writer: asyncio.StreamWriter, fault: str) -> None:
        """Forward one request (Connection: close upstream) and its response, with the fault."""
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        lines = [line for line in head.split(b"\r\n") if line and not line.lower().startswith(b"connection:")]
        up_writer.write(b"\r\n".join(lines) + b"\r\nConnection: close\r\n\r\n" + body)
        await up_writer.drain()
        seen = 0
        try:
            while chunk := await up_reader.read(4096):
                seen += chunk.count(b"data:")
                if fault == "drop" and seen >= 2:
                    writer.transport.abort()  # mid-stream: no end of the chunked body
                    return
                writer.write(chunk)
                await writer.drain()
                if fault == "stall" and seen >= 1:
                    await asyncio.sleep(3600)  # the client's read timeout ends it
        finally:
            up_writer.close()
