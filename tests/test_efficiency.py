"""Efficiency columns: FLOPs, the measured CPU peak and MFU on real runs; energy per sample,
cost and noise flags from derive(); `bench peak`."""
import json

import pytest

from bench_core import cli, run_benchmark

from bench_core.measure import efficiency, flops, mfu_peak
from bench_core.measure import noise


@pytest.fixture(scope="module")
def peak_cache(tmp_path_factory):
    """A fresh per-module peak cache: the first run measures the CPU peak, later ones reuse it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield mfu_peak.cache_path()


@pytest.fixture(scope="module")
def cpu_rows(peak_cache):
    from conftest import tiny
    return [row for mode in ("train", "infer")
            for row in run_benchmark(tiny(mode=mode, steps=3, price_per_hour=0.5))]


def test_every_cpu_row_has_flops_a_measured_peak_and_mfu(cpu_rows, peak_cache):
    assert [r["status"] for r in cpu_rows] == ["ok", "ok"]
    for row in cpu_rows:
        assert row["flops_per_sample"] > 0 and row["achieved_tflops"] > 0
        assert row["peak_tflops"] > 0
        assert row["peak_source"].startswith("measured: ") and " float32, " in row["peak_source"]
        assert f"{row['threads']} threads" in row["peak_source"]
        assert 0 < row["mfu"] < 1
        assert row["mfu"] == pytest.approx(row["achieved_tflops"] / row["peak_tflops"])
    train, infer = cpu_rows
    assert train["flops_per_sample"] > 2 * infer["flops_per_sample"]  # forward + backward
    assert len(json.loads(peak_cache.read_text())) == 1  # measured once, then cached


def test_cpu_rows_say_why_gpu_and_energy_columns_are_empty(cpu_rows):
    for row in cpu_rows:
        for col in ("gpu_util_pct_mean", "sm_clock_mhz_mean", "gpu_mem_used_bytes", "gpu_temp_c_max",
                    "throttle_reasons"):
            assert row[col] is None
        assert "gpu columns empty: device is cpu" in row["telemetry_note"]
        if row["energy_method"] is None:  # no readable RAPL (as on this CI machine)
            assert "energy empty: " in row["telemetry_note"]
            assert row["samples_per_j"] is None and row["j_per_1k_samples"] is None
        else:
            assert row["energy_method"] == "rapl" and row["samples_per_j"] > 0
        assert row["cpu_util_pct_mean"] > 0


def test_cost_per_million_samples(cpu_rows):
    for row in cpu_rows:
        assert row["cost_per_million_samples"] == pytest.approx(0.5 / (row["samples_per_s"] * 3600) * 1e6)


def measured(**values):
    """A finished row's measured columns (what the runner has before derive())."""
    row = {"device_type": "cuda", "device_name": "NVIDIA A100-SXM4-80GB", "precision": "amp-bf16",
           "world_size": 2, "samples_per_s": 2000.0, "samples_per_s_per_device": 1000.0, "timed_s": 10.0,
           "flops_per_sample": 3 * 4.1e9, "step_time_cv": 0.02, "energy_j": 4000.0, "power_w_mean": 400.0,
           "sm_clock_mhz_mean": 1400.0, "sm_clock_mhz_min": 1395.0}
    row.update(values)
    return row


def test_gpu_mfu_uses_the_dense_table_peak_of_the_precision_used(tiny_config):
    out = efficiency.derive(measured(), tiny_config())
    assert out["peak_tflops"] == 312 and "dense bf16" in out["peak_source"]
    assert out["achieved_tflops"] == pytest.approx(3 * 4.1e9 * 2000 / 1e12)
    assert out["mfu"] == pytest.approx(out["achieved_tflops"] / (312 * 2))
    strict = efficiency.derive(measured(precision="fp32"), tiny_config())
    assert strict["peak_tflops"] == 19.5  # strict fp32: non-tensor FP32 units


def test_unknown_gpu_leaves_mfu_empty_with_a_note(tiny_config):
    out = efficiency.derive(measured(device_name="NVIDIA TITAN Xp"), tiny_config())
    assert out.get("mfu") is None and out["peak_tflops"] is None
    assert "unknown GPU 'NVIDIA TITAN Xp'" in out["peak_source"]


def test_energy_per_sample_is_per_device(tiny_config):
    out = efficiency.derive(measured(), tiny_config())
    assert out["samples_per_j"] == pytest.approx(1000.0 * 10.0 / 4000.0)
    assert out["j_per_1k_samples"] == pytest.approx(1000 / 2.5)
    assert out["samples_per_s_per_w"] == pytest.approx(1000.0 / 400.0)
    assert "cost_per_million_samples" not in out  # no price given


def test_cost_counts_every_device(tiny_config):
    out = efficiency.derive(measured(), tiny_config(price_per_hour=2.0))
    assert out["cost_per_million_samples"] == pytest.approx(2.0 * 2 / (2000.0 * 3600) * 1e6)


def test_a_clean_row_has_no_flags(tiny_config):
    assert efficiency.derive(measured(), tiny_config())["noise_flags"] is None


def test_noise_flags_are_collected_never_dropped(tiny_config):
    row = measured(step_time_cv=0.25, timed_steps=4, sm_clock_mhz_min=1000.0, timed_s=0.4,
                   noise_flags="other-processes-on-device(pid 4242)",
                   throttle_reasons="gpu_idle;sw_thermal_slowdown")
    flags = efficiency.derive(row, tiny_config(min_seconds=1.0))["noise_flags"].split(";")
    assert flags[0] == "other-processes-on-device(pid 4242)"
    assert "throttle(sw_thermal_slowdown)" in flags
    assert any(f.startswith("clock-drop(min 1000 < 0.9 x mean 1400") for f in flags)
    assert f"noisy-window(CV/sqrt(steps) 0.125 > {noise.WINDOW_SE_THRESHOLD})" in flags
    assert "short-window(0.40 s < min_seconds 1)" in flags


def test_a_long_window_absorbs_step_jitter_a_short_one_is_flagged(tiny_config):
    """The same step-time CV: fine over 100 steps (CV/10), flagged over 4 (CV/2)."""
    assert efficiency.derive(measured(step_time_cv=0.2, timed_steps=100), tiny_config())["noise_flags"] is None
    assert "noisy-window" in efficiency.derive(measured(step_time_cv=0.2, timed_steps=4), tiny_config())["noise_flags"]


def test_repeats_that_disagree_flag_every_row_of_the_configuration():
    steady = [{"status": "ok", "samples_per_s": v, "noise_flags": None} for v in (100.0, 102.0, 99.0)]
    noise.flag_unstable_repeats(steady)
    assert all(r["noise_flags"] is None for r in steady)
    shaky = [{"status": "ok", "samples_per_s": v, "noise_flags": f} for v, f in ((100.0, None), (70.0, "x(1)"),
                                                                                 (101.0, None))]
    noise.flag_unstable_repeats(shaky)
    assert all("unstable-repeats(CV 0." in r["noise_flags"] for r in shaky)
    assert shaky[1]["noise_flags"].startswith("x(1);unstable-repeats")
    two = [{"status": "ok", "samples_per_s": v, "noise_flags": None} for v in (100.0, 50.0)]
    noise.flag_unstable_repeats(two)  # two repeats: no CV worth the name
    assert all(r["noise_flags"] is None for r in two)


def test_cpu_peak_not_measured_when_told_not_to(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    peak = mfu_peak.peak_for("cpu", "x", "bf16", threads=1, measure=False)
    assert peak.tflops is None and "run `bench peak`" in peak.source
    assert mfu_peak.peak_for("mps", "Apple MPS", "fp32").tflops is None


def test_bench_peak_measures_once_then_reads_the_cache(peak_cache, capsys, monkeypatch):
    # A quiet machine: the suite's own workers can push the load average past the busy mark, and a
    # peak measured under load is measured again (tests/test_capability.py checks that rule).
    monkeypatch.setattr(mfu_peak.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert cli.main(["peak", "--precision", "fp32", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first[0]["precision"] == "fp32" and first[0]["peak_tflops"] > 0
    assert first[0]["peak_source"].startswith("measured: ")
    assert cli.main(["peak", "--precision", "fp32", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == first


@pytest.mark.parametrize("argv, field", [(["peak", "--precision", "fp8"], "precision"),
                                         (["peak", "--precision", "tf32"], "precision"),
                                         (["peak", "--threads", "0"], "threads"),
                                         (["peak", "--device", "gpu"], "device")])
def test_bench_peak_bad_input_is_one_line_exit_2(argv, field, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"bench peak: error: {field}: ") and "\n" not in err
    assert not (tmp_path / "notebook-bench" / "cpu_peak.json").exists()


@pytest.mark.parametrize("groups", [1, 8])
def test_conv_backward_counts_twice_the_forward_also_when_grouped(groups):
    import torch
    conv = torch.nn.Conv2d(8, 16, 3, groups=groups)  # groups=8: a depthwise-style conv
    x = torch.randn(2, 8, 16, 16, requires_grad=True)
    with torch.no_grad():
        forward = flops.count_flops(lambda: conv(x)).flops
    assert flops.count_flops(lambda: conv(x).sum().backward()).flops == 3 * forward


def mobilenet():
    """MobileNet V3 as the benchmark builds it (depthwise convs), on 32 px images: (model, model ->
    training output, model -> inference output, training output -> loss), as a workload has them."""
    import torch

    from bench_core import BenchConfig
    from bench_core.workload.models import resolve_model
    cfg = BenchConfig(model="mobilenet_v3_large", width=32, height=32, batch_size=2, device="cpu")
    spec = resolve_model(cfg.model)
    work = spec.task.make_workload(spec, cfg, torch.device("cpu"), torch.float32)
    return spec.build(cfg), work.train_call, work.infer_call, work.loss


def causal_lm():
    """A one-block causal LM in nanoGPT's shape (torch's fused attention), at toy size: the text models'
    attention path without transformers' import (3 s)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class TinyLM(nn.Module):
        def __init__(self, vocab=100, width=32, heads=4):
            super().__init__()
            self.heads = heads
            self.embed, self.norm, self.head = nn.Embedding(vocab, width), nn.LayerNorm(width), nn.Linear(width, vocab)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def forward(self, ids):
            x = self.embed(ids)
            b, t, c = x.shape
            q, k, v = (y.view(b, t, self.heads, -1).transpose(1, 2) for y in self.qkv(self.norm(x)).split(c, dim=2))
            x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c))
            return self.head(x + self.mlp(x))
    ids = torch.randint(0, 100, (2, 16))
    return TinyLM(), lambda net: net(ids), lambda net: net(ids), \
        lambda logits: F.cross_entropy(logits.flatten(0, 1), ids.flatten())


@pytest.mark.parametrize("build", [mobilenet, causal_lm])
def test_the_count_is_torchs_flop_counter_total_with_our_formula_fixes(build):
    """count_flops counts in a dispatch mode of its own, without FlopCounterMode's module tracker: its
    total is what torch's counter, given the same fixes, counts over the same training and inference
    steps."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    net, train_call, infer_call, loss = build()

    def train():
        net.zero_grad(set_to_none=True)
        loss(train_call(net)).backward()

    def infer():
        with torch.inference_mode():
            infer_call(net)
    for mode, step in (("train", train), ("infer", infer)):
        net.train(mode == "train")
        with FlopCounterMode(display=False, custom_mapping=flops.formula_fixes()) as torchs:
            step()
        counted = flops.count_flops(step)
        assert counted.flops == torchs.get_total_flops() > 0, mode
        if build is causal_lm:  # the CPU attention kernel, counted by our formula
            assert counted.attention_kernels == ("flash (cpu)",), mode
            assert torch.ops.aten._scaled_dot_product_flash_attention_for_cpu in torchs.get_flop_counts()["Global"]


def test_an_embedding_lookup_and_its_sparse_update_move_the_rows_they_touch_not_the_table():
    """A DLRM step reads 4096 rows of 26 tables of 500,000: counting each table whole put 182 MB a sample
    against the memory bandwidth, and a CPU run's "at most" for the H200 fell below what the H200 measured.
    The lookup reads the rows its indices name; the sparse gradient and SGD's update touch those rows."""
    import torch
    from torch import nn
    rows, dim, lookups = 100_000, 64, 32
    for table in (nn.EmbeddingBag(rows, dim, mode="sum", sparse=True), nn.Embedding(rows, dim, sparse=True)):
        optimizer = torch.optim.SGD(table.parameters(), lr=0.1)
        ids = torch.randint(0, rows, (lookups, 1))

        def step():
            table(ids).sum().backward()
            optimizer.step()
        counted = flops.count_flops(step)
        moved = counted.flop_op_bytes + counted.other_bytes
        row = dim * 4
        assert lookups * row < moved < 40 * lookups * row, (type(table).__name__, moved)  # a few passes over the rows
        assert moved < rows * row / 10  # far from the table's 25.6 MB
