"""Serving engines kept open between the serve configurations of one sweep execution (plain data: no
HTTP client is imported until a configuration serves). launch.engine_server opens them; closing stops each.
"""
from __future__ import annotations


class Servers:
    """The serving sessions a run of configurations keeps open (at most one: engine_server closes the last
    before it starts another), stopped on the way out whatever ends the run."""

    def __init__(self) -> None:
        self.open: dict[tuple, object] = {}  # the server's settings -> its serving.session.ServingSession

    def close(self) -> None:
        for session in self.open.values():
            session.close()
        self.open.clear()

    def __enter__(self) -> "Servers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
