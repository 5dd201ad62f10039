"""The notebooks in JupyterLab, as `make lab` opens them: the summary notebook runs with no page
error, the file browser shows only the notebooks, and the step-time chart fits an output area."""
from __future__ import annotations

import importlib.util
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from bench_core import BenchConfig, results, run_benchmark
from bench_core.summary import screenshot
from bench_core.sweep.notebook import plot_step_times

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(model="resnet18", width=32, height=32, batch_size=2, steps=2, warmup_steps=2, repeats=2,
            min_seconds=0, device="cpu")
# The output area of a notebook in a 1280-pixel browser window with JupyterLab's file browser open
# is about 850 CSS pixels wide; JupyterLab draws an SVG chart at its own size, clipped past that.
OUTPUT_AREA_PX = 800


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    found = []
    for mode in ("train", "infer"):
        found += run_benchmark(BenchConfig(**TINY, mode=mode))
    assert all(r["status"] == "ok" for r in found), found[0]["message"]
    return found


def test_the_step_time_chart_fits_a_notebook_output_area(rows, tmp_path):
    fig = plot_step_times(rows)
    svg = tmp_path / "steps.svg"
    fig.savefig(svg, format="svg", bbox_inches="tight")  # what the notebook's inline backend does
    width_pt = float(re.search(r'<svg[^>]* width="([\d.]+)pt"', svg.read_text()).group(1))
    assert width_pt * 4 / 3 <= OUTPUT_AREA_PX, f"the chart is {width_pt * 4 / 3:.0f} px wide"
    for ax in fig.axes:  # steps are counted in whole numbers
        assert all(float(t).is_integer() for t in ax.get_xticks()), ax.get_xticks()


def _lab_or_skip() -> None:
    """JupyterLab, playwright and Chromium, or a skip; with CI=1 a failure (make test installs them)."""
    missing = [what for what, ok in (("chromium (apt-get install chromium)", screenshot.chromium()),
                                     ("playwright (pip install -e '.[test]')", importlib.util.find_spec("playwright")),
                                     ("jupyterlab (pip install -e '.[test]')", importlib.util.find_spec("jupyterlab")))
               if not ok]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{' and '.join(missing)} not installed: the notebooks were not run in JupyterLab")
        pytest.skip(f"{' and '.join(missing)} not installed; set CI=1 to make this a failure")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The notebook in JupyterLab's current tab: its kernel, and whether every code cell has run.
NOTEBOOK = "window.jupyterapp?.shell?.currentWidget"  # (undefined until JupyterLab has started)
KERNEL_IDLE = f"() => {NOTEBOOK}?.sessionContext?.session?.kernel?.status === 'idle'"
ALL_RAN = (f"() => {NOTEBOOK}.sessionContext.session.kernel.status === 'idle' && {NOTEBOOK}.content.widgets"
           ".filter(c => c.model.type === 'code').every(c => c.model.executionCount !== null)")
STDERR_OUTPUTS = (f"() => {NOTEBOOK}.content.widgets.filter(c => c.model.type === 'code')"
                  ".flatMap(c => c.model.outputs.toJSON()).filter(o => o.output_type === 'stream' && o.name === 'stderr')"
                  ".map(o => o.text)")
HTML_OUTPUTS = (f"() => {NOTEBOOK}.content.widgets.filter(c => c.model.type === 'code')"
                ".flatMap(c => c.model.outputs.toJSON()).map(o => [].concat((o.data || {})['text/html'] || []).join(''))")
ERROR_OUTPUTS = (f"() => {NOTEBOOK}.content.widgets.filter(c => c.model.type === 'code')"
                 ".flatMap(c => c.model.outputs.toJSON()).filter(o => o.output_type === 'error')"
                 ".map(o => o.ename + ': ' + o.evalue)")


@pytest.mark.slow
def test_the_summary_notebook_runs_in_jupyterlab_without_a_page_error(rows, tmp_path):
    """`make lab` (jupyter lab notebooks/), then the summary notebook run as it is: after `make report`
    (outputs/default, written after the rows benchmark.ipynb left in outputs/lab) it shows that
    report, with no warning cell."""
    _lab_or_skip()
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")  # the folder as it is: nothing else in it
    results.write_run(tmp_path / "outputs" / "lab", rows[0]["run_id"], rows[:1])
    lab_csv = tmp_path / "outputs" / "lab" / "results.csv"
    os.utime(lab_csv, (lab_csv.stat().st_mtime - 60,) * 2)
    results.write_run(tmp_path / "outputs" / "default", rows[0]["run_id"], rows)
    port, token = _free_port(), secrets.token_hex(16)
    state = tmp_path / "jupyter"  # settings, workspaces and runtime files: none of the user's
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(state / "config"), "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(state / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(state / "workspaces"),
           "MPLBACKEND": "Agg"}
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               f"--IdentityProvider.token={token}", "--LabApp.expose_app_in_browser=True", "notebooks"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # as make lab adds it
    log = tmp_path / "lab.log"
    with open(log, "w") as log_file:
        lab = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        _wait_for_server(f"http://127.0.0.1:{port}/api/status?token={token}", lab, log)
        from playwright.sync_api import sync_playwright
        problems: list[str] = []
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=screenshot.chromium(),
                                                 args=["--no-sandbox", "--disable-gpu"])
            try:
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                context.route(re.compile(r"^https?://(?!127\.0\.0\.1)"), lambda route: route.abort())
                page = context.new_page()
                page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
                page.on("console", lambda message: problems.append(f"console: {message.text}")
                        if message.type == "error" else None)
                page.goto(f"http://127.0.0.1:{port}/lab/tree/summary.ipynb?token={token}")
                page.wait_for_function(KERNEL_IDLE, timeout=120_000)
                page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
                page.wait_for_function(ALL_RAN, timeout=300_000, polling=500)
                time.sleep(2)  # the last outputs' scripts
                assert page.evaluate(ERROR_OUTPUTS) == []
                assert page.evaluate(STDERR_OUTPUTS) == []  # no pink box: no warning from pandas or the loader
                shown = " ".join(page.evaluate(HTML_OUTPUTS))
                assert "result directory: default." in shown and "No successful rows" not in shown
                assert problems == [], problems
                assert page.locator(".jp-OutputArea-output table.dataTable").count() >= 3  # the tables work
                listed = page.locator(".jp-DirListing-content .jp-DirListing-itemText").all_inner_texts()
                assert sorted(listed) == ["benchmark.ipynb", "summary.ipynb"], listed
            finally:
                browser.close()
    finally:
        lab.terminate()
        lab.wait(30)


def _wait_for_server(url: str, process: subprocess.Popen, log: Path, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"jupyter lab stopped: {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"jupyter lab did not answer in {seconds:.0f} s: {log.read_text()[-2000:]}")
