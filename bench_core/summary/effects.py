"""What one setting does to speed, with its uncertainty: the same workload with one thing changed
(the machine, the precision, the device count, torch.compile, channels_last, float8), compared run by run
where both sides have several runs, else repeat by repeat, with results.comparison (a ratio of
geometric means, a 95 % t-interval and a verdict). Repeats flagged as disturbed (measure.noise)
are left out; a comparison left with too few says "disturbed: re-measure". Plain pandas, no display.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from bench_core.results.bound import comparison_note
from bench_core.results.disturbed import disturbances
from bench_core.results.comparison import DISTURBED, compare_rows
from bench_core.results.fidelity import WRONG_RESULTS, deviation_text, is_wrong
from bench_core.summary.load import WORKLOAD, Results
from bench_core.summary.text import is_present
from bench_core.workload.precision import PRECISIONS

COMPARED = ["baseline_median", "median", "ratio", "low", "high", "verdict", "reason", "n_baseline", "n_candidate",
            "text", "unit", "outputs"]
# Settings that change the numerics: their variants carry an output check against fp32 eager NCHW
# (results.fidelity), shown beside the speed-up; a variant outside its tolerance gets no speed verdict.
NUMERICS = ("precision", "compile", "channels_last")
# Columns whose values are measured in separate processes: two machines (or kinds), or a run on N devices
# (torchrun workers) against one. The precisions, compile modes and layouts of one model share a
# sweep's execution (one process), so a run's shift is common to both sides and cancels.
SEPARATE_PROCESSES = ("machine", "kind", "world_size")
# float8 is set against the precision it runs everything else in, under the same compile setting: compile is
# part of the workload compare_variants keeps equal, so a compiled fp8 row is never judged against eager bf16.
FLOAT8 = tuple(name for name, p in PRECISIONS.items() if p.float8_recipe)
FLOAT8_BASELINE = "amp-bf16"
# The verdicts as a summary counts them, in the order it says them.
COUNTED = {"faster": "faster in", "slower": "slower in", "no clear difference": "no clear difference in",
           "too few repeats": "too few repeats for an interval in", DISTURBED: "disturbed (re-measure) in",
           WRONG_RESULTS: "wrong results (no speed verdict) in"}


def compare_variants(rows: pd.DataFrame, column: str, baseline, keys: list[str] | None = None,
                     value: str = "samples_per_s") -> pd.DataFrame:
    """Per workload that ran both with `column` == baseline and with another value of `column`
    (everything in `keys` the same): that value against the baseline, from their repeats.

    One row per (keys, other value): the medians of both sides and the comparison's ratio, low,
    high, verdict, reason, repeat counts and text ("1.84x [1.79-1.90] faster"); where `column` changes
    the numerics (NUMERICS), `outputs` says how far the variant's outputs are from fp32 eager NCHW and
    the text adds it ("...; outputs within 0.79 % of fp32 eager NCHW"), and a side with wrong results
    gets verdict 'wrong results' and no ratio (no speed verdict). Workloads without
    the baseline value, or with only it, give no row. Where `column` is measured in separate
    processes (SEPARATE_PROCESSES) and a side has one run, the interval adds the stated run shift;
    otherwise the shift is common to both sides and cancels (compare_rows).
    """
    keys = keys if keys is not None else ["machine", *[k for k in WORKLOAD if k != column]]
    columns = [*keys, column, *COMPARED]
    if rows.empty or column not in rows:
        return pd.DataFrame(columns=columns)
    out = []
    rows = rows.assign(disturbed_by=rows["noise_flags"].map(disturbances) if "noise_flags" in rows else "")
    rows = rows.reset_index(drop=True)
    # A row as a dict, once: a result row has some 300 columns, and a frame's to_dict costs about the same
    # for 3 rows as for all of them (per column). The groups below are cut from the few columns compared.
    records = rows.to_dict("records")
    compared = [*dict.fromkeys([*keys, column, value, "run_id", "disturbed_by", "device_type"])]
    for key, group in rows[[c for c in compared if c in rows]].groupby(keys, dropna=False, sort=False):
        is_base = group[column] == baseline
        base = group[is_base]
        if base.empty:
            continue
        base_rows = [records[i] for i in base.index]
        for other, candidate in group[~is_base].groupby(column, sort=False):  # an unknown value is no variant
            # runs are the samples where both sides have 2 or more, else the repeats (see compare_rows)
            found = compare_rows(base, candidate, value=value, separate_runs=column in SEPARATE_PROCESSES)
            c, unit = found.comparison, found.unit
            ratio, low, high, verdict, text = c.ratio, c.low, c.high, c.verdict, c.text()
            candidate_rows = [records[i] for i in candidate.index]
            outputs = deviation_text(candidate_rows[0]) if column in NUMERICS else ""
            wrong = [side for side, sides in (("baseline", base_rows), ("variant", candidate_rows))
                     if column in NUMERICS and is_wrong(sides[0])]
            if wrong:  # faster only when still correct: no speed verdict
                ratio = low = high = None
                verdict, text = WRONG_RESULTS, f"{WRONG_RESULTS} ({' and '.join(wrong)}): no speed verdict"
            elif outputs:
                text = f"{text}; {outputs}"
            # Host-bound sides: the ratio is the host's (across machines: it compares the hosts, not the GPUs).
            hosts = comparison_note([("baseline", base_rows), ("variant", candidate_rows)],
                                    across_machines=column in ("machine", "kind"))
            text = f"{text}; {hosts}" if hosts else text
            out.append([*(key if isinstance(key, tuple) else (key,)), other, float(base[value].median()),
                        float(candidate[value].median()), ratio, low, high, verdict, c.reason,
                        c.n_baseline, c.n_candidate, text, unit, outputs])
    table = pd.DataFrame(out, columns=columns)
    for name in ("ratio", "low", "high"):
        table[name] = pd.to_numeric(table[name], errors="coerce")
    return table


def verdict_summary(table: pd.DataFrame, what: str = "configuration") -> str:
    """'faster in 10, slower in 2, no clear difference in 3 of 15 configurations; geometric mean 1.70×
    (range 0.91× – 2.30×)'. The geometric mean has no interval: it averages different workloads."""
    ratios = table["ratio"].dropna()
    counts = table["verdict"].value_counts()
    parts = [f"{label} {counts[v]}" for v, label in COUNTED.items() if counts.get(v)]
    parts += [f"{v} in {n}" for v, n in counts.items() if v not in COUNTED]
    total = len(table)
    line = ", ".join(parts) + f" of {total} {what}{'' if total == 1 else 's'}"
    if len(ratios):
        mean = float(np.exp(np.log(ratios).mean()))
        line += f"; geometric mean {mean:.2f}×"
        low, high = f"{ratios.min():.2f}", f"{ratios.max():.2f}"
        if low != high:
            line += f" (range {low}× – {high}×)"
    return line


def settings_effects(res: Results) -> pd.DataFrame:
    """torch.compile against eager, channels_last against NCHW and float8 against amp-bf16 (under one
    compile setting), where the results hold both variants of an otherwise identical workload on the
    same machine. A `setting` column names the comparison ('compile=default vs eager', 'channels_last
    vs NCHW', 'fp8-tensorwise vs amp-bf16')."""
    ok = res.ok
    parts = []
    compiled = compare_variants(ok, "compile", "off")
    if len(compiled):
        parts.append(compiled.assign(setting=[f"compile={v} vs eager" for v in compiled["compile"]]))
    layout = compare_variants(ok, "channels_last", False)
    if len(layout):
        parts.append(layout.assign(setting="channels_last vs NCHW"))
    float8 = compare_variants(ok[ok["precision"].isin((*FLOAT8, FLOAT8_BASELINE))], "precision", FLOAT8_BASELINE)
    if len(float8):
        parts.append(float8.assign(setting=[f"{v} vs {FLOAT8_BASELINE}" for v in float8["precision"]]))
    if not parts:
        return pd.DataFrame(columns=["setting", "machine", *WORKLOAD, *COMPARED])
    table = pd.concat(parts, ignore_index=True)
    return table[["setting", "machine", *WORKLOAD, *COMPARED]]



def float8_notes(res: Results) -> list[str]:
    """What the report says beside the float8 comparison: an fp8 workload that ran with one compile
    setting while amp-bf16 ran only with another is not compared, and says so (never silently set
    against the other setting); and each eager fp8 row's precision_note (why it is slow)."""
    ok = res.ok
    fp8 = ok[ok["precision"].isin(FLOAT8)]
    keys = ["machine", *[k for k in WORKLOAD if k not in ("precision", "compile")]]

    def workload(row: dict) -> tuple:  # missing values (None, NaN) as one
        return tuple(str(row.get(k)) if is_present(row.get(k)) else "" for k in keys)
    compiled_as: dict[tuple, set] = {}  # each amp-bf16 workload -> the compile settings it ran with
    for row in ok[ok["precision"] == FLOAT8_BASELINE].to_dict("records"):
        compiled_as.setdefault(workload(row), set()).add(str(row["compile"]))
    lines = []
    for row in fp8.drop_duplicates([*keys, "precision", "compile"]).to_dict("records"):
        others = sorted(compiled_as.get(workload(row), ()))
        if others and str(row["compile"]) not in others:
            lines.append(f"{row['precision']} {row['model']} {row['mode']} batch {row['batch_size']} ran with "
                         f"compile={row['compile']}, {FLOAT8_BASELINE} only with compile={', '.join(others)}: not "
                         f"compared (float8 is judged against {FLOAT8_BASELINE} under the same compile setting; run "
                         f"{FLOAT8_BASELINE} with compile={row['compile']})")
    if "precision_note" in fp8:
        lines += [str(v) for v in dict.fromkeys(fp8["precision_note"]) if isinstance(v, str) and v]
    return lines
