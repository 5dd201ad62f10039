"""What a new user meets in the first hour (issue 62): a refused command leaves nothing behind and says
nothing it did not do, every mistake of a file is said at once, messages are true, disturbed figures say
so wherever they are printed, and labels name only what applies."""
from pathlib import Path

import pytest

from bench_core import results
from conftest import bench_here, tiny

SWEEP_WITH_A_BAD_VALUE = """name: refused
grid:
  model: [resnet18]
  precision: [fp64]
settings:
  device: cpu
"""


def serving_dir_unset(monkeypatch) -> None:
    """No BENCH_SERVING_DIR, and none left behind: a command run in this process sets it for its --out."""
    monkeypatch.setenv("BENCH_SERVING_DIR", "")
    monkeypatch.delenv("BENCH_SERVING_DIR")


def every_path(*roots: Path) -> set[tuple[str, int]]:
    """Every folder, and every file with when it was last written."""
    return {(str(p), 0 if p.is_dir() else p.stat().st_mtime_ns) for root in roots for p in root.rglob("*")}


@pytest.mark.parametrize("command", [
    "ladder --model llama-tiny --engine vllm --out out",
    "run --mode serve --model llama-tiny --engine vllm --out out",
    "run --model resnet18 --device cpu --batch-size 0 --out out",
    "run --mode serve --model llama-tiny --prompt-file long.jsonl --out out",  # it wrote the model folder first
    "sweep refused.yaml --out out",
    "compare --model resnet18 --device cpu --b compile=sometimes --out out",
    "find-batch --model resnet18 --device cpu --steps 3 --out out",
    "memory --model resnet18 --device-memory-gib 0",
    "predict --from nothing-here --gpu H100-SXM5-80GB",
    "report nothing-here --out out/report.html",
    "report measured --baseline nonsense",  # it rebuilt results.csv, machines.csv and summary.csv, then refused
    "diff nothing-here nothing-there --html out/diff.html",
    "slurm refused.yaml --out out",
    "acceptance --budget-s 0 --out out",
    "selftest --out refused.yaml/checklist.json",  # it ran every check, then could not write the checklist
])
def test_a_refused_command_writes_nothing_and_says_only_why(capsys, tmp_path, monkeypatch, command):
    # The engine is not installed here (vllm): it used to say "serve: starting vllm", write a model folder
    # to the cache and an empty serving/logs folder, then refuse.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    serving_dir_unset(monkeypatch)
    (tmp_path / "refused.yaml").write_text(SWEEP_WITH_A_BAD_VALUE)
    (tmp_path / "long.jsonl").write_text('{"prompt": "hello", "max_tokens": 200000}\n')  # beyond 131,072
    row = flagged_row(tiny())
    results.write_run(tmp_path / "measured", row["run_id"], [row])
    before = every_path(tmp_path)
    done = bench_here(capsys, *command.split())
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert every_path(tmp_path) == before, command
    assert done.stdout == "" and done.stderr.count("\n") == 1 and " error: " in done.stderr, done.stderr


# -- messages that are true ---------------------------------------------------------------------------------


def test_predict_from_a_folder_that_is_not_there_says_so(capsys, tmp_path):
    done = bench_here(capsys, "predict", "--from", str(tmp_path / "nonexistent"), "--gpu", "H100-SXM5-80GB")
    assert done.returncode == 2 and "is not a directory" in done.stderr and "no ok rows" not in done.stderr


@pytest.mark.parametrize("command, mode", [("ladder", "serve"), ("run --mode generate", "generate")])
def test_no_model_given_says_the_default_was_taken_and_which_models_run_the_mode(capsys, command, mode):
    done = bench_here(capsys, *command.split())
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"bench {command.split()[0]}: error: model: none given, so the default (resnet50) "
                                  f"was taken, and mode {mode} does not apply to it"), done.stderr
    assert f"models that run mode {mode}: " in done.stderr and "llama-tiny" in done.stderr


def test_the_report_counts_configurations_as_the_sweep_does(tmp_path):
    # cpu-quick's two serving points (1 and 2 users) shared one label, so its report said 32 configurations
    # where the sweep said 33; and optimizers, which no label names, are configurations of their own too.
    from bench_core.summary.front import configurations
    from bench_core.summary.load import load_results
    from bench_core.sweep.notebook import record_missing
    from bench_core.sweep.plan import parse_sweep
    plan = parse_sweep({"grid": [{"model": ["resnet18"], "optimizer": ["sgd", "adam"], "width": [32]},
                                 {"model": ["llama-tiny"], "mode": ["serve"], "concurrency": [1, 2]}],
                        "settings": {"device": "cpu"}})
    for execution in plan.executions:  # the rows a sweep writes for configurations that did not run
        record_missing(tmp_path, execution.run_name, execution.configs, "error", "not run here")
    rows = load_results([tmp_path]).rows
    assert configurations(rows) == len(plan.configs) == 4
    serving = rows[rows["mode"] == "serve"]["config"]
    assert serving.nunique() == 2 and all("user" in label and "bs" not in label for label in serving)


@pytest.fixture
def stand_in_engine():
    """tests/fast_engine.py: an OpenAI-compatible stand-in that answers at once (no model to load)."""
    import subprocess
    import sys
    from bench_core.launch.engine_server import free_port
    port = free_port()
    engine = subprocess.Popen([sys.executable, str(Path(__file__).with_name("fast_engine.py")), str(port)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert engine.stdout.readline().strip() == "ready"
        yield f"http://127.0.0.1:{port}"
    finally:
        engine.terminate()
        engine.wait(10)


def test_the_ladder_warms_each_load_up_once_and_says_which(capsys, tmp_path, monkeypatch, stand_in_engine):
    # It printed "serve: 5 warm-up requests" twice before its first point: the ladder warmed the server up, then
    # the first point did again.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    serving_dir_unset(monkeypatch)
    done = bench_here(capsys, "ladder", "--model", "llama-tiny", "--server-url", stand_in_engine, "--served-model",
                      "stand-in", "--prompt-len", "8", "--new-tokens", "4", "--steps", "4", "--warmup-steps", "2",
                      "--repeats", "1", "--max-points", "3", "--device", "cpu", "--out", str(tmp_path / "ladder"))
    assert done.returncode == 0, done.stderr
    loads = [line.split(": ")[1] for line in done.stderr.splitlines() if line.startswith("ladder: concurrency")]
    warm_ups = [line for line in done.stderr.splitlines() if "warm-up requests" in line]
    assert loads and warm_ups == [f"serve: {load}: 2 warm-up requests" for load in loads], done.stderr


# -- disturbed figures say so wherever they are printed -----------------------------------------------------

FLAGGED = "other-processes-on-cpu(1.33 cores);noisy-window(cv 0.2)"  # as the sampler writes a busy machine


def flagged_row(cfg, **figures) -> dict:
    from bench_core.results.rows import finish_row, run_fields
    return finish_row({**run_fields(cfg), "repeat": 0, "status": "ok", "message": "", "noise_flags": FLAGGED,
                       "samples_per_s": 100.0, "throughput": 100.0, **figures})


def test_the_ladder_says_its_points_were_disturbed_in_its_table_and_where_it_stopped():
    # Its rows carried other-processes-on-cpu(1.33 cores), yet neither its table nor its
    # "stopped: saturated ..." line said so.
    from bench_core.cli.ladder import summary_text
    from bench_core.scenarios.ladder import SATURATED, Ladder, Rung
    from conftest import tiny
    cfg = tiny(model="llama-tiny", mode="serve", width=None, height=None)
    rungs = [Rung(load, [flagged_row(cfg.replace(concurrency=int(load)), output_tokens_per_s=rate,
                                     requests_per_s=rate / 16, tokens_per_s_per_user=rate / load, ttft_ms_p99=50.0,
                                     slo_met=True)])
             for load, rate in ((1, 100.0), (2, 104.0))]
    text = summary_text(Ladder("concurrency", rungs, SATURATED, "saturated: output tokens/s 104 at concurrency 2 ..."),
                        500, 30, None)
    lines = text.splitlines()
    assert lines[0].endswith("disturbed by")
    assert all(line.endswith("DISTURBED: other-processes-on-cpu") for line in lines[1:3]), text
    assert lines[3].startswith("stopped: saturated") and lines[3].endswith(
        "; 2 disturbed (other-processes-on-cpu): re-measure on a quiet machine"), text


def test_a_sweep_of_disturbed_rows_says_so_in_its_last_line(capsys, tmp_path):
    # The sweep's progress marked each disturbed figure, but its closing tally did not.
    from bench_core import results
    from bench_core.sweep.plan import load_sweep
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text("grid:\n  mode: [train, infer]\nsettings:\n  model: resnet18\n  width: 32\n  height: 32\n"
                     "  device: cpu\n")
    out = tmp_path / "out"
    for execution in load_sweep(sweep).executions:  # measured before, beside other work: complete, so skipped now
        results.write_run(out, execution.run_name, [flagged_row(cfg) for cfg in execution.configs])
    done = bench_here(capsys, "sweep", str(sweep), "--out", str(out), "--no-report")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].endswith(
        "; 2 disturbed (other-processes-on-cpu): re-measure on a quiet machine"), done.stdout


def test_acceptance_selftest_and_find_batch_mark_a_disturbed_figure(tmp_path):
    from bench_core import results
    from bench_core.launch.batch_search import BatchProbe, BatchSearch
    from bench_core.scenarios.acceptance import Acceptance
    from bench_core.scenarios.selftest import rate_text
    from bench_core.summary.acceptance import table
    from conftest import tiny
    row = flagged_row(tiny())
    results.write_run(tmp_path, row["run_id"], [row])
    lines = table(Acceptance(tmp_path, 60.0), []).splitlines()
    assert [line for line in lines if line.endswith("DISTURBED: other-processes-on-cpu")], lines
    assert lines[-1].endswith("; 1 disturbed (other-processes-on-cpu): re-measure on a quiet machine"), lines
    assert rate_text(row) == "100.0 samples/s (DISTURBED: other-processes-on-cpu)"
    search = BatchSearch(tiny().to_dict(), 8, 0.1, probes=[BatchProbe(2, "ok", None, 12.5, 1.0,
                                                                     disturbed_by="other-processes-on-cpu")])
    assert search.format().splitlines()[1].endswith("DISTURBED: other-processes-on-cpu")


# -- labels name only what applies --------------------------------------------------------------------------


def test_a_text_models_chart_label_names_no_memory_layout(tmp_path):
    # Beside a resnet measured in both layouts, llama-tiny's label ended in "nchw".
    from bench_core import results
    from bench_core.results.rows import finish_row, run_fields
    from bench_core.summary.html import chart_rows, label_columns
    from bench_core.summary.load import load_results
    from conftest import tiny
    configs = [tiny(), tiny(channels_last=True), tiny(model="llama-tiny", width=None, height=None, seq_len=16)]
    for cfg in configs:
        row = finish_row({**run_fields(cfg), "repeat": 0, "status": "ok", "message": "", "samples_per_s": 10.0,
                          "throughput": 10.0, "task": "causal-lm" if cfg.model == "llama-tiny" else "classification"})
        results.write_run(tmp_path, row["run_id"], [row])
    ok = load_results([tmp_path]).ok
    labels = dict(zip(ok["model"] + ok["channels_last"].astype(str), chart_rows(ok)[0]["label"]))
    assert labels["resnet18True"].endswith("channels_last") and labels["resnet18False"].endswith("nchw")
    assert labels["llama-tiny" + "False"].split()[0] == "llama-tiny" and "nchw" not in labels["llama-tinyFalse"], labels
    grouped = ok.drop(columns="task")  # a table grouped by the workload's fields alone: the model's family says
    by_model = dict(zip(grouped["model"] + grouped["channels_last"].astype(str), label_columns(grouped)))
    assert by_model["resnet18False"].endswith("nchw") and not by_model["llama-tiny" + "False"].endswith("nchw")


# -- every mistake of a file at once ------------------------------------------------------------------------

THREE_MISTAKES = """name: three
grid:
  - model: [resnet18, resnet50]
    precision: [fp32, fp64]
  - model: [llama-tiny]
    mode: [generate]
    prompt_lenght: [64]
settings:
  device: cpu
  batch_sise: 8
"""


def test_a_sweep_file_with_three_mistakes_says_all_three_in_one_run(capsys, tmp_path):
    # It took three runs to learn them, one a run.
    sweep = tmp_path / "three.yaml"
    sweep.write_text(THREE_MISTAKES)
    out = tmp_path / "out"
    done = bench_here(capsys, "sweep", str(sweep), "--out", str(out))
    assert done.returncode == 2 and not out.exists()
    head, *lines = done.stderr.splitlines()
    assert head == f"bench sweep: error: 3 mistakes in {sweep}:", done.stderr
    assert [line.split(":")[0] for line in lines] == ["  batch_sise", "  prompt_lenght", "  precision"]
    assert "did you mean 'batch_size'?" in lines[0] and "did you mean 'prompt_len'?" in lines[1]
    assert lines[2].endswith("(grid combination: model='resnet18'; and 1 more)"), lines[2]  # once, not per model


def test_a_command_line_with_several_bad_flags_says_each(capsys):
    done = bench_here(capsys, "run", "--model", "resnet18", "--batch-size", "0", "--steps", "0", "--device", "gpu")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["bench run: error: 3 mistakes:",
                                        "  device: got 'gpu'; allowed: auto, cpu, cuda, cuda:N, mps",
                                        "  batch_size: must be a whole number >= 1 or max, got '0'",
                                        "  steps: must be >= 1, got 0"]
    one = bench_here(capsys, "run", "--model", "resnet18", "--steps", "0")  # one mistake: the one line it was
    assert one.returncode == 2 and one.stderr == "bench run: error: steps: must be >= 1, got 0\n"
