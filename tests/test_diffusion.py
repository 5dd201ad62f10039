"""Diffusion workloads: diffusers denoisers built offline from configurations, trained in images/s
and run as guided denoising steps in denoising steps/s, with images/s at a stated number of steps;
FLOPs from the counter (attention included); every bad input refused in one line."""
import json
import socket

import pytest
import torch

from bench_core import BenchConfig, run_benchmark
from bench_core.cli import main as bench
from bench_core.measure import flops
from bench_core.workload.models import resolve_model

TINY_DIFFUSION = dict(batch_size=2, steps=3, warmup_steps=1, repeats=1, min_seconds=0, device="cpu")


def run_one(model, **changes) -> dict:
    rows = run_benchmark(BenchConfig(**{**TINY_DIFFUSION, "model": model, **changes}))
    assert rows[0]["status"] == "ok", rows[0]["message"]
    return rows[0]


def test_bench_models_lists_the_diffusion_models_at_their_published_sizes(capsys):
    assert bench(["models", "--json"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    # SD 1.5's UNet: 859.52M (860M as published). DiT-XL/2 is 675M in its paper; diffusers' block keeps
    # its own copy of the timestep and class embedders (28 x 2.78M more), counted here as built.
    assert listed["sd15-unet"]["params"] == pytest.approx(860e6, rel=0.001)
    assert listed["dit-xl-2"]["params"] == pytest.approx(675e6 + 27 * 2.78e6, rel=0.002)
    for name in ("sd15-unet", "dit-xl-2", "sd-unet-tiny", "dit-tiny"):
        assert listed[name]["task"] == "diffusion" and listed[name]["source"] == "diffusers"
    assert listed["sd15-unet"]["default_input"] == "latent 64 (512 px)"
    assert listed["dit-xl-2"]["default_input"] == "latent 32 (256 px)"


@pytest.mark.parametrize("model", ["sd-unet-tiny", "dit-tiny"])
def test_a_tiny_denoiser_trains_in_images_per_second_with_counted_flops(model):
    row = run_one(model, latent_size=8)
    assert row["task"] == "diffusion" and row["throughput_unit"] == "images/s" == row["sample_unit"]
    assert row["throughput"] == row["samples_per_s"] == pytest.approx(2 * row["timed_steps"] / row["timed_s"])
    assert row["input_shape"] == "4x8x8 latent (64 px)" and row["latent_size"] == 8
    assert row["loss_finite"] and row["loss_final"] > 0 and row["images_per_s"] is None
    assert row["flops_method"].startswith("counted") and row["flops_per_sample"] == row["flops_per_sample_counted"]
    assert row["attn_implementation"] == "sdpa" and row["attention_kernel"] == "flash (cpu)"
    assert 0 < row["mfu"] <= 1


@pytest.mark.parametrize("model", ["sd-unet-tiny", "dit-tiny"])
def test_inference_steps_per_second_over_the_steps_is_images_per_second(model):
    batch, steps = 2, 4
    row = run_one(model, mode="infer", latent_size=8, denoise_steps=steps, batch_size=batch)
    assert row["throughput_unit"] == "denoising steps/s" == row["sample_unit"]
    # a timed step is one guided denoising step of the whole batch: batch images advance one step
    steps_per_s = batch * row["timed_steps"] / row["timed_s"]
    assert row["denoise_steps_per_s"] == row["throughput"] == pytest.approx(steps_per_s, rel=1e-9)
    assert row["images_per_s"] * steps == pytest.approx(row["denoise_steps_per_s"], rel=1e-9)
    assert row["input_shape"] == f"4x8x8 latent (64 px), CFG, {steps} steps" and row["denoise_steps"] == steps
    assert row["flops_method"].startswith("counted") and 0 < row["mfu"] <= 1


def test_a_guided_step_calls_the_denoiser_on_both_halves_at_once():
    cfg = BenchConfig(**{**TINY_DIFFUSION, "model": "sd-unet-tiny", "mode": "infer", "batch_size": 3})
    spec = resolve_model(cfg.model)
    model = spec.build(cfg).eval()
    seen = []
    model.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape[0]))
    workload = spec.task.make_workload(spec, cfg, torch.device("cpu"), torch.float32)
    with torch.inference_mode():
        out = workload.infer_call(model)
    assert seen == [6] and tuple(out.shape) == (3, 4, 8, 8)  # 2 x batch latents in, one guided prediction per image


@pytest.mark.parametrize("model", ["sd-unet-tiny", "dit-tiny"])
def test_the_flop_counter_covers_the_attention_kernel_these_models_run(model):
    # With the math backend SDPA is plain matmuls, which torch counts itself: the fused kernel's
    # count must match it (forward exactly; backward within the flash kernel's recomputation).
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for mode, margin in (("infer", 1e-9), ("train", 0.02)):
        cfg = BenchConfig(**{**TINY_DIFFUSION, "model": model, "mode": mode})
        spec = resolve_model(cfg.model)
        net = spec.build(cfg).train(mode == "train")
        work = spec.task.make_workload(spec, cfg, torch.device("cpu"), torch.float32)

        def step():
            if mode == "train":
                work.loss(work.train_call(net)).backward()
            else:
                with torch.inference_mode():
                    work.infer_call(net)
        fused = flops.count_flops(step)
        with sdpa_kernel(SDPBackend.MATH):
            plain = flops.count_flops(step)
        assert fused.attention_kernels == ("flash (cpu)",), mode
        assert fused.flops == pytest.approx(plain.flops, rel=margin), mode


def test_dit_xl_2_forward_counts_the_papers_flops():
    # DiT (Peebles & Xie 2023), table 4: DiT-XL/2 at 256 px, 118.6 Gflops per forward: multiply-adds,
    # so 2 x 118.6e9 FLOPs in our convention. Counted on the meta device: no memory, no weights.
    cfg = BenchConfig(**{**TINY_DIFFUSION, "model": "dit-xl-2", "mode": "infer", "batch_size": 1})
    spec = resolve_model(cfg.model)
    with torch.device("meta"):
        model = spec.build(cfg)
        x = torch.zeros(1, 4, 32, 32)
        labels = torch.zeros(1, dtype=torch.long)
        counted = flops.count_flops(lambda: model(x, timestep=labels, class_labels=labels))
    assert counted.flops == pytest.approx(2 * 118.6e9, rel=0.002)


@pytest.mark.parametrize("argv, field, words", [
    (["--model", "dit-tiny", "--latent-size", "9"], "latent_size", "cuts the latent into 2x2 patches: a multiple of 2"),
    (["--model", "sd-unet-tiny", "--latent-size", "0"], "latent_size", "must be >= 1"),
    (["--model", "sd-unet-tiny", "--denoise-steps", "20"], "denoise_steps", "applies to mode infer only"),
    (["--model", "sd-unet-tiny", "--mode", "infer", "--denoise-steps", "0"], "denoise_steps", "must be >= 1"),
    (["--model", "sd-unet-tiny", "--mode", "generate"], "mode", "generate does not apply to sd-unet-tiny"),
    (["--model", "sd-unet-tiny", "--width", "64"], "width", "applies to image and 3D models only; sd-unet-tiny is a "
                                                             "diffusion model"),
    (["--model", "resnet18", "--latent-size", "64"], "latent_size", "applies to diffusion models only"),
    (["--model", "gpt2", "--denoise-steps", "50"], "denoise_steps", "applies to diffusion models in infer only"),
])
def test_bad_diffusion_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, argv, field, words):
    out = tmp_path / "out"
    assert bench(["run", *argv, "--device", "cpu", "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bench run: error: {field}: ") and words in lines[0], lines
    assert not out.exists()


def test_a_pure_cast_prints_no_false_alarm_from_diffusers(capfd):
    # diffusers warns at every .to(dtype) that modules "should be kept in float32: []", naming none: in a
    # notebook that is a red box above every half-precision row
    row = run_benchmark(BenchConfig(**{**TINY_DIFFUSION, "model": "dit-tiny", "mode": "infer", "precision": "bf16",
                                       "steps": 1}))[0]
    assert row["status"] == "ok", row["message"]
    assert "kept in float32" not in capfd.readouterr().err


def test_a_unet_takes_a_latent_side_that_is_not_a_multiple_of_its_down_sampling():
    # diffusers sizes each up-sampling to its skip connection, so odd sides run (and are not refused)
    row = run_one("sd-unet-tiny", latent_size=9, steps=1)
    assert row["input_shape"] == "4x9x9 latent (72 px)"


def test_building_diffusion_models_makes_no_network_call(monkeypatch):
    attempts = []

    def refuse(self, address):
        attempts.append(address)
        raise OSError("network blocked in this test")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    for model in ("sd-unet-tiny", "dit-tiny"):
        cfg = BenchConfig(**{**TINY_DIFFUSION, "model": model})
        assert resolve_model(cfg.model).build(cfg) is not None
    assert attempts == []


def test_bench_diff_keeps_two_latent_sizes_apart(tmp_path):
    # A configuration is its whole input: SD at 512 and at 768 px are two, whatever else they share (the
    # same holds for seq_len and every other shape field).
    from bench_core import results, summary
    old, new = tmp_path / "old", tmp_path / "new"
    for side in (8, 16):
        rows = run_benchmark(BenchConfig(**{**TINY_DIFFUSION, "model": "dit-tiny", "mode": "infer",
                                            "latent_size": side, "steps": 1, "repeats": 2}))
        for folder in (old, new):
            results.write_run(folder, rows[0]["run_id"], rows)
    diff = summary.diff_results(old, new)
    assert diff.compared == 2
    assert sorted(diff.table["latent_size_key"]) == ["16", "8"]
