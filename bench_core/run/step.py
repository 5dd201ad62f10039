"""The step a configuration times: what a hand-written loop does in one iteration (zero the gradients, forward
under autocast, backward with or without a GradScaler, optimizer step; or a forward, or a generate call), as a
closure with the list its last output is kept in. The runner makes one eager and, with compile, one compiled;
the output check makes its reference and variant sides with it too.
"""
from __future__ import annotations

import contextlib

import torch

from bench_core.run.optimizers import make_optimizer
from bench_core.workload.precision import Precision


def make_step(cfg, model, workload, precision: Precision, device, mode: str | None = None):
    """The step closure: exactly what a hand-written loop would do, nothing more. A step takes
    the window's `mark` (timed_window passes it); only generate uses it, after each new token.
    `mode` (default cfg.mode): the output check's forward pass of a training configuration."""
    mode = mode or cfg.mode
    last: list = [None]
    autocast_dtype = getattr(torch, precision.autocast_dtype) if precision.autocast_dtype else None

    def autocast():
        if autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=autocast_dtype)

    if mode == "generate":
        generate = workload.generate_call

        def generate_step(mark=None):
            with torch.inference_mode(), autocast():
                last[0] = generate(model, mark)
        return generate_step, last

    if mode == "infer":
        call = workload.infer_call

        def infer_step(mark=None):
            with torch.inference_mode(), autocast():
                last[0] = call(model)
        return infer_step, last

    optimizer = workload.make_optimizer(model) if workload.make_optimizer else make_optimizer(cfg.optimizer, model)
    scaler = torch.amp.GradScaler(device.type) if precision.grad_scaler else None
    call, loss_of = workload.train_call, workload.loss

    if scaler is None:
        def train_step(mark=None):
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                loss = loss_of(call(model))
            loss.backward()
            optimizer.step()
            last[0] = loss
        return train_step, last

    def scaled_train_step(mark=None):
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_of(call(model))
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        last[0] = loss
    return scaled_train_step, last
