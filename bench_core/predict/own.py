"""Predictions checked against our own GPU pairs: a configuration measured on two machines among the
kept runs (gpu/runs/*; the same configuration, WORKLOAD, on each) is predicted on the second from the
first and scored against what the second measured. Pairs of two GPU kinds (an H100 against an H200)
check the model and are a group of the error table, "our own GPU pairs", whenever the kept runs hold
one; pairs of one kind (two H200 machines: a true ratio of 1) say how much machines of one kind differ.
`bench predict --from A --gpu NAME --against B` scores one pair of result directories the same way.
"""
from __future__ import annotations

import itertools
from pathlib import Path

from bench_core.errors import ConfigError
from bench_core.predict.bands import bands
from bench_core.predict.measured import (configurations, ladder_key, ladders, predict_conf, refusal,
                                         source_sheet)
from bench_core.predict.published import summarize
from bench_core.predict.specs import spec_for_device
from bench_core.results.disturbed import disturbances
from bench_core.results.rows import WORKLOAD
from bench_core.results.store import iter_rows

OWN = "our own GPU pairs"
RUNS = Path(__file__).resolve().parents[2] / "gpu" / "runs"  # the kept GPU runs, in a checkout


def machines(result_dir: Path) -> dict[str, list[dict]]:
    """The ok GPU rows of a result directory by machine: one GPU instance (its gpu_uuid, else its host),
    named after the directory ("h200-2026-11-27 (GPU c2df5475)")."""
    out: dict[str, list[dict]] = {}
    for row in iter_rows(Path(result_dir)):
        if row.get("status") != "ok" or row.get("device_type") != "cuda":
            continue
        uuid = str(row.get("gpu_uuid") or "").removeprefix("GPU-")[:8]
        name = f"{Path(result_dir).name} ({f'GPU {uuid}' if uuid else row.get('host') or 'one machine'})"
        out.setdefault(name, []).append(row)
    return out


def scored(source: list[dict], target: list[dict], source_name: str, target_name: str) -> list[dict]:
    """Each configuration `target` measured that `source` measured too, predicted on the target's GPU from
    the source's rows: the prediction, what the target measured, the error, and whether the measured
    figure fell inside the prediction's interval (None where it has none). A source GPU without a spec sheet
    scores nothing: a one-line ConfigError names it (measured.source_sheet)."""
    measured = {tuple(str(c.get(k)) for k in WORKLOAD): c for c in configurations(target)}
    out, group_bands, confs = [], bands(), configurations(source)
    found_ladders = ladders(confs)
    for conf in confs:
        other = measured.get(tuple(str(conf.get(k)) for k in WORKLOAD))
        gpu = spec_for_device(other.get("device_name") or "") if other else None
        if gpu is None or not gpu.predictable() or not other.get("samples_per_s"):
            continue
        rows, _ = predict_conf(conf, [gpu], int(other.get("world_size") or 1), group_bands=group_bands,
                               ladder=found_ladders.get(ladder_key(conf)))
        if not rows:  # a serving point, an emulated precision: not predicted
            if not refusal(conf):
                source_sheet(conf)  # (raises where the reason is the source GPU's missing spec sheet)
            continue
        r, actual = rows[0], other["samples_per_s"]
        out.append({**r, "from_machine": source_name, "to_machine": target_name, "actual": actual,
                    "error": r["predicted"] / actual - 1, "same_kind": r["measured_on"] == r["gpu"],
                    "inside": r["low"] <= actual <= r["high"] if r["low"] is not None else None,
                    "from": r["measured_on"], "to": r["gpu"],
                    "target_disturbed": disturbances(other.get("noise_flags"))})
    return out


def own_pairs(root: Path = RUNS) -> list[dict]:
    """Every configuration measured on two machines of the kept runs under `root`, predicted both ways."""
    found: dict[str, list[dict]] = {}
    for folder in sorted(p for p in Path(root).glob("*") if p.is_dir()) if Path(root).is_dir() else []:
        found.update(machines(folder))
    pairs = []
    for (a, rows_a), (b, rows_b) in itertools.permutations(found.items(), 2):
        try:
            pairs += scored(rows_a, rows_b, a, b)
        except ConfigError:  # a kept run on a GPU without a spec sheet: no source of pairs
            continue
    return pairs


def own_summary(root: Path = RUNS) -> dict | None:
    """The error table's line for our own pairs of two GPU kinds, or None while the kept runs hold none."""
    cross = [p for p in own_pairs(root) if not p["same_kind"]]
    if not cross:
        return None
    line = summarize(cross, None)[0]
    inside = [p["inside"] for p in cross if p["inside"] is not None]
    return {**line, "group": OWN, "inside_own_interval": sum(inside) / len(inside) if inside else None}


def own_markdown(root: Path = RUNS) -> str:
    """Every pair of the kept runs: what was predicted from what, measured, the error, inside or not."""
    lines = ["| configuration | from | to | measured there | predicted | error | inside its interval |",
             "|---|---|---|---:|---:|---:|---|"]
    for p in own_pairs(root):
        what = f"{p['model']} {p['mode']} {p['precision']}, batch {p['batch_size']}" + (
            f" ({p['settings']})" if p["settings"] else "")
        inside = "no interval" if p["inside"] is None else "yes" if p["inside"] else "no"
        note = " (same kind: true ratio 1)" if p["same_kind"] else ""
        flag = f" (disturbed: {p['target_disturbed']})" if p["target_disturbed"] else ""
        lines.append(f"| {what} | {p['from_machine']} | {p['to_machine']}{flag} | {p['actual']:,.0f} | "
                     f"{p['predicted']:,.0f} | {p['error'] * 100:+.1f} %{note} | {inside} |")
    return "\n".join(lines) if len(lines) > 2 else "No configuration of the kept runs was measured on two machines."
