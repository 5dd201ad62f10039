"""float8 training: a transformer's linear layers swapped for torchao's Float8Linear, whose matmuls run in
float8 e4m3 with dynamic scales (the recipe: one per tensor, or one per row), as torchtitan trains. The
rest of the step runs as amp-bf16 (autocast, or FSDP's bf16 MixedPrecisionPolicy). The conversion comes
before tensor parallel and FSDP wrap the model.
"""
from __future__ import annotations

import torch

from bench_core.workload.precision import Precision

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
