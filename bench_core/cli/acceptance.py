"""`bench acceptance`: everything this machine's GPU (or CPU) path does, in one command of a few
minutes, judged by the checks that must hold and printed as a table last.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from bench_core.cli.common import paint
from bench_core.errors import EXIT_FAILED, EXIT_OK, ConfigError
from bench_core.files import check_writable
from bench_core.scenarios.acceptance import DEFAULT_BUDGET_S, DEFAULT_OUT, SKIPPABLE, SWEEP, run
from bench_core.summary.acceptance import FAIL, finish, table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = f"""Steps, each a child process within its share of the budget: environment.json and
nvidia-smi.txt; bench sysinfo; bench sweep {SWEEP} (gpu-acceptance.yaml on a GPU: every family
and GPU path once; acceptance-cpu.yaml, its rehearsal with tiny models, elsewhere); bench selftest
--quick; bench report. Then the checks: every row ok or says why, MFU in (0, 1], the device and
host clocks agree within 2 %, NVML energy against sampled power within 10 %, ResNet-50 AMP faster
than fp32 and near lambdal's figure, tf32 reported as tf32, FSDP2's losses as plain training's,
serving without failed requests, selftest green, no process left.
exit status: 0 no check failed, 1 a check failed.
examples:
  bench acceptance                                  # -> {DEFAULT_OUT}/: rows, report.html, acceptance.json
  bench acceptance --out outputs/h100-$(date +%F) --budget-s 600
  bench acceptance --sweep params/gpu-compare.yaml --skip selftest   # the comparison set (gpu/compare.sh)
  bash gpu/acceptance.sh                           # the same on a machine with no install: carried wheels"""
    p.add_argument("--out", metavar="DIR", default=DEFAULT_OUT, help=f"result folder (default: {DEFAULT_OUT})")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, metavar="S",
                   help=f"seconds for all the steps together (default: {DEFAULT_BUDGET_S:.0f}); a step past its "
                        "share is stopped and what it measured is kept")
    p.add_argument("--sweep", metavar="FILE", default=SWEEP,
                   help=f"the sweep to run (default: {SWEEP}, which picks the GPU or the CPU file)")
    p.add_argument("--skip", default="", metavar="STEPS",
                   help=f"steps to leave out, separated by commas, of {', '.join(SKIPPABLE)}: the sweep gets their "
                        "share of the budget and their checks say 'skipped' (gpu/compare.sh skips the selftest)")


def main(args: argparse.Namespace) -> int:
    if not args.budget_s > 0:
        raise ConfigError("budget_s", f"must be a positive number of seconds, got {args.budget_s}")
    if not Path(args.sweep).is_file():
        raise ConfigError("sweep", f"no such sweep file: {args.sweep}")
    skip = tuple(dict.fromkeys(name.strip() for name in args.skip.split(",") if name.strip()))
    unknown = [name for name in skip if name not in SKIPPABLE]
    if unknown:
        raise ConfigError("skip", f"{', '.join(unknown)} is not a step that can be left out; allowed: "
                                  f"{', '.join(SKIPPABLE)} (separated by commas)")
    out = check_writable(args.out)
    print(paint("bench acceptance", "bold"), flush=True)
    result = run(out, args.budget_s, args.sweep, skip=skip)
    checks = finish(result)
    print(table(result, checks), flush=True)
    failed = any(c.status == FAIL for c in checks)
    return EXIT_FAILED if failed else EXIT_OK
