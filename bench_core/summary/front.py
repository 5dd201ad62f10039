"""The report's opening: its title, when it was made, the machines and what was measured; then the
overview of what was read (result directories by folder name, never a local path, and notes).
"""
from __future__ import annotations

from datetime import datetime, timezone

import pandas as pd

from bench_core.summary.html import (
    DEFAULT_TITLE,
    date_range,
    esc,
    note,
    ordered,
    section,
    show_html,
    show_table,
)
from bench_core.summary.load import MODE_ORDER, PRECISION_ORDER, Results
from bench_core.summary.tables import machines_table
from bench_core.summary.text import int_text, is_present, num_text, short_list


@section
def show_title(res: Results, title: str = "") -> None:
    """Title, date made, machines and what was measured: what a reader needs before the first table."""
    rows = res.rows
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    measured = date_range(rows["timestamp"]) if len(rows) else ""
    dirs = ", ".join(res.names)
    lines = [f"<h1>{esc(title or DEFAULT_TITLE)}</h1>",
             f"<p>Made {made}" + (f" from results measured {esc(measured)} (UTC)" if measured else "")
             + f"; result director{'y' if len(res.names) == 1 else 'ies'}: {esc(dirs)}.</p>"]
    if rows.empty:
        lines.append("<p>No result rows: nothing was measured yet (see Overview).</p>")
        show_html("".join(lines))
        return
    machines = [f"<li><strong>{esc(m['machine'])}</strong>: {esc(machine_text(m))}</li>"
                for m in machines_table(res).to_dict("records")]
    counts = ", ".join(f"{n} {s}" for s, n in rows["status"].value_counts().items())
    measured_items = {
        "Models": short_list(ordered(rows["model"], None), 12),
        "Modes": ", ".join(ordered(rows["mode"], MODE_ORDER)),
        "Precisions": ", ".join(ordered(rows["precision"], PRECISION_ORDER)),
        "Inputs": short_list(ordered(rows["input_shape"], None), 8),
        "Batch sizes per device": ", ".join(int_text(v) for v in sorted(set(rows["batch_size"].dropna()))),
        "Configurations": f"{configurations(rows)}, in {len(rows)} result rows ({counts})",
    }
    items = "".join(f"<li><strong>{name}</strong>: {esc(text)}</li>" for name, text in measured_items.items() if text)
    lines.append(f"<p><strong>Machines</strong> ({len(machines)}):</p><ul>{''.join(machines)}</ul>"
                 f"<p><strong>Measured</strong>:</p><ul>{items}</ul>")
    show_html("".join(lines))


def configurations(rows: pd.DataFrame) -> int:
    """Distinct configurations, as bench sweep counts them: one per config_hash (every setting, not only
    those a label names); rows written without one count by their label."""
    hashes = rows["config_hash"].where(rows["config_hash"].map(is_present), rows["config"])
    return hashes.nunique()


def machine_text(machine: dict) -> str:
    """'1 × Tesla V100-SXM2-16GB; CPU: Xeon (8 logical CPUs); runs on 1 and 2 devices; 12 rows (12 ok)'."""
    parts = []
    if is_present(machine["gpu"]):
        parts.append(f"{int_text(machine['gpus'])} × {machine['gpu']}" if is_present(machine["gpus"])
                     else str(machine["gpu"]))
    if is_present(machine["cpu"]):
        cpus = f" ({int_text(machine['cpus'])} logical CPUs)" if is_present(machine["cpus"]) else ""
        parts.append(f"CPU: {machine['cpu']}{cpus}")
    sizes = [int_text(v) for v in machine["world_sizes"]]
    if sizes:
        counts = sizes[0] if len(sizes) == 1 else f"{', '.join(sizes[:-1])} and {sizes[-1]}"
        parts.append(f"runs on {counts} device{'' if sizes == ['1'] else 's'}")
    parts.append(f"{machine['rows']} row{'' if machine['rows'] == 1 else 's'} ({machine['ok']} ok)")
    if is_present(machine.get("use")):  # (results.keys.machine_use)
        parts.append(f"used at {machine['use']}: its rows are never pooled with this CPU's used otherwise")
    return "; ".join(parts)


@section
def show_overview(res: Results) -> None:
    rows = res.rows
    if rows.empty:
        show_html(f"<p>No result rows in {esc(', '.join(res.names))}: every section below says what is missing. "
                  "Run <code>bench sweep</code> or <code>bench run --out DIR</code> first.</p>")
    else:
        show_html("<p>Throughput is the median over repeats; the spread is the interquartile range of the "
                  "repeats.</p>")
    per_dir = []
    for name in res.names:
        in_dir = rows[rows["result_dir"] == name]
        versions = sorted(set(in_dir["schema_version"].dropna()))
        per_dir.append({"result directory": name, "rows": len(in_dir), "ok": int((in_dir["status"] == "ok").sum()),
                        "not ok": int((in_dir["status"] != "ok").sum()),
                        "machines": " | ".join(dict.fromkeys(in_dir["machine"])),
                        "measured (UTC)": date_range(in_dir["timestamp"]),
                        "schema versions": ", ".join(num_text(v) for v in versions)})
    show_table(pd.DataFrame(per_dir))
    for text in res.notes:
        note(text)
