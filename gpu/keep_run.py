"""Keep what a lent GPU measured: the result folders of one or more `bench acceptance` calls (as
fetched from the device machine) into one folder of the repository, gpu/runs/<gpu>-<date>/.

    python gpu/keep_run.py DEST SRC [SRC ...]

Kept: every execution's rows (a later SRC's rows of the same execution replace an earlier one's:
a call that re-ran what the first could not finish), the serving points' per-request records (their
paths in the rows made relative to DEST), each call's environment.json, acceptance.json,
sysinfo.txt, nvidia-smi.txt and logs, numbered by call; results.csv, summary.csv and machines.csv
rebuilt from the kept rows; and bench_core/data/measured.csv rewritten from every kept run (reports
set those rows beside the published figures, as notebook-bench's own). Not kept: executed notebooks, report.html (`bench report DEST` makes
it), locks. The rows themselves are not changed, but for those paths.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

PER_CALL = ("acceptance.json", "environment.json", "sysinfo.txt", "nvidia-smi.txt", "sweep.log", "selftest.log",
            "report.log", "acceptance.log")


def keep(dest: Path, sources: list[Path]) -> None:
    from bench_core.files import locked
    from bench_core.results.store import rebuild_csv

    dest.mkdir(parents=True, exist_ok=True)
    for call, src in enumerate(sources, start=1):
        for name in PER_CALL:
            if (src / name).is_file():
                stem, dot, ext = name.partition(".")
                shutil.copyfile(src / name, dest / f"{stem}-{call}{dot}{ext}")
        for rows_file in sorted(src.glob("runs/*/rows.json")):
            rows = json.loads(rows_file.read_text())
            for row in rows:
                # Written on the device machine under its own result folder: found here by the part
                # from "serving/" on.
                records = str(row.get("records_file") or "")
                if "serving/" in records:
                    relative = Path("serving", records.split("serving/", 1)[1])
                    if (src / relative).is_file():
                        (dest / relative).parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(src / relative, dest / relative)
                        row["records_file"] = str(relative)
            out = dest / "runs" / rows_file.parent.name
            out.mkdir(parents=True, exist_ok=True)
            (out / "rows.json").write_text(json.dumps(rows, indent=1, default=str))
    with locked(dest):
        rebuild_csv(dest)
    (dest / ".lock").unlink(missing_ok=True)
    write_measured(dest.parent)


MEASURED = Path(__file__).resolve().parents[1] / "bench_core" / "data" / "measured.csv"


def measured_csv(runs: Path) -> str:
    """bench_core/data/measured.csv's text from every kept run under `runs` (gpu/runs): what reports
    set beside the published figures as notebook-bench's own."""
    import csv
    import io

    from bench_core.results.store import iter_rows
    from bench_core.summary.reference import measured_lines
    lines = [line for run in sorted(p for p in runs.iterdir() if p.is_dir())
             for line in measured_lines(list(iter_rows(run)), run.name)]
    header = (MEASURED.parent / "reference.csv").read_text().splitlines()[0].split(",")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(lines)
    return buffer.getvalue()


def write_measured(runs: Path) -> Path:
    MEASURED.write_text(measured_csv(runs))
    return MEASURED


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    keep(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
