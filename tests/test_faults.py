"""Faults injected for real into `bench sweep` (issue 6): SIGKILL of the sweep, Ctrl-C, a second
sweep into the same directory, a failing cell, a dead kernel, a hung execution, and bad sweep
files of every shape. Each checks that nothing completed is lost and that the user is told."""
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pandas as pd
import psutil
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_core import results
from bench_core.config import BenchConfig, ConfigError
from bench_core.config.sweepfile import SWEEP_KEYS
from bench_core.sweep.execute import find_template
from bench_core.sweep.plan import load_sweep, parse_sweep
from bench_captured import bench_captured
from conftest import bench_here, sigint_at_default

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.waits  # a hung execution's timeout, a kernel's death: mostly waiting
TINY = {"model": "resnet18", "width": 32, "height": 32, "batch_size": 2, "steps": 2, "warmup_steps": 1,
        "repeats": 1, "min_seconds": 0, "device": "cpu", "mode": "infer"}


def write_sweep(path: Path, grid, timeout_s=None, **settings) -> Path:
    data = {"name": path.stem, "grid": grid, "settings": {**TINY, **settings}}
    if timeout_s:
        data["timeout_s"] = timeout_s
    path.write_text(yaml.safe_dump(data))
    return path


def start_sweep(*args: str) -> subprocess.Popen:
    """`bench sweep ARGS` as a terminal's foreground command starts: with Ctrl-C's SIGINT at its default."""
    return subprocess.Popen([sys.executable, "-m", "bench_core", "sweep", *args, "--no-report"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_at_default)


def processes_in(folder: Path) -> list[psutil.Process]:
    """Processes (kernels, papermill children) whose working directory is inside `folder`."""
    found = []
    for proc in psutil.process_iter():
        try:
            if Path(proc.cwd()).is_relative_to(folder):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def wait_for(condition, timeout_s: float = 240, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def wait_until_gone(folder: Path, timeout_s: float = 15) -> list:
    deadline = time.monotonic() + timeout_s
    while processes_in(folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    return processes_in(folder)


def run_dirs(out: Path, plan_path: Path) -> list[Path]:
    return [out / "runs" / e.run_name for e in load_sweep(plan_path).executions]


def statuses(run_dir: Path) -> list[str]:
    return [r["status"] for r in results.read_run(run_dir) or []]


def _csv_rows(out: Path) -> int:
    try:
        return len(pd.read_csv(out / "results.csv"))
    except (OSError, ValueError):
        return 0


def assert_store_intact(out: Path) -> pd.DataFrame:
    """Every rows.json parses and results.csv is exactly their rows: nothing truncated or lost."""
    from_json = [row for rows_file in out.glob("runs/*/rows.json") for row in json.loads(rows_file.read_text())]
    table = pd.read_csv(out / "results.csv")
    assert sorted(table["run_id"]) == sorted(r["run_id"] for r in from_json)
    return table


@pytest.mark.slow
def test_sigkill_of_the_sweep_then_rerun_finishes_the_rest(tmp_path, capsys):
    # Two executions (one per model); the second runs infer then train, the train windows 1 s each.
    sweep = write_sweep(tmp_path / "killed.yaml", [
        {"model": ["resnet18"]}, {"model": ["mobilenet_v3_large"], "mode": ["infer"], "repeats": 2},
        {"model": ["mobilenet_v3_large"], "mode": ["train"], "min_seconds": 1, "repeats": 2}])
    out = tmp_path / "out"
    first, second = run_dirs(out, sweep)
    proc = start_sweep(str(sweep), "--out", str(out))
    try:
        # Kill the sweep while the second execution measures its second configuration.
        # (rows.json is written first, results.csv rebuilt from it just after: wait for both)
        wait_for(lambda: statuses(first) == ["ok"] and statuses(second) == ["ok", "ok"] and
                 _csv_rows(out) == 3, what="infer rows")
        proc.kill()  # SIGKILL: no clean-up code runs in the sweep
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    # The papermill child dies with the sweep and the kernel with it: nothing keeps measuring.
    assert wait_until_gone(tmp_path) == []
    kept_first, kept_infer = results.read_run(first), results.read_run(second)
    assert_store_intact(out)

    again = bench_here(capsys, "sweep", str(sweep), "--out", str(out), "--no-report")
    assert again.returncode == 0, again.stderr[-2000:]
    # The half-finished run directory is recognised and only its missing configuration redone.
    assert f"redo {second.name}: left unfinished by a sweep that was killed; 1 of 2" in again.stderr
    assert "1 complete, 2 skipped" in again.stdout
    assert results.read_run(first) == kept_first  # completed results are untouched
    assert results.read_run(second)[:2] == kept_infer
    table = assert_store_intact(out)
    assert sorted(zip(table["model"], table["mode"])) == [("mobilenet_v3_large", "infer"), ("mobilenet_v3_large", "infer"),
                                                          ("mobilenet_v3_large", "train"), ("mobilenet_v3_large", "train"),
                                                          ("resnet18", "infer")]
    assert (table["status"] == "ok").all()


@pytest.mark.slow
def test_second_sweep_is_refused_and_ctrl_c_stops_cleanly(tmp_path, capsys):
    # The first execution measures for a long time; the second never starts.
    sweep = write_sweep(tmp_path / "stopped.yaml", [{"min_seconds": 120, "mode": ["train", "infer"]},
                                                    {"model": ["mobilenet_v3_large"]}])
    out = tmp_path / "out"
    first, second = run_dirs(out, sweep)
    proc = start_sweep(str(sweep), "--out", str(out))
    try:
        wait_for(lambda: (first / "benchmark.ipynb").exists(), what="first execution")
        time.sleep(2)

        # A second sweep into the same directory is refused at once, in one line, writing nothing.
        other = bench_here(capsys, "sweep", str(sweep), "--out", str(out), "--no-report")
        assert other.returncode == 2
        assert other.stderr.strip().splitlines() == [
            f"bench sweep: error: out: {out} is in use by another bench sweep (pid {proc.pid}); "
            "wait for it to finish or choose another --out"]

        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr[-2000:]
    summary = stdout.strip().splitlines()
    assert len(summary) == 1 and summary[0].startswith("bench sweep: interrupted (Ctrl-C);")
    assert "2 failed (2 interrupted)" in summary[0] and "1 not run" in summary[0]
    assert wait_until_gone(tmp_path) == []  # kernel and papermill child terminated
    rows = results.read_run(first)
    assert [r["status"] for r in rows] == ["interrupted", "interrupted"]
    assert "Ctrl-C" in rows[0]["message"]
    assert not second.exists()
    assert len(assert_store_intact(out)) == 2


def template_with(code: str, path: Path) -> Path:
    """The template with a cell of `code` just after its parameters (where papermill injects its own)."""
    nb = nbformat.read(find_template(), as_version=4)
    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(code))
    nbformat.write(nb, path)
    return path


FAULTS = """# fault injection for tests: a failing cell, a dead kernel, a hung cell, a stop from outside (an execution
# per model)
import os, signal, time
if model == "mobilenet_v3_large":
    raise RuntimeError("injected failure")
if model == "torchvision:squeezenet1_0":
    os.kill(os.getpid(), signal.SIGKILL)
if model == "resnet18":
    time.sleep(600)
if model == "resnet50":  # SIGTERM to the papermill process only, as SLURM's scancel or requeue reaches every
    # process of a job at once and that process can end before the sweep's own handler runs
    os.kill(os.getppid(), signal.SIGTERM)"""
# Order: the hang first, so the others show that the sweep went on after a timeout.
FAULTY_MODELS = ["resnet18", "mobilenet_v3_large", "torchvision:squeezenet1_0", "resnet50"]


@pytest.fixture(scope="module")
def faulty_sweep(tmp_path_factory):
    """One sweep whose four executions each end in a fault their model's cell injects (FAULTS), read by the two
    tests below: its folder, sweep file, output directory and bench's exit status and output. In this process:
    the sweep's own start is not what they check. The limit covers a whole execution, kernel start and torch
    import included: 12 s timed out all three on a host loaded ~7x its cores; the hang waits it out asleep,
    costing the other workers nothing."""
    folder = tmp_path_factory.mktemp("faults")
    template = template_with(FAULTS, folder / "faulty.ipynb")
    sweep = write_sweep(folder / "faults.yaml", {"model": FAULTY_MODELS}, timeout_s=25)
    out = folder / "out"
    done = bench_captured("sweep", str(sweep), "--out", str(out), "--template", str(template), "--no-report")
    return folder, sweep, out, done


@pytest.mark.slow
def test_failing_notebook_dead_kernel_and_timeout_become_rows_and_the_sweep_goes_on(faulty_sweep):
    folder, sweep, out, done = faulty_sweep
    hung, failed, died, _ = run_dirs(out, sweep)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "4 failed (1 crashed, 1 error, 1 interrupted, 1 timeout)" in done.stdout.strip().splitlines()[-1]
    assert wait_until_gone(folder) == []  # the hung kernel was killed with its papermill process

    (row,) = results.read_run(hung)
    assert row["status"] == "timeout" and "timeout_s=25" in row["message"]
    (row,) = results.read_run(failed)
    assert row["status"] == "error" and row["message"] == "RuntimeError: injected failure"
    (row,) = results.read_run(died)
    assert row["status"] == "crashed" and "DeadKernelError" in row["message"]
    # Every executed notebook is kept, with a banner saying what happened.
    def banner(run_dir: Path) -> str:
        return nbformat.read(run_dir / "benchmark.ipynb", as_version=4).cells[0].source
    assert "An Exception was encountered" in banner(failed)  # papermill's own error banner
    assert "kernel died" in banner(died) and "timeout_s" in banner(hung)
    table = assert_store_intact(out)
    assert sorted(table["status"]) == ["crashed", "error", "interrupted", "timeout"]
    assert sorted(table["model"]) == sorted(FAULTY_MODELS)
    assert table["host"].notna().all()  # failure rows say where


@pytest.mark.slow
def test_an_execution_stopped_by_sigterm_from_outside_is_interrupted_not_crashed(faulty_sweep):
    folder, sweep, out, done = faulty_sweep
    stopped = run_dirs(out, sweep)[-1]  # the last execution: its cell sent SIGTERM to its papermill process
    assert done.returncode == 1, done.stderr[-2000:]
    (row,) = results.read_run(stopped)
    assert row["status"] == "interrupted" and "SIGTERM" in row["message"]
    assert wait_until_gone(folder) == []


# -- bad input, exhaustively ----------------------------------------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**12), st.text(max_size=12),
                     st.floats(allow_nan=True, allow_infinity=True),
                     st.sampled_from(["resnet18", "vit_b_16", "unet3d", "fp32", "amp-bf16", "16", "train", "infer",
                                      "cpu", "cuda", "auto", "timm:nope", "torchvision:nope", "64", "-1"]))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) |
                       st.dictionaries(st.text(max_size=6), inner, max_size=2), max_leaves=6)
_field_keys = st.sampled_from(BenchConfig.field_names() + ["batchsize", "modle", ""])
_mappings = st.dictionaries(_field_keys, _values | st.lists(_scalars, max_size=3), max_size=4)
_sweeps = st.fixed_dictionaries({}, optional={
    "name": st.one_of(st.text(max_size=10), st.sampled_from(["tiny", "a b", "../up"]), _scalars),
    "grid": st.one_of(_mappings, st.lists(_mappings, max_size=3), _values),
    "settings": st.one_of(_mappings, _values),
    "timeout_s": _scalars,
    "description": _scalars,
}) | st.dictionaries(st.text(max_size=8) | st.sampled_from(SWEEP_KEYS), _values, max_size=4) | _values


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_sweeps)
def test_any_sweep_dict_is_a_plan_or_a_one_line_error_naming_the_key(data):
    try:
        plan = parse_sweep(data)
    except ConfigError as exc:
        for one in getattr(exc, "errors", [exc]):  # a line each, where there are several mistakes (config.mistakes)
            assert "\n" not in str(one) and str(one).startswith(f"{one.field}: ")
            assert one.field and len(one.field) < 120
        return
    # A valid sweep: every configuration is a validated BenchConfig, grouped into executions.
    assert plan.configs and sum(len(e.configs) for e in plan.executions) == len(plan.configs)
    assert all(isinstance(c, BenchConfig) for c in plan.configs)
    assert plan.timeout_s is None or (plan.timeout_s > 0 and math.isfinite(plan.timeout_s))


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200) | st.binary(max_size=80).map(lambda b: b.decode("latin-1")))
def test_any_sweep_file_text_is_a_plan_or_a_one_line_error(tmp_path_factory, text):
    path = tmp_path_factory.getbasetemp() / "fuzz.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        load_sweep(path)
    except ConfigError as exc:
        assert all("\n" not in str(one) and one.field for one in getattr(exc, "errors", [exc]))


def test_parameters_are_validated_before_papermill_injects_them(tmp_path):
    # papermill would write this into a code cell; BenchConfig refuses it first.
    evil = 'resnet18"\nimport os; os.system("touch pwned")\n#'
    with pytest.raises(ConfigError, match="^model: "):
        parse_sweep({"name": "evil", "settings": {"model": evil}})
    with pytest.raises(ConfigError, match="^rdzv_endpoint: "):
        parse_sweep({"name": "evil", "settings": {"rdzv_endpoint": "a:1\nimport os"}})
    # Even a valid plan only passes validated, normalised values.
    plan = parse_sweep({"name": "ok", "settings": {**TINY, "model": " ResNet18 "}})
    assert plan.executions[0].parameters(tmp_path, False)["model"] == "resnet18"
