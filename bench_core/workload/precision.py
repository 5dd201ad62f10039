"""Precisions: each a distinct, recorded name with exactly one meaning.

`fp16`/`bf16` cast the model and data (no master weights); `amp-*` keep fp32 weights and
run eligible ops under autocast (`amp-fp16` trains with a GradScaler). `fp32` is strict
IEEE fp32 (TF32 off); `tf32` is its own precision. `fp8-*` train with torchao's float8 linear
layers (their matmuls in float8 e4m3 with the recipe's scales), the rest as amp-bf16.
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
              autocast_dtype="bfloat16", float8_recipe="tensorwise"),
    Precision("fp8-rowwise", "training: linear layers' matmuls in float8 e4m3 (torchao, one dynamic scale per row: "
                             "more accurate, slower than tensorwise), the rest amp-bf16; CUDA compute capability 8.9+",
              autocast_dtype="bfloat16", float8_recipe="rowwise"),
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
