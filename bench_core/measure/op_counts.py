"""Counting what each operation of one step computes and moves, for the table of measure/op_table.py: a
dispatch mode that sees every op the step runs (views and size queries left out, composite ops decomposed
as FlopCounterMode decomposes them) and records its name, math class, FLOPs (FlopCounterMode's formulas,
flops.formula_fixes: 1 multiply-add = 2 FLOPs), bytes (its tensors' inputs and outputs, nothing fused;
an embedding lookup reads the rows it names, as flops.py counts it) and, of the bytes it reads, those a
last-level cache of each size would still hold.

A read hits a cache of S MB where the tensor and the distinct tensors touched since it was last touched (its
LRU stack distance, in bytes) fit in S: an activation the next op reads back, a weight read again in the same
step, where they are small enough. Writes are counted as going to memory (a write-back cache writes them back when it evicts them).

OpRecorder(annotate=True) wraps each op in a profiler label (LABEL + its index), so that a profile taken over
the same steps gives each op its measured time (run/busy.py does, on a GPU row).
"""
from __future__ import annotations

from collections import OrderedDict

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from bench_core.measure.flops import EMBEDDING_LOOKUPS, formula_fixes
from bench_core.measure.op_table import REUSE_MB, OpKind, table

LABEL = "bench_op#"
# The math class an op's floating inputs compute in: what its peak is on a GPU (predict/specs.py classes).
CLASSES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}



class OpRecorder(TorchDispatchMode):
    """Every op a step runs (views and size queries left out, composite ops decomposed as FlopCounterMode
    decomposes them): its name, math class, FLOPs, bytes and cache hits, in order."""

    def __init__(self, annotate: bool = False):
        super().__init__()
        self.registry = FlopCounterMode(display=False, custom_mapping=formula_fixes()).flop_registry
        self.annotate = annotate
        self.calls: list[OpKind] = []
        self._recent: OrderedDict = OrderedDict()   # storage -> bytes, least recently touched first
        self._plans: dict = {}

    def _plan(self, func) -> str:
        aten = torch.ops.aten
        if func.is_view or func in (aten.size.default, aten.sym_size.default, aten.stride.default,
                                    aten.sym_stride.default, aten.numel.default, aten.dim.default,
                                    torch.ops.prim.device.default, aten.is_contiguous.default,
                                    aten.sym_numel.default, aten.storage_offset.default):
            return "pass"
        composite = torch._C.DispatchKey.CompositeImplicitAutograd
        if func._overloadpacket not in self.registry and (
                composite in func.py_kernels or torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), composite)):
            return "decompose"
        return "run"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        plan = self._plans.get(func) or self._plans.setdefault(func, self._plan(func))
        if plan == "pass":
            return func(*args, **kwargs)
        if plan == "decompose":
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        if self.annotate:
            with torch.profiler.record_function(f"{LABEL}{len(self.calls)}"):
                out = func(*args, **kwargs)
        else:
            out = func(*args, **kwargs)
        try:
            self.calls.append(self._count(func, args, kwargs, out))
        except Exception:  # noqa: BLE001 - an op the counter cannot read still ran; it counts as moving nothing
            self.calls.append(OpKind(func._overloadpacket.__name__, "other", calls=1.0))
        return out

    def _count(self, func, args, kwargs, out) -> OpKind:
        packet = func._overloadpacket
        name = packet.__name__
        flops = 0.0
        if packet in self.registry:
            flops = float(self.registry[packet](*args, **kwargs, out_val=out))
        inputs = _tensors((args, kwargs))
        outputs = _tensors(out)
        math_class = next((CLASSES.get(t.dtype, "other") for t in inputs if t.is_floating_point()), "other")
        kind = OpKind(name, math_class, calls=1.0, flops=flops)
        if name in EMBEDDING_LOOKUPS and len(args) > 1 and getattr(args[0], "ndim", 0) == 2:
            table, indices = args[0], args[1]  # a lookup reads the rows it names, not the table
            kind.bytes += indices.numel() * table.shape[1] * table.element_size()
            inputs = inputs[1:]
        for t in inputs:  # reads: a hit where the cache still holds the tensor
            size = _nbytes(t)
            distance = self._touch(t, size)
            kind.bytes += size
            for i, mb in enumerate(REUSE_MB):
                if distance is not None and distance + size <= mb * 1e6:
                    kind.hits[i] += size
        for t in outputs:
            size = _nbytes(t)
            self._touch(t, size)
            kind.bytes += size
        return kind

    def _touch(self, t: torch.Tensor, size: int) -> float | None:
        """Mark `t` touched now; the bytes of distinct tensors touched since it last was (None: never, or more
        than the largest cache counted)."""
        key = _storage_key(t)
        if key is None:
            return None
        distance, found = 0.0, False
        if key in self._recent:
            for other in reversed(self._recent):
                if other == key:
                    found = True
                    break
                distance += self._recent[other]
                if distance > REUSE_MB[-1] * 1e6:
                    break
            self._recent.move_to_end(key)
        self._recent[key] = size
        return distance if found else None


def _tensors(value) -> list[torch.Tensor]:
    out = []
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            out += _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            out += _tensors(v)
    return out


def _nbytes(t: torch.Tensor) -> int:
    if t.is_sparse:
        return t._values().numel() * t.element_size() + t._indices().numel() * 8
    return t.numel() * t.element_size()


def _storage_key(t: torch.Tensor):
    try:
        return t.untyped_storage()._cdata
    except Exception:  # noqa: BLE001 - a sparse or wrapper tensor without one storage: never a hit
        return None


def count_ops(step, steps: int = 1) -> list[OpKind]:
    """Run `step` `steps` times under the recorder: the compact table of what one step's ops compute and move
    (no times). Counts what flops.count_flops counts, op by op."""
    recorder = OpRecorder()
    with recorder:
        for _ in range(steps):
            step()
    return table(recorder.calls, steps=steps)
