"""What the harness costs: where a configuration's time goes outside its timed windows (each phase timed
as it happens), what a sweep records of it, and what is paid once per process instead of per configuration."""
import pytest

from bench_core import run_benchmark
from bench_core.run.timing import Phases, parse_phases


@pytest.fixture(scope="module")
def checked_rows():
    """A tiny variant (channels_last: its outputs are checked against fp32 NCHW), two repeats."""
    from tests.conftest import tiny
    rows = run_benchmark(tiny(channels_last=True, repeats=2))
    assert [r["status"] for r in rows] == ["ok", "ok"], rows[0]["message"]
    return rows


def test_each_row_says_where_its_configurations_time_went(checked_rows):
    phases = parse_phases(checked_rows[0]["phase_times_s"])
    for name in ("environment", "memory_estimate", "output_check", "build", "first_step", "flop_count", "warmup",
                 "windows", "window_edges", "release"):
        assert name in phases, (name, checked_rows[0]["phase_times_s"])
    assert all(seconds >= 0 for seconds in phases.values())
    # the same account in every row of the configuration; the windows on the host clock, all repeats
    # (each phase holds its window and the sync before it; the text keeps milliseconds)
    assert checked_rows[1]["phase_times_s"] == checked_rows[0]["phase_times_s"]
    windows = sum(r["timed_s_host"] for r in checked_rows)
    assert windows - 0.002 <= phases["windows"] <= windows + 0.5
    assert phases["first_step"] >= checked_rows[0]["first_step_ms"] / 1e3 - 0.001


def test_a_phase_inside_another_is_counted_once():
    phases = Phases()
    with phases("build"):
        with phases("check"):
            pass
        phases.add("warmup", 5.0)
    assert phases.seconds["warmup"] == 5.0
    assert phases.seconds["build"] < 1.0  # the warm-up inside it is not the build's
    assert parse_phases(phases.text()).keys() == {"build", "check", "warmup"}


def test_the_environment_is_read_once_a_process_and_is_in_every_row(checked_rows, monkeypatch):
    """A sweep's kernel runs many configurations: each asked the package metadata again (and NVML for the
    driver). What cannot change while the process runs is read once; every row still carries it."""
    import torch
    from bench_core.measure import environment, fingerprint
    asked = []  # (the package metadata is read by fingerprint.py, what environment.collect starts from)
    monkeypatch.setattr(fingerprint, "package_version", lambda dist: asked.append(dist))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        env = environment.collect(torch.device("cpu"))
    finally:
        torch.set_num_threads(threads)
    assert asked == []
    assert env["torch_threads"] == 1  # what may change is read each time
    for row in checked_rows:
        assert row["torch_version"] == torch.__version__ and row["torchvision_version"] and row["host"]


def test_a_kernel_that_does_not_serve_does_not_import_the_serving_client():
    """The notebook's imports cell is paid once per sweep execution; aiohttp and the serving session
    cost 0.3-0.5 s of it, and only mode serve needs them."""
    import subprocess
    import sys
    probe = "import sys; from bench_core.sweep import notebook; print(sorted(m for m in ('aiohttp', " \
            "'bench_core.serving.session') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_the_counted_step_is_warm_up_as_long_as_a_plain_step_and_counting_beyond():
    """Issue 67: the FLOP-counting step is one of the warm-up's steps, but all of it was counted as overhead. As
    long as a plain warm-up step took is warm-up; what counting added is the count's own (never below zero)."""
    from tests.conftest import tiny
    row = run_benchmark(tiny(warmup_steps=3))[0]
    phases, step = parse_phases(row["phase_times_s"]), row["warmup_s"] / 2
    assert row["warmup_s"] <= phases["warmup"] <= row["warmup_s"] + step + 0.002  # (milliseconds in the text)
    assert phases["flop_count"] >= 0
    moved = Phases()
    moved.add("flop_count", 0.3)
    moved.move("flop_count", "warmup", 0.5)  # never more than the count took
    assert moved.seconds == {"flop_count": 0.0, "warmup": 0.3}
