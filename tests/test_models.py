"""Every model `bench models` lists runs a train and an infer step on CPU at a small size."""
import pytest

from bench_core import ConfigError, run_benchmark
from bench_core.cli import main as bench
from bench_core.workload.models import REGISTRY, model_table, resolve_model
from conftest import tiny

# The smallest sizes each model accepts (detection and 3D models have their own floors), and a batch of one
# where a model's cost is per image whatever its size (SSD resizes every image to 300 px, the R-CNNs sample
# 512 regions per image). Detection batches of two images run in tests/test_instance_segmentation.py.
SMALL = {"ssd300_vgg16": dict(width=300, height=300, batch_size=1),
         "fasterrcnn_resnet50_fpn_v2": dict(width=64, height=64, batch_size=1),
         "maskrcnn_resnet50_fpn_v2": dict(width=64, height=64, batch_size=1),
         "unet3d": dict(width=16, height=16, depth=16)}
SLOW = {"swin_b", "fasterrcnn_resnet50_fpn_v2", "ssd300_vgg16", "convnext_base", "vgg16", "resnext50_32x4d"}
# Image and 3D models (the tasks that read width); the other families run in their own test files
# (tests/test_text.py, test_recommendation.py, test_diffusion.py, test_speech.py) on tiny configurations of
# the same architectures: llama-8b alone would need 32 GB to build in fp32, DLRM's tables are 6.7 GB.
BUILTIN = [row["name"] for row in model_table() if ":" not in row["name"]
           and "width" in REGISTRY[row["name"]].task.shape_fields]


@pytest.mark.parametrize("mode", ["train", "infer"])
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in BUILTIN])
def test_every_listed_model_runs_both_modes(name, mode):
    cfg = tiny(**{"model": name, "mode": mode, "batch_size": 2, "steps": 1, "warmup_steps": 0, **SMALL.get(name, {})})
    row = run_benchmark(cfg)[0]
    assert row["status"] == "ok", row["message"]
    assert row["samples_per_s"] > 0 and row["loss_finite"]
    if REGISTRY[name].task.name == "volumetric":
        assert row["mvox_per_s"] > 0 and row["mpx_per_s"] is None and row["throughput_unit"] == "volumes/s"
    else:
        assert row["mpx_per_s"] > 0 and row["mvox_per_s"] is None and row["throughput_unit"] == "images/s"


def test_every_listed_model_is_in_bench_models(capsys):
    assert bench(["models", "--json"]) == 0
    import json
    listed = {row["name"] for row in json.loads(capsys.readouterr().out)}
    assert set(BUILTIN) <= listed
    assert {"timm:<name>", "torchvision:<name>", "hf:<model_type>"} <= listed
    assert {row["name"] for row in model_table()} == listed


@pytest.mark.parametrize("alias, name", [("convnext", "convnext_base"), ("efficient_net_v2", "efficientnet_v2_m"),
                                         ("mobilenet_v3", "mobilenet_v3_large"), ("resnext50", "resnext50_32x4d"),
                                         ("swin", "swin_b"), ("vit", "vit_b_16"), ("unet", "unet_resnet50")])
def test_tensorpix_names_are_aliases(alias, name):
    assert resolve_model(alias).name == name


def test_timm_and_torchvision_prefixes_run():
    for model in ("timm:resnet10t", "torchvision:squeezenet1_0"):
        row = run_benchmark(tiny(model=model, mode="infer"))[0]
        assert row["status"] == "ok", row["message"]
        assert row["model"] == model


@pytest.mark.parametrize("changes, field", [
    (dict(model="vit_b_16", width=64, height=32), "height"),      # square only
    (dict(model="vit_b_16", width=40, height=40), "width"),       # multiple of 16
    (dict(model="unet_resnet50", width=48, height=48), "width"),  # multiple of 32
    (dict(model="ssd300_vgg16", width=128, height=128), "width"), # at least 300
    (dict(model="maskrcnn", width=32, height=64), "width"),       # at least 64
    (dict(model="resnet18", depth=8), "depth"),                   # 2D model
    (dict(model="timm:no_such_model"), "model"),
    (dict(model="torchvision:no_such_model"), "model"),
])
def test_sizes_a_model_cannot_take_are_refused(changes, field):
    with pytest.raises(ConfigError) as err:
        tiny(**changes)
    assert err.value.field == field


def test_vit_adapts_to_the_requested_size():
    row = run_benchmark(tiny(model="vit_b_16", width=32, height=32, mode="infer"))[0]
    assert row["status"] == "ok" and row["input_shape"] == "3x32x32"


@pytest.mark.parametrize("name", ["ssd300_vgg16", "fasterrcnn_resnet50_fpn_v2", "maskrcnn_resnet50_fpn_v2"])
def test_detection_models_process_the_size_they_report(name):
    # torchvision resizes inside the model; the benchmark must run at the size it reports.
    import torch
    cfg = tiny(model=name, **{"ssd300_vgg16": dict(width=320, height=304)}.get(name, dict(width=96, height=64)))
    model = resolve_model(name).build(cfg).eval()
    images, _ = model.transform([torch.rand(3, cfg.height, cfg.width)])
    assert images.image_sizes[0] == (cfg.height, cfg.width)


@pytest.mark.parametrize("model, suggested", [("resnet19", "did you mean resnet18"),
                                              ("timm:resnet_18", "did you mean timm:resnet18"),
                                              ("torchvision:resnet_18", "did you mean torchvision:resnet18"),
                                              ("llama1b", "did you mean llama-1b"), ("hf:lama", "did you mean hf:llama")])
def test_a_mistyped_model_gets_the_closest_names(capsys, model, suggested):
    assert bench(["run", "--model", model, "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("bench run: error: model: ") and suggested in err, err


def test_bench_models_searches_the_libraries_by_pattern(capsys):
    assert bench(["models", "--search", "timm:resnet1*"]) == 0
    found = capsys.readouterr().out.split()
    assert "timm:resnet18" in found and all(name.startswith("timm:resnet1") for name in found)
    assert bench(["models", "--search", "llama", "--json"]) == 0
    import json
    assert "hf:llama" in json.loads(capsys.readouterr().out)
