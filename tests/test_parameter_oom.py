"""The `oom` row said before torch is imported (run/parameter_oom.py) is the row the run itself writes at its memory
floor, column for column, with only what torch alone can say left empty; and where the verdict is not certain it
says nothing, so the run goes on as before. (tests/test_sharded.py runs the command and counts the modules it
loaded.)"""
import json

import pytest

from bench_core import run_benchmark
from bench_core.config.schema import BenchConfig
from bench_core.run.parameter_oom import parameter_oom_rows

# Llama 3.1 405B's shape: 1.5 TiB of float32 parameters, beyond any machine the suite runs on.
HUGE = {"model_type": "llama", "hidden_size": 16384, "num_hidden_layers": 126, "num_attention_heads": 128,
        "num_key_value_heads": 8, "intermediate_size": 53248, "vocab_size": 128256}
RUN = {"seq_len": 16, "batch_size": 1, "steps": 1, "warmup_steps": 1, "repeats": 1, "device": "cpu"}
# Columns only torch can fill (its threads, flags and dispatch level; whether CUDA is there): left empty.
TORCH_ONLY = {"torch_threads", "threads", "tf32_flags", "gpu_count", "precision_support_reason", "cpu_isa_dispatch"}
MADE_ANEW = {"run_id", "timestamp", "phase_times_s"}  # each row's own; the message's free memory moves too


@pytest.fixture(scope="module")
def huge(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("config") / "llama-405b.json"
    path.write_text(json.dumps(HUGE))
    return f"hf:{path}"


def test_the_row_is_the_one_the_run_writes_at_its_memory_floor(huge):
    (early,) = parameter_oom_rows({"model": huge, **RUN})
    (late,) = run_benchmark(BenchConfig(model=huge, **RUN))  # the run's own path: config, environment, floor
    assert early["status"] == late["status"] == "oom" and early["params_count"] is None
    said, _, _ = early["message"].partition("; cpu has")
    assert late["message"].startswith(said + "; cpu has ") and early["mem_estimate_bytes"] == late["mem_estimate_bytes"]
    differ = {k for k in late if early[k] != late[k] and k != "message"}
    # a column differs only where it is made anew, or where only torch can say it and the early row leaves it empty
    # (under BENCH_CPU_AS the kind's dispatch level is known without torch: then it is there, and the same)
    assert all(k in MADE_ANEW or (k in TORCH_ONLY and early[k] is None) for k in differ), differ
    assert list(early) == list(late)


@pytest.mark.parametrize("changes", [
    {"device": "auto"}, {"precision": "bf16"}, {"nproc_per_node": 2, "parallelism": "fsdp"}, {"batch_size": "max"},
    {"seq_len": 100_000},  # beyond its 2,048 positions: the configuration's own check says so (exit 2)
    {"mode": "infer", "optimizer": "adamw", "steps": 0},  # a value the configuration refuses
])
def test_where_the_verdict_is_not_certain_nothing_is_said(huge, changes):
    assert parameter_oom_rows({"model": huge, **RUN, **changes}) is None


def test_a_model_that_fits_or_a_config_it_cannot_count_is_left_to_the_run(tmp_path):
    small = tmp_path / "small.json"
    small.write_text(json.dumps({**HUGE, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
                                 "intermediate_size": 512, "vocab_size": 1000}))
    scaled = tmp_path / "scaled.json"
    scaled.write_text(json.dumps({**HUGE, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}))
    for model in (f"hf:{small}", f"hf:{scaled}", f"hf:{tmp_path / 'missing.json'}", "hf:llama", "llama-8b"):
        assert parameter_oom_rows({"model": model, **RUN}) is None, model


def test_inference_holds_the_parameters_alone(huge):
    (row,) = parameter_oom_rows({"model": huge, **RUN, "mode": "infer"})
    assert row["mem_estimate"].startswith("estimate: parameters 1512 = 1512 GiB per rank (parameters alone, from")
    assert row["mem_estimate_bytes"] == 405_853_388_800 * 4  # Llama 3.1 405B's parameters, in fp32 alone
