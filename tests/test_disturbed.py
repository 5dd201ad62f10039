"""Disturbed figures are marked wherever a terminal or a CSV summary shows them, and a verdict resting
on them says 'disturbed: re-measure' with bench diff's exit status 3, never a speed verdict. Real
runs beside a real CPU hog (started as another user's job would be: nobody's child here); no
timing is asserted. bench compare's variant table and its verdict come from one computation."""
import csv
import json
import re

import pytest

from bench_core.errors import EXIT_DISTURBED, EXIT_OK
from bench_core.results.comparison import DISTURBED, compare_paired
from bench_core.scenarios.compare import Comparison, judge
from conftest import bench_here, cpu_hog
from test_fidelity import QUICK

TINY_RUN = ["--model", "resnet18", "--width", "32", "--height", "32", "--batch-size", "2", "--steps", "3",
            "--warmup-steps", "1", "--repeats", "2", "--min-seconds", "0", "--device", "cpu", "--mode", "infer", "-q"]


@pytest.fixture(scope="module")
def hog():
    """A busy process on one core for the module's hog tests, killed at the end."""
    with cpu_hog() as busy:
        yield busy


def test_bench_compare_beside_a_cpu_hog_says_disturbed_with_exit_3(hog, capsys):
    # Windows of at least 0.3 s, so the sampler sees the hog; one flagged round of two leaves no interval.
    done = bench_here(capsys, "compare", "--model", "test_loud_norm", "--mode", "infer", *QUICK, "--min-seconds", "0.3",
                      "--b", "batch_size=4", "--json")
    result = json.loads(done.stdout)
    assert any("other-processes-on-cpu" in flags for flags in result["disturbed"]), result["disturbed"]
    assert done.returncode == EXIT_DISTURBED == 3, done.stderr
    assert result["verdict"] == DISTURBED and result["ratio"] is None
    assert re.search(r"[12] of 2 rounds left out as disturbed \(other-processes-on-cpu", result["reason"])
    assert "bench compare: disturbed: not judged, re-measure on a quiet machine" in done.stderr
    text = Comparison(**{k: v for k, v in result.items() if k in Comparison.__dataclass_fields__}).format()
    assert re.match(r"B/A throughput: DISTURBED: RE-MEASURE - [12] of 2 rounds left out", text.splitlines()[-1])
    assert "NO CLEAR DIFFERENCE" not in text and "other-processes-on-cpu: left out" in text


def test_bench_run_beside_a_cpu_hog_marks_each_row_in_its_default_output_and_summary_csv(hog, capsys, tmp_path,
                                                                                       monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)  # whole lines (xdist's workers set COLUMNS: the table would fold)
    done = bench_here(capsys, "run", *TINY_RUN, "--min-seconds", "0.3", "--out", str(tmp_path))  # the sampler sees it
    assert done.returncode == EXIT_OK, done.stderr
    lines = done.stdout.splitlines()
    assert "disturbed by" in lines[1]  # the table's header, without -v
    assert sum("DISTURBED: other-processes-on-cpu" in line for line in lines) == 2
    assert lines[-1] == "2/2 rows ok, 2 disturbed (other-processes-on-cpu): re-measure on a quiet machine"
    assert [line.split()[0] for line in lines[2:4]] == ["0", "1"]  # numbered as rows store them (progress: "repeat 0 (1 of 2)")
    with open(tmp_path / "summary.csv", newline="") as f:
        (line,) = csv.DictReader(f)
    assert (line["repeats_ok"], line["repeats_disturbed"], line["disturbed_by"]) == ("2", "2", "other-processes-on-cpu")


def test_compare_leaves_out_disturbed_rounds_and_says_disturbed_when_too_few_are_left():
    a, b = [100.0, 101, 99, 100, 100], [130.0, 131, 129, 130, 60]
    some = compare_paired(a, b, disturbed=["", "", "", "", "other-processes-on-cpu"])
    assert some.verdict == "faster" and "1 of 5 rounds left out as disturbed (other-processes-on-cpu)" in some.reason
    assert compare_paired(a, b).verdict == "no clear difference"  # the disturbed round would have hidden it
    most = compare_paired(a, b, disturbed=["throttle", "throttle", "throttle", "", "throttle"])
    assert most.verdict == DISTURBED and most.ratio is None and "too few undisturbed left" in most.reason


def test_the_variant_table_and_the_verdict_line_agree():
    """The issue's case: the table called B faster while the verdict gave B/A = 0.801. Both now come
    from the judged rounds' geometric means."""
    result = Comparison("a", "b", {}, {}, 4, 0.02, order=["AB", "BA", "AB", "BA"],
                        samples_per_s_a=[100.0, 102, 98, 500], samples_per_s_b=[80.0, 82, 79, 900],
                        disturbed=["", "", "", "other-processes-on-cpu"])
    judge(result)
    assert result.verdict == "slower"
    assert result.ratio == pytest.approx(result.mean_b / result.mean_a, rel=1e-12)
    assert result.mean_b < result.mean_a  # the disturbed fourth round (B 900) does not make B look faster


def test_a_verdict_on_an_emulated_precision_says_so():
    """fp32 against amp-bf16 on a CPU that emulates bf16: 'SLOWER' alone reads as "AMP hurts", which no
    GPU would show; the verdict line carries the emulation."""
    def rows(precision, support):
        return [{"status": "ok", "precision": precision, "precision_support": support, "device_type": "cpu",
                 "step_time_ms_median": 10.0, "first_step_ms": 1.0, "compile_s": None, "run_id": "r"}] * 4
    config = {"model": "resnet18", "mode": "train", "precision": "fp32", "batch_size": 4, "width": 32, "height": 32,
              "device": "cpu"}
    result = Comparison("precision=fp32", "precision=amp-bf16", config, {**config, "precision": "amp-bf16"}, 4, 0.02,
                        order=["AB", "BA", "AB", "BA"], samples_per_s_a=[100.0, 101, 99, 100],
                        samples_per_s_b=[6.0, 6.1, 5.9, 6.0], disturbed=[""] * 4,
                        rows_a=rows("fp32", "native"), rows_b=rows("amp-bf16", "emulated"))
    judge(result)
    verdict = result.format().splitlines()[-1]
    assert "SLOWER" in verdict and verdict.endswith("; emulated on this CPU: amp-bf16 (B): not what a GPU would show")
    result.rows_b = rows("amp-bf16", "native")  # natively run, the verdict stands alone
    assert "emulated" not in result.format().splitlines()[-1]
