"""The machine as the operating system describes it, read without torch: the CPU's model name and ISA flags
(and the CPU kind BENCH_CPU_AS makes the code answer for), and the memory a process can still take.
"""
from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench_core.errors import ConfigError

# ISA flags (as /proc/cpuinfo spells them) that make a dtype's matmul/conv native.
X86_NATIVE = {"bfloat16": ("avx512_bf16", "amx_bf16"), "float16": ("avx512_fp16", "amx_fp16")}
ARM_NATIVE = {"bfloat16": ("bf16",), "float16": ("fphp", "asimdhp")}
# Environment variables that change which kernels torch dispatches to (recorded with the answer).
DISPATCH_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
# Says which CPU kind the answers are for, whatever this CPU is: the kinds the project meets (CPU_KINDS), so
# that what depends on native or emulated precisions (labels, the default sweep's plan, the report's words) can
# be checked for each kind on any machine (the tests do). It changes what the code reads, not the kernels torch
# runs: rows made under it say so (cpu_dispatch_env) and are no measure of that kind's speed.
CPU_KIND_VARIABLE = "BENCH_CPU_AS"


# (vendor, family, first model, last model) -> microarchitecture, for CPUs whose model name says no more than
# "AMD EPYC" (cloud VMs): from AMD's and Intel's family/model numbers (the server parts only).
MICROARCHITECTURES = [("AuthenticAMD", 0x17, 0x00, 0x0F, "Zen"), ("AuthenticAMD", 0x17, 0x30, 0x3F, "Zen 2"),
                      ("AuthenticAMD", 0x19, 0x00, 0x0F, "Zen 3"), ("AuthenticAMD", 0x19, 0x10, 0x1F, "Zen 4"),
                      ("AuthenticAMD", 0x19, 0xA0, 0xAF, "Zen 4c"), ("AuthenticAMD", 0x1A, 0x00, 0xFF, "Zen 5"),
                      ("GenuineIntel", 6, 0x55, 0x55, "Skylake-SP/Cascade Lake"), ("GenuineIntel", 6, 0x6A, 0x6A, "Ice Lake-SP"),
                      ("GenuineIntel", 6, 0x8F, 0x8F, "Sapphire Rapids"), ("GenuineIntel", 6, 0xCF, 0xCF, "Emerald Rapids"),
                      ("GenuineIntel", 6, 0xAD, 0xAD, "Granite Rapids")]


@functools.cache
def cpu_model() -> str:
    try:
        return cpu_model_from(Path("/proc/cpuinfo").read_text()) or platform.processor() or platform.machine()
    except OSError:
        return platform.processor() or platform.machine()


def cpu_model_from(cpuinfo: str) -> str:
    """The CPU's model name from /proc/cpuinfo; a name without a model number (a VM's "AMD EPYC") gets its
    microarchitecture ("AMD EPYC (Zen 4)"), or its family and model numbers where that is not known here."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if not key.strip():
            break  # the first processor's block only
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name", "")
    if not name or any(c.isdigit() for c in name) or not fields.get("cpu family", "").isdigit() \
            or not fields.get("model", "").isdigit():
        return name
    family, model = int(fields["cpu family"]), int(fields["model"])
    arch = next((a for vendor, f, lo, hi, a in MICROARCHITECTURES
                 if vendor == fields.get("vendor_id") and f == family and lo <= model <= hi), None)
    return f"{name} ({arch})" if arch else f"{name} (family {family} model {model})"


@dataclass(frozen=True)
class CpuFacts:
    """What the CPU has (ISA flags) and what torch makes of it (dispatch level, oneDNN checks)."""
    arch: str
    flags: frozenset[str]        # empty when they cannot be read (then torch's answer decides)
    torch_capability: str        # torch.backends.cpu.get_cpu_capability(): AVX512, AVX2, ...
    onednn_bf16: bool
    onednn_fp16: bool
    dispatch_env: tuple[tuple[str, str], ...]

    def describe(self) -> dict:
        """The facts as row/environment columns."""
        return {"cpu_isa_dispatch": self.torch_capability, **cpu_columns(self.flags, self.dispatch_env)}


def cpu_columns(flags: frozenset[str], dispatch_env: tuple[tuple[str, str], ...]) -> dict:
    """The CPU's bf16/fp16 ISA flags and the dispatch variables set, as row columns."""
    relevant = sorted(flags & {f for names in (*X86_NATIVE.values(), *ARM_NATIVE.values()) for f in names})
    return {"cpu_dtype_flags": " ".join(relevant) or None,
            "cpu_dispatch_env": " ".join(f"{k}={v}" for k, v in dispatch_env) or None}


def dispatch_env() -> tuple[tuple[str, str], ...]:
    """The dispatch variables set in this process (BENCH_CPU_AS among them where it is set)."""
    names = (*DISPATCH_VARIABLES, CPU_KIND_VARIABLE) if cpu_kind_set() else DISPATCH_VARIABLES
    return tuple((k, os.environ[k]) for k in names if os.environ.get(k))


# kind -> (ISA flags as /proc/cpuinfo spells them, torch's dispatch level, oneDNN's bf16 and fp16 checks), as
# each kind answers (the rules tests/test_capability.py checks): Intel with AMX (Sapphire Rapids and later);
# AMD Zen 4 / Zen 5 (AVX-512 with AVX512_BF16); AVX-512 without bf16 (Ice Lake, Skylake-SP); AVX2 only (AMD
# Zen 1-3, older Intel).
CPU_KINDS = {
    "amx": (frozenset("avx2 fma f16c avx512f avx512bw avx512vl avx512_bf16 avx512_fp16 amx_bf16 amx_fp16 amx_tile"
                      .split()), "AVX512", True, True),
    "avx512_bf16": (frozenset("avx2 fma f16c avx512f avx512bw avx512vl avx512_bf16".split()), "AVX512", True, False),
    "avx512": (frozenset("avx2 fma f16c avx512f avx512bw avx512vl".split()), "AVX512", True, False),
    "avx2": (frozenset("avx2 fma f16c".split()), "AVX2", False, False),
}


def cpu_kind_set() -> str | None:
    """The CPU kind BENCH_CPU_AS names (CPU_KINDS), or None where it is unset; ConfigError for a kind not
    in the table."""
    kind = os.environ.get(CPU_KIND_VARIABLE, "").strip().lower()
    if not kind:
        return None
    if kind not in CPU_KINDS:
        raise ConfigError(CPU_KIND_VARIABLE, f"unknown CPU kind {kind!r}; allowed: {', '.join(CPU_KINDS)}")
    return kind


def kind_facts() -> CpuFacts | None:
    """The facts of the CPU kind BENCH_CPU_AS names, as that kind (x86) would answer, whatever this CPU has;
    None where it is unset (then torch's own answers decide: capability.cpu_facts)."""
    kind = cpu_kind_set()
    if kind is None:
        return None
    flags, level, bf16, fp16 = CPU_KINDS[kind]
    return CpuFacts("x86_64", flags, level, bf16, fp16, dispatch_env())


def cpu_flags() -> frozenset[str]:
    """The ISA flags of the first CPU in /proc/cpuinfo (x86 'flags', Arm 'Features')."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


# -- memory ------------------------------------------------------------------------------------

def cgroup_free_bytes(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes left under this process's cgroup memory limit (v2, or v1's memory controller: a container's
    --memory, a SLURM job's), as `docker stats` counts: limit - (usage - inactive file cache). None: no limit."""
    try:
        entries = [line.split(":", 2) for line in proc_cgroup.read_text().splitlines()]
    except OSError:
        return None
    for _, controllers, path in (e for e in entries if len(e) == 3 and (e[1] == "" or "memory" in e[1].split(","))):
        v2 = controllers == ""
        base = root / ("" if v2 else "memory") / path.lstrip("/")
        try:
            limit = (base / ("memory.max" if v2 else "memory.limit_in_bytes")).read_text().strip()
            used = int((base / ("memory.current" if v2 else "memory.usage_in_bytes")).read_text())
            stat = dict(e.split()[:2] for e in (base / "memory.stat").read_text().splitlines() if " " in e)
            if limit != "max" and int(limit) < 2**60:  # v1 writes "no limit" as a page-rounded 2^63
                return max(int(limit) - used + int(stat.get("inactive_file" if v2 else "total_inactive_file", 0)), 0)
        except (OSError, ValueError):
            continue
    return None


def available_memory_bytes() -> int:
    """Bytes this process can take now: MemAvailable, or what is left under a cgroup's limit where that is less."""
    free, limited = psutil.virtual_memory().available, cgroup_free_bytes()
    return free if limited is None else min(free, limited)


# The process's resident high-water mark, the CPU's counterpart of torch.cuda.reset_peak_memory_stats: on
# Linux writing "5" to clear_refs resets VmHWM to the current RSS (since 4.0), so a window's peak is its own,
# not that of what ran before it in the process (a reference model, the CPU peak's matrices: 200 MB on a fast
# CPU, which grows them further). Elsewhere, or where the file cannot be written, the lifetime peak stands.
_CLEAR_REFS, _STATUS = Path("/proc/self/clear_refs"), Path("/proc/self/status")


def reset_rss_peak() -> bool:
    """Reset this process's RSS high-water mark to its RSS now; False where it cannot be (the peak is
    then the lifetime one)."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def own_status(field: str) -> list[str]:
    """The values of one field of /proc/self/status ('VmHWM' -> ['81234', 'kB']); [] where there is none."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return line.split()[1:]
    except OSError:
        pass
    return []


def rss_peak_bytes() -> int | None:
    """The RSS high-water mark since the last reset_rss_peak (else since the process began); None where
    /proc does not say it."""
    value = own_status("VmHWM")
    return int(value[0]) * 1024 if value and value[0].isdigit() else None  # kB
