"""One step of a configuration run on tensors without memory or arithmetic (shapes and dtypes only: meta
tensors, or fake CPU tensors, torch's FakeTensorMode, where autocast applies or an op cannot run on meta),
with the bytes alive after every op counted: the peak of a training step
(forward, backward, optimizer step, with the optimizer's state already made, as in every step after
the first) or of an inference forward, and what held those bytes at that moment. The memory estimate
(memory_estimate.py) reads it before anything is allocated; nothing here draws from the generators.

What it counts is what the caching allocator would be asked for (each storage rounded up to 512
bytes), op by op: the parameters at the precision that runs, the gradients, the optimizer's state,
the activations autograd keeps (at the precision autocast gives them: CUDA's lists where the device
is a GPU, autocast_rules.py) and every transient (an activation's gradient, a norm's float32 copy,
the optimizer's temporaries). What it cannot see: cuDNN and cuBLAS workspaces, the allocator's
cached free blocks (the reserved memory beyond the allocated), a compiled model's fusions.

A step the fake tensors cannot run to the end (an op whose output size depends on values, as a
detector's non-maximum suppression) is counted up to that op and says so (Trace.stopped_at).
"""
from __future__ import annotations

import contextlib
import sys
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, FakeTensorMode
from torch.nn.attention import SDPBackend
from torch.optim.optimizer import _get_foreach_kernels_supported_devices
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten

from bench_core.run.autocast_rules import AUTOCAST_RULES
from bench_core.run import trace_store
from bench_core.run.optimizers import make_optimizer
from bench_core.run.sharding import Layout, checkpoint_blocks
from bench_core.workload.family import SHAPE_FIELDS
from bench_core.workload.precision import Precision

TERMS = ("parameters", "gradients", "optimizer", "activations", "transient", "weight_casts")
# weight_casts: autocast's half-precision copies of the parameters, made in the forward and kept for the
# backward (what FSDP's mixed precision gathers a block at a time instead)
PHASES = {"forward": "activations", "backward": "transient", "step": "transient"}  # and what each phase makes
ROUNDING = 512  # the CUDA caching allocator's smallest block: every allocation is a multiple of it
KEPT_TRACES = 64
_TRACES: dict[tuple, "Trace"] = {}
_MADE = [0]  # traces run in this process (a test checks that a configuration too large for any was refused untraced)


def traces_made() -> int:
    """How many steps this process has traced (not the ones answered from the kept traces)."""
    return _MADE[0]


@dataclass(frozen=True)
class Trace:
    """The bytes alive at each phase's peak (forward, backward, optimizer step), by what held them (TERMS)."""
    phases: dict                   # phase -> {term: bytes} at that phase's peak
    trained: int = 0               # bytes of the parameters that train (what DDP's buckets copy)
    blocks: int = 0                # bytes of the parameters inside the task's transformer blocks
    largest_block: int = 0         # bytes of the largest block's parameters (what FSDP gathers at once)
    stopped_at: str | None = None  # the op a partial trace stopped at; None: the whole step ran
    note: str = ""                 # what the family's trace_call leaves out


class LiveBytes(TorchDispatchMode):
    """Every storage an op makes, under the term its phase makes (PHASES), until it is freed; the terms
    at each phase's highest total."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "forward"
        self.bytes = dict.fromkeys(TERMS, 0)
        self.peaks: dict[str, dict] = {}
        self._live: dict[int, list] = {}  # storage -> [term, bytes, weak reference]

    def add(self, t, term: str | None = None) -> None:
        term = term or PHASES[self.phase]
        for part in _parts(t):
            storage = part.untyped_storage()
            key = storage._cdata
            if key in self._live:
                continue
            size = -(-storage.nbytes() // ROUNDING) * ROUNDING
            self._live[key] = [term, size, weakref.ref(storage, lambda _, k=key: self._free(k))]
            self.bytes[term] += size
        if sum(self.bytes.values()) > sum(self.peaks.get(self.phase, {}).values()):
            self.peaks[self.phase] = dict(self.bytes)

    def begin(self, phase: str) -> None:
        """New tensors from now on are `phase`'s; what is alive as it begins is its peak so far."""
        self.phase = phase
        self.peaks.setdefault(phase, dict(self.bytes))

    def move(self, t, term: str) -> None:
        """Count a storage already made under another term (a gradient made in the backward)."""
        for part in _parts(t):
            entry = self._live.get(part.untyped_storage()._cdata)
            if entry and entry[0] != term:
                self.bytes[entry[0]] -= entry[1]
                self.bytes[term] += entry[1]
                entry[0] = term

    def _free(self, key: int) -> None:
        term, size, _ = self._live.pop(key)
        self.bytes[term] -= size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        cast = func is torch.ops.aten._to_copy.default and self.phase == "forward" and \
            self._live.get(args[0].untyped_storage()._cdata, [None])[0] == "parameters"
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.add(t, "weight_casts" if cast else None)
        return out


@contextlib.contextmanager
def _attention_as_the_cpu_runs_it():
    """Attention on meta tensors as the CPU runs it. Meta tensors have no kernel choice and take the math path,
    which keeps the S x S weights; the CPU (and fake CPU tensors) take its flash kernel where its choice allows
    (dtype, shape, dropout, mask), which keeps none. The choice is asked of the CPU on tensors of one row. In
    place of torch.nn.functional's own function for the trace (its callers, nn.MultiheadAttention's among them,
    look it up there), and put back after it."""
    original = F.scaled_dot_product_attention

    def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if query.device.type == "meta":
            with _disable_current_modes():  # (the proxies are no part of the step: not counted)
                choice = torch._fused_sdp_choice(*map(_cpu_proxy, (query, key, value, attn_mask)), dropout_p,
                                                 is_causal, scale=scale, enable_gqa=enable_gqa)
            if choice == int(SDPBackend.FLASH_ATTENTION):
                return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]
        return original(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    F.scaled_dot_product_attention = attention
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def _cpu_proxy(value):
    """A CPU tensor that answers a kernel choice as `value` would (shape, dtype, its last dimension's stride,
    requires_grad), holding one row of it."""
    if not isinstance(value, torch.Tensor):
        return value
    proxy = torch.empty(value.shape[-1] if value.dim() else (), dtype=value.dtype).expand(value.shape)
    return proxy.requires_grad_() if value.requires_grad else proxy


def _parts(t) -> list:
    """The dense tensors whose storages hold `t` (a sparse gradient: its indices and values)."""
    if t is None:
        return []
    if t.layout == torch.sparse_coo:
        return [t._indices(), t._values()]
    return [t] if t.layout == torch.strided else []


def trace_step(task, spec, cfg, precision: Precision, device_type: str) -> Trace:
    """The step of `cfg` on fake tensors, as a `device_type` device would run it: the workload's
    trace_call where the family gives one, else its own training step or inference forward. Raises
    what stops it before the step begins (a builder meta cannot build, nothing to call); stops at an op
    the fake tensors cannot run inside the step, and says which. Kept for the configurations that trace
    alike (fp32 and tf32; a batch search asks for the same batch twice)."""
    layout = Layout.of(cfg)
    key = (id(spec), spec.name, cfg.mode, cfg.batch_size, *(getattr(cfg, name) for name in SHAPE_FIELDS),
           cfg.channels_last, cfg.optimizer, cfg.activation_checkpointing, cfg.world_size, layout.shard, layout.tp,
           precision.cast_dtype, precision.autocast_dtype, device_type)
    if key not in _TRACES:
        if len(_TRACES) >= KEPT_TRACES:
            _TRACES.pop(next(iter(_TRACES)))
        kept = trace_store.key(spec, cfg, precision.name, device_type)
        found = trace_store.read(kept, Trace)
        if found is not None:  # traced by an earlier process
            _TRACES[key] = found
            return found
        _MADE[0] += 1
        try:
            _TRACES[key] = _trace(task, spec, cfg, precision, device_type)
            trace_store.write(kept, _TRACES[key])
        finally:
            # torch keeps each fake op's result in one cache for the whole process (FakeTensorMode.cache):
            # about 260 entries a shape for a ResNet, never freed, so a batch search or a long sweep grew it
            # with every shape it traced (a capped process's edge moved down a batch after a search).
            FakeTensorMode.cache_clear()
    return _TRACES[key]


def _trace(task, spec, cfg, precision: Precision, device_type: str) -> Trace:
    """Without autocast, on meta tensors (3 to 18 times quicker: no fake tensor wraps each op); where an op
    cannot run there (a detector's value-dependent ops, sparse gradients, a CPU tensor made inside the model)
    and under autocast, which applies to CPU tensors only, on fake CPU tensors, which count up to such an op."""
    if precision.autocast_dtype is None:
        try:
            return trace_with(task, spec, cfg, precision, device_type, on_meta=True)
        except Exception:  # noqa: BLE001 - an op meta tensors cannot run: the fake tensors' trace answers
            pass
    return trace_with(task, spec, cfg, precision, device_type, on_meta=False)


def trace_with(task, spec, cfg, precision: Precision, device_type: str, on_meta: bool) -> Trace:
    """The step traced on meta tensors (`on_meta`) or on fake CPU tensors; what raises on meta is raised."""
    train = cfg.mode == "train"
    dtype = getattr(torch, precision.cast_dtype) if precision.cast_dtype else torch.float32
    with torch.random.fork_rng(devices=[]):
        with torch.device("meta"):
            model = spec.build(cfg)
        if precision.cast_dtype:
            model = model.to(dtype)
        if cfg.channels_last:
            model = model.to(memory_format=torch.channels_last)
    # the model is built on meta; on fake tensors it is made fake
    place = contextlib.nullcontext() if on_meta else FakeTensorMode(allow_non_fake_inputs=True)
    with torch.random.fork_rng(devices=[]), place:
        if not on_meta:
            _make_fake(model)
        model.train(train)
        lists = task.transformer_blocks(model) if task.has_transformer_blocks else []
        if train and cfg.activation_checkpointing != "none":
            checkpoint_blocks(lists, cfg.activation_checkpointing)
        workload = task.make_workload(spec, cfg, "meta" if on_meta else "cpu", dtype)
        optimizer = _optimizer_with_state(workload, cfg, model, device_type) if train else None
        live = LiveBytes()
        for t in [*model.parameters(), *model.buffers()]:
            live.add(t, "parameters")
        for state in (optimizer.state.values() if optimizer else ()):
            for t in state.values():
                if isinstance(t, torch.Tensor):
                    live.add(t, "optimizer")
        for t in tree_flatten(workload.inputs)[0]:  # the batch (its labels, made with it, are not counted)
            if isinstance(t, torch.Tensor):
                live.add(t, "activations")
        call = workload.trace_call or (workload.train_call if train else workload.infer_call)
        if call is None:
            raise ValueError(f"{cfg.model} in mode {cfg.mode} gives nothing to trace")
        loss = _sum_of_means if workload.trace_call else workload.loss
        with live, _masks_as_a_run_makes_them(), (_attention_as_the_cpu_runs_it() if on_meta else contextlib.nullcontext()):
            try:
                _run(model, call, loss, optimizer, live, precision, device_type)
                stopped = None
            except Exception as exc:  # noqa: BLE001 - an op fake tensors cannot run: counted up to it, and said
                if on_meta:
                    raise
                stopped = _op_name(exc)
    phases, trained = live.peaks, _bytes(p for p in model.parameters() if p.requires_grad)
    if stopped and train:  # no backward ran: its gradients are at least the trained parameters'
        phases = {phase: {**terms, "gradients": trained} for phase, terms in phases.items()}
    blocks = [_bytes(block.parameters()) for blocks in lists for block in blocks]
    return Trace(phases=phases or {"forward": dict(live.bytes)}, trained=trained, blocks=sum(blocks),
                 largest_block=max(blocks, default=0), stopped_at=stopped, note=workload.trace_note)


@contextlib.contextmanager
def _masks_as_a_run_makes_them():
    """transformers takes a fake tensor for a graph being exported, and then builds the S x S causal mask that a
    real run skips (SDPA's is_causal needs none): 68 GB at 131,000 tokens, where the run holds none. Inside the
    trace its mask code asks only whether it is compiling, as a real run's answer is. (A transformers model has
    imported the module by now; nothing else is changed, and nothing where transformers is not in use.)"""
    masking = sys.modules.get("transformers.masking_utils")
    if masking is None or not hasattr(masking, "is_tracing"):
        yield
        return
    original = masking.is_tracing
    masking.is_tracing = lambda tensor=None: original()
    try:
        yield
    finally:
        masking.is_tracing = original


def _bytes(tensors) -> int:
    """Bytes of the distinct storages of `tensors`."""
    sizes = {t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in tensors}
    return sum(sizes.values())


def _make_fake(model) -> None:
    """Each meta parameter and buffer replaced by a fake CPU tensor of its shape, dtype and strides; a
    tensor shared by two modules (tied embeddings) stays one tensor (Module.to_empty would make two)."""
    made: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for table in (module._parameters, module._buffers):
            for key, t in table.items():
                if t is not None and id(t) not in made:
                    empty = torch.empty_like(t, device="cpu")
                    made[id(t)] = torch.nn.Parameter(empty, t.requires_grad) if isinstance(t, torch.nn.Parameter) \
                        else empty
                if t is not None:
                    table[key] = made[id(t)]


def _optimizer_with_state(workload, cfg, model, device_type: str):
    """The step's optimizer, its state made by one step over zero gradients (untracked): the state
    every timed step holds. torch's multi-tensor (foreach) path where the device has its kernels, as the
    real step takes it: its temporaries span every parameter at once."""
    optimizer = workload.make_optimizer(model) if workload.make_optimizer else make_optimizer(cfg.optimizer, model)
    for group in optimizer.param_groups:
        if "foreach" in group and group.get("foreach") is None:
            group["foreach"] = device_type in _get_foreach_kernels_supported_devices()
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return optimizer


def _run(model, call, loss_of, optimizer, live: LiveBytes, precision: Precision, device_type: str) -> None:
    """One step, each phase's new tensors under its term."""
    with _autocast(precision, device_type), (contextlib.nullcontext() if optimizer else torch.no_grad()):
        live.begin("forward")
        out = call(model)
        loss = loss_of(out) if optimizer else None
        del out
    if optimizer is None:
        return
    hooks = [p.register_post_accumulate_grad_hook(lambda p: live.move(p.grad, "gradients"))
             for p in model.parameters() if p.requires_grad]
    live.begin("backward")
    loss.backward()
    for p in model.parameters():  # a gradient accumulated without the hook (sparse): a gradient all the same
        live.move(p.grad, "gradients")
    live.begin("step")
    optimizer.step()
    for hook in hooks:
        hook.remove()


def _sum_of_means(output):
    """A scalar that every floating output of a trace_call takes part in (so the backward reaches all of it)."""
    return sum(t.float().mean() for t in tree_flatten(output)[0]
               if isinstance(t, torch.Tensor) and t.is_floating_point())


def _autocast(precision: Precision, device_type: str):
    """The step's autocast on the fake CPU tensors: the CPU's own lists, corrected to the device's where
    they differ (AUTOCAST_RULES: CUDA's)."""
    if not precision.autocast_dtype:
        return contextlib.nullcontext()
    dtype = getattr(torch, precision.autocast_dtype)
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autocast("cpu", dtype=dtype))
    if device_type in AUTOCAST_RULES:
        stack.enter_context(AUTOCAST_RULES[device_type](dtype))
    return stack


def _op_name(exc: BaseException) -> str:
    """Where and why a trace stopped: an op whose output fake tensors cannot know ('aten.nonzero.default:
    its output depends on values'), or the step's own error."""
    if isinstance(exc, (DataDependentOutputException, DynamicOutputShapeException)):
        return f"{exc.func}: its output depends on values"
    text = str(exc).splitlines()[0][:160] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"
