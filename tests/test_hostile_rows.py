"""Run files that are not rows bench wrote (a list of numbers, JSON nested 200,000 deep, text where a number
belongs, an ok row whose throughput is 1e300, NaN or negative, a FIFO in place of the file): each is a damaged run,
named with why, and left out by report, diff, history and predict alike, never a traceback, a hang, a regression
or a figure. A folder whose only run is damaged is one line and exit 2. Beside them: history reads the run files
(the record), not a results.csv edited since; a run without a readable timestamp is said, not dropped unsaid; a
prediction from a GPU with no spec sheet is refused, not carried over as if its memory were infinitely fast.

The folders are made by hand from one kept H200 row (gpu/runs), so nothing here depends on this machine's CPU.
"""
import json
import os
import threading
from pathlib import Path

import pytest

from bench_core import results
from bench_core.history.read import read_history
from bench_core.predict.measured import predict_rows
from bench_core.predict.specs import spec
from bench_core.results.store import damage, load_run
from conftest import bench_here

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "gpu" / "runs"
TEMPLATE = next(r for r in results.iter_rows(KEPT / "h200-2026-11-27-b")
                if r["status"] == "ok" and (r["model"], r["precision"]) == ("resnet50", "amp-bf16"))
SPEED = TEMPLATE["samples_per_s"]


def run_rows(run_id: str, day: int = 1, scale: float = 1.0, **changes) -> list[dict]:
    """Three repeats of the template, undisturbed, on 2026-11-<day>, at `scale` x its speed."""
    return [{**TEMPLATE, "run_id": run_id, "repeat": i, "timestamp": f"2026-11-{day:02d}T01:00:0{i}+00:00",
             "noise_flags": "", "samples_per_s": SPEED * scale * wobble, "throughput": SPEED * scale * wobble,
             **changes} for i, wobble in enumerate((1.0, 1.01, 0.99))]


def folder(path: Path, *runs: list[dict]) -> Path:
    for rows in runs:
        results.write_run(path, rows[0]["run_id"], rows)
    return path


def damaged(path: Path, text: str, name: str = "bad") -> Path:
    """`path` with a run file holding `text` (results.csv lists it as it was: the run file is the record)."""
    folder(path, run_rows(name))
    (path / "runs" / name / "rows.json").write_text(text)
    return path / "runs" / name / "rows.json"


def edited(**changes) -> str:
    """The template's run with `changes` in its first row, as a hand edit leaves it."""
    rows = run_rows("bad")
    rows[0].update(changes)
    return json.dumps(rows)


HOSTILE = {  # the file's text -> what the one line says is wrong in it
    "ints": ("[1, 2, 3]", "row 1: 1 where a row belongs"),
    "strings": ('["a"]', "row 1: 'a' where a row belongs"),
    "lists": ("[[1]]", "row 1: a list where a row belongs"),
    "object": ('{"a": 1}', "a JSON dict where a list of rows belongs"),
    "deep": ("[" * 200_000 + "]" * 200_000, "nested too deep"),
    "cut": (edited()[:300], "not JSON"),
    "repeat": (edited(repeat="x"), "repeat is 'x'; allowed: a finite number or empty"),
    "batch": (edited(batch_size="two"), "batch_size is 'two'"),
    "world": (edited(world_size="abc"), "world_size is 'abc'"),
    "devices": (edited(device_count="abc"), "device_count is 'abc'"),
    "huge": (edited(samples_per_s=1e300, throughput=1e300), "samples_per_s is 1e+300; allowed: 1e-06 to 1e+12"),
    "tiny": (edited(samples_per_s=1e-300), "samples_per_s is 1e-300"),
    "nan": (edited(samples_per_s=None), "status is ok but samples_per_s is empty"),
    "negative": (edited(throughput=-5.0), "status is ok but throughput is -5.0"),
    "text": (edited(throughput="fast"), "throughput is 'fast'"),
    "nested": (edited(model=["resnet50"]), "model is a list; allowed: text, a number, true/false or empty"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_run_file_that_is_not_rows_is_damaged_and_says_why(tmp_path, case):
    text, why = HOSTILE[case]
    path = damaged(tmp_path, text)
    assert load_run(path.parent)[0] is None and results.read_run(path.parent) is None
    ((found, said),) = damage(tmp_path)
    assert found == path and why in said, said
    assert results.damaged_runs(tmp_path) == [path]
    assert results.record_rows(tmp_path) == []  # nothing of it is read
    results.rebuild_csv(tmp_path)  # (record_rows sorted the rows: "x" beside 1 raised a TypeError)


def test_a_fifo_in_place_of_a_run_file_is_damaged_not_waited_on(tmp_path):
    path = damaged(tmp_path, "")
    path.unlink()
    os.mkfifo(path)
    found = []
    reader = threading.Thread(target=lambda: found.append(load_run(path.parent)), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert found == [(None, "not a regular file")]


def test_every_kept_run_reads_as_rows_serving_points_included():
    """The rule refuses no real result: the kept GPU and CPU runs (training, inference, generate, serving points
    whose samples are requests) all read."""
    folders = [*KEPT.iterdir(), *(ROOT / "gpu" / "cpu-pairs").iterdir()]
    assert all(not damage(d) for d in folders), [damage(d) for d in folders]
    assert any(r["mode"] == "serve" and r["status"] == "ok" for d in folders for r in results.iter_rows(d))


@pytest.mark.parametrize("case", ["ints", "repeat", "huge", "negative"])
def test_a_folder_whose_only_run_is_damaged_is_one_line_and_exit_2(tmp_path, capsys, case):
    old = folder(tmp_path / "old", run_rows("old"))
    new = tmp_path / "new"
    path = damaged(new, HOSTILE[case][0])
    for args, names_it in ((["diff", str(old), str(new)], True), (["history", str(new)], True),
                           (["report", str(new), "--out", str(tmp_path / "report.html")], True),
                           (["history", str(old), "--new", str(new)], True),
                           (["predict", "--from", str(new), "--gpu", "L4"], True)):
        done = bench_here(capsys, *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, (args, done.stderr)
        assert "REGRESSION" not in done.stdout + done.stderr
        if names_it:
            assert str(path.relative_to(new)) in done.stderr and HOSTILE[case][1] in done.stderr, (args, done.stderr)


def test_a_damaged_run_beside_good_ones_is_named_and_left_out_never_a_regression(tmp_path, capsys):
    """An ok row with a negative throughput was 'fails now, REGRESSION' in bench diff and the gate."""
    history = [folder(tmp_path / f"day{d}", run_rows(f"day{d}", day=d)) for d in (1, 2, 3, 4)]
    old = history[-1]
    new = folder(tmp_path / "new", run_rows("good", day=5))
    path = new / "runs" / "bad" / "rows.json"
    path.parent.mkdir()
    path.write_text(HOSTILE["negative"][0])

    done = bench_here(capsys, "diff", str(old), str(new))
    assert done.returncode == 0 and "REGRESSION" not in done.stdout, (done.stdout, done.stderr)
    assert "1 run file(s) could not be read as rows" in done.stderr and "Traceback" not in done.stderr

    done = bench_here(capsys, "history", *map(str, history), "--new", str(new))
    assert done.returncode == 0 and "REGRESSION" not in done.stdout, (done.stdout, done.stderr)
    assert f"bench history: note: {path} is damaged (row 1: status is ok but throughput is -5.0" in done.stderr

    done = bench_here(capsys, "predict", "--from", str(new), "--gpu", "L4")
    assert done.returncode == 0 and f"bench predict: note: {path} is damaged (row 1: " in done.stdout, done.stdout


def test_history_reads_the_run_files_not_a_results_csv_edited_since(tmp_path):
    night = folder(tmp_path / "night", run_rows("night"))
    csv_path = night / "results.csv"
    text = csv_path.read_text()
    csv_path.write_text(text.replace(str(SPEED), str(SPEED / 2)))  # a hand edit: newer than the run file
    assert str(SPEED / 2) in csv_path.read_text()
    (run,) = read_history([night]).runs.to_dict("records")
    assert run["value"] == pytest.approx(SPEED, rel=0.02)  # what bench diff reads: the run file


def test_a_run_without_a_readable_timestamp_is_said_with_its_folder(tmp_path, capsys):
    history = [folder(tmp_path / f"day{d}", run_rows(f"day{d}", day=d)) for d in (1, 2, 3)]
    undated = folder(tmp_path / "undated", run_rows("undated", timestamp="yesterday"))
    done = bench_here(capsys, "history", *map(str, history), str(undated))
    assert done.returncode == 0, done.stderr
    assert (f"bench history: note: {undated}: 1 run(s) whose rows have no readable timestamp, left out of the trend "
            "and the gate; allowed: timestamp as ISO 8601") in done.stderr
    done = bench_here(capsys, "history", *map(str, history), "--new", str(undated))
    assert done.returncode == 2 and "re-measure" not in done.stdout + done.stderr, (done.stdout, done.stderr)
    assert "no timestamp (the new runs' rows have no readable timestamp; allowed: ISO 8601" in done.stderr


def test_a_gpu_with_no_spec_sheet_is_refused_not_predicted(tmp_path, capsys):
    """Its memory was taken as infinitely fast: a memory-bound row came out several times off, with the
    published pairs' 80 % interval beside it."""
    foo = folder(tmp_path / "foo", run_rows("foo", device_name="Foo GPU 9000", gpu_name="Foo GPU 9000"))
    for args in (["predict", "--from", str(foo), "--gpu", "L4"],
                 ["predict", "--from", str(foo), "--against", str(KEPT / "h200-2026-11-27-b")]):
        done = bench_here(capsys, *args)
        assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, (args, done.stderr)
        assert ("from: 'Foo GPU 9000' has no spec sheet" in done.stderr and "GPUs with one: " in done.stderr
                and "H100-SXM5-80GB" in done.stderr), done.stderr
    # The report's Predicted GPUs section (predict_rows): no row, a note saying why.
    rows, notes = predict_rows(list(results.iter_rows(foo)), [spec("L4")])
    assert rows == [] and len(notes) == 1 and "'Foo GPU 9000' has no spec sheet" in notes[0]
