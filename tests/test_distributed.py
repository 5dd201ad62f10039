"""Many devices, many machines: gloo DDP through torchrun on CPU, two torchruns acting as two
nodes, what bench slurm asks SLURM for, and failures that end in bounded time with the worker's
own error and no process left behind."""
import json
import os
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
import torchvision

from bench_core import cli, results

from bench_core.launch import torchrun
from bench_core.run import ddp
from bench_core.run import worker
from bench_core.config import ConfigError
from bench_core import run_benchmark
from conftest import bench_here, tiny


_EARLIER_CHILDREN: set[int] = set()


@pytest.fixture(scope="module", autouse=True)
def _children_before_this_file():
    """This worker's children before this file's first fixture (autouse: before ddp_run's launch): not this
    file's. Another file's test may have left one that lives as long as the worker by design
    (multiprocessing's resource tracker, started by a spawn-context Process)."""
    _EARLIER_CHILDREN.update(p.pid for p in psutil.Process().children(recursive=True))


def _leftovers(marker) -> list:
    """Processes still alive that belong to this test: children of pytest this file started, or anything
    whose command line names the test's folder (torchrun workers run in their own sessions)."""
    found = [p for p in psutil.Process().children(recursive=True) if p.is_running() and p.pid not in _EARLIER_CHILDREN]
    for p in psutil.process_iter(["cmdline"]):
        if str(marker) in " ".join(p.info["cmdline"] or []) and p.pid != os.getpid():
            found.append(p)
    return [p for p in found if p.status() != psutil.STATUS_ZOMBIE]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- one node, two processes ----------------------------------------------------------

@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("ddp")
    os.environ[torchrun.WORKDIR_ENV] = str(work)
    os.environ[ddp.SEED_PER_RANK_ENV] = "1"  # replicas can only agree through DDP
    messages = []
    try:
        rows = run_benchmark(tiny(nproc_per_node=2, dist_timeout_s=60), progress=messages.append)
    finally:
        del os.environ[torchrun.WORKDIR_ENV], os.environ[ddp.SEED_PER_RANK_ENV]
    (ranks_file,) = work.glob(f"*/{worker.RANKS_FILE}")
    return rows, json.loads(ranks_file.read_text()), messages, work


def test_two_process_ddp_gives_one_row_with_global_throughput(ddp_run):
    rows, _, messages, work = ddp_run
    assert len(rows) == 1  # one repeat -> one row, written by one rank
    row = rows[0]
    assert row["status"] == "ok", row["message"]
    assert (row["world_size"], row["nproc_per_node"], row["nnodes"], row["dist_backend"]) == (2, 2, 1, "gloo")
    assert row["batch_size_actual"] == 2 and row["global_batch_size"] == 4  # batch stays per device
    assert row["samples_per_s"] == pytest.approx(4 * row["timed_steps"] / row["timed_s"])
    assert row["samples_per_s_per_device"] == pytest.approx(row["samples_per_s"] / 2)
    assert row["rank_devices"].count("cpu") == 2 and "rank1@" in row["rank_devices"]
    assert row["threads"] == worker.threads_per_process(tiny(), 2)  # cores shared, not torchrun's 1
    assert any("repeat 0 (1 of 1)" in m for m in messages)  # rank 0's progress reaches the caller
    # The model's size reaches the row and its summary.csv line (counted independently here).
    resnet18 = sum(p.numel() for p in torchvision.models.resnet18(weights=None).parameters())
    (line,) = results.summary_lines(rows)
    assert row["params_count"] == line["params_count"] == resnet18 and line["repeats_ok"] == 1
    assert not _leftovers(work)


def test_ddp_replicas_stay_in_sync(ddp_run):
    _, ranks, _, _ = ddp_run
    assert [r["rank"] for r in ranks] == [0, 1]
    before = [r["params_digest_before"] for r in ranks]
    after = [r["params_digest_after"][-1] for r in ranks]
    assert before[0] != before[1]  # each rank built its own weights (seed + rank)
    assert after[0] == after[1]  # DDP's broadcast and all-reduce made them one model
    assert after[0] != before[0]  # and it trained


def test_diverged_replicas_make_an_error_row():
    row = results.make_row(status="ok", message=None)
    flagged = worker._annotate(row, ["aaaa", "bbbb"], [{"rank": 0, "host": "h", "device": "cpu"},
                                                             {"rank": 1, "host": "h", "device": "cpu"}])
    assert flagged["status"] == "error" and "diverged" in flagged["message"]
    assert worker._annotate(row, ["aaaa", "aaaa"], [])["status"] == "ok"


# -- two nodes on 127.0.0.1 -------------------------------------------------------------

@pytest.mark.slow
def test_two_torchruns_as_two_nodes_give_one_combined_row(tmp_path):
    endpoint = f"127.0.0.1:{_free_port()}"
    node = dict(nproc_per_node=1, nnodes=2, rdzv_endpoint=endpoint, dist_timeout_s=60, num_threads=1)
    with ThreadPoolExecutor(2) as pool:  # each launch runs its own torchrun, as on two machines
        futures = {rank: pool.submit(torchrun.launch, tiny(**node, node_rank=rank), workdir=tmp_path)
                   for rank in (1, 0)}
        node_rows = {rank: future.result() for rank, future in futures.items()}
    assert node_rows[1] == []  # only node 0 returns (and writes) rows
    (row,) = node_rows[0]
    assert row["status"] == "ok", row["message"]
    assert (row["world_size"], row["nnodes"], row["global_batch_size"]) == (2, 2, 4)
    assert row["rank_devices"].count("@") == 2
    assert not _leftovers(tmp_path)


def test_multi_node_command_is_c10d_with_one_rendezvous_id(tmp_path):
    cfg = tiny(nproc_per_node=2, nnodes=2, node_rank=1, rdzv_endpoint="node0:29500", dist_timeout_s=42)
    command = torchrun.torchrun_command(cfg, tmp_path)
    joined = " ".join(command)
    assert "--standalone" not in command
    assert "--nnodes 2 --node-rank 1 --rdzv-backend c10d --rdzv-endpoint node0:29500" in joined
    assert "join_timeout=42" in joined and "is_host=false" in joined
    node0 = torchrun.torchrun_command(cfg.replace(node_rank=0), tmp_path)
    rdzv_id = command[command.index("--rdzv-id") + 1]
    assert node0[node0.index("--rdzv-id") + 1] == rdzv_id  # both nodes join the same rendezvous
    single = torchrun.torchrun_command(tiny(nproc_per_node=2), tmp_path)
    assert "--standalone" in single and single[single.index("--nproc-per-node") + 1] == "2"


def test_threads_are_shared_not_silently_one():
    cores = len(os.sched_getaffinity(0))
    assert worker.threads_per_process(tiny(), 1) == cores
    assert worker.threads_per_process(tiny(), 2) == max(1, cores // 2)
    assert worker.threads_per_process(tiny(num_threads=3), 2) == 3


# -- failures -------------------------------------------------------------------------------

def test_more_processes_than_cores_is_refused_before_launch(capsys):
    with pytest.raises(ConfigError, match="nproc_per_node"):
        torchrun.launch(tiny(nproc_per_node=99))
    done = bench_here(capsys, "run", "--nproc-per-node", "99", "--device", "cpu")  # bench's main: its exit status
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "nproc_per_node: 99" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fault, status, says", [
    ("crash-rank-1", "error", "rank 1 of 2 (%s): RuntimeError: injected fault on rank 1"),
    ("exit-rank-1", "error", "rank 1 of 2 exited with code 17"),
    ("hang-rank-1", "timeout", "Timed out"),  # rank 0's collective gives up after dist_timeout_s
])
def test_a_failing_worker_ends_the_run_with_its_error(fault, status, says, tmp_path, monkeypatch):
    monkeypatch.setenv(ddp.FAULT_ENV, fault)
    monkeypatch.setenv(torchrun.WORKDIR_ENV, str(tmp_path))
    start = time.monotonic()
    rows = run_benchmark(tiny(nproc_per_node=2, dist_timeout_s=5))
    elapsed = time.monotonic() - start
    (row,) = rows
    assert row["status"] == status
    assert (says % socket.gethostname() if "%s" in says else says) in row["message"]
    assert row["world_size"] == 2 and row["nproc_per_node"] == 2
    assert elapsed < torchrun.launch_timeout_s(tiny(dist_timeout_s=5))  # bounded, not the watchdog
    assert not _leftovers(tmp_path)


@pytest.mark.slow
def test_a_stuck_run_is_killed_at_the_launch_limit_leaving_no_process(tmp_path, monkeypatch):
    monkeypatch.setenv(ddp.FAULT_ENV, "hang-rank-1")
    cfg = tiny(nproc_per_node=2, dist_timeout_s=600)  # collectives would wait 10 minutes
    (row,) = torchrun.launch(cfg, workdir=tmp_path, timeout_s=8)
    assert row["status"] == "timeout" and "8 s launch limit" in row["message"]
    assert not _leftovers(tmp_path)


# -- SLURM: what bench slurm asks for (tests/test_slurm_cluster.py runs it on a real cluster) ---------

def _slurm_args(*argv):
    return cli.build_parser().parse_args(["slurm", *argv])


def test_sweep_file_gives_one_configuration_per_combination_with_its_own_shape(tmp_path):
    from bench_core.launch import slurm
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: s\ngrid:\n  nproc_per_node: [1, 2, 8]\nsettings:\n  model: resnet18\n  width: 32\n")
    configs = slurm.job_configs(_slurm_args(str(sweep), "--nodes", "2", "--gpus-per-node", "8"))
    assert [(c.nnodes, c.nproc_per_node, c.device) for c in configs] == [(2, 1, "cuda"), (2, 2, "cuda"), (2, 8, "cuda")]
    assert [slurm.JobShape.of(c).gpus_per_node for c in configs] == [1, 2, 8]
    (flags_only,) = slurm.job_configs(_slurm_args("--model", "resnet18", "--gpus-per-node", "4", "--device", "cpu"))
    assert (flags_only.nnodes, flags_only.nproc_per_node, slurm.JobShape.of(flags_only).gpus_per_node) == (1, 4, 0)
    with pytest.raises(ConfigError, match="exceeds --gpus-per-node 4"):
        slurm.job_configs(_slurm_args(str(sweep), "--gpus-per-node", "4"))


def test_a_pinned_gpu_with_several_tasks_per_node_is_refused(tmp_path):
    # issue 28, defect 11: every task would open the same GPU (NCCL: "Duplicate GPU detected"),
    # as the torchrun path refuses it
    from bench_core.launch import slurm
    with pytest.raises(ConfigError, match="device: cuda:0 pins one GPU for every task; with 2 tasks per node"):
        slurm.job_configs(_slurm_args("--model", "resnet18", "--device", "cuda:0", "--gpus-per-node", "2"))
    with pytest.raises(ConfigError, match="device: cuda:1 pins one GPU"):
        slurm.job_configs(_slurm_args("--model", "resnet18", "--device", "cuda:1", "--nproc-per-node", "2"))
    with pytest.raises(ConfigError, match="cuda:3 is not among the 1 GPU"):
        slurm.job_configs(_slurm_args("--model", "resnet18", "--device", "cuda:3"))
    (one,) = slurm.job_configs(_slurm_args("--model", "resnet18", "--device", "cuda:1", "--gpus-per-node", "2",
                                           "--nproc-per-node", "1"))
    assert (one.device, one.nproc_per_node) == ("cuda:1", 1)


def test_slurm_times_gres_and_rendezvous_are_read_as_slurm_writes_them():
    from bench_core.launch import slurm
    assert [slurm.minutes(t) for t in ("30", "00:10:00", "1:30", "2-00:00:00", "1-12", "UNLIMITED")] == \
        [30, 10, 1.5, 2880, 2160, None]
    # ExitCode is "code:signal": a task stopped by scancel or a requeue names the signal in its rows
    assert [slurm.exit_text(c) for c in ("0:15", "1:0", "0:9", "0:99", None)] == \
        ["exit 0:15, signal SIGTERM", "exit 1:0", "exit 0:9, signal SIGKILL", "exit 0:99, signal 99", "exit unknown"]
    assert [slurm.gpu_count(g) for g in ("(null)", "gpu:8", "gpu:a100:4(S:0-1),shard:8", "gpu:a:2,gpu:b:2")] == \
        [0, 8, 4, 4]
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "8",
           "MASTER_ADDR": "node01", "MASTER_PORT": "29512"}
    assert slurm.rendezvous(env, tiny(nproc_per_node=8), port_offset=2) == {
        "RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "node01",
        "MASTER_PORT": "29514"}


def test_rows_name_the_slurm_job_they_were_made_in():
    from bench_core.measure import environment
    assert environment.slurm_job({}) == {}
    assert environment.slurm_job({"SLURM_JOB_ID": "41", "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "1",
                                  "SLURMD_NODENAME": "gpu07", "SLURM_RESTART_COUNT": "2",
                                  environment.SLURM_EXCLUSIVE_ENV: "0"}) == {
        "slurm_job_id": "40", "slurm_array_task_id": 1, "slurm_node": "gpu07", "slurm_restart_count": 2,
        "slurm_exclusive": False}
    row = {"slurm_job_id": "7", "slurm_exclusive": True}
    assert set(row) <= set(results.columns())


def test_dry_run_without_slurm_prints_the_sbatch_script_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))  # no sbatch here
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: s\ngrid:\n  model: [resnet18, vgg16]\n  nproc_per_node: [1, 2]\nsettings:\n  width: 32\n")
    assert cli.main(["slurm", str(sweep), "--dry-run", "--share", "--partition", "gpu", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "job array 1 of 2: 2 task(s), 1 node(s) x 1 GPU(s) each" in out
    assert "job array 2 of 2: 2 task(s), 1 node(s) x 2 GPU(s) each" in out
    assert out.count(": resnet18 fp32 on cuda, 1 configuration(s)") == 2  # one shape a task: 1 and 2 GPUs apart
    assert "#SBATCH --gpus-per-node=2" in out and "#SBATCH --partition=gpu" in out and "--exclusive" not in out
    assert "export BENCH_SLURM_EXCLUSIVE=0" in out and "not checked against a cluster: no sbatch here" in out
    assert not (tmp_path / "o").exists()
    assert cli.main(["slurm", str(sweep), "--out", str(tmp_path / "o")]) == 2
    assert "slurm: SLURM not found here (no sbatch, scontrol, sinfo)" in capsys.readouterr().err


def test_slurm_bad_input_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid:\n  nproc_per_nod: [1, 2]\n")
    assert cli.main(["slurm", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nproc_per_nod" in err and "did you mean 'nproc_per_node'" in err
    assert not (tmp_path / "o").exists()
