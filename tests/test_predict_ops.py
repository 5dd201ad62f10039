"""The per-operation path of `bench predict`: a GPU row's profile keeps its ops' table (op_profile), and such a row
is predicted op by op, each op scaled by its own roofline on the target; a row without one takes the whole-step
model. The profile is rehearsed on the CPU (the stand-in busy.py's tests drive); the arithmetic on a table whose
answer can be worked by hand."""
import json
from pathlib import Path

import pytest
import torch

from bench_core.devices import Backend
from bench_core.measure.flops import count_flops
from bench_core.measure.op_table import REUSE_MB, OpKind, cache_hits, from_json, to_json
from bench_core.predict.ceilings import Ceilings
from bench_core.predict.measured import configurations, measured_gpu_bound, predict_dir, profile_of
from bench_core.predict.model import Setup, predict
from bench_core.predict.specs import spec
from bench_core.results.store import iter_rows, write_run
from bench_core.run import busy

from conftest import bench_here

ROOT = Path(__file__).resolve().parents[1]
H200_RUN = ROOT / "gpu" / "runs" / "h200-2026-11-27"


@pytest.fixture(scope="module")
def cpu_profile():
    """A tiny training step (two convolutions, a norm, a linear head, SGD) profiled on the CPU stand-in with its ops
    counted, and what FlopCounterMode's pass counts for the same step."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10))
    x, y = torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2,))
    sgd = torch.optim.SGD(net.parameters(), lr=0.01)

    def step():
        sgd.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(x), y).backward()
        sgd.step()
    step()
    busy_s, _, table = busy.profiled(step, Backend.for_device(torch.device("cpu")), 1, ops=True)
    return busy_s, table, count_flops(step)


def test_the_profile_counts_each_op_as_the_flop_counter_counts_the_whole_step(cpu_profile):
    """The table's FLOPs, bytes and ops add up to what the run's own counters say for the step (flops.py), and each
    kind of op has its measured time; a cache holds no more than the bytes read, more the larger it is."""
    busy_s, table, counted = cpu_profile
    kinds, meta = from_json(table)
    assert meta == {"steps": 1, "busy_s": pytest.approx(busy_s, rel=1e-3), "device": "cpu"}
    assert sum(k.flops for k in kinds) == pytest.approx(counted.flops, rel=1e-4)
    assert sum(k.bytes for k in kinds) == pytest.approx(counted.flop_op_bytes + counted.other_bytes, rel=1e-4)
    assert sum(k.calls for k in kinds) == counted.ops
    assert {"convolution", "convolution_backward", "addmm"} <= {k.op for k in kinds}
    assert all(k.seconds is not None and k.seconds >= 0 for k in kinds) and sum(k.seconds for k in kinds) > 0
    for k in kinds:
        assert all(a <= b for a, b in zip(k.hits, k.hits[1:])) and k.hits[-1] <= k.bytes
    weights = sum(k.hits[-1] for k in kinds)
    assert weights > 0  # the weights are read in the forward, again in the backward and by SGD: the cache holds them


def test_a_table_reads_back_as_written_and_an_unreadable_cell_is_no_table():
    kinds = [OpKind("mm", "bf16", 3, 6e9, 3e7, [1e6] * len(REUSE_MB), 2e-3)]
    back, meta = from_json(to_json(kinds, steps=3, busy_s=0.01, device="cuda"))
    assert meta == {"steps": 3, "busy_s": 0.01, "device": "cuda"}
    assert (back[0].op, back[0].math, back[0].calls, back[0].flops, back[0].seconds) == ("mm", "bf16", 3, 6e9, 2e-3)
    for cell in (None, "", "not json", json.dumps({"format": 99, "ops": []}), "[1, 2]"):
        assert from_json(cell) == ([], {})
    hits = [float(mb) for mb in REUSE_MB]  # a cache between two sizes holds a share between their hits
    assert cache_hits(hits, 2) == 2 and cache_hits(hits, 1000) == REUSE_MB[-1] and cache_hits(hits, None) == 0
    assert 32 < cache_hits(hits, 50) < 64


# A step of three kinds of op whose answer can be worked by hand: a large bf16 matmul (compute-bound on any GPU),
# an elementwise add that moves 2 GB (memory-bound), and a device copy of nothing (carried unchanged).
MATMUL = OpKind("mm", "bf16", 10, 4e13, 1e8, [0.0] * len(REUSE_MB), 0.060)
ADD = OpKind("add", "bf16", 100, 0.0, 2e9, [0.0] * len(REUSE_MB), 0.0008)
OUTSIDE = OpKind("(outside ops)", "other", 0, 0.0, 0.0, [0.0] * len(REUSE_MB), 0.004)
BUSY_S, STEP_S, BATCH = 0.0648, 0.080, 64


def gpu_rows(tmp_path: Path, op_profile: str | None, gpu_busy: float = 0.81) -> Path:
    """A kept H200 row (ResNet-50 AMP) as a run with this op table and this step (batch 64 at STEP_S a step)."""
    base = next(r for r in iter_rows(H200_RUN) if (r["model"], r["precision"]) == ("resnet50", "amp-fp16"))
    row = {**base, "batch_size": BATCH, "samples_per_s": BATCH / STEP_S, "throughput": BATCH / STEP_S,
           "timed_s": STEP_S * 10, "timed_steps": 10, "gpu_busy": gpu_busy, "noise_flags": None,
           "op_profile": op_profile, "channels_last": False}
    if gpu_busy < 0.5:
        row["noise_flags"] = f"host-bound(gpu busy {gpu_busy:.0%})"
    write_run(tmp_path, "gpu", [row])
    return tmp_path


def table_json(*kinds: OpKind) -> str:
    return to_json(list(kinds), steps=3, busy_s=BUSY_S, device="cuda")


def by_hand(source: str, target: str) -> float:
    """The per-op path worked out: each op's time times its roofline on the target over the source's."""
    src, dst = Ceilings(spec(source)), Ceilings(spec(target))
    matmul = MATMUL.seconds * (MATMUL.flops / dst.peak("bf16")) / (MATMUL.flops / src.peak("bf16"))
    add = ADD.seconds * src.bandwidth() / dst.bandwidth()
    ops_before = MATMUL.seconds + ADD.seconds + OUTSIDE.seconds
    device = BUSY_S * (matmul + add + OUTSIDE.seconds) / ops_before
    return BATCH / (STEP_S - BUSY_S + device)


def test_a_gpu_row_with_its_ops_table_is_predicted_op_by_op(tmp_path):
    """From an H200 row to an H100: the matmul takes the two GPUs' measured matmul rates, the add their copy
    bandwidths, the rest is carried; the host's gaps (the step less the GPU's busy time) carry over unchanged."""
    folder = gpu_rows(tmp_path, table_json(MATMUL, ADD, OUTSIDE))
    (same, h100, b200), notes = predict_dir(folder, [spec("H200-SXM-141GB"), spec("H100-SXM5-80GB"), spec("B200")])
    assert not notes and {r["path"] for r in (same, h100, b200)} == {"per op"}
    assert same["predicted"] == pytest.approx(BATCH / STEP_S)  # the same GPU: what was measured
    assert h100["predicted"] == pytest.approx(by_hand("H200-SXM-141GB", "H100-SXM5-80GB"))
    assert b200["predicted"] == pytest.approx(by_hand("H200-SXM-141GB", "B200"))
    assert h100["predicted"] < same["predicted"] < b200["predicted"]  # the H100's slower copies; the B200's matmuls
    assert h100["binds"].startswith("per op (3 kinds of op from the row's profile): compute-bound ")
    assert "the host's gaps (19% of the measured step) carried unchanged" in h100["binds"]
    assert h100["low"] is None and h100["band_text"].startswith("none: the per-op path has no published pairs")
    assert f"the whole-step model puts it at {h100['whole_step']:.4g} images/s" in h100["band_text"]


def test_a_row_without_an_ops_table_takes_the_whole_step_model(tmp_path):
    """An older row, a CPU row or a compiled one has no table: the whole-step model, as before, with its interval."""
    folder = gpu_rows(tmp_path, None)
    (row,), _ = predict_dir(folder, [spec("H100-SXM5-80GB")])
    conf_rows = list(iter_rows(folder))
    source = Setup(spec("H200-SXM-141GB"), "fp16", 1, 1, BATCH)
    target = Setup(spec("H100-SXM5-80GB"), "fp16", 1, 1, BATCH)
    conf = configurations(conf_rows)[0]
    expected = predict(BATCH / STEP_S, source, target, profile_of(conf), gpu_bound=measured_gpu_bound(conf)).value
    assert row["path"] == "whole step" and row["predicted"] == pytest.approx(expected)
    assert row["low"] is not None and row["whole_step"] == row["predicted"]
    (asked,), _ = predict_dir(gpu_rows(tmp_path / "t", table_json(MATMUL, ADD, OUTSIDE)), [spec("H100-SXM5-80GB")],
                              per_op=False)
    assert asked["path"] == "whole step (asked for)" and asked["predicted"] == pytest.approx(expected)


def test_a_host_bound_row_keeps_its_step_unless_its_ops_alone_take_longer(tmp_path):
    """Measured host-bound (GPU busy 30 %), the host's time carries over: a faster GPU does not shorten the step, a
    GPU whose ops take longer than the measured step does."""
    folder = gpu_rows(tmp_path, to_json([MATMUL, ADD, OUTSIDE], steps=3, busy_s=0.024, device="cuda"), gpu_busy=0.3)
    (b200, t4), _ = predict_dir(folder, [spec("B200"), spec("T4")])
    assert b200["predicted"] == pytest.approx(BATCH / STEP_S) and b200["binds"].startswith("host (measured host-bound")
    assert t4["predicted"] < BATCH / STEP_S


def test_bench_predict_says_which_path_each_prediction_took(tmp_path, capsys):
    folder = gpu_rows(tmp_path, table_json(MATMUL, ADD, OUTSIDE))
    done = bench_here(capsys, "predict", "--from", str(folder), "--gpu", "H100-SXM5-80GB")
    said = " ".join(done.stdout.split())  # (a narrow terminal folds the columns that do not fit onto lines below)
    assert done.returncode == 0 and "per op" in said and "the per-op path has no published pairs" in said
    whole = bench_here(capsys, "predict", "--from", str(folder), "--gpu", "H100-SXM5-80GB", "--whole-step")
    assert "whole step (asked for)" in " ".join(whole.stdout.split())
    rows = json.loads(bench_here(capsys, "predict", "--from", str(folder), "--gpu", "H100-SXM5-80GB", "--json").stdout)
    assert [r["path"] for r in rows["predictions"]] == ["per op"]


def test_a_real_profile_table_rehearsed_as_a_gpu_row_predicts_its_own_gpu_exactly(cpu_profile, tmp_path):
    """The CPU rehearsal: the table the CPU stand-in profiled (every kind of op a training step runs, with its measured
    time) put on an H200 row. Predicting the H200 gives back what was measured; a GPU faster at everything (the B200's
    matmuls and bandwidth) predicts a faster step, one slower at everything (an L4) a slower one."""
    busy_s, table, _ = cpu_profile
    kinds, _ = from_json(table)
    rows = json.loads(to_json(kinds, steps=1, busy_s=BUSY_S, device="cuda"))
    folder = gpu_rows(tmp_path, json.dumps(rows))
    (h200, b200, l4), _ = predict_dir(folder, [spec("H200-SXM-141GB"), spec("B200"), spec("L4")])
    assert h200["path"] == b200["path"] == "per op" and h200["predicted"] == pytest.approx(BATCH / STEP_S)
    assert l4["predicted"] < h200["predicted"] < b200["predicted"]
