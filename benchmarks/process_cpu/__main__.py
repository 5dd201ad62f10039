"""The table of benchmarks/process_cpu/sitecustomize.py's lines: processes grouped by what they ran, with their
count, CPU in all and each, and how many imported torch. `python benchmarks/process_cpu FILE [--tests N] [--floor R]`.

With --floor, each group's import floor too: the least CPU (of R runs, measured now, with this interpreter) of a
fresh `python -c "import ..."` of the libraries each process imported (sitecustomize's LIBRARIES), so the table says
how much of the processes' CPU is starting them and how much is their work. A lower bound: a library imports more
as it is used (transformers' `import transformers` is lazy; a Llama's modules are not). Run it with the interpreter
the processes ran with, on the machine they ran on, idle."""
import argparse
import collections
import json
import math
import os
import resource
import subprocess
import sys
from pathlib import Path


def kind(argv: list[str]) -> str:
    """What a process ran: `bench <command>`, `-m module`, a script's name, or `-c` with its code's first line."""
    args = argv[1:]
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
        args = args[1:]  # the interpreter's own options (-u, -X ...)
    if not args:
        return "python"
    if args[0] == "-c":
        first = next((line for line in (args[1] if len(args) > 1 else "").splitlines() if line.strip()), "")
        return "-c " + first.strip()[:60]
    if args[0] == "-m":
        module = args[1] if len(args) > 1 else "?"
        return f"bench {args[2]}" if module == "bench_core" and len(args) > 2 else f"-m {module}"
    script = Path(args[0]).name
    if script in ("bench", "__main__.py") and len(args) > 1:
        return f"bench {args[1]}"
    return script


def import_floor(libraries: tuple[str, ...], runs: int) -> float:
    """The least CPU (user + system) of `runs` fresh interpreters that import `libraries` and end."""
    code = "import " + ", ".join(libraries) if libraries else "pass"
    env = {k: v for k, v in os.environ.items() if k != "PROCESS_CPU_OUT"}  # not a line of its own
    best = math.inf
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", type=Path)
    parser.add_argument("--tests", type=int, default=15, help="the tests whose processes took the most CPU")
    parser.add_argument("--floor", type=int, default=0, metavar="R",
                        help="measure each group's import floor, the least of R runs (0: not measured)")
    args = parser.parse_args()
    records = [json.loads(line) for line in args.file.read_text().splitlines() if line.strip()]
    groups = collections.defaultdict(list)
    for record in records:
        groups[kind(record["argv"])].append(record)
    total = sum(r["cpu_s"] for r in records)
    floors = {libraries: import_floor(libraries, args.floor) if args.floor else None
              for libraries in {tuple(r["imported"]) for r in records}}

    def floor_of(record: dict) -> float:
        return floors[tuple(record["imported"])]
    print(f"{len(records)} processes, {total:.0f} CPU s; by what they ran (count, CPU s in all, each, with torch"
          + (", the import floor each" if args.floor else "") + "):")
    for name, members in sorted(groups.items(), key=lambda item: -sum(r["cpu_s"] for r in item[1])):
        cpu = sum(r["cpu_s"] for r in members)
        torch = sum("torch" in r["imported"] for r in members)
        floor = f" {sum(map(floor_of, members)) / len(members):6.2f}" if args.floor else ""
        print(f"{len(members):5d} {cpu:8.1f} {cpu / len(members):6.1f} {torch:5d}{floor}  {name}")
    if args.floor:
        floor = sum(map(floor_of, records))
        print(f"\nimport floor: {floor:.1f} of the {total:.0f} CPU s ({floor / total:.0%}): starting each process and "
              f"importing what it imported (the least of {args.floor} runs each, measured now); the rest, "
              f"{total - floor:.0f} s, is their work")
    per_test = collections.Counter()
    for record in records:
        per_test[record["test"].rsplit(" (", 1)[0] or "(no test)"] += record["cpu_s"]
    print(f"\nthe {args.tests} tests whose processes took the most CPU (CPU s):")
    for test, cpu in per_test.most_common(args.tests):
        print(f"{cpu:8.1f}  {test}")


if __name__ == "__main__":
    main()
