"""The table of benchmarks/process_cpu/sitecustomize.py's lines: processes grouped by what they ran, with their
count, CPU in all and each, and how many imported torch. `python benchmarks/process_cpu FILE [--tests N]`."""
import argparse
import collections
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("file", type=Path)
    parser.add_argument("--tests", type=int, default=15, help="the tests whose processes took the most CPU")
    args = parser.parse_args()
    records = [json.loads(line) for line in args.file.read_text().splitlines() if line.strip()]
    groups = collections.defaultdict(list)
    for record in records:
        groups[kind(record["argv"])].append(record)
    total = sum(r["cpu_s"] for r in records)
    print(f"{len(records)} processes, {total:.0f} CPU s; by what they ran (count, CPU s in all, each, with torch):")
    for name, members in sorted(groups.items(), key=lambda item: -sum(r["cpu_s"] for r in item[1])):
        cpu = sum(r["cpu_s"] for r in members)
        torch = sum("torch" in r["imported"] for r in members)
        print(f"{len(members):5d} {cpu:8.1f} {cpu / len(members):6.1f} {torch:5d}  {name}")
    per_test = collections.Counter()
    for record in records:
        per_test[record["test"].rsplit(" (", 1)[0] or "(no test)"] += record["cpu_s"]
    print(f"\nthe {args.tests} tests whose processes took the most CPU (CPU s):")
    for test, cpu in per_test.most_common(args.tests):
        print(f"{cpu:8.1f}  {test}")


if __name__ == "__main__":
    main()
