"""The per-operation path: a GPU row that carries its ops' table (the op_profile column: each kind of op's measured
time, calls, FLOPs and bytes from the profile gpu_busy takes, measure/op_table.py) is predicted op by op, as Habitat
(USENIX ATC 2021) predicts a step from the kernels measured on a source GPU: each op's measured time is scaled by
its own roofline on the target over its roofline on the source,

    t'_op = t_op x max(F / P', Bm' / W') / max(F / P, Bm / W)

with P, W the GPUs' achieved peaks and bandwidths (predict/ceilings.py), F the op's FLOPs and Bm the bytes that
cross to memory (those the last-level cache does not hold, where both GPUs' L2 sizes are known). An op with no FLOPs
and no bytes, and device time outside every op (a collective launched from a hook), are carried unchanged. The step
is the host's gaps (the measured step less the GPU's busy time: launches, Python) carried unchanged plus the GPU's
time scaled as its ops are; a step measured host-bound (gpu_busy below half) keeps its measured time unless the
target's ops alone take longer. Rows without a profile (a CPU run, older rows, a compiled step) take the whole-step
model (predict/model.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from bench_core.measure.op_table import OpKind, from_json
from bench_core.predict.ceilings import Ceilings, op_math, op_roofline_s
from bench_core.predict.model import Setup

CARRIED = "(outside ops)"


@dataclass(frozen=True)
class OpPath:
    """A step predicted op by op: seconds per step on the target, and what the source measured."""
    step_s: float            # the predicted step on the target
    measured_step_s: float   # the source's step (the window's)
    busy_s: float            # the source GPU's busy time per step (the profile's)
    device_s: float          # the target GPU's time for the same ops
    compute_share: float     # of the target's op time, in ops bound by their FLOPs
    carried_share: float     # of the target's op time, carried unchanged (no FLOPs or bytes, outside ops)
    kinds: int               # lines of the table
    host_bound: bool

    def binds(self) -> str:
        memory = 1 - self.compute_share - self.carried_share
        words = (f"per op ({self.kinds} kinds of op from the row's profile): compute-bound {self.compute_share:.0%}, "
                 f"memory-bound {memory:.0%}" + (f", carried {self.carried_share:.0%}" if self.carried_share >= 0.005 else "")
                 + " of the GPU's time")
        gaps = self.measured_step_s - self.busy_s
        if self.host_bound:
            return f"host (measured host-bound: the measured step carried over); {words}"
        return f"{words}; the host's gaps ({gaps / self.measured_step_s:.0%} of the measured step) carried unchanged"


def table_of(conf: dict) -> tuple[list[OpKind], dict]:
    """The row's op table and its fields (steps, busy_s, device), or ([], {}) where it has none."""
    kinds, meta = from_json(conf.get("op_profile"))
    if not kinds or meta.get("device") != "cuda" or not isinstance(meta.get("busy_s"), (int, float)):
        return [], {}
    return kinds, meta


def roofline_s(kind: OpKind, ceilings: Ceilings, setup: Setup, cache_mb: float | None) -> float:
    """One kind of op's time at the GPU's ceilings: max(FLOPs / peak, memory bytes / bandwidth)."""
    return max(op_roofline_s(kind, ceilings, setup.math, cache_mb))


def scaled(kinds: list[OpKind], source: Setup, target: Setup, cache: bool = True) -> tuple[float, float, float, float]:
    """(the source's op time, the target's, the target's share in compute-bound ops, its share carried): each
    measured op time scaled by its roofline on the target over its roofline on the source."""
    src, dst = Ceilings(source.gpu), Ceilings(target.gpu)
    l2_src, l2_dst = src.l2_mb(), dst.l2_mb()
    if not cache or l2_src is None or l2_dst is None:  # a cache known on one side only would favour that side
        l2_src = l2_dst = None
    before = after = compute = carried = 0.0
    for kind in kinds:
        t = kind.seconds or 0.0
        r_src = roofline_s(kind, src, source, l2_src) if kind.op != CARRIED else 0.0
        if r_src <= 0:
            before, after, carried = before + t, after + t, carried + t
            continue
        r_dst = roofline_s(kind, dst, target, l2_dst)
        t_dst = t * r_dst / r_src
        before, after = before + t, after + t_dst
        compute_s, memory_s = op_roofline_s(kind, dst, target.math, l2_dst)
        if kind.flops and compute_s >= memory_s:
            compute += t_dst
    return before, after, compute / after if after else 0.0, carried / after if after else 0.0


def predict_step(kinds: list[OpKind], meta: dict, measured_step_s: float, source: Setup, target: Setup,
                 host_bound: bool) -> OpPath:
    """The target's step from the source's ops and step (see the module's docstring)."""
    before, after, compute, carried = scaled(kinds, source, target)
    busy = min(float(meta["busy_s"]), measured_step_s)
    device = busy * (after / before) if before else busy  # the union of the ops' time, scaled as their sum is
    gaps = max(0.0, measured_step_s - busy)
    step = max(measured_step_s, device) if host_bound else gaps + device
    return OpPath(step, measured_step_s, busy, device, compute, carried, len(kinds), host_bound)
