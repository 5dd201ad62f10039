"""CUDA's autocast, as the memory estimate's traced step needs it on the CPU's fake tensors: autocast
decides which tensors a training step keeps in half precision, and CUDA's op lists differ from the CPU's
(torch 2.x, aten/src/ATen/autocast_mode.cpp). The trace runs the CPU's autocast and, for a CUDA device,
this mode on top of it, correcting the ops where the two differ:

- CUDA runs norms, softmax, exp/log/pow, upsampling and the losses in float32 (a float32 copy of a half
  input, a float32 output); the CPU keeps them in the input's dtype.
- CUDA lowers a few matrix ops the CPU leaves alone (mv, addmv, addr, chain_matmul, RNN cells).
- The CPU runs 3D pooling and reflection/replication padding in float32; CUDA in the input's dtype.

Only what changes a tensor's dtype, and so its bytes, matters here; the rest of both lists agree.
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

# CUDA: eligible (half or bfloat16) inputs cast to float32 ("fp32" policy).
TO_FLOAT32 = frozenset((
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt", "sinh",
    "tan", "pow", "__pow__", "__rpow__", "softplus", "layer_norm", "group_norm", "norm", "frobenius_norm",
    "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "cross_entropy", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "interpolate", "upsample", "upsample_nearest", "upsample_bilinear"))
# CUDA: computed in and returned as float32 without copying the input ("fp32_set_opt_dtype").
FLOAT32_OUTPUT = frozenset(("prod", "softmax", "log_softmax", "cumprod", "cumsum", "sum"))
# CUDA lowers these; the CPU runs them in their inputs' dtype.
TO_LOWER = frozenset(("mv", "addmv", "addr", "chain_matmul", "multi_dot", "lstm_cell", "gru_cell", "rnn_tanh_cell",
                      "rnn_relu_cell"))
# The CPU runs these in float32; CUDA in their inputs' dtype.
CPU_ONLY_FLOAT32 = frozenset(("max_pool3d", "avg_pool3d", "adaptive_avg_pool3d", "adaptive_max_pool3d", "max_unpool2d",
                              "max_unpool3d", "pad"))


def _eligible(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16, torch.float32)


def _cast(value, dtype):
    if _eligible(value):
        return value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


class CudaAutocast(TorchFunctionMode):
    """Entered with torch.autocast('cpu', dtype): where the CPU's autocast is on, ops CUDA treats
    otherwise are run as CUDA would run them (see the module's text)."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if not torch.is_autocast_enabled("cpu"):
            return func(*args, **kwargs)
        if name in TO_FLOAT32:
            args, kwargs = _cast(args, torch.float32), {k: _cast(v, torch.float32) for k, v in kwargs.items()}
        elif name in FLOAT32_OUTPUT and args and _eligible(args[0]) and args[0].dtype != torch.float32 \
                and kwargs.get("dtype") is None:
            kwargs = {**kwargs, "dtype": torch.float32}
        elif name in TO_LOWER:
            args = _cast(args, self.dtype)
        elif name in CPU_ONLY_FLOAT32:
            with torch.autocast("cpu", enabled=False):
                return func(*args, **kwargs)
        return func(*args, **kwargs)


# The device types whose autocast lists differ from the CPU's, and the mode that corrects them (MPS: the CPU's).
AUTOCAST_RULES = {"cuda": CudaAutocast}
