"""The vision family: 2D image classification and segmentation (torchvision, timm,
segmentation_models_pytorch). A sample is one image (images/s); width and height in px shape it,
and MPx/s is its size-aware rate.

torch and the model libraries are imported where a batch or a model is made (see family.py).
"""
from __future__ import annotations

from typing import Callable

from bench_core.errors import ConfigError
from bench_core.workload.family import ModelSpec, Task, Workload, random_tensor, seeded_generator

NUM_CLASSES = 1000


class ImageTask(Task):
    """A 2D image task: a batch of 3 x height x width images and the task's target."""
    family = "vision"
    sample = "image"
    unit = "images/s"
    shape_fields = ("width", "height")
    memory_layout = True

    def __init__(self, name: str, target: Callable):
        self.name = name
        self.description = f"a 2D {name} model"
        self.target = target  # (images, generator) -> the loss of a model output against a random target

    def check(self, spec: ModelSpec, cfg) -> None:
        width, height, _ = spec.default_size
        cfg.width = cfg.width or width
        cfg.height = cfg.height or height
        super().check(spec, cfg)
        check_sides(spec, {"width": cfg.width, "height": cfg.height})
        if spec.square and cfg.width != cfg.height:
            raise ConfigError("height", f"{spec.name} needs a square input (width == height), "
                                        f"got {cfg.width}x{cfg.height}")

    def default_input(self, spec: ModelSpec) -> str:
        return f"{spec.default_size[0]}x{spec.default_size[1]}"

    def sample_shape(self, cfg) -> str:
        return f"3x{cfg.height}x{cfg.width}"

    def throughput_columns(self, cfg, samples_per_s: float) -> dict:
        return {"mpx_per_s": cfg.width * cfg.height * samples_per_s / 1e6, "mvox_per_s": None}

    def make_workload(self, spec: ModelSpec, cfg, device, dtype, rank: int = 0) -> Workload:
        import torch
        generator = seeded_generator(device, cfg.seed + rank)
        x = random_tensor((cfg.batch_size, 3, cfg.height, cfg.width), device, dtype, generator,
                          torch.channels_last if cfg.channels_last else None)
        return Workload(x, self.target(x, generator), lambda m: m(x), lambda m: m(x))


def class_labels(x, generator):
    """Cross-entropy against a random class per image."""
    import torch
    import torch.nn.functional as F
    y = torch.randint(0, NUM_CLASSES, (x.shape[0],), device=x.device, generator=generator)
    return lambda out: F.cross_entropy(out.float(), y)


def pixel_mask(x, generator):
    """Binary cross-entropy against a random one-channel mask of the image's size."""
    import torch
    import torch.nn.functional as F
    target = torch.rand((x.shape[0], 1, *x.shape[2:]), device=x.device, generator=generator)
    return lambda out: F.binary_cross_entropy_with_logits(out.float(), target)


def check_sides(spec: ModelSpec, sides: dict[str, int]) -> None:
    """Each side at least the model's minimum and a multiple of what it needs."""
    for side, value in sides.items():
        if value < spec.min_size:
            raise ConfigError(side, f"{spec.name} needs at least {spec.min_size} px, got {value}")
        if value % spec.multiple_of:
            raise ConfigError(side, f"{spec.name} needs a multiple of {spec.multiple_of}, got {value}")


CLASSIFICATION = ImageTask("classification", class_labels)
SEGMENTATION = ImageTask("segmentation", pixel_mask)
TASKS = (CLASSIFICATION, SEGMENTATION)


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


def _timm(name: str) -> Callable:
    def build(cfg):
        import timm
        return timm.create_model(name, pretrained=False, num_classes=NUM_CLASSES)
    return build


_CLS = CLASSIFICATION
MODELS = (
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
    ModelSpec("unet_resnet50", SEGMENTATION, _unet_resnet50, multiple_of=32, min_size=32,
              aliases=("unet",), source="segmentation_models_pytorch",
              notes="smp.Unet, resnet50 encoder, 1 class; sides a multiple of 32"),
)


# -- any timm or torchvision model by name -------------------------------------------------

def timm_spec(inner: str) -> ModelSpec:
    import timm
    names = timm.list_models()
    if inner not in names:
        raise ConfigError("model", f"timm has no model {inner!r}{closest(inner, names, 'timm:')}; find one with "
                                   "bench models --search 'timm:*resnet*'")
    return ModelSpec(f"timm:{inner}", _CLS, _timm(inner), source="timm")


def torchvision_spec(inner: str) -> ModelSpec:
    import torchvision
    names = torchvision.models.list_models(module=torchvision.models)
    if inner not in names:
        raise ConfigError("model", f"torchvision has no classification model {inner!r}"
                                   f"{closest(inner, names, 'torchvision:')}; find one with "
                                   "bench models --search 'torchvision:*'")
    return ModelSpec(f"torchvision:{inner}", _CLS, _torchvision(inner))


def closest(name: str, names, prefix: str) -> str:
    """' (did you mean timm:resnet18?)' from a library's model names: difflib, and names without the '_'
    a user may have put in (resnet_18)."""
    import difflib
    folded = {n.replace("_", ""): n for n in names}
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.75)
    close += [folded[n] for n in difflib.get_close_matches(name.replace("_", ""), list(folded), n=3, cutoff=0.85)]
    close = list(dict.fromkeys(close))[:3]
    return f" (did you mean {' or '.join(prefix + c for c in close)}?)" if close else ""


def _timm_names() -> list[str]:
    import timm
    return timm.list_models()


def _torchvision_names() -> list[str]:
    import torchvision
    return torchvision.models.list_models(module=torchvision.models)


PREFIXES = {"timm": timm_spec, "torchvision": torchvision_spec}
LISTS = {"timm": _timm_names, "torchvision": _torchvision_names}  # what bench models --search looks through
PREFIX_ROWS = (
    {"name": "timm:<name>", "task": "classification", "default_input": "224x224", "aliases": "",
     "source": "timm", "notes": "any timm model, pretrained=False"},
    {"name": "torchvision:<name>", "task": "classification", "default_input": "224x224", "aliases": "",
     "source": "torchvision", "notes": "any torchvision classification model, weights=None"},
)
