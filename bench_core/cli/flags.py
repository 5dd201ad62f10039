"""The flags of the commands whose own modules import torch (cli/__init__.FLAGS: `bench run` and `bench sweep`,
whose modules are cli/run.py and cli/sweep.py), apart from what the commands run: their --help, and a value the
configuration's checks refuse, are answered without loading torch. `add_<command>_arguments(parser)`;
`check_<command>(args)`, where there is one (a sweep's file is checked by its plan, which needs the devices).
"""
from __future__ import annotations

import argparse

from bench_core.cli.common import add_config_arguments, add_output_arguments, config_from_args
from bench_core.files import TEMPLATE_ENV


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """examples:
  bench run --model resnet50 --mode train --precision amp-bf16 --batch-size 32 \\
            --width 224 --height 224 --steps 50 --warmup-steps 10 --repeats 3 --device cuda --out outputs/quick
  bench run --model unet3d --depth 32 --width 64 --height 64 --mode infer --device cpu
  bench run --model resnet50 --precision amp-bf16 --batch-size 256 --nproc-per-node 8
The last line says how many rows are ok, how many were disturbed (other processes on the CPU or device,
the hypervisor's steal, throttling: re-measure on a quiet machine) and how far a variant's outputs are from fp32 eager NCHW.
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


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """sweep file (YAML):
  name: tiny                 # output folder name (default: the file name)
  timeout_s: 1800            # optional: seconds allowed per papermill execution
  emulated: skip             # optional: leave out precisions this machine only emulates (default: run)
  grid:                      # every combination is one configuration (any BenchConfig field);
    model: [resnet50, mobilenet_v3_large]   # a list of such mappings runs the union of their grids
    precision: [fp32, amp-bf16]
    mode: [train, infer]
    batch_size: [16, max]    # max: the largest batch that fits, found by a search recorded in the rows
  settings:                  # shared by all configurations (any BenchConfig field)
    width: 64
    height: 64
    max_batch_size: 256      # cap of that search
  runs: 3                    # optional: measure each configuration in 3 separate runs (processes)

examples:
  bench sweep params/cpu-quick.yaml                 # writes outputs/cpu-quick/{results.csv,report.html}
  bench sweep params/tensorpix.yaml --out outputs/tensorpix-a100
  bench sweep params/default.yaml --force           # measure everything again
  bench sweep params/default.yaml --dry-run         # what would run, and about how long
  bench sweep params/cpu-quick.yaml --runs 3        # 3 separate runs of each configuration (for bench diff)
The estimate is for an idle machine: a sweep (and --dry-run) says when other processes are busy on
the CPU before it starts, and its last line gives the estimate again where it took more than twice
as long or its repeats were disturbed.
exit status: 0 every configuration ok (or unsupported), 1 a configuration failed, 2 bad input,
130 interrupted."""
    p.add_argument("file", metavar="FILE", help="sweep file (params/*.yaml)")
    p.add_argument("--out", metavar="DIR", help="output directory (default: outputs/<name>; for a selector such as "
                   "params/default.yaml, outputs/<its file name>)")
    p.add_argument("--force", action="store_true", help="re-run configurations that are already complete")
    p.add_argument("--runs", type=int, metavar="N",
                   help="separate runs (processes) of each configuration, each in its own run folder; bench diff "
                        "then compares runs, so its intervals hold from one run to the next (default: the file's "
                        "runs, else 1)")
    p.add_argument("--no-report", action="store_true", help="skip building DIR/report.html")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (executions, configurations, estimated time) and run nothing")
    p.add_argument("--template", metavar="IPYNB",
                   help=f"notebook template (default: ${TEMPLATE_ENV}, else notebooks/benchmark.ipynb of the project)")
    p.add_argument("--kernel", default="python3", help="Jupyter kernel name (default: python3, this environment)")
