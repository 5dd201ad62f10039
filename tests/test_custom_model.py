"""Your own model from your own code (code:<file.py>:<function>): the README's example runs in train and infer
in its own unit with MFU, the memory estimate and the output check; DDP and FSDP2 of it train as one process
does; bad input is one line and exit 2; a model that raises mid-step is a failure row naming the user's line;
two versions of the code are one model (the file's hash a column), and reading their results never imports
the code."""
import csv
import json
import os
import shutil
from pathlib import Path

import pytest

from bench_core import BenchConfig, ConfigError, results, run_benchmark
from bench_core.launch import torchrun
from bench_core.summary.load import load_results
from bench_core.summary.memory_table import estimate_table
from conftest import bench_here

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tiny_segnet.py"
MODEL = f"code:{EXAMPLE}:build"
BRIEF = ["--batch-size", "2", "--steps", "2", "--warmup-steps", "2", "--repeats", "1", "--min-seconds", "0",
         "--device", "cpu"]
SMALL = ["--width", "32", "--height", "32", *BRIEF]
LOSS_TOLERANCE = 1e-4  # the same sums in another order (gloo's all-reduce, FSDP's reduce-scatter): float32 rounding


def rows_of(out: Path) -> list[dict]:
    with open(out / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_the_example_trains_and_infers_in_its_own_unit_with_mfu_the_estimate_and_the_output_check(tmp_path, capsys):
    for mode, precision in (("train", "fp32"), ("infer", "bf16")):
        done = bench_here(capsys, "run", "--model", MODEL, "--mode", mode, "--precision", precision, *SMALL,
                          "--out", str(tmp_path))
        assert done.returncode == 0, done.stderr
        assert "images/s" in done.stdout and "code:tiny_segnet.py:build " in done.stdout
    train, infer = rows_of(tmp_path)
    sha = __import__("hashlib").sha256(EXAMPLE.read_bytes()).hexdigest()
    for row in (train, infer):
        assert row["status"] == "ok", row["message"]
        assert row["model"] == "code:tiny_segnet.py:build" and row["task"] == "custom"  # the hash is a column
        assert (row["model_code_path"], row["model_code_sha256"]) == (str(EXAMPLE), sha)
        assert row["throughput_unit"] == "images/s" and row["input_shape"] == "3x32x32"
        assert 0 < float(row["mfu"]) <= 1 and float(row["flops_per_sample"]) > 0
        assert int(row["params_count"]) > 0 and float(row["mem_estimate_bytes"]) > 0
    assert "activations" in train["mem_estimate"]  # counted from what autograd saves, on the meta device
    assert len(train["warmup_losses"].split()) == 3  # first step, FLOP count, one warm-up step
    assert infer["output_check"] == "within tolerance" and float(infer["output_rel_error"]) > 0  # bf16 against fp32 eager


ONE_PROCESS = dict(model=MODEL, width=32, height=32, batch_size=2, steps=2, warmup_steps=2, repeats=1, min_seconds=0,
                   device="cpu", dist_timeout_s=60)


@pytest.fixture(scope="module")
def one_process_of_your_model() -> dict:
    """The one-process run both parallelisms are compared with (the same configuration for each: run once)."""
    (one,) = run_benchmark(BenchConfig(**ONE_PROCESS))
    return one


@pytest.mark.slow
@pytest.mark.parametrize("parallelism", ["ddp", "fsdp"])
def test_two_processes_of_your_model_train_as_one_process_does(parallelism, one_process_of_your_model, tmp_path,
                                                                monkeypatch):
    # Every rank is given the batch its function makes from the seed: two processes at batch 2 average
    # the gradients of two equal halves, which is one process's step at batch 2.
    monkeypatch.setenv(torchrun.WORKDIR_ENV, str(tmp_path))
    one = one_process_of_your_model
    (two,) = run_benchmark(BenchConfig(**ONE_PROCESS, nproc_per_node=2, parallelism=parallelism))
    assert one["status"] == two["status"] == "ok", two["message"]
    assert two["world_size"] == 2 and two["parallelism"] == parallelism
    reference = [float(x) for x in one["warmup_losses"].split()]
    assert reference[-1] < reference[0]  # it trains
    assert [float(x) for x in two["warmup_losses"].split()] == pytest.approx(reference, rel=LOSS_TOLERANCE)


def line_of(text: str) -> int:
    """The line of BAD that holds `text`, as a traceback numbers it."""
    return next(number for number, line in enumerate(BAD.splitlines(), 1) if text in line)


BAD = '''
import argparse
import sys
import torch
from bench_core import UserModel

def raises(batch_size, device, dtype):
    return helper()

def helper():
    raise RuntimeError("no weights here")

def not_a_user_model(batch_size):
    return torch.nn.Linear(2, 2)

def on_the_cpu_whatever_it_is_given(batch_size, device, dtype):
    return UserModel(torch.nn.Linear(4, 2, device="cpu"), torch.randn(batch_size, 4, device="cpu"))

def takes_an_unknown_field(batch_size, size=4):
    return None

def wrong_batch(batch_size, device):
    return UserModel(torch.nn.Linear(4, 2), torch.randn(3, 4))

def fails_in_its_forward(batch_size, device, dtype):
    return UserModel(Broken().to(device), torch.randn(batch_size, 4, device=device, dtype=dtype))

class Broken(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.lin(x[:, :3])

def its_build_exits(batch_size, device, dtype):
    sys.exit(3)

def its_forward_exits(batch_size, device, dtype):
    return UserModel(Exits().to(device), torch.randn(batch_size, 4, device=device, dtype=dtype))

def its_forward_parses_arguments(batch_size, device, dtype):
    return UserModel(ParsesArguments().to(device), torch.randn(batch_size, 4, device=device, dtype=dtype))

def its_forward_interrupts_itself(batch_size, device, dtype):
    return UserModel(InterruptsItself().to(device), torch.randn(batch_size, 4, device=device, dtype=dtype))

class Exits(Broken):
    def forward(self, x):
        sys.exit()

class ParsesArguments(Broken):
    def forward(self, x):
        argparse.ArgumentParser(prog="mylib").parse_args(["--no-such-flag"])

class InterruptsItself(Broken):
    def forward(self, x):
        raise KeyboardInterrupt
'''


@pytest.fixture
def bad(tmp_path) -> Path:
    path = tmp_path / "bad_models.py"
    path.write_text(BAD)
    return path


@pytest.mark.parametrize("ref, field, words", [
    ("{dir}/missing.py:build", "model", "no such file"),
    ("{bad}:nothing", "model", "has no function 'nothing'; its functions: fails_in_its_forward, helper, "),
    ("{bad}", "model", "names no function"),
    ("no_such_module_here:build", "model", "no module 'no_such_module_here'"),
    ("{bad}:raises", "model", f"raises() raised RuntimeError: no weights here (at bad_models.py:{line_of('raise R')} in helper)"),
    ("{bad}:not_a_user_model", "model", "returned Linear; expected UserModel(model, inputs"),
    ("{bad}:on_the_cpu_whatever_it_is_given", "model", "put a parameter on cpu; expected the device it was given, meta"),
    ("{bad}:takes_an_unknown_field", "model", "takes 'size', which is neither given"),
    ("{bad}:wrong_batch", "model", "expected batch_size (2) in its first dimension"),
    ("{bad}:its_build_exits", "model", "its_build_exits() raised SystemExit: exit(3) called (at "
                                        f"bad_models.py:{line_of('sys.exit(3)')} in its_build_exits)"),
    ("{example}:build --seq-len 16", "seq_len", "takes no seq_len; the shape fields it takes: width, height"),
    ("{example}:build --mode generate", "mode", "allowed: train, infer"),
])
def test_bad_input_is_one_line_naming_the_field_exit_2_and_nothing_written(ref, field, words, bad, tmp_path, capsys):
    model, *more = ref.format(dir=tmp_path, bad=bad, example=EXAMPLE).split()
    out = tmp_path / "out"
    done = bench_here(capsys, "run", "--model", f"code:{model}", *more, *BRIEF, "--out", str(out))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"bench run: error: {field}: ") and words in line, line
    assert not out.exists()


def test_a_model_that_raises_in_its_step_is_a_failure_row_naming_the_users_line(bad, tmp_path):
    (row,) = run_benchmark(BenchConfig(model=f"code:{bad}:fails_in_its_forward", batch_size=2, steps=2,
                                       warmup_steps=1, repeats=1, min_seconds=0, device="cpu"))
    assert row["status"] == "error" and row["model"] == "code:bad_models.py:fails_in_its_forward"
    assert row["message"].startswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied")
    assert row["message"].endswith(f"(at bad_models.py:{line_of('self.lin(x[:, :3])')} in forward)")


MALFORMED = {  # name -> (what is there, what the one line says)
    "notes.txt": ("root:x:0:0:root:/root:/bin/bash\n", "notes.txt is not a Python file (.py)"),
    "folder.py": (None, "{path} is a folder, not a Python file"),
    "unreadable.py": ("/proc/self/mem", "cannot read {path}: Input/output error"),  # a symlink: EIO, for root too
    "broken.py": ("def build(:\n", "importing broken.py raised SyntaxError: invalid syntax"),
    "exits_on_import.py": ("import sys\nsys.exit('run me as a script')\n",
                           "importing exits_on_import.py raised SystemExit: run me as a script "
                           "(at exits_on_import.py:2 in <module>)"),
    "not_callable.py": ("build = 3\n", "'build' in not_callable.py is int, not a function"),
    "builtin.py": ("import math\nbuild = math.hypot\n", "build() has no parameters Python can read"),
    "x" * 300 + ".py": ("", "cannot read {path}: File name too long"),
}


@pytest.mark.parametrize("name", list(MALFORMED), ids=lambda name: name[:20])
def test_a_code_spec_that_is_not_a_python_function_is_one_line_naming_the_model(name, tmp_path, capsys):
    """code:models/../../etc/passwd:x gave AttributeError: 'NoneType' object has no attribute 'loader', exit 1."""
    content, says = MALFORMED[name]
    path = tmp_path / name
    if content is None:
        path.mkdir()
    elif content.startswith("/proc/"):
        path.symlink_to(content)
    elif len(name) < 255:
        path.write_text(content)
    out = tmp_path / "out"
    done = bench_here(capsys, "run", "--model", f"code:{path}:build", *BRIEF, "--out", str(out))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("bench run: error: model: code:") and says.format(path=path) in done.stderr, \
        done.stderr
    assert not out.exists()


@pytest.mark.parametrize("function, says, line", [
    ("its_forward_exits", "SystemExit: exit() called", "sys.exit()"),
    ("its_forward_parses_arguments", "SystemExit: exit(2) called", "parse_args("),
    ("its_forward_interrupts_itself", "KeyboardInterrupt: KeyboardInterrupt", "raise KeyboardInterrupt"),
])
def test_a_model_that_exits_in_its_step_is_a_failure_row_naming_the_users_line(bad, tmp_path, capsys, function, says,
                                                                              line):
    """sys.exit(), a library's argument parser, a KeyboardInterrupt of its own: bench run exited 0, no row, no
    word after 'warm-up'. Only Ctrl-C and SIGTERM stop a run."""
    out = tmp_path / "out"
    done = bench_here(capsys, "run", "--model", f"code:{bad}:{function}", *BRIEF, "--out", str(out))
    assert done.returncode == 1, done.stderr
    (row,) = rows_of(out)
    assert row["status"] == "error" and row["message"] == f"{says} (at bad_models.py:{line_of(line)} in forward)"
    assert says in done.stdout


def test_in_a_notebook_a_model_that_exits_is_a_failure_row_too(bad):
    """Where bench's handlers are not installed (a notebook's kernel, a library call), sys.exit() is still a
    failure; a KeyboardInterrupt there is taken for Ctrl-C, as Python takes it."""
    cfg = dict(batch_size=2, steps=2, warmup_steps=1, repeats=1, min_seconds=0, device="cpu")
    (row,) = run_benchmark(BenchConfig(model=f"code:{bad}:its_forward_exits", **cfg))
    assert row["status"] == "error" and row["message"].startswith("SystemExit: exit() called (at bad_models.py:")
    with pytest.raises(KeyboardInterrupt) as stopped:
        run_benchmark(BenchConfig(model=f"code:{bad}:its_forward_interrupts_itself", **cfg))
    assert stopped.value.rows[-1]["status"] == "interrupted"


@pytest.mark.slow
def test_in_a_sweep_a_failing_model_is_its_row_and_the_other_model_still_runs(bad, tmp_path, capsys):
    sweep = tmp_path / "mine.yaml"
    sweep.write_text(f"name: mine\ngrid:\n  - model: ['code:{bad}:fails_in_its_forward']\n"
                     f"  - model: ['code:{EXAMPLE}:build']\n    width: [32]\n    height: [32]\n"
                     "settings: {device: cpu, batch_size: 2, steps: 2, warmup_steps: 1, repeats: 1, min_seconds: 0}\n")
    done = bench_here(capsys, "sweep", str(sweep), "--out", str(tmp_path / "out"), "--no-report")
    assert done.returncode == 1, done.stderr
    by_model = {row["model"]: row for row in rows_of(tmp_path / "out")}
    assert by_model["code:bad_models.py:fails_in_its_forward"]["status"] == "error"
    assert f"(at bad_models.py:{line_of('self.lin(x[:, :3])')} in forward)" in by_model["code:bad_models.py:fails_in_its_forward"]["message"]
    assert by_model["code:tiny_segnet.py:build"]["status"] == "ok"


def test_two_versions_of_the_code_are_one_model_and_reading_results_never_imports_it(tmp_path, capsys):
    """Issue 68: an edit of the file is a change of model_code_sha256, not a new model, so bench diff compares
    the two versions (before, it said 'removed' and 'added' and judged nothing); rows written before schema 10,
    whose name carried the hash, are read as the same model."""
    mine = tmp_path / "net.py"
    shutil.copy(EXAMPLE, mine)
    runs = []
    for version, channels in (("old", 16), ("new", 12)):  # one line of the model changed
        mine.write_text(EXAMPLE.read_text().replace("channels: int = 16", f"channels: int = {channels}"))
        done = bench_here(capsys, "run", "--model", f"code:{mine}:build", *SMALL, "--out", str(tmp_path / version))
        assert done.returncode == 0, done.stderr
        runs.append(rows_of(tmp_path / version)[0])
    old, new = runs
    assert old["model"] == new["model"] == "code:net.py:build"
    assert old["model_code_sha256"] != new["model_code_sha256"]
    assert old["config_hash"] == new["config_hash"]  # the same request; the code is what differs
    # Results are data: replacing the code with code that would say it was imported changes nothing.
    marker = tmp_path / "imported"
    mine.write_text(f"open({str(marker)!r}, 'w').close()\n")
    done = bench_here(capsys, "diff", str(tmp_path / "old"), str(tmp_path / "new"))
    # (exit 3 where this machine's other load disturbed the single repeats: judged as one model either way)
    assert done.returncode in (0, 3) and "1 configuration(s), 1 in both" in done.stdout, done.stdout + done.stderr
    assert "model_code_sha256" in done.stdout.split("configuration ")[0]  # the edit, named among what changed
    assert not marker.exists()
    # An older folder: the same rows as written before schema 10, the hash in the name.
    before = tmp_path / "before"
    shutil.copytree(tmp_path / "old", before)
    for path in before.glob("runs/*/rows.json"):
        rows = json.loads(path.read_text())
        path.write_text(json.dumps([dict(r, model=f"{r['model']}@{r['model_code_sha256'][:8]}") for r in rows]))
    results.rebuild_csv(before)
    assert rows_of(before)[0]["model"].startswith("code:net.py:build@")
    assert list(load_results([before, tmp_path / "new"]).rows["model"].unique()) == ["code:net.py:build"]
    assert [line["model"] for line in csv.DictReader(open(before / "summary.csv"))] == ["code:net.py:build"]


def test_bench_models_and_help_show_how_to_name_your_own_model(capsys):
    listed = bench_here(capsys, "models")
    assert "code:<file.py>:<function>" in listed.stdout and "code:<module>:<function>" in listed.stdout
    assert "code:" in bench_here(capsys, "run", "--help").stdout


def test_a_module_on_the_import_path_names_a_model_too(tmp_path, monkeypatch):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(EXAMPLE, package / "segnet.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # what the resolution adds, undone after
    cfg = BenchConfig(model="code:mypkg.segnet:build", device="cpu", batch_size=2)
    assert cfg.model == "code:mypkg.segnet:build" and (cfg.width, cfg.height) == (64, 64)  # its own defaults
    with pytest.raises(ConfigError, match="width: must be"):
        BenchConfig(model="code:mypkg.segnet:build", device="cpu", width=0)
