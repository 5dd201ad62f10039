"""Files that are never seen half-written: atomic replace, a lock per output folder, a check
that a folder can hold results before anything is measured, and a safe place for rows that
could not be written where they were meant to go.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from filelock import FileLock

from bench_core.errors import ConfigError


@contextlib.contextmanager
def locked(out_dir: Path) -> Iterator[None]:
    """Exclusive use of an output folder (filelock: fcntl on POSIX, msvcrt on Windows)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(out_dir / ".lock"):
        yield


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)  # mkstemp makes 0600; results and reports are for sharing
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def cache_folder(name: str) -> Path:
    """A folder of notebook-bench's cache for one kind of thing (a CPU's peaks, traces, serving models):
    $XDG_CACHE_HOME/notebook-bench/NAME, ~/.cache when unset. Not created here."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "notebook-bench" / name


def check_writable(folder: Path | str, field: str = "out") -> Path:
    """Check, before anything is measured, that results can be written under `folder`: a run
    that cannot save them fails at once (one line naming the path and why), not after measuring.
    Nothing is left behind: a probe file is written and removed in the folder, or in its
    nearest existing parent when the folder is yet to be made."""
    if not str(folder).strip():
        raise ConfigError(field, "must be a folder's path, got ''")
    if Path(folder).is_symlink() and not Path(folder).exists():
        raise ConfigError(field, f"{folder} is a link to {os.readlink(folder)}, which does not exist; allowed: a "
                                 "folder, or a link to one")
    folder = Path(folder).absolute()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(field, f"cannot write results to {folder}: {existing} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".bench-write-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(field, f"cannot write results to {folder}: {exc.strerror or exc}") from None
    return folder


# What bench rebuilds in a results folder from its runs/*/rows.json (results/store.py) at every write.
REBUILT = ("results.csv", "summary.csv", "machines.csv")


def check_results_folder(folder: Path | str, field: str = "out") -> Path:
    """check_writable, and that `folder` is new or bench's own: every write rebuilds its results.csv,
    summary.csv and machines.csv from its runs/ folder, so a results.csv without runs/ beside it (another
    tool's, a hand-made one, a folder whose runs/ was removed) would be replaced by rows it never held."""
    folder = check_writable(folder, field)
    runs = folder / "runs"
    if runs.exists() and not runs.is_dir():
        raise ConfigError(field, f"{runs} is a file; a results folder keeps its runs in the folder runs/")
    for name in REBUILT:
        path = folder / name
        if path.exists() and not path.is_file():
            raise ConfigError(field, f"{path} is a folder; bench writes its {name} there")
        if path.exists() and not runs.is_dir():
            raise ConfigError(field, f"{folder} holds a {name} with no runs/ folder beside it, so bench did not "
                                     f"write it, and it would be replaced; allowed: a new or empty folder, or one "
                                     f"that bench run or bench sweep wrote")
    return folder


def check_writable_file(path: Path | str, field: str) -> Path:
    """Check, before any work, that a file can be written at `path` (a report, an HTML page): its folder
    can be written (check_writable), the name is no folder and no link. A link is refused, not followed:
    the link a user left there may point at anything, an input's results.csv included."""
    path = Path(path)
    if path.is_symlink():
        raise ConfigError(field, f"{path} is a link (to {os.readlink(path)}); allowed: the path of the file itself")
    if path.exists() and not path.is_file():
        raise ConfigError(field, f"{path} is a folder, not a file; allowed: a new file, or an earlier one to replace")
    check_writable(path.parent, field)
    return path


# The environment variable that names another benchmark template than the shipped one (sweep/execute.find_template).
TEMPLATE_ENV = "BENCH_TEMPLATE"


def shipped_notebook(name: str) -> Path:
    """A notebook shipped with bench_core (benchmark.ipynb, summary.ipynb): the repository's notebooks/
    folder, which pyproject.toml packages as bench_core.notebooks, so that an installed wheel has it as
    bench_core/notebooks/ and an editable install maps it back to notebooks/. The import system
    finds the package without running it: importing it would leave notebooks/__pycache__/ in the
    folder users open in JupyterLab. A checkout used without installing it (PYTHONPATH, or an
    install older than bench_core.notebooks) has the folder beside bench_core/."""
    try:
        spec = importlib.util.find_spec("bench_core.notebooks")
    except ModuleNotFoundError:
        spec = None
    folders = list(spec.submodule_search_locations or []) if spec else []
    folder = Path(folders[0]) if folders else Path(__file__).resolve().parents[1] / "notebooks"
    return folder / name


def skip_iri_grammars() -> None:
    """Call before the first nbformat import (papermill, nbconvert) to save ~0.8 s of the process's start.

    nbformat validates notebooks with jsonschema, which imports every optional format checker it
    finds at import time. One of them, rfc3987_syntax (installed with JupyterLab), builds about
    forty Lark parsers as it is imported, for the "iri" formats that no notebook schema uses
    (python-jsonschema/jsonschema#1428). Marked absent, jsonschema simply leaves those two
    checkers out. Only bench's own processes do this (the CLI, the sweep's papermill child)."""
    sys.modules.setdefault("rfc3987_syntax", None)


def save_fallback(name: str, text: str) -> Path:
    """Rows that could not be written where they belong (a full disk, a folder gone read-only):
    a new folder under the system's temporary directory, so that no measurement is lost."""
    folder = Path(tempfile.mkdtemp(prefix="bench-unsaved-"))
    path = folder / name
    path.write_text(text)
    return path
