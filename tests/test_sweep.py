"""`bench sweep`: a tiny sweep runs end to end through papermill, re-runs skip what is complete,
--force re-runs, and bad sweep files are refused before anything runs."""
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import nbformat
import pandas as pd
import papermill
import pytest
import yaml

from bench_core import cli
from bench_core.config import BenchConfig, ConfigError
from bench_core.sweep.execute import find_template
from bench_core.sweep.plan import load_sweep
from bench_core.sweep.notebook import expand_configurations
from bench_captured import bench_captured
from conftest import bench_here

ROOT = Path(__file__).resolve().parents[1]
TINY_SETTINGS = {"model": "resnet18", "width": 32, "height": 32, "batch_size": 2, "steps": 2, "warmup_steps": 1,
                 "repeats": 1, "min_seconds": 0, "device": "cpu"}


def write_sweep(folder: Path, name: str, grid: dict, **settings) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "grid": grid, "settings": {**TINY_SETTINGS, **settings}}))
    return path


def run_rows(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "results.csv")


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    """Two configurations (train and infer of resnet18 at 32 px) in one papermill execution, with report; the sweep
    runs in this process, its output captured as a log has it (not a terminal)."""
    folder = tmp_path_factory.mktemp("sweep")
    path = write_sweep(folder, "tiny", {"mode": ["train", "infer"]})
    out = folder / "out"
    done = bench_captured("sweep", str(path), "--out", str(out))
    return path, out, done


@pytest.mark.slow
def test_tiny_sweep_runs_end_to_end(tiny_sweep):
    path, out, done = tiny_sweep
    assert done.returncode == 0, done.stderr[-2000:]
    rows = run_rows(out)
    assert sorted(rows["mode"]) == ["infer", "train"]
    assert (rows["status"] == "ok").all() and (rows["samples_per_s"] > 0).all()
    # The sweep's own parameters and environment are saved beside the rows.
    assert yaml.safe_load((out / "sweep.yaml").read_text())["grid"] == {"mode": ["train", "infer"]}
    assert json.loads((out / "environment.json").read_text())["torch_version"]
    notebooks = list(out.glob("runs/*/benchmark.ipynb"))
    assert len(notebooks) == 1
    nb = nbformat.read(notebooks[0], as_version=4)
    assert not any(o.get("output_type") == "error" for c in nb.cells for o in c.get("outputs", []))
    assert not any(o.get("name") == "stderr" for c in nb.cells for o in c.get("outputs", []))  # no red boxes
    assert any("injected-parameters" in c.metadata.get("tags", []) for c in nb.cells)
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))  # the plot, as an
    # untrusted notebook in JupyterLab shows it
    # The rows carry the hashes of the configurations the sweep planned.
    planned = {cfg.config_hash() for cfg in load_sweep(path).configs}
    assert set(rows["config_hash"]) == planned
    summary = done.stdout.strip().splitlines()[-1]
    assert "2 complete" in summary and "0 failed" in summary
    assert (out / "report.html").is_file() and f"report: {out / 'report.html'}" in done.stdout


@pytest.mark.slow
def test_a_sweep_logs_plain_progress_lines_with_the_last_throughput(tiny_sweep):
    """Not on a terminal (a CI log): a plain line when the execution starts and one when it ends."""
    path, out, done = tiny_sweep
    assert done.returncode == 0, done.stderr[-2000:]
    assert "\r" not in done.stderr  # no redrawn bar
    lines = [line for line in done.stderr.splitlines() if line.startswith("bench sweep: ")]
    assert "bench sweep: running resnet18 fp32 on cpu; 0/2 configurations done; time left: estimating" in lines
    assert any(re.fullmatch(r"bench sweep: finished resnet18 fp32 on cpu in \d+ (s|min); 2/2 configurations done; "
                            r"last resnet18 fp32 (train|infer) bs 2: [\d.,]+ images/s"
                            # a busy machine (another job) marks the figure: shown, and said to be disturbed
                            r"( \[DISTURBED \d/\d: [a-z, -]+\])?", line)
               for line in lines), lines


@pytest.mark.slow
def test_a_sweep_records_where_its_wall_time_went(tiny_sweep):
    """Each cause timed as it happened (issue 61 item 5): the table at the sweep's end and DIR/timing.json."""
    path, out, done = tiny_sweep
    assert done.returncode == 0, done.stderr[-2000:]
    account = json.loads((out / "timing.json").read_text())
    assert (account["executions"], account["configurations"]) == (1, 2)
    seconds = account["seconds"]
    for cause in ("process_start", "papermill_import", "kernel_start", "imports_cell", "build", "first_step",
                  "flop_count", "windows", "report_cells"):  # (warmup_steps 1: the count is the warm-up)
        assert seconds.get(cause, 0) > 0, cause
    assert sum(seconds.values()) == pytest.approx(account["wall_s"], rel=0.02)  # nothing counted twice
    assert seconds["windows"] >= run_rows(out)["timed_s_host"].sum() - 0.01
    measuring = seconds["first_step"] + seconds.get("warmup", 0) + seconds["windows"]
    assert account["overhead_s_per_configuration"] == pytest.approx((account["wall_s"] - measuring) / 2)
    assert "where the sweep's" in done.stderr and re.search(r"overhead .*: [\d.]+ s, [\d.]+ s a configuration",
                                                             done.stderr)


def bench_on_a_terminal(*args: str) -> tuple[int, str]:
    """`bench ARGS` through main in this process with its stderr on a pseudo-terminal 160 columns wide, as in a
    shell: its exit status and what the terminal received. (What decides the redrawn line is the stream's own
    isatty and size, not the process: the command's start, a second torch import, is not what this checks.)"""
    import fcntl
    import pty
    import struct
    import termios
    terminal, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(terminal, 65536)
            except OSError:  # EIO: every writer has closed it
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stream = os.fdopen(side, "w", buffering=1, encoding="utf-8", errors="replace")
    try:
        with contextlib.redirect_stderr(stream), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = cli.main(list(args))
            except SystemExit as stop:
                code = stop.code
    finally:
        stream.close()
    reader.join(timeout=30)
    os.close(terminal)
    return code, b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal is POSIX")
def test_a_sweep_on_a_terminal_redraws_one_line_with_throughput_and_time_left(tmp_path):
    """Two executions: after the first, the line names its throughput and estimates the time left."""
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump({"name": "two", "settings": {**TINY_SETTINGS, "mode": "infer"}, "grid": [
        {"batch_size": 2}, {"model": "mobilenet_v3_large", "batch_size": 4}]}))
    assert len(load_sweep(path).executions) == 2
    status, shown = bench_on_a_terminal("sweep", str(path), "--out", str(tmp_path / "out"), "--no-report")
    assert status == 0, shown[-2000:]
    assert re.search(r"\r(?!\n)", shown), "tqdm redraws its line with a carriage return"
    assert "two: 0/2 configurations" in shown and "two: 2/2 configurations" in shown
    assert "running resnet18 fp32 on cpu; time left: estimating" in shown
    assert re.search(r"about \d+ (s|min) left; last resnet18 fp32 infer bs 2: [\d.,]+ images/s", shown), shown[-2000:]


@pytest.mark.slow
def test_the_template_run_from_notebooks_writes_to_outputs_lab_and_nothing_beside_it(tmp_path, monkeypatch):
    """As in JupyterLab: the kernel's folder is notebooks/, the parameters are the defaults (but a
    tiny workload) and the profiler is on. Rows and profile go to ../outputs/lab, where
    summary.ipynb reads; the notebooks folder keeps only its notebooks."""
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    shutil.copy(find_template(), notebooks / "benchmark.ipynb")
    workload = {key: value for key, value in TINY_SETTINGS.items() if key != "device"}
    monkeypatch.delenv("BENCH_PROFILE_DIR", raising=False)
    papermill.execute_notebook(str(notebooks / "benchmark.ipynb"), str(tmp_path / "executed.ipynb"),
                               parameters={**workload, "mode": "infer", "profile": True}, cwd=str(notebooks),
                               kernel_name="python3", progress_bar=False)
    assert sorted(p.name for p in notebooks.iterdir()) == ["benchmark.ipynb"]
    lab = tmp_path / "outputs" / "lab"
    rows = run_rows(lab)
    assert list(rows["status"]) == ["ok"]
    assert (lab / "profiles" / rows["run_id"][0] / "trace.json").is_file()


@pytest.mark.slow
def test_second_run_skips_both_and_force_reruns(tiny_sweep, capsys):
    path, out, first = tiny_sweep
    assert first.returncode == 0
    before = run_rows(out)
    notebook = next(out.glob("runs/*/benchmark.ipynb"))
    stamp = notebook.stat().st_mtime_ns
    account = (out / "timing.json").read_text()

    again = bench_here(capsys, "sweep", str(path), "--out", str(out), "--no-report")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "0 complete, 2 skipped" in again.stdout
    assert notebook.stat().st_mtime_ns == stamp  # no kernel was started
    assert (out / "timing.json").read_text() == account  # nothing ran: the last sweep's account stays
    assert sorted(run_rows(out)["run_id"]) == sorted(before["run_id"])

    forced = bench_here(capsys, "sweep", str(path), "--out", str(out), "--no-report", "--force")
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert "2 complete, 0 skipped" in forced.stdout
    assert json.loads((out / "timing.json").read_text())["configurations"] == 2 and "where the sweep's" in forced.stderr
    after = run_rows(out)
    assert len(after) == 2 and not set(after["run_id"]) & set(before["run_id"])


BAD_FILES = {
    "unknown top-level key": ("name: x\ngrids:\n  model: [resnet18]\n", "grids"),
    "unknown key in grid": ("name: x\ngrid:\n  modle: [resnet18]\n", "modle"),
    "unknown key in settings": ("name: x\nsettings:\n  batchsize: 4\n", "batchsize"),
    "bad value": ("name: x\ngrid:\n  batch_size: [16, 0]\nsettings:\n  device: cpu\n", "batch_size"),
    "unknown model": ("name: x\ngrid:\n  model: [resnet18, resnet5O]\nsettings:\n  device: cpu\n", "model"),
    "malformed YAML": ("name: x\ngrid: [model: resnet18\n", "sweep"),
    "not a mapping": ("- resnet18\n", "sweep"),
    "empty list": ("name: x\ngrid:\n  precision: []\n", "precision"),
    "bad timeout": ("name: x\ntimeout_s: soon\n", "timeout_s"),
    "bad emulated": ("name: x\nemulated: maybe\n", "emulated"),
    "no runs": ("name: x\nruns: 0\n", "runs"),
    "runs as words": ("name: x\nruns: three\n", "runs"),
    "code in a model name": ("name: x\nsettings:\n  model: 'resnet18\"; import os; os.system(\"touch pwned\") #'\n",
                             "model"),
    "absent device": ("name: x\nsettings:\n  device: cuda:7\n", "device"),
    "batch word": ("name: x\ngrid:\n  batch_size: [16, biggest]\nsettings:\n  device: cpu\n", "batch_size"),
    "max over processes": ("name: x\ngrid:\n  batch_size: [max]\nsettings:\n  device: cpu\n  nproc_per_node: 2\n",
                           "batch_size"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_sweep_file_is_refused_before_anything_runs(case, tmp_path, capsys):
    text, key = BAD_FILES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    out = tmp_path / "out"
    assert cli.main(["sweep", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"bench sweep: error: {key}"), err
    assert not out.exists()
    assert not (tmp_path / "pwned").exists() and not (ROOT / "pwned").exists()


@pytest.mark.slow
def test_batch_size_max_is_a_recorded_search_then_a_run(tmp_path, capsys):
    # resnet18 inference at 32 px, searched up to 2: the first probe is the largest batch the memory estimate
    # fits under the cap (2, in a fresh process), then the run at 2; batch 1 beside it shares the papermill execution. The sweep itself runs in this
    # process (its own start is not what this checks); its execution and probes have their own.
    path = write_sweep(tmp_path, "max", {"batch_size": ["max", 1]}, mode="infer", max_batch_size=2)
    out = tmp_path / "out"
    done = bench_here(capsys, "sweep", str(path), "--out", str(out), "--no-report")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = run_rows(out).set_index("batch_size_requested")
    assert set(rows.index) == {"max", "1"} and (rows["status"] == "ok").all()
    searched = rows.loc["max"]
    assert (searched["batch_size"], searched["batch_size_actual"], searched["global_batch_size"]) == (2, 2, 2)
    assert rows.loc["1", "batch_size_actual"] == 1
    assert searched["batch_search"] == ("batch search: 2 ran, reached the cap max_batch_size 2 (probes: 2 ok; first "
                                        "probe 2 from the memory estimate)")
    assert set(rows["config_hash"]) == {cfg.config_hash() for cfg in load_sweep(path).configs}
    nb = nbformat.read(next(out.glob("runs/*/benchmark.ipynb")), as_version=4)
    shown = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/html", ""))
                    for c in nb.cells for o in c.get("outputs", []))
    assert "find-batch: batch 2: ok" in shown and "2 (max)" in shown and "probes: 2 ok" in shown
    # The configuration as requested (max) is complete: a re-run searches nothing.
    again = bench_here(capsys, "sweep", str(path), "--out", str(out), "--no-report")
    assert again.returncode == 0 and "0 complete, 2 skipped" in again.stdout


def test_shipped_sweep_files_are_valid():
    # gpu-standard.yaml asks for cuda: refused on a CPU-only machine, as it should be.
    for name in ["default", "cpu-quick", "tensorpix", "resnet50-lambda", "unet3d", "batch-sweep"]:
        path = ROOT / "params" / f"{name}.yaml"
        plan = load_sweep(path)
        assert plan.configs and plan.executions, path
        per_device = name in ("default", "cpu-quick")  # (executions: device: every model in one kernel)
        for execution in plan.executions:  # one execution per (device, model), or per device
            assert len({(c.device, None if per_device else c.model) for c in execution.configs}) == 1


def test_executions_per_device_run_every_model_in_one_kernel_and_show_each_configuration(tmp_path, capsys):
    """Issue 67: the CPU quick sweep spent 40 % of its time outside measuring, 10 s an execution of one model
    (process, kernel, imports, tables) for two or three configurations of seconds. `executions: device` runs every
    model of a device in one; the sweep still says each configuration as its rows come, and the timeout is a
    model's."""
    sweep = tmp_path / "two.yaml"
    sweep.write_text(yaml.safe_dump({"name": "two", "executions": "device", "timeout_s": 300,
                                     "grid": {"model": ["resnet18", "mobilenet_v3_large"], "mode": ["train"]},
                                     "settings": TINY_SETTINGS}))
    plan = load_sweep(sweep)
    (execution,) = plan.executions
    assert execution.models == ["resnet18", "mobilenet_v3_large"] and execution.label == "2 models fp32 on cpu"
    proc = bench_here(capsys, "sweep", str(sweep), "--out", str(tmp_path / "out"), "--no-report")
    assert proc.returncode == 0, proc.stderr
    rows = run_rows(tmp_path / "out")
    assert set(rows["model"]) == {"resnet18", "mobilenet_v3_large"} and set(rows["status"]) == {"ok"}
    assert len({Path(p).parent.name for p in (tmp_path / "out" / "runs").glob("*/benchmark.ipynb")}) == 1
    lines = proc.stderr.splitlines()
    assert any("running 2 models fp32 on cpu; 1/2 configurations done; last resnet18 fp32 train" in line
               for line in lines), proc.stderr  # the first model's figure, before the execution ends
    bad = sweep.read_text().replace("executions: device", "executions: each")
    sweep.write_text(bad)
    proc = bench_here(capsys, "sweep", str(sweep), "--dry-run")
    assert proc.returncode == 2 and "executions: got 'each'; allowed: model, device" in proc.stderr




def test_the_default_suite_skips_emulated_bf16_and_says_so(tmp_path, capsys, cpu_kind):
    """Where bf16 is emulated (an AVX2-only CPU, or AVX-512 without bf16) the default suite runs fp32 only;
    --dry-run says why and runs nothing. Where it is native (AMX, Zen 4/5) amp-bf16 is planned too."""
    from bench_core.capability import cpu_support
    from bench_core.workload.precision import resolve_precision
    proc = bench_here(capsys, "sweep", str(ROOT / "params" / "default.yaml"), "--dry-run", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    emulated = cpu_support(resolve_precision("amp-bf16")).level == "emulated"
    # six image models in train and infer, and llama-tiny in train and generate (resnet18's batch curve and
    # channels_last, and the two serving points, are fp32 only)
    for mode, count in (("train", 7), ("infer", 6), ("generate", 1)):
        said = f"amp-bf16 {mode} is emulated on cpu, so its {count} configuration(s) are left out (emulated: skip)"
        assert (said in text) == emulated, text
    planned = "plan: 19 configuration(s) in 1 execution(s)" if emulated else "plan: 33 configuration(s) in 1 execution(s)"
    assert planned in text and re.search(r"fp32 +serve", text) and "min (an estimate" in text
    listed = text.split("note:")[-1].split("\n", 1)[1] if emulated else text
    assert ("amp-bf16" in listed) != emulated  # an execution of it is listed only where it runs natively
    assert not (tmp_path / "out").exists()


def test_dry_run_lists_the_plan_and_writes_nothing(tmp_path, capsys):
    path = write_sweep(tmp_path, "plan", {"mode": ["train", "infer"], "precision": ["fp32"]})
    assert cli.main(["sweep", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "plan: 2 configuration(s) in 1 execution(s) (1 model, 1 precision, 2 modes, 1 device)" in out
    assert "  fp32 train batch 2" in out and "  fp32 infer batch 2" in out
    assert not (tmp_path / "out").exists()


def test_default_picks_cpu_quick_without_a_gpu():
    plan = load_sweep(ROOT / "params" / "default.yaml")
    assert plan.name == "cpu-quick" and "selected cpu-quick.yaml" in plan.notes[0]


def test_grid_list_gives_the_union_and_each_model_is_one_execution(tmp_path):
    path = tmp_path / "union.yaml"
    path.write_text(yaml.safe_dump({"name": "union", "settings": {"device": "cpu", "width": 32, "height": 32}, "grid": [
        {"model": "resnet18", "mode": ["train", "infer"], "batch_size": [2, 4]},
        {"model": "mobilenet_v3_large", "mode": "train", "batch_size": 2},
        {"model": "mobilenet_v3_large", "mode": "infer", "batch_size": 8}]}))
    plan = load_sweep(path)
    assert len(plan.configs) == 6
    sizes = sorted(len(e.configs) for e in plan.executions)
    assert sizes == [2, 4]  # resnet18: 2 modes x 2 sizes share a kernel; mobilenet's train at 2 and infer at 8 too
    assert len({e.run_name for e in plan.executions}) == 2


def test_runs_measure_each_execution_in_its_own_run_folder_in_turn(tmp_path, capsys):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"name": "runs", "runs": 3, "settings": {"device": "cpu", "width": 32, "height": 32},
                                    "grid": {"model": ["resnet18", "mobilenet_v3_large"], "mode": ["train", "infer"]}}))
    plan = load_sweep(path)
    assert plan.runs == 3 and len(plan.configs) == 4 and plan.measurements == 12
    names = [e.run_name for e in plan.executions]
    assert len(set(names)) == 6 and names[2] == names[0] + "-run2" and names[5] == names[1] + "-run3"  # in turn
    # --runs replaces the file's runs; the first run keeps its plain name, so an earlier single run counts
    assert cli.main(["sweep", str(path), "--runs", "2", "--dry-run", "--out", str(tmp_path / "out")]) == 0
    assert "4 configuration(s), each in 2 separate runs in 4 execution(s)" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_every_configuration_of_one_model_shares_its_execution_and_the_template_gets_the_exact_list(tmp_path):
    path = tmp_path / "prec.yaml"
    path.write_text(yaml.safe_dump({"name": "prec", "settings": {"device": "cpu", "width": 32, "height": 32}, "grid": [
        {"model": "resnet18", "precision": ["fp32", "amp-bf16"], "mode": ["train", "infer"]},
        {"model": "mobilenet_v3_large", "precision": "fp32", "mode": ["train", "infer"]},
        {"model": "mobilenet_v3_large", "precision": "bf16", "mode": "infer"}]}))
    plan = load_sweep(path)
    by_model = {}
    for execution in plan.executions:
        by_model.setdefault(execution.configs[0].model, []).append(execution)
    (resnet,) = by_model["resnet18"]  # 2 precisions x 2 modes: one kernel
    assert sorted((c.precision, c.mode) for c in resnet.configs) == [
        ("amp-bf16", "infer"), ("amp-bf16", "train"), ("fp32", "infer"), ("fp32", "train")]
    assert resnet.label == "resnet18 fp32/amp-bf16 on cpu"
    # fp32 train+infer and bf16 infer alone are no product, yet one kernel: the template gets the exact list
    (mobilenet,) = by_model["mobilenet_v3_large"]
    parameters = mobilenet.parameters(tmp_path, False)
    assert parameters["precision"] == "fp32" and parameters["mode"] == "train"
    assert parameters["configurations"] == [{}, {"mode": "infer"}, {"mode": "infer", "precision": "bf16"}]
    expanded = expand_configurations({k: v for k, v in parameters.items() if k in BenchConfig.field_names()},
                                     parameters["configurations"])
    assert [c.config_hash() for c in expanded] == [c.config_hash() for c in mobilenet.configs]


def test_template_parameters_mirror_benchconfig():
    template = find_template()
    assert template == ROOT / "notebooks" / "benchmark.ipynb"
    params = papermill.inspect_notebook(str(template))
    for name in BenchConfig.field_names() + ["out_dir", "run_name", "force", "configurations"]:
        assert name in params and params[name]["help"], name
        assert params[name]["inferred_type_name"] != "None", name
    nb = nbformat.read(template, as_version=4)
    assert nb.cells[0].cell_type == "markdown"  # the intro comes first
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)  # committed without outputs
    lines = [line.strip() for c in code for line in c.source.splitlines()]
    assert not any(line.startswith(("for ", "while ")) for line in lines)  # loops live in bench_core


def test_notebook_parameters_expand_lists_and_refuse_unknown_names(tmp_path):
    from bench_core.sweep import notebook
    namespace = {**TINY_SETTINGS, "mode": ["train", "infer"], "batch_size": [2, 4], "out_dir": str(tmp_path),
                 "run_name": "r1", "force": False, "pd": pd, "In": [], "_": None}
    plan = notebook.from_parameters(namespace)
    assert [(c.mode, c.batch_size) for c in plan.configs] == [("train", 2), ("train", 4), ("infer", 2), ("infer", 4)]
    assert plan.run_dir == tmp_path / "runs" / "r1"
    with pytest.raises(ConfigError, match="^warmup: unknown key in notebook parameters .*warmup_steps"):
        notebook.from_parameters({**namespace, "warmup": 3})
    with pytest.raises(ConfigError, match="^run_name: "):
        notebook.from_parameters({**namespace, "run_name": "../escape"})


@pytest.mark.slow
def test_a_typo_in_notebook_parameters_fails_loudly(tmp_path):
    with pytest.raises(papermill.PapermillExecutionError) as failure:
        papermill.execute_notebook(str(find_template()), str(tmp_path / "out.ipynb"), kernel_name="python3",
                                   parameters={"batchsize": 4, "out_dir": str(tmp_path)}, progress_bar=False)
    assert failure.value.ename == "ConfigError"
    assert failure.value.evalue.startswith("batchsize: unknown key") and "batch_size" in failure.value.evalue
    assert not (tmp_path / "runs").exists()
