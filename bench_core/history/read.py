"""Result folders of many dates read as one history: one row per run (one process) of each configuration on
each machine (the existing keys: results.keys.WORKLOAD and machine_label), in time order, with the geometric
mean of its ok repeats, their interval, whether a repeat was disturbed, and the fields that can explain a change
(versions, commits, the model file's hash, threads ...).

Folders stay the plain files they are. A folder's run files are read (runs/*/rows.json: the record, as bench diff
and the report read it; results.csv is derived from them and may have been edited since), each checked as every
command checks it (results.store.load_run: a damaged one is named and left out), and only the columns a history
needs are kept, so memory grows with the rows read, not with a row's 300 columns. Parsing the JSON is most of the
time: 20,000 rows of 400 folders took 4.1-4.4 s where results.csv through pyarrow took 1.3-1.7 s (a loaded 2-core
VM, 2026-11-29), the kept gpu/runs folders 10 ms where they took 6 ms. A folder of results.csv alone (no run files)
is read with pyarrow's CSV reader.
"""
from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
from scipy import special

from bench_core.errors import ConfigError
from bench_core.results.disturbed import disturbances
from bench_core.results.keys import WORKLOAD, load_text, machine_label
from bench_core.results.store import load_run
from bench_core.summary.diff import ENVIRONMENT_CHANGES
from bench_core.summary.load import config_label, dir_names, read_record
from bench_core.workload.user_code import model_identity

# What machine_label reads (tests/test_history.py checks it against keys.machine_label itself).
MACHINE_FIELDS = ("host", "gpu_uuid", "device_name", "gpu_name", "cpu_model", "device_type")
# Fields whose change between two runs can explain a step: bench diff's environment fields, and a model of your
# own's file (its hash and commit: the model keeps its name across edits, workload/user_code.py).
CAUSE_FIELDS = tuple(dict.fromkeys([*ENVIRONMENT_CHANGES, "model_code_sha256", "model_code_commit"]))
MEASURED = ("run_id", "repeat", "timestamp", "status", "message", "throughput", "samples_per_s", "throughput_unit",
            "sample_unit", "noise_flags")
NUMBERS = ("throughput", "samples_per_s")
COLUMNS = tuple(dict.fromkeys([*MEASURED, *WORKLOAD, *MACHINE_FIELDS, *CAUSE_FIELDS]))
SCHEMA = pa.schema([(name, pa.float64() if name in NUMBERS else pa.string()) for name in COLUMNS])
CONFIDENCE = 0.95  # a run's interval from its repeats


@dataclass
class History:
    """`runs`: one row per (line, run), in time order within a line: line (an int), run_id, time, date, result_dir,
    status (ok where a repeat ran ok), value (geometric mean of the ok repeats, in unit), low/high (its interval
    from the repeats, NaN with one), repeats, repeats_ok, disturbed_by ('' when no ok repeat was disturbed), and
    the CAUSE_FIELDS. `lines`: one row per configuration and machine: line, label, machine, unit, the WORKLOAD
    fields. `rows`: how many result rows were read. `notes`: what could not be read, one line each."""

    runs: pd.DataFrame
    lines: pd.DataFrame
    rows: int = 0
    dirs: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def has_trend(self) -> bool:
        """Whether a line has runs of more than one date or folder: a history to draw, not one sweep's runs."""
        ok = self.runs[self.runs["repeats_ok"] > 0]
        if ok.empty:
            return False
        spread = ok.groupby("line").agg(dates=("date", "nunique"), folders=("result_dir", "nunique"))
        return bool(((spread["dates"] > 1) | (spread["folders"] > 1)).any())

    def line_runs(self, line: int) -> pd.DataFrame:
        return self.runs[self.runs["line"] == line]


def read_history(result_dirs, exclude_runs=frozenset()) -> History:
    """Every run of every folder (a folder per run, or one folder that runs append to), as one History.
    `exclude_runs`: run ids left out (the new runs a gate judges, when their folder is also among these)."""
    dirs = [Path(d) for d in ([result_dirs] if isinstance(result_dirs, (str, Path)) else result_dirs)]
    for d in dirs:
        if not d.is_dir():
            raise ConfigError("result_dirs", f"{str(d)!r} is not a directory; allowed: result directories written "
                                             "by bench run --out / bench sweep")
    # Folders read side by side: a file's bytes (and pyarrow's CSV parse) come without Python's lock.
    names = dir_names(dirs)
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        found = list(pool.map(folder_table, dirs, names))
    notes = [line for _, said in found for line in said]
    tables = [table for table, _ in found if table is not None]
    # (one chunk: a dictionary per folder's chunk made the conversion three times slower)
    table = pa.concat_tables(tables).combine_chunks() if tables else SCHEMA.empty_table()
    rows = table.to_pandas(strings_to_categorical=True)
    count = len(rows)
    copies = rows.duplicated(["run_id", "repeat", "timestamp"]) & rows["run_id"].notna()
    if copies.any():  # a folder copied beside its original (a shared copy of a machine's runs)
        notes.append(f"{int(copies.sum())} row(s) are in more than one folder (a copy): each is read once.")
        rows = rows[~copies]
        count = len(rows)
    if exclude_runs:
        rows = rows[~rows["run_id"].astype(str).isin(set(exclude_runs))]
    runs, lines = runs_of(rows)
    return History(runs, lines, count, dirs, notes + untimed_notes(runs, dict(zip(names, dirs))))


def untimed_notes(runs: pd.DataFrame, folders: dict[str, Path]) -> list[str]:
    """A line per folder whose runs have no timestamp that reads as a time: they cannot be put in order, so they
    are left out of the trend and the gate, and the folder and field are named."""
    untimed = runs.loc[runs["time"].isna(), "result_dir"].astype(str).value_counts(sort=False)
    return [f"{folders.get(name, name)}: {count} run(s) whose rows have no readable timestamp, left out of the trend "
            f"and the gate; allowed: timestamp as ISO 8601 (2026-11-27T14:08:26+00:00)"
            for name, count in untimed.items()]


def folder_table(result_dir: Path, name: str) -> tuple[pa.Table | None, list[str]]:
    """A folder's rows, only the history's columns, and what could not be read, a line each (folder_rows)."""
    notes: list[str] = []
    return folder_rows(result_dir, name, notes), notes


def folder_rows(result_dir: Path, name: str, notes: list[str]) -> pa.Table | None:
    """The rows of a folder's run files (runs/*/rows.json, the record: results.csv is derived from them and may have
    been edited since), each damaged one named in `notes` and left out, as every command leaves it out
    (results.store.load_run); a folder of results.csv alone through pyarrow's CSV reader."""
    runs = sorted(result_dir.glob("runs/*/rows.json"))
    if not runs:
        return csv_rows(result_dir, name, notes)
    values: dict[str, list] = {column: [] for column in COLUMNS}
    for path in runs:
        rows, why = load_run(path.parent)
        if rows is None:
            notes.append(f"{path} is damaged ({why}): that run is left out")
            continue
        for column, found in values.items():
            found.extend(row.get(column) for row in rows)
    if not values["run_id"]:
        return None
    # As results.csv holds them: the numbers as floats, everything else as its text (64 -> "64", True -> "True").
    arrays = [pa.array(found, pa.float64()) if column in NUMBERS
              else pa.array([None if v is None else str(v) for v in found], pa.string())
              for column, found in values.items()]
    return with_dir(pa.Table.from_arrays(arrays, schema=SCHEMA), name)


def csv_rows(result_dir: Path, name: str, notes: list[str]) -> pa.Table | None:
    """A folder without run files: its results.csv through pyarrow, else as the report reads it (which skips a torn
    line and says what it could not read)."""
    path = result_dir / "results.csv"
    if path.exists() and not path.is_file():  # (a FIFO or a device would be waited on for ever)
        notes.append(f"{path} is not a regular file: left out")
        return None
    try:
        table = pa_csv.read_csv(path,
                                parse_options=pa_csv.ParseOptions(newlines_in_values=True),
                                convert_options=pa_csv.ConvertOptions(
                                    include_columns=list(COLUMNS), include_missing_columns=True,
                                    column_types=SCHEMA, strings_can_be_null=True, null_values=[""]))
        return with_dir(table.select(list(COLUMNS)).cast(SCHEMA), name)
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError):
        pass
    frame = read_record(result_dir, name, notes)
    if frame is None or frame.empty:
        return None
    frame = frame.reindex(columns=list(COLUMNS))
    for number in NUMBERS:
        frame[number] = pd.to_numeric(frame[number], errors="coerce")
    return with_dir(pa.Table.from_pandas(frame, schema=SCHEMA, preserve_index=False), name)


def with_dir(table: pa.Table, name: str) -> pa.Table:
    return table.append_column("result_dir", pa.array([name] * table.num_rows, pa.string()))


def runs_of(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, lines) of the rows: each value worked out once per distinct value (50,000 rows hold a few hundred
    distinct machines, models and flag texts), the runs by one groupby."""
    if rows.empty:
        return empty_runs(), pd.DataFrame(columns=["line", "label", "machine", "unit", *WORKLOAD])
    rows = rows.copy()
    rows["model"] = rows["model"].astype(object).map(model_identity_map(rows["model"]))
    rows["machine"] = machine_labels(rows)
    unit = rows["throughput_unit"].astype(object)
    unit = unit.where(unit.notna(), rows["sample_unit"].astype(object))
    rows["unit"] = unit.fillna("samples/s").astype(str)
    keys = ["machine", *WORKLOAD]
    rows["line"] = rows.groupby(keys, dropna=False, observed=True, sort=False).ngroup()
    value = rows["throughput"].where(rows["throughput"].notna(), rows["samples_per_s"])
    status = rows["status"].astype(object).fillna("unknown").astype(str).str.strip().str.lower()
    ok = (status == "ok") & np.isfinite(value) & (value > 0)
    rows["log"] = np.log(value.where(ok))
    rows["ok"] = ok
    flags = rows["noise_flags"].astype(object)
    rows["disturbed_by"] = flags.map({f: disturbances(f) for f in flags.dropna().unique()}).astype(object).fillna("")
    rows["disturbed"] = ok & (rows["disturbed_by"] != "")
    rows["status"] = status
    rows["time"] = pd.to_datetime(rows["timestamp"].astype(object), utc=True, errors="coerce", format="ISO8601")
    runs = aggregate_runs(rows)
    lines = line_table(rows)
    return runs, lines


def model_identity_map(models: pd.Series) -> dict:
    return {m: model_identity(m) for m in models.dropna().unique()}


def machine_labels(rows: pd.DataFrame) -> pd.Series:
    """machine_label of each row, computed once per distinct machine."""
    fields = list(MACHINE_FIELDS)
    ids = rows.groupby(fields, dropna=False, observed=True, sort=False).ngroup()
    firsts = rows.loc[~ids.duplicated(), fields]
    labels = {i: machine_label({k: (None if pd.isna(v) else v) for k, v in r.items()})
              for i, r in zip(ids[~ids.duplicated()], firsts.to_dict("records"))}
    return ids.map(labels)


def aggregate_runs(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (line, run): the geometric mean of its ok repeats and their t-interval, its first time."""
    rows = rows.assign(log_sq=rows["log"] ** 2, run_id=rows["run_id"].astype(object).fillna("").astype(str))
    group = rows.groupby(["line", "run_id"], sort=False, observed=True)
    runs = group.agg(time=("time", "min"), result_dir=("result_dir", "first"), repeats=("status", "size"),
                     repeats_ok=("ok", "sum"), log_sum=("log", "sum"), log_sq=("log_sq", "sum"),
                     disturbed=("disturbed", "sum")).reset_index()
    n = runs["repeats_ok"].astype(float)
    mean = runs["log_sum"] / n.where(n > 0)
    var = ((runs["log_sq"] - n * mean ** 2) / (n - 1).where(n > 1)).clip(lower=0)
    half = special.stdtrit((n - 1).where(n > 1).to_numpy(), 0.5 + CONFIDENCE / 2) * np.sqrt(var / n)
    runs["value"], runs["log_mean"], runs["log_var"] = np.exp(mean), mean, var
    runs["low"], runs["high"] = np.exp(mean - half), np.exp(mean + half)
    firsts = rows.sort_values("ok", ascending=False, kind="stable").groupby(["line", "run_id"], sort=False,
                                                                          observed=True)
    first = firsts[[*CAUSE_FIELDS, "status", "message"]].first().reset_index()
    flags = rows[rows["disturbed"]].groupby(["line", "run_id"], observed=True)["disturbed_by"].agg(
        lambda found: ", ".join(dict.fromkeys(f for text in found for f in text.split(", "))))
    runs = runs.merge(first, on=["line", "run_id"], how="left")
    runs["disturbed_by"] = [flags.get((line, run), "") for line, run in zip(runs["line"], runs["run_id"])] \
        if len(flags) else ""
    runs["status"] = runs["status"].where(runs["repeats_ok"] == 0, "ok")
    runs["date"] = runs["time"].dt.strftime("%Y-%m-%d").fillna("")
    for name in CAUSE_FIELDS:
        runs[name] = runs[name].astype(object).where(runs[name].notna(), None)
    runs = runs.drop(columns=["log_sum", "log_sq", "disturbed"]).sort_values(["line", "time", "run_id"],
                                                                             kind="stable", na_position="last")
    return runs.reset_index(drop=True)


def line_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per line: its label (summary.load.config_label), machine, unit and WORKLOAD fields."""
    first = rows.drop_duplicates("line").sort_values("line")
    records = []
    for r in first[["line", "machine", "unit", *WORKLOAD]].to_dict("records"):
        plain = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
        described = {**plain, **{k: number(plain.get(k)) for k in ("batch_size", "world_size")},
                     "channels_last": str(plain.get("channels_last")).strip().lower() in ("true", "1")}
        described["load"] = load_text(described) or None
        if described["load"]:  # a serving point has a load where other modes have a batch
            described["batch_size"] = None
        records.append({**plain, "label": config_label(described)})
    return pd.DataFrame(records, columns=["line", "label", "machine", "unit", *WORKLOAD])


def number(value):
    try:
        found = float(value)
    except (TypeError, ValueError):
        return None
    return found if math.isfinite(found) else None


def empty_runs() -> pd.DataFrame:
    return pd.DataFrame(columns=["line", "run_id", "time", "result_dir", "repeats", "repeats_ok", "value",
                                 "log_mean", "log_var", "low", "high", *CAUSE_FIELDS, "status", "message",
                                 "disturbed_by", "date"])
