"""The model registry: names, aliases, tasks, default and allowed input shapes, builders.

Every builder passes weights=None / pretrained=False: nothing is ever downloaded.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from bench_core.errors import ConfigError

TASKS = ("classification", "segmentation", "detection", "volumetric")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    task: str
    builder: Callable  # (cfg) -> torch.nn.Module
    default_size: tuple[int, int, int | None] = (224, 224, None)  # width, height, depth
    multiple_of: int = 1
    min_size: int = 1
    square: bool = False
    aliases: tuple[str, ...] = ()
    notes: str = ""
    source: str = "torchvision"

    def check_shape(self, cfg) -> None:
        """Fill the model's default input size and refuse sizes it cannot take."""
        width, height, depth = self.default_size
        cfg.width = cfg.width or width
        cfg.height = cfg.height or height
        if self.task == "volumetric":
            cfg.depth = cfg.depth or depth
        elif cfg.depth is not None:
            raise ConfigError("depth", f"applies to 3D models only; {self.name} is a 2D {self.task} model")
        sides = {"width": cfg.width, "height": cfg.height}
        if self.task == "volumetric":
            sides["depth"] = cfg.depth
        for side, value in sides.items():
            if value < self.min_size:
                raise ConfigError(side, f"{self.name} needs at least {self.min_size} px, got {value}")
            if value % self.multiple_of:
                raise ConfigError(side, f"{self.name} needs a multiple of {self.multiple_of}, got {value}")
        if self.square and cfg.width != cfg.height:
            raise ConfigError("height", f"{self.name} needs a square input (width == height), "
                                        f"got {cfg.width}x{cfg.height}")

    def build(self, cfg):
        return self.builder(cfg)


def count_parameters(model) -> int:
    """The model's parameters, counted once when it is built: every element of model.parameters()
    (trainable or frozen; shared tensors once; buffers such as BatchNorm statistics are not
    parameters), as timm's benchmark.py counts its param_count (timm.utils.count_params)."""
    return sum(p.numel() for p in model.parameters())


# -- builders ------------------------------------------------------------------------

def _torchvision(name: str, **kwargs) -> Callable:
    def build(cfg):
        import torchvision
        return torchvision.models.get_model(name, weights=None, **kwargs)
    return build


def _vit_b_16(cfg):
    import torchvision
    # Adapts the position embedding to the requested size instead of refusing it.
    return torchvision.models.vit_b_16(weights=None, image_size=cfg.width)


def _unet_resnet50(cfg):
    import segmentation_models_pytorch as smp
    return smp.Unet(encoder_name="resnet50", encoder_weights=None, in_channels=3, classes=1)


def _detection(name: str) -> Callable:
    def build(cfg):
        import torchvision
        model = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=91)
        # Detection models resize inside `model.transform`; pin it to the requested size so
        # the benchmark processes exactly the pixels it reports.
        transform = model.transform
        transform.min_size = (min(cfg.width, cfg.height),)
        transform.max_size = max(cfg.width, cfg.height)
        if getattr(transform, "fixed_size", None) is not None:
            transform.fixed_size = (cfg.width, cfg.height)  # torchvision's order: (w, h)
        return model
    return build


def _unet3d(cfg):
    from bench_core.workload.unet3d import UNet3D
    return UNet3D(in_channels=1, out_channels=1, base_features=32, levels=4)


def _timm(name: str) -> Callable:
    def build(cfg):
        import timm
        return timm.create_model(name, pretrained=False, num_classes=1000)
    return build


_CLS = "classification"
REGISTRY: dict[str, ModelSpec] = {spec.name: spec for spec in (
    ModelSpec("resnet50", _CLS, _torchvision("resnet50"), aliases=("resnet",)),
    ModelSpec("convnext_base", _CLS, _torchvision("convnext_base"), aliases=("convnext",)),
    ModelSpec("vgg16", _CLS, _torchvision("vgg16"), min_size=32),
    ModelSpec("efficientnet_v2_m", _CLS, _torchvision("efficientnet_v2_m"), aliases=("efficient_net_v2",)),
    ModelSpec("mobilenet_v3_large", _CLS, _torchvision("mobilenet_v3_large"), aliases=("mobilenet_v3",)),
    ModelSpec("resnext50_32x4d", _CLS, _torchvision("resnext50_32x4d"), aliases=("resnext50",)),
    ModelSpec("swin_b", _CLS, _torchvision("swin_b"), min_size=32, aliases=("swin",),
              notes="windowed attention; pads inputs that are not a multiple of 32"),
    ModelSpec("vit_b_16", _CLS, _vit_b_16, multiple_of=16, min_size=16, square=True, aliases=("vit",),
              notes="built for the requested square size (position embedding adapts); multiple of 16"),
    ModelSpec("resnet18", _CLS, _torchvision("resnet18"), notes="small, for quick CPU runs"),
    ModelSpec("unet_resnet50", "segmentation", _unet_resnet50, multiple_of=32, min_size=32,
              aliases=("unet",), source="segmentation_models_pytorch",
              notes="smp.Unet, resnet50 encoder, 1 class; sides a multiple of 32"),
    ModelSpec("unet3d", "volumetric", _unet3d, default_size=(64, 64, 64), multiple_of=8, min_size=8,
              source="bench_core", notes="3D UNet of the 3D-UNet seed: 4 levels, 32 base features; sides a multiple of 8"),
    ModelSpec("ssd300_vgg16", "detection", _detection("ssd300_vgg16"), default_size=(300, 300, None),
              min_size=300, notes="synthetic boxes/labels; transform pinned to the input size; at least 300 px"),
    ModelSpec("fasterrcnn_resnet50_fpn_v2", "detection", _detection("fasterrcnn_resnet50_fpn_v2"),
              default_size=(800, 800, None), min_size=64, aliases=("fasterrcnn",),
              notes="synthetic boxes/labels; transform pinned to the input size"),
)}

_ALIASES = {alias: spec.name for spec in REGISTRY.values() for alias in spec.aliases}
_BUILTIN = tuple(REGISTRY)  # what `bench models` lists; register_model adds in-process models only


def register_model(spec: ModelSpec) -> ModelSpec:
    """Add a model of your own (in this process), e.g. from a notebook cell before run_benchmark."""
    if spec.task not in TASKS:
        raise ConfigError("task", f"got {spec.task!r}; allowed: {', '.join(TASKS)}")
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
    if inner and prefix == "timm":
        return _timm_spec(inner)
    if inner and prefix == "torchvision":
        return _torchvision_spec(inner)
    allowed = ", ".join(REGISTRY) + ", timm:<name>, torchvision:<name>"
    raise ConfigError("model", f"unknown model {name!r}; allowed: {allowed}")


def _timm_spec(inner: str) -> ModelSpec:
    import timm
    if inner not in timm.list_models():
        raise ConfigError("model", f"timm has no model {inner!r} (see timm.list_models())")
    return ModelSpec(f"timm:{inner}", _CLS, _timm(inner), source="timm")


def _torchvision_spec(inner: str) -> ModelSpec:
    import torchvision
    if inner not in torchvision.models.list_models(module=torchvision.models):
        raise ConfigError("model", f"torchvision has no classification model {inner!r} "
                                   "(see torchvision.models.list_models())")
    return ModelSpec(f"torchvision:{inner}", _CLS, _torchvision(inner))


def model_table() -> list[dict]:
    """What `bench models` prints."""
    rows = []
    for spec in (REGISTRY[name] for name in _BUILTIN):
        width, height, depth = spec.default_size
        size = f"{width}x{height}" + (f"x{depth}" if depth else "")
        rows.append({"name": spec.name, "task": spec.task, "default_input": size,
                     "aliases": ", ".join(spec.aliases), "source": spec.source, "notes": spec.notes})
    rows.append({"name": "timm:<name>", "task": _CLS, "default_input": "224x224", "aliases": "",
                 "source": "timm", "notes": "any timm model, pretrained=False"})
    rows.append({"name": "torchvision:<name>", "task": _CLS, "default_input": "224x224", "aliases": "",
                 "source": "torchvision", "notes": "any torchvision classification model, weights=None"})
    return rows
