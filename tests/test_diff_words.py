"""What `bench diff` says it used and what it set aside, and how many runs a smaller drop needs: folders of 3
runs a side, 2 of each side's runs disturbed, say "repeats, 1 run (of 3 a side: 2 set aside as disturbed)"
and to re-measure, never "use --runs 5"; folders of runs answer "how many runs do I need to see a 3 % drop?"
from the spread they measured, with the --fail-above it needs. The runs are one real run's rows as separate
runs (another run id), each scaled as a run shifts; no timing is asserted."""
import json
import math
import re

import pytest

from bench_core import results
from bench_core.results.sample_size import runs_text, runs_to_detect
from bench_core.summary.diff import diff_results
from conftest import bench_here

RUN = ["run", "--model", "resnet18", "--width", "32", "--height", "32", "--batch-size", "2", "--steps", "2",
       "--warmup-steps", "1", "--repeats", "3", "--min-seconds", "0", "--device", "cpu", "--mode", "infer", "-q"]
SHIFTS = (1.0, 1.03, 0.97)  # each run's throughput over the first: runs shift against each other


@pytest.fixture(scope="module")
def real_rows(tmp_path_factory):
    from bench_core.cli import main
    out = tmp_path_factory.mktemp("one-run")
    assert main([*RUN, "--out", str(out)]) == 0
    rows = results.record_rows(out)
    median = sorted(r["samples_per_s"] for r in rows)[1]
    return [dict(r, noise_flags="", samples_per_s=median * (1.0, 1.01, 0.99)[r["repeat"]]) for r in rows]


def folder(path, rows, disturbed_runs=(), scale=1.0):
    """Three runs of `rows` (run ids of their own, the folder's name in them: two folders never hold the same run,
    which bench diff refuses as a copy; each shifted by SHIFTS); the runs in `disturbed_runs` ran beside another
    process, as the sampler flags it."""
    for i, shift in enumerate(SHIFTS):
        flags = "other-processes-on-cpu(0.94 cores)" if i in disturbed_runs else ""
        run = [dict(r, run_id=f"{path.name}-run-{i}", noise_flags=flags,
                    samples_per_s=r["samples_per_s"] * shift * scale, throughput=r["samples_per_s"] * shift * scale)
               for r in rows]
        results.write_run(path, f"run-{i}", json.loads(json.dumps(run)))
    return path


def test_runs_set_aside_as_disturbed_are_said_and_the_advice_is_to_re_measure(real_rows, tmp_path, capsys):
    old = folder(tmp_path / "old", real_rows, disturbed_runs=(1, 2))
    new = folder(tmp_path / "new", real_rows, disturbed_runs=(0, 2))
    done = bench_here(capsys, "diff", str(old), str(new))
    line = next(line for line in done.stdout.splitlines() if line.startswith("resnet18"))
    assert "repeats, 1 run (of 3 a side: 2 set aside as disturbed)" in line
    caution = next(line for line in done.stdout.splitlines() if line.startswith("caution:"))
    assert "set aside as disturbed" in caution and "re-measure them on a quiet machine" in caution
    assert "--runs 5" not in caution  # 3 runs a side were given: more runs are not what is missing
    assert "old: 6/9 repeats disturbed, left out (other-processes-on-cpu)" in line


def test_how_many_runs_a_3_percent_drop_needs_is_answered_from_the_spread_measured(real_rows, tmp_path, capsys):
    old = folder(tmp_path / "old", real_rows)
    new = folder(tmp_path / "new", real_rows)
    result = diff_results(old, new)
    (row,) = result.table.to_dict("records")
    assert row["unit"] == "runs, 3 vs 3" and row["run_sd_source"] == "measured"
    logs = [math.log(s) for s in SHIFTS]
    mean = sum(logs) / 3
    assert row["run_sd"] == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in logs) / 2), rel=1e-6)
    done = bench_here(capsys, "diff", str(old), str(new))
    last = done.stdout.splitlines()[-1]
    assert last.startswith("runs a side to catch a slowdown 95% of the time at a run-to-run spread of 3.0% a run "
                           "(measured between runs")
    assert last.endswith(runs_text(row["run_sd"], 0.05))
    three = re.search(r"3%: (\d+) runs with --fail-above 1\.5%", last)
    assert three and int(three.group(1)) == runs_to_detect(0.03, row["run_sd"], 0.015)
    assert "a slowdown at or under --fail-above 5% is never called" in last
    assert result.to_dict()["runs_needed"] == last


def test_the_answer_is_monotone_and_a_threshold_above_the_drop_never_calls_it():
    assert runs_to_detect(0.03, 0.02, 0.05) is None  # the gate at 5 % never calls a 3 % drop
    counts = [runs_to_detect(0.10, sd, 0.05) for sd in (0.01, 0.02, 0.04, 0.08)]
    assert counts == sorted(counts) and counts[0] == 2
