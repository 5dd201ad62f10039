"""A sweep's estimate is for an idle machine, and a busy machine says so: beside another process, `bench sweep`
(and its --dry-run) says the machine is busy before it starts, and a sweep that ran beside other processes
says in its last line what the estimate was and how many of its repeats were disturbed."""
from pathlib import Path

from bench_core import results
from bench_core.results.rows import failure_row
from bench_core.sweep.execute import against_estimate
from bench_core.sweep.plan import estimate_seconds, load_sweep
from conftest import bench_here, cpu_hog, tiny

ROOT = Path(__file__).resolve().parents[1]


def test_the_dry_run_beside_another_process_says_the_machine_is_busy(capsys):
    with cpu_hog():
        done = bench_here(capsys, "sweep", str(ROOT / "params" / "ci-gate.yaml"), "--dry-run")
    assert done.returncode == 0
    note = next(line for line in done.stdout.splitlines() if "this machine is busy" in line)
    assert "other processes are using" in note and "the estimate is for an idle machine" in note


def test_a_sweep_that_ran_beside_other_processes_says_its_estimate_and_its_disturbed_repeats(tmp_path):
    plan = load_sweep(ROOT / "params" / "ci-gate.yaml")
    execution = plan.executions[0]
    row = {**failure_row({**tiny().to_dict(), "run_id": "r", "config_hash": "h"}, "ok", ""),
           "samples_per_s": 10.0, "noise_flags": "other-processes-on-cpu(0.94 cores)"}
    results.write_run(tmp_path, execution.run_name, [row, {**row, "repeat": 1}])
    estimated = estimate_seconds(plan) / 60
    text = against_estimate(plan, tmp_path, minutes=estimated * 3)
    assert text == (f" (estimated {estimated:.1f} min, for an idle machine; 2 of 2 repeats were disturbed "
                    "(other-processes-on-cpu): re-measure on a quiet machine)")
    assert against_estimate(plan, tmp_path / "nothing", minutes=estimated) == ""  # as estimated, nothing disturbed
