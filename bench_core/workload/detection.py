"""The detection family: torchvision's SSD300 and Faster R-CNN (detection) and Mask R-CNN (instance
segmentation) on synthetic images with random boxes and labels, and a random mask per box for Mask
R-CNN. A sample is one image (images/s, MPx/s); the model's own resize is pinned to the requested
size, so it processes exactly the pixels a row reports.

torchvision's box ops lack kernels for some dtypes (MISSING_BOX_KERNELS): a pure cast to one of
them is refused on that device, with the reason; autocast (amp-*) runs those ops in float32.

torch and torchvision are imported where a batch or a model is made (see family.py).
"""
from __future__ import annotations

from typing import Callable

from bench_core.errors import ConfigError
from bench_core.workload.family import ModelSpec, Workload, seeded_generator
from bench_core.workload.vision import ImageTask

DETECTION_CLASSES = 91
BOXES_PER_IMAGE = 4

# The dtypes each device's torchvision box ops have no kernel for, and which ops. Read from torchvision
# 0.29.1: its CUDA kernels (the wheel's fatbinary instantiates nms, roi_align, roi_pool, ps_roi_align,
# ps_roi_pool and deform_conv2d for float, double and Half only: AT_DISPATCH_FLOATING_TYPES_AND_HALF in
# csrc/ops/cuda/nms_kernel.cu) and its CPU kernels (nms: float and double; roi_align: Half too). Every
# detection model calls nms, the R-CNNs roi_align too; a pure cast runs them in its dtype and fails
# ("nms_kernel" not implemented for 'BFloat16'). torchvision registers autocast wrappers that cast their
# inputs to float32, so amp-* runs them. tests/test_instance_segmentation.py checks these entries against
# the installed torchvision.
MISSING_BOX_KERNELS = {
    "cuda": {"bfloat16": ("nms", "roi_align")},
    "cpu": {"bfloat16": ("nms", "roi_align"), "float16": ("nms",)},
}


class DetectionTask(ImageTask):
    """Images as a list (the model batches them itself) with a target dict each: boxes and labels,
    and with `masks` one random binary mask per box (instance segmentation)."""
    family = "detection"
    memory_layout = False  # a list of images, not a 4D batch: channels_last is refused

    def __init__(self, name: str = "detection", masks: bool = False):
        super().__init__(name, target=None)
        self.masks = masks

    def unsupported_precision(self, precision, device_type: str) -> str | None:
        ops = MISSING_BOX_KERNELS.get(device_type, {}).get(precision.cast_dtype or "")
        if not ops:
            return None
        return (f"pure {precision.name} is not run for {self.name} models on {device_type}: torchvision's "
                f"{' and '.join(ops)} {'have' if len(ops) > 1 else 'has'} no {precision.cast_dtype} {device_type} "
                f"kernel; amp-{precision.name} runs {'them' if len(ops) > 1 else 'it'} in float32, as autocast does")

    def check(self, spec: ModelSpec, cfg) -> None:
        super().check(spec, cfg)
        if cfg.channels_last:
            # The model batches its image list itself (model.transform), in NCHW: the layout never
            # reaches the convolutions, so the row would claim what did not run.
            raise ConfigError("channels_last", f"not for detection models ({spec.name} batches its image list "
                                               "itself, in NCHW); allowed: false")

    def make_workload(self, spec: ModelSpec, cfg, device, dtype, rank: int = 0) -> Workload:
        import torch
        generator = seeded_generator(device, cfg.seed + rank)
        w, h = cfg.width, cfg.height
        images = [torch.rand((3, h, w), device=device, generator=generator).to(dtype) for _ in range(cfg.batch_size)]
        targets = [random_target(w, h, device, generator, self.masks) for _ in range(cfg.batch_size)]
        return Workload(images, lambda losses: sum(v.float() for v in losses.values()),
                        lambda m: m(images, targets), lambda m: m(images),
                        trace_call=lambda m: traced_part(m, images, BOXES_PER_IMAGE),
                        trace_note="traced: backbone, heads over the most regions they take; not: choosing the "
                                   "regions (sizes that depend on values)")


def traced_part(model, images, positives: int):
    """What the memory estimate traces of a detector: the images batched as its transform batches them
    (normalized, padded to its size_divisible; the resize is pinned to their size), through the backbone
    (with its FPN) and the first head (R-CNN's RPN convolutions, SSD's head), then R-CNN's box head over
    the regions it takes (the sampler's per image in training, the RPN's proposals in inference) and its
    mask head over the positive ones (in training at least the targets' `positives` boxes, each its own
    positive region: 5 to 16 an image where the random boxes meet proposals by chance, at 512 and 256 px)
    or the detections kept (inference). Choosing the regions (proposals, non-maximum suppression, matching
    to targets) has sizes that depend on values, which fake tensors lack: it is not traced (its tensors
    hold a few numbers per region). An image too small for that many proposals (64 px: about a thousand
    anchors) takes fewer regions than counted here: the estimate is above its step (1.8x at 64 px)."""
    import torch
    from torchvision.ops import roi_align
    step = model.transform.size_divisible
    h, w = images[0].shape[-2:]
    batch = torch.stack(images)
    batch = torch.nn.functional.pad(batch, (0, -w % step, 0, -h % step))
    mean = torch.tensor(model.transform.image_mean, device=batch.device).view(1, -1, 1, 1)
    std = torch.tensor(model.transform.image_std, device=batch.device).view(1, -1, 1, 1)
    features = model.backbone((batch - mean) / std)
    levels = list(features.values()) if isinstance(features, dict) else [features]
    if not hasattr(model, "rpn"):
        return features, model.head(levels)
    heads, sampler = model.roi_heads, model.roi_heads.fg_bg_sampler
    regions = sampler.batch_size_per_image if model.training else model.rpn.post_nms_top_n()
    pool = heads.box_roi_pool
    finest = features[pool.featmap_names[0]]
    scale = finest.shape[-1] / batch.shape[-1]

    def pooled(count: int, size):  # `count` regions of each image, as MultiScaleRoIAlign returns them
        return roi_align(finest, finest.new_zeros((len(images) * count, 5)), size, scale, pool.sampling_ratio)
    boxes = heads.box_predictor(heads.box_head(pooled(regions, pool.output_size)))
    if not heads.has_mask():
        return features, model.rpn.head(levels), boxes
    masks = positives if model.training else heads.detections_per_img
    return features, model.rpn.head(levels), boxes, heads.mask_predictor(heads.mask_head(
        pooled(masks, heads.mask_roi_pool.output_size)))


def random_target(w: int, h: int, device, generator, masks: bool = False) -> dict:
    """BOXES_PER_IMAGE random boxes in a w x h image with random labels (and a random mask per box)."""
    import torch
    n = BOXES_PER_IMAGE
    xy = torch.rand((n, 2), device=device, generator=generator) * torch.tensor([w * 0.6, h * 0.6], device=device)
    wh = torch.rand((n, 2), device=device, generator=generator) * torch.tensor([w * 0.3, h * 0.3], device=device) + 4
    boxes = torch.cat([xy, xy + wh], dim=1)
    labels = torch.randint(1, DETECTION_CLASSES, (n,), device=device, generator=generator)
    target = {"boxes": boxes, "labels": labels}
    if masks:  # each box's pixels, half of them at random: an object's mask lies inside its box
        ys = torch.arange(h, device=device).view(1, h, 1)
        xs = torch.arange(w, device=device).view(1, 1, w)
        inside = (xs >= boxes[:, 0, None, None]) & (xs < boxes[:, 2, None, None]) & \
                 (ys >= boxes[:, 1, None, None]) & (ys < boxes[:, 3, None, None])
        noise = torch.rand((n, h, w), device=device, generator=generator) < 0.5
        target["masks"] = (inside & noise).to(torch.uint8)
    return target


DETECTION = DetectionTask()
INSTANCE_SEGMENTATION = DetectionTask("instance-segmentation", masks=True)
TASKS = (DETECTION, INSTANCE_SEGMENTATION)


def _detection(name: str) -> Callable:
    def build(cfg):
        import torchvision
        model = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=DETECTION_CLASSES)
        # Detection models resize inside `model.transform`; pin it to the requested size so
        # the benchmark processes exactly the pixels it reports.
        transform = model.transform
        transform.min_size = (min(cfg.width, cfg.height),)
        transform.max_size = max(cfg.width, cfg.height)
        if getattr(transform, "fixed_size", None) is not None:
            transform.fixed_size = (cfg.width, cfg.height)  # torchvision's order: (w, h)
        return model
    return build


MODELS = (
    ModelSpec("ssd300_vgg16", DETECTION, _detection("ssd300_vgg16"), default_size=(300, 300, None),
              min_size=300, notes="synthetic boxes/labels; transform pinned to the input size; at least 300 px"),
    ModelSpec("fasterrcnn_resnet50_fpn_v2", DETECTION, _detection("fasterrcnn_resnet50_fpn_v2"),
              default_size=(800, 800, None), min_size=64, aliases=("fasterrcnn",),
              notes="synthetic boxes/labels; transform pinned to the input size"),
    ModelSpec("maskrcnn_resnet50_fpn_v2", INSTANCE_SEGMENTATION, _detection("maskrcnn_resnet50_fpn_v2"),
              default_size=(800, 800, None), min_size=64, aliases=("maskrcnn",),
              notes="instance segmentation: synthetic boxes/labels and a random mask per box; transform pinned to "
                    "the input size"),
)
