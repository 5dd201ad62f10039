"""Two result directories compared configuration by configuration (`bench diff OLD NEW`): each
configuration's old and new throughput, their ratio with its interval and verdict, what was
added, removed or fails now, and what changed in the environment between the two. Repeats flagged
as disturbed (results.disturbed) are left out; a configuration left with too few is 'disturbed:
re-measure', never faster or slower, and each judged one says the smallest slowdown it could see.

A configuration is the workload as asked for (model, mode, precision, batch size, every field that
shapes its input: width, height, depth, seq_len, latent_size ..., processes, compile, channels_last)
on a kind of device (cpu, cuda, mps). The machine is
part of it only where a directory holds several device models of one kind; otherwise OLD and NEW
may come from different hosts (a CI runner), and the host shows as an environment change.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench_core.errors import ConfigError
from bench_core.results.comparison import (
    CONFIDENCE,
    DISTURBED,
    METHOD_TEXT,
    MIN_EFFECT,
    ONE_RUN,
    POWER,
    RUN_SHIFT,
)
from bench_core.results.sample_size import runs_text
from bench_core.summary.diff_rows import (  # noqa: F401 - re-exported: bench diff's pieces, public here as before
    KEY,
    OTHER_SHAPES,
    TABLE_COLUMNS,
    compare_configuration,
    say_kept_apart,
    emulated_note,
    failures_note,
    label,
    noise_note,
    repeats_text,
    several_models_per_kind,
    status_text,
    undisturbed_mean,
    with_keys,
)
from bench_core.summary.html import esc, table_html
from bench_core.summary.load import Results, load_results
from bench_core.summary.text import int_text, is_present, num_text

FAIL_ABOVE = 0.05  # a configuration slower by more than 5 %, with confidence, is a regression

# Environment columns whose change can explain a change of speed; only those that differ are shown.
ENVIRONMENT_CHANGES = [
    "torch_version", "torchvision_version", "timm_version", "smp_version", "transformers_version", "diffusers_version",
    "cuda_version", "cudnn_version",
    "nccl_version", "driver_version", "project_version", "git_commit", "python_version", "os", "host",
    "cpu_model", "cpu_count", "cpu_isa_dispatch", "device_name", "gpu_name", "gpu_count", "threads",
    "torch_threads", "tf32_enabled", "cudnn_benchmark_enabled",
    "model_code_sha256", "model_code_commit",  # your own model's file: one model across edits, its version here
]

# Columns shown (text and HTML): column -> header. Each column is one statistic, named in its header.
SHOWN = {"configuration": "configuration", "old_samples_per_s": "old samples/s (geo. mean)",
         "new_samples_per_s": "new samples/s (geo. mean)", "change": f"new/old [{CONFIDENCE:.0%} CI]",
         "unit": "samples", "detectable": "detectable slowdown", "verdict": "verdict", "flag": "flag", "note": "note"}


@dataclass
class ResultsDiff:
    """The comparison of OLD and NEW: one row per configuration, and the environment changes."""

    table: pd.DataFrame         # one row per configuration (see diff_results)
    environment: pd.DataFrame   # field, old, new: only the fields that differ
    old_dir: Path
    new_dir: Path
    fail_above: float = FAIL_ABOVE
    min_effect: float = MIN_EFFECT
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> pd.DataFrame:
        return self.table[self.table["regression"]]

    @property
    def disturbed(self) -> pd.DataFrame:
        """Configurations in both whose measurements were too disturbed to judge."""
        return self.table[self.table["verdict"] == DISTURBED]

    @property
    def compared(self) -> int:
        """Configurations present in both directories."""
        return int(self.table["side"].eq("both").sum())

    @property
    def within_one_run(self) -> int:
        """Configurations compared through the repeats of a single run on a side."""
        return int((self.table["unit"].str.startswith(ONE_RUN) & self.table["verdict"].ne(DISTURBED)).sum())

    def one_run_warning(self) -> str:
        """Why a comparison of single runs can flag noise: its interval sees only the repeats of one process; and
        where runs were given but set aside as disturbed, that (re-measure), not that more runs are needed."""
        if not self.within_one_run:
            return ""
        one = self.table[self.table["unit"].str.startswith(ONE_RUN) & self.table["verdict"].ne(DISTURBED)]
        aside = int((one["runs_set_aside"] > 0).sum())
        shifts = ", ".join(f"{share:.0%} on {kind}" for kind, share in RUN_SHIFT.items())
        text = (f"{self.within_one_run} configuration(s) have one run on a side: one run cannot measure how far a "
                "whole run shifts from one process to the next, so their intervals add a stated shift "
                f"({shifts}) and only large changes are called (the 'detectable slowdown' column)")
        if aside == len(one):
            return (text + f"; each had more runs, set aside as disturbed (the 'samples' column says how many): "
                           "re-measure them on a quiet machine, and diff compares runs")
        return (text + "; measure both sides in runs (bench sweep params/ci-gate.yaml, or bench sweep FILE --runs 5) "
                       "and diff compares runs" + (f"; {aside} of them had runs set aside as disturbed: re-measure "
                                                   "those on a quiet machine" if aside else ""))

    def runs_line(self) -> str:
        """How many runs a side catch a 3, 5 or 10 % slowdown at the run-to-run spread behind this comparison (the
        largest of its judged configurations; measured where both sides had runs, else the stated shift)."""
        judged = self.table[self.table["run_sd"].notna() & self.table["verdict"].ne(DISTURBED)]
        if judged.empty:
            return ""
        worst = judged.loc[judged["run_sd"].idxmax()]
        source = (f"measured between runs, {worst['configuration']}" if worst["run_sd_source"] == "measured" else
                  "stated: one run a side cannot measure it; measure in runs and this says what yours is")
        return (f"runs a side to catch a slowdown {POWER:.0%} of the time at a run-to-run spread of "
                f"{worst['run_sd']:.1%} a run ({source}), with --fail-above {self.fail_above:.0%}: "
                f"{runs_text(float(worst['run_sd']), self.fail_above)}")

    def method_line(self) -> str:
        return (f"old/new samples/s = geometric mean over runs of each run's geometric mean over its undisturbed ok "
                f"repeats; new/old = their ratio with a {CONFIDENCE:.0%} Welch t-interval on log throughput, over "
                "runs when both sides have 2 or more runs of a configuration, else over the repeats plus a stated "
                f"run-to-run shift; faster or slower when the interval excludes 1 and the change is at least "
                f"{self.min_effect:.0%}; a regression is slower by more than {self.fail_above:.0%} with the whole "
                "interval below 1, or a configuration that ran in OLD and fails in NEW. Repeats flagged as "
                "disturbed are left out; with too few left: 'disturbed: re-measure' (exit 3 when nothing "
                "regressed). detectable slowdown = the smallest slowdown this comparison would call "
                f"{POWER:.0%} of the time at its noise: 'no regression' means none above it.")

    def summary_line(self) -> str:
        counts = self.table["verdict"].value_counts()
        parts = [f"{n} {verdict}" for verdict, n in counts.items()]
        line = f"{len(self.table)} configuration(s), {self.compared} in both: " + ", ".join(parts) + "."
        found, disturbed = len(self.regressions), len(self.disturbed)
        if found:
            return line + f" {found} regression(s) (exit 1)."
        seen = self.table["detectable"].loc[lambda d: d != ""].str.rstrip("%").astype(float)
        above = "" if seen.empty else f": none above {num_text(seen.min())}%" if seen.min() == seen.max() else \
            f": none above {num_text(seen.min())}-{num_text(seen.max())}% (each configuration's detectable slowdown)"
        if disturbed == self.compared:
            return line + " Nothing could be judged: re-measure (exit 3)."
        if disturbed:
            return line + (f" No regression among what could be judged{above}; {disturbed} disturbed: re-measure "
                           "(exit 3).")
        return line + f" No regression{above}."

    def text(self) -> str:
        lines = [f"bench diff: old {self.old_dir} -> new {self.new_dir}"]
        if len(self.environment):
            lines.append("environment changes:")
            width = max(len(f) for f in self.environment["field"])
            lines += [f"  {r.field:{width}s}  {r.old} -> {r.new}" for r in self.environment.itertuples()]
        else:
            lines.append("environment: no recorded field differs (versions, driver, commit, host, devices, threads)")
        lines += [aligned(self.display()), self.summary_line(), "method: " + self.method_line()]
        if self.within_one_run:
            lines.append("caution: " + self.one_run_warning())
        if self.runs_line():
            lines.append(self.runs_line())
        return "\n".join(lines)

    def display(self, why: bool = False) -> pd.DataFrame:
        shown = {**SHOWN, "reason": "why"} if why else SHOWN
        return self.table[list(shown)].rename(columns=shown)

    def html(self, title: str = "") -> str:
        """A self-contained page (no script, no network resource); every cell escaped."""
        old_name, new_name = (d.resolve().name or str(d) for d in (self.old_dir, self.new_dir))
        title = title or f"bench diff: {old_name} -> {new_name}"
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        env = (table_html(self.environment, {"field": "field", "old": "old", "new": "new"}) if len(self.environment)
               else "<p>No recorded field differs (versions, driver, commit, host, devices, threads).</p>")
        regressed = "".join(f"<li>{esc(r.configuration)}: {esc(r.verdict)}, {esc(r.reason)}</li>"
                            for r in self.regressions.itertuples())
        return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:80em}} table{{border-collapse:collapse}}
td,th{{border-bottom:1px solid #ddd;padding:3px 8px}} .bad{{color:#b00020}}</style></head><body>
<h1>{esc(title)}</h1>
<p>{esc(stamp)}. Old: <code>{esc(old_name)}</code>, new: <code>{esc(new_name)}</code>.</p>
<p class="{'bad' if regressed else ''}">{esc(self.summary_line())}</p>
{f'<ul class="bad">{regressed}</ul>' if regressed else ''}
<h2>Environment changes</h2>
{env}
<h2>Configurations</h2>
{table_html(self.display(why=True))}
<h2>Method</h2>
<p>{esc(self.method_line())}</p>
{f'<p><em>{esc(self.one_run_warning())}</em></p>' if self.within_one_run else ''}
{f'<p>{esc(self.runs_line())}</p>' if self.runs_line() else ''}
<p>{esc(METHOD_TEXT)}</p>
{''.join(f'<p><em>{esc(n)}</em></p>' for n in self.notes)}
</body></html>
"""

    def to_dict(self) -> dict:
        return {"old_dir": str(self.old_dir), "new_dir": str(self.new_dir), "fail_above": self.fail_above,
                "min_effect": self.min_effect, "confidence": CONFIDENCE, "compared": self.compared,
                "regressions": len(self.regressions), "disturbed": len(self.disturbed), "method": METHOD_TEXT,
                "environment_changes": self.environment.to_dict("records"),
                "configurations": json.loads(self.table.drop(columns=[k for k in KEY if k.endswith("_key")])
                                             .to_json(orient="records")),
                "runs_needed": self.runs_line(), "notes": self.notes}


def diff_results(old_dir, new_dir, *, fail_above: float = FAIL_ABOVE, min_effect: float = MIN_EFFECT) -> ResultsDiff:
    """OLD and NEW result directories compared configuration by configuration.

    `table` has one row per configuration: configuration (a label), side (both | old only | new
    only), old_/new_samples_per_s (geometric mean over runs of each run's geometric mean over its
    undisturbed ok repeats: what the ratio divides; NaN when none), old_/new_repeats ("3/3 ok"),
    ratio, low, high (new/old with its interval), change (that as text), unit (the samples),
    detectable (the smallest slowdown, a fraction, called POWER of the time at this noise), verdict
    (faster, slower, no clear difference, too few repeats, no data, disturbed: re-measure, fails now,
    fails in both, runs now, added, removed), regression (slower beyond `fail_above` with the whole
    interval below 1, or ok in OLD and failing in NEW), flag (REGRESSION, DISTURBED), reason and
    note. Rows: regressions first, then disturbed ones, then by configuration.
    """
    if not 0.0 <= fail_above < 1.0:
        raise ConfigError("fail_above", f"must be a fraction in [0, 1), got {fail_above!r}")
    if not 0.0 <= min_effect < 1.0:
        raise ConfigError("min_effect", f"must be a fraction in [0, 1), got {min_effect!r}")
    old, new = (read_results(Path(d), name) for d, name in ((old_dir, "old_dir"), (new_dir, "new_dir")))
    old_dir, new_dir = old.dirs[0], new.dirs[0]
    rows = pd.concat([old.rows.assign(side="old"), new.rows.assign(side="new")], ignore_index=True)
    rows = with_keys(rows)
    keys = KEY + (["device_name_key"] if several_models_per_kind(rows) else [])
    by_use = rows["use_key"].nunique() > 1  # labels say how the CPU was used where the rows differ in it
    records = [compare_configuration(group, fail_above, min_effect, by_model=len(keys) > len(KEY), by_use=by_use)
               for _, group in rows.groupby(keys, dropna=False, sort=False)]
    table = say_kept_apart(pd.DataFrame(records, columns=TABLE_COLUMNS))
    if len(table):
        table = (table.assign(_disturbed=table["verdict"] == DISTURBED)
                 .sort_values(["regression", "_disturbed", "configuration"], ascending=[False, False, True],
                              kind="stable").drop(columns="_disturbed"))
    table = table.reset_index(drop=True)
    return ResultsDiff(table, environment_changes(old.rows, new.rows), old_dir, new_dir, fail_above, min_effect,
                       old.notes + new.notes)


def read_results(result_dir: Path, name: str) -> Results:
    """One directory's rows, or a one-line ConfigError naming it: its run files (runs/*/rows.json, the record) where
    it has any, else its results.csv, as the report reads them (load_results); nothing is rebuilt or written here."""
    if not result_dir.is_dir():
        raise ConfigError(name, f"{str(result_dir)!r} is not a directory; allowed: a result directory written by "
                                "bench run / bench sweep --out")
    if not (result_dir / "results.csv").is_file() and not any(result_dir.glob("runs/*/rows.json")):
        raise ConfigError(name, f"{str(result_dir)!r} has no results.csv and no run files (runs/*/rows.json); "
                                "allowed: a result directory written by bench run / bench sweep --out")
    found = load_results(result_dir)
    if found.rows.empty:
        raise ConfigError(name, f"{str(result_dir)!r} has no result rows: {' '.join(found.notes)}")
    return found


def environment_changes(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """field, old, new for each environment column whose values differ between the directories
    (several values on a side are listed, comma separated)."""
    out = []
    for name in ENVIRONMENT_CHANGES:
        values = [values_of(side, name) for side in (old, new)]
        if values[0] != values[1]:
            out.append({"field": name, "old": ", ".join(values[0]) or "(none)", "new": ", ".join(values[1]) or "(none)"})
    return pd.DataFrame(out, columns=["field", "old", "new"])


def values_of(rows: pd.DataFrame, name: str) -> list[str]:
    ok = rows[rows["status"] == "ok"]
    source = ok if len(ok) else rows
    if name not in source:
        return []
    return sorted({int_text(v) if isinstance(v, float) else str(v) for v in source[name] if is_present(v)})


def aligned(table: pd.DataFrame) -> str:
    """A plain-text table: numbers right-aligned as the report prints them, text left-aligned."""
    numeric = [pd.api.types.is_numeric_dtype(table[c]) and not pd.api.types.is_bool_dtype(table[c]) for c in table]
    cells = [[num_text(v) if n else ("" if not is_present(v) else str(v)) for v, n in zip(values, numeric)]
             for values in table.itertuples(index=False, name=None)]
    widths = [max([len(str(c))] + [len(r[i]) for r in cells]) for i, c in enumerate(table.columns)]
    keep = [i for i, c in enumerate(table.columns) if any(r[i] for r in cells) or c in ("configuration",)]

    def line(values):
        return "  ".join(values[i].rjust(widths[i]) if numeric[i] else values[i].ljust(widths[i]) for i in keep).rstrip()
    return "\n".join([line([str(c) for c in table.columns])] + [line(r) for r in cells])
