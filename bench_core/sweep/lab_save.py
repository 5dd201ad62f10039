"""What JupyterLab saves of the notebooks shipped in notebooks/ (`make lab` makes this the server's
pre-save hook): the notebook as committed, its code, markdown and tags as edited, without what running it
added (outputs, execution counts, the kernel's language_info), so that running the template, saving it or
letting JupyterLab autosave leaves the checkout clean and `bench sweep` executes what was committed. Nothing
of the run is lost: the notebook with its outputs is kept as outputs/lab/executed/<name> beside the rows the
run wrote to outputs/lab/. A notebook of your own in notebooks/ is saved as it is.

Why a hook, and not copies or a git filter: the lab opening copies would break the notebooks' relative paths
(../outputs/lab) and leave an edit of the template in a copy; a git clean filter hides the change from git
but the file on disk still changes (and bench sweep executes it), and it needs .git and a per-clone setting.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

from bench_core.files import atomic_write_text

SHIPPED = ("benchmark.ipynb", "summary.ipynb")
EXECUTED = Path("outputs") / "lab" / "executed"   # under the repository (the folder above notebooks/)
# Cell metadata a run or a look at its output adds, never something one edits on purpose.
RUN_METADATA = ("execution", "scrolled", "collapsed", "ExecuteTime")


def keep_shipped_clean(model: dict, path: str, contents_manager=None, **_) -> None:
    """jupyter_server's pre_save_hook: in place, a shipped notebook's model stripped of what running it added
    (the file on disk keeps its notebook-level metadata); its executed copy written under outputs/lab/executed/.
    Any other file is left alone."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict) or not is_shipped(path):
        return
    notebook = model["content"]
    root = Path(getattr(contents_manager, "root_dir", ".") or ".")
    if has_outputs(notebook):
        target = root.resolve().parent / EXECUTED / Path(path).name
        try:
            keep_executed(notebook, target)
        except OSError as exc:  # a read-only checkout: the notebook itself is still saved clean
            log = getattr(contents_manager, "log", None)
            if log is not None:
                log.warning("notebook-bench: the executed copy could not be kept at %s: %s", target, exc)
    strip_run(notebook, committed_metadata(root / path))


def is_shipped(path: str) -> bool:
    """A notebook shipped in notebooks/ (JupyterLab's root): its API path is its bare name."""
    parts = Path(str(path).strip("/")).parts
    return len(parts) == 1 and parts[0] in SHIPPED


def has_outputs(notebook: dict) -> bool:
    return any(cell.get("outputs") for cell in notebook.get("cells", []))


def strip_run(notebook: dict, metadata: dict | None = None) -> None:
    """In place: no outputs, no execution counts, no run-made cell metadata; the notebook-level metadata the
    file had (`metadata`), where it had any, else the kernel's language_info cut to its name."""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        for key in RUN_METADATA:
            cell.get("metadata", {}).pop(key, None)
    if metadata is not None:
        notebook["metadata"] = metadata
    elif isinstance(notebook.get("metadata", {}).get("language_info"), dict):
        info = notebook["metadata"]["language_info"]
        notebook["metadata"]["language_info"] = {"name": info.get("name", "python")}


def committed_metadata(path: Path) -> dict | None:
    """The notebook-level metadata of the file as it is on disk (None when it cannot be read)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("metadata")
    except (OSError, ValueError, AttributeError):
        return None


def keep_executed(notebook: dict, target: Path) -> None:
    """The run with its outputs, as JupyterLab would have saved it, at `target` (never inside notebooks/)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, json.dumps(copy.deepcopy(notebook), sort_keys=True, indent=1, ensure_ascii=False) + "\n")
