"""The traffic settings of mode serve, read and checked as plain data (no tokenizer, no torch): a length
distribution by name, a file of prompts or conversations, and a trace of timed arrivals. Each bad input
is one line naming the field (and, in a file, the line number); serving/traffic.py makes the requests.

- length_dist: `fixed` (every request prompt_len in, new_tokens out), `uniform:R` (lengths uniform in
  [L(1-R), L(1+R)], vLLM's --random-range-ratio; 0 <= R < 1), `normal:CV` (mean L, standard deviation
  CV x L; CV > 0) or `lognormal:SIGMA` (median L, the log's standard deviation SIGMA; SIGMA > 0): L is
  prompt_len for the prompt and new_tokens for the output, each drawn per request from the seed and
  clipped to [1, 8 L].
- prompt_file: JSONL, one request per line: {"prompt": "..."} or {"messages": [{"role": ..., "content":
  ...}, ...]} (a conversation), with an optional "max_tokens" (else new_tokens). Tokens are counted with
  the served model's tokenizer when the point starts.
- trace_file: JSONL, one arrival per line, in Mooncake's published form ({"timestamp": ms, "input_length":
  n, "output_length": m, "hash_ids": [...]}), or with "arrival_s" (seconds) and "input_tokens" /
  "output_tokens"; times must not go backwards. trace_time_scale stretches the gaps (0.5: twice as fast).

Every number in a file is checked as the command line's are: a time finite and >= 0 (JSON's NaN and
Infinity are refused), a length or max_tokens a whole number from 1 to MAX_TOKENS; and a trace whose
arrivals would keep a point waiting longer than MAX_POINT_S is refused up front, saying its span.
"""
from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from bench_core.errors import ConfigError

LENGTH_SHAPES = {"fixed": "every request prompt_len in and new_tokens out",
                 "uniform": "uniform:R, 0 <= R < 1: uniform in [L(1-R), L(1+R)]",
                 "normal": "normal:CV, CV > 0: mean L, standard deviation CV x L",
                 "lognormal": "lognormal:SIGMA, SIGMA > 0: median L, log standard deviation SIGMA"}
MAX_FACTOR = 8  # a drawn length is clipped to [1, MAX_FACTOR x its centre]
TRACE_TIME = {"timestamp": 1e-3, "arrival_ms": 1e-3, "arrival_s": 1.0, "time_s": 1.0}  # field -> seconds per unit
TRACE_INPUT = ("input_length", "input_tokens", "prompt_tokens")
TRACE_OUTPUT = ("output_length", "output_tokens", "max_tokens")
# A length in a file above this is a typo or a hostile file, not a request: beyond every model's context
# (the longest published, 10 million tokens), and a prompt that long would be built in memory here.
MAX_TOKENS = 1 << 24
# The longest a point may wait on a trace's arrivals (its span, after trace_time_scale). A point measures
# seconds to an hour of traffic; a longer span is a time in the wrong unit (seconds read as ms x 1000)
# or a value such as 1e300, which made a point wait until it was killed.
MAX_POINT_S = 24 * 3600.0


@dataclass(frozen=True)
class LengthDist:
    shape: str
    param: float | None = None

    def text(self) -> str:
        return self.shape if self.param is None else f"{self.shape}:{self.param:g}"


def parse_length_dist(text) -> LengthDist:
    raw = str(text).strip().lower()
    shape, _, value = raw.partition(":")
    allowed = "; ".join(LENGTH_SHAPES.values())
    if shape not in LENGTH_SHAPES:
        raise ConfigError("length_dist", f"unknown shape {shape!r}; allowed: {allowed}")
    if shape == "fixed":
        if value:
            raise ConfigError("length_dist", "fixed takes no parameter")
        return LengthDist("fixed")
    try:
        param = float(value)
    except ValueError:
        raise ConfigError("length_dist", f"{raw!r} needs a number after the colon: {LENGTH_SHAPES[shape]}") from None
    low_ok = param >= 0 if shape == "uniform" else param > 0
    if not low_ok or (shape == "uniform" and param >= 1) or param != param:
        raise ConfigError("length_dist", f"{raw!r} is impossible: {LENGTH_SHAPES[shape]}")
    return LengthDist(shape, param)


@dataclass(frozen=True)
class PromptLine:
    number: int                      # its line in the file (1-based), for messages
    prompt: str | None = None
    messages: tuple | None = None    # ((role, content), ...) of a conversation
    max_tokens: int | None = None


@dataclass(frozen=True)
class TraceLine:
    number: int
    arrival_s: float                 # from the trace's first arrival, before scaling
    input_len: int
    output_len: int


def _lines(path_text: str, field: str):
    path = Path(path_text).expanduser()
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(field, f"cannot read {path_text}: {getattr(exc, 'strerror', None) or exc}") from None
    found = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not found:
        raise ConfigError(field, f"{path_text} is empty; expected one JSON object per line")
    for number, line in found:
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(field, f"{path_text} line {number} is not JSON ({exc.msg}); expected one JSON "
                                     "object per line") from None
        if not isinstance(value, dict):
            raise ConfigError(field, f"{path_text} line {number} is {type(value).__name__}; expected a JSON object")
        yield number, value


def _finite(value) -> bool:
    """A JSON number that is a number: not NaN or Infinity, and not an integer too large for a float."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _count(value, name: str, field: str, where: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value) or value != int(value) \
            or not minimum <= value <= MAX_TOKENS:
        raise ConfigError(field, f"{where}: {name} must be a whole number from {minimum} to {MAX_TOKENS:,}, "
                                 f"got {value!r}")
    return int(value)


@functools.lru_cache(maxsize=16)
def _prompts(path_text: str, stamp: tuple) -> tuple[PromptLine, ...]:
    lines = []
    for number, value in _lines(path_text, "prompt_file"):
        where = f"{path_text} line {number}"
        max_tokens = value.get("max_tokens")
        max_tokens = None if max_tokens is None else _count(max_tokens, "max_tokens", "prompt_file", where)
        if isinstance(value.get("prompt"), str) and value["prompt"].strip():
            lines.append(PromptLine(number, prompt=value["prompt"], max_tokens=max_tokens))
            continue
        messages = value.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            raise ConfigError("prompt_file", f"{where} has neither a non-empty \"prompt\" nor \"messages\" (a list of "
                                             "{\"role\": ..., \"content\": ...})")
        lines.append(PromptLine(number, messages=tuple((m["role"], m["content"]) for m in messages),
                                max_tokens=max_tokens))
    return tuple(lines)


def read_prompt_file(path_text: str) -> tuple[PromptLine, ...]:
    return _prompts(path_text, _stamp(path_text))


@functools.lru_cache(maxsize=16)
def _trace(path_text: str, stamp: tuple) -> tuple[TraceLine, ...]:
    lines, first, last = [], None, None
    for number, value in _lines(path_text, "trace_file"):
        where = f"{path_text} line {number}"
        time_field = next((k for k in TRACE_TIME if k in value), None)
        input_field = next((k for k in TRACE_INPUT if k in value), None)
        output_field = next((k for k in TRACE_OUTPUT if k in value), None)
        if not (time_field and input_field and output_field):
            raise ConfigError("trace_file", f"{where} lacks {'a time' if not time_field else 'a length'}; expected "
                                            f"Mooncake's {{\"timestamp\": ms, \"input_length\": n, \"output_length\": "
                                            "m}, or arrival_s, input_tokens, output_tokens")
        stamp_value = value[time_field]
        if isinstance(stamp_value, bool) or not isinstance(stamp_value, (int, float)) or not _finite(stamp_value) \
                or stamp_value < 0:
            raise ConfigError("trace_file", f"{where}: {time_field} must be a finite number >= 0, got {stamp_value!r}")
        seconds = float(stamp_value) * TRACE_TIME[time_field]
        if last is not None and seconds < last:
            raise ConfigError("trace_file", f"{where}: time goes backwards ({time_field} {stamp_value!r} is before "
                                            "the line above's); a trace is in arrival order")
        first = seconds if first is None else first
        last = seconds
        lines.append(TraceLine(number, seconds - first, _count(value[input_field], input_field, "trace_file", where),
                               _count(value[output_field], output_field, "trace_file", where)))
    return tuple(lines)


def read_trace(path_text: str) -> tuple[TraceLine, ...]:
    return _trace(path_text, _stamp(path_text))


def check_trace_span(path_text: str, steps: int, scale: float) -> None:
    """A point replays the trace's first `steps` arrivals, its gaps x `scale`: refused up front where that
    would keep the point waiting longer than MAX_POINT_S, saying the span."""
    lines = read_trace(path_text)[:steps]
    span = lines[-1].arrival_s * scale
    if span > MAX_POINT_S:
        scaled = f" (x{scale:g}: {_duration(span)})" if scale != 1 else ""
        raise ConfigError("trace_file", f"{path_text}: the {len(lines)} arrivals a point replays span "
                                        f"{_duration(lines[-1].arrival_s)}{scaled}, to line {lines[-1].number}; a "
                                        f"point waits at most {_duration(MAX_POINT_S)}: check the times' unit, scale "
                                        "the gaps down (trace_time_scale) or replay fewer lines (steps)")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def _stamp(path_text: str) -> tuple:
    """What says a file changed (its size and time): an edited file is read again."""
    try:
        info = os.stat(Path(path_text).expanduser())
    except OSError:
        return ()
    return info.st_size, info.st_mtime_ns
