"""What `bench diff` compares for one configuration: the key that makes OLD's and NEW's rows one
configuration (with_keys, KEY), the comparison of its OLD and NEW rows (compare_configuration: the two
throughputs, their ratio, interval and verdict, its detectable slowdown) and the words that go with it
(its label and notes). summary/diff.py gathers them into the whole comparison of two directories.
"""
from __future__ import annotations

import math

import pandas as pd

from bench_core.results.comparison import DISTURBED, ONE_RUN, RUN_SHIFT, compare_rows, geometric_mean, run_means
from bench_core.results.disturbed import disturbances
from bench_core.results.keys import RUN_SETTINGS, WORKLOAD, key_value, machine_use, set_fields
from bench_core.summary.load import EMULATED_SUFFIX
from bench_core.summary.text import int_text, is_present
from bench_core.workload.family import SHAPE_FIELDS

NAN = float("nan")

# Every other field that shapes an input (seq_len, rows_per_table, ...): configurations that differ in one differ.
OTHER_SHAPES = [name for name in SHAPE_FIELDS if name not in ("width", "height", "depth")]
# Every other field of the workload (results.keys.WORKLOAD: the parallelism, the run settings such as the
# optimizer, a serving point's request shape and load), so that bench diff keys on what the report keys on.
OTHER_FIELDS = [name for name in WORKLOAD if name not in ("model", "mode", "precision", "batch_size", "input_shape",
                                                           "world_size", "compile", "channels_last", *SHAPE_FIELDS)]
# How a CPU was used (results.keys.machine_use: '1 thread', a forced dispatch level): rows at 1 and 2 threads
# are two configurations, never one measured twice.
KEY = ["model", "mode", "precision_key", "batch", "width_key", "height_key", "depth_key",
       *(f"{name}_key" for name in OTHER_SHAPES), "world_size_key", "compile", "channels_last",
       *(f"{name}_key" for name in OTHER_FIELDS), "use_key", "device_kind"]
# The keys that say how a run was set up rather than what it ran: where OLD and NEW differ only in these, each
# side's configuration is listed apart and the note says which setting kept them apart.
SETTING_KEYS = {"use_key": "how the CPU was used (threads, dispatch level)",
                **{f"{name}_key": name.replace("_", " ") for name in RUN_SETTINGS}}

TABLE_COLUMNS = ["configuration", "side", "old_samples_per_s", "new_samples_per_s", "old_repeats", "new_repeats",
                 "ratio", "low", "high", "change", "unit", "detectable", "verdict", "regression", "flag", "reason",
                 "note", "runs_set_aside", "run_sd", "run_sd_source"] + KEY


def with_keys(rows: pd.DataFrame) -> pd.DataFrame:
    """The key columns of each row, from the configuration as asked for (present in failure rows
    too, which may lack the measured input_shape)."""
    rows = rows.copy()
    rows["precision_key"] = rows["precision"].astype(str).str.replace(EMULATED_SUFFIX, "", regex=False)
    rows["batch"] = [("max" if searched else int_text(b)) for searched, b in zip(rows["batch_searched"], rows["batch_size"])]
    for name in (*SHAPE_FIELDS, "world_size"):
        rows[f"{name}_key"] = [int_text(v) if is_present(v) else "" for v in pd.to_numeric(rows[name], errors="coerce")]
    for name in OTHER_SHAPES:  # exact: 2147483648 rows is not 2.15e+09
        rows[f"{name}_key"] = [f"{v:.12g}" if is_present(v) else "" for v in pd.to_numeric(rows[name], errors="coerce")]
    records = rows.to_dict("records")
    for name in OTHER_FIELDS:
        rows[f"{name}_key"] = [key_text(key_value(r, name)) for r in records]
    rows["use_key"] = [machine_use(r) for r in records]
    asked = rows["device"].astype(str).str.split(":").str[0]
    kind = rows["device_type"].where(rows["device_type"].map(is_present), asked)
    for side, group in rows.groupby("side"):  # 'auto' in a failure row: the directory's one kind of device
        known = set(group["device_type"].dropna()) - {""}
        if len(known) == 1:
            kind[(rows["side"] == side) & (kind == "auto")] = known.pop()
    rows["device_kind"] = kind.fillna("")
    rows["device_name_key"] = rows["device_name"].where(rows["device_name"].map(is_present), "")
    rows["disturbed_by"] = rows["noise_flags"].map(disturbances)
    return rows


def key_text(value) -> str:
    """A key field as text: a number exactly ('1' for 1.0), text stripped, '' for nothing."""
    if not is_present(value):
        return ""
    if isinstance(value, bool):
        return str(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value).strip()
    return f"{number:.12g}" if math.isfinite(number) else str(value).strip()


def several_models_per_kind(rows: pd.DataFrame) -> bool:
    named = rows[rows["device_name_key"] != ""]
    return bool((named.groupby(["side", "device_kind"])["device_name_key"].nunique() > 1).any())


def compare_configuration(group: pd.DataFrame, fail_above: float, min_effect: float, by_model: bool,
                          by_use: bool = False) -> dict:
    """One configuration's OLD and NEW rows compared (diff_results' table row). `by_model`: its label names the
    device model (a directory holds several of one kind); `by_use`: how the CPU was used (the rows differ in it)."""
    old, new = group[group["side"] == "old"], group[group["side"] == "new"]
    old_ok, new_ok = old[old["status"] == "ok"], new[new["status"] == "ok"]
    first = (new_ok if len(new_ok) else old_ok if len(old_ok) else new if len(new) else old).iloc[0]
    side = "both" if len(old) and len(new) else "old only" if len(old) else "new only"
    out = {"configuration": label(first, by_model, by_use), "side": side,
           "old_samples_per_s": undisturbed_mean(old_ok), "new_samples_per_s": undisturbed_mean(new_ok),
           "old_repeats": repeats_text(old), "new_repeats": repeats_text(new),
           "ratio": NAN, "low": NAN, "high": NAN, "change": "", "unit": "", "detectable": "", "verdict": "",
           "regression": False, "flag": "", "reason": "", "runs_set_aside": 0, "run_sd": NAN, "run_sd_source": "",
           "note": "; ".join(failures_note(old, "old") + failures_note(new, "new")
                             + noise_note(old_ok, "old") + noise_note(new_ok, "new") + emulated_note(group))}
    if not len(old) or not len(new):
        out.update(verdict="added" if len(new) else "removed",
                   reason=f"only in {'NEW' if len(new) else 'OLD'} ({out['new_repeats' if len(new) else 'old_repeats']})")
    elif not len(new_ok):
        out.update(verdict="fails in both" if not len(old_ok) else "fails now", regression=bool(len(old_ok)),
                   reason=f"new: {status_text(new)}" + (f"; old: {status_text(old)}" if not len(old_ok) else ""))
    elif not len(old_ok):
        out.update(verdict="runs now", reason=f"old: {status_text(old)}")
    else:  # OLD and NEW are separate runs by construction, even where a copied directory kept its run ids
        found = compare_rows(old_ok, new_ok, separate_runs=True, min_effect=min_effect)
        c = found.comparison
        regressed = c.regressed(fail_above)
        detectable = c.detectable(fail_above)
        out.update(ratio=NAN if c.ratio is None else c.ratio, low=NAN if c.low is None else c.low,
                   high=NAN if c.high is None else c.high, verdict=c.verdict, reason=c.reason, regression=regressed,
                   unit=samples_text(found), detectable="" if detectable is None else f"{detectable:.0%}",
                   change="" if c.ratio is None else c.text().removesuffix(" " + c.verdict),
                   runs_set_aside=sum(g - u for g, u in zip(found.runs_given, found.runs_used)),
                   **run_spread(found, group))
        partly = [name for name, given, left in zip(("old", "new"), found.runs_given, found.left_out)
                  if given == 1 and left]
        if c.verdict in ("faster", "slower") and partly:
            # One run a side, some of its repeats disturbed: the others ran beside the same load, which the flags
            # caught only part of (a 2-core machine's other jobs: 0.76x [0.57-1.00] on the same code twice)
            out.update(verdict=DISTURBED, regression=False,
                       reason=f"{' and '.join(partly)}: the one run had repeats disturbed, and its other repeats ran "
                              "beside the same load; a difference from it is not judged (re-measure, or measure "
                              "runs: bench sweep FILE --runs 5)")
    if out["regression"]:
        out["flag"] = "REGRESSION"
    elif out["verdict"] == DISTURBED:
        out["flag"] = "DISTURBED"
    return {**out, **{k: first[k] for k in KEY}}


KEPT_APART = "kept apart from"


def setting_text(key: str, value) -> str:
    """A setting's key value in words: an empty machine use is the whole CPU, any other empty one the default."""
    if value:
        return str(value)
    return "all its cores" if key == "use_key" else "the default"


def say_kept_apart(table: pd.DataFrame) -> pd.DataFrame:
    """A configuration only in OLD whose twin only in NEW differs in how the run was set up alone (SETTING_KEYS:
    the threads, the optimizer, ...): each says so in its reason, naming the setting and the other's value; a
    different thread count is another measurement, not a regression, so the two are never compared."""
    if table.empty:
        return table
    table = table.copy()
    same = [k for k in KEY if k not in SETTING_KEYS]
    alone = table[table["side"].isin(["old only", "new only"])]
    for _, group in alone.groupby(same, dropna=False, sort=False):
        if set(group["side"]) != {"old only", "new only"}:
            continue
        for index, row in group.iterrows():
            twins = group[group["side"] != row["side"]]
            here, there = ("OLD", "NEW") if row["side"] == "old only" else ("NEW", "OLD")
            differ = "; ".join(f"{SETTING_KEYS[k]}: {setting_text(k, row[k])} in {here}, "
                               f"{', '.join(setting_text(k, v) for v in dict.fromkeys(twins[k]))} in {there}"
                               for k in SETTING_KEYS if (twins[k] != row[k]).any())
            table.loc[index, "reason"] = (f"{row['reason']}; {KEPT_APART} {there}'s run of it: they differ in {differ}: "
                                          "another measurement, not a regression; measure both alike")
    return table


def samples_text(found) -> str:
    """What the interval rests on, and what was set aside: 'runs, 5 vs 5', 'repeats, 1 run', or where whole runs
    were left out as disturbed 'repeats, 1 run (of 3 a side: 2 set aside as disturbed)'."""
    given, used = found.runs_given, found.runs_used
    if given == used:
        return found.unit
    sides = f"of {given[0]} a side" if given[0] == given[1] else f"of {given[0]} old and {given[1]} new"
    aside = [g - u for g, u in zip(given, used)]
    count = f"{aside[0]}" if aside[0] == aside[1] else f"{aside[0]} old and {aside[1]} new"
    return f"{found.unit} ({sides}: {count} set aside as disturbed)"


def run_spread(found, group: pd.DataFrame) -> dict:
    """The run-to-run standard deviation of log throughput behind the comparison, a fraction: measured where
    both sides have 2 or more runs (from the interval's, both sides taken to spread alike), else the stated
    shift of the device (results.comparison.RUN_SHIFT), which one run a side cannot measure."""
    c, used = found.comparison, found.runs_used
    if c.se is not None and min(used) >= 2 and found.unit.startswith("runs"):
        return {"run_sd": c.se / math.sqrt(1 / used[0] + 1 / used[1]), "run_sd_source": "measured"}
    if found.unit.startswith(ONE_RUN):
        kinds = {str(k) for k in group.get("device_type", pd.Series(dtype=object)) if is_present(k)}
        return {"run_sd": max((RUN_SHIFT.get(k, max(RUN_SHIFT.values())) for k in kinds),
                              default=max(RUN_SHIFT.values())), "run_sd_source": "stated"}
    return {}


def undisturbed_mean(ok: pd.DataFrame) -> float:
    """Geometric mean over runs of each run's geometric mean over its undisturbed repeats (NaN: none)."""
    clean = ok[ok["disturbed_by"] == ""]
    return geometric_mean(run_means(clean)) if len(clean) else NAN


def label(row: pd.Series, by_model: bool, by_use: bool = False) -> str:
    parts = [str(row["model"]), str(row["mode"]), str(row["precision"]), f"bs{row['batch']}"]
    if is_present(row.get("input_shape")):
        parts.append(str(row["input_shape"]))
    elif row["width_key"]:
        parts.append("x".join(v for v in (row["depth_key"], row["height_key"], row["width_key"]) if v))
    if row["world_size_key"] not in ("", "1"):
        parts.append(f"x{row['world_size_key']} devices")
    if row["compile"] not in ("off", "", None):
        parts.append(f"compile={row['compile']}")
    if row["channels_last"]:
        parts.append("channels_last")
    parts += set_fields({name: row.get(f"{name}_key") or None for name in OTHER_FIELDS}, OTHER_FIELDS)
    parts.append(row["device_kind"] or "?")
    if by_model and row["device_name_key"]:
        parts[-1] += f" ({row['device_name_key']})"
    if by_use:
        parts[-1] += f" ({row.get('use_key') or 'all its cores'})"
    return " ".join(parts)


def repeats_text(rows: pd.DataFrame) -> str:
    return f"{int((rows['status'] == 'ok').sum())}/{len(rows)} ok" if len(rows) else ""


def status_text(rows: pd.DataFrame) -> str:
    """'oom: CUDA out of memory ...' for the first failed row, with how many failed."""
    failed = rows[rows["status"] != "ok"]
    if failed.empty:
        return "ok"
    first = failed.iloc[0]
    message = str(first["message"]) if is_present(first["message"]) else "no message"
    return f"{first['status']}: {message[:120]} ({len(failed)} of {len(rows)} rows)"


def failures_note(rows: pd.DataFrame, side: str) -> list[str]:
    failed = rows[rows["status"] != "ok"]
    if failed.empty:
        return []
    statuses = ", ".join(sorted(set(failed["status"])))
    return [f"{side}: {len(failed)}/{len(rows)} {statuses}"]


def emulated_note(group: pd.DataFrame) -> list[str]:
    """'emulated on this CPU: not what a GPU would show' where a side ran the precision in emulation
    (the precision's label says which): a verdict on it describes the emulation, and stands as a
    regression gate of this CPU only."""
    if "precision_support" not in group or not (group["precision_support"] == "emulated").any():
        return []
    first = group[group["precision_support"] == "emulated"].iloc[0]
    where = "this CPU" if first.get("device_type") == "cpu" else "this device"
    return [f"emulated on {where}: not what a GPU would show"]


def noise_note(ok: pd.DataFrame, side: str) -> list[str]:
    """'old: 5/15 repeats disturbed, left out (other-processes-on-cpu)' and 'new: 2/15 repeats noise-flagged
    (noisy-window)': disturbed measurements and merely imprecise ones, named."""
    names = ok["noise_flags"].map(lambda v: [f.split("(")[0].strip() for f in str(v).split(";") if f.strip()]
                                  if is_present(v) else [])
    disturbed = ok["disturbed_by"] != ""
    out = []
    if disturbed.any():
        kinds = ", ".join(sorted({k.strip() for found in ok.loc[disturbed, "disturbed_by"] for k in found.split(",")}))
        out.append(f"{side}: {int(disturbed.sum())}/{len(ok)} repeats disturbed, left out ({kinds})")
    other = names[~disturbed]
    flagged = other[other.map(bool)]
    if len(flagged):
        kinds = ", ".join(sorted({kind for found in flagged for kind in found}))
        out.append(f"{side}: {len(flagged)}/{len(ok)} repeats noise-flagged ({kinds})")
    return out
