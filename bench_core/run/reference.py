"""The output check: a variant (a precision other than fp32, torch.compile, channels_last) run
beside its reference (strict fp32, eager, NCHW) on the same weights and inputs, once per
configuration and outside the timed window; the row records how far its outputs strayed and
whether that is within its precision's tolerance (results/fidelity.py states them and why).

Both sides are built here, from the configuration's seed, and freed before the measured model is
built: the measured session's first step, compile time and windows are untouched.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch

from bench_core.config.schema import BenchConfig
from bench_core.results import fidelity
from bench_core.results.rows import error_message
from bench_core.workload.precision import resolve_precision

# (cfg, model, workload, precision, device) -> (step, last): the runner's own step, so the check
# runs exactly what is timed.
MakeStep = Callable
# The check runs at most this many samples a side: a forward in eval mode is the same function of
# each sample at any batch, and the first training step's loss is compared at the same batch on
# both sides. At a measured batch of 1280 (ResNet-50 on an H200) the full-size check built two more
# models of that size and autotuned cuDNN for four new shapes: 98 s of one configuration, first light.
CHECK_BATCH = 16


def reference_config(cfg: BenchConfig) -> BenchConfig | None:
    """The configuration a variant is checked against; None when `cfg` is that reference itself."""
    ref = cfg.replace(precision="fp32", compile="off", channels_last=False)
    return None if ref == cfg else ref


def check_outputs(cfg: BenchConfig, spec, backend, make_step: MakeStep, world_size: int = 1) -> dict:
    """The row columns of the check: output_check (within tolerance | wrong results | not checked:
    why), the reference, the tolerance, output_cosine, output_rel_error and (train) loss_rel_error.
    {} for the reference itself. A check that cannot run says why and never fails the run."""
    ref_cfg = reference_config(cfg)
    if ref_cfg is None:
        return {}
    if isinstance(cfg.batch_size, int) and cfg.batch_size > CHECK_BATCH:
        cfg = cfg.replace(batch_size=CHECK_BATCH)
        ref_cfg = ref_cfg.replace(batch_size=CHECK_BATCH)
    columns = {"output_reference": fidelity.REFERENCE, "output_tolerance": fidelity.tolerance_for(cfg.precision).text()}
    why = _not_checkable(cfg, ref_cfg, spec, backend, world_size)
    if why:
        return {**columns, "output_check": f"{fidelity.NOT_CHECKED}: {why}"}
    try:
        ref_out, ref_losses = _outputs(ref_cfg, spec, backend, make_step)
        backend.release_memory()
        out, losses = _outputs(cfg, spec, backend, make_step)
    except Exception as exc:  # noqa: BLE001 - the check failing is a note, not the run's failure
        kind = "out of memory" if backend.is_oom(exc) else error_message(exc)
        return {**columns, "output_check": f"{fidelity.NOT_CHECKED}: the check failed ({kind})"}
    finally:
        backend.release_memory()
        if cfg.compile != "off":
            # Lazy, as in the runner: dynamo's import is heavy. The measured session compiles from
            # scratch, as a fresh process would.
            import torch._dynamo as dynamo
            dynamo.reset()
    return {**columns, **_compare(cfg, ref_out, out, ref_losses, losses)}


def _not_checkable(cfg: BenchConfig, ref_cfg: BenchConfig, spec, backend, world_size: int) -> str:
    if world_size > 1:
        return "multi-process run (check it in one process)"
    if cfg.mode == "generate":
        return "generate mode (its infer mode is checked)"
    if "infer" not in spec.task.modes:
        return f"{spec.task.name} models have no forward pass to compare (no infer mode)"
    needed = spec.task.memory_needed(ref_cfg)
    free = backend.free_memory_bytes() if needed else None
    if free is not None and needed[0] > free:
        return f"the fp32 reference needs {needed[0] / 2**30:.3g} GiB, {free / 2**30:.3g} GiB free"
    return ""


def _outputs(cfg: BenchConfig, spec, backend, make_step: MakeStep) -> tuple[list[torch.Tensor], list[float]]:
    """One side, built from the seed as the runner builds it: the floating-point outputs of one
    forward pass in eval mode (as float32 on the CPU) and, in training, the loss of the first
    training step from the same weights. Eval mode, because a training-mode forward normalises over
    the batch: at a small batch (BatchNorm over 2 values at 1x1) it turns a rounding difference into
    any difference at all. Later steps are not compared: AMP's GradScaler rightly skips an update
    that overflowed while it calibrates its scale."""
    device, precision = backend.device, resolve_precision(cfg.precision)
    backend.apply_knobs(precision, cfg.cudnn_benchmark)  # TF32 off for the reference, as the variant's for it
    torch.manual_seed(cfg.seed)  # the same weights (and dropout masks) on both sides
    with torch.device(device):
        model = spec.build(cfg).to(device)
    dtype = getattr(torch, precision.cast_dtype) if precision.cast_dtype else torch.float32
    if precision.cast_dtype:
        model = model.to(dtype)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    workload = spec.task.make_workload(spec, cfg, device, dtype)
    compiling = contextlib.nullcontext()
    if cfg.compile != "off":
        import torch._inductor.config as inductor  # lazy (heavy); compiled dropout as eager draws it
        compiling = inductor.patch(fallback_random=True)
        model = torch.compile(model, mode=None if cfg.compile == "default" else cfg.compile)
    losses = []
    with compiling:
        model.train(False)
        step, last = make_step(cfg.replace(mode="infer"), model, workload, precision, device)
        step()
        forward = float_tensors(last[0])
        if cfg.mode == "train":
            model.train(True)
            step, last = make_step(cfg, model, workload, precision, device)
            step()
            losses.append(float(last[0].detach().float()))
    backend.synchronize()
    return forward, losses


def float_tensors(output) -> list[torch.Tensor]:
    """Every floating-point tensor in a model output (tensor, dict, ModelOutput, list), in order, as
    flat float32 copies on the CPU (a later step or a CUDA graph replay cannot overwrite them)."""
    if isinstance(output, torch.Tensor):
        return [output.detach().float().flatten().cpu()] if output.is_floating_point() else []
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        return [t for item in output for t in float_tensors(item)]
    return []


def _compare(cfg: BenchConfig, ref_out: list[torch.Tensor], out: list[torch.Tensor], ref_losses: list[float],
             losses: list[float]) -> dict:
    if [t.shape for t in ref_out] != [t.shape for t in out] or not ref_out:
        return {"output_check": f"{fidelity.NOT_CHECKED}: the outputs differ in shape from the reference's "
                                "(e.g. a different number of detections)" if ref_out else
                                f"{fidelity.NOT_CHECKED}: the model returns no floating-point output"}
    ref, got = torch.cat(ref_out).double(), torch.cat(out).double()
    if not torch.isfinite(ref).all():
        return {"output_check": f"{fidelity.NOT_CHECKED}: the fp32 reference's outputs are not finite"}
    norm_r, norm_v = float(ref.norm()), float(got.norm())
    cosine = float(ref.dot(got)) / (norm_r * norm_v) if norm_r and norm_v else (1.0 if norm_r == norm_v else 0.0)
    error = float((got - ref).norm()) / norm_r if norm_r else (0.0 if not norm_v else float("inf"))
    if not torch.isfinite(got).all():
        cosine, error = float("nan"), float("inf")
    loss_error = None
    if losses:
        loss_error = max(abs(v - r) / abs(r) if r else abs(v - r) for r, v in zip(ref_losses, losses))
        loss_error = loss_error if loss_error == loss_error else float("inf")  # NaN: a non-finite loss
    verdict = fidelity.judge(cfg.precision, cosine, error, loss_error)
    return {"output_check": verdict, "output_cosine": finite_or_none(cosine), "output_rel_error": finite_or_none(error),
            "loss_rel_error": finite_or_none(loss_error)}


def finite_or_none(value: float | None) -> float | None:
    """A row holds no NaN or infinity: a non-finite deviation is None (its verdict says wrong results)."""
    return value if value is not None and abs(value) != float("inf") and value == value else None
