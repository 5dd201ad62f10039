"""The analysis behind notebooks/summary.ipynb: load result directories (load), tables (tables),
published figures (reference), how things are shown (html, charts, text) and the report's sections
(front: title and overview; speed, detail; kinds: this kind of machine or that). `bench report` renders it (report); `bench diff`
compares two directories (diff).

Notebook cells only call the `show_*` functions (and `init_tables` once). Every string from the
data reaches the HTML through `html.escape`, or through itables with allow_html off (it escapes
every cell and header); charts are images, so no text from the data is ever pasted into markup
unescaped. Results are read from CSV only (nothing unpickled).
This face re-exports the public names of those modules; inside bench_core, import from the module.
"""
from __future__ import annotations

from bench_core.summary.cost import (  # noqa: F401 - re-exported
    cost_points,
    picks_table,
    show_cost_frontier,
)
from bench_core.summary.detail import (  # noqa: F401 - re-exported
    show_efficiency,
    show_environment,
    show_failures,
    show_method_settings,
    show_references,
    show_scaling,
    show_step_times,
)
from bench_core.summary.diff import (  # noqa: F401 - re-exported
    ResultsDiff,
    diff_results,
)
from bench_core.summary.serving import (  # noqa: F401 - re-exported
    serving_points,
    show_serving,
    slo_answers,
)
from bench_core.summary.effects import (  # noqa: F401 - re-exported
    compare_variants,
    settings_effects,
    verdict_summary,
)
from bench_core.summary.front import (  # noqa: F401 - re-exported
    machine_text,
    show_overview,
    show_title,
)
from bench_core.summary.html import (  # noqa: F401 - re-exported
    DEFAULT_TITLE,
    DISPLAY_DPI,
    NUMBER_CELL,
    PIXEL_RATIO,
    TABLE_PAGE_ROWS,
    TEXT_CELL,
    cell_text,
    chart_rows,
    columns_for,
    datatable_html,
    date_range,
    device_names,
    display_obj,
    drop_constant,
    esc,
    init_tables,
    label_columns,
    note,
    ordered,
    paragraph,
    plot_style,
    section,
    show_figure,
    show_html,
    show_table,
    sort_table,
    table_html,
)
from bench_core.summary.figures import vector_charts  # noqa: F401 - re-exported
from bench_core.summary.kinds import (  # noqa: F401 - re-exported
    instance_spread,
    kind_comparison,
    kind_prices,
    show_kinds,
)
from bench_core.summary.load import (  # noqa: F401 - re-exported
    EMULATED,
    EMULATED_SUFFIX,
    ENVIRONMENT_FIELDS,
    MODE_ORDER,
    NUMERIC,
    PRECISION_ORDER,
    WORKLOAD,
    Results,
    config_label,
    dir_names,
    load_results,
    machine_label,
    newest_result_dir,
    typed_rows,
)
from bench_core.summary.reference import (  # noqa: F401 - re-exported
    gpu_matches,
    load_reference,
    matched_reference_scaling,
    reference_matches,
    reference_scaling,
)
from bench_core.summary.sequences import (  # noqa: F401 - re-exported
    generation_table,
    sequence_table,
    show_sequences,
)
from bench_core.summary.speed import (  # noqa: F401 - re-exported
    show_amp_speedup,
    show_batch_curves,
    show_headline,
    show_memory,
    show_relative_speed,
    show_settings_effects,
    show_throughput,
)
from bench_core.summary.tables import (  # noqa: F401 - re-exported
    KNEE_FRACTION,
    amp_speedup_table,
    batch_curves,
    efficiency_table,
    efficiency_text,
    emulation_notes,
    environment_table,
    failures_table,
    headline_table,
    knee_points,
    machines_table,
    method_settings,
    noise_table,
    relative_speed,
    scaling_table,
    step_times_long,
    timer_name,
)
from bench_core.summary.text import (  # noqa: F401 - re-exported
    int_text,
    is_number,
    is_present,
    num_text,
    short_list,
    wrap_text,
)
