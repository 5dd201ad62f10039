"""What every `bench` subcommand shares: one-line errors (with the fix a typo meant), the BenchConfig flags,
output flags, colour, row printing, tables and lines that fit the terminal.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import difflib
import json
import os
import re
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Callable

from bench_core.config.mistakes import Mistakes
from bench_core.config.schema import FIELD_CHECKS, MODES, BenchConfig
from bench_core.results.keys import load_text
from bench_core.config.sweepfile import SELECTOR_KEYS, SWEEP_KEYS
from bench_core.config.yamlfile import load_yaml_mapping
from bench_core.errors import EXIT_BAD_INPUT, ConfigError
from bench_core.files import atomic_write_text, save_fallback
from bench_core.results.bound import bound_note
from bench_core.results.disturbed import disturbances, disturbed_note
from bench_core.results.fidelity import deviation_text
from bench_core.run.estimate import LongStepWarning
from bench_core.workload.models import models_taking
from bench_core.workload.precision import EmulatedPrecisionWarning


def refuse_flags(args, names: tuple[str, ...], why: str) -> None:
    for name in names:
        if getattr(args, name, None) is not None:
            raise ConfigError(name, why)


def progress_printer(args) -> Callable[[str], None] | None:
    return None if args.quiet or args.json else (lambda msg: print(msg, file=sys.stderr, flush=True))


def note_line(args, message: str) -> None:
    if not args.json:
        print(message, file=sys.stderr)


def write_json(folder: Path, cfg: BenchConfig, data: dict) -> Path:
    """A command's result as DIR/<stamp>-<hash>.json; if that cannot be written after measuring
    (a full disk), under the temporary directory instead, with one line saying where."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    path = folder / f"{stamp}-{cfg.config_hash()}.json"
    text = json.dumps(data, indent=1, default=str)
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        path = save_fallback(path.name, text)
        print(f"error: could not write {folder}: {exc.strerror or exc}; the result is safe in {path}", file=sys.stderr)
    return path


EXAMPLES = """examples:
  bench run --model resnet50 --mode train --precision amp-bf16 --batch-size 32 --out outputs/quick
  bench run --model resnet18 --width 64 --height 64 --device cpu --steps 10
  bench models
  bench sweep params/cpu-quick.yaml --out outputs/cpu-quick
  bench report outputs/cpu-quick outputs/other-machine
"""


class OneLineParser(argparse.ArgumentParser):
    """Bad flags end in one line naming the problem, exit 2 (no usage dump)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A value such as -5% or -1e3 is a value, not a flag (argparse knows only -5 and -.5 as numbers): so
        # `--fail-above -5%` reaches its check, which says what is allowed, not "expected one argument".
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?%?$")

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def closest(word: str, allowed: list[str]) -> list[str]:
    """What a typo most likely meant (difflib; argparse suggests only from Python 3.14): the best
    match and any nearly as good (--modle: --mode or --model)."""
    scores = {w: difflib.SequenceMatcher(None, word, w).ratio() for w in allowed}
    best = max(scores.values(), default=0.0)
    return [w for w in sorted(scores, key=scores.get, reverse=True) if scores[w] >= max(0.6, best - 0.1)][:3]


def unknown_command(word: str, commands: list[str]) -> str:
    """`bench rn`, or `bench params/x.yaml`: what was meant, if it can be told."""
    if sweep_file(word):
        return f"{word} is a sweep file: run `bench sweep {word}`"
    guesses = closest(word, commands)
    if guesses:
        return f"unknown command {word!r}; did you mean {' or '.join(f'`bench {g}`' for g in guesses)}?"
    return f"unknown command {word!r}; commands: {', '.join(commands)}"


def unrecognized(parser: argparse.ArgumentParser, unknown: list[str], command: str | None) -> str:
    """The line for arguments a command does not take, with the fix when it can be told: the flag a
    typo meant (--batchsize: --batch-size), or `bench sweep` for a sweep file given to another command."""
    for arg in unknown:
        if sweep_file(arg):
            if command in ("sweep", "slurm"):  # a second FILE: one sweep a command
                return f"bench {command} takes one sweep file; {arg} is a second: run it in a command of its own"
            return f"{arg} is a sweep file: run `bench sweep {arg}`"
        if arg.endswith((".yaml", ".yml")) and any(a.dest == "config_file" for a in parser._actions):
            return f"a file of settings goes after --config: `bench {command} --config {arg}`"
    flags = [s for action in parser._actions for s in action.option_strings if s.startswith("--")]
    typos = {arg.split("=")[0]: closest(arg.split("=")[0], flags) for arg in unknown if arg.startswith("--")}
    guesses = [(typo, " or ".join(found)) for typo, found in typos.items() if found]
    hint = ""
    if len(guesses) == 1:
        hint = f"; did you mean {guesses[0][1]}?"
    elif guesses:
        hint = "; did you mean " + ", ".join(f"{found} for {typo}" for typo, found in guesses) + "?"
    return f"unrecognized arguments: {' '.join(unknown)}{hint}"


# Keys only a sweep file (or a selector such as params/default.yaml) has: a file with one of them
# given to a command that runs one configuration was meant for `bench sweep`.
SWEEP_ONLY_KEYS = (set(SWEEP_KEYS) | set(SELECTOR_KEYS)) - set(BenchConfig.field_names()) - {"name", "description"}


def sweep_file(arg: str) -> bool:
    """Whether `arg` names a readable YAML file that is a sweep file."""
    path = Path(arg)
    if path.suffix.lower() not in (".yaml", ".yml") or not path.is_file():
        return False
    try:
        data = load_yaml_mapping(path)
    except ConfigError:
        return False
    return bool(SWEEP_ONLY_KEYS & set(data))


def config_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_price_argument(p: argparse.ArgumentParser, what: str = "the cost per million items") -> None:
    """--price NAME=PRICE (bench predict, bench report): one GPU's price per hour, read by
    bench_core.predict.prices.parse_prices, over the shipped on-demand prices."""
    p.add_argument("--price", action="append", default=[], metavar="NAME=PRICE",
                   help=f"what one GPU costs an hour, for {what} (repeatable; NAME=PRICE or NAME=PRICE:EUR, "
                        "default currency USD); default: the on-demand price in bench_core/data/gpu_prices.csv, "
                        "with its provider and date (prices change)")


def add_config_arguments(parser: argparse.ArgumentParser, unused: tuple[str, ...] = ()) -> None:
    """One flag per BenchConfig field. Values stay text: BenchConfig validates them. An enumerated
    field shows its choices; each default is said once. A flag not given is absent from args, so
    the config file or the default stands. `unused` fields are left out of --help (the command
    refuses them with its reason: see refuse_flags)."""
    group = parser.add_argument_group("benchmark configuration (BenchConfig fields)")
    for f in dataclasses.fields(BenchConfig):
        help_text = f.metadata["help"]
        if f.default is not None and "default" not in help_text:
            help_text += f" (default: {f.default})"
        help_text = argparse.SUPPRESS if f.name in unused else help_text.replace("%", "%%")
        if f.type in ("bool", bool):  # argparse adds no default of its own to a suppressed one
            group.add_argument(config_flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction,
                               default=argparse.SUPPRESS, help=help_text)
            continue
        choices = f.metadata.get("choices")
        metavar = "{" + ",".join(choices) + "}" if choices else f.name.upper()
        group.add_argument(config_flag(f.name), dest=f.name, default=argparse.SUPPRESS, metavar=metavar,
                           help=help_text)
    group.add_argument("--config", dest="config_file", metavar="FILE",
                       help="YAML file of BenchConfig fields; flags given on the command line win")


def config_values(args: argparse.Namespace) -> dict:
    """The BenchConfig fields a command line gives: its --config file's, then its flags' (which win)."""
    if args.config_file is not None and not args.config_file.strip():
        raise ConfigError("config", "must be a YAML file's path, got ''")
    values = load_yaml_mapping(args.config_file, "config") if args.config_file else {}
    if SWEEP_ONLY_KEYS & set(values):
        how = f"bench {'slurm' if getattr(args, 'command', None) == 'slurm' else 'sweep'} {args.config_file}"
        raise ConfigError("config", f"{args.config_file} is a sweep file (a grid of configurations), not the "
                                    f"settings of one: run `{how}`")
    found = Mistakes()
    for name in BenchConfig.field_names():
        if getattr(args, name, None) is not None:
            if name in values and name in FIELD_CHECKS:  # the file's value is wrong even where a flag wins over it
                with found.kept():
                    FIELD_CHECKS[name](values[name])
            values[name] = getattr(args, name)
    found.raise_any(f"the --config file {args.config_file}")
    return values


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    values = config_values(args)
    try:
        return BenchConfig.from_dict(values)
    except ConfigError as exc:
        mode = values.get("mode")
        if exc.field != "mode" or "model" in values or mode not in MODES:
            raise
        # `bench ladder` alone: the user named no model, so a refusal of the default one says that it was taken
        default = BenchConfig.__dataclass_fields__["model"].default
        raise ConfigError("model", f"none given, so the default ({default}) was taken, and mode {mode} does not "
                                   f"apply to it; give --model: models that run mode {mode}: "
                                   f"{', '.join(models_taking(mode))} (bench models lists them all)") from None


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print rows as JSON (for scripts)")
    level = p.add_mutually_exclusive_group()
    level.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    level.add_argument("-v", "--verbose", action="store_true",
                       help="also print the environment, memory, FLOPs and noise flags of the run")


def paint(text: str, colour: str, stream=None) -> str:
    """ANSI colour only on a terminal, and never when NO_COLOR is set."""
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR") or not getattr(stream, "isatty", lambda: False)():
        return text
    code = {"green": "32", "red": "31", "yellow": "33", "bold": "1"}[colour]
    return f"\033[{code}m{text}\033[0m"


def format_details(row: dict) -> str:
    keys = ["device_name", "threads", "torch_version", "cuda_version", "cudnn_version", "driver_version",
            "git_commit", "tf32_enabled", "cudnn_benchmark_enabled", "peak_mem_allocated_bytes",
            "peak_mem_reserved_bytes", "peak_rss_bytes", "flops_per_sample", "achieved_tflops", "peak_tflops",
            "peak_source", "mfu", "energy_j", "power_limit_w", "gpu_busy", "gpu_busy_method", "telemetry_note",
            "noise_flags", "config_hash", "run_id"]
    shown = {k: str(row[k]).replace(";", "; ") if k == "noise_flags" else row[k] for k in keys
             if row.get(k) not in (None, "")}
    return "\n".join(f"  {k}: {v}" for k, v in shown.items())


def format_rows(rows: list[dict]) -> str:
    """Per-repeat table plus the median line, the way a person reads a benchmark."""
    first, serve = rows[0], rows[0]["mode"] == "serve"
    searched = " (batch_size max: found by search)" if first.get("batch_size_requested") == "max" else ""
    # A serving point has a load, not a batch: the users in a closed loop or the request rate.
    load = serve_load(first) if serve else f"batch {first['batch_size']}{searched} x{first.get('world_size') or 1}"
    emulated = (f" (EMULATED: {first['precision']} runs in software on this {first.get('device_type') or 'device'}: not "
                "what a GPU would show)") if first.get("precision_support") == "emulated" else ""
    head = (f"{first['model']} {first['mode']} {first['precision']}{emulated} {load} on "
            f"{first.get('device_name') or first['device']}")
    if not any(r["status"] == "ok" for r in rows):  # no figure to tabulate (and no pandas to import: 0.8 s)
        return head + "\n" + "\n".join(f"  repeat {r['repeat']}: {r['status']}: {r['message']}"
                                        for r in rows)
    import pandas as pd
    table = pd.DataFrame(rows)
    if "embedding_bytes_per_s" in table:
        table["embedding_gb_per_s"] = pd.to_numeric(table["embedding_bytes_per_s"]) / 1e9
    ok = table[table["status"] == "ok"]
    if serve:  # the figures serving is about; a serve row has no steps, batches or step times
        cols = {"repeat": "repeat", "status": "status", "requests_per_s": "requests/s",
                "output_tokens_per_s": "output tok/s", "ttft_ms_p50": "TTFT p50 ms", "ttft_ms_p99": "TTFT p99 ms",
                "tpot_ms_p50": "TPOT p50 ms", "tpot_ms_p99": "TPOT p99 ms", "request_errors": "errors",
                "slo_met": "SLO met"}
        cols = {k: v for k, v in cols.items() if k in table and (k in ("repeat", "status") or ok[k].notna().any())}
        table["slo_met"] = table.get("slo_met", pd.Series(dtype=object)).map(
            lambda v: "yes" if v is True else "no" if v is False else "-")
    else:
        samples = first.get("sample_unit") or "samples/s"
        cols = {"repeat": "repeat", "status": "status", "samples_per_s": samples, "batches_per_s": "batches/s",
                "step_time_ms_median": "step ms (median)", "step_time_ms_p5": "p5", "step_time_ms_p95": "p95",
                "step_time_cv": "CV", "timed_steps": "steps", "timed_s": "window s"}
        # The task's own rates, where it has them: tokens/s (and generate's phases), audio s/s, a diffusion
        # model's images/s at its denoising steps, MVox/s, MPx/s, embedding GB/s.
        extra = {"tokens_per_s": "tokens/s", "ttft_ms_median": "TTFT ms", "decode_tokens_per_s": "decode tok/s",
                 "itl_ms_median": "ITL ms", "audio_s_per_s": "audio s/s", "images_per_s": "images/s",
                 "mvox_per_s": "MVox/s", "mpx_per_s": "MPx/s", "embedding_gb_per_s": "embedding GB/s",
                 "gpu_busy": "GPU busy"}  # the GPU's kernel time / the step: below 0.5, host-bound (the last line)
        cols.update({k: v for k, v in extra.items() if k in ok and ok[k].notna().any()})
    flags = table["noise_flags"].map(disturbances) if "noise_flags" in table else pd.Series("", index=table.index)
    if flags.astype(bool).any():  # a disturbed figure is marked where it is shown, not only with -v
        table["disturbed"] = ["DISTURBED: " + f if f else "-" for f in flags]
        cols["disturbed"] = "disturbed by"
    shown = table[list(cols)].rename(columns=cols)
    median = ok[[c for c in cols if c not in ("repeat", "status", "disturbed")]].median(numeric_only=True)
    median_row = {cols[k]: v for k, v in median.items()}
    median_row.update({"repeat": "median", "status": f"{len(ok)}/{len(table)} ok"})
    if serve and "slo_met" in cols:
        median_row[cols["slo_met"]] = f"{(ok['slo_met'] == True).sum()}/{len(ok)}"  # noqa: E712 - a column of bools
    if "disturbed" in cols:
        median_row[cols["disturbed"]] = f"{int(flags.astype(bool).sum())} of {len(table)} disturbed"
    shown = pd.concat([shown.astype(object), pd.DataFrame([median_row])], ignore_index=True)
    extras = [f"first step {rows[0]['first_step_ms']:.1f} ms" if rows[0].get("first_step_ms") else ""]
    if rows[0].get("compile_s"):
        extras.append(f"compile {rows[0]['compile_s']:.1f} s")
    mem = rows[0].get("peak_mem_allocated_bytes") or rows[0].get("peak_rss_bytes")
    if mem:
        extras.append(f"peak memory {mem / 2**20:.0f} MiB")
    if rows[0].get("kv_cache_bytes"):
        extras.append(f"KV cache {rows[0]['kv_cache_bytes'] / 2**20:.3g} MiB")
    if rows[0].get("embedding_table_bytes"):
        extras.append(f"embedding tables {rows[0]['embedding_table_bytes'] / 2**30:.3g} GiB")
    if rows[0].get("batch_search"):
        extras.append(rows[0]["batch_search"])
    why = f"\nnote: {rows[0]['precision_note']}" if rows[0].get("precision_note") else ""  # an eager fp8 row's slowness
    return head + "\n" + fitted_table(shown, terminal_width()) + "\n" + ", ".join(e for e in extras if e) + why


def serve_load(row: dict) -> str:
    """'8 users', '2.5 requests/s', or both ('2.5 requests/s, at most 16 in flight'); with neither, one request
    at a time."""
    return load_text(row) or "one request at a time"


def fitted_table(table, width: int | None) -> str:
    """A table as text no wider than `width`: past it, the columns continue in a block below, each
    block with its header and the first column (which row), so no column is shown without its
    header (a terminal folding a wide line put the tail of each row under the next one)."""
    def text(frame) -> str:
        return frame.to_string(index=False, float_format=lambda v: f"{v:.4g}")
    lines = text(table).splitlines()
    if width is None or max(len(line) for line in lines) <= width:
        return "\n".join(lines)
    blocks, columns = [], list(table.columns[1:])
    while columns:
        take = 1
        while take < len(columns) and max(map(len, text(table[[table.columns[0], *columns[:take + 1]]]).splitlines())) <= width:
            take += 1
        blocks.append(text(table[[table.columns[0], *columns[:take]]]))
        columns = columns[take:]
    return "\n\n".join(blocks)


def run_summary(rows: list[dict]) -> str:
    """bench run's last line: '2/2 rows ok', '2/2 rows ok, 2 disturbed (other-processes-on-cpu): re-measure
    on a quiet machine', what bound the rows ('2 host-bound (gpu busy 17%): the host ... set the step's pace, not
    the GPU') and what the output check found ('; outputs within 0.79 % of fp32 eager NCHW')."""
    line = f"{sum(r['status'] == 'ok' for r in rows)}/{len(rows)} rows ok"
    note, bound = disturbed_note(rows), bound_note(rows)
    # The check runs before the warm-up: a run stopped before any repeat finished measured nothing to vouch for.
    checked = deviation_text(rows[0]) if any(r["status"] == "ok" for r in rows) else ""
    return line + (f", {note}" if note else "") + (f", {bound}" if bound else "") + (f"; {checked}" if checked else "")


def terminal_width() -> int | None:
    """Columns to fit: $COLUMNS, else the terminal's width; None (no limit) when the output is not a
    terminal, so a file or a pipe gets whole lines."""
    if not os.environ.get("COLUMNS") and not sys.stdout.isatty():
        return None
    return max(40, shutil.get_terminal_size().columns)


def wrap_line(text: str, indent: int, width: int | None = None) -> str:
    """A long line folded to the terminal width; the lines after the first start `indent` columns in."""
    width = width or terminal_width()
    if not width:
        return text
    return textwrap.fill(text, width, subsequent_indent=" " * indent, break_long_words=False,
                         break_on_hyphens=False) or text


def text_table(rows: list[dict], width: int | None = None, prose: tuple[str, ...] | None = None) -> str:
    """Rows as aligned columns (whatever keys they have), text left and numbers right. When that is
    wider than the terminal, the columns of prose (`prose`, or else text with spaces, such as notes),
    then the last columns until the rest fits, leave the table and follow each row on a line of their
    own ("source: timm · notes: ..."), folded to the width."""
    if not rows:
        return ""
    width = width or terminal_width()
    keys = list(rows[0])
    text = {k: ["" if r.get(k) is None else str(r.get(k)) for r in rows] for k in keys}
    columns = keys
    if width and aligned_width({k: text[k] for k in keys}) > width:
        columns = [k for k in keys if (k not in prose if prose is not None else not any(" " in v for v in text[k]))]
        columns = columns or keys[:1]
        while len(columns) > 1 and aligned_width({k: text[k] for k in columns}) > width:
            columns = columns[:-1]
    below = [k for k in keys if k not in columns]
    widths = {k: max(len(k), *(len(v) for v in text[k])) for k in columns}
    numeric = {k: all(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool) for r in rows)
               for k in columns}

    def line(values: dict) -> str:
        return "  ".join(values[k].rjust(widths[k]) if numeric[k] else values[k].ljust(widths[k])
                         for k in columns).rstrip()

    lines = [line({k: k for k in columns})]
    for n in range(len(rows)):
        lines.append(line({k: text[k][n] for k in columns}))
        extra = " · ".join(f"{k}: {text[k][n]}" for k in below if text[k][n])
        if extra:
            lines.append(wrap_line("    " + extra, indent=6, width=width))
    return "\n".join(lines)


def aligned_width(text: dict[str, list[str]]) -> int:
    return sum(max(len(k), *(len(v) for v in values)) for k, values in text.items()) + 2 * (len(text) - 1)


def one_line_warnings(command: str, default):
    """Our own warnings (an emulated precision, a warm-up far beyond a run's budget) as one line on
    stderr, like the errors."""

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, (EmulatedPrecisionWarning, LongStepWarning)):
            print(paint(f"bench {command}: warning: {message}", "yellow", sys.stderr), file=sys.stderr, flush=True)
        else:
            default(message, category, filename, lineno, file, line)
    return show
