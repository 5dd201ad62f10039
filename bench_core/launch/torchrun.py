"""DDP through torch.distributed: the worker side (context, wrap, gather), the worker entry
point (`python -m bench_core.run.worker`) and the launcher (torchrun as a subprocess; DDP
cannot run inside a Jupyter kernel). Exactly one worker writes rows.

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
  BENCH_FAULT_INJECT=crash-rank-R | exit-rank-R | hang-rank-R   global rank R raises / exits
      without a Python error / sleeps forever at its first forward pass of the benchmark.
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
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from bench_core.run.worker import PROGRESS_TAG, ROWS_FILE, is_peer_loss, is_timeout, threads_per_process


WORKDIR_ENV = "BENCH_DIST_WORKDIR"
MIN_LAUNCH_TIMEOUT_S = 1800.0
KILL_GRACE_S = 5.0


def launch(cfg, progress=None, *, workdir: str | Path | None = None, timeout_s: float | None = None) -> list[dict]:
    """Run cfg on cfg.nproc_per_node workers through torchrun and return the rows the writer
    made; [] on a node other than node 0 of a multi-node run; one failure row if it failed.

    More workers than devices is a ConfigError before anything starts.
    """
    from bench_core.errors import ConfigError
    from bench_core.devices import check_device_count, resolve_device
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
        outcome = _supervise(command, worker_env(cfg), limit_s, progress, work / "torchrun.log")
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


@dataclass
class _Outcome:
    returncode: int | None
    timed_out: bool
    seconds: float
    tail: list[str]
    killed: int = 0


def _supervise(command: list[str], env: dict, limit_s: float, progress, log_path: Path) -> _Outcome:
    """Run torchrun in its own session; stream its output (progress lines to `progress`, all
    to the log); on the time limit or Ctrl-C kill it and every worker it started."""
    import psutil

    start = time.perf_counter()
    tail: deque[str] = deque(maxlen=400)
    proc = subprocess.Popen([sys.executable, "-c", _PARENT_DEATH_SHIM, *command[1:]], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            bufsize=1, start_new_session=True)
    reader = threading.Thread(target=_read_output, args=(proc.stdout, log_path, tail, progress), daemon=True)
    reader.start()
    seen: dict[int, psutil.Process] = {}  # every descendant ever seen: workers run in their own sessions
    timed_out, returncode = False, None
    try:
        while returncode is None:
            _remember_descendants(proc.pid, seen)
            if time.perf_counter() - start > limit_s:
                timed_out = True
                break
            try:
                returncode = proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
    finally:
        # Runs on success too: nothing torchrun started may outlive the launch.
        killed = _kill_tree(proc, seen)
        reader.join(timeout=5)
    return _Outcome(returncode=proc.returncode if not timed_out else None, timed_out=timed_out,
                    seconds=time.perf_counter() - start, tail=list(tail), killed=killed)


# torchrun gets SIGTERM (and then stops its workers) if this launcher dies without cleaning
# up (killed, or a notebook kernel shut down): Linux PR_SET_PDEATHSIG, kept across exec.
_PARENT_DEATH_SHIM = """import ctypes, os, signal, sys
try:
    ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))
except (OSError, AttributeError):
    pass
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"""


def _read_output(stream, log_path: Path, tail: deque, progress) -> None:
    with open(log_path, "w") as log:
        for line in stream:
            log.write(line)
            log.flush()
            text = line.rstrip("\n")
            _, _, rest = text.partition("]:") if text.startswith("[rank") else ("", "", text)
            if rest.startswith(PROGRESS_TAG):
                progress(rest[len(PROGRESS_TAG):])
            else:
                tail.append(text)


def _remember_descendants(pid: int, seen: dict) -> None:
    import psutil
    try:
        for child in psutil.Process(pid).children(recursive=True):
            seen.setdefault(child.pid, child)
    except psutil.Error:
        pass


def _kill_tree(proc: subprocess.Popen, seen: dict) -> int:
    """SIGTERM torchrun's session (torchrun then stops its workers), then SIGKILL whatever
    is left of every process it ever started. Returns how many were still running."""
    import psutil

    _remember_descendants(proc.pid, seen)
    running = sum(1 for p in seen.values() if _running(p)) + (proc.poll() is None)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=KILL_GRACE_S)
    alive = [p for p in seen.values() if _running(p)]
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=KILL_GRACE_S)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)
    return running


def _running(p) -> bool:
    import psutil
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _collect(cfg, work: Path, outcome: _Outcome, limit_s: float) -> list[dict]:
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


def _torchrun_message(cfg, outcome: _Outcome, rank: int | None, local_rank: int | None, exitcode: int | None,
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
    from bench_core.measure import environment
    from bench_core.run import runner
    from bench_core.devices import Backend, resolve_device
    device = resolve_device(cfg.device)
    backend = Backend.for_device(device)
    run = {"run_id": runner._run_id(cfg), "config_hash": cfg.config_hash(), **cfg.to_dict(),
           "batch_size_requested": cfg.batch_size, "data": "synthetic", **environment.collect(device),
           "device_type": device.type, "device_name": backend.device_name(), "device_count": backend.device_count(),
           "world_size": cfg.world_size, "dist_backend": "nccl" if device.type == "cuda" else "gloo"}
    return runner._failure_row(run, status, message)
