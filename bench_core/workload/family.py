"""What a workload family declares, and the only thing the shared code reads about it: each task's
sample and unit, the config fields that shape its input, its synthetic batch; and each model's spec.

The runner, the rows and the report call these methods and never branch on a task: a new family
is a new module under workload/ declaring its tasks and models (see vision.py, volumetric.py).
Plain data at import: torch is imported where a batch is made, because config validates model
names against these declarations and must not load torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from bench_core.errors import ConfigError
from bench_core.workload.precision import resolve_precision

# Every config field that shapes an input, and what it applies to: a field set for a model whose
# task does not read it is refused with this text.
SHAPE_FIELDS = {"width": "image and 3D models", "height": "image and 3D models", "depth": "3D models",
                "seq_len": "text models in train and infer, speech models in train",
                "prompt_len": "text models in generate", "new_tokens": "text and speech models in generate",
                "num_tables": "recommendation models", "rows_per_table": "recommendation models",
                "embedding_dim": "recommendation models", "indices_per_lookup": "recommendation models",
                "zipf_exponent": "recommendation models", "latent_size": "diffusion models",
                "denoise_steps": "diffusion models in infer", "audio_frames": "speech models"}


@dataclass
class Workload:
    """One configuration's synthetic batch, made once on the device, and how a step uses it."""
    inputs: Any                                      # what the model is called with
    loss: Callable[[Any], Any]                       # model output -> scalar loss tensor (training)
    train_call: Callable[[Any], Any] | None          # model -> output, in a training step
    infer_call: Callable[[Any], Any] | None          # model -> output, in an inference step
    generate_call: Callable[..., Any] | None = None  # (model, mark) -> last output; marks each new token
    facts: dict = field(default_factory=dict)        # row columns the workload learns as it runs (kv_cache_bytes)
    make_optimizer: Callable[[Any], Any] | None = None  # model -> its training optimizer, where the family needs its
    #                                                     own (sparse gradients); None: the configured optimizer
    trace_call: Callable[[Any], Any] | None = None   # model -> output: what the memory estimate runs on fake tensors
    #   in place of the step's own call where that has ops fake tensors cannot run (sizes or stops that depend on
    #   values: a detector's proposals, generate's end); trained on the sum of its outputs' means
    trace_note: str = ""                             # what trace_call leaves out, as the estimate says it


class Task:
    """What a model is run for, as the shared code sees it. Subclasses fill the attributes and
    override the methods that differ; an instance per task (classification, detection, ...)."""

    name = ""
    family = ""                              # the module that declares it: vision, detection, volumetric
    sample = "sample"                        # what samples_per_s counts: image, volume, ...
    unit = "samples/s"                       # the throughput unit a row's samples_per_s is in
    shape_fields: tuple[str, ...] = ()       # the SHAPE_FIELDS this task reads
    modes: tuple[str, ...] = ("train", "infer")
    description = ""                         # 'a 2D classification model': how refusals name the model
    mfu_note: str | None = None              # why MFU does not apply to this task's rows (None: it does)
    has_transformer_blocks = False           # True: transformer_blocks finds them (FSDP, tensor parallel, checkpointing)
    memory_layout = False                    # True: channels_last applies (a 4D image input, NCHW otherwise)

    def applies(self, name: str) -> bool:
        """Whether a row field names something this task's rows have: a label names only those (a text
        model's label said 'nchw', a memory layout it does not have)."""
        return name != "channels_last" or self.memory_layout

    def check(self, spec: "ModelSpec", cfg) -> None:
        """Fill the model's defaults into `cfg` and refuse what it cannot take (ConfigError)."""
        described = self.description or f"a {self.name} model"
        for name in SHAPE_FIELDS:
            if name not in self.shape_fields and getattr(cfg, name, None) is not None:
                raise ConfigError(name, f"applies to {SHAPE_FIELDS[name]} only; {spec.name} is {described}")
        if cfg.mode not in self.modes:
            raise ConfigError("mode", f"{cfg.mode} does not apply to {spec.name}, {described}; "
                                      f"allowed: {', '.join(self.modes)}")
        float8 = resolve_precision(getattr(cfg, "precision", "fp32")).float8_recipe
        if float8 and not (self.has_transformer_blocks and cfg.mode == "train"):
            device = str(getattr(cfg, "device", "auto"))
            tf32 = "" if device.startswith(("cpu", "mps")) else (", tf32" if device.startswith("cuda") else
                                                                 ", and tf32 on a CUDA GPU")
            raise ConfigError("precision", f"{cfg.precision} is float8 training of a transformer's linear layers "
                                           f"(torchao); {spec.name} is {described}, in mode {cfg.mode}: allowed for "
                                           f"it: fp32, fp16, bf16, amp-fp16, amp-bf16{tf32}")
        if not self.has_transformer_blocks:
            for name, plain in (("parallelism", "ddp"), ("activation_checkpointing", "none")):
                if getattr(cfg, name, plain) != plain:
                    raise ConfigError(name, f"{getattr(cfg, name)} works per transformer block; {spec.name} is "
                                            f"{described}, which declares none; allowed: {plain}")

    def build(self, spec: "ModelSpec", cfg):
        """The model, with random weights."""
        return spec.builder(cfg)

    def default_input(self, spec: "ModelSpec") -> str:
        """The input a model gets when no shape field is given, as `bench models` lists it."""
        return ""

    def sample_shape(self, cfg) -> str:
        """One sample's shape, as rows record it (input_shape)."""
        raise NotImplementedError

    def input_text(self, cfg) -> str:
        """The input in a few characters, as plans list it: 64x64, 64x64x16 (its shape fields that are set)."""
        return "x".join(str(getattr(cfg, name)) for name in self.shape_fields if getattr(cfg, name) is not None)

    def make_workload(self, spec: "ModelSpec", cfg, device, dtype, rank: int = 0) -> Workload:
        """The synthetic batch on `device` (inputs in `dtype` where they are floating point); each
        rank draws its own samples, as in real data-parallel training."""
        raise NotImplementedError

    def units(self, cfg) -> tuple[str, str]:
        """(sample_unit, throughput_unit) of a configuration: what samples_per_s counts, and the unit of
        the headline rate. The same in every mode unless the modes count different things (diffusion
        trains images but runs denoising steps; speech encodes audio seconds but generates tokens)."""
        return f"{self.sample}s/s", self.unit

    def throughput(self, cfg, samples_per_s: float) -> float:
        """The rate in the task's unit (tokens/s from sequences/s, ...); the sample rate by default."""
        return samples_per_s

    def throughput_columns(self, cfg, samples_per_s: float) -> dict:
        """The task's own rate columns beside samples_per_s (e.g. MPx/s)."""
        return {}

    def model_facts(self, model) -> dict:
        """Row columns read off the built model (e.g. the attention implementation)."""
        return {}

    def config_facts(self, cfg) -> dict:
        """Row columns known from the configuration alone, recorded before the model is built (so a
        build that fails says them too)."""
        return {}

    def memory_needed(self, cfg) -> tuple[int, str] | None:
        """(bytes, what) the model needs at least, known before it is built; a device with less free
        memory makes the run an `oom` row without trying. None: not known."""
        return None

    def parameter_count(self, spec: "ModelSpec", cfg) -> int | None:
        """The model's parameters, counted without building the whole of it (a transformer's: from one and two
        of its layers), for the memory floor said before any trace; None: counted on a meta build instead."""
        return None

    def transformer_blocks(self, model) -> list:
        """The model's lists of transformer blocks (torch.nn.ModuleList), which FSDP shards one by one and
        activation checkpointing wraps; [] where the task declares none."""
        return []

    def tensor_parallel_plan(self, model) -> dict[str, str] | None:
        """{name inside a block: 'colwise' | 'rowwise'}: how tensor parallel splits a block's linear layers
        (Megatron's column- then row-wise split); None where the model states no plan."""
        return None

    def activation_bytes(self, model, cfg, dtype_bytes: int, tp_degree: int) -> tuple[int, str] | None:
        """(bytes, how) of the activations one rank keeps for the backward at its batch, under
        cfg.activation_checkpointing, from the model's shape (`model` may be on the meta device); None
        where the task states no estimate."""
        return None

    def kv_cache_bytes(self, spec: "ModelSpec", cfg, sequences: int, dtype_bytes: int) -> tuple[int, str] | None:
        """(bytes, how) of the KV cache `sequences` sequences of cfg's prompt and output hold at the end of
        their generation (modes generate and serve), each element `dtype_bytes`; None where there is none."""
        return None

    def unsupported_precision(self, precision, device_type: str) -> str | None:
        """Why this task cannot run `precision` on a `device_type` device (a kernel its ops lack), or None."""
        return None

    def formula_flops(self, model, cfg) -> tuple[float, str] | None:
        """FLOPs per sample by the task's standard formula and the formula's name, where it has one
        (MFU then divides it, and the FLOP counter's figure is recorded beside it); None: counted."""
        return None


@dataclass(frozen=True)
class ModelSpec:
    """A named model: its task, how to build it (weights=None / pretrained=False: nothing is ever
    downloaded) and the inputs it takes. `task` may be given by name to register_model."""
    name: str
    task: Task | str
    builder: Callable  # (cfg) -> torch.nn.Module
    default_size: tuple[int, int, int | None] = (224, 224, None)  # width, height, depth
    multiple_of: int = 1
    min_size: int = 1
    square: bool = False
    aliases: tuple[str, ...] = ()
    notes: str = ""
    source: str = "torchvision"

    def check(self, cfg) -> None:
        """Fill the model's default input into `cfg` and refuse inputs it cannot take."""
        self.task.check(self, cfg)

    def build(self, cfg):
        return self.task.build(self, cfg)


def seeded_generator(device, seed: int):
    """The random generator a workload draws its batch from, on its device. On the meta device (the memory
    estimate's trace: shapes only, nothing drawn) a CPU generator, which torch's random ops there accept."""
    import torch
    where = torch.device(device)
    return torch.Generator(device="cpu" if where.type == "meta" else where).manual_seed(seed)


def random_tensor(shape, device, dtype, generator, memory_format=None):
    """randn on the device in float32, then cast: the same values for every dtype and seed."""
    import torch
    t = torch.randn(shape, device=device, dtype=torch.float32, generator=generator).to(dtype)
    return t.contiguous(memory_format=memory_format) if memory_format else t


def first_tensor(output: Any):
    """The first non-empty tensor in a model output (tensor, dict or list), for a finiteness check."""
    import torch
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
