"""The flags of the commands whose own modules import torch (cli/__init__.FLAGS: `bench run`, `sweep`, `find-batch`
and `ladder`, whose modules are cli/<command>.py; `compare`'s are in cli/compare_flags.py), apart from what the
commands run: their --help, and a value the configuration's checks refuse, are answered without loading torch. `add_<command>_arguments(parser)`;
`check_<command>(args)`, where there is one (a sweep's file is checked by its plan, which needs the devices): None
to go on to the command, or the command's exit status where the check has answered it (bench run's `oom` row of a
model too large for the CPU, said from its config).
"""
from __future__ import annotations

import argparse

from bench_core.cli.common import (
    add_config_arguments,
    add_output_arguments,
    config_from_args,
    config_values,
    refuse_flags,
)
from bench_core.cli.inputs import percentage
from bench_core.cli.run_output import exit_status, record_rows, show_rows
from bench_core.config.schema import DEFAULT_MAX_BATCH
from bench_core.config.serve import LADDERS
from bench_core.errors import interrupts_held
from bench_core.files import TEMPLATE_ENV, check_results_folder
from bench_core.run.parameter_oom import parameter_oom_rows


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


def check_run(args: argparse.Namespace) -> int | None:
    """The configuration's own checks (names, values, the combination), before the command's module is loaded:
    a refused value is said in a fraction of a second. The command checks it again (a few milliseconds).

    First, a configuration whose parameters alone certainly exceed the CPU's free memory (run/parameter_oom.py)
    is answered here: its `oom` row recorded and shown as the run would, and the exit status returned, without
    torch or transformers (a 1.2-trillion-parameter config.json: 9-11 s before, its check importing both)."""
    rows = parameter_oom_rows(config_values(args))
    if rows is None:
        config_from_args(args)
        return None
    if args.out is not None:
        check_results_folder(args.out)  # as the run checks it: a row that cannot be saved is bad input
    with interrupts_held():
        saved = record_rows(args, rows)
    show_rows(args, rows, saved)
    return exit_status(rows, saved)


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


# Settings of a benchmark run that a probe does not use: each probe is a fixed short run.
FIND_BATCH_UNUSED = ("steps", "warmup_steps", "repeats", "min_seconds", "profile")


def add_find_batch_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = f"""Grows the batch (x2 from --batch-size; without it, from the largest batch whose memory estimate,
as bench memory makes it, fits the device's memory less the allocator's headroom, else 1) until out of memory or --max-batch-size
(default {DEFAULT_MAX_BATCH}), then bisects. When out of memory bounded it, the size to use is
--batch-margin (default 10%) below the largest that ran, and bisection stops at half that margin;
--batch-margin 0 gives the exact edge. Each probe is a real run of 3 steps (train: forward,
backward, optimizer step; with --compile, 3 warm-up steps before the timed one); --steps/--repeats/
--min-seconds do not apply.
Any failure other than out-of-memory stops the search, except a batch too small to train (BatchNorm
needs more than one value per channel): it is marked too-small and the search grows past it.
examples:
  bench find-batch --model resnet50 --mode train --precision amp-bf16 --device cuda
  bench find-batch --model resnet18 --width 64 --height 64 --device cpu --max-batch-size 512 --out outputs/capacity
In a sweep or `bench run`, batch_size max runs this search (each probe in a fresh process), then
the benchmark at the size found; its rows keep both sizes and the search (batch_search).
exit status: 0 found, 1 nothing fits or the search failed, 2 bad input."""
    add_config_arguments(p, unused=FIND_BATCH_UNUSED)
    p.add_argument("--isolate", action="store_true",
                   help="run each probe in a fresh process (an import per probe; exact for runs in fresh "
                        "processes, e.g. sweeps; in-process CPU probes can come out low near the limit)")
    p.add_argument("--out", metavar="DIR", help="write the search as DIR/find-batch/<id>.json")
    add_output_arguments(p)


def check_find_batch(args: argparse.Namespace) -> None:
    refuse_flags(args, FIND_BATCH_UNUSED, "does not apply to find-batch: each probe is a fixed 3-step run")
    config_from_args(args)


def add_ladder_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """examples:
  bench ladder --model llama-tiny --prompt-len 32 --new-tokens 16 --steps 16 --repeats 1 --out outputs/ladder
  bench ladder --model llama-8b --engine vllm --ladder rate --start 1 --price-per-hour 2.5 --out outputs/ladder
  bench report outputs/ladder          # the Serving section draws the frontier
The ladder measures concurrency 1, 2, 4, ... (or a rate 1, 2, 4, ... requests/s) on one server and stops by
itself: when output tokens/s rises by less than --min-gain over the best point before (saturated), when p99 TTFT
passes --max-ttft-ms, when a point fails or is over-saturated, when the client itself saturates, or after
--max-points. It prints every point, why it stopped, the Pareto frontier of output tokens/s per GPU against
tokens/s per user (with the cost per million output tokens where --price-per-hour is given), and the highest
load meeting the SLO. exit status: 0 the ladder found its top, 1 its first point failed, 2 bad input."""
    p.add_argument("--ladder", choices=LADDERS, default="concurrency",
                   help="what doubles: concurrent users (closed loop) or the request rate (open loop) "
                        "(default: concurrency)")
    p.add_argument("--start", type=float, default=1.0, help="the first rung's users or requests/s (default 1)")
    p.add_argument("--max-points", type=int, default=8, help="the most rungs (default 8)")
    p.add_argument("--min-gain", type=percentage, default=0.1,
                   help="stop when a doubling adds less than this share of output tokens/s; 10%% or 0.1 "
                        "(default 10%%)")
    p.add_argument("--max-ttft-ms", type=float, default=5000.0, help="stop when p99 TTFT passes this (default 5000)")
    add_config_arguments(p)
    p.add_argument("--out", metavar="DIR", help="append each point's rows to DIR/results.csv and DIR/runs/")
    add_output_arguments(p)
