"""A step's operations as a compact table: per kind of op (its name, math class and arithmetic intensity to a
factor of two), per step, the calls, FLOPs, bytes its tensors take, the read bytes a last-level cache of each
size in REUSE_MB would still hold, and, from a profile, its measured time. Plain data (no torch): the
recorder that counts it is measure/op_counts.py; `bench predict`'s per-operation path (predict/ops.py)
reads it from a row's op_profile column or from the published workloads' tables (data/workload_ops.csv).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

# The cache sizes (MB, 1e6 bytes) the table counts hits for; a GPU's own L2 is read between them.
REUSE_MB = (2, 4, 8, 16, 32, 64, 128, 256)
FORMAT = 1   # the serialized table's version (to_json)
MAX_ENTRIES = 96  # kinds kept apart; the rest merged per op and math class (a table, not a trace)


@dataclass
class OpKind:
    """One line of the table: ops of one name, math class and intensity, per step."""
    op: str
    math: str
    calls: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    hits: list = field(default_factory=lambda: [0.0] * len(REUSE_MB))  # read bytes a cache of REUSE_MB[i] holds
    seconds: float | None = None   # measured time per step (None: counted, not timed)

    def add(self, other: "OpKind") -> None:
        self.calls += other.calls
        self.flops += other.flops
        self.bytes += other.bytes
        self.hits = [a + b for a, b in zip(self.hits, other.hits)]
        if other.seconds is not None:
            self.seconds = (self.seconds or 0.0) + other.seconds

    def memory_bytes(self, cache_mb: float | None) -> float:
        """The bytes that cross to memory where the last-level cache holds `cache_mb` MB (None or 0: all)."""
        return self.bytes - cache_hits(self.hits, cache_mb)


def cache_hits(hits: list, cache_mb: float | None) -> float:
    """Read bytes a cache of `cache_mb` holds, read between the sizes counted (log-linear), none below the
    smallest, the largest's above it."""
    if not cache_mb or cache_mb < REUSE_MB[0]:
        return 0.0 if not cache_mb else hits[0] * cache_mb / REUSE_MB[0]
    for (lo, hit_lo), (hi, hit_hi) in zip(zip(REUSE_MB, hits), zip(REUSE_MB[1:], hits[1:])):
        if cache_mb <= hi:
            share = math.log(cache_mb / lo) / math.log(hi / lo)
            return hit_lo + share * (hit_hi - hit_lo)
    return hits[-1]


def intensity_bin(flops: float, nbytes: float) -> int | None:
    """FLOPs per byte to a factor of two (None: no FLOPs): ops in one bin bind alike on any GPU."""
    if flops <= 0 or nbytes <= 0:
        return None
    return round(math.log2(flops / nbytes))


def table(calls: list[OpKind], seconds: list[float | None] | None = None, steps: int = 1) -> list[OpKind]:
    """The calls of `steps` steps as one step's compact table: grouped by op, math class and intensity bin,
    the largest MAX_ENTRIES kinds kept apart (by time where timed, else by bytes), the rest merged per op and
    math class. `seconds`: each call's measured time, in order."""
    groups: dict[tuple, OpKind] = {}
    for i, call in enumerate(calls):
        key = (call.op, call.math, intensity_bin(call.flops, call.bytes))
        kind = groups.setdefault(key, OpKind(call.op, call.math))
        timed = OpKind(call.op, call.math, call.calls, call.flops, call.bytes, list(call.hits),
                       seconds[i] if seconds is not None else None)
        kind.add(timed)
    kinds = list(groups.values())
    for kind in kinds:
        kind.calls, kind.flops, kind.bytes = kind.calls / steps, kind.flops / steps, kind.bytes / steps
        kind.hits = [h / steps for h in kind.hits]
        kind.seconds = None if kind.seconds is None else kind.seconds / steps
    kinds.sort(key=lambda k: (k.seconds if k.seconds is not None else 0.0, k.bytes), reverse=True)
    kept, rest = kinds[:MAX_ENTRIES], {}
    for kind in kinds[MAX_ENTRIES:]:
        rest.setdefault((kind.op, kind.math), OpKind(kind.op, kind.math)).add(kind)
    return kept + list(rest.values())


def to_json(kinds: list[OpKind], **meta) -> str:
    """The table as one compact JSON text (a row's op_profile column)."""
    rows = [[k.op, k.math, round(k.calls, 3), None if k.seconds is None else float(f"{k.seconds:.6g}"),
             float(f"{k.flops:.6g}"), float(f"{k.bytes:.6g}"), [float(f"{h:.4g}") for h in k.hits]] for k in kinds]
    return json.dumps({"format": FORMAT, "reuse_mb": list(REUSE_MB), **meta, "ops": rows}, separators=(",", ":"))


def from_json(text) -> tuple[list[OpKind], dict]:
    """A table written by to_json, and its other fields; ([], {}) for an empty or unreadable cell."""
    try:
        data = json.loads(text) if isinstance(text, str) and text.strip() else None
    except ValueError:
        return [], {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or list(data.get("reuse_mb") or []) != list(REUSE_MB):
        return [], {}
    kinds = [OpKind(op, math_class, calls, flops, nbytes, list(hits), seconds)
             for op, math_class, calls, seconds, flops, nbytes, hits in data.get("ops") or []]
    return kinds, {k: v for k, v in data.items() if k not in ("ops", "format", "reuse_mb")}
