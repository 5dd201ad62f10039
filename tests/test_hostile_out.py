"""Where a run or a sweep writes its results: a folder that is new or bench's own, said before anything runs.
Every write rebuilds results.csv, summary.csv and machines.csv from runs/*/rows.json, so a folder whose
results.csv bench did not write, or another sweep's folder, would lose what it holds: each is one line, exit 2,
and the folder is as it was."""
import hashlib
from pathlib import Path

import pytest

from bench_captured import bench_captured

SWEEP = """name: tiny-out
grid:
  model: [resnet18]
  mode: [infer]
settings: {device: cpu, width: 32, height: 32, batch_size: 2, steps: 1, warmup_steps: 0, min_seconds: 0, repeats: 1}
"""
RUN = ["--model", "resnet18", "--mode", "infer", "--width", "32", "--height", "32", "--batch-size", "2",
       "--steps", "1", "--warmup-steps", "0", "--repeats", "1", "--min-seconds", "0", "--device", "cpu", "-q"]


def _state(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
            for p in sorted(folder.rglob("*"))}


def _refused(proc, command: str, field: str, *words: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"bench {command}: error: {field}: ") and all(w in lines[0] for w in words), lines


@pytest.fixture
def sweep_file(tmp_path) -> Path:
    path = tmp_path / "tiny-out.yaml"
    path.write_text(SWEEP)
    return path


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_results_csv_bench_did_not_write_is_not_replaced(tmp_path, sweep_file, command):
    out = tmp_path / "theirs"
    out.mkdir()
    (out / "results.csv").write_text("name,age\nbob,3\n")
    (out / "notes.txt").write_text("mine\n")
    before = _state(out)
    args = ["run", *RUN] if command == "run" else ["sweep", str(sweep_file), "--no-report"]
    _refused(bench_captured(*args, "--out", str(out)), command, "out", "results.csv", "no runs/ folder")
    assert _state(out) == before


def test_another_sweeps_folder_is_not_overwritten_and_a_plan_json_bench_did_not_write_is_kept(tmp_path, sweep_file):
    out = tmp_path / "other"
    (out / "runs").mkdir(parents=True)
    (out / "plan.json").write_text('{"name": "nightly", "executions": []}')
    before = _state(out)
    _refused(bench_captured("sweep", str(sweep_file), "--out", str(out), "--no-report"), "sweep", "out",
             "'nightly'", "'tiny-out'")
    (out / "plan.json").write_text('["not a plan"]')
    before = _state(out)
    _refused(bench_captured("sweep", str(sweep_file), "--out", str(out), "--no-report"), "sweep", "out",
             "plan.json that no bench sweep wrote")
    assert _state(out) == before


@pytest.mark.parametrize("make, words", [
    (lambda out: (out / "results.csv").mkdir(parents=True), ("results.csv is a folder",)),
    (lambda out: (out.mkdir(), (out / "runs").write_text("x")), ("runs is a file",)),
    (lambda out: out.symlink_to(out.parent / "gone" / "dir"), ("is a link to", "which does not exist")),
], ids=["results-csv-a-folder", "runs-a-file", "dangling-link"])
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_an_out_folder_that_cannot_hold_results_is_said_before_the_run(tmp_path, sweep_file, command, make, words):
    out = tmp_path / "out"
    make(out)
    args = ["run", *RUN] if command == "run" else ["sweep", str(sweep_file), "--no-report"]
    _refused(bench_captured(*args, "--out", str(out)), command, "out", *words)
    assert not (tmp_path / "gone").exists() and not (out.is_dir() and (out / "runs").is_dir())


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_an_empty_out_is_refused_not_ignored(tmp_path, sweep_file, command, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["run", *RUN] if command == "run" else ["sweep", str(sweep_file), "--no-report"]
    _refused(bench_captured(*args, "--out", ""), command, "out", "got ''")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-out.yaml"]


def test_a_kernel_that_does_not_exist_is_bad_input_before_any_folder(tmp_path, sweep_file):
    out = tmp_path / "never"
    _refused(bench_captured("sweep", str(sweep_file), "--kernel", "no-such-kernel", "--out", str(out)), "sweep",
             "kernel", "'no-such-kernel'", "python3")
    assert not out.exists()


def test_a_config_file_value_is_checked_where_a_flag_wins_over_it_and_an_empty_config_is_refused(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("model: resnet18\nrepeats: three\nsteps: 2.7\n")
    proc = bench_captured("run", *RUN, "--config", str(config), "--out", str(tmp_path / "never"))
    assert proc.returncode == 2 and "repeats: must be a whole number, got 'three'" in proc.stderr
    assert "steps: must be a whole number, got 2.7" in proc.stderr and str(config) in proc.stderr
    _refused(bench_captured("run", *RUN, "--config", ""), "run", "config", "got ''")
    assert not (tmp_path / "never").exists()


def test_two_sweep_files_are_said_as_one_too_many(sweep_file):
    proc = bench_captured("sweep", "--dry-run", str(sweep_file), str(sweep_file))
    assert proc.returncode == 2 and "takes one sweep file" in proc.stderr and len(proc.stderr.splitlines()) == 1
