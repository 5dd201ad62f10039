"""`bench acceptance` and the lent-GPU command around it (gpu/acceptance.sh): rehearsed here as far
as a CPU allows, so the command cannot rot between GPU runs; and the rows a real H200 measured
(gpu/runs/), held to what must hold on every real GPU row."""
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import bench_here

from bench_core.config.schema import BenchConfig
from bench_core.measure import flops
from bench_core.results.store import iter_rows
from bench_core.run import busy
from bench_core.scenarios import acceptance, selftest
from bench_core.summary import acceptance as checking
from bench_core.sweep.plan import load_sweep, parse_sweep

ROOT = Path(__file__).resolve().parents[1]
GPU_RUNS = sorted(p for p in (ROOT / "gpu" / "runs").iterdir() if p.is_dir())
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "NO_COLOR": "1"}


def bench(capsys, *args) -> subprocess.CompletedProcess:
    """`bench ARGS` in this test's process (its exit status, stdout, stderr): what a command prints and exits
    with does not depend on its own process start; the steps `bench acceptance` starts are processes still."""
    return bench_here(capsys, *args)


# -- planning: the GPU sweep is valid and covers every family and path ----------------------------------


def gpu_plan():
    data = yaml.safe_load((ROOT / "params" / "gpu-acceptance.yaml").read_text())
    data["settings"]["device"] = "cpu"  # planned here as it is there, but for the device check
    return parse_sweep(data)


def test_the_gpu_acceptance_sweep_covers_every_family_and_gpu_path():
    configs = gpu_plan().configs
    seen = {(c.model, c.mode, c.precision) for c in configs}
    tasks = {BenchConfig.from_dict({"model": c.model}).model for c in configs}
    assert {"resnet50", "vit_b_16", "llama-1b", "sd15-unet", "whisper-large-v3", "dlrm", "resnet18"} <= tasks
    # ResNet-50 at lambdal's H100 / H200 batches, in the precisions the checks compare
    assert {(c.precision, c.batch_size) for c in configs if c.model == "resnet50"} == {
        ("fp32", 640), ("tf32", 640), ("amp-fp16", 1280), ("amp-bf16", 1280)}
    assert {c.channels_last for c in configs if c.model == "resnet50" and c.precision == "amp-fp16"} == {True, False}
    # Llama: plain and FSDP2 at the same global batch, float8, generate and two serving loads
    llama = [c for c in configs if c.model == "llama-1b"]
    assert {c.parallelism for c in llama if c.mode == "train" and c.precision == "amp-bf16"} == {"ddp", "fsdp"}
    assert ("llama-1b", "train", "fp8-tensorwise") in seen and ("llama-1b", "generate", "bf16") in seen
    assert sorted(c.concurrency for c in llama if c.mode == "serve") == [1, 8]
    assert all(c.engine == "transformers" for c in llama if c.mode == "serve")
    # compile off and on for one model, and its batch ladder from 1 to 256
    resnet18 = [c for c in configs if c.model == "resnet18"]
    assert {c.compile for c in resnet18 if c.batch_size == 64} == {"off", "default"}
    assert sorted({c.batch_size for c in resnet18}) == [1, 4, 16, 64, 256]
    assert all(c.device == "cpu" for c in configs)  # (replaced above: cuda there)
    # Two repeats at least of everything the report compares, so that each verdict has an interval (issue 60)
    standard = yaml.safe_load((ROOT / "params" / "gpu-standard.yaml").read_text())
    standard["settings"]["device"] = "cpu"
    standard = parse_sweep(standard).configs
    assert min(c.repeats for c in [*configs, *standard]) >= 2


def test_the_acceptance_selector_picks_the_cpu_rehearsal_without_a_gpu():
    plan = load_sweep(ROOT / "params" / "acceptance.yaml")
    import torch
    expected = "gpu-acceptance" if torch.cuda.is_available() else "acceptance-cpu"
    assert plan.name == expected
    if expected == "acceptance-cpu":
        # the rehearsal exercises the same paths with tiny models: train (plain and FSDP2), generate, serve
        modes = {(c.mode, c.parallelism) for c in plan.configs}
        assert {("train", "ddp"), ("train", "fsdp"), ("generate", "ddp"), ("serve", "ddp"), ("infer", "ddp")} <= modes


def test_the_steps_keep_their_share_of_the_budget(tmp_path):
    steps = acceptance.plan(tmp_path)
    assert [s.name for s in steps] == ["sysinfo", "sweep", "selftest", "report"]
    sweep, selftest_step, report = steps[1:]
    assert sweep.keep_after_s == sum(acceptance.RESERVED_AFTER_SWEEP_S.values())
    assert selftest_step.keep_after_s == acceptance.RESERVED_AFTER_SWEEP_S["report"] and report.keep_after_s == 0
    assert "--quick" in selftest_step.args and str(tmp_path / "selftest.json") in selftest_step.args
    assert report.args == ["report", str(tmp_path)]


# -- install: what the lent machine's image lacks travels as wheels ------------------------------------


def _names(path: Path) -> set[str]:
    return {re.split(r"[=<>\[ ]", line.strip())[0].lower().replace("_", "-").replace(".", "-")
            for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")}


def test_every_dependency_is_in_the_gpu_image_or_the_wheelhouse():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["float8"]
    names = {re.split(r"[=<>\[ ;]", d)[0].lower().replace("_", "-") for d in wanted}
    have = _names(ROOT / "gpu" / "image-packages.txt") | _names(ROOT / "gpu" / "wheels.txt")
    assert names - have == set(), "add these to gpu/wheels.txt (make gpu-wheels) or say the image has them"
    # and `transformers serve`'s own needs (mode serve's engine on the GPU)
    assert {"fastapi", "uvicorn", "openai", "pydantic"} <= have
    # no wheel shadows a package the image has, but for those the resolver pinned for a dependency
    both = _names(ROOT / "gpu" / "wheels.txt") & _names(ROOT / "gpu" / "image-packages.txt")
    assert both == set()


@pytest.mark.slow
def test_the_lent_machine_install_step_rehearsed(tmp_path):
    """gpu/acceptance.sh --install-only: the carried wheels installed with no index into a folder of
    their own, that folder and the checkout on the import path, every package the run needs found.
    A wheel of our own making stands in for the wheelhouse (nothing is downloaded here)."""
    project = tmp_path / "src"
    (project / "carried_pkg").mkdir(parents=True)
    (project / "carried_pkg" / "__init__.py").write_text("WHERE = 'carried'\n")
    (project / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
                                            '"setuptools.build_meta"\n[project]\nname = "carried-pkg"\nversion = "1"\n')
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index", "--no-build-isolation",
                    "-w", str(wheels), str(project)], check=True, capture_output=True, timeout=300)
    env = {**os.environ, "PYTHON": sys.executable, "WHEELS": str(wheels), "SITE": str(site)}
    proc = subprocess.run(["bash", str(ROOT / "gpu" / "acceptance.sh"), "--install-only"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== install: 1 wheels" in proc.stdout and "== imports: all found" in proc.stdout
    assert (site / "carried_pkg" / "__init__.py").is_file()
    # A wheelhouse that does not install stops the command at once, saying so (exit 3, nothing run).
    (wheels / "broken-1-py3-none-any.whl").write_text("not a wheel")
    proc = subprocess.run(["bash", str(ROOT / "gpu" / "acceptance.sh"), "--out", str(tmp_path / "out")],
                          env={**env, "SITE": str(tmp_path / "site2")}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3 and "installing the wheels" in proc.stderr
    assert not (tmp_path / "out").exists()


# -- the command itself, on this CPU, with a one-configuration sweep ----------------------------------


def one_configuration_sweep(tmp_path: Path, mode: str) -> Path:
    """A sweep file of resnet18 at 32 px, batch 2, 2 steps, one repeat on the CPU: the command, not the figures."""
    sweep = tmp_path / "one.yaml"
    sweep.write_text(yaml.safe_dump({"name": "one", "grid": {"model": ["resnet18"], "mode": [mode]},
                                     "settings": {"device": "cpu", "width": 32, "height": 32, "batch_size": 2,
                                                  "steps": 2, "warmup_steps": 1, "min_seconds": 0.0,
                                                  "repeats": 1}}))
    return sweep


@pytest.mark.slow
def test_acceptance_runs_every_step_and_prints_its_checks(tmp_path, capsys):
    sweep = one_configuration_sweep(tmp_path, "train")
    out = tmp_path / "out"
    proc = bench(capsys, "acceptance", "--out", str(out), "--sweep", str(sweep), "--budget-s", "600")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    result = json.loads((out / "acceptance.json").read_text())
    assert [(s["name"], s["returncode"], s["timed_out"]) for s in result["steps"]] == [
        ("sysinfo", 0, False), ("sweep", 0, False), ("selftest", 0, False), ("report", 0, False)]
    checks = {c["name"]: c for c in result["checks"]}
    assert checks["every row ok, or a failure row that says why"]["status"] == "pass"
    clocks = next(c for name, c in checks.items() if name.startswith("the timed window's device clock"))
    assert clocks["status"] == "pass"  # timed_s_host is in every row, beside timed_s
    assert checks["bench selftest: no check failed"]["status"] == "pass"
    assert checks["no process left behind (kernels, workers, servers)"]["status"] == "pass"
    for name in ("environment.json", "selftest.json", "results.csv", "report.html", "sysinfo.txt", "sweep.log"):
        assert (out / name).is_file(), name
    rows = list(iter_rows(out))
    assert len(rows) == 1 and 0 < abs(rows[0]["timed_s_host"] - rows[0]["timed_s"]) < 0.05 * rows[0]["timed_s"]
    # the table comes last: steps, figures, checks, and the count
    tail = proc.stdout[proc.stdout.index("\nsteps:"):]
    assert "figures:" in tail and "resnet18 train fp32 bs 2" in tail and "checks:" in tail
    assert re.search(r"\d+ passed, 0 failed, \d+ skipped; results in ", tail)


def test_a_spent_budget_skips_the_steps_and_says_so(tmp_path, capsys):
    out = tmp_path / "out"
    proc = bench(capsys, "acceptance", "--out", str(out), "--budget-s", "1")
    assert proc.returncode == 1  # no rows: the first check fails
    assert "== sweep: skipped" in proc.stdout and "(acceptance.json)" in proc.stdout  # only what exists
    result = json.loads((out / "acceptance.json").read_text())
    assert all(s["last_line"] == "not started: budget spent" for s in result["steps"])
    assert result["checks"][0]["detail"] == "no rows written"


def test_a_process_a_step_left_running_is_found_and_no_other():
    token = "test-" + os.urandom(6).hex()
    ours = subprocess.Popen(["sleep", "60"], env={**os.environ, acceptance.RUN_MARK: token})
    other = subprocess.Popen(["sleep", "60"], env={**os.environ, acceptance.RUN_MARK: "another run"})
    try:
        found = acceptance.leftover_processes(token)
        assert [line.split(":")[0] for line in found] == [str(ours.pid)] and "sleep 60" in found[0]
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()
    assert acceptance.leftover_processes(token) == []


def test_bad_input_is_one_line(tmp_path, capsys):
    proc = bench(capsys, "acceptance", "--budget-s", "0", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "budget_s" in proc.stderr
    proc = bench(capsys, "acceptance", "--sweep", "params/nope.yaml", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and "sweep: no such sweep file" in proc.stderr
    assert not (tmp_path / "x").exists()


# -- what the first real GPU runs found, fixed ---------------------------------------------------------


def test_a_step_that_cannot_be_left_out_is_refused_in_one_line(tmp_path, capsys):
    proc = bench(capsys, "acceptance", "--skip", "selftest,sweep", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "skip: sweep is not a step that can be left out; allowed: sysinfo, selftest, report" in proc.stderr
    assert not (tmp_path / "x").exists()


# -- the H100-beside-H200 command (gpu/compare.sh, issue 61) ---------------------------------------------

H200_KEPT = [ROOT / "gpu" / "runs" / "h200-2026-11-27", ROOT / "gpu" / "runs" / "h200-2026-11-27-b"]


def compare_plan():
    data = yaml.safe_load((ROOT / "params" / "gpu-compare.yaml").read_text())
    data["settings"]["device"] = "cpu"  # planned here as it is there, but for the device check
    return parse_sweep(data)


def test_the_comparison_sweep_measures_what_the_kept_h200_rows_measured_twice_each():
    """Every configuration of gpu-compare.yaml but the compiled float8 pair was measured on an H200 (the kept
    rows), so an H100's rows stand beside them in `bench report gpu/runs/*`; each at two repeats, an interval."""
    configs = compare_plan().configs
    kept = {(r["model"], r["mode"], r["precision"], int(r["batch_size"]), bool(r.get("channels_last")),
             r.get("compile") or "off", r.get("concurrency")) for run in H200_KEPT for r in iter_rows(run)
            if r.get("status") == "ok"}
    ours = {(c.model, c.mode, c.precision, c.batch_size, c.channels_last, c.compile, c.concurrency) for c in configs}
    compiled = {k for k in ours if k[5] != "off"}
    assert ours - compiled <= kept, ours - compiled - kept
    assert {k[2] for k in compiled} == {"amp-bf16", "fp8-tensorwise"} and {k[0] for k in compiled} == {"llama-1b"}
    assert {(c.precision, c.batch_size, c.channels_last) for c in configs if c.model == "resnet50"} == {
        ("fp32", 640, False), ("tf32", 640, False), ("amp-fp16", 1280, True), ("amp-fp16", 1280, False),
        ("amp-bf16", 1280, True)}
    assert sorted(c.batch_size for c in configs if c.model == "resnet18") == [1, 4, 16, 64, 256]
    assert sorted(c.concurrency for c in configs if c.mode == "serve") == [1, 8]
    assert min(c.repeats for c in configs) >= 2
    # What a cut budget loses: the Llama execution is last, its compiled pair at its end.
    llama = compare_plan().executions[-1].configs
    assert {c.model for c in llama} == {"llama-1b"} and [c.compile for c in llama[-2:]] == ["default", "default"]


def _kept_rows(run: Path, **match) -> list[dict]:
    return [dict(r) for r in iter_rows(run) if all(r.get(k) == v for k, v in match.items())]


def test_the_busy_check_reads_the_ladder_and_fails_a_row_that_was_not_measured():
    """The kept H200 ladder, gpu_busy taken from its NVML share (run/busy.py's apply): measured on every row,
    host-bound at batch 1 and not at 256; a row without gpu_busy fails the check, naming it."""
    rows = _kept_rows(H200_KEPT[1], model="resnet18", mode="infer", compile="off")
    for row in rows:
        busy.apply([row], row["gpu_util_pct_mean"] / 100 * busy.window_step_s(row), "the kept row's NVML share")
    found = checking.check_busy(rows)
    assert found.status == checking.PASS, found.detail
    assert "bs 1 0.17 host-bound" in found.detail and "bs 256 0.93" in found.detail
    assert "bs 256 0.93 host-bound" not in found.detail
    rows[-1]["gpu_busy"] = None
    assert checking.check_busy(rows).status == checking.FAIL


def test_the_float8_check_wants_it_compiled_checked_and_beside_compiled_amp_bf16():
    """The kept H200 fp8 row ran eager, its outputs not checked: a failure. The same row compiled, within
    tolerance, beside an amp-bf16 row compiled the same way: a pass, with the ratio said."""
    eager = _kept_rows(H200_KEPT[1], model="llama-1b", precision="fp8-tensorwise")
    bf16 = _kept_rows(H200_KEPT[1], model="llama-1b", precision="amp-bf16", parallelism="ddp")[:1]
    assert checking.check_float8(eager + bf16).status == checking.FAIL
    fp8 = [{**r, "compile": "default", "output_check": "within tolerance", "throughput": 47874.0} for r in eager]
    twin = [{**r, "compile": "default", "throughput": 40000.0} for r in bf16]
    found = checking.check_float8(fp8 + twin)
    assert found.status == checking.PASS and "1.20x amp-bf16" in found.detail
    assert checking.check_float8(fp8 + bf16).status == checking.FAIL  # amp-bf16 only eager: not compared


@pytest.mark.slow
def test_the_compare_command_rehearsed_on_the_cpu(tmp_path):
    """gpu/compare.sh with a one-configuration CPU sweep and the harness's CPU arms: acceptance without the
    selftest (its check says it was left out), then the harness's table, all in the output folder. (The report
    and sysinfo steps are left out here too: the acceptance test above runs them.)"""
    sweep = one_configuration_sweep(tmp_path, "infer")
    out = tmp_path / "out"
    env = {**ENV, "PYTHON": sys.executable, "WHEELS": str(tmp_path / "no-wheels"), "SWEEP": str(sweep),
           "SKIP": "sysinfo,selftest,report",
           "HARNESS_S": "90", "HARNESS_ARGS": "--device cpu --size 32 --batch-size 2 --steps 2 --min-seconds 0 "
                                              "--rounds 1 --threads 1 --arms bare,run"}
    proc = subprocess.run(["bash", str(ROOT / "gpu" / "compare.sh"), str(out), "400"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    result = json.loads((out / "acceptance.json").read_text())
    assert [s["name"] for s in result["steps"]] == ["sweep"]
    checks = {c["name"]: c for c in result["checks"]}
    assert checks["bench selftest: no check failed"] == {"name": "bench selftest: no check failed",
                                                         "status": "skipped", "detail": "left out (--skip selftest)"}
    assert "largest added time:" in (out / "harness.txt").read_text()
    assert "== selftest: left out (--skip)" in proc.stdout


def test_selftest_builds_its_gpu_configurations():
    # On every GPU this raised TypeError (the precision names indexed by name) before a run started.
    configs = selftest.gpu_configs("cuda:0", first=True)
    assert [c["precision"] for c in configs if c.get("compile") == "off"] == list(selftest.PRECISIONS)
    assert len([c for c in configs if c.get("compile") == "default"]) == len(selftest.PRECISIONS)
    assert all(c["compile"] == "off" for c in selftest.gpu_configs("cuda:1", first=False) if "compile" in c)


def test_grouped_query_attention_counts_as_its_expanded_form():
    """transformers hands CUDA's SDPA kernels keys and values with fewer heads than the query
    (enable_gqa); torch 2.11's formula asserted equal heads and every Llama row on the H200 failed."""
    import torch
    import torch.nn.functional as F
    aten = torch.ops.aten
    fixes = flops.formula_fixes()
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention"):
        assert getattr(aten, name) in fixes and getattr(aten, f"{name}_backward") in fixes
    q, kv = (2, 32, 128, 64), (2, 8, 128, 64)
    assert flops._query_heads(q, kv, kv) == [q, q]
    assert flops._attention_flop(q, kv, kv) == flops._attention_flop(q, q, q) == 2 * 2 * (2 * 32 * 128 * 64 * 128)
    assert flops._attention_backward_flop(q, q, kv, kv) == flops._attention_backward_flop(q, q, q, q)
    # and through the counter, on this machine's own kernel: GQA as many FLOPs as the expanded heads
    query = torch.randn(*q)
    key, value = torch.randn(*kv), torch.randn(*kv)
    grouped = flops.count_flops(lambda: F.scaled_dot_product_attention(query, key, value, enable_gqa=True)).flops
    expanded = flops.count_flops(lambda: F.scaled_dot_product_attention(
        query, key.repeat_interleave(4, dim=1), value.repeat_interleave(4, dim=1))).flops
    assert grouped == expanded > 0


# -- the rows a real GPU measured ----------------------------------------------------------------------


@pytest.mark.parametrize("run", GPU_RUNS, ids=[p.name for p in GPU_RUNS])
def test_a_kept_gpu_run_names_its_machine_and_its_rows_hold(run):
    env = json.loads((run / "environment-1.json").read_text())
    assert env["gpu_name"] and env["driver_version"] and env["cuda_version"] and env["gpu_compute_capability"]
    assert env["gpu_name"].lower().replace("nvidia ", "").split()[0] in run.name  # named by its GPU
    rows = list(iter_rows(run))
    ok = [r for r in rows if r["status"] == "ok"]
    # every row names the GPU it ran on (serve rows kept before the server's device was recorded: repaired)
    assert ok and all(r["device_type"] == "cuda" and r["device_name"] == r["gpu_name"] == env["gpu_name"]
                      and r["gpu_uuid"] for r in ok)
    checks = {c.name: c for c in checking.judge(rows, None, [])}
    assert checks["MFU in (0, 1] on every row that has one"].status == checking.PASS
    assert all(0 < r["mfu"] <= 1 for r in ok if r.get("mfu") is not None)
    assert not any(r.get("mfu_rejected") for r in rows)
    clocks = next(c for name, c in checks.items() if name.startswith("the timed window's device clock"))
    assert clocks.status == checking.PASS
    failed = [r for r in rows if r["status"] not in ("ok", "unsupported")]
    assert all(r["message"] for r in failed)  # a failure is a row that says why


def _keep_run():
    sys.path.insert(0, str(ROOT / "gpu"))
    try:
        import keep_run
    finally:
        sys.path.remove(str(ROOT / "gpu"))
    return keep_run


def test_a_kept_row_that_names_no_device_is_repaired_from_its_own_calls_environment(tmp_path):
    """Issue 60: first light's serving rows were kept before the server's device was recorded, so the
    report listed a second, CPU machine with the GPU's NVML energy. keep_run fills such a row from the
    environment of the call that made it (the GPU its run file's other rows name), and says so beside
    the rows; a new keep fills it from its call's environment.json."""
    keep_run = _keep_run()
    first = ROOT / "gpu" / "runs" / "h200-2026-11-27"
    device = ("device_type", "device_name", "device_count", *keep_run.GPU_FIELDS)
    copy = tmp_path / "h200"
    subprocess.run(["cp", "-r", str(first), str(copy)], check=True)
    (copy / "repairs.md").unlink()
    as_kept = {}  # the rows as first light kept them: the serving rows name no device
    for rows_file in copy.glob("runs/*/rows.json"):
        rows = json.loads(rows_file.read_text())
        for row in rows:
            if row["mode"] == "serve":
                as_kept[row["run_id"]] = {k: row[k] for k in device}
                row.update(dict.fromkeys(("device_type", "device_name", "device_count", "gpu_name", "gpu_uuid",
                                          "gpu_memory_bytes", "gpu_compute_capability")))
        rows_file.write_text(json.dumps(rows))
    measured = keep_run.MEASURED.read_bytes()
    lines = keep_run.repair(copy)
    assert len(lines) == 2 and all("environment-2.json" in line for line in lines)
    serve = {r["run_id"]: r for r in iter_rows(copy) if r["mode"] == "serve"}
    call = json.loads((first / "environment-2.json").read_text())
    assert {run_id: {k: r[k] for k in device} for run_id, r in serve.items()} == as_kept
    assert {r["gpu_uuid"] for r in serve.values()} == {call["gpu_uuid"]} and call["gpu_uuid"].startswith("c2df5475")
    assert "Why: these rows name no device" in (copy / "repairs.md").read_text()
    assert "NVIDIA H200" in (copy / "machines.csv").read_text() and "Intel" not in \
        (copy / "summary.csv").read_text().split("\n", 1)[1].split(",", 1)[0]
    assert keep_run.repair(copy) == [] and keep_run.MEASURED.read_bytes() == measured  # once; not the repo's
    # A new keep: the call's environment.json fills it as the rows are copied.
    src = tmp_path / "call"
    (src / "runs" / "serve").mkdir(parents=True)
    (src / "environment.json").write_text((first / "environment-2.json").read_text())
    row = {**next(iter(serve.values())), "device_type": None, "device_name": None, "gpu_name": None, "gpu_uuid": None}
    (src / "runs" / "serve" / "rows.json").write_text(json.dumps([row]))
    keep_run.keep(tmp_path / "kept", [src])
    (kept,) = iter_rows(tmp_path / "kept")
    assert (kept["device_type"], kept["gpu_uuid"]) == ("cuda", call["gpu_uuid"])
    assert keep_run.MEASURED.read_bytes() == measured


def test_the_measured_figures_shipped_are_the_kept_runs_own():
    """bench_core/data/measured.csv (notebook-bench's own GPU figures in every report's Published
    figures) is what gpu/keep_run.py makes of gpu/runs/ now: it cannot drift from the kept rows."""
    keep_run = _keep_run()
    assert keep_run.MEASURED.read_text() == keep_run.measured_csv(ROOT / "gpu" / "runs")
    from bench_core.summary.reference import load_reference
    ours = load_reference().query("source == 'notebook-bench'")
    assert len(ours) >= 9 and set(ours["gpu"]) == {"NVIDIA H200"} and (ours["value"] > 0).all()
    assert ours["note"].str.startswith("measured by notebook-bench").all()


@pytest.mark.slow
@pytest.mark.parametrize("run", GPU_RUNS[-1:], ids=[p.name for p in GPU_RUNS[-1:]])
def test_the_report_of_a_real_gpu_run_sets_lambdal_beside_ours(run, tmp_path, capsys):
    out = tmp_path / "gpu"
    proc = subprocess.run(["cp", "-r", str(run), str(out)], capture_output=True)
    assert proc.returncode == 0
    proc = bench(capsys, "report", str(out), "--svg")
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = (out / "report.html").read_text()
    charts = [o.get("data", {}) for c in json.loads((out / "summary.ipynb").read_text())["cells"]
              for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert charts and all("image/svg+xml" in c for c in charts)  # --svg: each chart's SVG in the notebook beside it
    for section in ("Throughput", "AMP speed-up", "Serving", "Published figures", "Efficiency"):
        assert f">{section}<" in page or f">{section}¶" in page or f'id="{section.replace(" ", "-")}"' in page, section
    published = page[page.index('id="Published-figures"'):]
    assert "lambdal" in published and "H200" in published
    # the other kept H200 run's figures beside ours, as ours (never this run's own rows: issue 60)
    assert "notebook-bench's own earlier runs" in published and "not outside validation" in published
