"""What a GPU reaches (bench_core/data/gpu_achieved.csv): every figure with the source it was read in, a GPU without
figures taking the measured GPUs' median fraction, and each measured GPU's figures held out as the error table holds
them out."""
import re
import statistics

import pytest

from bench_core.predict import ceilings, published
from bench_core.predict.ceilings import Ceilings
from bench_core.predict.specs import data_rows, spec


def test_every_achieved_figure_has_its_source_and_names_a_gpu_with_a_spec_sheet():
    rows = data_rows("gpu_achieved.csv")
    assert len(rows) >= 40
    for r in rows:
        assert re.search(r"\S.*https?://\S+$", r["source"]) and float(r["value"]) > 0, r
        assert r["quantity"] in ("matmul_bf16", "matmul_fp16", "matmul_fp32", "copy_gbps", "l2_mb", "fp32_lanes",
                                 "sms"), r
        spec(r["gpu"])  # a predictable GPU of gpu_peaks.csv
    for r in rows:  # what was measured never exceeds what the datasheet says
        if r["quantity"].startswith("matmul"):
            assert float(r["value"]) <= spec(r["gpu"]).number(r["quantity"].split("_")[1])
        if r["quantity"] == "copy_gbps":
            assert float(r["value"]) <= spec(r["gpu"]).number("memory_gbps")


def test_a_gpu_without_its_own_figures_takes_the_measured_gpus_median_fraction_and_says_so():
    rtx = Ceilings(spec("RTX-4090"))
    matmul, copy = ceilings.median_fractions()
    assert rtx.matmul_fraction() == (matmul, "the measured GPUs' median")
    assert rtx.bandwidth() == pytest.approx(1008e9 * copy) and rtx.peak("fp16") == pytest.approx(165.2e12 * matmul)
    assert 0.7 < matmul < 0.9 and 0.75 < copy < 0.95
    h100 = Ceilings(spec("H100-SXM5-80GB"))
    assert h100.bandwidth() == pytest.approx(2900e9) and h100.matmul_fraction()[1] == "measured"
    assert Ceilings(spec("H100-SXM5-80GB"), achieved=False).bandwidth() == pytest.approx(3350e9)
    with ceilings.left_out("H100-SXM5-80GB"):  # held out, the H100 is a GPU never measured
        assert Ceilings(spec("H100-SXM5-80GB")).copy_fraction()[1] == "the measured GPUs' median"
    assert Ceilings(spec("H100-SXM5-80GB")).copy_fraction()[1] == "measured"


def test_fp32_math_runs_at_what_an_fp32_matmul_reached_not_the_datasheet():
    """The T4's 70 W cap holds its fp32 matmul at 4.35 of its 8.1 TFLOP/s; a V100 reaches 14.06 of 15.7. A GPU with no
    fp32 figure of its own (the GH200) takes the median fraction of those that have one, and says so; tensor classes
    keep the tensor cores' fraction, and the datasheet ceilings (achieved=False) are the datasheet's."""
    assert Ceilings(spec("T4")).peak("fp32") == pytest.approx(4.35e12)
    assert Ceilings(spec("V100-SXM2-16GB")).peak("fp32") == pytest.approx(14.06e12)
    assert Ceilings(spec("V100-SXM2-16GB")).peak("bf16") == pytest.approx(14.06e12)  # no bf16 units: fp32 math
    gh200 = Ceilings(spec("GH200-96GB"))
    assert gh200.fp32_fraction() == (ceilings.median_fp32_fraction(), "the measured GPUs' median")
    assert gh200.peak("fp32") == pytest.approx(67e12 * ceilings.median_fp32_fraction())
    assert 0.5 < ceilings.median_fp32_fraction() < 0.95
    assert Ceilings(spec("T4")).peak("fp16") == pytest.approx(65e12 * Ceilings(spec("T4")).matmul_fraction()[0])
    assert Ceilings(spec("T4"), achieved=False).peak("fp32") == pytest.approx(8.1e12)


def test_the_sm_issue_rate_is_the_sms_times_the_clock():
    """fp32 datasheet peak / (2 x fp32 lanes of an SM): 80 SMs at 1530 MHz on a V100, 132 at 1980 on an H100."""
    assert Ceilings(spec("V100-SXM2-16GB")).issue_rate() == pytest.approx(80 * 1.53e9, rel=0.01)
    assert Ceilings(spec("H100-SXM5-80GB")).issue_rate() == pytest.approx(132 * 1.98e9, rel=0.01)
    assert Ceilings(spec("A100-SXM4-80GB")).issue_rate() == pytest.approx(108 * 1.41e9, rel=0.01)
    assert Ceilings(spec("L4")).issue_rate() is not None and Ceilings(spec("H100-SXM5-80GB")).l2_mb() == 50


def test_the_sms_and_lanes_of_a_gpu_give_its_datasheet_fp32_at_a_clock_it_runs():
    """SMs x fp32 lanes x 2 x clock is the fp32 datasheet peak: each GPU with both figures comes out at a boost clock
    between 1.0 and 2.6 GHz (a wrong SM count or lane figure would not)."""
    table = ceilings.measured()
    both = [g for g, figures in table.items() if "sms" in figures and "fp32_lanes" in figures]
    assert len(both) >= 12
    for gpu in both:
        clock = spec(gpu).number("fp32") * 1e12 / (2 * table[gpu]["sms"][0] * table[gpu]["fp32_lanes"][0])
        assert 1.0e9 < clock < 2.6e9, (gpu, clock)


def test_each_measured_gpu_is_scored_with_its_own_figures_held_out():
    """The fallback fraction is chosen from the other GPUs' figures: the error table states each measured GPU's
    pairs' error with its own figures held out, as a GPU never measured is predicted."""
    rows = {r["gpu"]: r for r in published.held_out_by_gpu()}
    assert {"A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB", "V100-SXM2-16GB", "T4"} <= set(rows)
    h100 = rows["H100-SXM5-80GB"]
    mine = [abs(r["error"]) for r in published.predictions() if r["kind"] == published.GPU_TO_GPU
            and "H100-SXM5-80GB" in (r["gpu_from"], r["gpu_to"])]
    assert h100["pairs"] == len(mine) and h100["median_abs_error"] == pytest.approx(statistics.median(mine))
    assert h100["held_out_median_abs_error"] != h100["median_abs_error"]  # its own figures count
