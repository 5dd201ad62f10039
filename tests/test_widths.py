"""Charts and tables fit the page they are shown in, looked at in headless Chromium: in JupyterLab the
throughput chart was 1,049 px wide in a 968 px output area (a dot past 200 images/s cut off), and in the
report at 1,400 px a wide table was cut on the right. A real chart and a real 31-column table, shown as the
report's sections show them, in JupyterLab's way of drawing an SVG and in the report's own page."""
import os
import re
import urllib.parse

import nbformat
import pandas as pd
import pytest

from bench_core.summary import screenshot
from bench_core.summary.charts import category_chart
from bench_core.summary.figures import SVG_MAX_PX
from bench_core.summary.html import init_tables, show_table
from bench_core.summary.report import write_html

OUTPUT_AREA_PX = 968  # the JupyterLab output area


def browser_or_skip() -> None:
    if not screenshot.chromium():
        if os.environ.get("CI"):
            pytest.fail("chromium not installed (make test installs it): the widths were not looked at")
        pytest.skip("chromium not installed; set CI=1 to make this a failure")


@pytest.fixture(scope="module")
def outputs():
    """What a report cell displays: the table library, a 31-column table of words and numbers, and the
    throughput chart with a dot past 200 images/s at its right edge."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output
    InteractiveShell.instance()
    wide = pd.DataFrame({f"{name} of the configuration": [f"resnet18 train fp32 {name} {i}" for i in range(3)]
                         for name in ("model", "mode", "precision", "settings", "machine", "binds", "source")})
    for i in range(24):  # numbers never wrap: this table is wider than any page
        wide[f"figure {i} (median)"] = [1234567.0 * (i + 1), 2.5, 0.75]
    chart = pd.DataFrame({"panel": ["train"] * 4, "label": ["resnet18 3x64x64", "resnet50 3x64x64"] * 2,
                          "hue": ["fp32", "fp32", "amp-bf16", "amp-bf16"], "value": [11.6, 34.0, 120.0, 231.0],
                          "low": [11.0, 33.0, 110.0, 220.0], "high": [12.0, 35.0, 130.0, 240.0], "marked": False})
    with capture_output(stdout=False, stderr=False) as shown:
        init_tables()
        show_table(wide)
        category_chart(chart, ["train"], ["fp32", "amp-bf16"], "images/s (log scale)", "Throughput in images/s",
                       "Throughput in images/s by model and precision, log scale")
    return shown.outputs


def test_the_throughput_chart_fits_a_jupyterlab_output_area(outputs, tmp_path):
    """JupyterLab draws a trusted notebook's SVG as an image at the size the SVG states, unconfined."""
    browser_or_skip()
    svg = next(o.data["image/svg+xml"] for o in outputs if "image/svg+xml" in o.data)
    width = float(re.search(r'<svg[^>]*\swidth="([\d.]+)px"', svg).group(1))
    assert width <= SVG_MAX_PX < OUTPUT_AREA_PX
    page = tmp_path / "lab.html"
    page.write_text(f'<html><body style="margin:0"><div class="jp-RenderedSVG" style="width:{OUTPUT_AREA_PX}px">'
                    f'<img src="data:image/svg+xml,{urllib.parse.quote(svg)}"></div></body></html>')
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=screenshot.chromium(), args=["--no-sandbox"])
        try:
            view = browser.new_page(viewport={"width": 1280, "height": 900})
            view.goto(page.as_uri())
            image = view.evaluate("() => { const r = document.querySelector('img').getBoundingClientRect(); "
                                  "return [r.width, r.height]; }")
        finally:
            browser.close()
    assert 0 < image[0] <= OUTPUT_AREA_PX and image[1] > 100, image  # whole, and drawn


def test_a_wide_table_and_a_chart_fit_the_report_at_1400_px(outputs, tmp_path):
    """Nothing passes the page's right edge, and a table too wide for the page scrolls sideways in a box no
    taller than the screen, its header kept: its scroll bar is in view with its rows, never past the screen's
    foot (the report's wide table read as cut on the right). The chart is within the page."""
    browser_or_skip()
    notebook = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [nbformat.v4.new_output("display_data", data=o.data, metadata=o.metadata) for o in outputs]
    notebook.cells = [nbformat.v4.new_markdown_cell("## Wide"), cell]
    executed = tmp_path / "summary.ipynb"
    nbformat.write(notebook, executed)
    report = write_html(executed, tmp_path / "report.html")
    with screenshot.offline_page(report, width=1400, height=900) as (page, log):
        found = page.evaluate("""() => {
          const right = document.querySelector('main').getBoundingClientRect().right;
          const boxes = [...document.querySelectorAll('.dt-scroll-body')].map(b => {
            const r = b.getBoundingClientRect();
            return {right: r.right, height: r.height, scroll: b.scrollWidth, client: b.clientWidth}; });
          const heads = [...document.querySelectorAll('.dt-scroll-head th')].map(th => th.innerText);
          const images = [...document.querySelectorAll('img')].map(i => i.getBoundingClientRect().right);
          return {right, boxes, heads, images, page: document.documentElement.scrollWidth, screen: innerHeight};
        }""")
    assert found["page"] <= 1400  # no sideways scroll of the page itself
    (box,) = found["boxes"]
    assert box["right"] <= found["right"] + 1 and box["scroll"] > box["client"]  # it scrolls, within the page
    assert box["height"] <= 0.7 * found["screen"] + 1  # its scroll bar on screen with the rows it moves
    assert "figure 23 (median)" in found["heads"]  # the header kept above the rows
    assert found["images"] and all(right <= found["right"] + 1 for right in found["images"]), found
