"""Checks of what a command is given beyond a configuration: a share written as 10% or 0.1, and result folders
that must differ (the same folder under two spellings is one folder).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from bench_core.errors import ConfigError


def percentage(text: str) -> float:
    """'10%' or '0.1' -> 0.1: a share in either form people write it (an argparse type: text that is neither is one
    line, exit 2). The range is the caller's: cli/diff.fraction's [0, 1) for bench diff, history and compare."""
    value = str(text).strip()
    try:
        return float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.1 or a percentage such as 10%, "
                                         f"got {text!r}") from None


def refuse_same_folder(field: str, named: list[tuple[str, str | Path]], allowed: str) -> None:
    """One folder given twice, under whatever spelling (./r1/, a link to it): one line naming both arguments, as
    their resolved paths are compared. Paths that are not folders are left to the command's own checks."""
    seen: dict[Path, tuple[str, str | Path]] = {}
    for name, path in named:
        if not Path(path).is_dir():
            continue
        real = Path(path).resolve()
        if real in seen:
            first_name, first = seen[real]
            raise ConfigError(field, f"{first_name} {str(first)!r} and {name} {str(path)!r} are the same folder "
                                     f"({real}); allowed: {allowed}")
        seen[real] = (name, path)
