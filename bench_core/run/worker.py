"""One DDP worker (a torchrun worker or a SLURM task): join the group, run, check the replicas, write rows or an error record.

    python -m torch.distributed.run --standalone --nproc-per-node N -m bench_core.run.worker --config C --work-dir W
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import torch
import torch.distributed as dist

from bench_core import results
from bench_core.config.schema import BenchConfig
from bench_core.devices import resolve_device
from bench_core.files import atomic_write_text
from bench_core.results.rows import error_message
from bench_core.results.store import dumps_rows
from bench_core.run import ddp
from bench_core.run.ddp import SEED_PER_RANK_ENV
from bench_core.run.runner import run_here

PROGRESS_TAG = "[bench-progress] "
ROWS_FILE, RANKS_FILE = "rows.json", "ranks.json"
FAILED = ("oom", "error", "unsupported", "crashed", "timeout", "interrupted")  # rows without a measurement


def threads_per_process(cfg, processes_on_node: int) -> int:
    """cfg.num_threads, else this node's cores shared evenly by its worker processes."""
    if cfg.num_threads:
        return cfg.num_threads
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(processes_on_node, 1))


@dataclass
class WorkerResult:
    rows: list[dict]
    ok: bool                 # False: this rank failed; it must leave without further collectives
    ranks: list[dict] = field(default_factory=list)


def run_worker(cfg, progress=None, threads: int | None = None) -> WorkerResult:
    """In a process started with RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR set (torchrun or
    SLURM): join the process group, run the benchmark, check the replicas, gather every
    rank's device. Rows are complete on every rank; the caller decides who writes them.
    `threads` overrides threads_per_process (SLURM knows each task's CPUs)."""

    os.environ["BENCH_WORKER"] = "1"
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0))
    device = resolve_device(cfg.device, local_rank)
    on_node = int(os.environ.get("LOCAL_WORLD_SIZE", cfg.nproc_per_node))
    torch.set_num_threads(threads or threads_per_process(cfg, on_node))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            timeout=dt.timedelta(seconds=cfg.dist_timeout_s),
                            device_id=device if device.type == "cuda" else None)
    run_cfg = cfg.replace(seed=cfg.seed + rank) if os.environ.get(SEED_PER_RANK_ENV) else cfg
    rows = run_here(run_cfg, progress)
    if any(row["status"] in FAILED for row in rows):
        return WorkerResult(rows, ok=False)  # no destroy: a peer may be stuck in a collective
    mine = {"rank": rank, "local_rank": local_rank, "host": socket.gethostname(), "device": str(device),
            "device_name": rows[0].get("device_name"), "threads": torch.get_num_threads(),
            "params_digest_before": ddp.replicas.before,
            "params_digest_after": [digests[rank] for digests in ddp.replicas.after]}
    ranks: list = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, mine)
    dist.destroy_process_group()
    return WorkerResult([_annotate(row, repeat_digests, ranks)
                         for row, repeat_digests in zip(rows, _repeat_digests(rows))], ok=True, ranks=ranks)


def _repeat_digests(rows: list[dict]) -> list[list[str] | None]:
    after = ddp.replicas.after
    return [after[i] if i < len(after) else None for i in range(len(rows))]


def _annotate(row: dict, digests: list[str] | None, ranks: list[dict]) -> dict:
    row = dict(row)
    row["rank_devices"] = "; ".join(f"rank{r['rank']}@{r['host']}:{r['device']}"
                                    + (f" {r['device_name']}" if r["device"].startswith("cuda") else "")
                                    for r in ranks)
    in_sync = None if digests is None else len(set(digests)) == 1
    if "replicas_in_sync" in results.columns():
        row["replicas_in_sync"] = in_sync
    if in_sync is False and row["status"] == "ok":
        row["status"] = "error"
        row["message"] = "DDP replicas diverged: parameter digests per rank " + " ".join(digests)
    return row


def worker_main(argv: list[str] | None = None) -> int:
    """Entry point of one torchrun worker: run, then rank 'local 0 on node 0' writes rows."""
    parser = argparse.ArgumentParser(prog="python -m bench_core.run.worker")
    parser.add_argument("--config", required=True, help="JSON file of BenchConfig fields")
    parser.add_argument("--work-dir", required=True, help="where rows and error files go")
    args = parser.parse_args(argv)
    if "RANK" not in os.environ:
        parser.error("this is a torchrun worker; use `bench run --nproc-per-node N ...`")

    work = Path(args.work_dir)
    rank = int(os.environ["RANK"])
    try:
        cfg = BenchConfig.from_dict(json.loads(Path(args.config).read_text()))
        writer = cfg.node_rank == 0 and int(os.environ.get("LOCAL_RANK", 0)) == 0
        result = run_worker(cfg, _print_progress if writer else None)
    except BaseException as exc:  # noqa: BLE001 - the launcher needs every worker's reason
        traceback.print_exc()
        _write_error(work, rank, "timeout" if is_timeout(str(exc)) else "error",
                     error_message(exc), None)
        return 1
    if not result.ok:
        failed = next(row for row in result.rows if row["status"] in FAILED)
        status = "timeout" if failed["status"] == "error" and is_timeout(failed["message"] or "") else failed["status"]
        _write_error(work, rank, status, failed["message"], failed)
        return 1
    if writer:
        atomic_write_text(work / RANKS_FILE, json.dumps(result.ranks, indent=1))
        atomic_write_text(work / ROWS_FILE, dumps_rows(result.rows))
    return 0


def _print_progress(message: str) -> None:
    print(PROGRESS_TAG + message, flush=True)


def _write_error(work: Path, rank: int, status: str, message: str, row: dict | None) -> None:
    record = {"rank": rank, "host": socket.gethostname(), "time": time.time(), "status": status,
              "message": message, "row": json.loads(dumps_rows([row]))[0] if row else None}
    atomic_write_text(work / f"error-rank{rank}.json", json.dumps(record, indent=1))


def is_peer_loss(text: str) -> bool:
    return bool(re.search(r"(reset|closed) by peer|broken pipe|connection refused|communicator was aborted",
                          text, re.IGNORECASE))


def is_timeout(text: str) -> bool:
    return bool(re.search(r"timed? ?out|timeout|deadline exceeded", text, re.IGNORECASE))


def leave(code: int) -> NoReturn:
    """End a DDP rank's process (a torchrun worker, a SLURM task's rank) once everything is written
    (rows and error files atomically): flush, then leave without C++ static destructors. At
    interpreter exit, torch's gloo/c10d teardown sometimes aborts ("terminate called without an
    active exception", SIGABRT, no Python frame: seen in 2 of 16 two-node runs on a loaded CPU, and
    in 2 of 8 two-task SLURM jobs with both cores busy), which turned a finished run into a crashed
    rank, and a SLURM job with every row ok into a FAILED one. No atexit handler runs."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(worker_main())
