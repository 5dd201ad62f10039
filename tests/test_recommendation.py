"""Recommendation workloads: DLRM-shaped models on tiny tables, in samples/s with the embedding bytes
they move; Zipf-skewed indices; sparse SGD; tables larger than memory as an oom row the process
survives; every bad input refused in one line; a report that draws them in their own unit."""
import json

import pytest

from bench_core import BenchConfig, ConfigError, run_benchmark
from bench_core.cli import main as bench
from bench_core.devices import Backend
from bench_core.workload.models import model_table, resolve_model
from bench_core.workload.recommendation import MAX_ROWS_PER_TABLE, zipf_indices

TINY_REC = dict(model="dlrm", num_tables=4, rows_per_table=1000, embedding_dim=16, indices_per_lookup=3, batch_size=8,
                steps=2, warmup_steps=1, repeats=1, min_seconds=0, device="cpu")
# One table's bytes beyond the 47-bit (128 TiB) user address space of x86-64 and of 5-level-paging kernels
# (which map above it only when asked): no mmap can succeed under any overcommit setting, so neither can
# an allocation that got past the free-memory check, and nothing is ever touched for the OOM killer.
HUGE = dict(num_tables=1, rows_per_table=MAX_ROWS_PER_TABLE, embedding_dim=2**17)


def rec(**changes) -> BenchConfig:
    return BenchConfig(**{**TINY_REC, **changes})


def test_bench_models_lists_the_recommendation_models_with_their_tables(capsys):
    assert bench(["models", "--json"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    for name, per_lookup in (("dlrm", 1), ("dlrm-dcnv2", 8)):
        row = listed[name]
        assert row["task"] == "recommendation"
        assert row["default_input"] == f"26 x 500,000 x 128, {per_lookup}/lookup"
        tables = 26 * 500_000 * 128  # the tables are nearly all of it; the MLPs about 2-5 million more
        assert tables < row["params"] < tables * 1.01, name


@pytest.mark.parametrize("model, mode, precision", [("dlrm", "train", "fp32"), ("dlrm", "infer", "fp32"),
                                                    ("dlrm-dcnv2", "train", "fp32"), ("dlrm-dcnv2", "infer", "bf16")])
def test_a_tiny_dlrm_runs_in_samples_per_second_with_the_bytes_its_lookups_move(model, mode, precision):
    cfg = rec(model=model, mode=mode, precision=precision)
    row = run_benchmark(cfg)[0]
    assert row["status"] == "ok", row["message"]
    assert row["task"] == "recommendation" and row["throughput_unit"] == "samples/s" == row["sample_unit"]
    assert row["throughput"] == row["samples_per_s"] == pytest.approx(8 * row["timed_steps"] / row["timed_s"])
    element = 2 if precision == "bf16" else 4
    assert row["embedding_table_bytes"] == 4 * 1000 * 16 * element
    model_built = resolve_model(cfg.model).build(cfg)
    assert row["embedding_table_bytes"] == sum(t.weight.nbytes for t in model_built.tables)
    # per sample: 4 tables x (3 rows read + 1 pooled row written) x 16 x element size; train 3 times that
    per_sample = 4 * (3 + 1) * 16 * element * (3 if mode == "train" else 1)
    assert row["embedding_bytes_per_s"] == pytest.approx(row["samples_per_s"] * per_sample, rel=1e-9)
    assert row["input_shape"] == "13 dense + 4 tables x 3 of 1000 rows x 16, zipf 1.05"
    # MLP FLOPs are counted, but MFU is left empty with the reason; no peak is looked up for it
    assert row["flops_per_sample"] > 0 and row["mfu"] is None and row["peak_tflops"] is None
    assert row["mfu_note"].startswith("not applicable: embedding lookups are bound by memory")
    assert row["mpx_per_s"] is None and row["tokens_per_s"] is None


def test_the_defaults_are_the_models_own_and_the_input_names_them():
    cfg = BenchConfig(model="dlrm-dcnv2", device="cpu")
    assert (cfg.num_tables, cfg.rows_per_table, cfg.embedding_dim, cfg.indices_per_lookup, cfg.zipf_exponent) == \
        (26, 500_000, 128, 8, 1.05)
    assert BenchConfig(model="dlrm", device="cpu").indices_per_lookup == 1
    # A configuration measured before these fields existed keeps its hash (what main computed before them),
    # so a sweep run again finds it complete: they count only where set.
    assert BenchConfig(model="resnet18", width=64, height=64, device="cpu").config_hash() == "0520b10658af"
    assert rec().config_hash() != rec(zipf_exponent=0).config_hash()


def test_indices_follow_the_power_law_and_the_popular_rows_lie_scattered():
    import torch
    rows, draws = 10_000, 200_000
    skewed = zipf_indices(1, draws, 1, rows, 1.05, seed=0).flatten()
    assert 0 <= int(skewed.min()) and int(skewed.max()) < rows
    counts = torch.bincount(skewed, minlength=rows).sort(descending=True)
    # the 1% most popular rows get what the power law gives ranks 0-99: ((k+1)^a - 1) / ((n+1)^a - 1), a = 1 - s
    a = 1 - 1.05
    expected = ((100 + 1) ** a - 1) / ((rows + 1) ** a - 1)  # 0.558
    assert counts.values[:100].sum().item() / draws == pytest.approx(expected, abs=0.01)
    hottest = sorted(counts.indices[:10].tolist())
    assert min(b - a for a, b in zip(hottest, hottest[1:])) > rows // 50  # not packed together
    uniform = torch.bincount(zipf_indices(1, draws, 1, rows, 0.0, seed=0).flatten(), minlength=rows)
    assert uniform.sort(descending=True).values[:100].sum().item() / draws < 0.02
    assert torch.equal(zipf_indices(2, 4, 3, rows, 1.05, seed=1), zipf_indices(2, 4, 3, rows, 1.05, seed=1))


def test_a_training_step_updates_only_the_rows_it_looked_up():
    import torch
    cfg = rec()
    spec = resolve_model(cfg.model)
    model = spec.build(cfg)
    workload = spec.task.make_workload(spec, cfg, torch.device("cpu"), torch.float32)
    optimizer = workload.make_optimizer(model)
    before = [t.weight.detach().clone() for t in model.tables]
    loss = workload.loss(workload.train_call(model))
    loss.backward()
    assert all(t.weight.grad.is_sparse for t in model.tables)  # sparse gradients, plain SGD
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["momentum"] == 0
    optimizer.step()
    _, indices = workload.inputs
    for table, old, looked_up in zip(model.tables, before, indices):
        changed = (table.weight.detach() != old).any(dim=1)
        assert changed.any() and set(changed.nonzero().flatten().tolist()) <= set(looked_up.flatten().tolist())


def test_tables_larger_than_free_memory_are_an_oom_row_and_the_process_goes_on(tmp_path, capsys):
    out = tmp_path / "out"
    assert bench(["run", "--model", "dlrm", "--num-tables", "1", "--rows-per-table", str(HUGE["rows_per_table"]),
                  "--embedding-dim", str(HUGE["embedding_dim"]), "--batch-size", "8", "--steps", "2",
                  "--min-seconds", "0", "--repeats", "1", "--device", "cpu", "--out", str(out), "-q"]) == 1
    row = json.loads(next((out / "runs").iterdir()).joinpath("rows.json").read_text())[0]
    assert row["status"] == "oom" and row["embedding_table_bytes"] == 2**31 * 2**17 * 4
    # known from the tables' size, before any trace (their gradients are as sparse as a batch: not in the floor)
    assert row["message"].startswith("MemoryError: estimate: parameters 1.049e+06 = 1.049e+06 GiB per rank")
    assert "(embedding tables (1 x 2,147,483,648 rows x 131072 x 4 bytes) among the parameters;" in row["message"]
    assert "not traced: a floor" in row["message"]
    assert "; cpu has " in row["message"]
    assert run_benchmark(rec())[0]["status"] == "ok"  # the same process runs the next configuration


def test_tables_the_allocator_refuses_are_an_oom_row_too(monkeypatch):
    # A device that says it has the memory (a stand-in for the free-memory figure): the allocation itself
    # fails, and the runner classifies torch's refusal.
    monkeypatch.setattr(Backend, "free_memory_bytes", lambda self, processes_on_node=1: 2**62)
    row = run_benchmark(rec(**HUGE))[0]
    assert row["status"] == "oom" and "DefaultCPUAllocator: can't allocate memory" in row["message"]
    assert row["embedding_table_bytes"] == 2**50
    assert run_benchmark(rec(mode="infer"))[0]["status"] == "ok"


@pytest.mark.parametrize("argv, field, words", [
    (["--rows-per-table", "0"], "rows_per_table", "must be >= 1, got 0"),
    (["--rows-per-table", str(2**31 + 1)], "rows_per_table", "must be <= 2147483648 (2^31)"),
    (["--num-tables", "two"], "num_tables", "must be a whole number, got 'two'"),
    (["--embedding-dim", "0"], "embedding_dim", "must be >= 1"),
    (["--indices-per-lookup", "-1"], "indices_per_lookup", "must be >= 1"),
    (["--zipf-exponent", "-0.5"], "zipf_exponent", "must be >= 0"),
    (["--zipf-exponent", "nan"], "zipf_exponent", "must be a finite number"),
    (["--width", "64"], "width", "applies to image and 3D models only; dlrm is a recommendation model (DLRM)"),
    (["--optimizer", "adam"], "optimizer", "adam takes no sparse gradients"),
    (["--nproc-per-node", "2"], "nproc_per_node", "dlrm runs on one device"),
    (["--mode", "generate"], "mode", "generate does not apply to dlrm"),
    (["--channels-last"], "channels_last", "applies to image models only"),
])
def test_bad_recommendation_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, argv, field, words):
    out = tmp_path / "out"
    assert bench(["run", "--model", "dlrm", *argv, "--device", "cpu", "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bench run: error: {field}: ") and words in lines[0], lines
    assert not out.exists()


@pytest.mark.parametrize("flag", ["--num-tables", "--rows-per-table", "--embedding-dim", "--indices-per-lookup",
                                  "--zipf-exponent"])
def test_other_models_refuse_the_table_fields_naming_them(flag):
    field = flag[2:].replace("-", "_")
    with pytest.raises(ConfigError) as err:
        BenchConfig(model="resnet18", device="cpu", **{field: 2})
    assert err.value.field == field and "applies to recommendation models only" in str(err.value)


def test_the_model_table_names_the_recommendation_task():
    assert {"recommendation", "instance-segmentation"} <= {row["task"] for row in model_table()}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """dlrm train and infer (samples/s) and Mask R-CNN inference (images/s), as a report draws them."""
    from bench_core import results
    from bench_core.summary.report import build_report
    folder = tmp_path_factory.mktemp("families")
    for cfg in (rec(), rec(mode="infer"),
                BenchConfig(model="maskrcnn", width=64, height=64, batch_size=1, steps=1, warmup_steps=0,
                            min_seconds=0, repeats=1, device="cpu", mode="infer")):
        rows = run_benchmark(cfg)
        assert all(r["status"] == "ok" for r in rows), rows[0]["message"]
        results.write_run(folder, rows[0]["run_id"], rows)
    return build_report([folder], folder / "report.html").read_text()


def test_a_report_draws_recommendation_and_instance_segmentation_each_in_its_unit(report):
    assert "could not be drawn" not in report
    assert "Throughput in samples/s by model and precision" in report  # one chart per unit (alt text)
    # Mask R-CNN's one figure: nothing to compare in a chart, the Headline table holds it.
    assert "One figure in images/s, nothing to compare it with in a chart" in report
    assert "maskrcnn_resnet50_fpn_v2" in report and "dlrm" in report
    assert "No MFU for dlrm: not applicable: embedding lookups are bound by memory" in report
    assert "embedding GB/s" in report


def test_bench_diff_compares_only_configurations_with_the_same_tables(tmp_path):
    from bench_core import results, summary
    old, new = tmp_path / "old", tmp_path / "new"
    for folder, configs in ((old, [rec()]), (new, [rec(), rec(rows_per_table=2000)])):
        for cfg in configs:
            rows = run_benchmark(cfg)
            results.write_run(folder, rows[0]["run_id"], rows)
    diff = summary.diff_results(old, new)
    assert diff.compared == 1 and sorted(diff.table["side"]) == ["both", "new only"]
    assert diff.table["configuration"].str.contains("of 2000 rows").any()


@pytest.mark.parametrize("version, files, free", [
    ("v2", {"memory.max": "1000000", "memory.current": "600000", "memory.stat": "anon 1\ninactive_file 100000\n"},
     500000),
    ("v2", {"memory.max": "max", "memory.current": "600000", "memory.stat": "inactive_file 0\n"}, None),
    ("v1", {"memory.limit_in_bytes": "1000000", "memory.usage_in_bytes": "900000",
            "memory.stat": "cache 5\ntotal_inactive_file 200000\n"}, 300000),
    ("v1", {"memory.limit_in_bytes": "9223372036854771712", "memory.usage_in_bytes": "1",  # v1's "no limit"
            "memory.stat": ""}, None),
    ("v2", {"memory.max": "1000", "memory.current": "5000", "memory.stat": ""}, 0),  # over the limit
])
def test_free_memory_under_a_cgroup_limit_counts_the_reclaimable_cache_as_free(tmp_path, version, files, free):
    # Stand-ins for /proc/self/cgroup and /sys/fs/cgroup as a container or a SLURM job has them.
    from bench_core.devices import cgroup_free_bytes
    proc = tmp_path / "cgroup"
    proc.write_text("0::/job/42\n" if version == "v2" else "5:cpu,cpuacct:/job/42\n4:memory:/job/42\n")
    base = tmp_path / "fs" / ("" if version == "v2" else "memory") / "job" / "42"
    base.mkdir(parents=True)
    for name, text in files.items():
        (base / name).write_text(text)
    assert cgroup_free_bytes(proc, tmp_path / "fs") == free
    assert cgroup_free_bytes(tmp_path / "no-such-file", tmp_path / "fs") is None
