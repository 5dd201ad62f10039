"""`bench compare`: run two variants interleaved and print the verdict.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench_core import results
from bench_core.cli.common import (
    config_from_args,
    note_line,
    progress_printer,
    write_json,
)
from bench_core.cli.compare_flags import check_compare
from bench_core.config.schema import BenchConfig
from bench_core.config.yamlfile import load_yaml_mapping
from bench_core.devices import check_runnable
from bench_core.files import check_writable
from bench_core.results.comparison import DISTURBED
from bench_core.scenarios.compare import compare, pair_compile, parse_overrides


def main(args: argparse.Namespace) -> int:
    check_compare(args)  # (again: main may be called without the dispatcher)
    base = config_from_args(args)
    over_a, over_b = parse_overrides(args.a, "--a"), parse_overrides(args.b, "--b")
    given = _compile_given(args, over_a, over_b)
    # Not given, compile is each variant's precision's default (fp8 compiles), not what the shared part resolved to.
    shared = {k: v for k, v in base.to_dict().items() if k != "compile" or given}
    cfg_a, cfg_b, paired = pair_compile(BenchConfig.from_dict({**shared, **over_a}),
                                        BenchConfig.from_dict({**shared, **over_b}), given)
    for cfg in (cfg_a, cfg_b):
        check_runnable(cfg)
    labels = tuple(" ".join(f"{k}={v}" for k, v in over.items()) or "as configured" for over in (over_a, over_b))
    if paired:  # before the run: the user sees at once what runs
        note_line(args, f"bench compare: {paired}")
    if args.out:
        check_writable(args.out)
    result = compare(cfg_a, cfg_b, rounds=args.rounds, tolerance=args.tolerance, labels=labels,
                     progress=progress_printer(args))
    if args.out:
        for rows in (result.rows_a, result.rows_b):
            if rows:
                results.write_run(args.out, rows[0]["run_id"], rows)
        path = write_json(Path(args.out) / "compare", cfg_b, result.to_dict())
        note_line(args, f"comparison written to {path}; rows under {Path(args.out) / 'runs'}")
    print(json.dumps(result.to_dict(), indent=1, default=str) if args.json else result.format())
    if over_a == over_b:  # no --a/--b (or the same): a legitimate A/A run, but say what it measured
        note_line(args, "bench compare: A and B were the same configuration: an A/A run, whose verdict is this "
                        "machine's noise (give --a KEY=VALUE and --b KEY=VALUE to compare two variants)")
    if result.verdict == DISTURBED:
        print(f"bench compare: disturbed: not judged, re-measure on a quiet machine ({result.reason})", file=sys.stderr)
    return result.exit_status


def _compile_given(args: argparse.Namespace, *overrides: dict) -> bool:
    """Whether compile was set anywhere: a flag, the config file, --a or --b."""
    in_file = bool(args.config_file) and "compile" in load_yaml_mapping(args.config_file, "config")
    return getattr(args, "compile", None) is not None or in_file or any("compile" in over for over in overrides)
