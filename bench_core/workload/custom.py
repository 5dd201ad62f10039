"""Your own model, from your own code: `--model code:<file.py>:<function>` (or `code:<module>:<function>`
for an importable module). The function builds the model with random weights and one synthetic batch, and
returns a UserModel saying what a sample is; everything else (precisions, compile, DDP, FSDP2 and tensor
parallel when it names its blocks, FLOPs and MFU, the memory estimate, find-batch, compare, the report)
is what every built-in model gets, through the same Task interface.

    def build(batch_size, device, dtype, width=64, height=64):   # the shape fields it takes, with defaults
        model = MyNet()                                            # random weights, on `device`
        x = torch.randn(batch_size, 3, height, width, device=device, dtype=dtype)
        return UserModel(model, x, sample="image")

The function's parameters are what it is given: batch_size, device, dtype, mode (train | infer) and any
shape field of the configuration (width, height, depth, seq_len, ...), whose defaults are its own.

Trust: the user's code is imported only where a configuration names it (the command line, a sweep file,
a notebook). Rows record where it came from (model_code_path, model_code_sha256, model_code_commit) and
name the model by its file and function (code:net.py:build), one model across edits: the file's hash is a
change of its environment (user_code.py); results, reports and `bench diff` read rows and never import the code.

Plain data at import: torch is imported where the user's function is called.
"""
from __future__ import annotations

import functools
import importlib.util
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bench_core.errors import ConfigError, error_message, from_outside
from bench_core.workload.family import SHAPE_FIELDS, ModelSpec, Task, Workload, first_tensor
from bench_core.workload.precision import resolve_precision
from bench_core.workload.user_code import PREFIX, CodeRef, load, locate, on_path, sha256_of

GIVEN = ("batch_size", "device", "dtype", "mode")  # what the function may take besides shape fields
_PROBES = 64  # probes (meta-device calls) kept per function


@dataclass
class UserModel:
    """What your function returns: the model (random weights, on the device it was given) and one batch.

    inputs: the batch (a tensor, a tuple of tensors passed in order, or a dict passed by name), every
        tensor batch_size long in its first dimension; floating-point ones in the dtype it was given.
    sample: what one item of the batch is ("image", "molecule", "sequence"): samples_per_s counts them.
    unit, per_sample: where the headline rate counts something else, what (e.g. "token") and how many of
        them one sample holds (e.g. seq_len): throughput = samples/s x per_sample, in units/s.
    loss: output -> scalar tensor, for training; default: the mean square of the first output tensor.
    blocks: the attribute (dotted path) of a torch.nn.ModuleList of the model's repeated blocks: FSDP2
        shards them one by one, activation checkpointing wraps them, float8 converts their linears.
    tp_plan: {name of a Linear inside a block: "colwise" | "rowwise"} for tensor parallel (fsdp-tp).
    """
    model: Any
    inputs: Any
    sample: str = "sample"
    unit: str | None = None
    per_sample: int = 1
    loss: Callable[[Any], Any] | None = None
    blocks: str | None = None
    tp_plan: dict | None = None


def code_spec(inner: str) -> ModelSpec:
    """The model of code:<inner>; the same spec while the file's content is the same (config validation and
    the run both resolve the name), read again once it changed (a notebook whose user edits the model)."""
    where, _, path = locate(inner)
    if path is None:  # a module: its file, found without running it (None where it is not found: _load says so)
        on_path()
        try:
            found = importlib.util.find_spec(where)
        except (ImportError, ValueError):
            found = None
        path = Path(found.origin) if found and found.origin else None
    return _code_spec(inner, sha256_of(path) if path else None)


@functools.lru_cache(maxsize=32)
def _code_spec(inner: str, sha256: str | None) -> ModelSpec:
    ref, fn = load(inner, sha256)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin, a C function, a callable object signature() cannot read
        raise ConfigError("model", f"{ref.shown}: {ref.function}() has no parameters Python can read "
                                   f"({type(fn).__name__}); expected a Python function taking batch_size") from None
    for p in params.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ConfigError("model", f"{ref.shown}: name each parameter (no *args or **kwargs); allowed: "
                                       f"{', '.join(GIVEN)} and the shape fields {', '.join(SHAPE_FIELDS)}")
        if p.name not in GIVEN and p.name not in SHAPE_FIELDS:
            raise ConfigError("model", f"{ref.function}() takes {p.name!r}, which is neither given (allowed: "
                                       f"{', '.join(GIVEN)}) nor a shape field (allowed: {', '.join(SHAPE_FIELDS)})")
    if "batch_size" not in params:
        raise ConfigError("model", f"{ref.function}() must take batch_size (the batch it makes is that long)")
    task = CustomTask(ref, fn, {p.name: p.default for p in params.values() if p.name in SHAPE_FIELDS})
    return ModelSpec(ref.name, task, fn, source=str(ref.path), notes="your own model")


class CustomTask(Task):
    """One user function as a task: its shape fields are the function's, its sample and unit its UserModel's."""
    name = "custom"
    family = "custom"
    description = "your own model"
    memory_layout = True  # where its inputs are 4D (check refuses channels_last otherwise)

    def __init__(self, ref: CodeRef, fn: Callable, fields: dict):
        self.ref, self.fn, self.fields = ref, fn, fields
        self.shape_fields = tuple(fields)
        self.description = f"your own model ({ref.function} in {ref.path.name})"
        self._probes: dict[tuple, UserModel] = {}
        self._built: dict[str, UserModel] = {}
        self.blocks: str | None = None      # the probe's UserModel.blocks and tp_plan (the same for every shape)
        self.tp_plan: dict | None = None

    # -- the function, called and its answer checked --------------------------------------------------

    def call(self, cfg, device, batch_size: int) -> UserModel:
        """The function's UserModel for `cfg` on `device`, checked: one line naming what is wrong (ConfigError)."""
        import torch
        dtype = getattr(torch, resolve_precision(getattr(cfg, "precision", "fp32")).cast_dtype or "float32")
        given = {"batch_size": batch_size, "device": torch.device(device), "dtype": dtype, "mode": cfg.mode,
                 **{name: getattr(cfg, name) for name in self.fields}}
        params = inspect.signature(self.fn).parameters
        try:
            card = self.fn(**{k: v for k, v in given.items() if k in params})
        except BaseException as exc:  # noqa: BLE001 - the user's code, said in one line (its sys.exit() too)
            if from_outside(exc):
                raise
            raised = ConfigError("model", f"{self.ref.shown}: {self.ref.function}() raised {error_message(exc)}")
            raised.by_user = True
            raise raised from None
        return self._checked(card, torch.device(device), batch_size)

    def _checked(self, card, device, batch_size: int) -> UserModel:
        import torch
        says = f"{self.ref.shown}: {self.ref.function}() "
        if not isinstance(card, UserModel):
            raise ConfigError("model", says + f"returned {type(card).__name__}; expected "
                                              "UserModel(model, inputs, sample=...) (from bench_core import UserModel)")
        if not isinstance(card.model, torch.nn.Module):
            raise ConfigError("model", says + f"returned a model of type {type(card.model).__name__}; "
                                              "expected a torch.nn.Module")
        tensors = list(_tensors(card.inputs))
        if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
            raise ConfigError("model", says + "returned inputs that are not tensors; expected a tensor, a tuple of "
                                              "tensors or a dict of tensors")
        placed = [("a parameter", p.device) for p in card.model.parameters()] + [("an input", t.device) for t in tensors]
        for what, where in placed:
            if where.type != device.type or (device.index is not None and where.index != device.index):
                first = " (it is first called on torch's meta device, to check it without memory)" \
                    if device.type == "meta" else ""
                raise ConfigError("model", says + f"put {what} on {where}; expected the device it was given, "
                                                  f"{device}{first}: build on `device`")
        for t in tensors:
            if t.dim() == 0 or t.shape[0] != batch_size:
                raise ConfigError("model", says + f"returned an input of shape {tuple(t.shape)}; expected "
                                                  f"batch_size ({batch_size}) in its first dimension")
        if not isinstance(card.sample, str) or not card.sample.strip():
            raise ConfigError("model", says + f"named its sample {card.sample!r}; expected a word (image, molecule)")
        if card.unit is not None and not (isinstance(card.unit, str) and card.unit.strip()):
            raise ConfigError("model", says + f"named its unit {card.unit!r}; expected a word (token) or None")
        if not isinstance(card.per_sample, int) or card.per_sample < 1:
            raise ConfigError("model", says + f"gave per_sample {card.per_sample!r}; expected an integer >= 1")
        if card.loss is not None and not callable(card.loss):
            raise ConfigError("model", says + "gave a loss that is not callable; expected output -> scalar tensor")
        if card.blocks is not None:
            blocks = _attribute(card.model, card.blocks)
            if not isinstance(blocks, torch.nn.ModuleList) or not len(blocks):
                raise ConfigError("model", says + f"named blocks={card.blocks!r}, which is "
                                                  f"{type(blocks).__name__}; expected a non-empty torch.nn.ModuleList")
        if card.tp_plan is not None and (card.blocks is None or not isinstance(card.tp_plan, dict) or
                                         set(card.tp_plan.values()) - {"colwise", "rowwise"}):
            raise ConfigError("model", says + "gave a tp_plan; expected {name in a block: 'colwise' | 'rowwise'} "
                                              "with blocks named")
        return card

    def probe(self, cfg) -> UserModel:
        """The function called on the meta device (no memory, no weights), once per shape: what the
        configuration's checks, units and estimates read; on the CPU at batch 1 where meta cannot run it."""
        import torch
        batch = cfg.batch_size if isinstance(cfg.batch_size, int) else 1
        key = (cfg.mode, batch, getattr(cfg, "precision", "fp32"), *(getattr(cfg, name) for name in self.fields))
        if key not in self._probes:
            with torch.random.fork_rng(devices=[]):
                try:
                    with torch.device("meta"):
                        card = self.call(cfg, "meta", batch)
                except ConfigError as exc:
                    if not getattr(exc, "by_user", False):
                        raise
                    with torch.device("cpu"):
                        card = self.call(cfg, "cpu", 1)  # what meta could not run; its error is the user's
            if len(self._probes) >= _PROBES:
                self._probes.pop(next(iter(self._probes)))
            self._probes[key] = card
        return self._probes[key]

    # -- the Task interface --------------------------------------------------------------------------

    def check(self, spec: ModelSpec, cfg) -> None:
        for name in SHAPE_FIELDS:
            if name not in self.fields and getattr(cfg, name, None) is not None:
                raise ConfigError(name, f"{self.ref.function}() in {self.ref.path.name} takes no {name}; the shape "
                                        f"fields it takes: {', '.join(self.fields) or 'none'}")
        for name, default in self.fields.items():
            if getattr(cfg, name) is None:
                if default is inspect.Parameter.empty:
                    raise ConfigError(name, f"{self.ref.function}() in {self.ref.path.name} needs {name} "
                                            "(it gives no default)")
                setattr(cfg, name, default)
        card = self.probe(cfg)
        self.blocks, self.tp_plan = card.blocks, card.tp_plan
        self.has_transformer_blocks = card.blocks is not None
        super().check(spec, cfg)
        if cfg.channels_last and not any(t.dim() == 4 for t in _tensors(card.inputs)):
            raise ConfigError("channels_last", f"applies to 4D (NCHW) inputs; {self.ref.shown}'s are "
                                               f"{self._shape_text(card)}")

    def build(self, spec: ModelSpec, cfg):
        import torch
        device = torch.get_default_device()  # the runner builds under torch.device(<its device>)
        card = self.call(cfg, device, cfg.batch_size if isinstance(cfg.batch_size, int) else 1)
        if device.type != "meta":
            self._built[str(device)] = card  # make_workload's batch: the function is called once per build
        return card.model

    def make_workload(self, spec: ModelSpec, cfg, device, dtype, rank: int = 0) -> Workload:
        import torch
        card = self._built.pop(str(torch.device(device)), None) or self.call(cfg, device, cfg.batch_size)

        def cast(t):
            t = t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t
            return t.contiguous(memory_format=torch.channels_last) if cfg.channels_last and t.dim() == 4 else t
        inputs = card.inputs
        if isinstance(inputs, dict):
            inputs = {k: cast(v) for k, v in inputs.items()}
            call = lambda m: m(**inputs)  # noqa: E731
        elif isinstance(inputs, (tuple, list)):
            inputs = tuple(cast(t) for t in inputs)
            call = lambda m: m(*inputs)  # noqa: E731
        else:
            inputs = cast(inputs)
            call = lambda m: m(inputs)  # noqa: E731
        loss = card.loss or (lambda out: first_tensor(out).float().square().mean())
        return Workload(inputs, loss, call, call)

    def default_input(self, spec: ModelSpec) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.fields.items() if v is not inspect.Parameter.empty)

    def sample_shape(self, cfg) -> str:
        return self._shape_text(self.probe(cfg))

    def input_text(self, cfg) -> str:
        return super().input_text(cfg) or self.sample_shape(cfg)

    def units(self, cfg) -> tuple[str, str]:
        card = self.probe(cfg)
        return f"{_plural(card.sample)}/s", f"{_plural(card.unit or card.sample)}/s"

    def throughput(self, cfg, samples_per_s: float) -> float:
        return samples_per_s * self.probe(cfg).per_sample

    def config_facts(self, cfg) -> dict:
        return {"model": self.ref.shown, "model_code_path": str(self.ref.path), "model_code_sha256": self.ref.sha256,
                "model_code_commit": self.ref.commit}

    def transformer_blocks(self, model) -> list:
        return [_attribute(model, self.blocks)] if self.blocks else []

    def tensor_parallel_plan(self, model) -> dict[str, str] | None:
        return self.tp_plan

    def activation_bytes(self, model, cfg, dtype_bytes: int, tp_degree: int) -> tuple[int, str] | None:
        """What autograd keeps for the backward, counted in one forward of `model` (on the meta device) over
        the probe's batch: every tensor saved for backward that is not a parameter, floating ones at the
        compute dtype's size. Without checkpointing or tensor parallel only (None otherwise)."""
        import torch
        if cfg.activation_checkpointing != "none" or tp_degree > 1:
            return None
        inputs = self.probe(cfg).inputs
        params = {id(p) for p in model.parameters()}
        saved: dict[int, int] = {}

        def pack(t):
            if id(t) not in params:
                saved[id(t)] = t.numel() * (dtype_bytes if t.is_floating_point() else t.element_size())
            return t
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.random.fork_rng(devices=[]):
                model.train(True)
                model(**inputs) if isinstance(inputs, dict) else model(*inputs) if isinstance(inputs, (tuple, list)) \
                    else model(inputs)
        except BaseException as exc:  # noqa: BLE001 - meta cannot run the forward: no estimate, the run goes on
            if from_outside(exc):
                raise
            return None
        return sum(saved.values()), "saved for the backward in one forward on the meta device"

    def _shape_text(self, card: UserModel) -> str:
        inputs = card.inputs
        named = inputs.items() if isinstance(inputs, dict) else [(None, t) for t in _tensors(inputs)]
        return ", ".join(f"{k + ' ' if k else ''}{'x'.join(map(str, t.shape[1:])) or 'scalar'}" for k, t in named)


def _tensors(inputs):
    if isinstance(inputs, dict):
        return list(inputs.values())
    return list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]


def _attribute(model, path: str):
    for part in path.split("."):
        model = getattr(model, part, None)
    return model


def _plural(word: str) -> str:
    word = word.strip()
    return word if word.endswith("s") else word + "s"


TASKS = ()   # a task per function, made by code_spec
MODELS = ()
PREFIXES = {PREFIX: code_spec}
PREFIX_ROWS = (
    {"name": "code:<file.py>:<function>", "task": "custom", "default_input": "its own", "aliases": "",
     "source": "your code", "notes": "your own model: a function returning UserModel (docs/custom-models.md)"},
    {"name": "code:<module>:<function>", "task": "custom", "default_input": "its own", "aliases": "",
     "source": "your code", "notes": "the same from an importable module (installed, or under this folder)"},
)
