"""What a GPU reaches, beside its datasheet: the ceilings `bench predict` puts a step against. Per GPU, from
bench_core/data/gpu_achieved.csv (each figure with the source it was read in): the matmul FLOP/s a shape search
measured on the tensor cores and on the fp32 CUDA cores, the bandwidth a streaming copy measured, the L2 cache,
and the SM issue rate (SMs x clock: the fp32 datasheet peak over twice the fp32 lanes of one SM). A GPU that was
not measured takes the median fraction of its datasheet figure that the measured GPUs reach, and says so (the
fraction of the GPUs measured, never of itself).
"""
from __future__ import annotations

import contextlib
import functools
import statistics
from dataclasses import dataclass

from bench_core.predict.specs import Spec, data_rows, specs

TENSOR = ("tf32", "fp16", "bf16", "fp8")   # the classes tensor cores run: one measured fraction serves them all
CLASSES = ("fp32", *TENSOR)


# what a GPU's measured fractions come from
MICROBENCHMARKS = ("matmul_bf16", "matmul_fp16", "matmul_fp32", "copy_gbps")
_LEFT_OUT: list[str] = []   # GPUs whose microbenchmark figures are held out (left_out())


@functools.cache
def _table() -> dict[str, dict[str, tuple[float, str]]]:
    out: dict[str, dict] = {}
    for r in data_rows("gpu_achieved.csv"):
        out.setdefault(r["gpu"], {})[r["quantity"]] = (float(r["value"]), r["source"])
    return out


def measured() -> dict[str, dict[str, tuple[float, str]]]:
    """GPU -> quantity -> (value, source), from gpu_achieved.csv, less the figures held out (left_out())."""
    table = _table()
    return {g: {q: v for q, v in figures.items() if not (g in _LEFT_OUT and q in MICROBENCHMARKS)}
            for g, figures in table.items()} if _LEFT_OUT else table


@contextlib.contextmanager
def left_out(gpu: str):
    """Within: `gpu`'s microbenchmark figures are held out, so it takes the median fraction of the other GPUs, as a
    GPU that was never measured does (how much the fallback costs, on that GPU's pairs)."""
    _LEFT_OUT.append(gpu)
    try:
        yield
    finally:
        _LEFT_OUT.remove(gpu)


def measured_gpus() -> list[str]:
    """The GPUs with a microbenchmark figure of their own."""
    return [g for g, figures in _table().items() if any(q in figures for q in MICROBENCHMARKS)]


def _by_name() -> dict[str, Spec]:
    return {s.gpu: s for s in specs()}


def _fraction(gpu: str, quantity: str, datasheet: str) -> float | None:
    """A GPU's measured `quantity` over its datasheet's `datasheet` figure, or None where either is missing."""
    own, spec = measured().get(gpu, {}), _by_name().get(gpu)
    if quantity in own and spec is not None and spec.number(datasheet):
        return own[quantity][0] / spec.number(datasheet)
    return None


def _matmul_fraction(gpu: str) -> float | None:
    """The measured tensor-core matmul TFLOP/s of a GPU over its datasheet peak of the same class, or None."""
    return next((f for f in (_fraction(gpu, "matmul_bf16", "bf16"), _fraction(gpu, "matmul_fp16", "fp16"))
                 if f is not None), None)


def _fp32_fraction(gpu: str) -> float | None:
    """The measured fp32 (CUDA-core, no TF32) matmul TFLOP/s of a GPU over its fp32 datasheet peak, or None."""
    return _fraction(gpu, "matmul_fp32", "fp32")


def _copy_fraction(gpu: str) -> float | None:
    return _fraction(gpu, "copy_gbps", "memory_gbps")


def median_fractions() -> tuple[float, float]:
    """(matmul, copy): the median fraction of the datasheet that the measured GPUs reach (those held out left out)."""
    return _median_fractions(tuple(_LEFT_OUT))[:2]


def median_fp32_fraction() -> float:
    """The median fraction of the fp32 datasheet peak that the GPUs with an fp32 matmul figure reach (those held
    out left out)."""
    return _median_fractions(tuple(_LEFT_OUT))[2]


@functools.cache
def _median_fractions(left_out_now: tuple[str, ...]) -> tuple[float, float, float]:
    names = list(measured())
    return tuple(statistics.median(f for f in map(fraction, names) if f is not None)
                 for fraction in (_matmul_fraction, _copy_fraction, _fp32_fraction))


@dataclass(frozen=True)
class Ceilings:
    """One GPU's ceilings for the model: peak(cls) FLOP/s, bandwidth B/s, L2 bytes, issue rate (SM x Hz)."""
    gpu: Spec
    achieved: bool = True       # measured figures (else the datasheet's)

    def peak(self, cls: str) -> float:
        """FLOP/s of a math class: the datasheet peak times the measured matmul fraction, the tensor cores' for a
        class they run, the fp32 CUDA cores' for fp32 (and for a class the GPU has no tensor cores for, which runs
        through fp32 math)."""
        tflops, _ = self.gpu.peak(cls)
        if not self.achieved:
            return tflops * 1e12
        if cls in TENSOR and self.gpu.has_tensor(cls):
            return tflops * 1e12 * self.matmul_fraction()[0]
        return tflops * 1e12 * self.fp32_fraction()[0]

    def fp32_fraction(self) -> tuple[float, str]:
        own = _fp32_fraction(self.gpu.gpu)
        if own is not None:
            return own, "measured"
        return median_fp32_fraction(), "the measured GPUs' median"

    def matmul_fraction(self) -> tuple[float, str]:
        own = _matmul_fraction(self.gpu.gpu)
        if own is not None:
            return own, "measured"
        return median_fractions()[0], "the measured GPUs' median"

    def bandwidth(self) -> float:
        datasheet = self.gpu.number("memory_gbps") * 1e9
        if not self.achieved:
            return datasheet
        return datasheet * self.copy_fraction()[0]

    def copy_fraction(self) -> tuple[float, str]:
        own = _copy_fraction(self.gpu.gpu)
        if own is not None:
            return own, "measured"
        return median_fractions()[1], "the measured GPUs' median"

    def l2_mb(self) -> float | None:
        found = measured().get(self.gpu.gpu, {}).get("l2_mb")
        return found[0] if found else None

    def issue_rate(self) -> float | None:
        """SMs x clock (Hz): the fp32 datasheet peak over twice the fp32 lanes of one SM; None where not known."""
        lanes = measured().get(self.gpu.gpu, {}).get("fp32_lanes")
        fp32 = self.gpu.number("fp32")
        return fp32 * 1e12 / (2 * lanes[0]) if lanes and fp32 else None

    def sms(self) -> float | None:
        """Streaming multiprocessors (gpu_achieved.csv's sms); None where not known."""
        found = measured().get(self.gpu.gpu, {}).get("sms")
        return found[0] if found else None

    def said(self) -> str:
        """The ceilings in words, with where each came from."""
        mm, mm_how = self.matmul_fraction()
        bw, bw_how = self.copy_fraction()
        f32, f32_how = self.fp32_fraction()
        return (f"{self.gpu.gpu}: matmul {mm:.0%} of the datasheet ({mm_how}), fp32 matmul {f32:.0%} ({f32_how}), "
                f"copy {bw:.0%} of {self.gpu.number('memory_gbps'):g} GB/s ({bw_how})")


def op_math(op_class: str, setup_math: str) -> str:
    """The class an op computes in on a GPU running `setup_math`: its inputs' dtype (measure/op_counts.py), an fp32
    matmul as TF32 where the step runs TF32."""
    cls = op_class if op_class in CLASSES else "fp32"
    return "tf32" if cls == "fp32" and setup_math == "tf32" else cls


def op_roofline_s(kind, ceilings: Ceilings, setup_math: str, cache_mb: float | None) -> tuple[float, float]:
    """(compute seconds, memory seconds) of one kind of op (measure/op_table.OpKind) at a GPU's ceilings: its FLOPs
    over the peak of its class, the bytes the cache does not hold over the bandwidth."""
    compute = kind.flops / ceilings.peak(op_math(kind.math, setup_math)) if kind.flops else 0.0
    return compute, kind.memory_bytes(cache_mb) / ceilings.bandwidth()
