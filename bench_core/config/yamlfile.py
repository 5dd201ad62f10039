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
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(what, f"{path} is not valid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(what, f"{path} must hold a mapping of keys to values, got {type(data).__name__}")
    return data


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
