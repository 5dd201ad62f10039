"""--profile: torch.profiler after the timed window, a chrome trace and a top-operators table."""
from __future__ import annotations

import csv
import json

import pytest
import torch

from bench_core import BenchConfig, run_benchmark
from bench_core.workload.models import ModelSpec, register_model
from bench_core.run.profiling import PROFILE_STEPS, load_top_ops

PROFILED = dict(model="resnet18", width=32, height=32, batch_size=2, steps=2, warmup_steps=1, repeats=1,
                min_seconds=0, device="cpu", profile=True)
register_model(ModelSpec("test_profile_cnn", "classification", lambda cfg: torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 1000)), default_size=(16, 16, None)))
QUICK = {**PROFILED, "model": "test_profile_cnn", "width": 16, "height": 16}


def test_profile_writes_a_trace_and_a_top_operators_table(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_PROFILE_DIR", str(tmp_path / "profiles"))
    rows = run_benchmark(BenchConfig(**PROFILED))
    assert rows[0]["status"] == "ok", rows[0]["message"]
    folder = tmp_path / "profiles" / rows[0]["run_id"]

    trace = json.loads((folder / "trace.json").read_text())  # what Perfetto / chrome://tracing open
    names = [e.get("name", "") for e in trace["traceEvents"]]
    assert any(n.startswith("aten::convolution") for n in names)
    # Only the profiler's own steps are in it: it ran after the window, not around it.
    assert len({n for n in names if n.startswith("ProfilerStep#")}) == PROFILE_STEPS

    table = (folder / "top_ops.txt").read_text()
    assert "sorted by self_cpu_time_total" in table and "Self CPU" in table
    with open(folder / "top_ops.csv") as handle:
        ops = list(csv.DictReader(handle))
    assert ops and all(op["operator"] for op in ops)
    self_cpu = [float(op["self_cpu_time_us"]) for op in ops]
    assert self_cpu == sorted(self_cpu, reverse=True) and self_cpu[0] > 0
    assert load_top_ops(folder / "top_ops.csv")["operator"].tolist() == [op["operator"] for op in ops]
    if "profile_trace" in rows[0]:  # once the schema has the columns
        assert rows[0]["profile_trace"] == str(folder / "trace.json")


def test_profile_defaults_to_outputs_profiles(tmp_path, monkeypatch):
    monkeypatch.delenv("BENCH_PROFILE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    rows = run_benchmark(BenchConfig(**QUICK))
    assert (tmp_path / "outputs" / "profiles" / rows[0]["run_id"] / "trace.json").exists()


def test_a_failing_profile_keeps_the_measured_rows(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("BENCH_PROFILE_DIR", str(blocker))
    with pytest.warns(UserWarning, match="profile failed, rows kept"):
        rows = run_benchmark(BenchConfig(**QUICK))
    assert rows[0]["status"] == "ok" and rows[0]["samples_per_s"] > 0
