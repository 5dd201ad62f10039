"""Paths that point somewhere else: an output file that is a link to an input's results.csv or an existing
folder, the same result folder given twice (under another spelling, through a link, or as a byte copy), a
folder that is not there, a ladder's load that no configuration allows. Each is refused before any work, in one
line naming the field and what is allowed, exit 2, no traceback, and every input byte for byte as it was.

The result folders are written by hand (rows.json through results.write_run, as bench run writes them) from one
kept H200 row (gpu/runs), so nothing is measured here and nothing depends on this machine's CPU.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from bench_core import results
from conftest import bench_here

KEPT = Path(__file__).resolve().parents[1] / "gpu" / "runs" / "h200-2026-11-27"
STEADY = (1.0, 1.01, 0.99)  # a repeat's samples/s over the kept figure: the same on both sides of a diff


def result_folder(folder: Path, run_id: str) -> Path:
    """A result folder of one run: three steady, undisturbed repeats of the kept resnet18 inference row."""
    (kept,) = [row for path in KEPT.glob("runs/cuda_0-resnet18-*/rows.json")
               for row in json.loads(path.read_text()) if row["status"] == "ok"]
    rows = [dict(kept, run_id=run_id, repeat=n, noise_flags=None, samples_per_s=kept["samples_per_s"] * factor,
                 throughput=kept["samples_per_s"] * factor) for n, factor in enumerate(STEADY)]
    results.write_run(folder, run_id, rows)
    return folder


@pytest.fixture
def folders(tmp_path, monkeypatch) -> dict[str, Path]:
    """old and new: one configuration measured in two runs; inputs: every file of both, to be left as it was."""
    monkeypatch.chdir(tmp_path)
    return {"old": result_folder(tmp_path / "old", "20261127T072227-aaaaaaaaaaaa-000001"),
            "new": result_folder(tmp_path / "new", "20261128T072227-aaaaaaaaaaaa-000002")}


def fingerprint(*folders: Path) -> dict[str, str]:
    """Every file under the folders (links not followed) and its bytes' hash."""
    return {str(path): hashlib.sha256(path.read_bytes()).hexdigest() for folder in folders
            for path in sorted(folder.rglob("*")) if path.is_file() and not path.is_symlink()}


def refused(capsys, *args: str) -> str:
    """`bench ARGS` in this process: exit 2, nothing on stdout, and the one line on stderr, returned."""
    done = bench_here(capsys, *args)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and done.stdout == "" and len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


# -- output files: a link or a folder is refused before anything is read or rendered ----------------------------

def test_a_report_written_through_a_link_to_an_input_is_refused(folders, capsys, tmp_path):
    old = folders["old"]
    before = fingerprint(old)
    (tmp_path / "evil.html").symlink_to(old / "results.csv")
    line = refused(capsys, "report", str(old), "--out", "evil.html")
    assert line.startswith("bench report: error: out: evil.html is a link"), line
    assert fingerprint(old) == before and not (old / "summary.ipynb").exists()
    assert not (tmp_path / "summary.ipynb").exists()


@pytest.mark.parametrize("command", ["report", "diff"])
def test_an_output_file_that_is_a_folder_is_refused_before_rendering(folders, capsys, tmp_path, command):
    (tmp_path / "t2" / "x.html").mkdir(parents=True)
    before = fingerprint(folders["old"], folders["new"])
    if command == "report":
        line = refused(capsys, "report", str(folders["old"]), "--out", "t2/x.html")
    else:
        line = refused(capsys, "diff", str(folders["old"]), str(folders["new"]), "--html", "t2/x.html")
    field = "out" if command == "report" else "html"
    assert line.startswith(f"bench {command}: error: {field}: t2/x.html is a folder, not a file"), line
    assert [p.name for p in (tmp_path / "t2").iterdir()] == ["x.html"]  # no summary.ipynb, no temporary file
    assert fingerprint(folders["old"], folders["new"]) == before


def test_the_summary_notebook_beside_the_report_is_never_written_through_a_link(folders, capsys, tmp_path):
    """The executed summary.ipynb goes beside the page: a link there into an input is refused like the page's."""
    old = folders["old"]
    before = fingerprint(old)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "summary.ipynb").symlink_to(old / "results.csv")
    line = refused(capsys, "report", str(old), "--out", "out/report.html")
    assert line.startswith("bench report: error: out: out/summary.ipynb is a link"), line
    assert fingerprint(old) == before and not (tmp_path / "out" / "report.html").exists()


def test_a_diff_page_written_through_a_link_to_an_input_is_refused(folders, capsys, tmp_path):
    before = fingerprint(folders["old"], folders["new"])
    (tmp_path / "evil.html").symlink_to(folders["new"] / "results.csv")
    line = refused(capsys, "diff", str(folders["old"]), str(folders["new"]), "--html", "evil.html")
    assert line.startswith("bench diff: error: html: evil.html is a link"), line
    assert fingerprint(folders["old"], folders["new"]) == before


# -- the same folder twice ------------------------------------------------------------------------------------

@pytest.mark.parametrize("spelling", ["same", "link", "dot-slash"])
def test_diff_refuses_a_folder_against_itself(folders, capsys, tmp_path, spelling):
    old = folders["old"]
    if spelling == "link":
        (tmp_path / "oldlink").symlink_to(old)
    again = {"same": str(old), "link": "oldlink", "dot-slash": "./old/"}[spelling]
    line = refused(capsys, "diff", str(old), again)
    assert line.startswith(f"bench diff: error: new_dir: OLD {str(old)!r} and NEW {again!r} are the same folder"), line


def test_diff_refuses_a_copy_and_compares_the_same_rows_under_other_run_ids(folders, capsys, tmp_path):
    """A byte copy holds OLD's runs (run ids, repeats, start times, as bench history knows a run) with OLD's
    figures: nothing could move, so a gate on it proves nothing. The A/A check itself stands: the same figures
    recorded as other runs are compared, at 1.00x, and pass."""
    old = folders["old"]
    shutil.copytree(old, tmp_path / "copy")
    line = refused(capsys, "diff", str(old), "copy")
    assert line.startswith("bench diff: error: new_dir: NEW 'copy' holds the same 3 row(s) as OLD"), line
    assert "figure for figure (a copy)" in line, line
    other = result_folder(tmp_path / "rerun", "20261129T072227-aaaaaaaaaaaa-000003")  # OLD's figures, another run
    done = bench_here(capsys, "diff", str(old), str(other))
    assert done.returncode == 0 and "1.00x" in done.stdout and "REGRESSION" not in done.stdout, done.stdout


def test_report_and_predict_refuse_a_folder_given_twice(folders, capsys, tmp_path):
    old = folders["old"]
    (tmp_path / "oldlink").symlink_to(old)
    line = refused(capsys, "report", str(old), "oldlink")
    assert line.startswith(f"bench report: error: result_dirs: DIR 1 {str(old)!r} and DIR 2 'oldlink' are the same "
                           "folder"), line
    assert not (old / "report.html").exists()
    line = refused(capsys, "predict", "--from", str(old), "--against", "./old/")
    assert line.startswith(f"bench predict: error: against: --from {str(old)!r} and --against './old/' are the same "
                           "folder"), line


# -- history: the field named, one line ---------------------------------------------------------------------------

def test_history_names_new_and_says_an_empty_folder_in_one_line(folders, capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    line = refused(capsys, "history", str(folders["old"]), "--new", "nope")
    assert line.startswith("bench history: error: new: 'nope' is not a directory"), line
    line = refused(capsys, "history", "empty")
    assert line.startswith("bench history: error: result_dirs: no result rows in empty (empty: no results.csv"), line
    line = refused(capsys, "history", str(folders["old"]), "--new", "empty")
    assert line.startswith("bench history: error: new: no result rows in empty (empty: no results.csv"), line


# -- flags: values argparse took for options, ladder loads -----------------------------------------------------

def test_a_negative_percentage_reaches_its_check(folders, capsys):
    line = refused(capsys, "diff", str(folders["old"]), str(folders["new"]), "--fail-above", "-5%")
    assert line.startswith("bench diff: error: argument --fail-above: expected a fraction") and "got '-5%'" in line


@pytest.mark.parametrize("flags, field", [
    (["--start", "inf"], "start: must be a whole number >= 1, got inf"),
    (["--ladder", "rate", "--start", "inf"], "start: must be a finite number > 0, got inf"),
    (["--ladder", "rate", "--start", "600000"], "start: point 2 of the ladder, rate 1.2e+06, is refused"),
    (["--max-points", "20"], "max_points: 20 points from concurrency 1 climb to concurrency 524288"),
])
def test_a_ladder_load_no_configuration_allows_is_refused_before_the_server_starts(capsys, monkeypatch, flags, field):
    from bench_core.scenarios import ladder

    def no_server(*args, **kwargs):
        raise AssertionError("the server was started before the ladder's options were checked")

    monkeypatch.setattr(ladder, "open_server", no_server)
    line = refused(capsys, "ladder", "--model", "llama-tiny", *flags)
    assert line.startswith(f"bench ladder: error: {field}"), line


# -- waiting on files outside this change -----------------------------------------------------------------------

def test_diff_reads_a_folder_of_run_files_alone(folders, capsys):
    (folders["new"] / "results.csv").unlink()
    done = bench_here(capsys, "diff", str(folders["old"]), str(folders["new"]))
    assert done.returncode == 0 and "1 in both" in done.stdout, done.stderr


def test_ladder_takes_min_gain_as_a_percentage(capsys):
    line = refused(capsys, "ladder", "--model", "llama-tiny", "--min-gain", "1000%")  # 10: out of range
    assert line.startswith("bench ladder: error: min_gain: must be a fraction > 0"), line
