"""`bench compare`: run two variants interleaved and print the verdict.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench_core import results
from bench_core.cli.common import (
    add_config_arguments,
    add_output_arguments,
    config_from_args,
    note_line,
    progress_printer,
    refuse_flags,
    write_json,
)
from bench_core.cli.diff import fraction
from bench_core.config.schema import BenchConfig
from bench_core.config.yamlfile import load_yaml_mapping
from bench_core.devices import check_runnable
from bench_core.files import check_writable
from bench_core.results.comparison import DISTURBED, MIN_EFFECT
from bench_core.scenarios.compare import compare, pair_compile, parse_overrides


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """Builds A and B once each, then alternates one timed window of each per round (AB, BA, AB, ...).
Reports B/A throughput: the geometric mean of per-round ratios with a 95% t-interval on their logs,
and a verdict: faster / slower (the CI excludes 1 and the change is at least --min-effect) or no
clear difference (the same verdicts as bench diff). The variant table's samples/s are the geometric
means over the same rounds, so their ratio is the verdict's B/A.
Disturbed: rounds where either row is flagged other-processes-on-cpu, cpu-steal, other-processes-on-device,
throttle, clock-drop or unstable-repeats are left out. Under load: where too few are left and the
rest were disturbed by other processes alone (a neighbour's job on a shared machine or CI runner, or
the hypervisor's steal of the VM's cores),
A and B shared that load round by round, and it cancels in B/A: with 4 or more such rounds whose
B/A does not move with the load (its level, or how unevenly it fell on A and B), the verdict is
given and says MEASURED UNDER LOAD (exit 0). Where B/A moves with the load, or the device
throttled, the verdict is 'disturbed: re-measure' (exit 3, as bench diff), never a speed verdict.
Wrong results: each variant other than fp32 eager NCHW is checked once, as it is built, against
fp32 eager NCHW on the same weights and inputs (cosine similarity and relative error of the forward
outputs, within its precision's tolerance: docs/reference.md); outside it the verdict is 'wrong
results' and there is no speed verdict (exit 1).
--repeats does not apply (use --rounds); --steps / --min-seconds size each window.
examples:
  bench compare --model resnet18 --width 64 --height 64 --batch-size 16 --device cpu --a compile=off --b compile=default
  bench compare --model resnet50 --precision amp-bf16 --device cuda --b channels_last=true --rounds 10 --out outputs/ab
exit status: 0 a speed verdict, 1 a variant failed or computes wrong results (rows written with
--out), 2 bad input, 3 disturbed: re-measure on a quiet machine."""
    add_config_arguments(p, unused=("repeats",))
    p.add_argument("--a", dest="a", nargs="+", action="extend", metavar="KEY=VALUE",
                   help="overrides for variant A (BenchConfig fields, e.g. compile=off)")
    p.add_argument("--b", dest="b", nargs="+", action="extend", metavar="KEY=VALUE",
                   help="overrides for variant B (e.g. compile=default or channels_last=true)")
    p.add_argument("--rounds", type=int, default=8, metavar="N", help="rounds of A and B (default 8, at least 2)")
    p.add_argument("--min-effect", "--tolerance", dest="tolerance", type=fraction, default=MIN_EFFECT,
                   metavar="FRACTION", help=f"smaller changes are 'no clear difference'; 2% or 0.02 "
                                            f"(default {MIN_EFFECT:.0%})".replace("%", "%%"))
    p.add_argument("--out", metavar="DIR", help="rows to DIR/runs/<run_id>/ (both variants) and the "
                                                "comparison to DIR/compare/<id>.json")
    add_output_arguments(p)


def main(args: argparse.Namespace) -> int:
    refuse_flags(args, ("repeats",), "does not apply to compare: use --rounds")
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
