"""Precisions: each a distinct, recorded name with exactly one meaning.

`fp16`/`bf16` cast the model and data (no master weights); `amp-*` keep fp32 weights and
run eligible ops under autocast (`amp-fp16` trains with a GradScaler). `fp32` is strict
IEEE fp32 (TF32 off); `tf32` is its own precision. `fp8-*` train with torchao's float8 linear
layers (their matmuls in float8 e4m3 with the recipe's scales), the rest as amp-bf16; they compile
by default (torch.compile fuses float8's casts and scales: eager, each is a kernel of its own), and
their outputs are checked against amp-bf16, the precision of everything float8 leaves alone.
"""
from __future__ import annotations

from dataclasses import dataclass

from bench_core.errors import ConfigError


class EmulatedPrecisionWarning(UserWarning):
    """A precision this device only emulates was asked for: it runs, slowly, and is marked."""


@dataclass(frozen=True)
class Precision:
    name: str
    description: str
    cast_dtype: str | None = None      # pure cast of weights and inputs
    autocast_dtype: str | None = None  # torch.autocast dtype
    grad_scaler: bool = False          # GradScaler in training
    tf32: bool = False                 # allow TF32 tensor cores for fp32 matmul/conv
    float8_recipe: str | None = None   # torchao float8 training recipe of the linear layers (tensorwise, rowwise)
    # The torch.compile mode a configuration that names none runs with. float8 is meant to be compiled: eager,
    # its casts, amax reductions and scales are separate kernels (llama-1b on an H200: 9,971 ops a step against
    # amp-bf16's 2,915, 0.35x its speed; compiled 1.37x); torchtitan calls compile "required for competitive
    # performance" with float8.
    default_compile: str = "off"
    # What the output check (run/reference.py) compares this precision against: strict fp32, or for float8
    # amp-bf16, the precision of everything but the linear layers' matmuls, so the check sees what float8 changes.
    check_against: str = "fp32"

    @property
    def compute_dtype(self) -> str:
        return self.cast_dtype or self.autocast_dtype or "float32"


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("fp32", "strict IEEE float32 (TF32 off)"),
    Precision("tf32", "float32 weights, TF32 tensor-core matmul/conv (CUDA, Ampere+)", tf32=True),
    Precision("fp16", "pure float16 cast of weights and inputs, no master weights", cast_dtype="float16"),
    Precision("bf16", "pure bfloat16 cast of weights and inputs, no master weights", cast_dtype="bfloat16"),
    Precision("amp-fp16", "fp32 weights, autocast float16, GradScaler in training",
              autocast_dtype="float16", grad_scaler=True),
    Precision("amp-bf16", "fp32 weights, autocast bfloat16", autocast_dtype="bfloat16"),
    Precision("fp8-tensorwise", "training: linear layers' matmuls in float8 e4m3 (torchao, one dynamic scale per "
                                "tensor), the rest amp-bf16; CUDA compute capability 8.9+",
              autocast_dtype="bfloat16", float8_recipe="tensorwise", default_compile="default",
              check_against="amp-bf16"),
    Precision("fp8-rowwise", "training: linear layers' matmuls in float8 e4m3 (torchao, one dynamic scale per row: "
                             "more accurate, slower than tensorwise), the rest amp-bf16; CUDA compute capability 8.9+",
              autocast_dtype="bfloat16", float8_recipe="rowwise", default_compile="default",
              check_against="amp-bf16"),
)}

# Spellings of the seed projects. "16" is refused on purpose: tensorpix used it for AMP in
# training and for a pure cast in inference.
ALIASES = {
    "32": "fp32", "single": "fp32", "float32": "fp32", "32-true": "fp32",
    "half": "fp16", "float16": "fp16", "16-true": "fp16",
    "bfloat16": "bf16", "bf16-true": "bf16",
    "16-mixed": "amp-fp16", "mixed": "amp-fp16", "amp": "amp-fp16",
    "bf16-mixed": "amp-bf16",
}


def resolve_precision(name: str) -> Precision:
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in PRECISIONS:
        hint = " ('16' is ambiguous: say fp16 for a pure cast or amp-fp16 for autocast)" if key == "16" else ""
        allowed = ", ".join(PRECISIONS) + " (aliases: " + ", ".join(ALIASES) + ")"
        raise ConfigError("precision", f"unknown precision {name!r}{hint}; allowed: {allowed}")
    return PRECISIONS[key]
