"""The flags of the commands whose own modules import torch (cli/__init__.FLAGS: `bench run`, whose module is
cli/run.py), apart from what the commands run: their --help, and a value the configuration's checks refuse, are
answered without loading torch. `add_<command>_arguments(parser)`; `check_<command>(args)`, where there is one.
"""
from __future__ import annotations

import argparse

from bench_core.cli.common import add_config_arguments, add_output_arguments, config_from_args


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """examples:
  bench run --model resnet50 --mode train --precision amp-bf16 --batch-size 32 \\
            --width 224 --height 224 --steps 50 --warmup-steps 10 --repeats 3 --device cuda --out outputs/quick
  bench run --model unet3d --depth 32 --width 64 --height 64 --mode infer --device cpu
  bench run --model resnet50 --precision amp-bf16 --batch-size 256 --nproc-per-node 8
The last line says how many rows are ok, how many were disturbed (other processes on the CPU or device,
throttling: re-measure on a quiet machine) and how far a variant's outputs are from fp32 eager NCHW.
exit status: 0 all rows ok, 1 a row failed (oom, nan, error, unsupported), its outputs are wrong results
(outside its precision's tolerance of fp32 eager NCHW) or it could not be saved, 2 bad
input, 130 interrupted by Ctrl-C and 143 by SIGTERM (finished repeats are kept, the rest is one
interrupted row)."""
    add_config_arguments(p)
    p.add_argument("--out", metavar="DIR", help="append rows to DIR/results.csv and DIR/runs/<run_id>/rows.json")
    add_output_arguments(p)


def check_run(args: argparse.Namespace) -> None:
    """The configuration's own checks (names, values, the combination), before the command's module is loaded:
    a refused value is said in a fraction of a second. The command checks it again (a few milliseconds)."""
    config_from_args(args)
