"""Every place that shows a figure marks a disturbed one: the progress line of a repeat (bench run, the
template in JupyterLab, a sweep's notebook) and the template's table and step-time chart, and the report's
sections past the Headline (step times, batch-size curves, scaling, the cost frontier, machines of one
kind, ours beside published figures, which judge only undisturbed repeats). A real run beside a real CPU
hog for the progress line; the report's sections from one real run's rows, some flagged as the sampler
flags them."""
import copy

import pytest

from bench_core import BenchConfig, results, run_benchmark
from bench_core.summary.cost import cost_points
from bench_core.summary.kinds import instance_spread
from bench_core.summary.load import load_results
from bench_core.summary.reference import reference_matches
from bench_core.summary.tables import DISTURBED_MARK, batch_curves, knee_points, scaling_table, step_times_long
from bench_core.sweep.notebook import plot_step_times, result_table
from conftest import cpu_hog

TINY = dict(model="resnet18", width=32, height=32, batch_size=2, steps=2, warmup_steps=1, repeats=2,
            min_seconds=0.3, device="cpu", mode="infer")  # windows long enough for the sampler to see the hog
FLAG = "other-processes-on-cpu(0.94 cores)"


@pytest.fixture(scope="module")
def beside_a_hog():
    """The template's own calls, beside another user's busy process: its progress lines and its rows."""
    lines = []
    with cpu_hog():
        rows = run_benchmark(BenchConfig(**TINY), progress=lines.append)
    return lines, rows


def test_a_repeat_run_beside_another_process_says_disturbed_in_its_progress_line(beside_a_hog):
    lines, rows = beside_a_hog
    repeats = [line for line in lines if ": repeat " in line]
    assert len(repeats) == 2 and all(r["noise_flags"] and "other-processes-on-cpu" in r["noise_flags"] for r in rows)
    assert all(line.endswith("[ok, DISTURBED: other-processes-on-cpu]") for line in repeats), repeats


def test_the_templates_table_and_chart_mark_the_disturbed_configuration(beside_a_hog):
    _, rows = beside_a_hog
    table = result_table(rows)
    assert "disturbed" in table.data.columns
    assert table.data["disturbed"].iloc[0].startswith("DISTURBED 2/2: other-processes-on-cpu")
    assert "color: #b00020" in table.to_html()  # its figures in red, as the terminal paints them
    fig = plot_step_times(rows)
    assert all("DISTURBED: other-processes-on-cpu" in t.get_text() for t in fig.axes[0].get_legend().get_texts()
               if t.get_text().startswith("repeat"))
    quiet = [dict(r, noise_flags=None) for r in rows]
    assert "disturbed" not in result_table(quiet).data.columns  # no empty column on a quiet machine


@pytest.fixture(scope="module")
def report_rows(beside_a_hog, tmp_path_factory):
    """One real run's rows as a report's results: batch 2 and 4, one and two devices, two machines of one kind
    (one with a price), the second machine's repeats flagged as disturbed."""
    _, rows = beside_a_hog
    clean = [dict(r, noise_flags=None, price_per_hour=1.0, currency="USD", cost_per_million=2.0) for r in rows]
    root = tmp_path_factory.mktemp("report-rows")
    variants = {"b4": dict(batch_size=4, global_batch_size=4, run_id="b4"),
                "x2": dict(world_size=2, nproc_per_node=2, run_id="x2"),
                "other": dict(host="other-host", run_id="other", noise_flags=FLAG)}
    results.write_run(root / "here", "base", clean)
    for name, change in variants.items():
        edited = [{**copy.deepcopy(r), **change, "samples_per_s": r["samples_per_s"] * 1.5,
                   "throughput": r["samples_per_s"] * 1.5} for r in clean]
        if name == "other":
            edited += [{**e, "batch_size": 4, "global_batch_size": 4, "run_id": "other-b4"} for e in edited]
        results.write_run(root / ("there" if name == "other" else "here"), name, edited)
    return load_results([root / "here", root / "there"])


def test_the_reports_sections_past_the_headline_mark_the_disturbed_figures(report_rows):
    res = report_rows
    steps = step_times_long(res)
    assert steps.loc[steps["machine"].str.contains("other-host"), "disturbed"].all()
    assert not steps.loc[~steps["machine"].str.contains("other-host"), "disturbed"].any()
    knees = knee_points(batch_curves(res))
    assert sorted(knees["disturbed"]) == [0, 4]  # the other host's curve: all 4 repeats flagged
    scaling = scaling_table(res)
    assert "disturbed" in scaling and (scaling["disturbed"] == 0).all()  # only this host ran on 2 devices
    points = cost_points(res)
    assert set(points.loc[points["machine"].str.contains("other-host"), "disturbed"]) == {2}
    spread = instance_spread(res)
    assert spread["medians"].str.contains(f"other-host: [0-9.,]+ {DISTURBED_MARK}").all(), spread["medians"]


def test_ours_beside_a_published_figure_is_judged_from_undisturbed_repeats_only(report_rows):
    """Our rows made lambdal's ResNet-50 on a V100 by name (model, input, GPU): the disturbed machine's
    comparison with the published figure says 'disturbed: re-measure', the quiet one's gives a ratio."""
    res = report_rows
    ok = res.ok.copy().assign(model="resnet50", mode="train", precision="fp32", input_shape="3x224x224",
                              device_name="Tesla V100-SXM2-16GB", world_size=1.0)
    matched = reference_matches(type(res)(rows=ok, dirs=res.dirs, names=res.names))
    lambdal = matched[matched["source"] == "lambdal"]
    flagged = lambdal[lambdal["machine"].str.contains("other-host")]
    quiet = lambdal[~lambdal["machine"].str.contains("other-host")]
    assert len(flagged) and len(quiet)
    assert (flagged["disturbed"] > 0).all() and (flagged["verdict"] == "disturbed: re-measure").all()
    assert (quiet["disturbed"] == 0).all() and quiet["ours_vs_published"].notna().all()
