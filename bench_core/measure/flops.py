"""FLOPs per step (counted once, outside the timed window, by torch's FlopCounterMode formulas in one
dispatch mode that also notes the attention kernels and the bytes each op moves; 1 multiply-add =
2 FLOPs). The peak FLOP/s that MFU divides them by: measure/mfu_peak.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


COUNTED = "counted: FlopCounterMode over one step (grouped-conv backward corrected, CPU attention counted)"
# The fused scaled-dot-product-attention kernels, by the aten op torch dispatches to.
ATTENTION_KERNELS = {"_scaled_dot_product_flash_attention": "flash",
                     "_scaled_dot_product_efficient_attention": "efficient",
                     "_scaled_dot_product_cudnn_attention": "cudnn",
                     "_scaled_dot_product_flash_attention_for_cpu": "flash (cpu)",
                     "_scaled_dot_product_fused_attention_overrideable": "fused (backend)"}


EMBEDDING_LOOKUPS = {"embedding", "_embedding_bag", "_embedding_bag_forward_only", "embedding_bag"}  # move rows


@dataclass(frozen=True)
class Counted:
    flops: int | None                     # FLOPs of one step (train: forward + backward)
    attention_kernels: tuple[str, ...]    # the fused attention kernels the step dispatched, by name
    # Bytes the step's ops read and write if nothing is fused or cached (views move none), of the FLOP ops
    # (matmuls, convs, attention) and of all others: what `bench predict` puts against the bandwidth.
    flop_op_bytes: int = 0
    other_bytes: int = 0
    ops: int = 0                          # the step's ops that run a kernel (views and size queries left out)


def count_flops(step: Callable[[], object]) -> Counted:
    """FLOPs of one call of `step`, the fused attention kernels it ran and the bytes its ops move.

    Counted as torch's FlopCounterMode counts (its formulas, ours from `formula_fixes`, its
    decompositions), without entering it: entered, it also tracks every module (forward hooks, and
    hooks on the gradients of each module's tensors) to count per module, and only the total is read
    here. One dispatch mode counts and records kernels and bytes, where two stacked modes did; it
    tries a decomposition only for an op that has one, where the counter's mode tried (pushing itself
    again) for every op.
    """
    from torch.utils.flop_counter import FlopCounterMode
    counter = FlopCounterMode(display=False, custom_mapping=formula_fixes())  # the formulas and the total
    with _counting_mode(counter) as mode:
        step()
    return Counted(counter.get_total_flops() or None, tuple(sorted(mode.kernels)), mode.moved[True],
                   mode.moved[False], mode.launched)


def formula_fixes() -> dict:
    """Our formulas over torch's, by op (FlopCounterMode's custom_mapping)."""
    import torch
    aten = torch.ops.aten
    fixes = {aten.convolution_backward: _conv_backward_flop,
             # torch (2.14) has no formula for the CPU flash kernel: attention would count as 0 there
             aten._scaled_dot_product_flash_attention_for_cpu: _attention_flop,
             aten._scaled_dot_product_flash_attention_for_cpu_backward: _attention_backward_flop}
    # The CUDA kernels, for grouped-query attention (transformers passes fewer key/value heads than query
    # heads; torch before 2.13 asserted equal heads: every Llama row failed on an H200 with torch 2.11).
    # Query, key and value (forward) or the output's gradient and them (backward) come first in each op.
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention"):
        for op, formula in ((getattr(aten, name, None), _attention_flop),
                            (getattr(aten, f"{name}_backward", None), _attention_backward_flop)):
            if op is not None:
                fixes[op] = formula
    return fixes


def _counting_mode(counter):
    """A dispatch mode that counts `counter`'s FLOPs as torch's own mode does (it is that mode, with
    its higher-order ops), and records the fused attention kernels and the bytes each op moves.
    What to do with an op is worked out the first time it comes, then looked up."""
    import torch
    from torch.utils.flop_counter import _FlopCounterMode, flop_registry
    aten, composite = torch.ops.aten, torch._C.DispatchKey.CompositeImplicitAutograd
    PASS, HIGHER_ORDER, DECOMPOSE, RUN = "pass", "higher-order", "decompose", "run"
    # torch's mode passes these on (NotImplemented): size queries, from tensors with their own size policy
    passed_on = {aten.sym_is_contiguous.default, aten.is_contiguous.default, aten.is_contiguous.memory_format,
                 aten.is_strides_like_format.default, aten.is_non_overlapping_and_dense.default, aten.size.default,
                 aten.sym_size.default, aten.stride.default, aten.sym_stride.default, aten.storage_offset.default,
                 aten.sym_storage_offset.default, aten.numel.default, aten.sym_numel.default, aten.dim.default,
                 torch.ops.prim.layout.default}

    def tensor_bytes(values, sparse=()) -> int:
        """Bytes of the tensors in an op's arguments or outputs. A sparse tensor is its values and indices; a dense
        one of a sparse operand's shape moves the rows that one holds (SGD's sparse update of a table)."""
        total = 0
        for x in values:
            if isinstance(x, torch.Tensor) and x.is_sparse:
                total += x._values().numel() * x.element_size() + x._indices().numel() * 8
            elif isinstance(x, torch.Tensor):
                total += next((n for shape, n in sparse if x.shape == shape), x.numel()) * x.element_size()
            elif isinstance(x, (list, tuple, dict)):
                total += tensor_bytes(x.values() if isinstance(x, dict) else x, sparse)
        return total

    def op_bytes(args, kwargs, out, lookup: bool) -> int:
        """The bytes one op moves; an embedding lookup (table, indices, ...) reads the rows it names."""
        if lookup and isinstance(args[1], torch.Tensor) and getattr(args[0], "ndim", 0) == 2:
            return (args[1].numel() * args[0].shape[1] * args[0].element_size() + tensor_bytes(args[1:])
                    + tensor_bytes(kwargs.values()) + tensor_bytes((out,)))
        sparse = [(x.shape, x._values().numel()) for x in (*args, out) if isinstance(x, torch.Tensor) and x.is_sparse]
        return tensor_bytes(args, sparse) + tensor_bytes(kwargs.values(), sparse) + tensor_bytes((out,), sparse)

    class Counting(_FlopCounterMode):
        def __init__(self):
            super().__init__(counter)
            self.kernels: set[str] = set()
            self.moved = {True: 0, False: 0}  # op counts FLOPs -> bytes its inputs and outputs take
            self.launched = 0  # ops run that are not views: each one kernel on a GPU, launched by the host
            self.plans: dict = {}  # op -> what to do with it: one dict lookup per op

        def plan(self, func) -> tuple:
            """(how: pass on, higher-order, decompose first or run; its attention kernel; its bytes are FLOP ops'
            (True), others' (False) or none (None: a view, or a device query of fake tensors); it has a formula;
            it is an embedding lookup), decided in the order torch's mode decides."""
            if func in passed_on:
                return PASS, None, None, False, False
            if isinstance(func, torch._ops.HigherOrderOperator):
                return HIGHER_ORDER, None, None, False, False
            if func is torch.ops.prim.device.default:
                return RUN, None, None, False, False
            packet = func._overloadpacket
            # torch tries a decomposition for every op not in its registry (the registry is keyed by
            # packet, so that is every op) but prim.device; there is one where the op has such a kernel.
            decomposes = func not in counter.flop_registry and (
                composite in func.py_kernels or torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), composite))
            # FLOP ops' bytes by torch's registry alone, as counted so far: the CPU flash-attention
            # kernels (formulas in formula_fixes only) move "other" bytes.
            return (DECOMPOSE if decomposes else RUN, ATTENTION_KERNELS.get(packet.__name__),
                    None if func.is_view else packet in flop_registry, packet in counter.flop_registry,
                    packet.__name__ in EMBEDDING_LOOKUPS)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs if kwargs else {}
            plan = self.plans.get(func)
            if plan is None:
                plan = self.plans[func] = self.plan(func)
            how, kernel, bytes_of, has_formula, lookup = plan
            if how is not RUN:
                if how is PASS:
                    return NotImplemented
                if how is HIGHER_ORDER:
                    return self._handle_higher_order_ops(func, types, args, kwargs)
                with self:
                    out = func.decompose(*args, **kwargs)
                if out is not NotImplemented:
                    return out
            if kernel:
                self.kernels.add(kernel)
            out = func(*args, **kwargs)
            if bytes_of is not None:
                self.launched += 1
                self.moved[bytes_of] += op_bytes(args, kwargs, out, lookup)
            if has_formula:
                counter._count_flops(func._overloadpacket, out, args, kwargs)
            return out

    return Counting()


def _query_heads(query_shape, *shapes) -> list:
    """Key and value shapes with the query's head count: a grouped-query kernel broadcasts each key
    and value head over its group of query heads, and computes as many products as with one per
    query head. (batch, heads, sequence, head dim), as SDPA takes them."""
    return [(s[0], query_shape[1], *s[2:]) if len(s) == 4 and len(query_shape) == 4 else s for s in shapes]


def _attention_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_flop_count
    return sdpa_flop_count(query_shape, *_query_heads(query_shape, key_shape, value_shape))


def _attention_backward_flop(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None,
                             **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count
    return sdpa_backward_flop_count(grad_out_shape, query_shape, *_query_heads(query_shape, key_shape, value_shape))


def _conv_backward_flop(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
                        _output_padding, groups, output_mask, out_shape=None, **kwargs) -> int:
    """torch's formula with the weight gradient divided by `groups`: torch (2.14) counts it as
    one ungrouped conv, which overcounts a depthwise conv's backward by its channel count
    (MobileNet training came out at 23x its forward). The input gradient is right as is."""
    from torch.utils.flop_counter import conv_flop_count

    def t(shape):
        return [shape[1], shape[0]] + list(shape[2:])
    flop = 0
    if output_mask[0]:
        flop += conv_flop_count(grad_out_shape, w_shape, out_shape[0], not transposed)
    if output_mask[1]:
        if transposed:
            flop += conv_flop_count(t(grad_out_shape), t(x_shape), t(out_shape[1]), transposed=False) // groups
        else:
            flop += conv_flop_count(t(x_shape), t(grad_out_shape), t(out_shape[1]), transposed=False) // groups
    return flop
