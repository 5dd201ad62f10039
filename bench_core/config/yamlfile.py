"""A YAML file of settings read as a mapping (a sweep file, a --config file): unreadable, not UTF-8,
malformed or with a key given twice, it is a one-line ConfigError naming the file and the line.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from bench_core.errors import ConfigError


def load_yaml_mapping(path, what: str = "file") -> dict:
    """A YAML file that must hold a mapping; unreadable, not UTF-8, malformed YAML or a key given
    twice in one mapping is a one-line ConfigError naming the file and the line."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(what, f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(what, f"{path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}); "
                                "save it as UTF-8") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(what, f"{path} is not valid YAML{yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(what, f"{path} must hold a mapping of keys to values, got {type(data).__name__}")
    return data


# Errors PyYAML notices only later than the line to fix: an opener never closed (a bracket, a brace, a quote)
# or a key without its ':' is noticed where the parser runs out of hope, often the next line or the end of the
# file. For these the line to fix is where the context began (PyYAML's context_mark): (context, how its
# problem begins) -> what is wrong there.
OPENED = {("while parsing a flow sequence", "expected ','"): "the '[' here is never closed",
          ("while parsing a flow mapping", "expected ','"): "the '{' here is never closed",
          ("while scanning a quoted scalar", "found unexpected end of stream"): "the quote here is never closed",
          ("while scanning a simple key", "could not find expected ':'"): "this key has no ':' after it"}


def yaml_problem(exc: yaml.YAMLError) -> str:
    """' at line 3, column 7: the '[' here is never closed: expected ',' or ']', but got the end of the file
    (at line 4)': where a person fixes a YAML error, and what PyYAML found. The line is the opener's where the
    error is one never closed (OPENED), else where PyYAML noticed it."""
    mark, start = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
    context = getattr(exc, "context", None) or ""
    problem = (getattr(exc, "problem", None) or "invalid YAML").replace("'<stream end>'", "the end of the file") \
        .replace("end of stream", "end of the file")
    opened = next((text for (where, begins), text in OPENED.items()
                   if context == where and str(getattr(exc, "problem", "")).startswith(begins)), None)
    if opened and start is not None:
        noticed = "" if mark is None else (f" (column {mark.column + 1})" if mark.line == start.line
                                           else f" (at line {mark.line + 1})")
        return f" at line {start.line + 1}, column {start.column + 1}: {opened}: {problem}{noticed}"
    return (f" at line {mark.line + 1}, column {mark.column + 1}" if mark else "") + f": {problem}"


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error: PyYAML
    keeps the last value silently, so a sweep would run something other than what was written."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice (lines {seen[key]} and {key_node.start_mark.line + 1}); "
                                "keep one", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)
