"""What a device runs natively, per precision: detected once, printed by `bench sysinfo`, recorded
in every row (`precision_support`, `precision_support_reason`).

- native: the hardware has instructions or units for the dtype, and torch uses them.
- emulated: torch runs it, through conversions or generic code: slow, and marked wherever shown.
- unsupported: torch cannot run it on this device; a run says so and measures nothing.

CPU: torch's own answer (its dispatch level, oneDNN's bf16/fp16 checks), backed by the ISA flags
(x86: AVX512_BF16, AMX-BF16, AVX512_FP16, AMX-FP16; Arm: BF16, FP16 arithmetic). Both must hold:
oneDNN "supports" bf16 on any AVX-512 CPU by converting to fp32, and ONEDNN_MAX_CPU_ISA or
ATEN_CPU_CAPABILITY can keep torch off instructions the CPU has. CUDA: compute capability
(fp16 tensor cores from 7.0, tf32 and bf16 from 8.0; bf16 GEMMs fail below 7.0).
"""
from __future__ import annotations

import functools
import importlib.util
import platform
from dataclasses import dataclass

import torch

from bench_core.host import (  # noqa: F401 - re-exported: the CPU's facts read without torch live in host.py
    ARM_NATIVE,
    CPU_KIND_VARIABLE,
    CPU_KINDS,
    DISPATCH_VARIABLES,
    MICROARCHITECTURES,
    X86_NATIVE,
    CpuFacts,
    cpu_flags,
    cpu_kind_set,
    cpu_model,
    cpu_model_from,
    dispatch_env,
    kind_facts,
)
from bench_core.workload.precision import PRECISIONS, Precision, resolve_precision

NATIVE, EMULATED, UNSUPPORTED = "native", "emulated", "unsupported"
@dataclass(frozen=True)
class Support:
    level: str    # native | emulated | unsupported
    reason: str   # one sentence a reader can act on

    @property
    def runs(self) -> bool:
        return self.level != UNSUPPORTED


# -- CPU ----------------------------------------------------------------------------------------

@functools.cache
def cpu_facts() -> CpuFacts:
    kind = kind_facts()
    if kind is not None:  # answers as that kind would (x86), whatever this CPU has
        return kind
    arch = platform.machine().lower()
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "unknown")()
    mkldnn = torch.ops.mkldnn
    bf16 = bool(getattr(mkldnn, "_is_mkldnn_bf16_supported", lambda: False)())
    fp16 = bool(getattr(mkldnn, "_is_mkldnn_fp16_supported", lambda: False)())
    return CpuFacts(arch, cpu_flags(), str(capability), bf16, fp16, dispatch_env())


def cpu_support(precision: Precision, facts: CpuFacts | None = None) -> Support:
    facts = facts or cpu_facts()
    found = _cpu_rules(precision, facts)
    kind = dict(facts.dispatch_env).get(CPU_KIND_VARIABLE)
    if kind and found.level != UNSUPPORTED:
        return Support(found.level, f"{found.reason} (answered for the {kind} CPU kind that {CPU_KIND_VARIABLE}="
                                    f"{kind} sets; the kernels that run are this CPU's)")
    return found


def _cpu_rules(precision: Precision, facts: CpuFacts) -> Support:
    if precision.float8_recipe:
        return Support(UNSUPPORTED, f"{FLOAT8_NEEDS}; no CPU has float8 matrix units (torch's CPU float8 matmul is "
                                    "a reference implementation: it would time an emulation)")
    if precision.tf32:
        return Support(UNSUPPORTED, "tf32 is a CUDA tensor-core mode; on cpu use fp32")
    dtype = precision.compute_dtype
    if dtype == "float32":
        return Support(NATIVE, f"fp32 runs natively ({facts.torch_capability} kernels)")
    short = {"bfloat16": "bf16", "float16": "fp16"}[dtype]
    table = ARM_NATIVE if facts.arch in ("aarch64", "arm64") else X86_NATIVE
    wanted = table[dtype]
    have = [f for f in wanted if f in facts.flags]
    onednn = facts.onednn_bf16 if dtype == "bfloat16" else facts.onednn_fp16
    spelled = " or ".join(f.upper().replace("AMX_", "AMX-") for f in wanted)
    if facts.flags and not have:
        return Support(EMULATED, f"this CPU has no {spelled}: {short} is emulated (converted to fp32 "
                                 f"around each kernel), slower than fp32")
    if not onednn:
        env = "; ".join(f"{k}={v}" for k, v in facts.dispatch_env)
        why = f" ({env})" if env else ""
        has = f"this CPU has {', '.join(h.upper().replace('AMX_', 'AMX-') for h in have)} but " if have else ""
        return Support(EMULATED, f"{has}torch's oneDNN does not use {short} here{why}, dispatch "
                                 f"{facts.torch_capability}: {short} is emulated, slower than fp32")
    using = ", ".join(h.upper().replace("AMX_", "AMX-") for h in have) or "oneDNN's native kernels"
    return Support(NATIVE, f"{short} runs natively ({using}; oneDNN {short} kernels)")


# -- CUDA ---------------------------------------------------------------------------------------

# bf16 matrix multiplies below 8.0. ATen hands bf16 GEMMs to cuBLAS (cublasGemmEx /
# cublasGemmStridedBatchedEx with CUDA_R_16BF, aten/src/ATen/cuda/CUDABlas.cpp) without checking
# the device, and PyTorch's own tests gate them at SM53OrLater; but cuBLAS refuses them on Pascal:
# CUBLAS_STATUS_NOT_SUPPORTED on a P100, 6.0 (pytorch issue 57773, open), while a T4 (7.5) runs them
# in PyTorch's CI and a V100 (7.0) with cuBLAS 12.3+ (pytorch PR 115666). From 7.0 bf16 runs,
# through fp32 math (emulated); below it every model with a linear layer fails, so it is refused.
BF16_GEMM_MIN_CAPABILITY = (7, 0)
# float8 matmuls (torch._scaled_mm, which torchao's float8 training calls) run on float8 tensor cores: Ada
# (8.9), Hopper (9.0), Blackwell (10.0, 12.0). torchao is an optional dependency.
FLOAT8_MIN_CAPABILITY = (8, 9)
FLOAT8_NEEDS = "float8 training (torchao) needs an NVIDIA GPU of compute capability 8.9+ (Ada, Hopper, Blackwell)"


def cuda_support(precision: Precision, capability: tuple[int, int], name: str) -> Support:
    """By compute capability: fp16 tensor cores from 7.0, tf32 and bf16 from 8.0. From 7.0 to 8.0
    torch runs bf16 through fp32 math (emulated); below 7.0 cuBLAS refuses bf16 GEMMs."""
    major, minor = capability
    cc = f"compute capability {major}.{minor}"
    dtype = precision.compute_dtype
    if precision.float8_recipe:
        if (major, minor) < FLOAT8_MIN_CAPABILITY:
            return Support(UNSUPPORTED, f"{FLOAT8_NEEDS}; {name} is {major}.{minor}")
        if importlib.util.find_spec("torchao") is None:
            return Support(UNSUPPORTED, "float8 training needs torchao: pip install torchao (without changing torch)")
        return Support(NATIVE, f"float8 e4m3 tensor cores ({cc}), torchao {precision.float8_recipe} scaling")
    if precision.tf32:
        if major < 8:
            return Support(UNSUPPORTED, f"tf32 needs compute capability 8.0+; {name} is {major}.{minor}")
        return Support(NATIVE, f"tf32 tensor cores ({cc})")
    if dtype == "float32":
        return Support(NATIVE, f"fp32 CUDA cores ({cc})")
    if dtype == "bfloat16":
        if major >= 8:
            return Support(NATIVE, f"bf16 tensor cores ({cc})")
        if (major, minor) >= BF16_GEMM_MIN_CAPABILITY:
            return Support(EMULATED, f"{name} ({cc}) has no bf16 tensor cores (8.0+): bf16 is emulated")
        return Support(UNSUPPORTED, f"bf16 matrix multiplies fail on {name} ({cc}): cuBLAS returns "
                                    f"CUBLAS_STATUS_NOT_SUPPORTED for bf16 GEMMs below compute capability 7.0 "
                                    f"(pytorch issue 57773); use fp32 or fp16 here")
    if major >= 7:
        return Support(NATIVE, f"fp16 tensor cores ({cc})")
    return Support(EMULATED, f"{name} ({cc}) has no fp16 tensor cores (7.0+): fp16 runs on CUDA cores")


# The ISA and oneDNN's checks say what torch *can* use; some kernels still fall back to generic
# code (torch 2.14 on a Sapphire Rapids Xeon: fp16 convolution backward ~90x slower than fp32,
# forward as fast). So a reduced precision the checks call native is also timed on a small conv +
# linear block against fp32, in the mode asked for: SLOW_FACTOR slower or more is emulated.
SLOW_FACTOR = 3.0


@functools.cache
def cpu_slowdown(precision_name: str, mode: str) -> float:
    """How many times more CPU work than fp32 a small conv + linear block takes in `precision_name`
    on this CPU: forward for infer, forward and backward for train (best of 5 after 3 warm-up
    steps, about 0.2 s; twice as long when the first pass is not conclusive).

    Whether a kernel is native is a property of the CPU and of torch, not of the moment, so the
    answer must not move with the machine's load. It did when this timed wall seconds with torch's
    threads: beside two busy processes on a 2-core EPYC, one thread waits at every parallel
    region's barrier for the other to be scheduled again, and the same path measured 0.04x to
    162x fp32, so `bench sysinfo` said "bf16 native" beside "amp-bf16 emulated, 20x" and the CPU
    suite's plan changed from run to run. So the block runs on one thread (torch.set_num_threads(1):
    every kernel runs in the calling thread, no barrier to wait at) and is timed by that thread's
    CPU time (CLOCK_THREAD_CPUTIME_ID), which does not advance while another process has the
    core. What load can still move (caches, a busy SMT sibling) moves both sides of the ratio and
    by far less than the margin: there, idle and beside two hogs alike, native paths measured 0.3x
    to 1x and generic ones 8x to 14x (fp16 everywhere; bf16 under ATEN_CPU_CAPABILITY=avx2
    ONEDNN_MAX_CPU_ISA=AVX2), on either side of SLOW_FACTOR by 3x or more.

    The first pass in a process pays one-time costs the warm-up steps do not absorb (amp-bf16
    training on an AMD EPYC with AVX512_BF16 measured 0.8x to 3.7x fp32 first, then 0.2x to 0.6x
    every time after), which put the answer on either side of SLOW_FACTOR from one run to the next.
    So the first pass is only believed when it is beyond doubt (SLOW_FACTOR squared: pure fp16
    training there, 14x to 23x); otherwise the second pass answers."""
    import time

    prec = resolve_precision(precision_name)
    torch.manual_seed(0)

    def best_cpu_s(dtype, autocast_dtype) -> float:
        block = torch.nn.Sequential(torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.Flatten(),
                                    torch.nn.Linear(32 * 16 * 16, 256)).to(dtype)
        x = torch.randn(8, 32, 16, 16, dtype=dtype, requires_grad=mode == "train")

        def step():
            with torch.autocast("cpu", dtype=autocast_dtype, enabled=autocast_dtype is not None):
                y = block(x)
            if mode == "train":
                y.float().sum().backward()
        times = []
        with torch.inference_mode(mode != "train"):
            for _ in range(3):  # kernel selection, allocation
                step()
            for _ in range(5):
                start = time.thread_time()
                step()
                times.append(time.thread_time() - start)
        return max(min(times), 1e-9)  # a clock coarser than a step reads 0

    cast = getattr(torch, prec.cast_dtype) if prec.cast_dtype else torch.float32
    autocast = getattr(torch, prec.autocast_dtype) if prec.autocast_dtype else None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        first = best_cpu_s(cast, autocast) / best_cpu_s(torch.float32, None)
        if first >= SLOW_FACTOR ** 2:
            return first
        return best_cpu_s(cast, autocast) / best_cpu_s(torch.float32, None)
    finally:
        torch.set_num_threads(threads)


def _measured_cpu_support(precision: Precision, mode: str) -> Support:
    found = cpu_support(precision)
    if found.level != NATIVE or precision.compute_dtype == "float32" or cpu_kind_set() is not None:
        return found  # (a kind set by BENCH_CPU_AS answers by its rules: this CPU's kernels are not that kind's)
    short = {"bfloat16": "bf16", "float16": "fp16"}[precision.compute_dtype]
    mode = "train" if mode == "train" else "infer"  # generate runs forward passes: infer's kernels
    slow = cpu_slowdown(precision.name, mode)
    if slow < SLOW_FACTOR:
        return found
    other = "infer" if mode == "train" else "train"
    other_slow = cpu_slowdown(precision.name, other)
    also = (f"; in {other} it takes {other_slow:.1f}x the fp32 CPU time (native)" if other_slow < SLOW_FACTOR
            else "")
    return Support(EMULATED, f"torch's checks say {found.reason}, but in {mode} a {short} conv + linear block "
                             f"takes {slow:.0f}x the fp32 CPU time here: some of torch's {short} kernels for it are "
                             f"generic code, so {short} {mode} is emulated{also}")


# -- any device -----------------------------------------------------------------------------------

# What a pure cast trains without, said in every training row's precision_support_reason.
PURE_CAST_TRAINING = {
    "float16": "pure fp16 training: weights, gradients and optimizer state in float16, no fp32 master weights "
               "and no loss scaling (small gradients underflow; amp-fp16 has both)",
    "bfloat16": "pure bf16 training: weights, gradients and optimizer state in bfloat16, no fp32 master weights "
                "(small updates round away; amp-bf16 keeps fp32 weights)",
}


def support(device: torch.device, precision: Precision, mode: str = "train") -> Support:
    """How `device` runs `precision` in `mode` (train, the stricter, by default), and in training
    what a pure cast goes without. Reads device properties only (and times a small block on the
    CPU): creates no CUDA context."""
    found = _device_support(device, precision, mode)
    if mode == "train" and precision.cast_dtype in PURE_CAST_TRAINING and found.runs:
        return Support(found.level, f"{found.reason}; {PURE_CAST_TRAINING[precision.cast_dtype]}")
    return found


def _device_support(device: torch.device, precision: Precision, mode: str) -> Support:
    if device.type == "cuda":
        # Not torch.cuda.is_bf16_supported(): below 8.0 it makes a bf16 tensor to find out, which
        # creates a CUDA context in whatever process asks (launchers, checks); and it says True on
        # a P100, where bf16 GEMMs fail (see BF16_GEMM_MIN_CAPABILITY).
        props = torch.cuda.get_device_properties(device)
        return cuda_support(precision, (props.major, props.minor), props.name)
    if device.type == "mps":
        if precision.tf32 or precision.float8_recipe:
            return Support(UNSUPPORTED, "tf32 is a CUDA tensor-core mode" if precision.tf32 else FLOAT8_NEEDS)
        if precision.compute_dtype == "bfloat16" and not _mps_bf16():
            return Support(UNSUPPORTED, "bfloat16 on mps needs macOS 14 or newer")
        return Support(NATIVE, f"{precision.compute_dtype} on the Apple GPU")
    return _measured_cpu_support(precision, mode)


def _mps_bf16() -> bool:
    check = getattr(torch.backends.mps, "is_macos_or_newer", None)
    return bool(check and check(14, 0))


def capability_table(device: torch.device) -> list[dict]:
    """One line per precision: how `device` runs it in training and why (`bench sysinfo`)."""
    return [{"precision": name, "support": s.level, "reason": s.reason}
            for name, s in ((name, support(device, p)) for name, p in PRECISIONS.items())]


def emulated_warning(precision: Precision, found: Support) -> str:
    return (f"{precision.name} is emulated on this device: {found.reason}. It runs because you "
            f"asked for it; its rows are marked emulated and are not a measure of the hardware's {precision.name}.")
