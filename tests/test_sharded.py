"""Sharded training on CPU over gloo, and the memory a configuration needs said before it is built: FSDP2,
tensor parallel and activation checkpointing compute what one process computes, a model too large for
memory is an oom row, and bad sharding input is one line naming the field."""
import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from bench_core import BenchConfig, ConfigError, run_benchmark
from bench_core.launch import torchrun
from bench_core.run import ddp, memory_estimate
from bench_core.workload.models import resolve_model
from bench_core.workload.precision import resolve_precision
from conftest import bench_here

# A tiny Llama (2 blocks, 8 query / 2 key-value heads) trained 4 untimed steps (first, FLOP count, 2 warm-up)
# and 2 timed ones, on a global batch of 4 sequences of 16 tokens.
LLAMA = dict(model="llama-tiny", seq_len=16, steps=2, warmup_steps=3, repeats=1, min_seconds=0, device="cpu",
             dist_timeout_s=60)
GLOBAL_BATCH = 4
# The loss of each untimed step of a sharded run against one process's, relative: the same sums in another
# order (FSDP's reduce-scatter, tensor parallel's split matmuls and all-reduce) differ at float32 rounding.
LOSS_TOLERANCE = 1e-4
# A 405B-parameter Llama (Llama 3.1 405B's shape): 1.5 TiB of float32 parameters.
HUGE_LLAMA = {"model_type": "llama", "hidden_size": 16384, "num_hidden_layers": 126, "num_attention_heads": 128,
              "num_key_value_heads": 8, "intermediate_size": 53248, "vocab_size": 128256}


def llama(**changes) -> BenchConfig:
    return BenchConfig(**{**LLAMA, **changes})


def losses(row) -> list[float]:
    assert row["status"] == "ok", row["message"]
    return [float(x) for x in row["warmup_losses"].split()]


@pytest.fixture(scope="module")
def one_process():
    (row,) = run_benchmark(llama(batch_size=GLOBAL_BATCH))
    return row


def _two_processes(tmp_path_factory, **changes) -> dict:
    os.environ[torchrun.WORKDIR_ENV] = str(tmp_path_factory.mktemp("sharded"))
    try:
        (row,) = run_benchmark(llama(nproc_per_node=2, **changes))
    finally:
        del os.environ[torchrun.WORKDIR_ENV]
    return row


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory):
    return _two_processes(tmp_path_factory, parallelism="fsdp", batch_size=GLOBAL_BATCH // 2)


@pytest.fixture(scope="module")
def tensor_parallel(tmp_path_factory):
    # Both ranks split every block and share one batch: the data-parallel degree is 1.
    return _two_processes(tmp_path_factory, parallelism="fsdp-tp", tp_degree=2, batch_size=GLOBAL_BATCH)


@pytest.mark.slow
def test_two_process_fsdp_trains_as_one_process_does(fsdp, one_process):
    reference = losses(one_process)
    assert len(reference) == 4 and reference[-1] < reference[0]  # it trains
    assert losses(fsdp) == pytest.approx(reference, rel=LOSS_TOLERANCE)


@pytest.mark.slow
def test_the_fsdp_row_has_tokens_per_second_mfu_the_mesh_and_memory_per_rank(fsdp):
    assert (fsdp["parallelism"], fsdp["mesh_shape"], fsdp["world_size"], fsdp["global_batch_size"]) == \
        ("fsdp", "dp_shard=2", 2, GLOBAL_BATCH)
    assert fsdp["tokens_per_s"] == pytest.approx(fsdp["samples_per_s"] * 16) and fsdp["tokens_per_s"] > 0
    assert 0 < fsdp["mfu"] <= 1
    assert fsdp["mixed_precision"] == "none: fp32 parameters, compute and reductions"
    assert fsdp["peak_rss_bytes"] > fsdp["mem_before_build_bytes"] > 0  # the larger rank's
    assert "fsdp over 2" in fsdp["mem_estimate"]


@pytest.mark.slow
def test_the_fsdp_estimate_is_half_the_one_process_state(fsdp, one_process):
    # Parameters and momentum are split in two; the rest (activations of the rank's batch, a block's gradients
    # before their reduce-scatter) is what one rank holds at its peak.
    import re

    def term(row, name):
        return float(re.search(rf"{name} ([0-9.e+-]+)", row["mem_estimate"]).group(1))
    for name in ("parameters", "optimizer state"):
        assert term(fsdp, name) == pytest.approx(term(one_process, name) / 2, rel=0.01), fsdp["mem_estimate"]
    assert fsdp["mem_estimate_bytes"] < one_process["mem_estimate_bytes"]


@pytest.mark.slow
def test_tensor_parallel_on_two_processes_trains_as_one_process_does(tensor_parallel, one_process):
    assert (tensor_parallel["mesh_shape"], tensor_parallel["global_batch_size"]) == ("dp_shard=1 x tp=2", GLOBAL_BATCH)
    assert losses(tensor_parallel) == pytest.approx(losses(one_process), rel=LOSS_TOLERANCE)
    assert tensor_parallel["mem_estimate_bytes"] < one_process["mem_estimate_bytes"]


@pytest.mark.parametrize("kind", ["full", "selective"])
def test_activation_checkpointing_recomputes_the_same_loss_and_is_estimated_smaller(kind, one_process):
    (row,) = run_benchmark(llama(batch_size=GLOBAL_BATCH, activation_checkpointing=kind))
    assert losses(row) == pytest.approx(losses(one_process), rel=LOSS_TOLERANCE)
    assert row["activation_checkpointing"] == kind and f"checkpointing {kind}" in row["mem_estimate"]
    # At 16 tokens the optimizer step is this model's peak; at 512 the activations are, and checkpointing
    # (traced: the blocks wrapped as the run wraps them) keeps fewer of them.
    spec, precision = resolve_model("llama-tiny"), resolve_precision("fp32")
    plain, kept = (memory_estimate.estimate(spec.task, spec, llama(batch_size=GLOBAL_BATCH, seq_len=512,
                                                                   activation_checkpointing=k), precision, "cpu")
                   for k in ("none", kind))
    assert kept.activations < plain.activations and kept.total < plain.total


# -- memory before running --------------------------------------------------------------------

LLAMA_8B = ["memory", "--model", "llama-8b", "--precision", "amp-bf16", "--optimizer", "adamw", "--batch-size", "1",
            "--seq-len", "2048", "--device", "cuda", "--device-memory-gib", "80", "--json"]


def test_bench_memory_says_llama_8b_does_not_fit_one_80_gb_gpu_with_ddp_and_fits_eight_with_fsdp(capsys):
    alone = bench_here(capsys, *LLAMA_8B)
    sharded = bench_here(capsys, *LLAMA_8B, "--parallelism", "fsdp", "--nproc-per-node", "8")
    assert (alone.returncode, sharded.returncode) == (1, 0)  # 1: it does not fit
    alone, sharded = json.loads(alone.stdout), json.loads(sharded.stdout)
    assert not alone["fits"] and sharded["fits"] and alone["limit_bytes"] == 80 * 2**30
    # 8.03e9 fp32 parameters (29.9 GiB) and AdamW's two fp32 moments (59.8 GiB) on one GPU, an eighth of each
    # on each of eight, beside the activations of their own batch
    assert "parameters 29.92 " in alone["estimate"] and "optimizer state 59.83 " in alone["estimate"]
    assert "parameters 3.739 " in sharded["estimate"] and "optimizer state 7.479 " in sharded["estimate"]
    assert "fsdp over 8" in sharded["estimate"] and alone["estimate_bytes"] > 4 * sharded["estimate_bytes"]


def test_a_model_of_a_trillion_parameters_is_an_oom_row_from_its_parameter_count_without_a_trace(tmp_path):
    """Issue 67: a 400-layer Llama config of hidden 16,384 (1.28 trillion parameters) on the CPU was the right row
    after 70 s: its whole training step was traced on fake tensors. Its parameters, gradients and momentum alone
    are 200 times the machine, known from its config: the row says so, and no step was traced. Nor was torch or
    transformers imported (run/parameter_oom.py counts the config): the command is done in a fraction of a second,
    where importing them took 6-8 s of a 2-core CPU. Counted by the modules the process loaded, not timed."""
    config = tmp_path / "llama-1.2t.json"
    config.write_text(json.dumps({**HUGE_LLAMA, "num_hidden_layers": 400}))
    out = tmp_path / "out"
    argv = ["run", "--model", f"hf:{config}", "--seq-len", "16", "--batch-size", "1", "--steps", "1",
            "--warmup-steps", "1", "--repeats", "1", "--device", "cpu", "--out", str(out), "-q"]
    code = f"""import contextlib, io, json, sys
from bench_core.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
    code = main({argv!r})
print(json.dumps({{"code": code, "stderr": err.getvalue(), "loaded": sorted(m for m in sys.modules if m.split(".")[0]
                  in ("torch", "transformers") or m == "bench_core.run.memory_trace")}}))
"""
    done = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert done["loaded"] == []  # no torch, no transformers, no tracer: nothing traced
    assert done["code"] == 1 and "Traceback" not in done["stderr"]
    row = json.loads(next((out / "runs").iterdir()).joinpath("rows.json").read_text())[0]
    assert row["status"] == "oom" and row["params_count"] is None  # never built
    parameters = 1_279_284_232_192  # embeddings, 400 layers, the head: as a meta build counts them
    assert row["mem_estimate_bytes"] == parameters * 4 * 3  # fp32 parameters, gradients, SGD's momentum
    assert row["message"].startswith("MemoryError: estimate: parameters 4766 + gradients 4766 + optimizer state "
                                     "4766 = 1.43e+04 GiB per rank (parameters, gradients and optimizer state alone")
    assert "not traced: a floor" in row["message"] and " GiB free" in row["message"]


# The measured peak (the process's high-water RSS, minus the RSS before the build) against the estimate.
# glibc's allocator keeps freed blocks for reuse by default, how much depending on the machine (the peak
# came out 1.4x the estimate on one 2-core CPU, 1.7x on another): the child runs with the allocator
# settings of test_capacity, every block above 4 KiB its own mapping, returned when freed, so its RSS is
# what its tensors hold, and the kernel's high-water mark (ru_maxrss) is exact where a sampled window peak
# can fall between two samples.
ESTIMATE_MARGIN = (0.7, 1.6)
EXACT_ALLOCATOR = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": "4096", "MALLOC_TRIM_THRESHOLD_": "0",
                   "MALLOC_TOP_PAD_": "0"}


@pytest.mark.slow
def test_the_estimate_stands_beside_the_measured_peak_within_its_margin(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench_core", "run", "--model", "llama-tiny", "--seq-len", "128",
                           "--batch-size", "4", "--steps", "2", "--warmup-steps", "1", "--repeats", "1",
                           "--min-seconds", "0", "--device", "cpu", "--out", str(tmp_path), "--json", "-q"],
                          capture_output=True, text=True, timeout=300,
                          # A cache of its own, as on a machine that never ran bench: the run measures the CPU's
                          # peak after the build, and its matrices (a 4096x4096 linear on a fast CPU) once counted in
                          # the row's peak (CI: 486 MB where 309-331 MB is the step's): the window's peak is its own.
                          env={**os.environ, **EXACT_ALLOCATOR, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(done.stdout)
    added = row["peak_rss_bytes"] - row["mem_before_build_bytes"]
    low, high = ESTIMATE_MARGIN
    assert low * row["mem_estimate_bytes"] <= added <= high * row["mem_estimate_bytes"], (
        row["mem_estimate"], added, row["peak_rss_bytes"], row["mem_before_build_bytes"])


# -- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, field, words", [
    (dict(parallelism="fsdp-tp", tp_degree=4, nproc_per_node=2), "tp_degree", "larger than the 2 process(es)"),
    (dict(parallelism="fsdp-tp", tp_degree=2, nproc_per_node=3), "tp_degree", "2 does not divide the 3 processes"),
    (dict(parallelism="fsdp-tp", tp_degree=4, nproc_per_node=4), "tp_degree",
     "4 does not divide llama-tiny's 2 key/value heads"),
    (dict(parallelism="fsdp", model="resnet18", seq_len=None), "parallelism", "works per transformer block; resnet18"),
    (dict(activation_checkpointing="full", model="resnet18", seq_len=None), "activation_checkpointing",
     "declares none"),
    (dict(parallelism="fsdp-tp", tp_degree=2, nproc_per_node=2, model="gpt2"), "parallelism",
     "no tensor-parallel plan for gpt2"),
    (dict(parallelism="fsdp", precision="amp-fp16"), "precision", "amp-fp16 with fsdp is not run here"),
    (dict(parallelism="hsdp", nproc_per_node=2), "parallelism", "needs nnodes >= 2"),
    (dict(parallelism="fsdp", mode="infer"), "parallelism", "applies to mode train only"),
    (dict(tp_degree=2, nproc_per_node=2), "tp_degree", "applies to parallelism fsdp-tp only"),
])
def test_bad_sharding_input_names_the_field(changes, field, words):
    with pytest.raises(ConfigError) as caught:
        llama(batch_size=2, **changes)
    assert caught.value.field == field and words in str(caught.value)


def test_bad_sharding_input_on_the_command_line_is_one_line_exit_2_nothing_written(tmp_path, capsys):
    out = tmp_path / "out"
    done = bench_here(capsys, "run", "--model", "llama-tiny", "--parallelism", "fsdp-tp", "--tp-degree", "3",
                      "--nproc-per-node", "2", "--device", "cpu", "--out", str(out))
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and "tp_degree" in done.stderr
    assert not out.exists()
    helped = bench_here(capsys, "run", "--help").stdout
    for words in ("fsdp (FSDP2 fully_shard per transformer", "hsdp", "fsdp-tp (a 2-D mesh", "selective"):
        assert words in " ".join(helped.split()), words


# -- two nodes, and a rank that dies ------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _leftovers(marker) -> list:
    """Processes still alive that name the test's folder (torchrun workers run in their own sessions)."""
    found = [p for p in psutil.process_iter(["cmdline"])
             if str(marker) in " ".join(p.info["cmdline"] or []) and p.pid != os.getpid()]
    return [p for p in found if p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
def test_two_torchruns_as_two_nodes_train_with_fsdp_as_one_process_does(tmp_path, one_process):
    endpoint = f"127.0.0.1:{_free_port()}"
    node = llama(nproc_per_node=1, nnodes=2, rdzv_endpoint=endpoint, parallelism="fsdp", batch_size=GLOBAL_BATCH // 2,
                 num_threads=1)
    with ThreadPoolExecutor(2) as pool:  # each launch runs its own torchrun, as on two machines
        futures = {rank: pool.submit(torchrun.launch, node.replace(node_rank=rank), workdir=tmp_path) for rank in (1, 0)}
        node_rows = {rank: future.result() for rank, future in futures.items()}
    assert node_rows[1] == []  # only node 0 returns (and writes) rows
    (row,) = node_rows[0]
    assert (row["mesh_shape"], row["nnodes"], row["rank_devices"].count("@")) == ("dp_shard=2", 2, 2)
    assert losses(row) == pytest.approx(losses(one_process), rel=LOSS_TOLERANCE)
    assert not _leftovers(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("fault, status, says", [
    ("exit-rank-1", "error", "rank 1 of 2 exited with code 17"),  # a hard death at rank 1's first forward pass
    # rank 1 alone runs out of memory (torch.OutOfMemoryError, raised on it only) while rank 0 waits in FSDP's
    # all-gather: an oom row naming rank 1, not rank 0's lost connection
    ("oom-rank-1", "oom", "rank 1 of 2 (%s): OutOfMemoryError: out of memory: injected fault on rank 1"),
], ids=["killed", "oom-on-one-rank"])
def test_a_rank_that_dies_mid_step_under_fsdp_is_a_failure_row_naming_it(fault, status, says, tmp_path, monkeypatch):
    monkeypatch.setenv(ddp.FAULT_ENV, fault)
    monkeypatch.setenv(torchrun.WORKDIR_ENV, str(tmp_path))
    (row,) = run_benchmark(llama(nproc_per_node=2, parallelism="fsdp", batch_size=2, dist_timeout_s=10))
    assert row["status"] == status and (says % socket.gethostname() if "%s" in says else says) in row["message"]
    assert (row["parallelism"], row["world_size"]) == ("fsdp", 2)
    assert not _leftovers(tmp_path)  # no worker left waiting in a collective; the caller (a sweep) has its row


def test_the_llm_training_sweep_asks_for_configurations_an_80_gb_gpu_holds():
    import itertools
    from pathlib import Path

    from bench_core.config.yamlfile import load_yaml_mapping
    from bench_core.config.sweepfile import grids
    data = load_yaml_mapping(Path(__file__).parents[1] / "params" / "llm-training.yaml")
    configs = [BenchConfig(**{**data["settings"], **dict(zip(grid, values))})
               for grid in grids(data["grid"], BenchConfig.field_names()) for values in itertools.product(*grid.values())]
    assert {(c.model, c.parallelism, c.precision, c.compile, c.world_size) for c in configs} == {
        ("llama-8b", "fsdp", "amp-bf16", "off", 8), ("llama-8b", "fsdp", "amp-bf16", "default", 8),
        ("llama-8b", "fsdp", "fp8-tensorwise", "default", 8), ("llama-1b", "ddp", "amp-bf16", "off", 1)}
    for cfg in configs:  # the device is only named here (no GPU): the estimate is from the configuration alone
        spec = resolve_model(cfg.model)
        assert memory_estimate.estimate(spec.task, spec, cfg, resolve_precision(cfg.precision)).total < 80 * 2**30


def test_the_scaling_table_draws_fsdp_apart_from_ddp(fsdp, tmp_path):
    from bench_core import results, summary
    (alone,) = run_benchmark(llama(parallelism="fsdp", batch_size=GLOBAL_BATCH // 2))  # FSDP on 1 process: the reference
    results.write_run(tmp_path, "fsdp", [alone, fsdp])
    (ddp_row,) = run_benchmark(llama(batch_size=GLOBAL_BATCH // 2))
    results.write_run(tmp_path, "ddp", [ddp_row])
    table = summary.scaling_table(summary.load_results([tmp_path]))
    assert set(table["parallelism"]) == {"fsdp"} and sorted(table["world_size"]) == [1, 2]  # one curve, no DDP in it
    assert table.loc[table["world_size"] == 1, "speedup"].iloc[0] == 1.0  # the 1-process FSDP row is the reference
    assert table.loc[table["world_size"] == 2, "samples_per_s"].iloc[0] > 0  # (one repeat each: no interval)


@pytest.mark.slow
def test_hsdp_over_two_nodes_trains_as_one_process_does(tmp_path, one_process):
    # one process a node: the mesh replicates across the nodes and shards (in one) within each
    node = llama(nproc_per_node=1, nnodes=2, rdzv_endpoint=f"127.0.0.1:{_free_port()}", parallelism="hsdp",
                 batch_size=GLOBAL_BATCH // 2, num_threads=1)
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(torchrun.launch, node.replace(node_rank=rank), workdir=tmp_path) for rank in (1, 0)]
        (row,) = [r for future in futures for r in future.result()]
    assert (row["mesh_shape"], row["mixed_precision"]) == ("dp_replicate=2 x dp_shard=1",
                                                          "none: fp32 parameters, compute and reductions")
    assert losses(row) == pytest.approx(losses(one_process), rel=LOSS_TOLERANCE)
    assert not _leftovers(tmp_path)


# -- batch_size max with FSDP ---------------------------------------------------------------------

def test_the_fsdp_batch_search_is_bounded_by_the_per_rank_estimate():
    # In process, on fake tensors: the largest per-rank batch whose estimate fits a limit, exactly at its edge
    # (at 256 tokens, where the activations lead).
    cfg = llama(nproc_per_node=2, parallelism="fsdp", batch_size="max", seq_len=256)
    spec, precision = resolve_model(cfg.model), resolve_precision(cfg.precision)
    at = {b: memory_estimate.estimate(spec.task, spec, cfg.replace(batch_size=b), precision).total for b in (1, 8, 9)}
    bound, beyond = memory_estimate.largest_batch_that_fits(spec.task, spec, cfg, precision, at[8] + (at[9] - at[8]) // 2)
    assert (bound, beyond.total) == (8, at[9])
    assert memory_estimate.largest_batch_that_fits(spec.task, spec, cfg, precision, at[1] - 1)[0] == 0


def test_batch_size_max_with_fsdp_on_one_node_is_searched_and_elsewhere_refused_naming_the_field():
    assert llama(nproc_per_node=2, parallelism="fsdp", batch_size="max").batch_size == "max"
    for changes, words in [(dict(nproc_per_node=2), "under ddp every rank holds the whole model"),
                           (dict(nproc_per_node=1, nnodes=2, rdzv_endpoint="127.0.0.1:29400", parallelism="fsdp"),
                            "max is searched on one node")]:
        with pytest.raises(ConfigError) as caught:
            llama(batch_size="max", **changes)
        assert caught.value.field == "batch_size" and words in str(caught.value)


def test_batch_size_max_with_fsdp_that_no_batch_fits_is_an_oom_row_before_any_process_starts(tmp_path):
    config = tmp_path / "llama-405b.json"
    config.write_text(json.dumps(HUGE_LLAMA))
    (row,) = run_benchmark(llama(model=f"hf:{config}", nproc_per_node=2, parallelism="fsdp", batch_size="max"))
    assert row["status"] == "oom" and row["batch_size_requested"] == "max" and row["world_size"] == 2
    assert row["message"].startswith("batch search: even batch 1 does not fit by the per-rank memory estimate")
    assert "fsdp over 2" in row["message"] and "GiB free per rank of 2" in row["message"]


# -- the share of the step in collectives no compute hid ------------------------------------------

def test_exposed_communication_is_the_collective_time_no_compute_covered():
    from bench_core.run.comm_overlap import exposed_share, merged
    step = (0.0, 100.0)
    # two all-gathers, 10-30 and 25-50 (one stretch, 10-50), matmuls 0-20 and 40-45: exposed 20-40 and 45-50
    assert merged([(25, 50), (10, 30), (60, 60)]) == [(10, 50)]
    assert exposed_share([(10, 30), (25, 50)], [(0, 20), (40, 45)], step) == pytest.approx(0.25)
    assert exposed_share([(10, 30)], [(0, 100)], step) == 0.0  # hidden behind compute entirely
    assert exposed_share([(10, 30)], [], step) == pytest.approx(0.2)  # nothing to hide behind
    assert exposed_share([(-10, 10), (90, 120)], [], step) == pytest.approx(0.2)  # only the step's span counts


@pytest.mark.slow
def test_the_fsdp_row_says_how_much_of_its_step_gloo_collectives_left_exposed(fsdp):
    # On CPU, gloo's collectives run on their own threads; while the training thread waits for an all-gather
    # or a reduce-scatter, the collective is exposed: some, never more than the step.
    assert 0 < fsdp["exposed_comm_share"] <= 1 and "gloo collective" in fsdp["exposed_comm_method"]


def test_the_gpu_suite_has_one_fsdp_row_that_a_24_gb_gpu_holds(monkeypatch):
    from pathlib import Path

    import torch

    from bench_core.sweep import plan
    from bench_core.sweep.plan import load_sweep
    monkeypatch.setattr(plan, "resolve_device", lambda name, local_rank=0: torch.device("cpu"))  # it names cuda
    configs = load_sweep(Path(__file__).parents[1] / "params" / "gpu-standard.yaml").configs
    (cfg,) = [c for c in configs if c.parallelism != "ddp"]
    assert (cfg.model, cfg.parallelism, cfg.precision, cfg.world_size, cfg.mode) == ("llama-1b", "fsdp", "amp-bf16", 2, "train")
    spec = resolve_model(cfg.model)  # the device is only named here: the estimate is from the configuration alone
    assert memory_estimate.estimate(spec.task, spec, cfg, resolve_precision(cfg.precision)).total < 24 * 2**30
