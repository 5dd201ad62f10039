"""SLURM for `bench slurm`: the configurations and their job shape, the sbatch parameters and
script of a job array, checks against the cluster before anything is submitted, the states of
submitted jobs, and inside a task the rendezvous taken from SLURM's environment.

What a job asks of SLURM (`bench slurm --dry-run` prints it): one array per job shape, one
array task per sweep execution, each task with its nodes alone (--exclusive, unless --share),
--requeue (preemption and `scontrol requeue` put a task back in the queue; it resumes, keeping
the configurations that finished), and a log per task (DIR/slurm/<array>_<task>.log).

The batch script runs `srun --kill-on-bad-exit=1 python -m bench_core slurm --task SPEC`:
- one task per job (world size 1): the task runs its execution the way `bench sweep` does
  (sweep.execute: one papermill notebook, rows in DIR/runs/<run>/rows.json);
- N nodes x G tasks (a DDP configuration, one task per GPU, or per CPU process with --device
  cpu): srun starts every rank itself, no torchrun. Each task takes RANK = SLURM_PROCID,
  WORLD_SIZE = SLURM_NTASKS, LOCAL_RANK = SLURM_LOCALID, MASTER_ADDR = the job's first node and
  MASTER_PORT = 29500 + job id % 10000 (the script exports these two), joins the process group
  (env://, nccl on GPUs, gloo on CPU) and runs the same worker code as torchrun
  (run.worker.run_worker); global rank 0 writes one combined row per repeat. Each task sees the
  node's GPUs and takes GPU LOCAL_RANK.
"""
from __future__ import annotations

import argparse
import itertools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench_core.config.schema import BenchConfig, check_known_keys
from bench_core.config.sweepfile import SWEEP_KEYS, grids
from bench_core.config.yamlfile import load_yaml_mapping
from bench_core.errors import ConfigError
from bench_core.measure.environment import SLURM_EXCLUSIVE_ENV
from bench_core.run import worker

PLACEHOLDER_ENDPOINT = "slurm-master:29500"  # replaced by the job's MASTER_ADDR:MASTER_PORT in the task
BASE_PORT = 29500
# Job states after which a task runs no more (a requeued task goes back to PENDING).
FINISHED_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY",
                   "DEADLINE", "PREEMPTED", "SPECIAL_EXIT", "REVOKED")


def available() -> bool:
    """SLURM's client commands are here (a login node)."""
    return all(shutil.which(name) for name in ("sbatch", "scontrol", "sinfo"))


def require_slurm() -> None:
    missing = [name for name in ("sbatch", "scontrol", "sinfo") if shutil.which(name) is None]
    if missing:
        raise ConfigError("slurm", f"SLURM not found here (no {', '.join(missing)}); run on a SLURM login node "
                                   "(bench sweep runs the same sweep on this machine)")


# -- configurations -------------------------------------------------------------------

def job_configs(args: argparse.Namespace) -> list[BenchConfig]:
    """The configurations to submit, each with its job shape filled in and validated."""
    # Flags (and a --config file) apply to every configuration; flags win, as in `bench run`.
    flags = load_yaml_mapping(args.config_file, "config") if args.config_file else {}
    flags.update({name: getattr(args, name) for name in BenchConfig.field_names()
                  if getattr(args, name, None) is not None})
    if args.sweep:
        entries = [({**values, **flags}, explicit | set(flags)) for values, explicit in sweep_entries(args.sweep)]
    else:
        entries = [(flags, set(flags))]
    return [shaped(values, explicit, args.gpus_per_node, args.nodes) for values, explicit in entries]


def shaped(values: dict, explicit: set, gpus_per_node: int | None, nodes: int | None) -> BenchConfig:
    """A configuration as it runs under SLURM: nproc_per_node / nnodes from the configuration,
    else from --gpus-per-node / --nodes; device auto is cuda (the jobs run on GPU nodes)."""
    values = dict(values)
    if "nproc_per_node" not in explicit and gpus_per_node:
        values["nproc_per_node"] = gpus_per_node
    if "nnodes" not in explicit and nodes:
        values["nnodes"] = nodes
    nnodes = int(values.get("nnodes", 1) or 1)
    if nnodes > 1 and not values.get("rdzv_endpoint"):
        values["rdzv_endpoint"] = PLACEHOLDER_ENDPOINT
    values["node_rank"] = 0  # SLURM places the nodes; global rank 0 writes
    cfg = BenchConfig.from_dict(values)
    if cfg.device == "auto":
        cfg = cfg.replace(device="cuda")
    if gpus_per_node and cfg.nproc_per_node > gpus_per_node:
        raise ConfigError("nproc_per_node", f"{cfg.nproc_per_node} exceeds --gpus-per-node {gpus_per_node}")
    if cfg.device == "mps":
        raise ConfigError("device", "mps is a single Apple GPU, not a SLURM node; allowed: cuda, cuda:N, cpu")
    if ":" in cfg.device and cfg.nproc_per_node > 1:
        # Every task would open the same GPU; NCCL stops with "Duplicate GPU detected".
        raise ConfigError("device", f"{cfg.device} pins one GPU for every task; with {cfg.nproc_per_node} tasks per "
                                    "node use cuda (task i gets GPU i)")
    if ":" in cfg.device and int(cfg.device.split(":")[1]) >= max(cfg.nproc_per_node, gpus_per_node or 0):
        gpus = max(cfg.nproc_per_node, gpus_per_node or 0)
        raise ConfigError("device", f"{cfg.device} is not among the {gpus} GPU(s) the job gets (SLURM numbers a "
                                    f"job's GPUs from 0); allowed: cuda, cuda:0 .. cuda:{gpus - 1}")
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


# -- the job ----------------------------------------------------------------------------

@dataclass(frozen=True)
class JobShape:
    nodes: int
    tasks_per_node: int
    gpus_per_node: int  # 0: a CPU job

    @classmethod
    def of(cls, cfg: BenchConfig) -> "JobShape":
        return cls(cfg.nnodes, cfg.nproc_per_node, 0 if cfg.device == "cpu" else cfg.nproc_per_node)

    @property
    def label(self) -> str:
        per_node = f"{self.gpus_per_node} GPU(s)" if self.gpus_per_node else f"{self.tasks_per_node} CPU process(es)"
        return f"{self.nodes} node(s) x {per_node}"


@dataclass
class ArrayJob:
    """One sbatch job array: `tasks` tasks of one shape."""
    name: str
    shape: JobShape
    tasks: int
    time_min: int
    log_dir: Path
    partition: str | None = None
    account: str | None = None
    exclusive: bool = True

    def options(self) -> list[str]:
        """The sbatch parameters, as the script's #SBATCH lines give them."""
        s = self.shape
        found = [f"--job-name={self.name}", f"--array=0-{self.tasks - 1}", f"--nodes={s.nodes}",
                 f"--ntasks-per-node={s.tasks_per_node}", f"--time={self.time_min}"]
        if s.gpus_per_node:
            found.append(f"--gpus-per-node={s.gpus_per_node}")
        if self.partition:
            found.append(f"--partition={self.partition}")
        if self.account:
            found.append(f"--account={self.account}")
        if self.exclusive:  # otherwise SLURM's default: other jobs may use the node's other cores
            found.append("--exclusive")
        found += ["--requeue", "--open-mode=append", f"--output={self.log_dir / '%A_%a.log'}"]
        return found

    def script(self, spec: Path) -> str:
        """The batch script: every rank started by srun; the rendezvous from the job's nodes."""
        task = shlex.join([sys.executable, "-m", "bench_core", "slurm", "--task", str(spec)])
        return "\n".join([
            "#!/bin/bash",
            f"# bench slurm: {self.tasks} task(s), one per execution of the sweep; {self.shape.label} each",
            *(f"#SBATCH {option}" for option in self.options()),
            f"export {SLURM_EXCLUSIVE_ENV}={int(self.exclusive)} PYTHONUNBUFFERED=1",
            'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
            f"export MASTER_PORT=$(( {BASE_PORT} + SLURM_JOB_ID % 10000 ))",
            f"srun --kill-on-bad-exit=1 {task}",
            "",
        ])


# -- the cluster -----------------------------------------------------------------------------

def _slurm(*command: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(command), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError("slurm", f"`{' '.join(command)}` failed: {exc}") from None


def _fields(line: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


def partitions() -> dict[str, dict[str, str]]:
    """Every partition of the cluster: its `scontrol show partition` fields."""
    done = _slurm("scontrol", "show", "partition", "--oneliner")
    if done.returncode != 0:
        raise ConfigError("slurm", f"cannot read the cluster's partitions: {_last_line(done.stderr)}")
    found = [_fields(line) for line in done.stdout.splitlines() if line.strip()]
    return {p["PartitionName"]: p for p in found if "PartitionName" in p}


def minutes(text: str) -> float | None:
    """A SLURM time ('30', '1:00:00', '2-12:00:00', 'UNLIMITED') in minutes; None: no limit."""
    if text.upper() in ("UNLIMITED", "INFINITE", "NONE", ""):
        return None
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, s = (parts + [0, 0])[:3]
    elif len(parts) == 3:  # HH:MM:SS
        h, m, s = parts
    else:  # MM, MM:SS
        h, m, s = 0, parts[0], (parts[1] if len(parts) > 1 else 0)
    return int(days or 0) * 1440 + h * 60 + m + s / 60


def gpu_count(gres: str) -> int:
    """GPUs in a node's Gres ('gpu:a100:4(S:0-1),shard:8' -> 4; '(null)' -> 0)."""
    return sum(int(n) for n in re.findall(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)", gres))


def check_job(job: ArrayJob) -> str:
    """Refuse (ConfigError) what the cluster cannot run, before anything is submitted: an unknown
    partition, a time limit above the partition's, more nodes, GPUs or tasks per node than its
    nodes have. Returns the partition the job goes to."""
    found = partitions()
    names = ", ".join(sorted(found)) or "none"
    if job.partition:
        if job.partition not in found:
            raise ConfigError("partition", f"no partition {job.partition!r} on this cluster; partitions: {names}")
        name = job.partition
    else:
        default = [n for n, p in found.items() if p.get("Default") == "YES"]
        if not default:
            raise ConfigError("partition", f"this cluster has no default partition; give --partition ({names})")
        name = default[0]
    part = found[name]
    limit = minutes(part.get("MaxTime", "UNLIMITED"))
    if limit is not None and job.time_min > limit:
        raise ConfigError("time", f"{job.time_min} min exceeds partition {name}'s time limit of {limit:g} min "
                                  f"(MaxTime={part['MaxTime']}); allowed: --time 1 .. {int(limit)}")
    nodes = _slurm("sinfo", "--noheader", "--Node", "--partition", name, "--format", "%N|%c|%G")
    rows = [line.split("|") for line in nodes.stdout.splitlines() if line.count("|") == 2]
    shape = job.shape
    if shape.nodes > len({r[0] for r in rows}):
        raise ConfigError("nodes", f"{shape.nodes} nodes requested; partition {name} has {len({r[0] for r in rows})}")
    most_gpus = max((gpu_count(r[2]) for r in rows), default=0)
    if shape.gpus_per_node > most_gpus:
        raise ConfigError("gpus_per_node", f"{shape.gpus_per_node} GPU(s) per node requested; partition {name}'s "
                                           f"nodes have at most {most_gpus} (sinfo Gres)"
                                           + ("; for CPU runs give --device cpu" if not most_gpus else ""))
    most_cpus = max((int(r[1].rstrip("+")) for r in rows if r[1].rstrip("+").isdigit()), default=0)
    if shape.tasks_per_node > most_cpus:
        raise ConfigError("nproc_per_node", f"{shape.tasks_per_node} tasks per node requested; partition {name}'s "
                                            f"nodes have at most {most_cpus} CPUs")
    return name


def test_only(script: Path) -> None:
    """`sbatch --test-only`: SLURM's own check of the job (accounts, QOS, limits); nothing is submitted."""
    done = _slurm("sbatch", "--test-only", str(script))
    if done.returncode != 0:
        raise ConfigError("slurm", f"sbatch refused the job: {_last_line(done.stderr or done.stdout)}")


def submit(script: Path) -> str:
    done = _slurm("sbatch", "--parsable", str(script))
    if done.returncode != 0:
        raise ConfigError("slurm", f"sbatch refused the job: {_last_line(done.stderr or done.stdout)}")
    return done.stdout.strip().split(";")[0]


def array_tasks(job_id: str) -> dict[str, dict[str, str]] | None:
    """Array task id ('0', '1', or a pending range '2-5') -> its scontrol fields; None when SLURM no
    longer knows the job (purged after MinJobAge)."""
    done = _slurm("scontrol", "show", "job", "--oneliner", job_id)
    if done.returncode != 0 and "invalid job id" in done.stderr.lower():
        return None
    if done.returncode != 0:  # the controller did not answer (restarting, overloaded): ask again later
        raise ConnectionError(f"scontrol show job {job_id}: {_last_line(done.stderr)}")
    found = [_fields(line) for line in done.stdout.splitlines() if line.strip()]
    return {f.get("ArrayTaskId", "0"): f for f in found}


def finished(state: str) -> bool:
    return state.split()[0] in FINISHED_STATES if state else True


def exit_text(exit_code: str | None) -> str:
    """scontrol's ExitCode ("code:signal") said in words: "exit 0:15, signal SIGTERM" (scancel, a requeue,
    or the time limit sent SIGTERM, then SIGKILL once KillWait passed); "exit 1:0" as it is."""
    number = (exit_code or "").partition(":")[2]
    if not number.isdigit() or number == "0":
        return f"exit {exit_code or 'unknown'}"
    try:
        name = signal.Signals(int(number)).name
    except ValueError:
        name = number
    return f"exit {exit_code}, signal {name}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else "no message"


# -- inside a task ------------------------------------------------------------------------------

def rendezvous(environ, cfg: BenchConfig, port_offset: int = 0) -> dict[str, str]:
    """torch.distributed's variables from SLURM's: every srun task is one rank."""
    missing = [n for n in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "MASTER_ADDR", "MASTER_PORT")
               if not environ.get(n)]
    if missing:
        raise RuntimeError(f"not a bench slurm task: {', '.join(missing)} unset")
    return {"RANK": environ["SLURM_PROCID"], "WORLD_SIZE": environ["SLURM_NTASKS"],
            "LOCAL_RANK": environ["SLURM_LOCALID"],
            "LOCAL_WORLD_SIZE": environ.get("SLURM_NTASKS_PER_NODE") or str(cfg.nproc_per_node),
            "MASTER_ADDR": environ["MASTER_ADDR"], "MASTER_PORT": str(int(environ["MASTER_PORT"]) + port_offset)}


def run_rank(cfg: BenchConfig, port_offset: int = 0, progress=None) -> worker.WorkerResult:
    """This task's rank of a multi-task configuration. Every configuration of the task gets its
    own port (`port_offset`), so a process group is never rebuilt on a port still closing."""
    env = rendezvous(os.environ, cfg, port_offset)
    os.environ.update(env)
    if cfg.nnodes > 1:
        cfg = cfg.replace(rdzv_endpoint=f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}")  # recorded as it ran
    per_task = os.environ.get("SLURM_CPUS_PER_TASK")  # SLURM knows this task's CPUs when it was asked for them
    threads = cfg.num_threads or (int(per_task) if per_task and per_task.isdigit() else None)
    return worker.run_worker(cfg, progress, threads=threads)
