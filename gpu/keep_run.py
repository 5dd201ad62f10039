"""Keep what a lent GPU measured: the result folders of one or more `bench acceptance` calls (as
fetched from the device machine) into one folder of the repository, gpu/runs/<gpu>-<date>/.

    python gpu/keep_run.py DEST SRC [SRC ...]

Kept: every execution's rows (a later SRC's rows of the same execution replace an earlier one's:
a call that re-ran what the first could not finish), the serving points' per-request records (their
paths in the rows made relative to DEST), each call's environment.json, acceptance.json,
sysinfo.txt, nvidia-smi.txt and logs, numbered by call; results.csv, summary.csv and machines.csv
rebuilt from the kept rows; and bench_core/data/measured.csv rewritten from every kept run (reports
set those rows beside the published figures, as notebook-bench's own). Not kept: executed notebooks, report.html (`bench report DEST` makes
it), locks. The rows themselves are not changed, but for those paths and a row that names no device
although it ran on its call's GPU (see fill_device).

    python gpu/keep_run.py --repair DEST

repairs a run kept before that fill existed, once, from its own environment-N.json (which call made
which row: the GPU UUID the other rows of its run file name), and writes what it filled, and why, to
DEST/repairs.md: the kept rows are the record, so a change to them is said beside them.
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
        env = json.loads((src / "environment.json").read_text()) if (src / "environment.json").is_file() else {}
        for rows_file in sorted(src.glob("runs/*/rows.json")):
            rows = json.loads(rows_file.read_text())
            for row in rows:
                fill_device(row, env)
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
    if dest.resolve().parent == RUNS:  # (a run kept elsewhere, a test's, is not the repository's)
        write_measured(RUNS)


# The GPU facts of a call's environment.json that a row of that call carries (bench_core/measure/environment.py).
GPU_FIELDS = ("gpu_name", "gpu_uuid", "gpu_count", "gpu_memory_bytes", "gpu_compute_capability", "driver_version",
              "cuda_version", "cudnn_version", "nccl_version")
REPAIR_WHY = ("these rows name no device though their configuration ran on CUDA, on the GPU of the call that made "
              "them: the serving rows were written before the server's device was recorded (its energy is the GPU's "
              "NVML counter), and rows of configurations the sweep's stop interrupted before their device was read; "
              "so the report named a second, CPU machine with the GPU's energy, and `bench predict` said the row does "
              "not name its device")


def fill_device(row: dict, env: dict) -> list[str]:
    """A row whose configuration ran on CUDA but that names no device (serve rows written before the
    server's device was recorded) gets its call's GPU from that call's environment; the fields filled,
    none when the row names its device or the call had no GPU."""
    if row.get("device_type") or not str(row.get("device") or "").startswith("cuda") or not env.get("gpu_name"):
        return []
    filled = {"device_type": "cuda", "device_name": env["gpu_name"], "device_count": env.get("gpu_count"),
              **{name: env.get(name) for name in GPU_FIELDS}}
    filled = {k: v for k, v in filled.items() if v not in (None, "") and row.get(k) in (None, "")}
    row.update(filled)
    return sorted(filled)


def repair(dest: Path) -> list[str]:
    """Fill the device of every kept row that names none from the environment of the call that made
    it (the call whose GPU UUID the other rows of its run file carry); rebuild the CSVs and
    measured.csv; say each fill in DEST/repairs.md. The lines written (none: nothing to repair)."""
    from bench_core.files import locked
    from bench_core.results.store import rebuild_csv

    calls = {json.loads(p.read_text()).get("gpu_uuid"): p.name for p in sorted(dest.glob("environment-*.json"))}
    lines = []
    for rows_file in sorted(dest.glob("runs/*/rows.json")):
        rows = json.loads(rows_file.read_text())
        named = {r.get("gpu_uuid") for r in rows} & set(calls) - {None}
        if len(named) != 1:
            continue  # no call (or several) made this file's rows: nothing to repair it from
        source = calls[named.pop()]
        env = json.loads((dest / source).read_text())
        fills = [(row["run_id"], fill_device(row, env)) for row in rows]
        fills = [(run_id, names) for run_id, names in fills if names]
        if fills:
            rows_file.write_text(json.dumps(rows, indent=1, default=str))
            lines += [f"- `{run_id}` ({rows_file.parent.name}): {', '.join(names)} from {source}"
                      for run_id, names in fills]
    if lines:
        with locked(dest):
            rebuild_csv(dest)
        (dest / ".lock").unlink(missing_ok=True)
        with open(dest / "repairs.md", "a") as handle:
            handle.write(f"# Rows repaired by `python gpu/keep_run.py --repair`\n\nWhy: {REPAIR_WHY}.\n\n"
                         + "\n".join(lines) + "\n")
        if dest.resolve().parent == RUNS:
            write_measured(RUNS)
    return lines


MEASURED = Path(__file__).resolve().parents[1] / "bench_core" / "data" / "measured.csv"
RUNS = Path(__file__).resolve().parent / "runs"  # the kept runs measured.csv is made from


def measured_csv(runs: Path) -> str:
    """bench_core/data/measured.csv's text from every kept run under `runs` (gpu/runs): what reports
    set beside the published figures as notebook-bench's own."""
    import csv
    import io

    from bench_core.results.store import iter_rows
    from bench_core.summary.reference import measured_lines
    lines = [line for run in sorted(p for p in runs.iterdir() if p.is_dir())
             for line in measured_lines(list(iter_rows(run)), run.name)]
    # reference.csv's columns, the run ids each line was made from (a report never compares a row with a
    # line made from it) and its configuration in words (a row is compared only with the same one): see
    # summary/reference.py
    header = (MEASURED.parent / "reference.csv").read_text().splitlines()[0].split(",") + ["run_ids", "config"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(lines)
    return buffer.getvalue()


def write_measured(runs: Path) -> Path:
    MEASURED.write_text(measured_csv(runs))
    return MEASURED


if __name__ == "__main__":
    if sys.argv[1:2] == ["--repair"] and len(sys.argv) == 3:
        print("\n".join(repair(Path(sys.argv[2]))) or "nothing to repair")
    elif len(sys.argv) < 3 or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    else:
        keep(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
