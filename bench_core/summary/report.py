"""`bench report DIR...`: execute notebooks/summary.ipynb over result directories and render one HTML file.

Nothing is re-run: the summary reads each DIR/results.csv. The HTML has no code, its charts and its
table library are embedded, and nothing in it is loaded from the network: it opens offline.
`build_report` is what `bench sweep` calls at its end.
"""
from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path

from bench_core.files import atomic_write_text, shipped_notebook
from bench_core.summary.absent import gather
from bench_core.summary.html import DEFAULT_TITLE

SUMMARY_NOTEBOOK = shipped_notebook("summary.ipynb")
# The report reader has no use for the parameters, nor for the notebook's own instructions.
HIDDEN_TAGS = {"parameters", "injected-parameters", "notebook-only"}
# nbconvert's "lab" template without its CDN scripts (require.js, MathJax, Mermaid): see its index.html.j2.
TEMPLATES = Path(__file__).resolve().parent / "templates"
TEMPLATE = "offline"
# A chart is shown as PNG (and SVG where asked): the report embeds the PNG (smaller, the same pixels everywhere).
DISPLAY_PRIORITY = ["text/html", "text/markdown", "image/png", "image/svg+xml", "image/jpeg", "text/plain"]
CELL_TIMEOUT_S = 600
# What ITables writes for a notebook whose scripts do not run: "This is the init_notebook_mode cell
# ... is your notebook trusted?" with its logo, a lock in each table's first header (both in
# <noscript>), and a link to its help page beside them. A report read where no script runs (a mail
# previewer) shows the tables' static previews without them; where scripts run, none of it shows.
NOSCRIPT = re.compile(r"<noscript>.*?</noscript>", re.DOTALL | re.IGNORECASE)
PREVIEW_HELP_LINK = re.compile(r"<sup>\s*<a href=\"?https://itables\.org/[^>]*>\s*ⓘ\s*</a>\s*</sup>")


class ReportError(RuntimeError):
    """The summary notebook failed; the executed notebook is kept for a look."""


def build_report(result_dirs: list[Path], out_html: Path, title: str = "", baseline: str = "",
                 predict_gpus: list[str] | None = None, prices: list[str] | None = None, svg: bool = False) -> Path:
    """Execute the summary notebook into <out_html dir>/summary.ipynb, then write out_html (atomically).
    predict_gpus, prices: the GPUs the report predicts and their prices per GPU-hour (NAME=PRICE texts),
    checked by the caller (specs.gpu_list, prices.parse_prices); empty: the defaults. svg: the executed
    notebook's charts carry an SVG beside their PNG (the page embeds the PNG either way)."""
    import papermill

    out_html = Path(out_html).resolve()
    out_dir = out_html.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    executed = out_dir / "summary.ipynb"
    parameters = {"result_dirs": [str(Path(d).resolve()) for d in result_dirs], "title": str(title or ""),
                  "baseline": str(baseline or ""), "predict_gpus": list(predict_gpus or []),
                  "prices": list(prices or []), "svg": bool(svg)}
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".summary.", suffix=".ipynb")
    os.close(fd)
    # papermill logs every cell at INFO; the report command prints only the path.
    logging.getLogger("papermill").setLevel(logging.WARNING)
    try:
        papermill.execute_notebook(str(SUMMARY_NOTEBOOK), tmp, parameters=parameters, kernel_name="python3",
                                   progress_bar=False, log_output=False, execution_timeout=CELL_TIMEOUT_S,
                                   # The kernel's own log is noise here: a TCP-transport warning at start and,
                                   # under load, "KeyboardInterrupt caught" from jupyter_client's interrupt-
                                   # before-shutdown. Cell errors still reach us as PapermillExecutionError.
                                   extra_arguments=["--IPKernelApp.log_level=CRITICAL"],
                                   # Every output is here when the last cell ends: a graceful shutdown only
                                   # waited for the kernel process to exit (about 3.5 s a report).
                                   shutdown_kernel="immediate",
                                   # Written once at the end (and on a failure), not after every cell: only the
                                   # finished notebook is read, and the saves cost about 0.4 s a report.
                                   request_save_on_cell_execute=False)
    except papermill.PapermillExecutionError as exc:
        os.replace(tmp, executed)
        raise ReportError(f"the summary notebook failed in cell {exc.cell_index}: {exc.ename}: "
                          f"{str(exc.evalue).splitlines()[0] if exc.evalue else ''} (see {executed})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    os.replace(tmp, executed)
    move_absent(executed)
    write_html(executed, out_html, title=title)
    for path in (executed, out_html):  # a report is for sharing: readable like any file the user makes
        path.chmod(0o666 & ~_umask())
    return out_html


def move_absent(executed: Path) -> None:
    """The sections with nothing to show, out of the executed notebook and into one list (summary/absent.py)."""
    import nbformat
    notebook = nbformat.read(executed, as_version=4)
    if gather(notebook):
        atomic_write_text(executed, nbformat.writes(notebook))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_html(executed_notebook: Path, out_html: Path, title: str = "") -> Path:
    """One self-contained HTML file: no code, no prompts, no parameter or instruction cells, images and
    scripts embedded, nothing loaded from the network."""
    import nbformat
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor
    from traitlets.config import Config


    config = Config()
    config.TagRemovePreprocessor.remove_cell_tags = HIDDEN_TAGS
    config.TagRemovePreprocessor.enabled = True
    config.NbConvertBase.display_data_priority = DISPLAY_PRIORITY
    exporter = HTMLExporter(config=config, template_name=TEMPLATE, extra_template_basedirs=[str(TEMPLATES)])
    exporter.exclude_input = True
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    exporter.embed_images = True
    exporter.register_preprocessor(TagRemovePreprocessor(config=config), enabled=True)
    notebook = nbformat.read(executed_notebook, as_version=4)
    drop_notebook_notices(notebook)
    body, _ = exporter.from_notebook_node(notebook, resources={"metadata": {"name": title or DEFAULT_TITLE}})
    atomic_write_text(out_html, body)
    return out_html


def drop_notebook_notices(notebook) -> None:
    """Remove ITables' notices for an untrusted notebook from every HTML output (see NOSCRIPT)."""
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            markup = output.get("data", {}).get("text/html")
            if markup:
                markup = "".join(markup) if isinstance(markup, list) else markup
                output["data"]["text/html"] = PREVIEW_HELP_LINK.sub("", NOSCRIPT.sub("", markup))
