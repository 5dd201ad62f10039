"""Instance segmentation (Mask R-CNN in the detection family: random masks in its targets) and the
pure casts torchvision's box ops cannot run (issue 28, defect 8): refused with the reason where the
device is known, and the table of missing kernels checked against the installed torchvision."""
import re
import types
from pathlib import Path

import pytest
import torch

from bench_core import BenchConfig, ConfigError, run_benchmark
from bench_core.cli import main as bench
from bench_core.devices import check_runnable
from bench_core.workload.detection import (BOXES_PER_IMAGE, DETECTION, INSTANCE_SEGMENTATION, MISSING_BOX_KERNELS,
                                           random_target)
from bench_core.workload.models import resolve_model
from bench_core.workload.precision import resolve_precision
from bench_core.workload.vision import CLASSIFICATION

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


# -- pure casts and torchvision's box ops (issue 28, defect 8) -------------------------------------

@pytest.mark.parametrize("task", [DETECTION, INSTANCE_SEGMENTATION])
def test_pure_bf16_is_refused_on_cuda_and_pure_fp16_runs_there(task):
    reason = task.unsupported_precision(resolve_precision("bf16"), "cuda")
    assert reason == (f"pure bf16 is not run for {task.name} models on cuda: torchvision's nms and roi_align have no "
                      "bfloat16 cuda kernel; amp-bf16 runs them in float32, as autocast does")
    for allowed in ("fp16", "amp-bf16", "amp-fp16", "fp32", "tf32"):
        assert task.unsupported_precision(resolve_precision(allowed), "cuda") is None, allowed
    assert "nms has no float16 cpu kernel" in task.unsupported_precision(resolve_precision("fp16"), "cpu")
    assert task.unsupported_precision(resolve_precision("bf16"), "mps") is None  # not known there: not refused
    assert CLASSIFICATION.unsupported_precision(resolve_precision("bf16"), "cuda") is None


@pytest.fixture
def one_h100(monkeypatch):
    """A stand-in for one CUDA device (an H100's properties): drives the device checks, no GPU needed."""
    props = types.SimpleNamespace(major=9, minor=0, name="NVIDIA H100 80GB HBM3", total_memory=80 * 2**30)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)


@pytest.mark.parametrize("device", ["cuda", "auto"])
def test_bench_run_refuses_pure_bf16_detection_on_a_gpu_before_anything_runs(one_h100, device):
    with pytest.raises(ConfigError) as err:
        check_runnable(BenchConfig(model="maskrcnn", precision="bf16", device=device))
    assert err.value.field == "precision" and "nms and roi_align have no bfloat16 cuda kernel" in str(err.value)
    check_runnable(BenchConfig(model="maskrcnn", precision="fp16", device=device))  # Half kernels exist
    check_runnable(BenchConfig(model="resnet18", precision="bf16", device=device))  # no box ops


def test_a_run_of_an_unrunnable_pure_cast_is_an_unsupported_row_with_the_reason():
    # The runner's own check (Session.open), as a sweep meets it: one row, nothing built.
    row, = run_benchmark(BenchConfig(**{**MASKRCNN, "precision": "bf16"}))
    assert row["status"] == "unsupported" and row["precision_support"] == "unsupported"
    assert row["message"].startswith("pure bf16 is not run for instance-segmentation models on cpu: torchvision's nms "
                                     "and roi_align have no bfloat16 cpu kernel")


def test_bench_run_refuses_it_in_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert bench(["run", "--model", "fasterrcnn", "--width", "64", "--height", "64", "--precision", "fp16",
                  "--device", "cpu", "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench run: error: precision: pure fp16 is not run for detection "
                                                   "models on cpu: torchvision's nms has no float16 cpu kernel")
    assert not out.exists()


DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def cpu_missing() -> dict:
    """{dtype: ops} that fail on this CPU with the installed torchvision."""
    from torchvision.ops import nms, roi_align
    boxes, scores = torch.tensor([[0, 0, 8, 8], [1, 1, 9, 9.]]), torch.tensor([.9, .8])
    image, rois = torch.rand(1, 2, 8, 8), torch.tensor([[0, 0, 0, 4, 4.]])
    calls = {"nms": lambda t: nms(boxes.to(t), scores.to(t), .5),
             "roi_align": lambda t: roi_align(image.to(t), rois.to(t), 2)}
    missing = {}
    for name, dtype in DTYPES.items():
        for op, call in calls.items():
            try:
                call(dtype)
            except RuntimeError as exc:
                assert "not implemented for" in str(exc), exc
                missing[name] = (*missing.get(name, ()), op)
    return missing


def test_the_cpu_entries_are_what_the_installed_torchvision_lacks():
    assert cpu_missing() == MISSING_BOX_KERNELS["cpu"]


# The mangled names of the CUDA kernels the wheel instantiates: <op>_kernel_impl<T>, T one of these.
CUDA_KERNEL = re.compile(rb"(nms|roi_align_forward)_kernel_implI(N3c104HalfE|N3c108BFloat16E|f|d)E")
MANGLED = {b"N3c104HalfE": "float16", b"N3c108BFloat16E": "bfloat16", b"f": "float32", b"d": "float64"}


def test_the_cuda_entries_are_what_the_installed_torchvisions_cuda_kernels_lack():
    import torchvision
    found: dict[str, set] = {}
    for library in Path(torchvision.__file__).parent.glob("_C*.so"):
        for op, dtype in CUDA_KERNEL.findall(library.read_bytes()):
            found.setdefault(op.decode().removesuffix("_forward"), set()).add(MANGLED[dtype])
    if not found:
        pytest.skip("this torchvision has no CUDA kernels (a CPU-only build)")
    assert found == {"nms": {"float32", "float64", "float16"}, "roi_align": {"float32", "float64", "float16"}}
    missing = {name: tuple(op for op in ("nms", "roi_align") if name not in found[op]) for name in DTYPES}
    assert {name: ops for name, ops in missing.items() if ops} == MISSING_BOX_KERNELS["cuda"]
