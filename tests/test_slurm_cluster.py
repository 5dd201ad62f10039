"""`bench slurm` against a real SLURM (tests/slurm_cluster.py: munged, slurmctld and slurmd on
this machine, one node, one partition): a sweep as a job array whose tasks have the node alone,
a task requeued in the middle of its run, a shared array cancelled while both tasks write into
one folder, a 2-task DDP job, and submissions the cluster cannot run, refused before anything
is submitted. Skipped, with the reason, where the daemons cannot run (not root, not installed)."""
import csv
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from bench_core import cli, results
from slurm_cluster import MAX_TIME_MIN, SlurmCluster, skip_reason

pytestmark = [pytest.mark.slow, pytest.mark.waits,
              pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))]

BENCH = [sys.executable, "-m", "bench_core", "slurm"]
# resnet18 at 32 px, 2 steps: each array task is a papermill execution of a few seconds' work.
TINY = "model: resnet18, width: 32, height: 32, steps: 2, warmup_steps: 1, repeats: 2, device: cpu"
REPEATS = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster.start()
    finally:
        left = cluster.stop()
    assert not left, f"processes left after the cluster stopped: {left}"


# -- helpers -----------------------------------------------------------------------------------

def sweep_file(folder: Path, name: str, grid: str, min_seconds: float) -> Path:
    """Each configuration's repeats take at least min_seconds each (a window to interrupt)."""
    path = folder / f"{name}.yaml"
    path.write_text(f"name: {name}\ngrid:\n{grid}\nsettings: {{{TINY}, min_seconds: {min_seconds}}}\n")
    return path


def start(cluster, folder: Path, *argv) -> subprocess.Popen:
    """`bench slurm ...` waiting for its jobs, in the background; its output in folder/bench.log."""
    log = open(folder / "bench.log", "w")
    proc = subprocess.Popen([*BENCH, *argv], env=cluster.env, cwd=folder, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc


def finish(proc: subprocess.Popen, folder: Path, timeout_s: float = 600) -> tuple[int, str]:
    proc.wait(timeout=timeout_s)
    return proc.returncode, (folder / "bench.log").read_text()


def wait_for(condition, timeout_s: float, what: str, proc: subprocess.Popen | None = None, folder: Path | None = None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"bench slurm ended before {what}: {(folder / 'bench.log').read_text()[-3000:]}")
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")


def job_id(folder: Path) -> str | None:
    log = (folder / "bench.log").read_text() if (folder / "bench.log").exists() else ""
    found = [line.split()[2].rstrip(":") for line in log.splitlines() if line.startswith("submitted job ")]
    return found[0] if found else None


def task_runs(out: Path) -> list[str]:
    """Run folder of each array task, in task order (the task list bench slurm wrote)."""
    (spec,) = (out / "slurm").glob("*.json")
    return [entry["run_name"] for entry in json.loads(spec.read_text())["executions"]]


def rows_of(out: Path, run_name: str) -> list[dict]:
    return results.read_run(out / "runs" / run_name) or []


def complete_config(rows: list[dict]) -> str | None:
    """A configuration of these rows with all its repeats ok, if any."""
    for config_hash in {r["config_hash"] for r in rows}:
        group = [r for r in rows if r["config_hash"] == config_hash]
        if len(group) == REPEATS and all(r["status"] == "ok" for r in group):
            return config_hash
    return None


def when(text: str) -> dt.datetime:
    stamp = dt.datetime.fromisoformat(text)
    return stamp if stamp.tzinfo else stamp.astimezone()  # scontrol prints local time


def assert_files_whole(out: Path) -> list[dict]:
    """No temporary or half-written file anywhere; results.csv holds exactly the run files' rows."""
    assert not [p for p in out.rglob("*.tmp")], "a temporary file was left behind"
    rows = list(results.iter_rows(out))
    assert not results.damaged_runs(out)
    with open(out / "results.csv") as f:
        csv_rows = list(csv.DictReader(f))
    assert sorted((r["run_id"], str(r["repeat"]), r["status"]) for r in csv_rows) == \
        sorted((r["run_id"], str(r["repeat"]), r["status"]) for r in rows)
    return rows


def leftovers(out: Path) -> list[str]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if str(out) in " ".join(proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(" ".join(proc.info["cmdline"])[:150])
    return found


# -- a sweep as a job array; one task requeued in the middle of its run -------------------------

@pytest.fixture(scope="module")
def requeued(cluster, tmp_path_factory):
    """Two executions, one per model (one array of two tasks); task 0 holds two configurations and is requeued
    (`scontrol requeue`) as soon as its first configuration's rows are written, while the second measures
    (its windows 1 s each; the others' are as short as they come)."""
    folder = tmp_path_factory.mktemp("requeue")
    sweep = sweep_file(folder, "rq", "  - {batch_size: [2], min_seconds: [0]}\n  - {batch_size: [4]}\n"
                       "  - {model: [mobilenet_v3_large], batch_size: [2], min_seconds: [0]}", 1)
    out = folder / "out"
    proc = start(cluster, folder, str(sweep), "--time", "5", "--out", str(out), "--no-report")
    job = wait_for(lambda: job_id(folder), 120, "the submission", proc, folder)
    first = task_runs(out)[0]
    kept_hash = wait_for(lambda: complete_config(rows_of(out, first)), 400, "task 0's first configuration", proc,
                         folder)
    kept = [r for r in rows_of(out, first) if r["config_hash"] == kept_hash]
    cluster.run("scontrol", "requeue", f"{job}_0")
    code, log = finish(proc, folder)
    return {"code": code, "log": log, "job": job, "out": out, "kept": kept, "runs": task_runs(out), "sweep": sweep,
            "tasks": {f["ArrayTaskId"]: f for f in cluster.job(job)}, "task0_log": (out / "slurm" / f"{job}_0.log")}


def test_a_sweep_is_one_array_whose_tasks_have_the_node_alone(requeued, cluster):
    assert requeued["code"] == 0, requeued["log"]
    assert requeued["log"].count("submitted job ") == 1  # one array, not one job per execution
    job, tasks = requeued["job"], requeued["tasks"]
    assert sorted(tasks) == ["0", "1"] and all(t["JobState"] == "COMPLETED" for t in tasks.values())
    assert all(t["OverSubscribe"] == "NO" for t in tasks.values())  # --exclusive, as SLURM recorded it
    for index, run_name in enumerate(requeued["runs"]):
        rows = rows_of(requeued["out"], run_name)
        assert rows and all(r["status"] == "ok" for r in rows)
        assert {(r["slurm_job_id"], r["slurm_array_task_id"], r["slurm_node"], r["slurm_exclusive"]) for r in rows} \
            == {(job, index, cluster.node, True)}
    # The siblings never ran at the same time (what other agents on this machine do is not theirs to
    # answer for, so this looks at when each task ran, not at the other-processes flag): task 1 ran
    # between task 0's two attempts, and every row of task 0 was made outside task 1's run.
    start1, end1 = when(tasks["1"]["StartTime"]), when(tasks["1"]["EndTime"])
    start0 = when(tasks["0"]["StartTime"])  # task 0's second attempt
    assert start0 >= end1 or when(tasks["0"]["EndTime"]) <= start1
    slack = dt.timedelta(seconds=1)  # row timestamps and SLURM's times are whole seconds
    for row in rows_of(requeued["out"], requeued["runs"][0]):
        made = when(row["timestamp"])
        assert made <= start1 + slack or made >= end1 - slack, (row["timestamp"], start1, end1)


def test_a_requeued_task_keeps_what_finished_and_doubles_nothing(requeued):
    out, (first, second) = requeued["out"], requeued["runs"]
    rows = rows_of(out, first)
    kept = {(r["run_id"], r["repeat"], r["timestamp"], r["samples_per_s"]) for r in requeued["kept"]}
    # the configuration that finished before the requeue is kept as it was measured, not measured again
    assert kept <= {(r["run_id"], r["repeat"], r["timestamp"], r["samples_per_s"]) for r in rows}
    assert {r["slurm_restart_count"] for r in requeued["kept"]} == {0}
    # the one that was running was measured again whole, after the requeue: one set of rows, all ok
    rest = [r for r in rows if r["config_hash"] != requeued["kept"][0]["config_hash"]]
    assert len(rest) == REPEATS and {r["status"] for r in rest} == {"ok"} and {r["slurm_restart_count"] for r in rest} \
        == {1}
    assert len(rows) == 2 * REPEATS and len(rows_of(out, second)) == REPEATS
    assert len(assert_files_whole(out)) == 3 * REPEATS
    log = requeued["task0_log"].read_text()
    assert "DUE TO JOB REQUEUE" in log and "interrupted (SIGTERM)" in log and "1 skipped (already complete)" in log
    assert requeued["tasks"]["0"]["Restarts"] == "1"
    assert not leftovers(out)


def test_the_same_command_again_submits_nothing_when_all_is_complete(requeued, cluster, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    jobs = cluster.run("squeue", "-h", "--states=all", "-o", "%i").stdout.split()
    argv = ["slurm", str(requeued["sweep"]), "--time", "5", "--out", str(requeued["out"]), "--no-report"]
    assert cli.main(argv) == 0
    assert "nothing to submit: every configuration is complete" in capsys.readouterr().out
    assert cluster.run("squeue", "-h", "--states=all", "-o", "%i").stdout.split() == jobs


# -- a shared array cancelled while both tasks write into one folder -------------------------------

def test_scancel_of_a_shared_array_leaves_interrupted_rows_and_whole_files(cluster, tmp_path):
    # three configurations a task: when the slower task has finished its first, the other is still measuring
    sweep = sweep_file(tmp_path, "sc", "  - {batch_size: [2, 4, 6]}\n  - {model: [mobilenet_v3_large], batch_size: [2, 4, 6]}",
                       2)
    out = tmp_path / "out"
    proc = start(cluster, tmp_path, str(sweep), "--time", "5", "--share", "--out", str(out), "--no-report")
    job = wait_for(lambda: job_id(tmp_path), 120, "the submission", proc, tmp_path)
    runs = task_runs(out)
    # both tasks run at once (--share: one core each) and each has finished its first configuration
    wait_for(lambda: all(complete_config(rows_of(out, run)) for run in runs), 400, "a configuration of each task",
             proc, tmp_path)
    cluster.run("scancel", job)
    code, log = finish(proc, tmp_path)
    assert code == 1, log
    tasks = {f["ArrayTaskId"]: f for f in cluster.job(job)}
    assert {t["JobState"] for t in tasks.values()} == {"CANCELLED"}
    assert max(when(t["StartTime"]) for t in tasks.values()) < min(when(t["EndTime"]) for t in tasks.values())
    rows = assert_files_whole(out)
    for index, run in enumerate(runs):
        mine = rows_of(out, run)
        done = complete_config(mine)
        cut = [r for r in mine if r["config_hash"] != done]
        stopped = [r for r in cut if r["status"] != "ok"]  # the configuration measuring, and those after it
        assert stopped and {r["status"] for r in stopped} == {"interrupted"}, cut
        assert all("SIGTERM" in r["message"] for r in stopped)
        assert {(r["slurm_job_id"], r["slurm_array_task_id"], r["slurm_exclusive"]) for r in mine} == \
            {(job, index, False)}  # shared, and every row says so
    assert len(rows) == sum(len(rows_of(out, run)) for run in runs)
    assert "interrupted" in log and "the same command again resumes" in log
    assert not leftovers(out) and not cluster.queue()
    # the folder the two tasks wrote at once makes a report with every row
    report = subprocess.run([sys.executable, "-m", "bench_core", "report", str(out)], capture_output=True, text=True,
                            env=cluster.env)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "did not match its run files" not in report.stderr
    html = (out / "report.html").read_text()
    assert "slurm_job_id" in html and "slurm_exclusive" in html  # the report's environment table names the job


# -- one configuration on two tasks: DDP with the rendezvous from SLURM ------------------------

def test_a_two_task_job_runs_ddp_with_one_combined_row_per_repeat(cluster, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([*BENCH, "--model", "resnet18", "--width", "32", "--height", "32", "--batch-size", "2",
                           "--steps", "2", "--warmup-steps", "1", "--repeats", str(REPEATS), "--min-seconds", "0",
                           "--device", "cpu", "--nproc-per-node", "2", "--time", "5", "--out", str(out), "--no-report"],
                          env=cluster.env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 node(s) x 2 CPU process(es)" in done.stdout
    rows = assert_files_whole(out)
    job = job_id_of(done.stdout)
    assert [r["repeat"] for r in rows] == list(range(REPEATS))  # one row per repeat, by rank 0
    for row in rows:
        assert row["status"] == "ok" and row["world_size"] == 2 and row["global_batch_size"] == 4
        assert row["dist_backend"] == "gloo" and row["replicas_in_sync"] is True
        assert row["rank_devices"] == f"rank0@{cluster.node}:cpu; rank1@{cluster.node}:cpu"
        assert (row["slurm_job_id"], row["slurm_node"]) == (job, cluster.node)
    (task,) = cluster.job(job)
    # every rank ends with status 0: gloo's teardown at exit once aborted a rank after the rows were written
    assert task["NumTasks"] == "2" and task["JobState"] == "COMPLETED", (out / "slurm" / f"{job}_0.log").read_text()


def test_a_two_task_job_trains_a_llama_with_fsdp(cluster, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([*BENCH, "--model", "llama-tiny", "--seq-len", "16", "--batch-size", "2", "--steps", "2",
                           "--warmup-steps", "1", "--repeats", "1", "--min-seconds", "0", "--device", "cpu",
                           "--nproc-per-node", "2", "--parallelism", "fsdp", "--time", "5", "--out", str(out), "--no-report"],
                          env=cluster.env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (row,) = assert_files_whole(out)
    assert row["status"] == "ok" and (row["parallelism"], row["mesh_shape"], row["world_size"]) == ("fsdp", "dp_shard=2", 2)
    assert row["rank_devices"] == f"rank0@{cluster.node}:cpu; rank1@{cluster.node}:cpu" and row["tokens_per_s"] > 0


def test_a_rank_that_fails_in_a_slurm_job_is_the_row_s_message(cluster, tmp_path):
    # rank 1 raises at its first forward pass; srun then stops rank 0, whose row says why
    out = tmp_path / "out"
    done = subprocess.run([*BENCH, "--model", "resnet18", "--width", "32", "--height", "32", "--batch-size", "2",
                           "--steps", "2", "--warmup-steps", "1", "--device", "cpu", "--nproc-per-node", "2",
                           "--time", "5", "--out", str(out), "--no-report"], capture_output=True, text=True,
                          env={**cluster.env, "BENCH_FAULT_INJECT": "crash-rank-1"}, cwd=tmp_path, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    (row,) = assert_files_whole(out)
    assert row["status"] == "error" and row["message"].startswith("rank 1 of 2: RuntimeError: injected fault on rank 1")
    assert not leftovers(out) and not cluster.queue()


def job_id_of(stdout: str) -> str:
    return next(line.split()[2].rstrip(":") for line in stdout.splitlines() if line.startswith("submitted job "))


# -- what the cluster cannot run is refused, nothing submitted ---------------------------------------

@pytest.mark.parametrize("argv, expected", [
    (["--partition", "gpu"], "partition: no partition 'gpu' on this cluster; partitions: debug"),
    (["--time", str(MAX_TIME_MIN + 1)], f"time: {MAX_TIME_MIN + 1} min exceeds partition debug's time limit"),
    (["--device", "cuda", "--gpus-per-node", "2"], "gpus_per_node: 2 GPU(s) per node requested; partition debug's "
                                                    "nodes have at most 0"),
    (["--device", "cpu", "--nproc-per-node", "64"], "nproc_per_node: 64 tasks per node requested"),
    (["--device", "cuda:1", "--gpus-per-node", "2"], "device: cuda:1 pins one GPU for every task"),
])
def test_a_submission_the_cluster_cannot_run_is_one_line_and_submits_nothing(cluster, tmp_path, monkeypatch, capsys,
                                                                              argv, expected):
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    before = cluster.run("squeue", "-h", "--states=all", "-o", "%i").stdout.split()
    assert cli.main(["slurm", "--model", "resnet18", "--time", "5", *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err
    assert cluster.run("squeue", "-h", "--states=all", "-o", "%i").stdout.split() == before
    assert not (tmp_path / "out").exists()


def test_dry_run_prints_the_sbatch_parameters_checked_against_the_cluster(cluster, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    sweep = sweep_file(tmp_path, "dry", "  model: [resnet18, mobilenet_v3_large]", 0)
    assert cli.main(["slurm", str(sweep), "--time", "5", "--dry-run", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    for option in ("--array=0-1", "--exclusive", "--requeue", "--nodes=1", "--ntasks-per-node=1", "--time=5"):
        assert f"#SBATCH {option}" in out
    assert "srun --kill-on-bad-exit=1" in out and "partition debug can run it" in out
    assert not (tmp_path / "out").exists() and not cluster.queue()


# -- the cluster itself -------------------------------------------------------------------------

def test_the_cluster_stops_with_every_process_it_started(tmp_path):
    cluster = SlurmCluster(tmp_path).start()
    assert cluster.run("srun", "-n1", "hostname").stdout.strip()
    daemons = [psutil.Process(p.pid) for p in cluster.procs.values()]
    assert cluster.stop() == []
    assert not [p for p in daemons if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
                if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
