"""What a task means for a benchmark: its synthetic batch (made once, on the device), its
loss in training and its forward pass in inference."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

NUM_CLASSES = 1000
DETECTION_CLASSES = 91
BOXES_PER_IMAGE = 4


@dataclass
class Workload:
    inputs: Any                            # what the model is called with
    loss: Callable[[Any], torch.Tensor]    # model output -> scalar loss (training)
    train_call: Callable[[torch.nn.Module], Any]
    infer_call: Callable[[torch.nn.Module], Any]


def _rand(shape, device, dtype, generator, memory_format=None):
    # randn on the device; generator keeps it reproducible per seed.
    t = torch.randn(shape, device=device, dtype=torch.float32, generator=generator).to(dtype)
    return t.contiguous(memory_format=memory_format) if memory_format else t


def make_workload(task: str, cfg, device: torch.device, dtype: torch.dtype, rank: int = 0) -> Workload:
    # Each rank sees its own samples, as in real data-parallel training.
    generator = torch.Generator(device=device).manual_seed(cfg.seed + rank)
    b, w, h = cfg.batch_size, cfg.width, cfg.height
    fmt = torch.channels_last if cfg.channels_last else None

    if task == "classification":
        x = _rand((b, 3, h, w), device, dtype, generator, fmt)
        y = torch.randint(0, NUM_CLASSES, (b,), device=device, generator=generator)
        return Workload(x, lambda out: F.cross_entropy(out.float(), y),
                        lambda m: m(x), lambda m: m(x))

    if task == "segmentation":
        x = _rand((b, 3, h, w), device, dtype, generator, fmt)
        target = torch.rand((b, 1, h, w), device=device, generator=generator)
        return Workload(x, lambda out: F.binary_cross_entropy_with_logits(out.float(), target),
                        lambda m: m(x), lambda m: m(x))

    if task == "volumetric":
        x = _rand((b, 1, cfg.depth, h, w), device, dtype, generator)
        target = torch.rand((b, 1, cfg.depth, h, w), device=device, generator=generator)
        return Workload(x, lambda out: F.mse_loss(out.float(), target),
                        lambda m: m(x), lambda m: m(x))

    if task == "detection":
        images = [torch.rand((3, h, w), device=device, generator=generator).to(dtype) for _ in range(b)]
        targets = [_random_boxes(w, h, device, generator) for _ in range(b)]
        return Workload(images, lambda losses: sum(v.float() for v in losses.values()),
                        lambda m: m(images, targets), lambda m: m(images))

    raise ValueError(f"unknown task {task!r}")


def _random_boxes(w: int, h: int, device, generator) -> dict:
    n = BOXES_PER_IMAGE
    xy = torch.rand((n, 2), device=device, generator=generator) * torch.tensor([w * 0.6, h * 0.6], device=device)
    wh = torch.rand((n, 2), device=device, generator=generator) * torch.tensor([w * 0.3, h * 0.3], device=device) + 4
    boxes = torch.cat([xy, xy + wh], dim=1)
    labels = torch.randint(1, DETECTION_CLASSES, (n,), device=device, generator=generator)
    return {"boxes": boxes, "labels": labels}


def first_tensor(output: Any) -> torch.Tensor | None:
    """The first tensor in a model output (tensor, dict or list), for a finiteness check."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        for item in output:
            found = first_tensor(item)
            if found is not None and found.numel():
                return found
    return None
