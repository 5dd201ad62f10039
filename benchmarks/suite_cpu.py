"""Where the test suite's CPU goes, per test and per file: a pytest plugin, then a table.

The suite is CPU-bound on a 2-core machine (three workers, and the processes tests start), so its
wall time follows its CPU time. Each test's CPU is this worker's own (RUSAGE_SELF) plus that of the
processes it started and waited for (RUSAGE_CHILDREN: bench runs, sweeps and their kernels, torchrun
agents and workers), over its setup, call and teardown. A module fixture's server is counted where it
is reaped; processes no test waits for (SLURM's daemons run a job's tasks) are not counted at all.

    PYTHONPATH=benchmarks SUITE_CPU_OUT=/tmp/cpu.jsonl .venv/bin/python -m pytest -p suite_cpu -p no:cacheprovider
    .venv/bin/python benchmarks/suite_cpu.py /tmp/cpu.jsonl [--tests 30]
    .venv/bin/python benchmarks/suite_cpu.py /tmp/before.jsonl /tmp/after.jsonl    # per file, side by side
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import time

import pytest

OUT_ENV = "SUITE_CPU_OUT"


def _cpu() -> tuple[float, float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime, time.monotonic()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before = _cpu()
    yield
    after = _cpu()
    record = {"test": item.nodeid, "self_s": after[0] - before[0], "children_s": after[1] - before[1],
              "wall_s": after[2] - before[2], "worker": os.environ.get("PYTEST_XDIST_WORKER")}
    with open(os.environ.get(OUT_ENV, "suite-cpu.jsonl"), "a") as handle:  # one line per test: workers append
        handle.write(json.dumps(record) + "\n")


def per_file(path: str) -> dict[str, float]:
    totals: dict[str, float] = collections.defaultdict(float)
    for record in map(json.loads, open(path)):
        totals[record["test"].split("::")[0]] += record["self_s"] + record["children_s"]
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="+", help="the plugin's JSON lines; two files: per file side by side")
    parser.add_argument("--tests", type=int, default=20, help="the N most expensive tests (one file only)")
    args = parser.parse_args()
    tables = [per_file(p) for p in args.records]
    print(" ".join(f"{sum(t.values()):9.0f}" for t in tables), " CPU s, all tests")
    for name in sorted(tables[0], key=lambda f: -tables[0][f]):
        print(" ".join(f"{t.get(name, 0.0):9.1f}" for t in tables), "", name)
    if len(tables) == 1:
        records = sorted(map(json.loads, open(args.records[0])), key=lambda r: -(r["self_s"] + r["children_s"]))
        print(f"\nthe {args.tests} most expensive tests: CPU s (own + processes started), wall s")
        for r in records[:args.tests]:
            print(f"{r['self_s'] + r['children_s']:7.1f} {r['wall_s']:7.1f}  {r['test']}")


if __name__ == "__main__":
    main()
