"""float8 training: a transformer's linear layers swapped for torchao's Float8Linear, whose matmuls run in
float8 e4m3 with dynamic scales (the recipe: one per tensor, or one per row), as torchtitan trains. The
rest of the step runs as amp-bf16 (autocast, or FSDP's bf16 MixedPrecisionPolicy). The conversion comes
before tensor parallel and FSDP wrap the model, and torch.compile after (an fp8 precision compiles unless
compile off is asked for: an eager row says why it is slow, eager_note).
"""
from __future__ import annotations

import torch

from bench_core.workload.precision import Precision, resolve_precision

# float8 matmuls (torch._scaled_mm) need both dimensions of a weight divisible by 16.
FLOAT8_MULTIPLE = 16


def convert(model: torch.nn.Module, precision: Precision) -> dict:
    """Convert in place -> row facts; nothing for other precisions. The output layer stays in bf16, as
    torchtitan leaves it (its logits feed the loss directly)."""
    if not precision.float8_recipe:
        return {}
    # Lazy: torchao is an optional dependency, imported only when an fp8 precision runs (on a GPU that
    # capability.py found able to run it).
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    converted: list[str] = []

    def eligible(module: torch.nn.Module, name: str) -> bool:
        ok = isinstance(module, torch.nn.Linear) and module is not output and \
            module.in_features % FLOAT8_MULTIPLE == 0 and module.out_features % FLOAT8_MULTIPLE == 0
        if ok:
            converted.append(name)
        return ok
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(precision.float8_recipe),
                               module_filter_fn=eligible)
    if not converted:
        raise ValueError(f"{precision.name}: no linear layer with both dimensions divisible by {FLOAT8_MULTIPLE}")
    return {"float8_linears": len(converted)}


def eager_note(cfg, ops_per_step: int | None, twin_ops_per_step: int | None) -> dict:
    """{'precision_note': why it is slow} for a float8 row run eager, with its ops a step against its
    amp-bf16 twin's (the output check's reference, counted there); {} for any other row. Eager, every
    float8 linear casts, reduces and scales its inputs and gradients in kernels of their own, each
    launched from the host: llama-1b on an H200 ran 9,971 ops a step against amp-bf16's 2,915, at 0.35x
    its speed, and compiled 1.37x."""
    if not resolve_precision(cfg.precision).float8_recipe or cfg.compile != "off":
        return {}
    if ops_per_step and twin_ops_per_step:
        ops = (f"{ops_per_step:,} ops a step against {twin_ops_per_step:,} for the same model in amp-bf16 eager "
               f"({ops_per_step / twin_ops_per_step:.1f}x)")
    else:
        ops = f"{ops_per_step:,} ops a step" if ops_per_step else "its ops a step were not counted"
    return {"precision_note": f"{cfg.precision} ran eager (compile off was asked for): {ops}, float8's casts, amax "
                              "reductions and scales each a kernel of its own. float8 is meant to be compiled "
                              "(torch.compile fuses them; torchtitan: required for competitive performance): "
                              f"{cfg.precision} compiles by default"}
