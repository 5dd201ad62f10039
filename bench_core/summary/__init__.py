"""The analysis behind notebooks/summary.ipynb: load result directories (load), tables (tables),
published figures (reference), how things are shown (html, text) and the report's sections
(speed, detail). `bench report` renders it (report).

Notebook cells only call the `show_*` functions. Every string from the data reaches the HTML
through `html.escape` or `DataFrame.to_html(escape=True)`; charts are PNG, so no text from the
data is ever pasted into markup unescaped. Results are read from CSV only (nothing unpickled).
This face re-exports the public names of those modules; inside bench_core, import from the module.
"""
from __future__ import annotations

from bench_core.summary.load import (  # noqa: F401 - re-exported
    PRECISION_ORDER, EMULATED, EMULATED_SUFFIX, MODE_ORDER, WORKLOAD, NUMERIC,
    ENVIRONMENT_FIELDS, Results, load_results, typed_rows, machine_label, config_label,
)
from bench_core.summary.tables import (  # noqa: F401 - re-exported
    KNEE_FRACTION, headline_table, peak_memory_mib, relative_speed, amp_speedup_table,
    emulation_notes, batch_curves, knee_points, scaling_table, efficiency_table, noise_table,
    failures_table, environment_table, method_settings, timer_name, step_times_long,
)
from bench_core.summary.reference import (  # noqa: F401 - re-exported
    load_reference, gpu_matches, reference_matches, reference_scaling, matched_reference_scaling,
)
from bench_core.summary.text import (  # noqa: F401 - re-exported
    wrap_text, num_text, int_text, is_number, is_present, short_list,
)
from bench_core.summary.html import (  # noqa: F401 - re-exported
    DISPLAY_DPI, PIXEL_RATIO, NUMBER_CELL, TEXT_CELL, esc, display_obj, show_html, note,
    paragraph, table_html, cell_text, show_table, show_figure, section, plot_style, chart_rows,
    label_columns, columns_for, device_names, date_range, ordered, sort_table, drop_constant,
    plain_log_ticks, rotate_ticks,
)
from bench_core.summary.speed import (  # noqa: F401 - re-exported
    show_overview, show_headline, show_relative_speed, show_throughput, show_amp_speedup,
    show_batch_curves, show_memory,
)
from bench_core.summary.detail import (  # noqa: F401 - re-exported
    show_step_times, show_scaling, show_efficiency, show_references, show_failures,
    show_environment, show_method_settings,
)
