"""Instance segmentation: Mask R-CNN in the detection family, with a random mask per box in its targets."""
import torch

from bench_core import BenchConfig
from bench_core.workload.detection import BOXES_PER_IMAGE, DETECTION, INSTANCE_SEGMENTATION, random_target
from bench_core.workload.models import resolve_model

MASKRCNN = dict(model="maskrcnn", width=64, height=64, batch_size=2, steps=1, warmup_steps=0, min_seconds=0,
                repeats=1, device="cpu")


def test_mask_rcnn_is_its_own_task_and_trains_with_a_mask_loss():
    cfg = BenchConfig(**MASKRCNN)
    spec = resolve_model(cfg.model)
    assert spec.name == "maskrcnn_resnet50_fpn_v2" and spec.task is INSTANCE_SEGMENTATION
    assert spec.task.family == DETECTION.family == "detection" and spec.task.unit == "images/s"
    workload = spec.task.make_workload(spec, cfg, torch.device("cpu"), torch.float32)
    losses = workload.train_call(spec.build(cfg).train())
    assert {"loss_mask", "loss_box_reg", "loss_objectness"} <= set(losses)  # masks reach the model's mask head
    assert torch.isfinite(workload.loss(losses))


def test_the_masks_are_binary_and_lie_inside_their_boxes():
    generator = torch.Generator().manual_seed(0)
    target = random_target(96, 64, torch.device("cpu"), generator, masks=True)
    masks, boxes = target["masks"], target["boxes"]
    assert masks.shape == (BOXES_PER_IMAGE, 64, 96) and masks.dtype == torch.uint8
    assert set(masks.unique().tolist()) <= {0, 1}
    for mask, (x0, y0, x1, y1) in zip(masks, boxes.tolist()):
        ys, xs = mask.nonzero(as_tuple=True)
        assert len(xs) > 0 and xs.min() >= x0 and xs.max() < x1 and ys.min() >= y0 and ys.max() < y1
    assert "masks" not in random_target(96, 64, torch.device("cpu"), generator)  # detection's targets have none
