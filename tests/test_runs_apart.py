"""Runs that differ are never pooled as repeats of one configuration: two result folders of one machine, one
run with --num-threads 1 and one with --num-threads 2, are two lines in the report's Headline and in
summary.csv, and `bench diff` does not compare them as one; so for every other setting that changes speed
(the optimizer, cudnn.benchmark, the nodes, a forced CPU dispatch level), and bench diff keys on every field
the report keys on."""
import copy
import io

import pandas as pd
import pytest

from bench_core import results
from bench_core.cli import main
from bench_core.results.config_summary import summary_lines
from bench_core.results.keys import WORKLOAD, machine_label
from bench_core.summary.diff_rows import KEY, with_keys
from bench_core.summary.load import load_results, typed_rows
from bench_core.summary.front import machine_text
from bench_core.summary.tables import headline_table, machines_table
from conftest import bench_here

RUN = ["--model", "resnet18", "--width", "32", "--height", "32", "--batch-size", "2", "--steps", "2",
       "--warmup-steps", "1", "--repeats", "2", "--min-seconds", "0", "--device", "cpu", "--mode", "infer", "-q"]


@pytest.fixture(scope="module")
def two_folders(tmp_path_factory):
    """The issue's case: one machine, `bench run --num-threads 2 --out A`, then `--num-threads 1 --out B`."""
    root = tmp_path_factory.mktemp("threads")
    for threads in ("2", "1"):
        assert main(["run", *RUN, "--num-threads", threads, "--out", str(root / f"threads-{threads}")]) == 0
    return root / "threads-2", root / "threads-1"


def rows_of(folder) -> list[dict]:
    return results.record_rows(folder)


def read_back(rows: list[dict]) -> pd.DataFrame:
    """Rows as the report reads them: through results.csv's text, typed."""
    return typed_rows(pd.read_csv(io.StringIO(results.csv_text(rows)), dtype=str, keep_default_na=False,
                                  na_values=[""]))


def test_two_thread_counts_are_two_lines_of_the_headline_never_one_median(two_folders):
    res = load_results(list(two_folders))
    table = headline_table(res)
    assert len(table) == 2, table[["machine", "throughput", "repeats"]]
    assert list(table["repeats"]) == [2, 2]  # each line its own 2 repeats, never the 4 pooled
    assert any(" thread" in m for m in table["machine"]), list(table["machine"])  # the one not using the whole CPU
    said = [machine_text(m) for m in machines_table(res).to_dict("records")]  # the report's list of machines
    assert sum("used at " in text and "never pooled" in text for text in said) >= 1, said


def test_summary_csv_keeps_two_thread_counts_apart_and_says_how_the_cpu_was_used(two_folders):
    lines = summary_lines(rows_of(two_folders[0]) + rows_of(two_folders[1]))
    assert len(lines) == 2 and [line["repeats_ok"] for line in lines] == [2, 2]
    assert sorted(line["threads"] for line in lines) == ["1", "2"]
    assert lines[0]["machine"] != lines[1]["machine"]


def test_bench_diff_does_not_compare_a_run_at_1_thread_with_one_at_2(two_folders, capsys):
    done = bench_here(capsys, "diff", str(two_folders[0]), str(two_folders[1]))
    assert done.returncode == 2  # nothing in both: a gate must not pass on nothing compared
    assert "nothing to compare" in done.stderr and "how the CPU was used" in done.stderr
    assert " thread" in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.parametrize("setting, value", [("optimizer", "adam"), ("cudnn_benchmark", False), ("nnodes", 2)])
def test_other_run_settings_that_change_speed_are_other_configurations(two_folders, setting, value):
    rows = rows_of(two_folders[0])
    train = [{**r, "mode": "train"} for r in rows]
    other = [{**r, "mode": "train", setting: value, "device_type": "cuda" if setting == "cudnn_benchmark" else "cpu"}
             for r in rows]
    base = [{**r, "device_type": "cuda"} for r in train] if setting == "cudnn_benchmark" else train
    assert len(summary_lines(base + other)) == 2
    labels = set(read_back(base + other)["config"])
    assert len(labels) == 2, labels  # and the report's labels tell them apart


def test_a_setting_that_does_not_apply_does_not_split_a_configuration(two_folders):
    """The optimizer of an inference run: adam or sgd, the same forward passes."""
    rows = rows_of(two_folders[0])
    assert len(summary_lines(rows + [{**r, "optimizer": "adam", "run_id": "x"} for r in rows])) == 1


def test_a_forced_cpu_dispatch_level_is_another_machine_as_used(two_folders):
    row = rows_of(two_folders[0])[0]
    forced = {**row, "cpu_dispatch_env": "ATEN_CPU_CAPABILITY=avx2"}
    assert machine_label(forced) != machine_label(row) and "ATEN_CPU_CAPABILITY=avx2" in machine_label(forced)
    gpu = {**row, "device_type": "cuda", "threads": 1, "cpu_count": 64, "gpu_uuid": "GPU-1234"}
    assert "thread" not in machine_label(gpu)  # a GPU's steps run on the device: its host threads only launch


def test_bench_diff_keys_on_every_field_the_report_keys_on(two_folders):
    """A field of the configuration key (results.keys.WORKLOAD) that bench diff ignored would pool two
    configurations in the gate that the report keeps apart (a serving point at 1 and at 8 users)."""
    row = {**rows_of(two_folders[0])[0], "mode": "train"}
    values = {"model": "resnet50", "mode": "infer", "precision": "bf16", "batch_size": 4, "input_shape": "3x64x64",
              "world_size": 2, "compile": "default", "channels_last": True, "parallelism": "fsdp", "tp_degree": 2,
              "activation_checkpointing": "full", "optimizer": "adamw", "cudnn_benchmark": False, "nnodes": 2,
              "engine": "vllm", "endpoint": "chat", "prompt_len": 64, "new_tokens": 8, "length_dist": "uniform:0.5",
              "shared_prefix_len": 16, "prompt_file": "p.jsonl", "trace_file": "t.jsonl", "server_args": "--x",
              "model_dir": "/m", "server_url": "http://h:1", "concurrency": 8, "request_rate": 2.5,
              "burstiness": 0.5, "turns": 3, "think_time_s": 1.0, "trace_time_scale": 0.5}
    assert set(values) == set(WORKLOAD)
    base = [row, {**row, "device_type": "cuda"}]  # cudnn.benchmark applies on CUDA only
    changed, against = [], []
    for name, value in values.items():
        if name == "input_shape":  # measured; bench diff keys on the fields that shape it (width, height, ...)
            name, value = "width", 64
        on_cuda = name == "cudnn_benchmark"
        changed.append({**copy.deepcopy(base[on_cuda]), name: value})
        against.append(int(on_cuda))
    keyed = with_keys(read_back(base + changed).assign(side="old"))[KEY].astype(str).to_numpy()
    for i, name in enumerate(values):
        assert (keyed[2 + i] != keyed[against[i]]).any(), name
