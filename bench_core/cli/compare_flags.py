"""`bench compare`'s flags, apart from what it runs (cli/__init__.FLAGS; as cli/flags.py for the other commands
whose modules import torch): its --help and a flag it does not take are answered without torch. Its own module,
since its default minimum effect is the comparison's (results/comparison.py), which loads pandas: the commands
whose flags are in cli/flags.py answer --help without it.
"""
from __future__ import annotations

import argparse

from bench_core.cli.common import add_config_arguments, add_output_arguments, config_from_args, refuse_flags
from bench_core.cli.diff import fraction
from bench_core.results.comparison import MIN_EFFECT


def add_compare_arguments(p: argparse.ArgumentParser) -> None:
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


def check_compare(args: argparse.Namespace) -> None:
    refuse_flags(args, ("repeats",), "does not apply to compare: use --rounds")
    config_from_args(args)
