"""What every `bench` subcommand shares: one-line errors, the BenchConfig flags, output flags, colour, row printing.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Callable

from bench_core.config.schema import BenchConfig, load_yaml_mapping
from bench_core.errors import EXIT_BAD_INPUT, ConfigError
from bench_core.files import atomic_write_text, save_fallback
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

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def config_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


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


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    values = load_yaml_mapping(args.config_file, "config") if args.config_file else {}
    for name in BenchConfig.field_names():
        if getattr(args, name, None) is not None:
            values[name] = getattr(args, name)
    return BenchConfig.from_dict(values)


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print rows as JSON (for scripts)")
    level = p.add_mutually_exclusive_group()
    level.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    level.add_argument("-v", "--verbose", action="store_true",
                       help="also print the environment, memory, FLOPs and noise flags of the run")


def paint(text: str, colour: str, stream=None) -> str:
    """ANSI colour only on a terminal, and never when NO_COLOR is set."""
    import os
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR") or not getattr(stream, "isatty", lambda: False)():
        return text
    code = {"green": "32", "red": "31", "yellow": "33", "bold": "1"}[colour]
    return f"\033[{code}m{text}\033[0m"


def format_details(row: dict) -> str:
    keys = ["device_name", "threads", "torch_version", "cuda_version", "cudnn_version", "driver_version",
            "git_commit", "tf32_enabled", "cudnn_benchmark_enabled", "peak_mem_allocated_bytes",
            "peak_mem_reserved_bytes", "peak_rss_bytes", "flops_per_sample", "achieved_tflops", "peak_tflops",
            "peak_source", "mfu", "energy_j", "telemetry_note", "noise_flags", "config_hash", "run_id"]
    return "\n".join(f"  {k}: {row.get(k)}" for k in keys if row.get(k) not in (None, ""))


def format_rows(rows: list[dict]) -> str:
    """Per-repeat table plus the median line, the way a person reads a benchmark."""
    import pandas as pd
    table = pd.DataFrame(rows)
    ok = table[table["status"] == "ok"]
    searched = " (batch_size max: found by search)" if rows[0].get("batch_size_requested") == "max" else ""
    head = (f"{rows[0]['model']} {rows[0]['mode']} {rows[0]['precision']} batch {rows[0]['batch_size']}{searched}"
            f" x{rows[0].get('world_size') or 1} on {rows[0].get('device_name') or rows[0]['device']}")
    if ok.empty:
        return head + "\n" + "\n".join(f"  repeat {r['repeat']}: {r['status']}: {r['message']}" for r in rows)
    cols = {"repeat": "repeat", "status": "status", "samples_per_s": "samples/s", "batches_per_s": "batches/s",
            "step_time_ms_median": "step ms (median)", "step_time_ms_p5": "p5", "step_time_ms_p95": "p95",
            "step_time_cv": "CV", "timed_steps": "steps", "timed_s": "window s"}
    if ok["mvox_per_s"].notna().any():
        cols["mvox_per_s"] = "MVox/s"
    else:
        cols["mpx_per_s"] = "MPx/s"
    shown = table[list(cols)].rename(columns=cols)
    median = ok[[c for c in cols if c not in ("repeat", "status")]].median(numeric_only=True)
    median_row = {cols[k]: v for k, v in median.items()}
    median_row.update({"repeat": "median", "status": f"{len(ok)}/{len(table)} ok"})
    shown = pd.concat([shown.astype(object), pd.DataFrame([median_row])], ignore_index=True)
    extras = [f"first step {rows[0]['first_step_ms']:.1f} ms" if rows[0].get("first_step_ms") else ""]
    if rows[0].get("compile_s"):
        extras.append(f"compile {rows[0]['compile_s']:.1f} s")
    mem = rows[0].get("peak_mem_allocated_bytes") or rows[0].get("peak_rss_bytes")
    if mem:
        extras.append(f"peak memory {mem / 2**20:.0f} MiB")
    if rows[0].get("batch_search"):
        extras.append(rows[0]["batch_search"])
    return head + "\n" + shown.to_string(index=False, float_format=lambda v: f"{v:.4g}") + "\n" + \
        ", ".join(e for e in extras if e)


def one_line_warnings(command: str, default):
    """Our own warnings (an emulated precision) as one line on stderr, like the errors."""

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, EmulatedPrecisionWarning):
            print(paint(f"bench {command}: warning: {message}", "yellow", sys.stderr), file=sys.stderr, flush=True)
        else:
            default(message, category, filename, lineno, file, line)
    return show
