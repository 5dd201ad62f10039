"""The `bench` command. Each subcommand's module gives `add_arguments(parser)` and `main(args)`.

Exit codes: 0 all rows ok; 1 a run or configuration failed (its rows are written); 2 bad
input (one line on stderr, nothing written).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
import warnings

from bench_core import __version__
from bench_core.config import BenchConfig, ConfigError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

# name -> (module, one-line help). Modules are imported when their command runs.
COMMANDS = {
    "run": ("bench_core.cli", "run one benchmark configuration (train or infer) and print its rows"),
    "models": ("bench_core.cli", "list every model: name, task, default input, notes"),
    "sysinfo": ("bench_core.cli", "print the environment fingerprint and which precisions run natively"),
    "sweep": ("bench_core.sweep", "run a params/*.yaml sweep through the notebook template (papermill)"),
    "report": ("bench_core.report", "render the summary notebook and HTML report of result directories"),
    "slurm": ("bench_core.slurm", "submit a sweep or run to SLURM through submitit"),
    "peak": ("bench_core.flops", "measure this CPU's peak FLOP/s per precision (for MFU), cached per machine"),
    "find-batch": ("bench_core.capacity", "find the largest per-device batch size that fits"),
    "compare": ("bench_core.capacity", "run two variants interleaved (A B A B) and give a verdict"),
    "selftest": ("bench_core.selftest", "check this machine's GPU (or CPU) paths with tiny runs: a pass/fail checklist"),
}

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


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per BenchConfig field. Values stay text: BenchConfig validates them."""
    group = parser.add_argument_group("benchmark configuration (BenchConfig fields)")
    for f in dataclasses.fields(BenchConfig):
        help_text = f"{f.metadata['help']} (default: {f.default})"
        if f.type in ("bool", bool):
            group.add_argument(config_flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction,
                               default=None, help=help_text)
        else:
            group.add_argument(config_flag(f.name), dest=f.name, default=None, metavar=f.name.upper(),
                               help=help_text)
    group.add_argument("--config", dest="config_file", metavar="FILE",
                       help="YAML file of BenchConfig fields; flags given on the command line win")


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    from bench_core.config import load_yaml_mapping
    values = load_yaml_mapping(args.config_file, "config") if args.config_file else {}
    for name in BenchConfig.field_names():
        if getattr(args, name, None) is not None:
            values[name] = getattr(args, name)
    return BenchConfig.from_dict(values)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="bench", description="notebook-bench: honest deep-learning training and "
                           "inference benchmarks on synthetic data.", epilog=EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"notebook-bench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        adder = getattr(module, f"add_{name.replace('-', '_')}_arguments", None) or module.add_arguments
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        adder(p)
        p.set_defaults(handler=getattr(module, f"main_{name.replace('-', '_')}", None) or module.main)
    return parser


# -- run ------------------------------------------------------------------------------

def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """examples:
  bench run --model resnet50 --mode train --precision amp-bf16 --batch-size 32 \\
            --width 224 --height 224 --steps 50 --warmup-steps 10 --repeats 3 --device cuda --out outputs/quick
  bench run --model unet3d --depth 32 --width 64 --height 64 --mode infer --device cpu
  bench run --model resnet50 --precision amp-bf16 --batch-size 256 --nproc-per-node 8
exit status: 0 all rows ok, 1 a row failed (oom, nan, error, unsupported), 2 bad input."""
    add_config_arguments(p)
    p.add_argument("--out", metavar="DIR", help="append rows to DIR/results.csv and DIR/runs/<run_id>/rows.json")
    add_output_arguments(p)


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


def main_run(args: argparse.Namespace) -> int:
    from bench_core import results
    from bench_core.devices import check_runnable
    from bench_core.runner import run_benchmark

    cfg = config_from_args(args)
    check_runnable(cfg)  # absent devices, too many processes, impossible precision: bad input
    if cfg.profile and args.out:  # profiles next to the rows
        import os
        from pathlib import Path
        os.environ.setdefault("BENCH_PROFILE_DIR", str(Path(args.out) / "profiles"))
    progress = None if args.quiet or args.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    rows = run_benchmark(cfg, progress=progress)
    if not rows:  # a node other than node 0 of a multi-node run: node 0 returns and writes the rows
        print(f"node {cfg.node_rank}: done; node 0 reports the combined result", file=sys.stderr)
        return EXIT_OK
    if args.out and rows:
        path = results.write_run(args.out, rows[0]["run_id"], rows)
        if not args.json:
            print(f"rows written to {path} and {path.parents[2] / 'results.csv'}", file=sys.stderr)
    ok = bool(rows) and all(r["status"] == "ok" for r in rows)
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
    else:
        print(format_rows(rows))
        if args.verbose:
            print(format_details(rows[0]))
        print(paint(f"{sum(r['status'] == 'ok' for r in rows)}/{len(rows)} rows ok", "green" if ok else "red"))
    return EXIT_OK if ok else EXIT_FAILED


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


# -- models / sysinfo -----------------------------------------------------------------

def add_models_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print as JSON")


def main_models(args: argparse.Namespace) -> int:
    from bench_core.models import model_table
    table = model_table()
    if args.json:
        print(json.dumps(table, indent=1))
    else:
        import pandas as pd
        print(pd.DataFrame(table).to_string(index=False))
    return EXIT_OK


def add_sysinfo_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """The precision table says, per precision, whether this device runs it natively (hardware
instructions or tensor cores), emulated (it runs, slowly; rows are marked) or not at all, and why.
On a CPU, ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 shows what an AVX2-only CPU would get."""
    p.add_argument("--device", default="auto", help="also describe this device: auto, cpu, cuda, cuda:N, mps "
                   "(default: auto)")
    p.add_argument("--json", action="store_true", help="print as JSON: the fingerprint plus a 'precisions' list")


def main_sysinfo(args: argparse.Namespace) -> int:
    from bench_core import environment
    from bench_core.capability import capability_table
    from bench_core.devices import resolve_device, validate_device_name
    device = resolve_device(validate_device_name(args.device))
    info = environment.collect(device)
    table = capability_table(device)
    if args.json:
        print(json.dumps({**info, "precisions": table}, indent=1, default=str))
        return EXIT_OK
    width = max(len(k) for k in info)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in info.items() if v not in (None, "")))
    print(f"\nprecisions on {device}:")
    for line in table:
        colour = {"native": "green", "emulated": "yellow"}.get(line["support"], "red")
        level = paint(f"{line['support']:<11}", colour)
        print(f"  {line['precision']:<9} {level} {line['reason']}")
    return EXIT_OK


def _one_line(command: str, default):
    """Our own warnings (an emulated precision) as one line on stderr, like the errors."""
    from bench_core.precision import EmulatedPrecisionWarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, EmulatedPrecisionWarning):
            print(paint(f"bench {command}: warning: {message}", "yellow", sys.stderr), file=sys.stderr, flush=True)
        else:
            default(message, category, filename, lineno, file, line)
    return show


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line(args.command, warnings.showwarning)
            return args.handler(args)
    except ConfigError as exc:
        print(f"bench {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"bench {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
