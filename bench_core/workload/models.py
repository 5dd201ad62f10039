"""The model registry: every family's tasks and models by name and alias, models named by a
library prefix (timm:<name>, torchvision:<name>, hf:<model_type>), and what `bench models` lists.

Each family module declares its TASKS and MODELS (and any PREFIXES); this module only gathers
them. Every builder passes weights=None / pretrained=False: nothing is ever downloaded.
"""
from __future__ import annotations

import dataclasses
import functools
import types

from bench_core.errors import ConfigError
from bench_core.workload import detection, diffusion, speech, text, vision, volumetric
from bench_core.workload.family import SHAPE_FIELDS, ModelSpec, Task

FAMILIES = (vision, volumetric, detection, text, diffusion, speech)
TASKS: dict[str, Task] = {task.name: task for family in FAMILIES for task in family.TASKS}
REGISTRY: dict[str, ModelSpec] = {spec.name: spec for family in FAMILIES for spec in family.MODELS}
PREFIXES = {prefix: make for family in FAMILIES for prefix, make in getattr(family, "PREFIXES", {}).items()}

_ALIASES = {alias: spec.name for spec in REGISTRY.values() for alias in spec.aliases}
_BUILTIN = tuple(REGISTRY)  # what `bench models` lists; register_model adds in-process models only


def register_model(spec: ModelSpec) -> ModelSpec:
    """Add a model of your own (in this process), e.g. from a notebook cell before run_benchmark.
    Its task may be given by name ("classification", ...); returns the registered spec."""
    if not isinstance(spec.task, Task):
        if spec.task not in TASKS:
            raise ConfigError("task", f"got {spec.task!r}; allowed: {', '.join(TASKS)}")
        spec = dataclasses.replace(spec, task=TASKS[spec.task])
    REGISTRY[spec.name] = spec
    for alias in spec.aliases:
        _ALIASES[alias] = spec.name
    return spec


def resolve_model(name: str) -> ModelSpec:
    key = name.strip()
    lowered = key.lower()
    if lowered in REGISTRY or lowered in _ALIASES:
        return REGISTRY[_ALIASES.get(lowered, lowered)]
    prefix, _, inner = key.partition(":")
    if inner and prefix in PREFIXES:
        return PREFIXES[prefix](inner)
    allowed = ", ".join(REGISTRY) + "".join(f", {p}:<name>" for p in PREFIXES)
    raise ConfigError("model", f"unknown model {name!r}; allowed: {allowed}")


def count_parameters(model) -> int:
    """The model's parameters, counted once when it is built: every element of model.parameters()
    (trainable or frozen; shared tensors once; buffers such as BatchNorm statistics are not
    parameters), as timm's benchmark.py counts its param_count (timm.utils.count_params)."""
    return sum(p.numel() for p in model.parameters())


@functools.cache
def parameter_count(name: str) -> int:
    """A registered model's parameters at its default input, counted on torch's meta device (no
    memory, no weights: an 8B model in a fraction of a second)."""
    import torch
    spec = REGISTRY[name]
    defaults = types.SimpleNamespace(mode="train", channels_last=False, compile="off", **dict.fromkeys(SHAPE_FIELDS))
    spec.check(defaults)
    with torch.device("meta"):
        return count_parameters(spec.build(defaults))


def params_text(count: int | None) -> str:
    """25.6M, 1.24B: a parameter count as people say it (empty when unknown)."""
    if not count:
        return ""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if count >= scale:
            return f"{count / scale:.3g}{suffix}"
    return str(count)


def model_table() -> list[dict]:
    """What `bench models` prints: every built-in model with its task, default input and parameters."""
    rows = [{"name": spec.name, "task": spec.task.name, "default_input": spec.task.default_input(spec),
             "params": parameter_count(spec.name), "aliases": ", ".join(spec.aliases), "source": spec.source,
             "notes": spec.notes}
            for spec in (REGISTRY[name] for name in _BUILTIN)]
    return rows + [{**row, "params": None} for family in FAMILIES for row in getattr(family, "PREFIX_ROWS", ())]
