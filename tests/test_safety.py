"""Nothing measured is lost: outputs checked before measuring, finished repeats kept on SIGTERM,
no process left behind, full disks and damaged files said in one line. Real commands, real
signals, real files; a real read-only or full filesystem where this test may mount one."""
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from bench_core import results
from bench_core.results.store import damage
from conftest import bench_here, sigint_at_default

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--model", "resnet18", "--width", "32", "--height", "32", "--batch-size", "2", "--device", "cpu"]


@contextlib.contextmanager
def started(*args, env=None, own_group: bool = False) -> Iterator[subprocess.Popen]:
    """`bench ARGS` in a child (`own_group`: in a process group of its own, for signals to the group); killed
    on the way out whatever the test found."""
    proc = subprocess.Popen([sys.executable, "-m", "bench_core", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
                            start_new_session=own_group)
    try:
        yield proc
    finally:
        proc.kill()


def terminate(proc: subprocess.Popen) -> tuple[str, str]:
    """SIGTERM, as SLURM, Kubernetes and `timeout` send it; then all the command printed."""
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=120)


def wait_for_line(proc: subprocess.Popen, needle: str, count: int = 1, timeout_s: float = 240) -> list[str]:
    seen, lines, deadline = 0, [], time.monotonic() + timeout_s
    while seen < count:
        assert time.monotonic() < deadline, f"no {needle!r} within {timeout_s} s: {lines[-5:]}"
        line = proc.stderr.readline()
        assert line, f"the command ended before {needle!r}: {lines[-5:]}"
        lines.append(line)
        seen += needle in line
    return lines


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture
def mount_tmpfs(tmp_path):
    """Mount a real tmpfs (size=..., or ro) under tmp_path; skip where this user may not mount."""
    mounted = []

    def mount(name: str, options: str) -> Path:
        target = tmp_path / name
        target.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
        mounted.append(target)
        return target
    yield mount
    for target in mounted:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


# -- sweep files that are not what they seem ------------------------------------------------------

def test_a_key_given_twice_is_an_error_naming_the_file_line_and_key(tmp_path, capsys):
    sweep = tmp_path / "twice.yaml"
    sweep.write_text("name: twice\ngrid:\n  model: [resnet18]\n  precision: [fp32]\n  model: [vgg16]\n")
    done = bench_here(capsys, "sweep", str(sweep), "--dry-run")
    assert done.returncode == 2
    line = one_error_line(done)
    assert str(sweep) in line and "'model' is given twice (lines 3 and 5)" in line


def test_a_sweep_file_that_is_not_utf8_is_one_line(tmp_path, capsys):
    sweep = tmp_path / "latin1.yaml"
    sweep.write_bytes("name: x\ngrid:\n  model: [r\u00e9snet]\n".encode("latin-1"))
    done = bench_here(capsys, "sweep", str(sweep), "--dry-run")
    assert done.returncode == 2
    assert one_error_line(done).endswith(f"{sweep} is not UTF-8 text (byte 0xe9 at line 3); save it as UTF-8")


def test_an_empty_grid_is_refused_rather_than_run_as_pure_defaults(tmp_path, capsys):
    sweep = tmp_path / "empty.yaml"
    sweep.write_text("name: empty\ngrid: {}\n")
    done = bench_here(capsys, "sweep", str(sweep), "--dry-run")
    assert done.returncode == 2 and "grid: is empty" in one_error_line(done)


# -- outputs checked before anything is measured ---------------------------------------------------

@pytest.mark.parametrize("command", [
    ["run", *TINY, "--out", "{file}/x"],
    ["sweep", str(ROOT / "params" / "cpu-quick.yaml"), "--out", "{file}"],
    ["find-batch", *TINY, "--out", "{file}"],
    ["compare", *TINY, "--b", "precision=bf16", "--out", "{file}"],
])
def test_an_output_that_cannot_hold_results_stops_before_measuring(tmp_path, capsys, command):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = bench_here(capsys, *[part.replace("{file}", str(blocker)) for part in command])
    assert done.returncode == 2
    assert "out: cannot write results to" in one_error_line(done) and str(blocker) in done.stderr
    assert blocker.read_text() == "not a folder" and list(tmp_path.iterdir()) == [blocker]
    assert done.stdout == ""  # nothing measured, nothing printed


def test_a_read_only_filesystem_is_refused_up_front(mount_tmpfs, capsys):
    read_only = mount_tmpfs("ro", "ro")
    done = bench_here(capsys, "run", *TINY, "--out", str(read_only / "results"))
    assert done.returncode == 2
    assert one_error_line(done).endswith(f"cannot write results to {read_only / 'results'}: Read-only file system")


def test_report_output_under_a_file_is_one_line(tmp_path, capsys):
    rows = tmp_path / "rows"
    results.write_run(rows, "r", [results.make_row(run_id="r", repeat=0, status="ok")])
    (tmp_path / "f").write_text("x")
    done = bench_here(capsys, "report", str(rows), "--out", str(tmp_path / "f" / "report.html"))
    assert done.returncode == 2 and "cannot write results to" in one_error_line(done)


# -- a full disk after measuring -------------------------------------------------------------------

def test_rows_that_cannot_be_written_after_measuring_are_kept_elsewhere(mount_tmpfs, tmp_path, monkeypatch, capsys):
    full = mount_tmpfs("full", "size=4k")  # room for the write probe, not for the rows
    system_tmp = tmp_path / "system-tmp"  # where the rows go instead: the system's temporary folder, this test's own
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    done = bench_here(capsys, "run", *TINY, "--steps", "2", "--repeats", "2", "--min-seconds", "0", "--out", str(full))
    assert done.returncode == 1, done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if "error" in ln]
    assert f"could not write the rows to {full}: No space left on device" in line
    fallback = Path(line.rsplit(" are safe in ", 1)[1])
    assert fallback.parent.parent == system_tmp
    kept = json.loads(fallback.read_text())
    assert [r["status"] for r in kept] == ["ok", "ok"] and kept[0]["samples_per_s"] > 0


@pytest.mark.slow
def test_a_sweep_that_fills_the_disk_says_what_is_safe_and_resumes(mount_tmpfs, tmp_path, capsys):
    full = mount_tmpfs("full", "size=84k")  # the first execution's rows fit, not both executions' (schema 8: 72k-96k do)
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: s\ngrid:\n  seed: [0, 1]\nsettings: {model: resnet18, width: 32, height: 32, "
                     "batch_size: 2, steps: 2, warmup_steps: 1, repeats: 1, min_seconds: 0, device: cpu}\n")
    done = bench_here(capsys, "sweep", str(sweep), "--out", str(full / "o"), "--no-report")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("bench sweep: error:")]
    assert "No space left on device; 1 rows were saved before that" in line and "run the same command" in line


# -- signals ---------------------------------------------------------------------------------------

def test_sigterm_keeps_the_finished_repeats_of_a_run(tmp_path):
    out = tmp_path / "out"
    with started("run", *TINY, "--repeats", "5", "--min-seconds", "1", "--out", str(out)) as proc:
        wait_for_line(proc, "images/s [ok", count=2)  # [ok] or, on a busy machine, [ok, DISTURBED: ...]
        stdout, stderr = terminate(proc)
    assert proc.returncode == 143, stderr[-2000:]
    assert stderr.strip().splitlines()[-1].startswith("bench run: interrupted (SIGTERM); ")
    rows = list(results.iter_rows(out))
    statuses = [r["status"] for r in sorted(rows, key=lambda r: r["repeat"])]
    assert statuses[-1] == "interrupted" and statuses.count("ok") >= 2 and len(statuses) <= 5
    assert len({r["run_id"] for r in rows}) == 1  # one run: its finished repeats and where it stopped


def test_sigterm_to_a_multi_process_run_leaves_no_process(tmp_path):
    work = tmp_path / "launches"
    with started("run", *TINY, "--nproc-per-node", "2", "--repeats", "50", "--min-seconds", "1",
                 env={"BENCH_DIST_WORKDIR": str(work)}) as proc:
        wait_for_line(proc, "warm-up")
        stdout, stderr = terminate(proc)
    assert proc.returncode == 143, stderr[-2000:]
    left = _left_behind(work)
    assert left == [], [p.cmdline() for p in left]  # torchrun and both workers are gone


@pytest.mark.slow
def test_sigterm_to_a_sweep_exits_143_and_stops_its_kernel(tmp_path):
    sweep = tmp_path / "long.yaml"
    sweep.write_text("name: long\ngrid:\n  seed: [0]\nsettings: {model: resnet18, width: 32, height: 32, "
                     "batch_size: 2, steps: 2, warmup_steps: 1, repeats: 3, min_seconds: 120, device: cpu}\n")
    out = tmp_path / "out"
    with started("sweep", str(sweep), "--out", str(out), "--no-report", own_group=True) as proc:
        deadline = time.monotonic() + 240
        while not list(out.glob("runs/*/benchmark.ipynb")) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)  # the kernel is up and measuring
        os.killpg(proc.pid, signal.SIGTERM)  # as `timeout` sends it: the process, then its group (issue 62)
        stdout, stderr = terminate(proc)
    assert proc.returncode == 143, stderr[-2000:]
    assert stdout.strip().splitlines()[-1].startswith("bench sweep: interrupted (SIGTERM);")
    assert [r["status"] for r in results.iter_rows(out)] == ["interrupted"]
    left = _left_behind(out)
    assert left == [], [p.cmdline() for p in left]  # the papermill child and its kernel are gone


def busy_for(proc: subprocess.Popen, cpu_s: float) -> None:
    """Wait until `proc` has spent `cpu_s` more CPU seconds (threads included): well inside its work."""
    watched = psutil.Process(proc.pid)
    start = sum(watched.cpu_times()[:2])
    while sum(watched.cpu_times()[:2]) - start < cpu_s:
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        time.sleep(0.1)


# One attention call over a 131,072-token sequence on one thread: minutes inside a single torch op,
# where Python runs no signal handler, in a few tens of MB.
STUCK_IN_ONE_OP = """
import sys, torch
from bench_core.errors import sigterm_as_interrupt, when_stuck
torch.set_num_threads(1)
q = torch.randn(1, 1, 131072, 64)
def record(exc):
    open(sys.argv[1], "w").write(type(exc).__name__)
with sigterm_as_interrupt(), when_stuck(record):
    print("inside", file=sys.stderr, flush=True)
    torch.nn.functional.scaled_dot_product_attention(q, q, q)
    print("the op returned", file=sys.stderr, flush=True)
"""


@pytest.mark.parametrize("sig, code, exc", [(signal.SIGTERM, 143, "Terminated"), (signal.SIGINT, 130, "KeyboardInterrupt")])
def test_a_signal_stops_a_process_stuck_in_one_long_torch_op_and_its_clean_up_runs(tmp_path, sig, code, exc):
    """The watchdog acts for a main thread that cannot take the signal: the block's when_stuck
    clean-up runs (in bench run: the rows recorded), then the process ends with 128 + signal."""
    record = tmp_path / "record"
    proc = subprocess.Popen([sys.executable, "-c", STUCK_IN_ONE_OP, str(record)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_at_default)
    try:
        wait_for_line(proc, "inside")
        busy_for(proc, 1.0)  # in the attention call
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)  # the op alone runs for minutes
    finally:
        proc.kill()
    assert proc.returncode == code, stderr[-2000:]
    assert "inside a long operation: stopping without waiting" in stderr and "the op returned" not in stderr
    assert record.read_text() == exc


def test_sigterm_in_a_long_warm_up_step_ends_the_run_at_once_with_its_row_after_a_warning(tmp_path):
    """llama-tiny at a 131,000-token prompt: its position limit allows it, a step takes many
    minutes. The run says so before its first step, and SIGTERM inside that step ends it with 143
    and the interrupted row recorded (it used to wait for the step: over a minute at 65,536)."""
    out = tmp_path / "out"
    with started("run", "--model", "llama-tiny", "--mode", "generate", "--prompt-len", "131000", "--new-tokens", "2",
                 "--batch-size", "1", "--device", "cpu", "--out", str(out)) as proc:
        before = wait_for_line(proc, ": warm-up")
        busy_for(proc, 2.0)
        stdout, stderr = terminate(proc)  # communicate(timeout=120)
    assert proc.returncode == 143, stderr[-2000:]
    (warning,) = [line for line in before if "warning:" in line]
    assert "the warm-up alone (6 steps) will take at least" in warning and "FLOPs at the device's peak" in warning
    assert stderr.strip().splitlines()[-1].startswith("bench run: interrupted (SIGTERM); 0 of 3 repeats")
    (row,) = results.iter_rows(out)
    assert row["status"] == "interrupted" and "SIGTERM" in row["message"]


def _left_behind(folder: Path, timeout_s: float = 15) -> list[psutil.Process]:
    """What still runs for `folder` once the processes have had `timeout_s` to go."""
    deadline = time.monotonic() + timeout_s
    while (left := _processes_mentioning(folder)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _processes_mentioning(folder: Path) -> list[psutil.Process]:
    """Live processes whose command line names `folder` or that work inside it (kernels do)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and (str(folder) in " ".join(proc.cmdline())
                                                          or Path(proc.cwd()).is_relative_to(folder)):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


# -- results rebuilt from the run files --------------------------------------------------------------

@pytest.mark.slow
def test_report_trusts_the_run_files_and_flags_impossible_numbers(tmp_path, capsys):
    out = tmp_path / "res"
    assert bench_here(capsys, "run", *TINY, "--steps", "2", "--repeats", "2", "--min-seconds", "0",
                      "--out", str(out)).returncode == 0
    (good,) = out.glob("runs/*/rows.json")
    negative = json.loads(good.read_text())[:1]
    negative[0].update(run_id="negative", samples_per_s=-5.0)
    results.write_run(out, "negative", negative)
    torn = out / "runs" / "torn" / "rows.json"
    torn.parent.mkdir()
    torn.write_text(good.read_text()[:300])
    (out / "results.csv").write_bytes(b"garbage\x00,,\n")

    done = bench_here(capsys, "report", str(out))
    assert done.returncode == 0, done.stderr
    warnings = done.stderr.strip().splitlines()
    assert any(str(torn) in w and "damaged" in w for w in warnings)
    # An ok row whose throughput cannot have been measured was edited or corrupted: its run is damaged too, named
    # with the column and what it allows, and left out of every table, chart and comparison.
    negative_file = out / "runs" / "negative" / "rows.json"
    assert any(str(negative_file) in w and "damaged" in w and "samples_per_s is -5.0" in w for w in warnings), warnings
    # A report writes nothing into what it reads: results.csv is still the garbage, and the report
    # shows every intact run (the record) and says that results.csv disagrees with them.
    assert (out / "results.csv").read_bytes() == b"garbage\x00,,\n"
    assert len(list(results.iter_rows(out))) == 2
    assert dict(damage(out))[negative_file].startswith("row 1: status is ok but samples_per_s is -5.0")
    html = (out / "report.html").read_text()
    # The page says why that run is left out, and the figure appears nowhere else (no table, chart or comparison)
    assert "runs/negative/rows.json: row 1: status is ok but samples_per_s is -5.0" in html and html.count("-5.0") == 1
    assert "this report reads the run files (the record); results.csv is left as it is" in html
    assert "RuntimeWarning" not in html and str(ROOT) not in html and ".venv" not in html
