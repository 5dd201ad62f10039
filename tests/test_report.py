"""The summary notebook and `bench report`: real result rows in, one readable, safe HTML file out.

The rows come from real runs (resnet18, 32 px, 2 steps). Other machines, failures, old schema
versions and hostile strings are made by editing copies of those rows: test input, not a mock.
"""
from __future__ import annotations

import copy
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from bench_core import cli, results, summary
from bench_core.config import BenchConfig
from bench_core.summary.report import build_report
from bench_core import run_benchmark

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = "<script>alert(1)</script>"
TINY = dict(model="resnet18", width=32, height=32, steps=2, warmup_steps=1, repeats=2, min_seconds=0, device="cpu")
SECTIONS = ["Overview", "Headline results", "Machines side by side", "Throughput", "AMP speed-up", "Batch size",
            "Memory", "Step times", "Scaling", "Efficiency", "Published figures", "Failures", "Environment",
            "Method"]


# -- result directories ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    """cpu: real runs. gpu: the same rows as another, twice-as-fast machine with a 2-device run.
    bad: failed rows with hostile strings. old: a schema-0 CSV missing columns. empty: header only."""
    root = tmp_path_factory.mktemp("results")
    cpu = root / "cpu"
    configs = [dict(mode=mode, precision=precision, batch_size=2) for mode in ("train", "infer")
               for precision in ("fp32", "amp-bf16")] + [dict(mode="train", precision="fp32", batch_size=4)]
    real_rows = []
    for extra in configs:
        rows = run_benchmark(BenchConfig(**TINY, **extra))
        assert rows and all(r["status"] == "ok" for r in rows), rows[0]["message"]
        results.write_run(cpu, rows[0]["run_id"], rows)
        real_rows += rows

    gpu = root / "gpu"
    gpu_rows = [_as_other_machine(r, speed=2.0) for r in real_rows]
    results.write_run(gpu, "gpu-runs", gpu_rows)
    one = [r for r in gpu_rows if r["mode"] == "train" and r["precision"] == "fp32" and r["batch_size"] == 2]
    one_device = statistics.median(r["samples_per_s"] for r in one)
    two = [{**copy.deepcopy(one[0]), "run_id": "gpu-ddp", "world_size": 2, "nproc_per_node": 2, "dist_backend": "nccl",
            "global_batch_size": 4, "samples_per_s": one_device * 1.8, "samples_per_s_per_device": one_device * 0.9,
            "repeat": i} for i in range(2)]
    results.write_run(gpu, "gpu-ddp", two)

    bad = root / "bad"
    template = real_rows[0]
    failed = [
        {**template, "run_id": "bad-oom", "status": "oom", "samples_per_s": None, "host": HOSTILE,
         "message": f"RuntimeError: DefaultCPUAllocator: can't allocate memory {HOSTILE}", "model": HOSTILE},
        {**template, "run_id": "bad-error", "status": "error", "samples_per_s": None,
         "message": "ValueError: the loss exploded & then <b>this</b>"},
        {**template, "run_id": "bad-nan", "status": "nan", "message": "non-finite loss in repeat 0"},
    ]
    results.write_run(bad, "failed", failed)

    old = root / "old"
    old.mkdir()
    keep = ["schema_version", "run_id", "status", "message", "model", "mode", "precision", "batch_size",
            "samples_per_s", "host", "device_name", "repeat"]
    with open(old / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=keep + ["a_retired_column"])
        writer.writeheader()
        for row in real_rows[:4]:
            writer.writerow({**{k: row[k] for k in keep}, "schema_version": 0, "a_retired_column": "x"})

    partial = root / "partial"  # a torn last line and a line with too many fields
    partial.mkdir()
    lines = (cpu / "results.csv").read_text().splitlines()
    torn = lines[-1][: len(lines[-1]) // 2]
    (partial / "results.csv").write_text("\n".join(lines[:3] + ["1,2,3" + ",x" * 400] + lines[3:-1] + [torn]))

    empty = root / "empty"
    empty.mkdir()
    (empty / "results.csv").write_text(",".join(results.columns()) + "\n")
    return {"cpu": cpu, "gpu": gpu, "bad": bad, "old": old, "partial": partial, "empty": empty, "root": root}


def _as_other_machine(row: dict, speed: float) -> dict:
    """The same row as if measured on a V100 host `speed` times faster (names, rates and times edited)."""
    out = copy.deepcopy(row)
    out.update(run_id="gpu-runs", host="gpu-node-1", device_type="cuda", device_name="Tesla V100-SXM2-16GB",
               gpu_name="Tesla V100-SXM2-16GB", gpu_count=1, peak_mem_allocated_bytes=300 * 2**20)
    for name in ("samples_per_s", "samples_per_s_per_device", "batches_per_s", "mpx_per_s"):
        out[name] = row[name] * speed
    for name in ("s_per_iter", "step_time_ms_median", "step_time_ms_mean", "step_time_ms_p5", "step_time_ms_p95"):
        out[name] = row[name] / speed
    out["step_times_ms"] = " ".join(f"{float(v) / speed:.3f}" for v in row["step_times_ms"].split())
    return out


@pytest.fixture(scope="module")
def combined(dirs) -> Path:
    """Every directory in one report, through the CLI as a user would run it."""
    out = dirs["root"] / "combined" / "report.html"
    proc = subprocess.run([sys.executable, "-m", "bench_core", "report", *(str(dirs[k]) for k in
                           ("cpu", "gpu", "bad", "old", "empty")), "--out", str(out), "--title", f"Lab {HOSTILE}"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out.resolve())
    assert proc.stderr.strip() == "", proc.stderr
    return out


# -- the report of one machine ----------------------------------------------------------------------

@pytest.mark.slow
def test_report_of_real_rows_has_every_section_chart_and_no_code(dirs):
    html_path = build_report([dirs["cpu"]], dirs["cpu"] / "report.html")
    html = html_path.read_text()
    executed = nbformat.read(dirs["cpu"] / "summary.ipynb", as_version=4)

    assert _stderr_and_errors(executed) == []
    assert "could not be drawn" not in html
    # Charts: throughput, AMP speed-up, 2 batch-size curves, memory, step times; embedded, not linked.
    assert len(re.findall(r'<img[^>]+src="data:image/png;base64,', html)) >= 6
    assert not re.search(r'<img[^>]+src="(?!data:)', html)
    # No code, no prompts, no parameter cells; headings carry the ids the table of contents links to.
    assert "summary.load_results" not in html and "result_dirs: list" not in html
    assert "hl-ipython3" not in html and "In&nbsp;[" not in html
    for title in SECTIONS:
        anchor = title.replace(" ", "-")
        assert f'id="{anchor}"' in html, title
        assert f'href="#{anchor}"' in html, title
    # Content a reader checks: the knee of the batch curve, AMP speed-up, the method.
    assert "knee batch" in html and "speed-up over fp32" in html
    assert "warm-up" in html.lower() and "time.perf_counter" in html
    assert "One machine only" in html
    assert "No matching reference hardware" in html and "DLPerf" in html and "lambdal" in html
    assert oct(html_path.stat().st_mode & 0o777) != oct(0o600)


def test_summary_notebook_is_committed_without_outputs():
    nb = nbformat.read(ROOT / "notebooks" / "summary.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and "result_dirs: list" in params[0].source
    assert nb.cells[0].cell_type == "markdown" and "bench report" in nb.cells[0].source
    # Cells only call bench_core.summary: no analysis code lives in the notebook.
    for cell in code:
        if cell is not params[0]:
            assert all(line.startswith(("summary.", "from bench_core", "results = summary.")) or not line.strip()
                       for line in cell.source.splitlines()), cell.source


# -- several machines, failures, old schemas, empty input, hostile strings ----------------------------

@pytest.mark.slow
def test_combined_report_answers_is_x_twice_as_fast(combined):
    html = combined.read_text()
    assert "Tesla V100-SXM2-16GB · gpu-node-1" in html
    assert "<strong>2.00×</strong>" in html  # the V100 rows are the CPU rows at twice the speed
    assert "scaling efficiency" in html and "0.9" in html  # 1.8x on 2 devices
    executed = nbformat.read(combined.parent / "summary.ipynb", as_version=4)
    assert _stderr_and_errors(executed) == []
    assert "could not be drawn" not in html


@pytest.mark.slow
def test_combined_report_lists_failures_and_what_is_missing(combined, dirs):
    html = combined.read_text()
    for status in ("oom", "error", "nan"):
        assert f'<td style="{summary.TEXT_CELL}">{status}</td>' in html
    assert "the loss exploded &amp; then &lt;b&gt;this&lt;/b&gt;" in html
    assert "non-finite loss in repeat 0" in html
    assert "schema version 0 lack" in html  # the old directory's missing columns are named
    assert "results.csv has no rows yet" in html


@pytest.mark.slow
def test_hostile_strings_are_escaped_everywhere(combined):
    html = combined.read_text()
    assert HOSTILE not in html
    assert "alert(1)" in html  # it is shown ...
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # ... as text
    assert "<b>this</b>" not in html
    assert "<title>Lab &lt;script&gt;" in html


@pytest.mark.slow
@pytest.mark.parametrize("which", ["empty", "bad", "partial"])
def test_report_survives_empty_failed_only_and_torn_results(dirs, which):
    html = build_report([dirs[which]], dirs["root"] / f"only-{which}" / "report.html").read_text()
    for title in SECTIONS:
        assert f'id="{title.replace(" ", "-")}"' in html
    assert "could not be drawn" not in html
    assert {"empty": "No result rows", "bad": "No successful rows",
            "partial": "1 malformed line(s) of results.csv skipped"}[which] in html
    assert HOSTILE not in html


def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    missing = tmp_path / "nope"
    assert cli.main(["report", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "result_dirs" in err and "nope" in err
    no_csv = tmp_path / "no-csv"
    no_csv.mkdir()
    assert cli.main(["report", str(no_csv)]) == 2
    assert "no results.csv" in capsys.readouterr().err
    assert list(no_csv.iterdir()) == []


# -- the analysis functions, on the same rows ----------------------------------------------------------

def test_tables_from_rows(dirs):
    res = summary.load_results([dirs["cpu"], dirs["gpu"], dirs["old"]])
    med, per_machine, baseline, _ = summary.relative_speed(res)
    assert "Tesla" not in baseline  # the first directory's machine
    gpu = per_machine[per_machine["machine"].str.startswith("Tesla")]
    assert gpu["speed_vs_baseline"].iloc[0] == pytest.approx(2.0, rel=1e-6)

    _, per_machine, baseline, _ = summary.relative_speed(res, baseline="v100")  # part of a label, any case
    assert baseline.startswith("Tesla") and per_machine["speed_vs_baseline"].iloc[0] == pytest.approx(0.5)
    _, _, baseline, why = summary.relative_speed(res, baseline="no such machine")
    assert "Tesla" not in baseline and "matches no machine" in why

    scaling = summary.scaling_table(res)
    two = scaling[scaling["world_size"] == 2].iloc[0]
    assert two["speedup"] == pytest.approx(1.8, rel=1e-6) and two["efficiency"] == pytest.approx(0.9, rel=1e-6)

    knees = summary.knee_points(summary.batch_curves(res))
    assert set(knees["batch_sizes"]) == {2} and knees["knee_batch_size"].isin([2, 4]).all()
    failures = summary.failures_table(summary.load_results([dirs["bad"]]))
    assert sorted(failures["status"]) == ["error", "nan", "oom"]


def test_report_shows_a_batch_size_max_search_and_its_failure(tmp_path):
    from bench_core.launch.batch_search import run_at_max_batch
    out = tmp_path / "max"
    _, found = run_at_max_batch(BenchConfig(**{**TINY, "mode": "infer", "batch_size": "max", "max_batch_size": 2}))
    # resnet18 cannot train on batch 1 at 32 px (BatchNorm sees one value per channel): the search fails.
    _, failed = run_at_max_batch(BenchConfig(**{**TINY, "mode": "train", "batch_size": "max", "max_batch_size": 2}))
    for rows in (found, failed):
        results.write_run(out, rows[0]["run_id"], rows)
    failures = summary.failures_table(summary.load_results([out]))
    assert failures[["status", "batch_size"]].values.tolist() == [["error", "max"]]
    html = build_report([out], out / "report.html").read_text()
    assert "batch_size max, batch search: 2 ran, reached the cap max_batch_size 2 (probes: 1 ok, 2 ok)" in html
    assert "batch search stopped by an error after 1 probes (1 error)" in html


def test_knee_is_the_smallest_batch_reaching_90_percent_of_the_best():
    import pandas as pd
    curve = pd.DataFrame({"machine": "m", "model": "r", "mode": "train", "precision": "fp32", "input_shape": "3x8x8",
                          "world_size": 1, "compile": "off", "channels_last": False,
                          "batch_size": [1, 2, 4, 8, 16], "samples_per_s": [10, 50, 91, 100, 98],
                          "step_time_ms": [1, 2, 3, 4, 5]})
    knee = summary.knee_points(curve).iloc[0]
    assert knee["knee_batch_size"] == 4 and knee["best_batch_size"] == 8


def test_published_figures_carry_their_source_and_match_the_same_gpu_and_workload(dirs):
    ref = summary.load_reference()
    assert len(ref) > 50 and ref["url_or_citation"].str.len().gt(10).all() and ref["value"].notna().all()
    assert set(ref["source"]) == {"lambdal", "DLPerf", "3D UNet"}
    assert summary.gpu_matches("Tesla V100-SXM2-16GB", "v100 16gb")
    assert not summary.gpu_matches("Tesla V100-SXM2-32GB", "v100 sxm2 16gb")
    # A V100 row of the published workload (ResNet-50 training at 224 px, fp32) finds lambdal and DLPerf.
    row = results.read_run(dirs["gpu"] / "runs" / "gpu-runs")[0]
    row = {**row, "model": "resnet50", "input_shape": "3x224x224", "mode": "train", "precision": "fp32"}
    v100 = dirs["root"] / "v100"
    results.write_run(v100, "r50", [row])
    matched = summary.reference_matches(summary.load_results([v100]))
    assert set(matched["source"]) == {"lambdal", "DLPerf"}
    assert (matched["gpu"].str.contains("V100")).all()


# -- a real browser look ------------------------------------------------------------------------------

@pytest.mark.slow
def test_report_renders_in_a_real_browser(combined):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (make test installs it): the report was not looked at")
        pytest.skip("chromium not installed (apt-get install chromium); set CI=1 to make this a failure")
    from PIL import Image
    shot = combined.parent / "screenshot.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                        f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1200,3000",
                        combined.resolve().as_uri()], capture_output=True, timeout=120, check=False)
    assert shot.is_file(), "chromium wrote no screenshot"
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 3000)
    small = image.resize((300, 750))
    pixels = list(_pixels(small))
    non_white = sum(1 for p in pixels if min(p) < 235) / len(pixels)
    colourful = sum(1 for r, g, b in pixels if max(r, g, b) - min(r, g, b) > 60) / len(pixels)
    assert non_white > 0.05, f"the page looks blank ({non_white:.1%} non-white)"
    assert colourful > 0.003, f"no coloured charts on the page ({colourful:.2%} coloured pixels)"
    assert len(set(_pixels(image))) > 500  # text, tables and charts: many distinct colours


def _stderr_and_errors(nb) -> list[str]:
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream" and out.name == "stderr":
                found.append(out.text)
            if out.output_type == "error":
                found.append(f"{out.ename}: {out.evalue}")
    return found


def _pixels(image):
    return getattr(image, "get_flattened_data", image.getdata)()  # getdata is deprecated in Pillow 13


def test_emulated_rows_are_labelled_and_their_cost_explained(dirs, tmp_path):
    """The same rows as an AVX2-only CPU records them: amp-bf16 emulated, with the reason."""
    reason = "this CPU has no AVX512_BF16 or AMX-BF16: bf16 is emulated (converted to fp32 around each kernel)"
    rows = [{**r, "precision_support": "emulated", "precision_support_reason": reason}
            if r["precision"] == "amp-bf16" else r
            for run in sorted((dirs["cpu"] / "runs").iterdir()) for r in results.read_run(run)]
    results.write_run(tmp_path, "avx2", rows)
    (tmp_path / "plan.json").write_text(json.dumps({"skipped": [
        {"device": "cpu", "precision": "amp-fp16", "configurations": 4, "reason": "fp16 is emulated here"}]}))
    res = summary.load_results([tmp_path])
    assert set(res.ok["precision"]) == {"fp32", "amp-bf16 (emulated)"}
    assert all("amp-bf16 (emulated)" in c for c in res.ok["config"] if "amp-bf16" in c)
    notes = summary.emulation_notes(res, summary.amp_speedup_table(res))
    assert any(reason in n and "× fp32" in n and "slower" in n for n in notes), notes
    assert any("amp-fp16 was not run on cpu (4 configurations): fp16 is emulated here" in n for n in notes), notes
