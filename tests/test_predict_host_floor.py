"""The host-floor term of `bench predict` (bench_core/predict/model.py): a target GPU's step is no shorter than the
host's time per step on the source's machine, where the source published it (an inference latency table at batch 1).
The arithmetic on a hand-made pair, and the published rows it takes its floor from."""
import pytest

from bench_core.predict import published
from bench_core.predict.model import TERMS, Profile, Setup, predict, without
from bench_core.predict.specs import spec

# A small inference step: 4 GFLOP and 20 MB a sample, 100 kernels a step.
PROFILE = Profile(4e9, 1e7, 1e7, ops_per_step=100)
V100, A100 = spec("V100-SXM2-16GB"), spec("A100-SXM4-40GB")


def test_a_target_faster_than_the_hosts_step_is_held_to_it_and_says_so():
    """Measured 1,000 samples/s at batch 8 on a V100; the host took 10 ms a step at batch 1. The A100's GPU would
    run the step in less, so its step is the host's 10 ms: 8 / 0.010 = 800 samples/s; on 2 GPUs, 1,600."""
    src, dst = Setup(V100, "fp16", batch=8), Setup(A100, "fp16", batch=8)
    free = predict(1000.0, src, dst, PROFILE)
    assert free.value > 800  # the GPU alone would be faster than the host
    held = predict(1000.0, src, dst, PROFILE, host_step_s=0.010)
    assert held.value == pytest.approx(800.0)
    assert held.target.binds.startswith("host (the host's 10 ms a step, as V100-SXM2-16GB's machine")
    two = predict(1000.0, src, Setup(A100, "fp16", gpus=2, batch=8), PROFILE, host_step_s=0.010)
    assert two.value == pytest.approx(1600.0)


def test_a_floor_below_the_prediction_or_the_term_left_out_changes_nothing():
    src, dst = Setup(V100, "fp16", batch=8), Setup(A100, "fp16", batch=8)
    free = predict(1000.0, src, dst, PROFILE)
    assert predict(1000.0, src, dst, PROFILE, host_step_s=1e-5).value == pytest.approx(free.value)
    off = without("host-floor")
    assert (predict(1000.0, src, dst, PROFILE, off, host_step_s=0.010).value
            == pytest.approx(predict(1000.0, src, dst, PROFILE, off).value))


def test_the_floor_is_the_same_published_tables_batch_one_step_where_that_step_is_the_hosts():
    """DLE's TensorFlow ResNet-50 FP32 table on a DGX-1 V100 lists batch 1 at 173.35 images/s: 5.77 ms a step, the
    floor of every batch of that table. A table with no batch-1 row, or a training row, has none."""
    rows = published.published_rows()

    def row(group, gpu, precision):
        return next(r for r in rows if (r["run_group"], r["spec"].gpu, r["precision"]) == (group, gpu, precision))
    tf8 = row("DLE resnet50 inference tensorflow-20.06 bs8", "V100-SXM2-16GB", "fp32")
    assert published.host_step_of(tf8) == pytest.approx(1 / 173.35)
    squad = row("DLE bert-large SQuAD inference pytorch-20.06", "V100-SXM2-16GB", "fp32")
    assert published.host_step_of(squad) is None
    assert all(published.host_step_of(r) is None for r in rows if r["mode"] == "train")


def test_a_host_bound_pair_is_predicted_at_the_sources_batch_one_step():
    """DLE's BERT-large MRPC at batch 2: the DGX-2 V100 ran batch 1 at 59.07 sequences/s, the host's 16.9 ms a step
    (its launch floor is most of the step at batch 1). The A100's GPU would run batch 2 in 8 ms, so the model puts it
    at 2 x 59.07 = 118 sequences/s; DLE measured 110 (+8 %; it was +117 % before the term)."""
    pair = next(p for p in published.predictions(TERMS)
                if p["run_group"] == "DLE bert-large MRPC inference pytorch-20.06 bs2" and p["precision"] == "fp32"
                and p["gpu_from"] == "V100-SXM3-32GB" and p["gpu_to"] == "A100-SXM4-40GB")
    assert pair["predicted"] == pytest.approx(2 * 59.07)
    assert pair["binds"].startswith("host (")
    assert abs(pair["error"]) < 0.10
