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
import io
import json
import math
from pathlib import Path
from typing import Iterable

from bench_core.files import atomic_write_text, locked
from bench_core.results.config_summary import summary_texts
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
    """A run's rows, or None when absent or unreadable (an interrupted write)."""
    try:
        rows = json.loads((Path(run_dir) / "rows.json").read_text())
    except (OSError, ValueError):
        return None
    return rows if isinstance(rows, list) else None


def iter_rows(out_dir: Path) -> Iterable[dict]:
    for rows_file in sorted(Path(out_dir).glob("runs/*/rows.json")):
        yield from read_run(rows_file.parent) or []


def record_rows(out_dir: Path) -> list[dict]:
    """Every row of every readable runs/*/rows.json (the record), in results.csv's order."""
    return sorted(iter_rows(out_dir), key=lambda r: (str(r.get("timestamp")), r.get("repeat") or 0))


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
    return [path for path in sorted(Path(out_dir).glob("runs/*/rows.json")) if read_run(path.parent) is None]
