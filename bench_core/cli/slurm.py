"""`bench slurm`: submit a sweep file (or one configuration) to SLURM as job arrays, one array
task per execution of the sweep, wait for them and show their rows; inside each task (the batch
script runs `bench slurm --task SPEC`), run that execution.

Rows land as a local `bench sweep` leaves them (DIR/runs/<run>/rows.json, DIR/results.csv),
with the SLURM job, array task and node in every row. Submitting again resumes: executions
that are complete are not submitted, and a task keeps the configurations its run folder
already holds. A task that SLURM requeues (preemption, `scontrol requeue`) resumes the same way.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from filelock import FileLock, Timeout

from bench_core import results
from bench_core.cli.common import add_config_arguments, format_rows
from bench_core.cli.sweep import SweepProgress, report_step
from bench_core.config.schema import BenchConfig
from bench_core.config.sweepfile import parse_timeout
from bench_core.config.yamlfile import load_yaml_mapping
from bench_core.errors import EXIT_FAILED, EXIT_OK, ConfigError, interrupted_by, interrupted_exit, interrupts_held
from bench_core.files import check_results_folder
from bench_core.launch import slurm
from bench_core.predict.prices import report_choices
from bench_core.results.rows import failure_row, run_fields
from bench_core.results.store import dumps_rows
from bench_core.run import worker
from bench_core.sweep.execute import find_template, run_executions
from bench_core.sweep.notebook import COMPLETE_STATUSES, complete_hashes, record_missing, rows_by_config
from bench_core.sweep.plan import (
    Execution,
    SweepPlan,
    check_sweep_folder,
    plan_executions,
    plan_json,
    sweep_header,
    with_runs,
)

POLL_S = 2.0
RANKS_DONE_WAIT_S = 60.0  # SLURM's default KillWait is 30 s: by then every stopped rank is gone
# What a task that ended without rows for a configuration means for that configuration's row.
STATE_STATUS = {"CANCELLED": "interrupted", "PREEMPTED": "interrupted", "TIMEOUT": "timeout",
                "DEADLINE": "timeout", "COMPLETED": "error"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """examples:
  bench slurm params/scaling.yaml --gpus-per-node 8 --partition gpu --time 30 --out outputs/scaling
  bench slurm params/cpu-quick.yaml --device cpu --partition cpu --dry-run     # the sbatch parameters
  bench slurm --model resnet50 --precision amp-bf16 --batch-size 256 --nodes 2 --gpus-per-node 8 --partition gpu
Configuration flags apply to every configuration of a sweep file. One job array per job shape,
one array task per execution (one model on one device: all its precisions, modes and batch
sizes); each task has its nodes alone unless --share. Running the same command again resumes.
exit status: 0 every configuration ok, 1 a configuration failed or did not run, 2 bad input
(nothing submitted)."""
    p.add_argument("sweep", nargs="?", metavar="SWEEP.yaml",
                   help="sweep file (name, grid, settings); without it the configuration flags give one run")
    g = p.add_argument_group("SLURM job")
    g.add_argument("--nodes", type=_positive("nodes"), help="nodes per job, for configurations that do not set nnodes")
    g.add_argument("--gpus-per-node", type=_positive("gpus_per_node"), dest="gpus_per_node",
                   help="GPUs per node (one task each); with --device cpu: processes per node, no GPU requested")
    g.add_argument("--partition", help="SLURM partition (default: the cluster's default partition)")
    g.add_argument("--time", type=_positive("time"), default=60, dest="time_min",
                   help="time limit per array task, minutes (default: 60)")
    g.add_argument("--account", help="SLURM account to charge")
    g.add_argument("--share", action="store_true",
                   help="let other jobs share the nodes (default: each task has its nodes alone, --exclusive); "
                        "every row then says slurm_exclusive false")
    g.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                   help="wait for the jobs and print their rows (default) or only print the job ids")
    g.add_argument("--out", metavar="DIR", help="results directory, on a file system the nodes share "
                                               "(default: outputs/<sweep name>, or outputs/slurm)")
    g.add_argument("--force", action="store_true", help="measure configurations that are already complete again")
    g.add_argument("--dry-run", action="store_true",
                   help="print the sbatch parameters and script of every job array; submit nothing")
    g.add_argument("--no-report", action="store_true", help="skip building DIR/report.html after waiting")
    g.add_argument("--task", metavar="SPEC", help=argparse.SUPPRESS)  # the batch script's call, inside a task
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
    if args.task:
        return run_task(Path(args.task))
    plan = slurm_plan(args)  # every bad input is refused before anything is written or submitted
    out_dir = Path(args.out or f"outputs/{plan.name}").resolve()
    template = find_template()
    arrays = job_arrays(plan, args, out_dir)
    for note in plan.notes:
        print(f"bench slurm: note: {note}", file=sys.stderr)
    if args.dry_run:
        return dry_run(arrays, out_dir)
    slurm.require_slurm()
    check_results_folder(out_dir)
    check_sweep_folder(out_dir, plan)
    todo = [(job, [e for e in executions if args.force or not is_complete(out_dir, e)]) for job, executions in arrays]
    todo = [(job, executions) for job, executions in todo if executions]
    if not todo:
        print(f"bench slurm: nothing to submit: every configuration is complete in {out_dir} (--force measures "
              "again)")
        return EXIT_OK
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    for job, executions in todo:
        job.tasks = len(executions)
        job.name = f"{job.name}-{stamp}"
        job.partition = slurm.check_job(job)
        with tempfile.TemporaryDirectory() as folder:  # SLURM's own check, before anything is written
            script = Path(folder) / "job.sbatch"
            script.write_text(job.script(job.log_dir / f"{job.name}.json"))
            slurm.test_only(script)
    if plan.source:
        results.atomic_write_text(out_dir / "sweep.yaml", sweep_header(plan) + plan.text)
    results.atomic_write_text(out_dir / "plan.json", json.dumps(plan_json(plan), indent=1))
    submitted = [submit(job, executions, plan, args.force, template) for job, executions in todo]
    if not args.wait:
        print(f"bench slurm: results will land in {out_dir}; logs in {out_dir / 'slurm'}")
        return EXIT_OK
    try:
        states = wait(submitted)
    except KeyboardInterrupt as exc:
        ids = " ".join(job_id for job_id, _, _ in submitted)
        print(f"bench slurm: stopped waiting ({interrupted_by(exc)}); the jobs keep running (`scancel {ids}` stops "
              f"them); their rows land in {out_dir}", file=sys.stderr)
        return interrupted_exit(exc)
    status = settle(submitted, states, out_dir)
    if not args.no_report:
        status = max(status, report_step(out_dir, plan))
    return status


# -- the plan -----------------------------------------------------------------------------

def slurm_plan(args: argparse.Namespace) -> SweepPlan:
    """The sweep (or the one configuration of the flags) as executions, planned for the cluster:
    its devices are not looked for on this machine."""
    configs = slurm.job_configs(args)
    unique = list({cfg.config_hash(): cfg for cfg in configs}.values())
    if not args.sweep:
        return SweepPlan(name="slurm", configs=unique, executions=plan_executions(unique, apart=slurm.JobShape.of))
    data = load_yaml_mapping(args.sweep, "sweep")
    gpus, prices = report_choices(data.get("predict_gpus"), data.get("price"))
    plan = SweepPlan(name=slurm.sweep_name(args.sweep), configs=unique,
                     executions=plan_executions(unique, apart=slurm.JobShape.of),
                     timeout_s=parse_timeout(data.get("timeout_s")), text=Path(args.sweep).read_text(),
                     source=str(args.sweep), predict_gpus=gpus, prices=prices)
    if data.get("emulated") == "skip":
        plan.notes.append("emulated: skip is not applied: the nodes, not this machine, know which precisions they "
                          "emulate (their rows say precision_support emulated)")
    return with_runs(plan, data.get("runs", 1))


def job_arrays(plan: SweepPlan, args, out_dir: Path) -> list[tuple[slurm.ArrayJob, list[Execution]]]:
    """One array per job shape (nodes x tasks x GPUs), one task per execution (each of one shape)."""
    shapes: dict[slurm.JobShape, list[Execution]] = {}
    for execution in plan.executions:
        shapes.setdefault(slurm.JobShape.of(execution.configs[0]), []).append(execution)
    arrays = []
    for index, (shape, executions) in enumerate(shapes.items()):
        name = f"bench-{plan.name}" + (f"-{index + 1}" if len(shapes) > 1 else "")
        arrays.append((slurm.ArrayJob(name=name, shape=shape, tasks=len(executions), time_min=args.time_min,
                                      log_dir=out_dir / "slurm", partition=args.partition, account=args.account,
                                      exclusive=not args.share), executions))
    return arrays


def is_complete(out_dir: Path, execution: Execution) -> bool:
    done = complete_hashes(results.read_run(out_dir / "runs" / execution.run_name) or [])
    return all(cfg.config_hash() in done for cfg in execution.configs)


def dry_run(arrays, out_dir: Path) -> int:
    checked = slurm.available()
    print(f"bench slurm: dry run, nothing submitted; results would go to {out_dir}")
    for number, (job, executions) in enumerate(arrays, 1):
        print(f"job array {number} of {len(arrays)}: {job.tasks} task(s), {job.shape.label} each")
        for index, execution in enumerate(executions):
            print(f"  task {index}: {execution.run_name}: {execution.label}, {len(execution.configs)} configuration(s)")
        print("  sbatch script:")
        print("\n".join(f"    {line}" for line in job.script(job.log_dir / f"{job.name}-<time>.json").splitlines()))
        if checked:  # a refusal is the usual one line (exit 2), after what was asked
            print(f"  checked against the cluster: partition {slurm.check_job(job)} can run it", flush=True)
    if not checked:
        print("not checked against a cluster: no sbatch here")
    return EXIT_OK


def submit(job: slurm.ArrayJob, executions: list[Execution], plan: SweepPlan, force: bool,
           template: Path) -> tuple[str, slurm.ArrayJob, list[Execution]]:
    """Write the array's task list and batch script into DIR/slurm/ and submit it."""
    out_dir = job.log_dir.parent
    spec = job.log_dir / f"{job.name}.json"
    results.atomic_write_text(spec, json.dumps({
        "name": plan.name, "out_dir": str(out_dir), "template": str(template), "kernel": "python3",
        "force": force, "timeout_s": plan.timeout_s,
        "executions": [{"run_name": e.run_name, "configs": [c.to_dict() for c in e.configs]} for e in executions],
    }, indent=1))
    script = job.log_dir / f"{job.name}.sbatch"
    results.atomic_write_text(script, job.script(spec))
    job_id = slurm.submit(script)
    print(f"submitted job {job_id}: {job.tasks} array task(s) on partition {job.partition}, {job.shape.label} each, "
          f"{'nodes alone (exclusive)' if job.exclusive else 'nodes shared (--share)'}; logs "
          f"{job.log_dir / (job_id + '_<task>.log')}", flush=True)
    for index, execution in enumerate(executions):
        print(f"  {job_id}_{index}: {execution.label} ({len(execution.configs)} configuration(s))", flush=True)
    return job_id, job, executions


# -- waiting ----------------------------------------------------------------------------------

def wait(submitted) -> dict[str, dict[str, dict]]:
    """Until every task of every array has finished (requeued tasks run again first); a line
    whenever a task changes state. Returns each array's last scontrol fields per task."""
    seen: dict[tuple[str, str], str] = {}
    last: dict[str, dict[str, dict]] = {}
    while True:
        running = False
        for job_id, _, _ in submitted:
            try:
                tasks = slurm.array_tasks(job_id)
            except (ConnectionError, ConfigError) as exc:  # no answer this time (timeout, restart)
                print(f"bench slurm: {exc}; waiting", file=sys.stderr, flush=True)
                running = True
                continue
            if tasks is None:  # SLURM forgot the job (MinJobAge): it finished
                continue
            last[job_id] = tasks
            for task_id, fields in tasks.items():
                state = fields.get("JobState", "")
                where = f" on {fields['NodeList']}" if fields.get("NodeList") not in (None, "", "(null)") else ""
                restarts = f", requeued {fields['Restarts']}x" if fields.get("Restarts", "0") != "0" else ""
                line = f"{state}{where}{restarts}" + (f" ({fields['Reason']})" if fields.get("Reason") not in
                                                       (None, "None") else "")
                if seen.get((job_id, task_id)) != line:
                    seen[(job_id, task_id)] = line
                    print(f"job {job_id}_{task_id}: {line}", flush=True)
                running |= not slurm.finished(state)
        if not running:
            return last
        time.sleep(POLL_S)


def settle(submitted, states: dict[str, dict[str, dict]], out_dir: Path) -> int:
    """Rows for configurations a task that ran left without rows (killed, failed, cancelled), the
    rows of every task, and one closing line; the exit status."""
    counts = {"complete": 0, "failed": 0, "not run": 0}
    deadline = time.monotonic() + RANKS_DONE_WAIT_S
    for job_id, job, executions in submitted:
        tasks = states.get(job_id, {})
        for index, execution in enumerate(executions):
            fields = tasks.get(str(index), {})
            state = fields.get("JobState", "").split()[0] if fields.get("JobState") else ""
            if fields.get("BatchHost") not in (None, "", "(null)"):  # the task started
                ranks_done(out_dir / "runs" / execution.run_name, deadline)
                log = job.log_dir / f"{job_id}_{index}.log"
                node = fields.get("BatchHost")
                ended = f"{state or 'unknown'} ({slurm.exit_text(fields.get('ExitCode'))})"
                record_missing(out_dir, execution.run_name, execution.configs, STATE_STATUS.get(state, "crashed"),
                               f"SLURM job {job_id}_{index} ended {ended}"
                               f" on {fields.get('NodeList')} before this configuration had rows; log: {log}",
                               {"host": node, "slurm_node": node, "slurm_job_id": job_id, "slurm_array_task_id": index,
                                "slurm_exclusive": job.exclusive})
            rows = results.read_run(out_dir / "runs" / execution.run_name) or []
            grouped = rows_by_config(rows)
            wanted = [r for cfg in execution.configs for r in grouped.get(cfg.config_hash(), [])]
            for cfg in execution.configs:
                group = grouped.get(cfg.config_hash())
                key = "not run" if not group else "complete" if all(
                    r.get("status") in COMPLETE_STATUSES for r in group) else "failed"
                counts[key] += 1
            print(f"job {job_id}_{index}: {execution.label} ({state or 'unknown'})")
            print(format_rows(wanted) if wanted else "  no rows: the task did not run")
    with results.locked(out_dir):
        results.rebuild_csv(out_dir)
    total = sum(counts.values())
    print(f"bench slurm: {total} configurations: {counts['complete']} complete, {counts['failed']} failed, "
          f"{counts['not run']} not run; rows in {out_dir / 'results.csv'}"
          + ("; the same command again resumes" if counts["failed"] or counts["not run"] else ""))
    return EXIT_OK if counts["complete"] == total else EXIT_FAILED


def ranks_done(run_dir: Path, deadline: float) -> None:
    """Until no process of a task holds its rank's lock, or the deadline. SLURM may call a job
    ended while a rank that srun stopped (SIGTERM, SIGKILL only KillWait later) still writes its
    row: a failed-row here first would name the job's end, not the rank's cause."""
    for path in sorted(run_dir.glob(".task-rank*.lock")):
        lock = FileLock(path)
        try:
            lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
        except Timeout:
            print(f"bench slurm: {path} is still held by a process of the job; its rows are taken as they are",
                  file=sys.stderr, flush=True)
            continue
        lock.release()


# -- inside an array task -----------------------------------------------------------------------

def run_task(spec_path: Path) -> int:
    """One array task: its execution (SLURM_ARRAY_TASK_ID) of the task list, resumed. A rank of a
    multi-task execution does not return: its process ends here (worker.leave)."""
    spec = json.loads(spec_path.read_text())
    entry = spec["executions"][int(os.environ.get("SLURM_ARRAY_TASK_ID") or 0)]
    execution = Execution(entry["run_name"], [BenchConfig.from_dict(c) for c in entry["configs"]])
    out_dir = Path(spec["out_dir"])
    # --force measures again on the first attempt only: a requeued task resumes
    force = spec["force"] and not int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    rank = int(os.environ.get("SLURM_PROCID") or 0)
    run_dir = out_dir / "runs" / execution.run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(run_dir / f".task-rank{rank}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(f"bench slurm: {run_dir} is being measured by another task; this one stops", file=sys.stderr)
        return EXIT_FAILED
    ranks = execution.configs[0].world_size > 1
    try:
        if ranks:
            status = run_ranks(execution, out_dir, force, rank)
        else:
            plan = SweepPlan(name=spec["name"], configs=execution.configs, executions=[execution],
                             timeout_s=spec["timeout_s"])
            status, closing = run_executions(plan, out_dir, Path(spec["template"]), force, spec["kernel"],
                                             SweepProgress(plan, sys.stdout))
            print(closing, flush=True)
    finally:
        lock.release()
    if ranks:  # this process joined a process group: it ends the way a torchrun worker does
        worker.leave(status)
    return status


def run_ranks(execution: Execution, out_dir: Path, force: bool, rank: int) -> int:
    """This task's rank of every configuration of a multi-task execution; rank 0 writes the rows.
    A rank that fails leaves its row in the run folder first: srun (--kill-on-bad-exit) then stops
    the others, and rank 0 records that row, the cause, rather than its own symptom (SIGTERM, or a
    connection closed by the peer), as the torchrun launcher does."""
    run_dir = out_dir / "runs" / execution.run_name
    done = set() if force else complete_hashes(results.read_run(run_dir) or [])  # before any rank writes
    if rank == 0:
        for stale in run_dir.glob(".failed-*.json"):
            stale.unlink(missing_ok=True)
    say = (lambda message: print(message, flush=True)) if rank == 0 else None
    for index, cfg in enumerate(execution.configs):
        if cfg.config_hash() in done:
            continue
        try:
            result = slurm.run_rank(cfg, port_offset=index, progress=say)
        except KeyboardInterrupt as exc:  # SIGTERM: scancel, requeue, time limit, or a failed peer
            if rank == 0:
                with interrupts_held():
                    rows = getattr(exc, "rows", None) or [failure_row(
                        run_fields(cfg), "interrupted", f"stopped by {interrupted_by(exc)} before a repeat finished")]
                    replace_rows(out_dir, execution.run_name, cfg, peer_failure(run_dir, cfg) or rows)
            return interrupted_exit(exc)
        with interrupts_held():  # a failed peer's SIGTERM (srun) follows at once: the row is written first
            if rank == 0:
                own = result.rows
                peer = None if result.ok or not worker.is_peer_loss(str(own[0].get("message"))) else peer_failure(
                    run_dir, cfg)
                replace_rows(out_dir, execution.run_name, cfg, peer or own)
            elif not result.ok:
                results.atomic_write_text(run_dir / f".failed-{cfg.config_hash()}-rank{rank}.json", json.dumps(
                    {"rank": rank, "row": json.loads(dumps_rows(result.rows[:1]))[0]}))
        if not result.ok:  # no further collective can be trusted in this job
            print(f"rank {rank}: {result.rows[0]['status']}: {result.rows[0]['message']}", file=sys.stderr)
            return EXIT_FAILED
    return EXIT_OK


def peer_failure(run_dir: Path, cfg: BenchConfig) -> list[dict] | None:
    """The row another rank left when it failed on this configuration, naming that rank."""
    for path in sorted(run_dir.glob(f".failed-{cfg.config_hash()}-rank*.json")):
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        row = found["row"]
        row["message"] = f"rank {found['rank']} of {cfg.world_size}: {row.get('message')}"
        return [row]
    return None


def replace_rows(out_dir: Path, run_name: str, cfg: BenchConfig, rows: list[dict]) -> None:
    """The run folder's rows with this configuration's replaced by `rows` (one task writes a run folder)."""
    kept = [r for r in results.read_run(out_dir / "runs" / run_name) or [] if r.get("config_hash") != cfg.config_hash()]
    results.write_run(out_dir, run_name, kept + rows)
