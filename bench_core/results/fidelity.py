"""Faster only when still correct: how far a variant's outputs may stray from its reference, and
the verdict on a row that strays further. Plain data and arithmetic, no torch (the check itself,
which builds and runs both models, is run/reference.py).

A variant (a precision other than fp32, torch.compile, channels_last) is run once more, outside
the timed window, beside its reference: the same configuration in strict fp32, eager, NCHW, built
from the same seed (the same weights) on the same synthetic batch. Two numbers compare them, as
TorchBench's accuracy check does for a compiled model against eager:

- cosine similarity of the outputs, all floating-point outputs of one forward pass (in eval
  mode) flattened into one vector (float64): whether they point the same way, whatever their scale;
- relative error ||variant - reference|| / ||reference|| (L2 over the same vector): how far off
  they are, scale included (a model that halves every logit keeps a cosine of 1).

In training, the loss of the first training step (from the same weights) is compared as well. The
forward pass is compared in eval mode: a training-mode forward normalises over the batch, and at
a small batch (BatchNorm over 2 values at 1x1) that turns rounding into any difference at all
(amp-bf16 resnet18 at batch 2: 56 % in train mode, 0.8 % in eval mode). Later steps are not
compared: AMP's GradScaler rightly skips updates that overflow while it calibrates its scale.

Tolerances follow the precision's unit roundoff u (the spacing of its numbers just above 1) and
what normal rounding does to a deep network's outputs. Rounding errors of many operations add
like a random walk, so a forward pass strays from fp32 by some multiple of u that grows with
depth; TorchBench accepts a compiled model at cosine >= 0.99 (its --cosine check) and at a few
times the roundoff in relative error. Each limit below is about 10-20x what a faithful variant
showed on the project's tiny models (resnet18, mobilenet_v3_large,
llama-tiny on a CPU: amp-bf16 and bf16 0.6-1.3 %, fp16 0.1 %; compile and channels_last 1e-6), and far below what a broken one shows (an overflow, a
wrong kernel: errors of 30 % to 100 %+, or a non-finite output):

- fp32 with compile or channels_last (u = 6e-8): only the order of additions changes, and
  oneDNN/cuDNN pick other algorithms (Winograd, split-K): relative error <= 1e-3, cosine >= 0.99999.
- tf32 (10-bit mantissa, u = 4.9e-4 in matmuls and convolutions): <= 1e-2, cosine >= 0.9999.
- float16 and amp-fp16 (u = 4.9e-4, but a range that ends at 65504): <= 5e-2, cosine >= 0.999.
- bfloat16 and amp-bf16 (8-bit mantissa, u = 3.9e-3): <= 1e-1, cosine >= 0.99 (TorchBench's cut).

A pure cast (fp16, bf16: weights too) gets the same limits as autocast of its type: the limits
are loose enough for it on the tiny models, and an overflow is orders of magnitude beyond them.

float8 (fp8-tensorwise, fp8-rowwise) trains only, and is checked against amp-bf16 eager, the precision
of everything float8 leaves alone, so the check sees what float8 changes. Its matmuls round to e4m3
(3-bit mantissa, u = 6.3e-2), and at random initialisation their errors compound through the layers:
llama-1b's logits (16 layers, on this CPU's float8 reference matmul) stray 29 % from amp-bf16's
(cosine 0.958), llama-tiny's (2 layers) 7-8 %, while their losses agree within 0.1 %. A logit limit
loose enough for a 32-layer model would pass a broken one, so the logits are not compared. What is
compared is training: the losses of the first 3 steps from the same weights on the same batch, each
off the reference's by at most 10 % of the reference's first loss (the starting loss: a run that
memorises its one batch falls towards 0, where any rounding is a large share of the step's own
loss). On an H200, llama-1b (batch 4, 1,024 tokens, AdamW) fp8-tensorwise eager was 0.07 %, 1.5 % and
1.2 % off amp-bf16 over those steps; a step without a usable gradient would be 23 % off at the second
(the first update takes 24 % of its loss away). A model whose steps barely move its loss (llama-tiny
at lr 1e-4: under 0.1 % a step) has its forward checked this way, its gradients hardly.

Degenerate references are no check: torchvision's ViT starts with a zero head, so its outputs are
0 in every precision and any variant would be "within 0 %". The check re-draws a layer whose weight
is all zero at initialisation with the layer's own reset_parameters (as every other weight was
drawn), on both sides from the same seed, and says so in output_reference; a reference whose outputs
are still constant is "not checked", never "within tolerance".
"""
from __future__ import annotations

import math
from dataclasses import dataclass

REFERENCE = "fp32 eager NCHW"      # what a variant is checked against (float8: amp-bf16 eager, reference_name)
WITHIN = "within tolerance"
WRONG_RESULTS = "wrong results"
NOT_CHECKED = "not checked"        # followed by ': why'


@dataclass(frozen=True)
class Tolerance:
    kind: str                  # float32, tf32, float16, bfloat16, float8
    max_rel_error: float       # of the outputs, and of each compared loss (as a share of the reference's first)
    min_cosine: float | None   # None: the outputs are not compared (float8), only the losses
    loss_steps: int = 1        # the first training steps whose losses are compared

    @property
    def compares_outputs(self) -> bool:
        return self.min_cosine is not None

    def text(self) -> str:
        if not self.compares_outputs:
            return (f"{self.kind}: the first {self.loss_steps} training losses each within {self.max_rel_error:.1%} "
                    "of the reference's first loss (logits not compared)")
        return f"{self.kind}: cosine >= {self.min_cosine:g}, relative error <= {self.max_rel_error:.1%}"


TOLERANCES = {
    "float32": Tolerance("float32", 1e-3, 0.99999),
    "tf32": Tolerance("tf32", 1e-2, 0.9999),
    "float16": Tolerance("float16", 5e-2, 0.999),
    "bfloat16": Tolerance("bfloat16", 1e-1, 0.99),
    "float8": Tolerance("float8", 1e-1, None, loss_steps=3),
}

# The precision's numbers (results never import the torch side): precision -> tolerance kind.
PRECISION_KIND = {"fp32": "float32", "tf32": "tf32", "fp16": "float16", "amp-fp16": "float16",
                  "bf16": "bfloat16", "amp-bf16": "bfloat16", "fp8-tensorwise": "float8", "fp8-rowwise": "float8"}


def tolerance_for(precision: str) -> Tolerance:
    return TOLERANCES[PRECISION_KIND.get(precision, "bfloat16")]


def reference_name(precision: str) -> str:
    """How rows name the reference of a variant checked against `precision`: 'fp32 eager NCHW', 'amp-bf16 eager'."""
    return REFERENCE if precision == "fp32" else f"{precision} eager"


def judge(precision: str, cosine: float | None, rel_error: float | None, loss_rel_error: float | None) -> str:
    """WITHIN or WRONG_RESULTS: every number the precision's tolerance compares within it (a NaN is outside)."""
    tol = tolerance_for(precision)
    outputs_fine = not tol.compares_outputs or (cosine >= tol.min_cosine and rel_error <= tol.max_rel_error)
    return WITHIN if outputs_fine and (loss_rel_error is None or loss_rel_error <= tol.max_rel_error) else WRONG_RESULTS


def is_wrong(row: dict) -> bool:
    return row.get("output_check") == WRONG_RESULTS


def deviation_text(row: dict) -> str:
    """'outputs within 0.3 % of fp32 eager NCHW', 'WRONG RESULTS: outputs 45 % off fp32 eager NCHW
    (cosine 0.71; float16: cosine >= 0.999, relative error <= 5.0 %)', 'outputs not checked: why';
    '' for the reference itself (no check) or a row from before the check existed."""
    check = row.get("output_check")
    if not isinstance(check, str) or not check:
        return ""
    if check.startswith(NOT_CHECKED):
        return "outputs " + check
    error, cosine, loss = (number(row.get(name)) for name in ("output_rel_error", "output_cosine", "loss_rel_error"))
    worst = max([e for e in (error, loss) if math.isfinite(e)], default=math.nan)
    reference = row.get("output_reference") or REFERENCE
    kind = tolerance_for(str(row.get("precision")))
    tolerance = row.get("output_tolerance") or kind.text()
    if not kind.compares_outputs:  # float8: the training losses are what was compared
        said = f"training losses {percent(loss)} off {reference}'s" if math.isfinite(loss) else \
            f"non-finite training losses where {reference}'s are finite"
        return f"training losses within {percent(loss)} of {reference}'s" if check == WITHIN else \
            f"WRONG RESULTS: {said} (tolerance {tolerance})"
    if check == WITHIN:
        return f"outputs within {percent(worst)} of {reference}" if math.isfinite(worst) else \
            f"outputs within tolerance of {reference}"
    loss_part = f", loss {percent(loss)} off" if math.isfinite(loss) else ""
    if not math.isfinite(error):
        return f"WRONG RESULTS: non-finite outputs where {reference}'s are finite (tolerance {tolerance})"
    return (f"WRONG RESULTS: outputs {percent(error)} off {reference} (cosine {cosine:.4g}{loss_part}; "
            f"tolerance {tolerance})")


def number(value) -> float:
    """A cell as a float (a CSV may give text); NaN when empty or not a number."""
    try:
        return float(value) if value is not None and not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        return math.nan


def percent(value) -> str:
    """0.0031 -> '0.31 %', 0.45 -> '45 %'; NaN or infinite -> 'non-finite'."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "a non-finite amount"
    share = value * 100
    return f"{share:.2g} %" if share < 10 else f"{share:.0f} %"


METHOD_TEXT = (
    "Faster only when still correct: every variant (a precision other than fp32, torch.compile, "
    f"channels_last) is run once more, outside the timed window, beside its reference ({REFERENCE}: "
    "the same configuration built from the same seed, so the same weights, on the same synthetic "
    "batch). Their forward outputs are compared by cosine similarity (as TorchBench checks a compiled "
    "model against eager) and relative L2 error, in eval mode, and in training also the loss of the "
    "first step. float8 trains only and is checked against amp-bf16 eager on the losses of its first "
    "training steps (its logits at random initialisation stray by tens of percent in a deep model while "
    "its losses agree within a few). Tolerances, from each precision's rounding: "
    + "; ".join(t.text() for t in TOLERANCES.values()) +
    ". A layer whose weight is all zero at initialisation (torchvision's ViT head) is re-drawn at random on "
    "both sides, and a reference whose outputs are constant is 'not checked': it could not fail. A variant "
    "outside its tolerance is 'wrong results' and gets no speed verdict (bench compare "
    "exits 1); its rows keep the deviation (output_check, output_cosine, output_rel_error, "
    "loss_rel_error). Multi-process runs, FSDP and generate mode are not checked."
)
