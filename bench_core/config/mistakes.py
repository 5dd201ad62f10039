"""Every mistake of an input said at once: checks that do not depend on each other run one after another and
their ConfigErrors are kept, then raised as one error whose lines each name a field (a sweep file with three
mistakes took three runs to learn them). One mistake stays the one-line error it was.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from bench_core.errors import ConfigError


class ConfigErrors(ConfigError):
    """Several bad inputs: a line saying how many, then one line each ('  field: problem'); bad input (exit 2)."""

    def __init__(self, errors: list[ConfigError], where: str = ""):
        self.errors, self.field = list(errors), errors[0].field
        lines = "\n".join(f"  {e}" for e in self.errors)
        ValueError.__init__(self, f"{len(self.errors)} mistakes{f' in {where}' if where else ''}:\n{lines}")


class Mistakes:
    """`with found.kept(): <a check>` for each check that stands alone, then `found.raise_any(where)`."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    @contextlib.contextmanager
    def kept(self) -> Iterator[None]:
        try:
            yield
        except ConfigError as exc:
            self.add(exc)

    def add(self, exc: ConfigError) -> None:
        for one in getattr(exc, "errors", [exc]):  # a ConfigErrors' own lines, each once
            if str(one) not in {str(e) for e in self.errors}:
                self.errors.append(one)

    def raise_any(self, where: str = "") -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise ConfigErrors(self.errors, where)
