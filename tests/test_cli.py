"""`bench` as a user types it: one-line errors with exit 2 and nothing written, rows on success."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench_core.cli import COMMANDS
from bench_core.cli import main as bench_main
from conftest import TINY, bench_here

TINY_FLAGS = ["--model", "resnet18", "--width", "32", "--height", "32", "--batch-size", "2", "--steps", "2",
              "--warmup-steps", "1", "--repeats", "2", "--min-seconds", "0", "--device", "cpu"]


def bench(*args, cwd=None):
    """The installed entry point in a process of its own (exit codes and output as a shell sees them)."""
    return subprocess.run([sys.executable, "-m", "bench_core", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_run_prints_a_table_and_writes_rows(tmp_path, capsys):
    out = tmp_path / "quick"
    proc = bench_here(capsys, "run", *TINY_FLAGS, "--out", str(out))  # (bench's own process start: the --help tests)
    assert proc.returncode == 0, proc.stderr
    assert "images/s" in proc.stdout and "MPx/s" in proc.stdout and "median" in proc.stdout
    csv_lines = (out / "results.csv").read_text().splitlines()
    assert len(csv_lines) == 3  # header + 2 repeats
    runs = list((out / "runs").iterdir())
    assert len(runs) == 1 and len(json.loads((runs[0] / "rows.json").read_text())) == 2
    # a second run appends, never overwrites
    assert bench_here(capsys, "run", *TINY_FLAGS, "--mode", "infer", "--out", str(out)).returncode == 0
    assert len((out / "results.csv").read_text().splitlines()) == 5


def test_a_generate_run_prints_no_library_noise_and_numbers_its_repeats_as_its_table(tmp_path):
    """In an 80-column terminal: no transformers deprecation line, the progress numbers its repeats
    as the table does (from 0), and every column of the table is under a header, within 80 columns."""
    proc = subprocess.run([sys.executable, "-m", "bench_core", "run", "--model", "llama-tiny", "--mode", "generate",
                           "--prompt-len", "16", "--new-tokens", "3", "--batch-size", "1", "--steps", "1",
                           "--warmup-steps", "1", "--repeats", "2", "--min-seconds", "0", "--device", "cpu"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    assert "deprecated" not in proc.stderr, proc.stderr
    assert ": repeat 0 (1 of 2) " in proc.stderr and ": repeat 1 (2 of 2) " in proc.stderr
    table = proc.stdout.splitlines()[1:-2]  # between the title and the first-step / rows-ok lines
    assert all(len(line) <= 80 for line in table), proc.stdout
    blocks = [block.splitlines() for block in "\n".join(table).split("\n\n")]
    assert len(blocks) > 1 and "TTFT ms" in proc.stdout
    for block in blocks:  # each block: a header, then the repeats 0 and 1 and the median
        assert block[0].split()[0] == "repeat" and [line.split()[0] for line in block[1:]] == ["0", "1", "median"]
        assert len(block[0]) >= max(len(line) for line in block[1:])  # no value beyond the last header


def test_json_output_is_the_rows(capsys):
    proc = bench_here(capsys, "run", *TINY_FLAGS, "--json", "--repeats", "1")
    rows = json.loads(proc.stdout)
    assert proc.returncode == 0 and rows[0]["status"] == "ok" and rows[0]["model"] == "resnet18"


def test_a_failed_run_exits_non_zero_with_its_row(tmp_path, capsys):
    # fp16 overflow of a real model is provoked in test_engine; here: an OOM-free failure path,
    # an exception inside the model (torchvision model given an input it cannot take).
    proc = bench_here(capsys, "run", *TINY_FLAGS, "--model", "torchvision:inception_v3", "--out", str(tmp_path / "o"))
    assert proc.returncode == 1
    rows = json.loads(next((tmp_path / "o" / "runs").iterdir()).joinpath("rows.json").read_text())
    assert rows[0]["status"] == "error" and rows[0]["message"]


@pytest.mark.parametrize("args, field", [
    (["--model", "no_such_model"], "model"),
    (["--precision", "fp8"], "precision"),
    (["--precision", "tf32"], "precision"),          # impossible on this CPU
    (["--batch-size", "0"], "batch_size"),
    (["--batch-size", "two"], "batch_size"),
    (["--batch-size", "max", "--nproc-per-node", "2"], "batch_size"),  # the search is one process
    (["--batch-size", "max", "--max-batch-size", "0"], "max_batch_size"),
    (["--device", "cuda:3"], "device"),               # more devices than exist
    (["--device", "tpu"], "device"),
    (["--nproc-per-node", "999"], "nproc_per_node"),  # more processes than devices
    (["--mode", "eval"], "mode"),
    (["--min-seconds", "-1"], "min_seconds"),
    # absurd numbers: refused before the run, not an overflow inside torch after it started (or a crash)
    (["--num-threads", "99999"], "num_threads"),    # torch.set_num_threads(99999) ran out of memory and segfaulted
    (["--seed", "99999999999999999999999"], "seed"),
    (["--min-seconds", "1e308"], "min_seconds"),
    (["--steps", "99999999999999999999999"], "steps"),
    (["--width", "99999999999999999999999"], "width"),
    (["--batch-size", "99999999999999999999999"], "batch_size"),
])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, args, field):
    out = tmp_path / "never"
    assert bench_main(["run", *TINY_FLAGS, *args, "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bench run: error: {field}: "), lines
    assert not out.exists()


def test_malformed_yaml_and_unknown_key_in_config_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: resnet18\nbatch_size: [1, 2\n")
    proc = bench_here(capsys, "run", "--config", str(bad), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "config:" in proc.stderr and "line" in proc.stderr
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("model: resnet18\nbatchsize: 4\n")
    proc = bench_here(capsys, "run", "--config", str(unknown), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "batchsize: unknown key" in proc.stderr and "batch_size" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_config_file_with_flag_override(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("".join(f"{k}: {v}\n" for k, v in {**TINY, "repeats": 1}.items()))
    proc = bench_here(capsys, "run", "--config", str(cfg), "--mode", "infer", "--json")
    row = json.loads(proc.stdout)[0]
    assert proc.returncode == 0 and row["mode"] == "infer" and row["repeats"] == 1


def test_unknown_flag_is_one_line(capsys):
    proc = bench_here(capsys, "run", "--batchsize", "4")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def test_sysinfo_and_help(capsys):
    info = json.loads(bench_here(capsys, "sysinfo", "--json").stdout)
    assert info["torch_version"] and info["cpu_count"] >= 1 and "git_commit" in info
    help_text = bench_here(capsys, "run", "--help").stdout
    assert "examples:" in help_text and "--batch-size" in help_text and "--precision" in help_text


def test_help_lists_choices_says_each_default_once_and_errors_point_at_the_subcommand(capsys):
    run_help = bench_here(capsys, "run", "--help").stdout
    assert "--mode {train,infer,generate,serve}" in run_help and "--optimizer {sgd,adam,adamw}" in run_help
    assert "--compile {off,default,reduce-overhead,max-autotune}" in run_help
    assert "(default: None)" not in run_help and "(default: train)" in run_help
    search_help = bench_here(capsys, "find-batch", "--help").stdout
    assert "--repeats REPEATS" not in search_help and "--max-batch-size" in search_help  # only what it uses
    refused = bench_here(capsys, "find-batch", "--model", "resnet18", "--repeats", "3")
    assert refused.returncode == 2 and "repeats: does not apply to find-batch" in refused.stderr
    typo = bench_here(capsys, "run", "--batchsize", "4")
    assert typo.returncode == 2
    assert typo.stderr.strip() == ("bench run: error: unrecognized arguments: --batchsize 4; did you mean "
                                   "--batch-size? (see bench run --help)")


@pytest.mark.parametrize("args, wanted", [
    (["sweep", "params/cpu-quick.yaml", "--dryrun"], "did you mean --dry-run?"),
    (["report", "outputs/x", "--titel", "t"], "did you mean --title?"),
    (["diff", "a", "b", "--fail-abve", "5%"], "did you mean --fail-above?"),
    (["find-batch", "--max-batchsize", "8"], "did you mean --max-batch-size?"),
    (["run", "--modle", "resnet18"], "did you mean --mode or --model?"),   # both one edit away
    (["run", "--batchsize=4", "--devcie", "cpu"], "did you mean --batch-size for --batchsize, --device for --devcie?"),
    (["rn", "--model", "resnet18"], "unknown command 'rn'; did you mean `bench run`?"),
    (["xyzzy"], "unknown command 'xyzzy'; commands: run, models, sysinfo, sweep"),
])
def test_a_typo_gets_the_fix(capsys, args, wanted):
    proc = bench_here(capsys, *args)
    assert proc.returncode == 2 and wanted in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [["run", "params/cpu-quick.yaml"], ["run", "--config", "params/cpu-quick.yaml"],
                                  ["run", "--config", "params/default.yaml"], ["params/default.yaml"],
                                  ["find-batch", "--config", "params/cpu-quick.yaml"]])
def test_a_sweep_file_given_to_a_one_configuration_command_points_at_bench_sweep(capsys, args):
    proc = bench_here(capsys, *args)
    name = next(a for a in args if a.endswith(".yaml"))
    assert proc.returncode == 2, proc.stderr
    assert f"{name} is a sweep file" in proc.stderr and f"run `bench sweep {name}`" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_settings_file_without_config_says_where_it_goes(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("model: resnet18\n")
    proc = bench_here(capsys, "run", str(cfg))
    assert proc.returncode == 2 and f"goes after --config: `bench run --config {cfg}`" in proc.stderr


def test_bench_help_imports_no_command_module_and_no_torch():
    """`bench --help` lists every command from the command table alone (issue 26: under 0.5 s)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "bench_core", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    listed = [line.split()[0] for line in proc.stdout.split("COMMAND\n")[1].splitlines() if line.startswith("    ")
              and not line.startswith("     ")]
    assert listed == list(COMMANDS), proc.stdout
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    heavy = sorted(m for m in imported if m.split(".")[0] in ("torch", "pandas", "numpy", "matplotlib", "papermill"))
    assert not heavy, f"bench --help imported {heavy[:5]}"
    commands = sorted(m for m in imported if m.startswith("bench_core.cli.") and m != "bench_core.cli.common")
    assert not commands, f"bench --help imported command modules {commands}"


def test_a_bench_process_ends_with_its_status_after_its_atexit_handlers_and_skips_the_last_collections():
    """end_process (the `bench` command, probes, the papermill child): the exit status and atexit
    handlers are kept; what the process holds is frozen out of the exit's garbage collections
    (0.8-1 s of every `bench run` process with torch imported: issue 26)."""
    code = ("import atexit, gc\nfrom bench_core.errors import end_process\n"
            "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0, flush=True))\n"
            "end_process(3)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "frozen at exit: True\n", "")


def test_dry_run_names_the_precision_on_every_line_and_does_not_tell_to_dry_run(tmp_path, capsys):
    sweep = tmp_path / "two.yaml"
    sweep.write_text("settings: {device: cpu, width: 32, height: 32, batch_size: 4}\n"
                     "grid: {model: [resnet18], precision: [fp32, amp-bf16], mode: [train, infer]}\n")
    proc = bench_here(capsys, "sweep", str(sweep), "--dry-run", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    first, *rest = proc.stdout.splitlines()
    assert "--dry-run" not in first and "4 configuration(s) in 1 execution(s)" in first
    # where amp-bf16 is emulated (an AVX2-only CPU), a note says so before the plan's lines
    # (and where other processes keep this machine busy, a note says that too)
    rest = [line for line in rest if not line.startswith(("note: amp-bf16 ", "note: this machine is busy"))]
    assert "resnet18 fp32/amp-bf16 on cpu, 32x32" in rest[0]
    listed = [line.split() for line in rest[1:]]
    assert listed == [["fp32", "train", "batch", "4"], ["fp32", "infer", "batch", "4"],
                      ["amp-bf16", "train", "batch", "4"], ["amp-bf16", "infer", "batch", "4"]]
    assert not (tmp_path / "out").exists()


def test_the_default_sweep_writes_where_the_makefile_and_readme_look(capsys):
    """`bench sweep params/default.yaml` picks cpu-quick.yaml or gpu-standard.yaml, but its folder is outputs/default."""
    root = Path(__file__).resolve().parents[1]
    proc = bench_here(capsys, "sweep", str(root / "params" / "default.yaml"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].endswith(str(Path("outputs", "default").resolve()))
    assert "its results go to outputs/default" in proc.stdout
    for sweep, out in (([], "outputs/default"), (["SWEEP=params/tensorpix.yaml"], "outputs/tensorpix")):
        make = subprocess.run(["make", "-n", "report", *sweep], cwd=root, capture_output=True, text=True, timeout=60)
        command = next(line for line in make.stdout.splitlines() if " sweep " in line)
        assert command.endswith(f"--out {out}"), make.stdout  # where bench sweep writes by itself
    assert "-> outputs/default/report.html" in (root / "README.md").read_text()


@pytest.mark.parametrize("columns", [60, 80, 120, 250, 400, None])
def test_bench_models_fits_the_terminal_and_shows_every_model_and_note(capsys, monkeypatch, columns):
    """None: no COLUMNS and not a terminal (a pipe, a file): whole lines."""
    from bench_core.workload.models import model_table
    monkeypatch.delenv("COLUMNS", raising=False)
    widest = max(len(line) for line in bench_here(capsys, "models").stdout.splitlines())  # the table unfolded
    if columns:
        monkeypatch.setenv("COLUMNS", str(columns))
    else:
        monkeypatch.delenv("COLUMNS", raising=False)
    out = bench_here(capsys, "models").stdout
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= (columns or 10_000), out
    assert [line.split()[0] for line in lines[1:] if not line.startswith(" ")] == [m["name"] for m in model_table()]
    for model in model_table():
        assert " ".join(str(model["notes"]).split()) in " ".join(out.split())  # folded, never cut
    if not columns or columns >= widest:
        assert len(lines) == 1 + len(model_table())  # one line a model where it fits


def test_a_table_of_any_columns_fits_and_keeps_every_value():
    from bench_core.cli.common import text_table
    rows = [{"name": f"model_{i}", "params_millions": 11.7 * i, "family": "vision transformer" if i % 2 else "cnn",
             "notes": "a long note " * (i + 3)} for i in range(4)]
    for width in (40, 70, 200):
        out = text_table(rows, width=width)
        assert max(len(line) for line in out.splitlines()) <= width, out
        for row in rows:
            for value in row.values():
                assert " ".join(str(value).split()) in " ".join(out.split())
    wide = text_table(rows, width=200).splitlines()
    assert len(wide) == 5 and wide[1].split()[:2] == ["model_0", "0.0"]


def test_a_long_selftest_line_folds_under_its_name(capsys, monkeypatch):
    from bench_core.cli.common import wrap_line
    line = "  [PASS   ] tf32 flags readable after the runs: " + " ".join(f"flag_{i}=False" for i in range(30))
    folded = wrap_line(line, indent=12, width=80).splitlines()
    assert len(folded) > 3 and all(len(f) <= 80 for f in folded)
    assert folded[0].startswith("  [PASS   ] tf32") and all(f.startswith(" " * 12 + "flag_") for f in folded[1:])
    assert " ".join(" ".join(folded).split()) == " ".join(line.split())


def test_the_terminal_table_of_an_emulated_precision_says_so_in_its_title():
    from bench_core.cli.common import format_rows
    from bench_core.results.rows import make_row
    row = make_row(model="resnet18", mode="train", precision="amp-bf16", batch_size=2, world_size=1, device="cpu",
                   device_type="cpu", device_name="AMD EPYC (Zen 4)", repeat=0, status="ok", samples_per_s=8.0,
                   precision_support="emulated")
    title = format_rows([row]).splitlines()[0]
    assert title == ("resnet18 train amp-bf16 (EMULATED: amp-bf16 runs in software on this cpu: not what a GPU would "
                     "show) batch 2 x1 on AMD EPYC (Zen 4)")
    assert "EMULATED" not in format_rows([{**row, "precision_support": "native"}]).splitlines()[0]


def test_a_result_directory_without_rows_is_one_line_exit_2_for_report_and_diff(tmp_path):
    """A results.csv with a header and no rows: no empty report "written", no pandas warning on the way."""
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "results.csv").write_text("model,precision,status\n")
    report = bench("report", str(empty))
    assert (report.returncode, report.stdout) == (2, ""), report.stderr
    assert report.stderr.strip().splitlines() == [
        "bench report: error: result_dirs: no result rows to report (empty: results.csv has no rows yet.); allowed: "
        "directories where bench sweep / bench run --out has finished at least one run"]
    assert sorted(p.name for p in empty.iterdir()) == ["results.csv"]
    diff = bench("diff", str(empty), str(empty))
    assert diff.returncode == 2 and len(diff.stderr.strip().splitlines()) == 1, diff.stderr
    assert "has no result rows" in diff.stderr and "Warning" not in diff.stderr


def test_bench_memory_checks_a_device_of_any_positive_size_and_names_the_size_it_refuses(capsys):
    tiny = bench_here(capsys, "memory", "--model", "resnet18", "--device", "cpu", "--device-memory-gib", "0.001")
    assert tiny.returncode == 1 and "does not fit" in tiny.stdout and "(a 0.001 GiB cpu device)" in tiny.stdout
    for given in ("0", "-2"):
        refused = bench_here(capsys, "memory", "--model", "resnet18", "--device", "cpu", "--device-memory-gib", given)
        assert refused.returncode == 2 and refused.stderr.strip() == (
            f"bench memory: error: device_memory_gib: must be a positive number of GiB, got {given}")


def test_a_memory_size_without_a_device_is_a_gpu_traced_by_cudas_autocast_rules(capsys):
    # "A GPU you do not have here": on this CPU machine its estimate is the named GPU's, not this CPU's
    # (CUDA's autocast keeps norms in float32, the CPU's does not: a different activation peak).
    def estimate(*where):
        done = bench_here(capsys, "memory", "--model", "sd-unet-tiny", "--precision", "amp-bf16", "--batch-size", "4",
                          *where, "--json")
        assert done.returncode in (0, 1), done.stderr
        return json.loads(done.stdout)["estimate_bytes"]
    sized = estimate("--device-memory-gib", "80")
    assert sized == estimate("--gpu", "H100-SXM5-80GB") != estimate("--device", "cpu", "--device-memory-gib", "80")
    said = bench_here(capsys, "memory", "--model", "resnet18", "--device-memory-gib", "0.001")
    assert "(a 0.001 GiB GPU)" in said.stdout


def test_find_batch_of_an_emulated_precision_says_so_in_its_table_as_its_warning_promises(capsys, monkeypatch):
    """The warning says the results are marked emulated: the search's table must say it too. (As an AVX2-only
    CPU answers, whatever this one is: BENCH_CPU_AS, here and in any process the search starts; inference, whose
    emulated bf16 is quicker than training's. In this process: its start is not what this checks.)"""
    from bench_core.capability import CPU_KIND_VARIABLE
    from conftest import forget_cpu_answers
    try:
        with monkeypatch.context() as as_avx2:
            as_avx2.setenv(CPU_KIND_VARIABLE, "avx2")
            forget_cpu_answers()
            proc = bench_here(capsys, "find-batch", "--model", "resnet18", "--width", "32", "--height", "32",
                              "--precision", "amp-bf16", "--mode", "infer", "--device", "cpu", "--max-batch-size", "4",
                              "--batch-size", "2", "-q")
    finally:
        forget_cpu_answers()  # the next test reads the CPU as the suite's setting has it
    assert proc.returncode == 0, proc.stderr
    assert "amp-bf16 is emulated on this device" in proc.stderr and "are marked emulated" in proc.stderr
    title = proc.stdout.splitlines()[0]
    assert title.startswith("find-batch resnet18 infer amp-bf16 (EMULATED: amp-bf16 runs in software here: "
                            "not what a GPU would show) 32x32 on cpu"), proc.stdout
