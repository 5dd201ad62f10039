"""The fill term of `bench predict` (bench_core/predict/model.py): a GPU with more SMs needs a larger batch to run
full, so the target at batch b runs as full as the source did at b x SMs_source / SMs_target, read on the source's
own ladder (the same table or configuration at other batches). The arithmetic on hand-made ladders, the published
tables it reads, and our own rows."""
import math
from pathlib import Path

import pytest

from bench_core.predict import measured, published
from bench_core.predict.ceilings import Ceilings
from bench_core.predict.model import Profile, Setup, ladder_throughput, predict, without
from bench_core.predict.specs import spec
from bench_core.results.store import iter_rows

# A large inference step: 8 GFLOP and 100 MB a sample, few kernels (no launch floor near it).
PROFILE = Profile(8e9, 5e7, 5e7, ops_per_step=100)
T4, V100 = spec("T4"), spec("V100-SXM2-16GB")
# samples/s a T4 measured at each batch: fuller as the batch grows, full from 32
LADDER = {1.0: 300.0, 8.0: 800.0, 16.0: 1000.0, 32.0: 1100.0, 64.0: 1100.0}


def test_a_ladder_is_read_log_log_between_its_batches_and_at_its_ends_outside_them():
    assert ladder_throughput(LADDER, 16) == 1000.0
    assert ladder_throughput(LADDER, math.sqrt(8 * 16)) == pytest.approx(math.sqrt(800.0 * 1000.0))
    assert ladder_throughput(LADDER, 0.5) == 300.0 and ladder_throughput(LADDER, 512) == 1100.0


def test_a_gpu_with_twice_the_sms_runs_batch_16_as_full_as_the_source_ran_batch_8():
    """The V100 has 80 SMs, the T4 40: at batch 16 the V100 is as full as the T4 was at 8, so the prediction is the
    one without the ladder times 800 / 1000. The other way, the T4 at batch 16 is as full as the V100 at 32."""
    assert (Ceilings(T4).sms(), Ceilings(V100).sms()) == (40, 80)
    src, dst = Setup(T4, "fp32", batch=16), Setup(V100, "fp32", batch=16)
    free = predict(1000.0, src, dst, PROFILE)
    filled = predict(1000.0, src, dst, PROFILE, ladder=LADDER)
    assert filled.value == pytest.approx(free.value * 800.0 / 1000.0)
    assert "fill x0.80: at batch 16 V100-SXM2-16GB runs as full as T4 did at 8" in filled.note
    back = predict(1000.0, dst, src, PROFILE, ladder=LADDER)  # (the ladder as the V100's own, for the arithmetic)
    assert back.value == pytest.approx(predict(1000.0, dst, src, PROFILE).value * 1100.0 / 1000.0)


def test_no_ladder_one_batch_the_same_sms_or_the_term_left_out_changes_nothing():
    src, dst = Setup(T4, "fp32", batch=16), Setup(V100, "fp32", batch=16)
    free = predict(1000.0, src, dst, PROFILE).value
    assert predict(1000.0, src, dst, PROFILE, ladder={16.0: 1000.0}).value == pytest.approx(free)
    assert predict(1000.0, src, dst, PROFILE, without("fill"), ladder=LADDER).value == pytest.approx(
        predict(1000.0, src, dst, PROFILE, without("fill")).value)
    v100_32 = Setup(spec("V100-SXM2-32GB"), "fp32", batch=16)  # 80 SMs as well
    assert predict(1000.0, dst, v100_32, PROFILE, ladder=LADDER).value == pytest.approx(
        predict(1000.0, dst, v100_32, PROFILE).value)


def test_a_published_rows_ladder_is_its_tables_batches_on_its_machine():
    """DLE's TensorFlow ResNet-50 FP32 inference table on the DGX-1 V100: batch 1 to 256, each its own run group.
    lambdal's training rows publish one batch per GPU: no ladder."""
    rows = published.published_rows()
    tf = next(r for r in rows if (r["run_group"], r["spec"].gpu, r["precision"])
              == ("DLE resnet50 inference tensorflow-20.06 bs8", "V100-SXM2-16GB", "fp32"))
    ladder = published.ladder_of(tf)
    assert sorted(ladder) == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0] and ladder[8.0] == tf["value"]
    assert ladder[1.0] == pytest.approx(173.35)
    assert all(published.ladder_of(r) is None for r in rows if r["source"] == "lambdal")


KEPT = Path(__file__).resolve().parents[1] / "gpu" / "runs" / "h200-2026-11-27"


def test_our_rows_at_two_batches_are_a_ladder_and_one_batch_is_none():
    """The kept H200 run's ResNet-50 AMP rows at batch 1280, and the same at 640 at 90 % of the samples/s: the B200
    (148 SMs against the H200's 132) at 1280 runs as full as the H200 did at 1280 x 132 / 148, between the two."""
    rows = [r for r in iter_rows(KEPT) if (r["model"], r["precision"]) == ("resnet50", "amp-fp16")
            and r.get("status") == "ok"]
    half = [{**r, "batch_size": 640, "samples_per_s": 0.9 * r["samples_per_s"]} for r in rows]
    b200 = [spec("B200")]
    one, _ = measured.predict_rows(rows, b200, per_op=False)
    two, _ = measured.predict_rows(rows + half, b200, per_op=False)
    at_1280 = next(r for r in two if r["batch_size"] == 1280)
    full = max(r["samples_per_s"] for r in measured.configurations(rows))
    ladder = {640.0: 0.9 * full, 1280.0: full}
    fill = ladder_throughput(ladder, 1280 * 132 / 148) / full
    assert 0.9 < fill < 1.0
    assert at_1280["predicted"] == pytest.approx(one[0]["predicted"] * fill, rel=1e-6)
    assert "fill x" in at_1280["note"] and "fill x" not in one[0]["note"]
