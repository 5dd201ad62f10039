"""The results store of an output folder.

Layout of an output directory:
    DIR/runs/<name>/rows.json   the rows of one run (written atomically; the record)
    DIR/results.csv             every row of every run, rebuilt atomically from runs/*/rows.json
    DIR/summary.csv             one line per configuration, DIR/machines.csv one per machine
                                (config_summary.py), rewritten with results.csv
Writers take a lock on DIR/.lock, so concurrent writers never interleave or lose rows.
"""
from __future__ import annotations

import csv
import errno
import io
import json
import math
import os
import stat
from pathlib import Path
from typing import Iterable

from bench_core.files import atomic_write_text, locked
from bench_core.results.config_summary import summary_texts
from bench_core.results.row_check import row_problem
from bench_core.results.rows import columns


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps_rows(rows: list[dict]) -> str:
    return json.dumps([{k: _clean(v) for k, v in row.items()} for row in rows], indent=1, default=str)


def write_run(out_dir: Path, name: str, rows: list[dict]) -> Path:
    """Record one run's rows and refresh results.csv, under the directory lock."""
    out_dir = Path(out_dir)
    with locked(out_dir):
        path = out_dir / "runs" / name / "rows.json"
        atomic_write_text(path, dumps_rows(rows))
        rebuild_csv(out_dir)
    return path


def read_run(run_dir: Path) -> list[dict] | None:
    """A run's rows, or None when absent or damaged (an interrupted write, an edit: load_run says why)."""
    return load_run(run_dir)[0]


def load_run(run_dir: Path) -> tuple[list[dict] | None, str | None]:
    """(a run's rows, None), or (None, why they cannot be its rows): not a regular file, not JSON, not a list of
    rows, or a row that bench did not write as it stands (row_check.row_problem: a text where a number belongs, an ok
    row without a positive throughput). The one reading of a run file: every command leaves out the same runs."""
    path = Path(run_dir) / "rows.json"
    try:
        rows = json.loads(regular_file_bytes(path))
    except OSError as exc:
        return None, exc.strerror or type(exc).__name__
    except RecursionError:  # (a list nested thousands deep: json recurses once a level)
        return None, "nested too deep to be rows"
    except ValueError as exc:  # (UnicodeDecodeError and json's JSONDecodeError among them)
        return None, f"not JSON ({str(exc).splitlines()[0][:80] if str(exc) else type(exc).__name__})"
    if not isinstance(rows, list):
        return None, f"a JSON {type(rows).__name__} where a list of rows belongs"
    for i, row in enumerate(rows, start=1):
        problem = row_problem(row)
        if problem:
            return None, f"row {i}: {problem}"
    return rows, None


def regular_file_bytes(path: Path) -> bytes:
    """A regular file's bytes. Anything else in its place (a FIFO, a device) is refused, never waited on: the
    file is opened without blocking and checked before it is read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return handle.read()


def iter_rows(out_dir: Path) -> Iterable[dict]:
    for rows_file in sorted(Path(out_dir).glob("runs/*/rows.json")):
        yield from read_run(rows_file.parent) or []


def record_rows(out_dir: Path) -> list[dict]:
    """Every row of every readable runs/*/rows.json (the record), in results.csv's order."""
    return read_record(out_dir)[0]


def read_record(out_dir: Path) -> tuple[list[dict], list[tuple[Path, str]]]:
    """The record of `out_dir`, each run file read once: every readable row in results.csv's order, and each damaged
    run file with why it cannot be read as rows (load_run)."""
    rows, damaged = [], []
    for path in sorted(Path(out_dir).glob("runs/*/rows.json")):
        found, why = load_run(path.parent)
        rows += found or []
        if why is not None:
            damaged.append((path, why))
    return sorted(rows, key=lambda r: (str(r.get("timestamp")), r.get("repeat") or 0)), damaged


def csv_text(rows: list[dict]) -> str:
    """results.csv's text of `rows`: the schema's columns, then any other schema version's, sorted."""
    names = columns()
    extra = sorted({k for row in rows for k in row} - set(names))  # columns of other schema versions
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=names + extra, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


def rebuild_csv(out_dir: Path) -> Path:
    """results.csv from every runs/*/rows.json, then summary.csv and machines.csv from the same
    rows (call under `locked`)."""
    rows = record_rows(out_dir)
    path = Path(out_dir) / "results.csv"
    atomic_write_text(path, csv_text(rows))
    for name, text in summary_texts(rows).items():
        atomic_write_text(Path(out_dir) / name, text)
    return path


def damaged_runs(out_dir: Path) -> list[Path]:
    """Run files that exist but cannot be read as rows (cut off mid-write, edited, corrupted):
    rebuild_csv leaves their runs out, and whoever rebuilds says so."""
    return [path for path, _ in damage(out_dir)]


def damage(out_dir: Path) -> list[tuple[Path, str]]:
    """Each damaged run file of `out_dir` (damaged_runs) and why it cannot be read as rows (load_run)."""
    return read_record(out_dir)[1]
