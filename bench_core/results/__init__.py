"""Result rows: the column schema and how a row is made (rows.py), what makes rows one configuration
(keys.py), the store of an output folder (store.py) and what a row read back from it may hold (row_check.py).
Beside results.csv, one line per configuration in summary.csv and one per machine in machines.csv (config_summary.py).

This face re-exports what callers use; inside bench_core, import from the module itself.
"""
from __future__ import annotations

from bench_core.files import (  # noqa: F401 - re-exported
    atomic_write_text,
    locked,
)
from bench_core.results.config_summary import (  # noqa: F401 - re-exported
    MACHINE_COLUMNS,
    SUMMARY_COLUMNS,
    summary_lines,
)
from bench_core.results.keys import (  # noqa: F401 - re-exported
    WORKLOAD,
    load_text,
    machine_kind,
    machine_label,
)
from bench_core.results.rows import (  # noqa: F401 - re-exported
    SCHEMA_VERSION,
    STATUSES,
    columns,
    error_message,
    first_line,
    make_row,
    schema,
)
from bench_core.results.store import (  # noqa: F401 - re-exported
    csv_text,
    damaged_runs,
    dumps_rows,
    iter_rows,
    read_run,
    rebuild_csv,
    record_rows,
    write_run,
)
