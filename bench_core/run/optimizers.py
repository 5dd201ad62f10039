"""The optimizer a training step uses, by its configured name: the same one in the timed step
(runner.py) and in the memory estimate's traced step (memory_trace.py).
"""
from __future__ import annotations

import torch


def make_optimizer(name: str, model) -> torch.optim.Optimizer:
    """sgd (momentum 0.9), adam or adamw, over the parameters that train, at lr 1e-4 and torch's defaults
    otherwise."""
    params = [p for p in model.parameters() if p.requires_grad]
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4)
    return torch.optim.SGD(params, lr=1e-4, momentum=0.9)
