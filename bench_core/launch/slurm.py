"""`bench slurm`: submit one configuration or a sweep file to SLURM through submitit, one
job per configuration, one task per device; results land in the usual layout (DIR/runs/<run>/).

Inside each task `submitit.helpers.TorchDistributedEnvironment().export()` sets RANK,
WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/PORT; the task joins the process group (env://), runs
the benchmark through the same worker code as torchrun (bench_core.run.worker.run_worker)
and global rank 0 writes the rows. `--cluster local` runs the same path on this machine with
submitit's local executor (one node), which is how the tests exercise it.

Job shape: a configuration that sets nproc_per_node / nnodes (flag, --config file, or the
sweep's grid / settings) runs that shape; otherwise --gpus-per-node and --nodes give it.
--gpus-per-node is also the most a node has: a configuration asking more is refused.
"""
from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sys
from pathlib import Path

from bench_core import results
from bench_core.config.schema import BenchConfig, check_known_keys, load_yaml_mapping
from bench_core.config.sweepfile import SWEEP_KEYS, grids
from bench_core.devices import check_device_count
from bench_core.errors import ConfigError
from bench_core.results.rows import failure_row, run_fields
from bench_core.run import worker

CLUSTERS = ("auto", "slurm", "local", "debug")
PLACEHOLDER_ENDPOINT = "slurm-master:29500"  # replaced by the job's MASTER_ADDR:MASTER_PORT in the task


def resolve_cluster(choice: str) -> str:
    if choice != "auto":
        return choice
    if shutil.which("srun") is None:
        raise ConfigError("cluster", "SLURM not found here (no srun); allowed: run on a SLURM login node, "
                                     "or --cluster local to run the same path on this machine")
    return "slurm"


# -- configurations -------------------------------------------------------------------

def job_configs(args: argparse.Namespace, cluster: str) -> list[BenchConfig]:
    """The configurations to submit, each with its job shape filled in and validated."""
    # Flags (and a --config file) apply to every configuration; flags win, as in `bench run`.
    flags = load_yaml_mapping(args.config_file, "config") if args.config_file else {}
    flags.update({name: getattr(args, name) for name in BenchConfig.field_names()
                  if getattr(args, name, None) is not None})
    if args.sweep:
        entries = [({**values, **flags}, explicit | set(flags)) for values, explicit in sweep_entries(args.sweep)]
    else:
        entries = [(flags, set(flags))]
    return [_shaped(values, explicit, args, cluster) for values, explicit in entries]


def _shaped(values: dict, explicit: set, args, cluster: str) -> BenchConfig:
    values = dict(values)
    if "nproc_per_node" not in explicit and args.gpus_per_node:
        values["nproc_per_node"] = args.gpus_per_node
    if "nnodes" not in explicit and args.nodes:
        values["nnodes"] = args.nodes
    nnodes = int(values.get("nnodes", 1) or 1)
    if nnodes > 1 and not values.get("rdzv_endpoint"):
        values["rdzv_endpoint"] = PLACEHOLDER_ENDPOINT
    values["node_rank"] = 0  # SLURM places the nodes; global rank 0 writes
    cfg = BenchConfig.from_dict(values)
    if args.gpus_per_node and cfg.nproc_per_node > args.gpus_per_node:
        raise ConfigError("nproc_per_node", f"{cfg.nproc_per_node} exceeds --gpus-per-node {args.gpus_per_node}")
    if cluster in ("local", "debug") and cfg.nnodes > 1:
        raise ConfigError("nodes", f"--cluster {cluster} runs on this machine only (one node), got {cfg.nnodes}")
    if cluster == "debug" and cfg.nproc_per_node > 1:
        raise ConfigError("gpus_per_node", "--cluster debug runs one task in this process; use --cluster local")
    if cluster == "local":
        check_device_count(cfg)
    return cfg


def sweep_name(path) -> str:
    name = load_yaml_mapping(path, "sweep").get("name")
    return name if isinstance(name, str) and name.strip() else Path(path).stem


def sweep_entries(path) -> list[tuple[dict, set]]:
    """A sweep file (the `bench sweep` format) -> (field values, fields the file sets) per
    configuration. Devices are not checked here: the jobs run on other machines."""
    data = load_yaml_mapping(path, "sweep")
    if "use" in data:
        raise ConfigError("use", f"{path} picks a sweep by this machine's hardware; give the sweep file itself")
    check_known_keys(data, list(SWEEP_KEYS), where="sweep file")
    settings = data.get("settings") or {}
    if not isinstance(settings, dict):
        raise ConfigError("settings", f"must be a mapping of BenchConfig fields to values, got {settings!r}")
    check_known_keys(settings, BenchConfig.field_names(), where="settings")
    entries, seen = [], set()
    for grid in grids(data.get("grid"), BenchConfig.field_names()):
        for combo in itertools.product(*grid.values()):
            values = {**settings, **dict(zip(grid, combo))}
            key = repr(sorted(values.items(), key=lambda item: item[0]))
            if key not in seen:
                seen.add(key)
                entries.append((values, set(settings) | set(grid)))
    return entries


# -- inside the job ---------------------------------------------------------------------

def run_task(cfg_values: dict, out_dir: str) -> list[dict] | None:
    """One SLURM task (one device). Global rank 0 writes the rows and returns them."""
    import submitit

    env = submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    values = dict(cfg_values)
    if values.get("nnodes", 1) > 1:
        values["rdzv_endpoint"] = f"{env.master_addr}:{env.master_port}"  # recorded as it ran
    cfg = BenchConfig.from_dict(values)
    progress = (lambda message: print(message, flush=True)) if env.rank == 0 else None
    result = worker.run_worker(cfg, progress, threads=_slurm_threads(cfg))
    if env.rank == 0:
        results.write_run(Path(out_dir), result.rows[0]["run_id"], result.rows)
        return result.rows
    if not result.ok:
        raise RuntimeError(f"rank {env.rank}: {result.rows[0]['status']}: {result.rows[0]['message']}")
    return None


def _slurm_threads(cfg) -> int | None:
    # SLURM binds each task to its own CPUs (SLURM_CPUS_PER_TASK): those are this task's cores.
    if cfg.num_threads:
        return cfg.num_threads
    per_task = os.environ.get("SLURM_CPUS_PER_TASK")
    return int(per_task) if per_task and per_task.isdigit() else None


def submitter_row(cfg: BenchConfig, status: str, message: str) -> dict:
    """A failure row written by `bench slurm` when the job left none (its node's
    environment is unknown here)."""
    return failure_row(run_fields(cfg), status, message)


if __name__ == "__main__":
    sys.exit("use `bench slurm`")
