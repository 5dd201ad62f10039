"""What bound a row, said truly (issue 59): a GPU at its power cap is power-capped, not disturbed, and stays in
every comparison; a GPU that waited for the host is host-bound, and every place that shows or uses its figure
says so. The kept H200 rows (gpu/runs/) are read by today's rules."""
import csv
from pathlib import Path

import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

from bench_core.cli.common import format_rows, run_summary
from bench_core.devices import Backend
from bench_core.measure import noise
from bench_core.measure.noise import current_flags
from bench_core.results.comparison import DISTURBED
from bench_core.results.disturbed import disturbances
from bench_core.results.rows import WORKLOAD
from bench_core.results.store import iter_rows, write_run
from bench_core.run import busy
from bench_core.run.comm_overlap import length
from bench_core.scenarios.compare import Comparison, judge
from bench_core.summary.effects import compare_variants, settings_effects
from bench_core.summary.load import load_results
from bench_core.summary.reference import reference_matches

ROOT = Path(__file__).resolve().parents[1]
H200_RUNS = [ROOT / "gpu" / "runs" / "h200-2026-11-27", ROOT / "gpu" / "runs" / "h200-2026-11-27-b"]


@pytest.fixture(scope="module")
def h200():
    return load_results(H200_RUNS)


def test_the_kept_h200_rows_at_the_power_cap_are_judged_not_disturbed(h200):
    capped = h200.ok[(h200.ok["model"] == "resnet50") & (h200.ok["precision"] == "amp-fp16") & h200.ok["channels_last"]]
    assert len(capped) == 2  # written as throttle(sw_power_cap);clock-drop(...) on both machines
    assert list(capped["noise_flags"]) == [
        "power-capped(689 W of a cap not recorded, SM clock min 1605 mean 1833 MHz)",
        "power-capped(688 W of a cap not recorded, SM clock min 1650 mean 1847 MHz)"]
    assert not any(disturbances(f) for f in capped["noise_flags"])
    layout = settings_effects(h200)
    (verdict,) = layout[(layout["setting"] == "channels_last vs NCHW") & (layout["precision"] == "amp-fp16")].to_dict("records")
    assert verdict["verdict"] != DISTURBED and verdict["ratio"] == pytest.approx(2.08, abs=0.01)  # the 2.08x


def test_the_kept_h200_ladder_reads_host_bound_from_nvml_where_it_had_no_profile(h200):
    ladder = h200.ok[(h200.ok["model"] == "resnet18") & (h200.ok["compile"] == "off")]
    flags = {int(b): f for b, f in zip(ladder["batch_size"], ladder["noise_flags"]) if isinstance(f, str)}
    assert flags == {1: "host-bound(gpu busy 17% by NVML utilization)", 4: "host-bound(gpu busy 21% by NVML utilization)",
                     16: "host-bound(gpu busy 31% by NVML utilization)"}  # not 64 (69 %, 90 %) nor 256 (93 %)


# --- gpu_busy: the measurement, on the CPU stand-in, and what it writes into a row -------------------------------

def host_work(n: int = 2000) -> int:
    """Python between two ops: the stand-in for the host's share of a step (on a GPU: dispatch and the launch)."""
    total = 0
    for i in range(n):
        total += i * i
    return total


def test_gpu_busy_on_the_cpu_stand_in_a_step_of_tiny_ops_is_host_bound_a_few_large_matmuls_are_not():
    """On the CPU the device is the CPU: its ATen ops' time against the profiled steps' wall time. A tiny op's
    dispatch runs inside the op there, so the host's share is Python between the ops."""
    layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(50))
    x, a = torch.randn(1, 4), torch.randn(384, 384)

    def tiny_ops(mark=None):
        with torch.inference_mode():
            h = x
            for layer in layers:
                host_work()
                h = layer(h)

    def large_matmuls(mark=None):
        with torch.inference_mode():
            for _ in range(4):
                a @ a

    cpu = Backend.for_device(torch.device("cpu"))
    shares = {}
    for name, step in (("tiny", tiny_ops), ("large", large_matmuls)):
        device_s, wall_s = busy.device_seconds(step, cpu, busy.BUSY_STEPS)
        shares[name] = device_s / wall_s
    assert shares["tiny"] < noise.HOST_BOUND_BUSY <= shares["large"], shares
    assert noise.host_bound_flag({"device_type": "cuda", "gpu_busy": shares["tiny"]}) == \
        f"host-bound(gpu busy {shares['tiny']:.0%})"
    assert noise.host_bound_flag({"device_type": "cuda", "gpu_busy": shares["large"]}) is None
    # A CPU row itself is not measured (no device waits on its host), and says so.
    assert busy.measure(tiny_ops, cpu, 1) == (None, busy.NOT_ON["cpu"])
    rows = [{"status": "ok", "device_type": "cpu", "timed_s": 0.2, "timed_steps": 10, "noise_flags": None}]
    busy.record(tiny_ops, cpu, rows)
    assert rows[0]["gpu_busy"] is None and rows[0]["gpu_busy_method"].startswith("not measured: a CPU row")
    assert rows[0]["noise_flags"] is None


def kept(batch_size: int, run=H200_RUNS[1], model="resnet18", mode="infer") -> list[dict]:
    """The kept H200 rows of one configuration, as bench run held them before they were written (rows.json)."""
    return [dict(r) for r in iter_rows(run) if (r["model"], r["mode"], r["batch_size"], r["compile"]) ==
            (model, mode, batch_size, "off")]


def with_busy(rows: list[dict]) -> list[dict]:
    """The rows as run/busy.py leaves them, the device time per step taken from their own NVML share."""
    for row in rows:
        busy.apply([row], row["gpu_util_pct_mean"] / 100 * busy.window_step_s(row), "the kept row's NVML share")
    return rows


def test_a_host_bound_row_says_so_in_bench_runs_table_and_last_line():
    (one,) = with_busy(kept(1))
    assert one["gpu_busy"] == pytest.approx(0.17, abs=0.005) and one["noise_flags"] == "host-bound(gpu busy 17%)"
    shown = format_rows([one])  # (folded to the terminal's width: the column may be in a block of its own)
    assert any("GPU busy" in line for line in shown.splitlines()[1:]) and "0.17" in shown
    assert run_summary([one]).startswith("1/1 rows ok, 1 host-bound (gpu busy 17%): the host (CPU, Python, "
                                         "PyTorch's dispatch, kernel launches) set the step's pace, not the GPU")
    (many,) = with_busy(kept(256))
    assert many["gpu_busy"] == pytest.approx(0.93, abs=0.005) and many["noise_flags"] is None
    assert "host-bound" not in run_summary([many])
    # A GPU at its power cap: said, not disturbed (bench run's last line stays free of 're-measure').
    capped = [{**r, "noise_flags": current_flags(r)} for r in kept(1280, model="resnet50", mode="train")
              if r["channels_last"] and r["precision"] == "amp-fp16"]
    line = run_summary(capped)
    assert "1 at the GPU's power cap (688 W of a cap not recorded, SM clock min 1650 mean 1847 MHz)" in line
    assert "disturbed" not in line and "re-measure" not in line


def test_a_kept_serving_point_is_never_host_bound_by_its_nvml_share():
    # First light's serve rows (before gpu_busy): the GPU 27 % and 36 % busy at 1 and 8 users, idle by the
    # load it was given, not by its host; a training row of the same run with as low a share is host-bound.
    serve = [r for r in iter_rows(H200_RUNS[0]) if r["mode"] == "serve"]
    assert len(serve) == 2 and all(r["gpu_util_pct_mean"] < 50 for r in serve)
    assert [current_flags(r) for r in serve] == [None, None]
    as_training = {**serve[0], "mode": "train"}
    share = serve[0]["gpu_util_pct_mean"]
    assert current_flags(as_training) == f"host-bound(gpu busy {share:.0f}% by NVML utilization)"


def cli_rows() -> list[dict]:
    """The two bench runs of the kept H200 call (cli/): resnet18 inference at batch 1 and 64, two repeats each."""
    with open(H200_RUNS[1] / "cli" / "resnet18-infer-bs1-bs64.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    numbers = ("batch_size", "timed_s", "timed_steps", "samples_per_s", "gpu_util_pct_mean", "step_time_ms_median")
    return [{**r, **{k: float(r[k]) for k in numbers}, "noise_flags": r["noise_flags"] or None,
             "first_step_ms": float(r["first_step_ms"]), "compile_s": None} for r in rows]


def test_bench_compares_verdict_on_host_bound_rows_says_the_host_set_the_pace():
    rows = with_busy(cli_rows())
    a, b = [r for r in rows if r["batch_size"] == 1], [r for r in rows if r["batch_size"] == 64]
    result = Comparison("batch 1", "batch 64", {}, {}, rounds=2, tolerance=0.02, order=["AB", "BA"],
                        samples_per_s_a=[r["samples_per_s"] for r in a],
                        samples_per_s_b=[r["samples_per_s"] for r in b], disturbed=["", ""], rows_a=a, rows_b=b)
    judge(result)
    assert result.verdict == "faster"  # judged: a host-bound round is not a disturbed one
    assert result.reason.endswith("; host-bound (gpu busy: A (batch 1) 29-32%): the host set the pace, not the GPU")


def test_the_reports_comparison_of_host_bound_rows_on_two_machines_says_it_compares_hosts(tmp_path):
    """The issue's 1.6x: resnet18 at batch 1 through bench run on one H200 machine against the notebook's sweep on
    another. Both machines' rows name their host 'vm', so the bench run's are named apart here."""
    (tmp_path / "results.csv").write_bytes((H200_RUNS[1] / "cli" / "resnet18-infer-bs1-bs64.csv").read_bytes())
    res = load_results([H200_RUNS[1], tmp_path])
    ok = res.ok.copy()
    ok.loc[ok["result_dir"] == res.names[1], "machine"] = "NVIDIA H200 · the bench run's machine"
    ok = ok[(ok["model"] == "resnet18") & (ok["batch_size"] == 1)]
    sweep_machine = ok.loc[ok["result_dir"] == res.names[0], "machine"].iloc[0]  # NVIDIA H200 · vm · GPU-...
    (row,) = compare_variants(ok, "machine", sweep_machine, keys=list(WORKLOAD)).to_dict("records")
    assert row["ratio"] == pytest.approx(1.61, abs=0.01)
    assert row["text"].endswith("host-bound (gpu busy: baseline 17%, variant 29-32% by NVML utilization): "
                                "compares the hosts, not the GPUs")


def test_the_gpus_busy_time_is_its_kernels_union_not_the_spans_of_annotations():
    """The CUDA path's events, as torch.profiler makes them (no GPU here): two overlapping kernels on two streams
    are busy 15 us, not 20; the ProfilerStep annotation's span on the GPU timeline covers the idle gaps too, and
    the host's own ops are not the device's."""
    def event(name, start, end, device=DeviceType.CUDA, annotation=False):
        return FunctionEvent(id=0, name=name, thread=0, start_us=start, end_us=end, device_type=device,
                             is_user_annotation=annotation)
    events = [event("void gemm_kernel", 0, 10), event("void relu_kernel", 5, 15), event("Memcpy DtoD", 40, 42),
              event("ProfilerStep#1", 0, 100, annotation=True), event("aten::mm", 0, 100, device=DeviceType.CPU)]
    assert length(busy.device_intervals(events, "cuda")) == 17.0
    assert length(busy.device_intervals(events, "cpu")) == 100.0  # the CPU stand-in: its aten ops


def test_ours_beside_a_published_figure_says_when_ours_measured_the_host(tmp_path):
    """A new run of the kept ladder's configurations (its rows under new run ids: a report never sets a row
    beside a figure made from itself) against the kept H200 figures: host-bound rows say the ratio compares hosts."""
    again = [{**r, "run_id": f"again-{r['run_id']}"} for r in iter_rows(H200_RUNS[1]) if r["model"] == "resnet18"]
    write_run(tmp_path, "again", again)
    matched = reference_matches(load_results([tmp_path]))
    ladder = matched[(matched["model"] == "resnet18") & (matched["batch_size"].isin([1, 256]))]
    said = {int(b): {c.endswith("host-bound (gpu busy: ours 17% by NVML utilization): compares the hosts, not the GPUs")
                     for c in group["comparison"]} for b, group in ladder.groupby("batch_size")}
    assert said == {1: {True}, 256: {False}}
