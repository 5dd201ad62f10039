"""Today's model on the published pairs of an earlier commit: each group's held-out error on only the pairs whose two
rows were in `bench_core/data/reference.csv` at COMMIT (matched by source, model, mode, precision, GPU, GPU count,
batch, input shape and value). A group that grew with harder pairs since is compared with its old figures on the
same pairs, not on a different set.

    .venv/bin/python benchmarks/pairs_then.py 5b17d29     # the pairs issue 66 was measured on
"""
from __future__ import annotations

import argparse
import csv
import io
import subprocess

from bench_core.predict import published
from bench_core.predict.published import summarize


def identity(row: dict) -> tuple:
    batch = row["batch_size"]
    return (row["source"], row["model"], row["mode"], row["precision"], row["gpu"], int(row["gpus"]),
            float(batch) if batch not in (None, "") else None, row["input_shape"], float(row["value"]))


def rows_at(commit: str) -> set[tuple]:
    text = subprocess.run(["git", "show", f"{commit}:bench_core/data/reference.csv"], capture_output=True, text=True,
                          check=True).stdout
    return {identity(r) for r in csv.DictReader(line for line in io.StringIO(text) if not line.startswith("#"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commit", help="the commit whose reference.csv holds the pairs to score")
    args = parser.parse_args()
    then = rows_at(args.commit)
    scored = [p for p, (a, b) in zip(published.predictions(), scored_pairs()) if a in then and b in then]
    print(f"today's model on the {len(scored)} pairs both of whose rows were in reference.csv at {args.commit}:")
    print(f"{'group':24} {'pairs':>5}  median |error|  80 % interval  within 15%")
    for line in summarize(scored, "group"):
        print(f"{line['group']:24} {line['pairs']:5}  {line['median_abs_error'] * 100:13.1f}%  "
              f"{line['interval_low']:.2f}x-{line['interval_high']:.2f}x    {line['within_15pct']:.0%}")


def scored_pairs() -> list[tuple]:
    """(source identity, target identity) of each row of published.predictions(), in its order (the pairs it
    predicted: those whose workload has a profile)."""
    out = []
    for a, b in published.pairs():
        math_a = published.setup_of(a, published.TERMS, None).math
        if published.profiles().get(published.profile_key(a, math_a)) is not None:
            out.append((identity(a), identity(b)))
    assert len(out) == len(published.predictions()), "the pairs predicted and the pairs listed differ"
    return out


if __name__ == "__main__":
    main()
