"""Waiting for a server to answer its health path: a deadline, the last error kept, and an early
stop when the process serving it has exited (a command that fails at once is not waited out).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import httpx

POLL_S = 0.5


@dataclass
class Readiness:
    ready: bool
    waited_s: float
    last_error: str = ""         # the last failed check: a connection error or an HTTP status
    exit_code: int | None = None  # the server process exited before it was ready


def check_once(url: str, timeout_s: float = 5.0) -> str:
    """'' when `url` answers 200, else what went wrong, in one line."""
    try:
        response = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return "" if response.status_code == 200 else f"HTTP {response.status_code}: {response.text[:200]!r}"


def wait_ready(url: str, limit_s: float, exit_code: Callable[[], int | None] = lambda: None) -> Readiness:
    """Poll `url` until it answers 200, `limit_s` passes, or `exit_code()` says the server exited."""
    start = time.monotonic()
    last = "not checked yet"
    while True:
        code = exit_code()
        if code is not None:
            return Readiness(False, time.monotonic() - start, last, exit_code=code)
        last = check_once(url, timeout_s=min(5.0, max(0.5, limit_s)))
        if not last:
            return Readiness(True, time.monotonic() - start)
        if time.monotonic() - start >= limit_s:
            return Readiness(False, time.monotonic() - start, last)
        time.sleep(POLL_S)
