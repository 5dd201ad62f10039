"""The server a serving point is measured against: its URL, engine, what it serves and its
version, and (when this process started it: launch.engine_server) the supervised process tree
that `stop` ends.

`attach` is a server someone else started. Anything that stops a server from serving before a
measurement is bad input: a one-line ConfigError naming the setting (a URL that does not answer,
a model it does not serve).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench_core.errors import ConfigError
from bench_core.serving.engines import Engine
from bench_core.serving.ready import wait_ready

TAIL_SHOWN = 5  # log lines shown in a failure's one line


@dataclass
class Server:
    url: str                  # base URL, no trailing slash
    engine: Engine
    served: list[str]         # model ids from /v1/models
    version: str = ""
    command: list[str] = field(default_factory=list)  # empty when attached to a running server
    child: Any = None         # launch.supervisor.Child of a server this process started
    log_path: Path | None = None
    startup_s: float | None = None

    def stop(self) -> int:
        """Stop the tree this process started (none when attached); how many processes were running."""
        return self.child.stop() if self.child else 0

    def pids(self) -> set[int]:
        """The process tree of a server this process started, as it is now (empty when attached):
        its use of the device is the measured work, not another process's (measure/telemetry)."""
        return self.child.pids() if self.child else set()

    def log_tail(self, lines: int = TAIL_SHOWN) -> str:
        """The log's last lines on one line; the last line that says 'error' first, when it is
        further up (a launcher's usage text follows its error)."""
        kept = [line.strip() for line in (self.child.tail if self.child else []) if line.strip()]
        shown = kept[-lines:]
        errors = [line for line in kept[:-lines] if "error" in line.lower()]
        return " | ".join(errors[-1:] + (["..."] if errors else []) + shown)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def attach(url: str, engine: Engine, limit_s: float = 3.0) -> Server:
    """A server someone else started: it must answer its health path within `limit_s`."""
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError("server_url", f"must start with http:// or https://, got {url!r}")
    ready = wait_ready(url + engine.health_path, limit_s)
    if not ready.ready:
        raise ConfigError("server_url", f"{url}{engine.health_path} does not answer after {ready.waited_s:.0f} s "
                                        f"({ready.last_error}); start the server, or leave server_url empty to "
                                        "start one")
    return Server(url, engine, served_models(url), version=remote_version(url, engine))


def served_models(url: str) -> list[str]:
    try:
        data = httpx.get(url + "/v1/models", timeout=10.0).json()
        return [str(m["id"]) for m in data.get("data", [])]
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
        return []


def remote_version(url: str, engine: Engine) -> str:
    if not engine.version_path:
        return ""
    try:
        data = httpx.get(url + engine.version_path, timeout=5.0).json()
    except (httpx.HTTPError, ValueError):
        return ""
    return str(data.get("version", "")) if isinstance(data, dict) else ""


def check_served(server: Server, model: str) -> str:
    """The model id to send: `model` itself when the server lists it (or lists nothing)."""
    if not server.served or model in server.served:
        return model
    raise ConfigError("served_model", f"{model!r} is not served by {server.url}; it serves: "
                                      f"{', '.join(server.served)}")
