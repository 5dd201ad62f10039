"""The papermill child of one sweep execution: runs the template with papermill in a process of its
own (so a timeout, Ctrl-C or SIGTERM can take down the whole tree: this process, the Jupyter kernel and
any torchrun workers), dies with the sweep (Linux PR_SET_PDEATHSIG) and writes its outcome (ok,
papermill's `ename: evalue`, or a dead kernel) to a file.

It imports papermill and bench_core's plain-data parts only: the kernel imports torch itself, so
this process need not (it cost each execution about a second, and more on slower CPUs).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench_core import results
from bench_core.errors import EXIT_INTERRUPTED, die_with_parent, end_process
from bench_core.files import skip_iri_grammars
from bench_core.results.rows import error_message, first_line


@dataclass
class Outcome:
    status: str            # ok | error | crashed | timeout
    message: str = ""
    # when this process was running, had papermill imported and had the notebook done (POSIX seconds):
    # the sweep's account of where its time went (sweep/timing.py)
    marks: dict = field(default_factory=dict)


def banner(notebook: Path, text: str) -> None:
    """Put a note at the top of a notebook that was stopped from outside (papermill could not)."""
    import nbformat
    try:
        nb = nbformat.read(notebook, as_version=4)
    except Exception:  # noqa: BLE001 - absent or cut off mid-write: nothing to annotate
        return
    cell = nbformat.v4.new_markdown_cell(f'<span style="color:red; font-size:1.5em;">{text}</span>')
    cell.metadata["tags"] = ["bench-sweep-banner"]
    nb.cells = [c for c in nb.cells if "bench-sweep-banner" not in c.metadata.get("tags", [])]
    nb.cells.insert(0, cell)
    results.atomic_write_text(notebook, nbformat.writes(nb))


def _on_term(signum, frame):
    import psutil
    with contextlib.suppress(psutil.Error):
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
    os._exit(128 + signum)


def child_main(spec_path: str) -> int:
    marks = {"started": time.time()}
    spec = json.loads(Path(spec_path).read_text())
    signal.signal(signal.SIGTERM, _on_term)
    die_with_parent(spec["parent_pid"], signal.SIGTERM, EXIT_INTERRUPTED)  # the sweep died: so does this
    skip_iri_grammars()
    import papermill as pm
    from nbclient.exceptions import DeadKernelError
    marks["papermill_imported"] = time.time()
    try:
        pm.execute_notebook(spec["template"], spec["output"], parameters=spec["parameters"],
                            kernel_name=spec["kernel"], progress_bar=False, log_output=False, cwd=spec["cwd"],
                            start_timeout=180, extra_arguments=["--IPKernelApp.log_level=CRITICAL"],
                            # Every row is on disk and every output here when the last cell ends: a graceful
                            # shutdown only waited (3.5 s an execution) for the kernel process to exit.
                            shutdown_kernel="immediate")
        outcome = Outcome("ok")
    except pm.PapermillExecutionError as exc:
        outcome = Outcome("error", f"{exc.ename}: {first_line(str(exc.evalue))}")
    except DeadKernelError as exc:
        outcome = Outcome("crashed", f"the kernel died (DeadKernelError: {first_line(str(exc)) or 'Kernel died'})")
        banner(Path(spec["output"]), f"The kernel died during this execution: {outcome.message}.")
    except Exception as exc:  # noqa: BLE001 - kernel failed to start, notebook unreadable, ...
        outcome = Outcome("error", error_message(exc))
    outcome.marks = {**marks, "notebook_done": time.time()}
    results.atomic_write_text(Path(spec["outcome"]), json.dumps(outcome.__dict__))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 2:
        end_process(child_main(sys.argv[1]))
    sys.exit("usage: python -m bench_core.sweep.child SPEC.json (internal; use `bench sweep FILE`)")
