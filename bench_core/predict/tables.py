"""The error tables docs/prediction.md states, as markdown: the model against the published pairs
(bench_core/predict/published.py) and our own GPU pairs (own.py), the model with each term left out,
the groups of predictions, and every pair of the kept runs. `python -m bench_core.predict.tables --write`
rewrites the doc's generated blocks; tests/test_predict.py checks them.
"""
from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

from bench_core.files import atomic_write_text
from bench_core.predict.groups import CPU_SOURCE, GPU_TRAINING, GROUPS, INFERENCE, LLM_TRAINING, RULES
from bench_core.predict.own import RUNS, own_markdown, own_summary
from bench_core.predict.published import (ABLATION_GROUPS, COVERAGE, ablations, error_table, group_sources,
                                          held_out_by_gpu, predictions)


def fmt_pct(x: float) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.0%}"


def interval_of(row: dict) -> str:
    """A group's COVERAGE interval of measured / predicted, as the table shows it."""
    return f"{row['interval_low']:.2f}x-{row['interval_high']:.2f}x"


def all_errors(root: Path = RUNS) -> list[dict]:
    """The published pairs' error table, and below it the line of our own pairs of two GPU kinds among the
    kept runs under `root` (gpu/runs) whenever there is one (own.py)."""
    own = own_summary(root)
    return error_table() + ([own] if own else [])


def markdown(root: Path = RUNS) -> str:
    """The error table and the term ablation as markdown, as docs/prediction.md states them."""
    lines = [f"| workload or group | pairs | median abs. error | {COVERAGE * 100:.0f} % interval (measured / predicted) "
             "| worst factor | within 15 % | worst pair |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in all_errors(root):
        lines.append(f"| {r['group']} | {r['pairs']} | {fmt_pct(r['median_abs_error'])} | {interval_of(r)} | "
                     f"{r['worst_factor']:.2f}x | {fmt_pct(r['within_15pct'])} | {r['worst_pair']} |")
    lines += ["", f"| model | pairs | median abs. error | {COVERAGE * 100:.0f} % interval | worst factor | within 15 % | "
              + " | ".join(f"median, {g}" for g in ABLATION_GROUPS) + " |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in ablations():
        lines.append(f"| {r['model']} | {r['pairs']} | {fmt_pct(r['median_abs_error'])} | {interval_of(r)} | "
                     f"{r['worst_factor']:.2f}x | {fmt_pct(r['within_15pct'])} | "
                     + " | ".join(fmt_pct(r[f"median_{g}"]) for g in ABLATION_GROUPS) + " |")
    lines += ["", "| GPU held out | its GPU-to-GPU pairs | median abs. error, its own figures | with them held out | "
              "within 15 %, held out |", "|---|---:|---:|---:|---:|"]
    for r in held_out_by_gpu():
        lines.append(f"| {r['gpu']} | {r['pairs']} | {fmt_pct(r['median_abs_error'])} | "
                     f"{fmt_pct(r['held_out_median_abs_error'])} | {fmt_pct(r['held_out_within_15pct'])} |")
    return "\n".join(lines)


def groups_markdown() -> str:
    """What puts a prediction in each group, the published pairs behind the group's interval (from the
    data) and the interval: docs/prediction.md's table and, as lines, `bench predict --help`."""
    table, sources = {r["group"]: r for r in error_table()}, group_sources()
    lines = [f"| group | what | pairs behind its interval | {COVERAGE * 100:.0f} % interval (measured / predicted) |",
             "| --- | --- | --- | --- |"]
    for group in GROUPS:
        row = table.get(group) if group != CPU_SOURCE else None
        pairs = f"{row['pairs']}: {sources[group]}" if row else "none"
        lines.append(f"| {group} | {RULES[group]} | {pairs} | {interval_of(row) if row else 'none'} |")
    return "\n".join(lines)


def groups_help() -> str:
    """The groups as `bench predict --help` states them: the same facts as groups_markdown."""
    table, sources = {r["group"]: r for r in error_table()}, group_sources()
    lines = []
    for group in GROUPS:
        row = table.get(group) if group != CPU_SOURCE else None
        said = (f"{interval_of(row)} on {COVERAGE * 100:.0f} % of its {row['pairs']} published pairs ({sources[group]})"
                if row else "no interval (no published pair)")
        lines.append(f"  {group} ({RULES[group]}): {said}")
    return "\n".join(lines)


def beside_markdown() -> str:
    """Habitat's and NeuSight's published errors beside ours, measured the way they measured theirs (a mean |error|
    over held-out predictions) on the pairs closest to theirs."""
    rows = predictions()

    def mean_of(select) -> tuple[int, str]:
        errors = [abs(r["error"]) for r in rows if select(r)]
        return len(errors), fmt_pct(statistics.mean(errors)) if errors else ""
    training = mean_of(lambda r: r["group"] == GPU_TRAINING)
    resnet = mean_of(lambda r: r["group"] == GPU_TRAINING and r["model"] == "resnet50")
    h100 = mean_of(lambda r: r["group"] == LLM_TRAINING and r["gpu_to"] == "H100-SXM5-80GB")
    inference = mean_of(lambda r: r["group"] == INFERENCE)
    return "\n".join([
        "| predictor | what it predicts, from what | its published error | ours, measured the same way |",
        "|---|---|---:|---|",
        "| Habitat (Yu et al., USENIX ATC 2021) | a training iteration on a target GPU, scaling each operation measured "
        "on a source GPU (wave scaling; MLPs for kernels whose choice varies), ResNet-50, Inception v3, Transformer, "
        "GNMT, DCGAN over six GPUs | 11.8 % (mean) | "
        f"{training[1]} mean over the {training[0]} GPU-to-GPU training pairs (whole step); {resnet[1]} over the "
        f"{resnet[0]} ResNet-50 ones |",
        "| NeuSight (Lee et al., ASPLOS 2025) | a kernel's tiles from the GPU's architecture (MLPs bounded by the "
        "roofline), GPT-3 training and inference on an H100 it was not trained on | 3.8 % | "
        f"{h100[1]} mean over the {h100[0]} LLM-training pairs that predict an H100 (llm-foundry's MPT, from the "
        f"A100); {inference[1]} over the {inference[0]} inference pairs |"])


# docs/prediction.md holds these tables between their markers; tests/test_predict.py checks them against
# the data, and `python -m bench_core.predict.tables --write` rewrites them.
BLOCKS = {"error-table": markdown, "groups": groups_markdown, "own-pairs": own_markdown, "beside": beside_markdown}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start (generated) -->", f"<!-- {name}:end -->"


def doc_block(text: str, name: str = "error-table") -> str | None:
    """The generated block `name` of a docs/prediction.md text, or None when its markers are missing."""
    start, end = markers(name)
    if start not in text or end not in text:
        return None
    return text[text.index(start) + len(start):text.index(end)].strip()


def rewrite(text: str) -> str:
    """`text` with every generated block made anew from the data."""
    for name, make in BLOCKS.items():
        start, end = markers(name)
        text = text[:text.index(start) + len(start)] + "\n" + make() + "\n" + text[text.index(end):]
    return text


DOC = Path(__file__).resolve().parents[2] / "docs" / "prediction.md"

if __name__ == "__main__":  # python -m bench_core.predict.tables [--write]
    if sys.argv[1:] == ["--write"]:
        atomic_write_text(DOC, rewrite(DOC.read_text()))
    print("\n\n".join(make() for make in BLOCKS.values()))
