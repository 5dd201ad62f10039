"""A serving engine's process: started through the supervisor (a session of its own, every
descendant remembered), waited for until healthy, and stopped with its whole tree, for mode serve.

`start_server` returns a serving.server.Server whose `stop` ends the tree; `run_serving` is a
serve configuration placed here: the server (started, or attached to server_url) for as long as
its points are measured (serving.session), stopped at the end, on Ctrl-C / SIGTERM, on a failure
and on the time limit. A server that cannot start is bad input: one line naming the setting, with
how long it was waited for and the log's last lines.
"""
from __future__ import annotations

import os
import shlex
import socket
import time
from pathlib import Path
from typing import Callable

from bench_core.config.schema import BenchConfig
from bench_core.errors import ConfigError
from bench_core.launch.servers import Servers
from bench_core.launch.supervisor import Child
from bench_core.serving.engines import Engine
from bench_core.serving.ready import Readiness, wait_ready
from bench_core.serving.server import Server, attach, remote_version, served_models
from bench_core.serving.session import ServingSession, prepare, records_dir


def free_port() -> int:
    """A port the OS says is free now (bound to 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(engine: Engine, model: str, *, extra_args: tuple[str, ...] = (), dummy: bool = False,
                 limit_s: float = 600.0, log_path: Path | None = None, env: dict | None = None) -> Server:
    """Start `engine` serving `model` on a free port and wait until it is healthy."""
    engine.check_installed()
    port = free_port()
    command = engine.command_line(model, port, extra=extra_args, dummy=dummy)
    child = Child(command, env=env, log_path=log_path)
    url = f"http://127.0.0.1:{port}"
    server = Server(url, engine, [], command=command, child=child, log_path=log_path)
    try:
        ready = wait_ready(url + engine.health_path, limit_s, exit_code=child.proc.poll)
        if not ready.ready:
            raise not_ready(server, ready, limit_s)
        server.startup_s = ready.waited_s
        server.served = served_models(url)
        server.version = engine.local_version() or remote_version(url, engine)
    except BaseException:
        server.stop()
        raise
    return server


def not_ready(server: Server, ready: Readiness, limit_s: float) -> ConfigError:
    tail = server.log_tail()
    where = f"; log {server.log_path}" if server.log_path else ""
    if ready.exit_code is not None:
        return ConfigError("server_args", f"{server.engine.name} server exited at once (code {ready.exit_code}) "
                                          f"after {ready.waited_s:.1f} s; log tail: {tail or 'empty'}{where}")
    return ConfigError("server_timeout_s", f"{server.engine.name} server not healthy after {ready.waited_s:.0f} s "
                                           f"(limit {limit_s:g} s; last check: {ready.last_error}); log tail: "
                                           f"{tail or 'empty'}{where}")


def open_server(cfg: BenchConfig, progress: Callable[[str], None] | None = None) -> ServingSession:
    """The session of a serve configuration: its server started (or attached) and ready."""
    started = time.perf_counter()
    engine, folder, dummy = prepare(cfg)
    if cfg.server_url:
        server = attach(cfg.server_url, engine)
    else:
        (progress or (lambda text: None))(f"serve: starting {engine.name} on {folder}")
        log = records_dir() / "logs" / f"{engine.name}-{os.getpid()}-{free_port()}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        server = start_server(engine, str(folder), extra_args=tuple(shlex.split(cfg.server_args or "")),
                              dummy=dummy, limit_s=cfg.server_timeout_s, log_path=log)
    try:
        session = ServingSession(cfg, server, folder, progress)
    except BaseException:
        server.stop()
        raise
    session.start_s = time.perf_counter() - started
    return session


# What makes two serve configurations one server: the engine and what it is started with; the rest (the load,
# the request shape, the SLO) is each configuration's own.
SERVER_FIELDS = ("engine", "server_url", "served_model", "model_dir", "server_args", "server_timeout_s", "model",
                 "precision", "device", "seed")


def run_serving(cfg: BenchConfig, progress: Callable[[str], None] | None = None,
                servers: Servers | None = None) -> list[dict]:
    """One serve configuration: start (or attach to) the server, measure its repeats, stop it. Given `servers`
    (a sweep's execution), a server stays open for the next configuration of the same server, as bench ladder's
    points share one: a start of `transformers serve` is a process, torch, the model and its warm-up, each time."""
    if servers is None:
        with open_server(cfg, progress) as session:
            return session.measure(cfg)
    key = tuple(getattr(cfg, name) for name in SERVER_FIELDS)
    if key not in servers.open:
        servers.close()  # one server at a time: its memory and cores are the next one's
        servers.open[key] = open_server(cfg, progress)
    return servers.open[key].measure(cfg)
