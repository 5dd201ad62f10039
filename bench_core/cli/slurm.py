"""`bench slurm`: submit one configuration or a sweep file to SLURM through submitit.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from bench_core import results
from bench_core.cli.common import add_config_arguments, format_rows
from bench_core.files import check_writable
from bench_core.launch.slurm import (
    CLUSTERS,
    job_configs,
    resolve_cluster,
    run_task,
    submitter_row,
    sweep_name,
)
from bench_core.run.worker import is_timeout


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """examples:
  bench slurm params/scaling.yaml --gpus-per-node 8 --partition gpu --time 30 --out outputs/scaling
  bench slurm --model resnet50 --precision amp-bf16 --batch-size 256 --nodes 2 --gpus-per-node 8 --partition gpu
  bench slurm --model resnet18 --width 64 --height 64 --device cpu --gpus-per-node 2 --cluster local
Configuration flags apply to every configuration of a sweep file.
exit status: 0 submitted (and, with --wait, every row ok), 1 a run failed, 2 bad input."""
    p.add_argument("sweep", nargs="?", metavar="SWEEP.yaml",
                   help="sweep file (name, grid, settings); without it the configuration flags give one run")
    g = p.add_argument_group("SLURM job")
    g.add_argument("--nodes", type=_positive("nodes"), help="nodes per job, for configurations that do not set nnodes")
    g.add_argument("--gpus-per-node", type=_positive("gpus_per_node"), dest="gpus_per_node",
                   help="GPUs per node (one task each); with --device cpu: processes per node, no GPU requested")
    g.add_argument("--partition", help="SLURM partition (default: the cluster's)")
    g.add_argument("--time", type=_positive("time"), default=60, dest="time_min",
                   help="time limit per job, minutes (default: 60)")
    g.add_argument("--account", help="SLURM account to charge")
    g.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                   help="wait for the jobs and print their rows (default) or only print the job ids")
    g.add_argument("--out", metavar="DIR", help="results directory, on a file system the nodes share "
                                               "(default: outputs/<sweep name>, or outputs/slurm)")
    g.add_argument("--cluster", default="auto", choices=CLUSTERS,
                   help="auto: SLURM when srun is found, else an error; local: submitit's local executor "
                        "(this machine, one node); debug: in this process, one task")
    add_config_arguments(p)


def _positive(name: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {value}")
        return value
    return parse


def main(args: argparse.Namespace) -> int:
    import submitit

    cluster = resolve_cluster(args.cluster)
    configs = job_configs(args, cluster)  # every bad input is refused before anything is submitted
    out_dir = Path(args.out or f"outputs/{sweep_name(args.sweep) if args.sweep else 'slurm'}").resolve()
    check_writable(out_dir)
    executor = submitit.AutoExecutor(folder=out_dir / "slurm", cluster=cluster)
    jobs = []
    for cfg in configs:
        cpu = cfg.device == "cpu"
        executor.update_parameters(
            name=f"bench-{cfg.model}-{cfg.config_hash()}", nodes=cfg.nnodes, tasks_per_node=cfg.nproc_per_node,
            gpus_per_node=0 if cpu else cfg.nproc_per_node, timeout_min=args.time_min,
            slurm_partition=args.partition, slurm_account=args.account)
        job = executor.submit(run_task, cfg.to_dict(), str(out_dir))
        print(f"submitted job {job.job_id}: {cfg.model} {cfg.mode} {cfg.precision} batch {cfg.batch_size} on "
              f"{cfg.nnodes} node(s) x {cfg.nproc_per_node} {'process(es)' if cpu else 'GPU(s)'}", flush=True)
        jobs.append((job, cfg))
    if not args.wait:
        print(f"results will land in {out_dir}; logs in {out_dir / 'slurm'}")
        return 0
    return wait_for_jobs(jobs, out_dir)


def wait_for_jobs(jobs, out_dir: Path) -> int:
    all_ok = True
    for job, cfg in jobs:
        message = f"job {job.job_id} returned no rows"
        try:
            rows = job.task(0).result()
        except Exception as exc:  # noqa: BLE001 - a failed job is a row, not a crash of `bench slurm`
            rows = None
            message = f"job {job.job_id} failed: {_last_line(str(exc))}"
        if not rows:  # rank 0 died before writing: record the job's own error
            rows = [submitter_row(cfg, "timeout" if is_timeout(message) else "error", message)]
            results.write_run(out_dir, rows[0]["run_id"], rows)
        print(f"job {job.job_id}:")
        print(format_rows(rows))
        all_ok &= all(row["status"] == "ok" for row in rows)
    print(f"results in {out_dir / 'results.csv'}")
    return 0 if all_ok else 1


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else "no message"
