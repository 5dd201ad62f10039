"""Numbers and lists as the report prints them: plain text, no markup.
"""
from __future__ import annotations

import math

import pandas as pd

from bench_core.workload.models import REGISTRY, TASKS


def wrap_text(text: str, width: int = 28) -> str:
    import textwrap
    return "\n".join(textwrap.wrap(str(text), width)) or str(text)


def _number(value) -> float | str:
    """The value as a finite float, or the text to show instead: '' for None, NaN and infinities, text as it is."""
    if value is None or isinstance(value, str):
        return value or ""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    return v if math.isfinite(v) else ""


def num_text(value) -> str:
    """A number as a person reads it: 22,551 / 367.3 / 1.56 / 0.0244 / 0.000117 (3 significant digits
    below 100, in plain decimals down to a millionth)."""
    v = _number(value)
    if isinstance(v, str):
        return v
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 0.01:
        return f"{v:.3g}"
    if a >= 1e-6:  # 0.00622, not 6.22e-03 beside 0.0244 in the same column
        rounded = abs(float(f"{v:.3g}"))  # 0.0099999 -> 0.0100
        return f"{v:.{2 - math.floor(math.log10(rounded))}f}"
    return f"{v:.2e}"


def sig_text(value, digits: int = 3) -> str:
    """A measured figure to `digits` significant figures, alike in every row: 22,600 / 367 / 18.0 /
    9.70 / 0.0244 (thousands separated, trailing zeros kept, no exponent down to a millionth)."""
    v = _number(value)
    if isinstance(v, str):
        return v
    if v == 0:
        return "0"
    rounded = float(f"{v:.{digits}g}")  # 99.96 -> 100: the exponent after rounding decides the decimals
    exponent = math.floor(math.log10(abs(rounded)))
    if abs(rounded) < 1e-6:
        return f"{v:.{digits - 1}e}"
    return f"{rounded:,.{max(0, digits - 1 - exponent)}f}"


def int_text(value) -> str:
    return num_text(value) if is_number(value) else str(value)


def is_number(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def is_present(value) -> bool:
    if value is None:
        return False
    if value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return False
    return str(value).strip() != ""  # the text "nan" is a status, not a missing value


def applies(row: dict, name: str) -> bool:
    """Whether field `name` names something the row's task has (its family says: workload.family.Task.applies),
    by the row's task, else its model's (a table grouped without the task); True where neither is known here
    (a model from your code)."""
    spec = REGISTRY.get(str(row.get("model")))
    task = TASKS.get(str(row.get("task"))) or (spec.task if spec else None)
    return task is None or task.applies(name)


def short_list(items, limit: int = 6) -> str:
    items = [str(i) for i in items]
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def currency_text(frame: pd.DataFrame) -> str:
    """The currency of the prices behind a table's costs: 'USD', 'USD or EUR' where they differ (each row's own
    is in results.csv), 'currency not stated' where a price came without one (the `currency` field); '' where
    no row has a price."""
    priced = next((c for c in ("price_per_hour", "cost_per_million", "cost_per_million_samples") if c in frame), None)
    if priced:
        frame = frame[frame[priced].map(is_present)]
    if frame.empty:
        return ""
    if "currency" not in frame:
        return "currency not stated"
    stated = sorted({str(c) for c in frame["currency"] if is_present(c)})
    missing = not frame["currency"].map(is_present).all()
    return " or ".join(stated + (["currency not stated"] if missing or not stated else []))


def with_currency(label: str, frame: pd.DataFrame) -> str:
    """'cost per million samples, USD': a label of money with the currency of `frame`'s prices, where known."""
    currency = currency_text(frame)
    return f"{label}, {currency}" if currency else label
