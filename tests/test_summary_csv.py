"""summary.csv and machines.csv beside results.csv, and params_count in every row of a built model:
what a user pastes into a spreadsheet, checked against results.csv and an independently built model."""
import pandas as pd
import pytest
import torchvision
from conftest import bench_here, tiny
from test_cli import TINY_FLAGS

from bench_core import results
from bench_core.launch.batch_search import run_at_max_batch
from bench_core.launch.dispatch import run_benchmark
from bench_core.results import make_row, summary_lines
from bench_core.summary.load import load_results

RESNET18_PARAMS = sum(p.numel() for p in torchvision.models.resnet18(weights=None).parameters())


def read(out, name: str) -> pd.DataFrame:
    return pd.read_csv(out / name)


def digits6(value: float) -> float:
    """summary.csv's numbers: 6 significant digits."""
    return float(f"{value:.6g}")


def line_of(summary: pd.DataFrame, **where) -> pd.Series:
    found = summary
    for name, value in where.items():
        found = found[found[name] == value]
    assert len(found) == 1, found
    return found.iloc[0]


def test_summary_has_one_line_per_configuration_with_the_medians_of_results_csv(tmp_path, capsys):
    out = tmp_path / "r"
    assert bench_here(capsys, "run", *TINY_FLAGS, "--repeats", "3", "--out", str(out)).returncode == 0
    # An input too small for inception_v3: the model is built, its first step fails -> an error row.
    failing = bench_here(capsys, "run", *TINY_FLAGS, "--model", "torchvision:inception_v3", "--out", str(out))
    assert failing.returncode == 1
    # tf32 on a CPU is recorded (as a sweep records it) as unsupported, before any model is built.
    unsupported = run_benchmark(tiny(precision="tf32"))
    results.write_run(out, unsupported[0]["run_id"], unsupported)

    rows = read(out, "results.csv")
    summary = read(out, "summary.csv")
    machines = read(out, "machines.csv")
    assert len(summary) == 3 == rows.groupby(list(results.WORKLOAD), dropna=False).ngroups

    ok = line_of(summary, model="resnet18", precision="fp32")
    mine = rows[(rows["model"] == "resnet18") & (rows["status"] == "ok")]
    assert (ok["status"], ok["repeats_ok"], ok["repeats_total"], ok["runs"]) == ("ok", 3, 3, 1)
    speed = mine["samples_per_s"]
    assert ok["samples_per_s_median"] == digits6(speed.median())
    assert (ok["samples_per_s_q25"], ok["samples_per_s_q75"]) == (digits6(speed.quantile(0.25)),
                                                                  digits6(speed.quantile(0.75)))
    assert (ok["samples_per_s_min"], ok["samples_per_s_max"]) == (digits6(speed.min()), digits6(speed.max()))
    assert ok["samples_per_s_spread_pct"] == pytest.approx((speed.max() - speed.min()) / speed.median() * 100, rel=1e-5)
    assert ok["step_time_ms_median"] == digits6(mine["step_time_ms_median"].median())
    assert ok["mfu_median"] == pytest.approx(mine["mfu"].median(), rel=1e-5, nan_ok=True)
    assert ok["peak_mem_bytes"] == mine["peak_rss_bytes"].max() and ok["peak_mem_source"] == "rss"
    assert ok["throughput_unit"] == "images/s" and pd.isna(ok["energy_j_per_sample"])  # no energy counter on CPU
    assert (ok["batch_size"], ok["input_shape"], ok["world_size"]) == (2, "3x32x32", 1)
    # params_count: the model built independently, in every row of the run, and in the summary
    assert ok["params_count"] == RESNET18_PARAMS
    assert set(mine["params_count"]) == {RESNET18_PARAMS}

    error = line_of(summary, model="torchvision:inception_v3")
    assert (error["status"], error["repeats_ok"], error["repeats_total"]) == ("error", 0, 1)
    assert error["message"].startswith("RuntimeError") and pd.isna(error["samples_per_s_median"])
    assert error["params_count"] == rows.loc[rows["model"] == "torchvision:inception_v3", "params_count"].item() > 0
    refused = line_of(summary, precision="tf32")
    assert refused["status"] == "unsupported" and "cuda" in refused["message"].lower()
    assert pd.isna(refused["params_count"]) and pd.isna(refused["samples_per_s_median"])

    # The environment once, in machines.csv; every summary line joins to it by `machine`.
    assert len(machines) == 1
    assert set(summary["machine"]) == set(machines["machine"])
    assert machines.iloc[0]["host"] == rows.iloc[0]["host"]
    assert machines.iloc[0]["torch_version"] == rows.iloc[0]["torch_version"]
    assert "torch_version" not in summary.columns and "host" not in summary.columns

    # A second run of the same configuration into the folder updates its line.
    assert bench_here(capsys, "run", *TINY_FLAGS, "--out", str(out)).returncode == 0
    rows = read(out, "results.csv")
    ok = line_of(read(out, "summary.csv"), model="resnet18", precision="fp32")
    mine = rows[(rows["model"] == "resnet18") & (rows["status"] == "ok")]
    assert (ok["repeats_ok"], ok["repeats_total"], ok["runs"]) == (5, 5, 2)
    assert ok["samples_per_s_median"] == digits6(mine["samples_per_s"].median())

    # What the report reads is the run files; reading writes nothing into the folder.
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert len(load_results([out]).rows) == len(rows)
    assert before == {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


def test_batch_size_max_rows_carry_params_count():
    # (A DDP run's rows and summary line: tests/test_distributed.py, on the rows of its two-process run.)
    # batch_size max: the probe and the run each in a fresh process, as `bench run --batch-size max` does.
    search, max_rows = run_at_max_batch(tiny(mode="infer", repeats=1), max_batch_size=1, isolate=True)
    assert search.ok and search.probes[0].params_count == RESNET18_PARAMS == search.params_count
    assert [(r["status"], r["batch_size_requested"], r["params_count"]) for r in max_rows] == \
        [("ok", "max", RESNET18_PARAMS)]
    # A search stopped by an error (batch norm cannot train on one sample): the probe built the model.
    search, max_rows = run_at_max_batch(tiny(repeats=1), max_batch_size=1, isolate=True)
    assert search.stopped == "error" and "more than 1 value per channel" in search.message
    assert [(r["status"], r["params_count"]) for r in max_rows] == [("error", RESNET18_PARAMS)]


def test_a_partly_failed_gpu_configuration(tmp_path):
    """Rows as a CUDA machine writes them (torch's allocated peak, NVML energy), one repeat out of memory."""
    machine = dict(host="gpu-node-1", device_type="cuda", device_name="NVIDIA A100-SXM4-80GB", model="unet3d",
                   mode="train", precision="amp-bf16", batch_size=2, input_shape="1x64x64x64", world_size=1,
                   compile="off", channels_last=False, params_count=5_000_000, run_id="a")
    rows = [make_row(**machine, repeat=i, status="ok", samples_per_s=s, step_time_ms_median=1000 * 2 / s,
                     peak_mem_allocated_bytes=m, peak_rss_bytes=3 * 2**30, j_per_1k_samples=j)
            for i, (s, m, j) in enumerate([(40.0, 2**33, 900.0), (44.0, 2**33 + 4096, 1000.0)])]
    rows.append(make_row(**machine, repeat=2, status="oom", message="CUDA out of memory"))
    (line,) = summary_lines(rows)
    assert (line["status"], line["repeats_ok"], line["repeats_total"], line["message"]) == \
        ("partial", 2, 3, "CUDA out of memory")
    assert line["samples_per_s_median"] == 42.0 and line["throughput_unit"] == "volumes/s"
    assert line["samples_per_s_spread_pct"] == pytest.approx(4 / 42 * 100)
    assert (line["peak_mem_bytes"], line["peak_mem_source"]) == (2**33 + 4096, "allocated")
    assert line["energy_j_per_sample"] == pytest.approx(0.95)
    assert line["machine"] == "NVIDIA A100-SXM4-80GB · gpu-node-1"


def test_summary_csv_names_each_gpu_machine_and_each_serving_load():
    """Issue 60: summary.csv of the kept H200 runs called every GPU 'NVIDIA H200 · vm' and merged two
    serving loads into one line. A machine line per GPU instance, a summary line per load (no batch)."""
    from pathlib import Path

    from bench_core.results.config_summary import machine_lines
    first_light = Path(__file__).resolve().parents[1] / "gpu" / "runs" / "h200-2026-11-27"
    rows = list(results.iter_rows(first_light))
    assert sorted(m["machine"] for m in machine_lines(rows)) == ["NVIDIA H200 · vm · GPU-5faf33eb",
                                                                  "NVIDIA H200 · vm · GPU-c2df5475"]
    served = [line for line in summary_lines(rows) if line["mode"] == "serve"]
    assert [(s["load"], s["batch_size"], s["repeats_ok"]) for s in served] == [("1 user", None, 1), ("8 users", None, 1)]
    assert {s["machine"] for s in served} == {"NVIDIA H200 · vm · GPU-c2df5475"}
    committed = read(first_light, "summary.csv")  # as gpu/keep_run.py rebuilt it
    assert list(committed.loc[committed["mode"] == "serve", "load"]) == ["1 user", "8 users"]
