"""The torchrun launcher: a configuration with more than one process runs as torchrun workers
(`python -m bench_core.run.worker`, see run/worker.py) in a supervised child process (DDP
cannot run inside a Jupyter kernel). Exactly one worker writes rows; this reads them back.

One node, N devices: `bench run ... --nproc-per-node N` runs
    python -m torch.distributed.run --standalone --nproc-per-node N -m bench_core.run.worker ...
Each worker pins device LOCAL_RANK (nccl on CUDA, gloo on CPU), wraps the model in DDP and
keeps the per-device batch; global batch = per-device batch x world size.

Many nodes (the DLPerf set-up; c10d rendezvous, no launcher of our own):
  1. the same code and the same environment on every node (same commit, same venv or image:
     `bench sysinfo` on each node must agree on torch / CUDA / NCCL versions);
  2. one TCP port open on node 0, reachable from every node (the rendezvous store, e.g.
     29500), plus the ports NCCL/gloo pick between nodes (no firewall between the nodes);
  3. the same command on every node, only --node-rank differs, started within
     --dist-timeout-s seconds of each other:
        node0$ bench run --model resnet50 --nproc-per-node 8 --nnodes 2 --node-rank 0 --rdzv-endpoint node0:29500
        node1$ bench run --model resnet50 --nproc-per-node 8 --nnodes 2 --node-rank 1 --rdzv-endpoint node0:29500
     which run `torchrun --nnodes 2 --node-rank R --rdzv-backend c10d --rdzv-endpoint node0:29500`.
  Node 0 hosts the store and returns (and with --out writes) the one combined result; the
  other nodes return no rows. c10d numbers the ranks in its own order, so the writer is
  "local rank 0 on node_rank 0", not global rank 0. Set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME
  when the nodes have several network interfaces.

Threads on CPU: torchrun sets OMP_NUM_THREADS=1 per worker unless it is set, which makes a
1- vs N-process comparison a comparison of thread counts. Here every worker uses
cfg.num_threads when given, else (cores available to this process) // (workers on this node),
at least 1; the `threads` column records what ran. So 1 process x 2 threads is compared with
2 processes x 1 thread on a 2-core machine.

Failure, in bounded time: collectives time out after cfg.dist_timeout_s (process-group
timeout), so does the multi-node rendezvous (join / read timeouts); a dead worker makes
torchrun stop the others (--max-restarts 0); the launcher kills torchrun and every worker
(they run in their own sessions) after an overall limit, max(30 min, dist_timeout_s x
(repeats + 4)), or on KeyboardInterrupt. A failed run returns one row (status error, oom,
unsupported or timeout) whose message is the failing worker's own error.

Test hooks (environment variables, for tests only):
  BENCH_FAULT_INJECT=crash-rank-R | oom-rank-R | exit-rank-R | hang-rank-R   global rank R raises /
      raises torch.OutOfMemoryError (that rank alone runs out of memory) / exits without a Python
      error / sleeps forever at its first forward pass of the benchmark.
  BENCH_TEST_SEED_PER_RANK=1   rank R builds its model and data with seed + R, so replicas
      stay equal only through DDP (its initial broadcast and gradient all-reduce).
  BENCH_DIST_WORKDIR=DIR   keep each launch's files (config, torchrun command and log,
      per-rank logs and error files, ranks.json with each replica's parameter digests) in
      a new folder under DIR instead of a temporary one.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import signal
import sys
import tempfile
from pathlib import Path

from bench_core.devices import check_device_count, resolve_device
from bench_core.errors import ConfigError
from bench_core.launch.supervisor import ChildOutcome, supervise
from bench_core.measure import environment
from bench_core.results.rows import failure_row, run_fields
from bench_core.run.worker import (
    PROGRESS_TAG,
    ROWS_FILE,
    is_peer_loss,
    is_timeout,
    threads_per_process,
)

WORKDIR_ENV = "BENCH_DIST_WORKDIR"
MIN_LAUNCH_TIMEOUT_S = 1800.0


def launch(cfg, progress=None, *, workdir: str | Path | None = None, timeout_s: float | None = None) -> list[dict]:
    """Run cfg on cfg.nproc_per_node workers through torchrun and return the rows the writer
    made; [] on a node other than node 0 of a multi-node run; one failure row if it failed.

    More workers than devices is a ConfigError before anything starts.
    """
    resolve_device(cfg.device)
    check_device_count(cfg)
    if ":" in cfg.device and cfg.nproc_per_node > 1:
        raise ConfigError("device", f"{cfg.device} pins one GPU for every worker; with nproc_per_node > 1 "
                                    "use cuda or auto (worker i gets GPU i)")
    progress = progress or (lambda message: None)
    keep = workdir or os.environ.get(WORKDIR_ENV)
    with contextlib.ExitStack() as stack:
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix=f"{cfg.config_hash()}-node{cfg.node_rank}-", dir=keep))
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-dist-")))
        (work / "config.json").write_text(json.dumps(cfg.to_dict(), indent=1))
        command = torchrun_command(cfg, work)
        (work / "command.txt").write_text(shlex.join(command) + "\n")
        limit_s = timeout_s if timeout_s is not None else launch_timeout_s(cfg)
        outcome = supervise(command, env=worker_env(cfg), limit_s=limit_s, on_line=_progress_lines(progress),
                            log_path=work / "torchrun.log")
        return _collect(cfg, work, outcome, limit_s)


def launch_timeout_s(cfg) -> float:
    """The overall limit: long enough for any phase a collective timeout allows."""
    return max(MIN_LAUNCH_TIMEOUT_S, cfg.dist_timeout_s * (cfg.repeats + 4))


def torchrun_command(cfg, work: Path) -> list[str]:
    """`python -m torch.distributed.run ... -m bench_core.run.worker --config ... --work-dir ...`"""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(cfg.nproc_per_node)]
    if cfg.nnodes == 1:
        command += ["--standalone"]
    else:
        timeout = str(math.ceil(cfg.dist_timeout_s))
        rdzv_id = "bench-" + cfg.replace(node_rank=0).config_hash()  # the same on every node
        command += ["--nnodes", str(cfg.nnodes), "--node-rank", str(cfg.node_rank),
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", cfg.rdzv_endpoint, "--rdzv-id", rdzv_id,
                    "--rdzv-conf", f"join_timeout={timeout},read_timeout={timeout},"
                                   f"is_host={'true' if cfg.node_rank == 0 else 'false'}"]
    command += ["--max-restarts", "0", "--monitor-interval", "0.5",
                "--log-dir", str(work / "logs"), "--tee", "3", "--log-line-prefix-template", "[rank${rank}]:",
                "-m", "bench_core.run.worker", "--config", str(work / "config.json"), "--work-dir", str(work)]
    return command


def worker_env(cfg) -> dict:
    env = dict(os.environ)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)  # e.g. launched from inside a SLURM task: torchrun sets its own
    env.update(BENCH_WORKER="1", PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS=str(threads_per_process(cfg, cfg.nproc_per_node)))
    return env


def _progress_lines(progress):
    """Worker lines tagged as progress go to `progress`; everything else stays in the tail."""
    def claim(text: str) -> bool:
        _, _, rest = text.partition("]:") if text.startswith("[rank") else ("", "", text)
        if rest.startswith(PROGRESS_TAG):
            progress(rest[len(PROGRESS_TAG):])
            return True
        return False
    return claim


# -- the launcher: reading the outcome ---------------------------------------------------

def _collect(cfg, work: Path, outcome: ChildOutcome, limit_s: float) -> list[dict]:
    """Rows from the writer; else one failure row with the root cause's own message."""
    rows_path = work / ROWS_FILE
    if rows_path.exists():
        return json.loads(rows_path.read_text())
    errors = _error_records(work)
    root_rank, root_local_rank, exitcode = _root_cause(outcome.tail)
    # A rank that lost its peer ("connection reset by peer") reports a symptom: the cause is
    # the earliest other error, else the rank torchrun saw die without one (a hard crash).
    causes = [r for r in errors.values() if not is_peer_loss(r["message"] or "")]
    if not causes:
        # torchrun may observe the rank that lost its peer first: a rank that failed without
        # leaving an error (exit code, signal) is still the cause.
        silent = [failure for failure in _failures(outcome.tail) if failure[0] not in errors]
        # A rank torchrun stopped itself (SIGTERM, after another failed) is a casualty, not the
        # cause, even when torchrun lists it first (seen under load: two failures observed in
        # the same monitor tick).
        silent.sort(key=lambda failure: failure[2] == -signal.SIGTERM)
        if silent:
            root_rank, root_local_rank, exitcode = silent[0]
    hard_death = root_rank is not None and root_rank not in errors and not causes
    record = None if hard_death else min(causes or errors.values(), key=lambda r: r["time"], default=None)
    if outcome.timed_out:
        message = (f"no result within the {limit_s:.0f} s launch limit; stopped {outcome.killed} "
                   f"process(es) (torchrun and its workers)")
        if record:
            message += f"; rank {record['rank']}: {record['message']}"
        return [_launcher_row(cfg, "timeout", message)]
    if record is not None:
        prefix = f"rank {record['rank']} of {cfg.world_size} ({record['host']}): "
        if record.get("row"):
            row = dict(record["row"])
            row.update(status=record["status"], message=prefix + (record["message"] or ""),
                       world_size=cfg.world_size, nproc_per_node=cfg.nproc_per_node, nnodes=cfg.nnodes,
                       node_rank=cfg.node_rank)
            return [row]
        return [_launcher_row(cfg, record["status"], prefix + record["message"])]
    if outcome.returncode == 0:
        return []  # a node other than node 0: node 0 writes the combined rows
    message = _torchrun_message(cfg, outcome, root_rank, root_local_rank, exitcode, work)
    return [_launcher_row(cfg, "timeout" if is_timeout(message) else "error", message)]


def _error_records(work: Path) -> dict[int, dict]:
    records = {}
    for path in work.glob("error-rank*.json"):
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(path.read_text())
            records[int(record["rank"])] = record
    return records


def _root_cause(lines: list[str]) -> tuple[int | None, int | None, int | None]:
    """torchrun's 'Root Cause (first observed failure)' block: rank, local rank, exit code."""
    text = "\n".join(lines)
    _, found, block = text.partition("Root Cause (first observed failure)")
    rank = re.search(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)", block) if found else None
    code = re.search(r"exitcode\s*:\s*(-?\d+)", block) if found else None
    if not rank:
        return None, None, None
    return int(rank.group(1)), int(rank.group(2)), (int(code.group(1)) if code else None)


def _failures(lines: list[str]) -> list[tuple[int, int, int]]:
    """Every failed rank torchrun lists (Failures and Root Cause blocks): rank, local rank, exit code."""
    found = re.findall(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)", "\n".join(lines))
    return [(int(rank), int(local), int(code)) for rank, local, code in found]


def _torchrun_message(cfg, outcome: ChildOutcome, rank: int | None, local_rank: int | None, exitcode: int | None,
                      work: Path) -> str:
    if rank is None:
        useful = [line for line in outcome.tail if line.strip() and not line.startswith(("*", " "))]
        last = useful[-1] if useful else "no output"
        if "RendezvousTimeoutError" in last:
            return (f"rendezvous at {cfg.rdzv_endpoint} timed out after {cfg.dist_timeout_s:g} s: not all "
                    f"{cfg.nnodes} nodes joined (start the same command on every node, only --node-rank differs)")
        return f"torchrun {_exit_text(outcome.returncode)}; its last output: {last[:500]}"
    said = _last_stderr_line(work, local_rank)
    message = f"rank {rank} of {cfg.world_size} {_exit_text(exitcode)} without a Python error"
    return message + (f"; its last output: {said}" if said else "")


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _last_stderr_line(work: Path, local_rank: int) -> str | None:
    # --tee writes each worker's stderr to logs/<run>/attempt_0/<local rank>/stderr.log
    for path in sorted(work.glob(f"logs/*/attempt_*/{local_rank}/stderr.log")):
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
        if lines:
            return lines[-1][:500]
    return None


def _launcher_row(cfg, status: str, message: str) -> dict:
    """A failure row made by the launcher when no worker could make one."""
    device = resolve_device(cfg.device)
    fields = {**run_fields(cfg), **environment.collect(device), **environment.device_columns(device),
              "dist_backend": "nccl" if device.type == "cuda" else "gloo"}
    return failure_row(fields, status, message)
