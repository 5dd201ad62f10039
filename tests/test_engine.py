"""The engine as a user meets it from Python: run_benchmark(BenchConfig) -> honest rows."""
import gc
import os
import math
import re
import weakref

import pytest
import torch
from torch import nn

from bench_core import BenchConfig, ConfigError, run_benchmark
from bench_core.workload.models import ModelSpec, register_model
from bench_core.results import SCHEMA_VERSION, columns
from bench_core.run.runner import old_objects_frozen
from conftest import tiny


@pytest.fixture(scope="module")
def train_rows():
    return run_benchmark(tiny(repeats=2, steps=3, min_seconds=0.2))


def test_one_row_per_repeat_with_every_column(train_rows):
    assert [r["repeat"] for r in train_rows] == [0, 1]
    for row in train_rows:
        assert list(row) == columns()
        assert row["schema_version"] == SCHEMA_VERSION
        assert row["status"] == "ok" and row["message"] is None
        assert row["data"] == "synthetic"
        assert row["run_id"] == train_rows[0]["run_id"]
        assert row["config_hash"] == tiny(repeats=2, steps=3, min_seconds=0.2).config_hash()


def test_throughput_is_samples_over_window_seconds(train_rows):
    for row in train_rows:
        steps, seconds = row["timed_steps"], row["timed_s"]
        assert row["samples_per_s"] == pytest.approx(row["global_batch_size"] * steps / seconds)
        assert row["batches_per_s"] == pytest.approx(steps / seconds)
        assert row["mpx_per_s"] == pytest.approx(32 * 32 * 2 * steps / seconds / 1e6)
        assert row["s_per_iter"] == pytest.approx(seconds / steps)
        step_ms = [float(v) for v in row["step_times_ms"].split()]
        assert len(step_ms) == steps
        assert sum(step_ms) / 1e3 == pytest.approx(seconds, abs=1e-6 * steps)  # ms kept to 3 decimals
        assert row["step_time_ms_p5"] <= row["step_time_ms_median"] <= row["step_time_ms_p95"]
        assert row["step_time_cv"] >= 0


def test_window_meets_both_minimums(train_rows):
    for row in train_rows:
        assert row["timed_steps"] >= 3
        assert row["timed_s"] >= 0.2


def test_cold_start_reported_apart(train_rows):
    row = train_rows[0]
    assert row["first_step_ms"] > 0
    assert row["compile_s"] is None  # compile off
    assert row["warmup_s"] is not None


def test_a_cpu_window_records_the_hypervisors_steal_where_the_machine_counts_it(train_rows):
    from bench_core.measure.steal import read_steal_s
    counted = read_steal_s() is not None  # Linux's /proc/stat with its steal field; elsewhere no reading
    for row in train_rows:
        assert (row["cpu_steal_cores"] is not None) == counted
        assert not counted or 0 <= row["cpu_steal_cores"] <= len(os.sched_getaffinity(0))


def test_environment_and_knobs_in_every_row(train_rows):
    for row in train_rows:
        assert row["torch_version"] == torch.__version__
        assert row["host"] and row["cpu_model"] and row["git_commit"]
        assert row["device_type"] == "cpu" and row["world_size"] == 1
        assert row["tf32_enabled"] is False
        assert row["threads"] >= 1
        assert row["batch_size_requested"] == row["batch_size_actual"] == 2
        assert row["peak_rss_bytes"] > 0
        assert row["loss_finite"] is True and math.isfinite(row["loss_final"])


def test_non_square_input_uses_both_sides():
    # tensorpix built its data with the width twice; ours must honour height.
    row = run_benchmark(tiny(width=48, height=32, mode="infer"))[0]
    assert row["status"] == "ok"
    assert row["input_shape"] == "3x32x48"
    assert row["mpx_per_s"] == pytest.approx(48 * 32 * row["global_batch_size"] * row["timed_steps"]
                                             / row["timed_s"] / 1e6)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16", "amp-fp16", "amp-bf16"])
@pytest.mark.parametrize("mode", ["train", "infer"])
def test_every_cpu_precision_runs(precision, mode):
    # One timed step after the first (the FLOP count's step is a second): whether a precision runs does not
    # depend on how many, and where bf16 and fp16 are emulated (AVX2 only) each step is seconds.
    row = run_benchmark(tiny(model="mobilenet_v3_large", precision=precision, mode=mode, steps=1, warmup_steps=0))[0]
    assert row["status"] == "ok", row["message"]
    assert row["precision"] == precision


def test_tf32_on_cpu_is_an_unsupported_row():
    rows = run_benchmark(tiny(precision="tf32"))
    assert len(rows) == 1
    assert rows[0]["status"] == "unsupported"
    assert "cuda" in rows[0]["message"].lower()


@pytest.mark.parametrize("alias, name", [("16-mixed", "amp-fp16"), ("bf16-mixed", "amp-bf16"),
                                         ("32", "fp32"), ("half", "fp16"), ("mixed", "amp-fp16"),
                                         ("single", "fp32")])
def test_seed_precision_spellings_are_aliases(alias, name):
    assert tiny(precision=alias).precision == name


def test_ambiguous_16_is_refused():
    with pytest.raises(ConfigError, match="ambiguous"):
        tiny(precision="16")


def test_channels_last_runs():
    row = run_benchmark(tiny(channels_last=True))[0]
    assert row["status"] == "ok" and row["channels_last"] is True


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_optimizers(optimizer):
    assert run_benchmark(tiny(optimizer=optimizer))[0]["status"] == "ok"


class _Overflow(nn.Module):
    """A real model whose activations overflow float16 (max 65504)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(3, 1000)
        nn.init.constant_(self.fc.weight, 1e4)

    def forward(self, x):
        return self.fc(self.pool(x).flatten(1) * 100 + 100)


class _Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        raise ValueError("this layer is broken\nsecond line")


register_model(ModelSpec("test_overflow", "classification", lambda cfg: _Overflow()))
register_model(ModelSpec("test_broken", "classification", lambda cfg: _Broken()))


def test_fp16_overflow_is_a_nan_row_not_a_success():
    rows = run_benchmark(tiny(model="test_overflow", precision="fp16", repeats=2))
    assert [r["status"] for r in rows] == ["nan", "nan"]
    assert rows[0]["loss_finite"] is False
    assert "non-finite" in rows[0]["message"]


def test_an_exception_is_an_error_row_with_its_message():
    rows = run_benchmark(tiny(model="test_broken"))
    assert len(rows) == 1
    assert rows[0]["status"] == "error"
    # and where: the last frame in code that is not bench_core's or a library's (the model registered here)
    assert re.fullmatch(r"ValueError: this layer is broken \(at test_engine\.py:\d+ in forward\)", rows[0]["message"])


def test_config_from_dict_refuses_unknown_keys():
    with pytest.raises(ConfigError, match="batchsize.*did you mean 'batch_size'"):
        BenchConfig.from_dict({"batchsize": 4})


def test_same_config_same_hash():
    assert tiny().config_hash() == tiny().config_hash()
    assert tiny().config_hash() != tiny(batch_size=4).config_hash()


def test_batch_size_max_is_a_config_value_and_its_cap_counts_only_with_it():
    assert tiny(batch_size=" MAX ").batch_size == "max"
    with pytest.raises(ConfigError, match=r"^batch_size: must be a whole number >= 1 or max, got 'most'$"):
        tiny(batch_size="most")
    # max_batch_size changes nothing for a numeric batch, so it does not change its hash
    # (rows measured before the field existed stay complete); with max it is part of what is run.
    assert tiny(max_batch_size=8).config_hash() == tiny().config_hash()
    assert tiny(batch_size="max", max_batch_size=8).config_hash() != tiny(batch_size="max").config_hash()


class _CyclicNet(nn.Module):
    """Holds a reference to itself: only the garbage collector can free it, not reference counting."""
    made = []  # weak references to every instance

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3 * 8 * 8, 1000)  # the classification task draws labels of 1000 classes
        self.itself = [self]
        _CyclicNet.made.append(weakref.ref(self))

    def forward(self, x):
        return self.layer(x.flatten(1))


register_model(ModelSpec("test_cyclic_net", "classification", lambda cfg: _CyclicNet(), default_size=(8, 8, None)))


def test_a_session_freezes_what_was_there_and_still_frees_each_configuration_s_model(monkeypatch, tmp_path):
    """old_objects_frozen: one full collection at the start, the objects already there frozen (later
    collections skip them), and each configuration's model freed at its end even when only the
    collector can free it; on leaving, the collector is as before. Nested sessions change nothing."""
    from bench_core.run import trace_store
    monkeypatch.setattr(trace_store, "folder", lambda: tmp_path)  # no trace kept by an earlier run: each is made
    gc.unfreeze()  # the suite froze its imports (conftest.py); a session freezes where nothing is frozen
    try:
        with old_objects_frozen():
            frozen = gc.get_freeze_count()
            assert frozen > 0
            # Frozen objects can still die of their reference count, from any thread, so the count may
            # only fall: a nested session that froze again would add these 10,000 new objects to it.
            made_since = [[] for _ in range(10_000)]
            with old_objects_frozen():  # an enclosing session already froze: nothing changes
                assert gc.get_freeze_count() <= frozen
            assert gc.get_freeze_count() <= frozen
            del made_since
            for mode in ("train", "infer"):
                (row,) = run_benchmark(tiny(model="test_cyclic_net", mode=mode, width=8, height=8))
                assert row["status"] == "ok", row["message"]
                assert [ref() for ref in _CyclicNet.made] == [None] * len(_CyclicNet.made)  # freed at its end
            # each configuration built three times: on the meta device for its parameter count and for its memory
            # estimate's trace, then for real
            assert len(_CyclicNet.made) == 6 and gc.get_freeze_count() > 0  # (frozen objects can still die of refcount)
        assert gc.get_freeze_count() == 0
    finally:
        gc.freeze()
