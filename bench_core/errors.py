"""The error every bad input raises: one line naming the field and what is allowed.

It lives here, importing nothing from bench_core, so that config, precision, models and devices
can all raise it without importing each other.
"""
from __future__ import annotations


class ConfigError(ValueError):
    """A bad input: one line that names the field and what is allowed."""

    def __init__(self, field_name: str, problem: str):
        # Keys and values come from users: keep the message on one printable line.
        self.field = field_name if field_name.isidentifier() else repr(field_name)
        problem = problem.replace("\r", "\\r").replace("\n", "\\n")
        super().__init__(f"{self.field}: {problem}")
