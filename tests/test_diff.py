"""`bench diff OLD NEW` on real tiny runs: the same code twice is no regression; a copy at half
the speed, or one that fails now, is (exit 1); bad input is one line and exit 2."""
import json
import re
import shutil
from pathlib import Path

import pytest

from bench_core import results, summary
from bench_core.cli import main as bench_main

TINY_FLAGS = ["--model", "resnet18", "--width", "32", "--height", "32", "--batch-size", "2", "--steps", "10",
              "--warmup-steps", "3", "--repeats", "5", "--min-seconds", "0", "--device", "cpu", "-q"]


def bench(capsys, *args) -> tuple[int, str, str]:
    try:
        code = bench_main(list(args))
    except SystemExit as stop:  # argparse usage errors
        code = stop.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """OLD and NEW: the same two tiny configurations (resnet18 train and infer), measured twice."""
    base = tmp_path_factory.mktemp("diff")
    for name in ("old", "new"):
        for mode in ("train", "infer"):
            assert bench_main(["run", *TINY_FLAGS, "--mode", mode, "--out", str(base / name)]) == 0
    return base / "old", base / "new"


def edited_copy(source: Path, target: Path, edit) -> Path:
    """A copy of a results directory with every row passed through edit(row) (None drops it)."""
    shutil.copytree(source, target)
    for path in target.glob("runs/*/rows.json"):
        rows = [r for r in (edit(row) for row in json.loads(path.read_text())) if r is not None]
        if rows:
            path.write_text(json.dumps(rows))
        else:
            shutil.rmtree(path.parent)
    results.rebuild_csv(target)
    return target


def test_the_same_code_measured_twice_is_no_regression(runs, capsys):
    old, new = runs
    code, out, err = bench(capsys, "diff", str(old), str(new), "--fail-above", "50%")
    assert code == 0, out + err
    assert "REGRESSION" not in out and "No regression." in out
    assert "environment: no recorded field differs" in out
    for label in ("resnet18 train fp32 bs2 3x32x32 cpu", "resnet18 infer fp32 bs2 3x32x32 cpu"):
        assert label in out
    assert "new/old [95% CI]" in out and "2 configuration(s), 2 in both" in out


def test_half_the_speed_is_flagged_slower_and_exits_1(runs, capsys, tmp_path):
    old, new = runs

    def halve(row):
        return {**row, "samples_per_s": row["samples_per_s"] / 2, "torch_version": "9.9.9"}
    slow = edited_copy(new, tmp_path / "slow", halve)
    code, out, err = bench(capsys, "diff", str(new), str(slow))
    assert code == 1, out + err
    lines = out.splitlines()
    table = next(i for i, line in enumerate(lines) if line.startswith("configuration"))
    env = next(i for i, line in enumerate(lines) if line.strip().startswith("torch_version"))
    assert env < table and lines[env].strip().endswith("-> 9.9.9")
    flagged = [line for line in lines[table + 1:] if "REGRESSION" in line]
    assert len(flagged) == 2 and all("0.50x [" in line and " slower " in line for line in flagged)
    assert "2 regression(s) (exit 1)" in out

    code, out, _ = bench(capsys, "diff", str(new), str(slow), "--json")
    report = json.loads(out)
    assert code == 1 and report["regressions"] == 2 and report["compared"] == 2
    assert {c["verdict"] for c in report["configurations"]} == {"slower"}
    assert all(c["high"] < 1 and c["ratio"] == pytest.approx(0.5) for c in report["configurations"])
    assert report["environment_changes"] == [{"field": "torch_version", "old": report["environment_changes"][0]["old"],
                                              "new": "9.9.9"}]


def test_a_configuration_that_fails_now_is_a_regression_and_the_html_is_self_contained(runs, capsys, tmp_path):
    old, new = runs

    def break_train_drop_infer(row):
        if row["mode"] == "infer":
            return None
        return {**row, "status": "oom", "message": "<script>alert(1)</script> out of memory", "samples_per_s": None}
    broken = edited_copy(new, tmp_path / "broken", break_train_drop_infer)
    page = tmp_path / "report" / "diff.html"
    code, out, err = bench(capsys, "diff", str(old), str(broken), "--html", str(page), "--fail-above", "0.5")
    assert code == 1, out + err
    train = next(line for line in out.splitlines() if line.startswith("resnet18 train"))
    assert "fails now" in train and "REGRESSION" in train and "new: 5/5 oom" in train
    infer = next(line for line in out.splitlines() if line.startswith("resnet18 infer"))
    assert "removed" in infer and "REGRESSION" not in infer

    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "bench diff: old -&gt; broken" in html
    assert "<script" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.IGNORECASE)
    assert "Welch" in html and "fails now" in html


def test_single_repeats_give_no_interval_and_a_warning_not_a_silent_pass(runs, capsys, tmp_path):
    old, new = runs
    single = edited_copy(new, tmp_path / "single", lambda row: row if row["repeat"] == 0 else None)
    code, out, err = bench(capsys, "diff", str(old), str(single))
    assert code == 0 and out.count("(too few repeats for an interval)") == 2
    assert "warning: 2 configuration(s) in both have fewer than 2 usable repeats" in err


def test_the_notebook_api_gives_the_table(runs):
    old, new = runs
    diff = summary.diff_results(old, new, fail_above=0.5)
    assert list(diff.table["side"]) == ["both", "both"] and not diff.table["regression"].any()
    assert set(diff.table.columns) >= {"configuration", "old_samples_per_s", "new_samples_per_s", "ratio", "low",
                                      "high", "verdict", "reason"}
    assert (diff.table["old_samples_per_s"] > 0).all() and diff.environment.empty
    assert (diff.table["low"] <= diff.table["ratio"]).all() and (diff.table["ratio"] <= diff.table["high"]).all()


@pytest.mark.parametrize("case, field", [
    ("missing", "new_dir"),
    ("no_csv", "new_dir"),
    ("nothing_in_common", "result_dirs"),
    ("fail_above", "argument --fail-above"),
    ("min_effect", "argument --min-effect"),
    ("html_suffix", "html"),
])
def test_bad_input_is_one_line_and_exit_2(runs, capsys, tmp_path, case, field):
    old, new = runs
    args = ["diff", str(old), str(new), "--html", str(tmp_path / "never.html")]
    if case == "missing":
        args[2] = str(tmp_path / "no-such-dir")
    elif case == "no_csv":
        (tmp_path / "empty").mkdir()
        args[2] = str(tmp_path / "empty")
    elif case == "nothing_in_common":
        args[2] = str(edited_copy(new, tmp_path / "other", lambda row: {**row, "batch_size": 4}))
    elif case == "fail_above":
        args += ["--fail-above", "5"]  # 5 is 500 %: a percentage needs its % sign
    elif case == "min_effect":
        args += ["--min-effect", "two"]
    else:
        args[-1] = str(tmp_path / "diff.txt")
    code, out, err = bench(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith(f"bench diff: error: {field}"), lines
    assert not list(tmp_path.glob("*.html")) and not (tmp_path / "diff.txt").exists()
    if case == "nothing_in_common":
        assert "no configuration is in both" in lines[0] and "2 configurations" in lines[0]


def test_several_runs_a_side_are_the_samples(runs, capsys, tmp_path):
    """With 2+ runs of a configuration on both sides, each run's geometric mean is one sample, so the
    interval holds from one run to the next; one run a side says it compared repeats, with a caution."""
    old, new = runs
    code, out, _ = bench(capsys, "diff", str(old), str(new), "--fail-above", "50%")
    assert "repeats, 1 run" in out and "caution: 2 configuration(s) have one run on a side" in out

    def second_run(source, target, factor):
        shutil.copytree(source, target)
        for path in list(target.glob("runs/*/rows.json")):
            rows = [dict(r, run_id=r["run_id"] + "-b", samples_per_s=r["samples_per_s"] * factor)
                    for r in json.loads(path.read_text())]
            (path.parent.parent / (path.parent.name + "-run2")).mkdir()
            (path.parent.parent / (path.parent.name + "-run2") / "rows.json").write_text(json.dumps(rows))
        results.rebuild_csv(target)
        return target

    two_old = second_run(old, tmp_path / "old2", 1.0)
    two_new = second_run(new, tmp_path / "new2", 1.02)
    table = summary.diff_results(two_old, two_new, fail_above=0.5).table
    assert set(table["unit"]) == {"runs, 2 vs 2"}
    code, out, _ = bench(capsys, "diff", str(two_old), str(two_new), "--fail-above", "50%")
    assert code == 0 and "caution" not in out


def test_noise_flagged_repeats_are_named_beside_the_comparison(runs, capsys, tmp_path):
    old, new = runs
    # The real runs may carry flags of their own (the suite runs two workers): set them all here.
    quiet = edited_copy(old, tmp_path / "quiet", lambda r: dict(r, noise_flags=""))
    noisy = edited_copy(new, tmp_path / "noisy",
                        lambda r: dict(r, noise_flags="other-processes-on-cpu(0.94 cores);noisy-window(0.2 > 0.05)"
                                       if r["mode"] == "train" else ""))
    table = summary.diff_results(quiet, noisy, fail_above=0.5).table.set_index("configuration")
    train = table.loc["resnet18 train fp32 bs2 3x32x32 cpu", "note"]
    assert train == "new: 5/5 repeats noise-flagged (noisy-window, other-processes-on-cpu)"
    assert table.loc["resnet18 infer fp32 bs2 3x32x32 cpu", "note"] == ""
