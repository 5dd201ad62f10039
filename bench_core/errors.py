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


# Exit codes of every `bench` command: 0 all rows ok; 1 a run or configuration failed (its rows
# are written); 2 bad input (one line on stderr, nothing written); 130 interrupted.
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
