"""The error tables docs/prediction.md states, as markdown: the model against the published pairs
(bench_core/predict/published.py) and the model with each term left out. `python -m
bench_core.predict.tables --write` rewrites the doc's generated block; tests/test_predict.py checks it.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

from bench_core.files import atomic_write_text
from bench_core.predict.published import COVERAGE, ablations, error_table


def fmt_pct(x: float) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.0%}"


# docs/prediction.md holds the tables below between these markers; tests/test_predict.py checks
# them against the data, and `python -m bench_core.predict.tables --write` rewrites them.
DOC_START, DOC_END = "<!-- error-table:start (generated) -->", "<!-- error-table:end -->"


def interval_of(row: dict) -> str:
    """A group's COVERAGE interval of measured / predicted, as the table shows it."""
    return f"{row['interval_low']:.2f}x-{row['interval_high']:.2f}x"


def markdown() -> str:
    """The error table and the term ablation as markdown, as docs/prediction.md states them."""
    lines = [f"| workload or group | pairs | median abs. error | {COVERAGE * 100:.0f} % interval (measured / predicted) "
             "| worst factor | within 15 % | worst pair |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in error_table():
        lines.append(f"| {r['group']} | {r['pairs']} | {fmt_pct(r['median_abs_error'])} | {interval_of(r)} | "
                     f"{r['worst_factor']:.2f}x | {fmt_pct(r['within_15pct'])} | {r['worst_pair']} |")
    lines += ["", f"| model | pairs | median abs. error | {COVERAGE * 100:.0f} % interval | worst factor | within 15 % |",
              "|---|---:|---:|---:|---:|---:|"]
    for r in ablations():
        lines.append(f"| {r['model']} | {r['pairs']} | {fmt_pct(r['median_abs_error'])} | {interval_of(r)} | "
                     f"{r['worst_factor']:.2f}x | {fmt_pct(r['within_15pct'])} |")
    return "\n".join(lines)


def doc_block(text: str) -> str | None:
    """The generated block of a docs/prediction.md text, or None when its markers are missing."""
    if DOC_START not in text or DOC_END not in text:
        return None
    return text[text.index(DOC_START) + len(DOC_START):text.index(DOC_END)].strip()


DOC = Path(__file__).resolve().parents[2] / "docs" / "prediction.md"

if __name__ == "__main__":  # python -m bench_core.predict.tables [--write]
    if sys.argv[1:] == ["--write"]:
        text = DOC.read_text()
        start, end = text.index(DOC_START) + len(DOC_START), text.index(DOC_END)
        atomic_write_text(DOC, text[:start] + "\n" + markdown() + "\n" + text[end:])
    print(markdown())
