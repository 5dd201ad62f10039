"""The output check: a variant (a precision other than fp32, torch.compile, channels_last) run
beside its reference (eager, NCHW, in strict fp32; float8 in amp-bf16) on the same weights and
inputs, once per configuration and outside the timed window; the row records how far its outputs
(float8: its first training losses) strayed and whether that is within its precision's tolerance
(results/fidelity.py states them and why).

Both sides are built here, from the configuration's seed, and freed before the measured model is
built: the measured session's first step, compile time and windows are untouched.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Callable

import torch

from bench_core.config.schema import BenchConfig
from bench_core.measure import flops
from bench_core.results import fidelity
from bench_core.results.rows import error_message
from bench_core.run import float8
from bench_core.workload.precision import resolve_precision

# (cfg, model, workload, precision, device, mode=None) -> (step, last): the runner's own step, so the
# check runs exactly what is timed.
MakeStep = Callable
# The check runs at most this many samples a side: a forward in eval mode is the same function of
# each sample at any batch, and the first training step's loss is compared at the same batch on
# both sides. At a measured batch of 1280 (ResNet-50 on an H200) the full-size check built two more
# models of that size and autotuned cuDNN for four new shapes: 98 s of one configuration, first light.
CHECK_BATCH = 16


@dataclass
class Side:
    """What one side of the check computed."""
    outputs: list[torch.Tensor] = field(default_factory=list)  # the forward's floating-point outputs ([]: not compared)
    losses: list[float] = field(default_factory=list)          # the first training steps' losses (train)
    redrawn: list[str] = field(default_factory=list)            # layers zero at initialisation, drawn at random
    ops_per_step: int | None = None                             # a training step's ops, where asked for


def reference_config(cfg: BenchConfig) -> BenchConfig | None:
    """The configuration a variant is checked against (its precision's check_against, eager, NCHW);
    None when `cfg` is that reference itself."""
    ref = cfg.replace(precision=resolve_precision(cfg.precision).check_against, compile="off", channels_last=False)
    return None if ref == cfg else ref


def check_outputs(cfg: BenchConfig, spec, backend, make_step: MakeStep, world_size: int = 1) -> dict:
    """The row columns of the check: output_check (within tolerance | wrong results | not checked:
    why), the reference, the tolerance, output_cosine, output_rel_error and (train) loss_rel_error;
    for float8 also reference_ops_per_step (its amp-bf16 twin's, for run/float8.py's note on an eager
    row). {} for the reference itself. A check that cannot run says why and never fails the run."""
    ref_cfg = reference_config(cfg)
    if ref_cfg is None:
        return {}
    if isinstance(cfg.batch_size, int) and cfg.batch_size > CHECK_BATCH:
        cfg = cfg.replace(batch_size=CHECK_BATCH)
        ref_cfg = ref_cfg.replace(batch_size=CHECK_BATCH)
    tolerance = fidelity.tolerance_for(cfg.precision)
    reference = fidelity.reference_name(ref_cfg.precision)
    columns = {"output_reference": reference, "output_tolerance": tolerance.text()}
    why = _not_checkable(cfg, ref_cfg, spec, backend, world_size)
    if why:
        return {**columns, "output_check": f"{fidelity.NOT_CHECKED}: {why}"}
    side = f"the {reference} reference"
    try:
        # An eager float8 row sets its ops a step against its amp-bf16 twin's, this reference's (run/float8.py).
        twin = resolve_precision(cfg.precision).float8_recipe is not None
        ref = run_side(ref_cfg, spec, backend, make_step, tolerance, count_ops=twin)
        backend.release_memory()
        side = f"the {cfg.precision} variant"
        got = run_side(cfg, spec, backend, make_step, tolerance)
    except Exception as exc:  # noqa: BLE001 - the check failing is a note, not the run's failure
        kind = "out of memory" if backend.is_oom(exc) else error_message(exc)
        return {**columns, "output_check": f"{fidelity.NOT_CHECKED}: the check failed in {side} ({kind})"}
    finally:
        backend.release_memory()
        if cfg.compile != "off":
            # Lazy, as in the runner: dynamo's import is heavy. The measured session compiles from
            # scratch, as a fresh process would.
            import torch._dynamo as dynamo
            dynamo.reset()
    if ref.redrawn:  # said where the verdict names its reference
        columns["output_reference"] = f"{reference} ({', '.join(ref.redrawn)} re-drawn: zero at initialisation)"
    if ref.ops_per_step:
        columns["reference_ops_per_step"] = ref.ops_per_step
    try:
        return {**columns, **_compare(cfg, ref, got, tolerance, reference)}
    except Exception as exc:  # noqa: BLE001 - as above: an output the comparison cannot read is a note
        return {**columns, "output_check": f"{fidelity.NOT_CHECKED}: the comparison failed ({error_message(exc)})"}


def _not_checkable(cfg: BenchConfig, ref_cfg: BenchConfig, spec, backend, world_size: int) -> str:
    if world_size > 1:
        return "multi-process run (check it in one process)"
    if cfg.parallelism != "ddp":
        return (f"parallelism {cfg.parallelism} (the check builds the model unwrapped, not as FSDP2 runs it: "
                "check its plain-training twin, parallelism ddp)")
    if cfg.mode == "generate":
        return "generate mode (its infer mode is checked)"
    needed = spec.task.memory_needed(ref_cfg)
    free = backend.free_memory_bytes() if needed else None
    if free is not None and needed[0] > free:
        return f"the {ref_cfg.precision} reference needs {needed[0] / 2**30:.3g} GiB, {free / 2**30:.3g} GiB free"
    return ""


def run_side(cfg: BenchConfig, spec, backend, make_step: MakeStep, tolerance, count_ops: bool = False) -> Side:
    """One side, built from the seed as the runner builds it (float8's linear layers converted, then
    compiled): the floating-point outputs of one forward pass in eval mode (as float32 on the CPU; a
    training row's own call and batch) where the tolerance compares outputs and, in training, the
    losses of the first training steps from the same weights (tolerance.loss_steps). Eval mode,
    because a training-mode forward normalises over the batch: at a small batch (BatchNorm over 2
    values at 1x1) it turns a rounding difference into any difference at all. One step's loss unless
    the tolerance says more: AMP's GradScaler rightly skips an update that overflowed while it
    calibrates its scale."""
    device, precision = backend.device, resolve_precision(cfg.precision)
    backend.apply_knobs(precision, cfg.cudnn_benchmark)  # TF32 off for the reference, as the variant's for it
    torch.manual_seed(cfg.seed)  # the same weights (and dropout masks) on both sides
    with torch.device(device):
        model = spec.build(cfg).to(device)
    side = Side(redrawn=redraw_zero_layers(model))  # before any cast: drawn in float32 on both sides alike
    dtype = getattr(torch, precision.cast_dtype) if precision.cast_dtype else torch.float32
    if precision.cast_dtype:
        model = model.to(dtype)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    workload = spec.task.make_workload(spec, cfg, device, dtype)
    float8.convert(model, precision)
    compiling = contextlib.nullcontext()
    if cfg.compile != "off":
        import torch._inductor.config as inductor  # lazy (heavy); compiled dropout as eager draws it
        compiling = inductor.patch(fallback_random=True)
        model = torch.compile(model, mode=None if cfg.compile == "default" else cfg.compile)
    with compiling:
        if tolerance.compares_outputs:
            model.train(False)
            # A training row's forward is its training call (the model as built to train, its batch, e.g. a speech
            # model's decoder and labels), run as an infer step is: no infer configuration is validated or built.
            forward = dataclasses.replace(workload, infer_call=workload.train_call) if cfg.mode == "train" else workload
            step, last = make_step(cfg, model, forward, precision, device, mode="infer")
            step()
            side.outputs = float_tensors(last[0])
        if cfg.mode == "train":
            model.train(True)
            step, last = make_step(cfg, model, workload, precision, device)
            for _ in range(tolerance.loss_steps):
                step()
                side.losses.append(float(last[0].detach().float()))
            if count_ops:  # after the compared steps: counting leaves them as they were
                side.ops_per_step = flops.count_flops(step).ops or None
    backend.synchronize()
    return side


def redraw_zero_layers(model: torch.nn.Module) -> list[str]:
    """Re-draw, with the layer's own reset_parameters (as every other weight was drawn), each layer whose
    weight is all zero at initialisation -> their names. A zero layer before the outputs (torchvision's
    ViT head) makes every output 0 whatever the precision computed: a check of them could not fail."""
    redrawn = []
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dim() >= 2 and hasattr(module, "reset_parameters") \
                and not bool(weight.detach().any()):
            with torch.no_grad():
                module.reset_parameters()
            redrawn.append(name)
    return redrawn


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


def degenerate(outputs: list[torch.Tensor]) -> str:
    """Why a reference's outputs could not fail a comparison ('all 0 (constant): ...'), or '' when they can: they
    vary, or are one value other than 0 (a scalar output is compared as it is)."""
    values = torch.cat(outputs) if outputs else torch.zeros(0)
    if not values.numel():  # e.g. a detector that found nothing: no value to compare
        return "empty (no values): a comparison with them could not fail"
    low, high = float(values.min()), float(values.max())
    if low != high or (values.numel() == 1 and low != 0):
        return ""
    return f"all {low:g} (constant): a comparison with them could not fail"


def _compare(cfg: BenchConfig, ref: Side, got: Side, tolerance, reference: str) -> dict:
    cosine = error = None
    if tolerance.compares_outputs:
        ref_out, out = ref.outputs, got.outputs
        if [t.shape for t in ref_out] != [t.shape for t in out] or not ref_out:
            return {"output_check": f"{fidelity.NOT_CHECKED}: the outputs differ in shape from the reference's "
                                    "(e.g. a different number of detections)" if ref_out else
                                    f"{fidelity.NOT_CHECKED}: the model returns no floating-point output"}
        r, v = torch.cat(ref_out).double(), torch.cat(out).double()
        if not torch.isfinite(r).all():
            return {"output_check": f"{fidelity.NOT_CHECKED}: the {reference} reference's outputs are not finite"}
        constant = degenerate(ref_out)
        if constant:
            return {"output_check": f"{fidelity.NOT_CHECKED}: the {reference} reference's outputs are {constant}"}
        norm_r, norm_v = float(r.norm()), float(v.norm())
        cosine = float(r.dot(v)) / (norm_r * norm_v) if norm_v else 0.0
        error = float((v - r).norm()) / norm_r
        if not torch.isfinite(v).all():
            cosine, error = float("nan"), float("inf")
    loss_error = None
    if got.losses:
        if not all(abs(r) < float("inf") for r in ref.losses):  # False for NaN too
            return {"output_check": f"{fidelity.NOT_CHECKED}: the {reference} reference's losses are not finite"}
        # Each step's loss off the reference's, as a share of the reference's first loss (the starting loss:
        # a run that memorises its one batch falls towards 0, where rounding is a large share of a late loss).
        off = [abs(v - r) for r, v in zip(ref.losses, got.losses)]
        finite = all(d < float("inf") for d in off)  # a NaN or infinite loss: off by infinitely much
        loss_error = max(off) / (abs(ref.losses[0]) or 1.0) if finite else float("inf")
    if cosine is None and loss_error is None:
        return {"output_check": f"{fidelity.NOT_CHECKED}: {cfg.precision} is checked on training losses, and "
                                f"mode {cfg.mode} has none"}
    verdict = fidelity.judge(cfg.precision, cosine, error, loss_error)
    return {"output_check": verdict, "output_cosine": finite_or_none(cosine), "output_rel_error": finite_or_none(error),
            "loss_rel_error": finite_or_none(loss_error)}


def finite_or_none(value: float | None) -> float | None:
    """A row holds no NaN or infinity: a non-finite deviation is None (its verdict says wrong results)."""
    return value if value is not None and abs(value) != float("inf") and value == value else None
