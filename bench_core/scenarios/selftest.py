"""`bench selftest`: does this machine's GPU path work? Tiny real runs, then a pass / fail /
skipped checklist, printed and written as JSON (attach it to a bug report).

For the first person with a GPU, no arguments, about five minutes: on every visible GPU each
precision with a tiny model (resnet18, 32 px, a few steps), compile off and on; a 2-process
nccl run and an all-reduce check with 2+ GPUs; the largest-batch search; NVML sampling and
energy. On a CPU-only machine (CI) it runs the CPU checks in well under a minute and lists
the GPU ones as skipped, with the reason.

The GPU runs happen in child processes (one per GPU, in parallel): this process never makes a
CUDA context, so the launcher check ("no foreign-pid flag from our own launcher") is honest.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bench_core import results
from bench_core.capability import capability_table, support
from bench_core.config.schema import BenchConfig
from bench_core.devices import format_tf32_flags, tf32_flags
from bench_core.launch.batch_search import find_max_batch
from bench_core.launch.dispatch import run_benchmark
from bench_core.launch.supervisor import Child, python_command, supervise
from bench_core.measure import environment
from bench_core.results.disturbed import disturbances
from bench_core.results.rows import error_message
from bench_core.workload.precision import resolve_precision

DEFAULT_OUT = "outputs/selftest/selftest.json"
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "amp-fp16", "amp-bf16")
COMPILE_MODES = ("off", "default")
# Tiny but real: 3 warm-up steps is what compile needs (config.MIN_COMPILE_WARMUP_STEPS).
TINY = dict(model="resnet18", width=32, height=32, batch_size=8, steps=3, warmup_steps=3, repeats=1,
            min_seconds=0.0)
GPU_CHILD_TIMEOUT_S = 1200.0     # one GPU's runs (12 configurations, six of them compiled)
ALLREDUCE_TIMEOUT_S = 180.0
SEARCH_MAX_BATCH = 64
FOREIGN_FLAG = "other-processes-on-device"
PASS, FAIL, SKIPPED = "pass", "fail", "skipped"


@dataclass
class Check:
    name: str
    status: str          # pass | fail | skipped
    reason: str
    seconds: float = 0.0


@dataclass
class Checklist:
    checks: list[Check] = field(default_factory=list)
    say: Callable[[str], None] = print

    def add(self, name: str, status: str, reason: str, seconds: float = 0.0) -> Check:
        check = Check(name, status, reason, round(seconds, 2))
        self.checks.append(check)
        self.say(f"  [{status.upper():7s}] {name}: {reason}")
        return check

    def run(self, name: str, probe: Callable[[], tuple[bool, str]]) -> Check:
        """probe() -> (passed, reason); raising Skip skips, any other exception fails."""
        start = time.perf_counter()
        try:
            ok, reason = probe()
            status = PASS if ok else FAIL
        except Skip as exc:
            status, reason = SKIPPED, str(exc)
        except Exception as exc:  # noqa: BLE001 - a check that crashes is a failed check
            status, reason = FAIL, error_message(exc)
        return self.add(name, status, reason, time.perf_counter() - start)

    def counts(self) -> dict:
        return {s: sum(c.status == s for c in self.checks) for s in (PASS, FAIL, SKIPPED)}


class Skip(Exception):
    """A check that cannot run here (no GPU, one GPU, no NVML): said, not failed."""


# -- the command -----------------------------------------------------------------------


def print_capability_table() -> None:
    """Per device (the CPU and every visible GPU, read from device properties: no CUDA context
    here), how each precision runs: native, emulated or unsupported, and why."""
    import torch

    devices = [torch.device("cpu")]
    if torch.cuda.is_available():
        devices += [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    for device in devices:
        print(f"precisions on {device}:", flush=True)
        for line in capability_table(device):
            print(f"  {line['precision']:<9} {line['support']:<11} {line['reason']}", flush=True)


def environment_summary() -> dict:
    env = environment.collect()
    keys = ("host", "os", "python_version", "cpu_model", "torch_version", "cuda_version", "cudnn_version",
            "nccl_version", "driver_version", "gpu_count", "project_version", "git_commit")
    return {"environment": {k: env.get(k) for k in keys}}


def rate_text(row: dict) -> str:
    """'123.4 samples/s', and what disturbed it where something did (a figure is marked where it is shown)."""
    flags = disturbances(row.get("noise_flags"))
    return f"{row['samples_per_s']:.1f} samples/s" + (f" (DISTURBED: {flags})" if flags else "")


# -- CPU: quick, always ----------------------------------------------------------------------

def cpu_checks(checklist: Checklist, rows_dir: Path) -> None:
    checklist.say("CPU checks")
    rows: list[dict] = []

    def one(mode: str) -> Callable[[], tuple[bool, str]]:
        def probe():
            cfg = BenchConfig(**{**TINY, "device": "cpu", "mode": mode, "precision": "fp32", "warmup_steps": 1})
            row = run_benchmark(cfg)[0]
            rows.append(row)
            ok = row["status"] == "ok"
            return ok, (rate_text(row) if ok else f"{row['status']}: {row['message']}")
        return probe

    checklist.run("cpu fp32 train (resnet18, 32 px)", one("train"))
    checklist.run("cpu fp32 infer (resnet18, 32 px)", one("infer"))
    checklist.run("tf32 flags readable after the runs", lambda: (True, format_tf32_flags(tf32_flags())))
    checklist.run("cpu MFU <= 1 or empty", lambda: mfu_ok(rows))

    def written():
        if not rows:
            raise Skip("no row to write (the runs failed)")
        run_id = rows[0]["run_id"]
        path = results.write_run(rows_dir, run_id, rows[:1])
        back = json.loads(path.read_text())
        return back[0]["run_id"] == run_id, f"{path.name} and results.csv written and read back"
    checklist.run("a row is written and reads back", written)


def mfu_ok(rows: list[dict]) -> tuple[bool, str]:
    """Every MFU in (0, 1]. An MFU above 1 is not in `mfu` (the row moves it to `mfu_rejected`
    and leaves `mfu` empty), so the rejected value is what this checks."""
    if not rows:
        raise Skip("no rows (the runs failed)")
    values = [r.get("mfu") if r.get("mfu_rejected") is None else r["mfu_rejected"] for r in rows]
    bad = [v for v in values if v is not None and not 0 < v <= 1]
    shown = ", ".join("empty" if v is None else f"{v:.3f}" for v in values)
    return not bad, f"mfu {shown}" + (" (an MFU above 1 means a wrong peak or FLOP count)" if bad else "")


# -- GPUs: in child processes ------------------------------------------------------------------

def gpu_checks(checklist: Checklist, quick: bool = False) -> None:
    import torch
    checklist.say("GPU checks")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0  # no context: counts only
    if count == 0:
        why = "no CUDA device visible (torch.cuda.is_available() is False)"
        for name in ("each precision x compile off/on per GPU", "tf32 flags readable after GPU runs", "GPU MFU <= 1",
                     "peak memory below device memory", "NVML handle matched", "NVML energy measured",
                     "no foreign-pid flag from our own launcher", "largest-batch search",
                     "2-process nccl DDP run", "nccl all-reduce result"):
            checklist.add(name, SKIPPED, why)
        return
    started = time.perf_counter()
    results = _run_gpu_children(count, quick)
    if quick:
        checklist.add("compile=default with the other precisions", SKIPPED,
                      f"--quick compiles one precision ({mixed_precision()}), not all {len(PRECISIONS)}")
    for index in range(count):
        device_checks(checklist, f"cuda:{index}", results.get(index), time.perf_counter() - started)
    checklist.run("largest-batch search (cuda:0, resnet18 32 px, each probe a fresh process)", _batch_search)
    if count < 2:
        for name in ("2-process nccl DDP run", "nccl all-reduce result"):
            checklist.add(name, SKIPPED, f"needs 2+ GPUs; {count} visible")
        return
    checklist.run("2-process nccl DDP run (cuda:0, cuda:1)", _ddp_run)
    checklist.run("nccl all-reduce result (2 processes)", _allreduce)


def gpu_configs(device: str, first: bool, quick: bool = False) -> list[dict]:
    """Every precision compile off; compiled too on the first GPU (compilation is per process and
    costs the most time: the other GPUs run the same code), in every precision or, `quick`, in
    the mixed precision the GPU runs. Not fp8: it trains transformers only."""
    compiled = (mixed_precision(int(device.partition(":")[2] or 0)),) if quick else PRECISIONS
    configs = [{**TINY, "device": device, "mode": "train", "precision": p, "compile": "off"} for p in PRECISIONS]
    if first:
        configs += [{**TINY, "device": device, "mode": "train", "precision": p, "compile": "default"}
                    for p in compiled]
    return configs + [{**TINY, "device": device, "mode": "infer", "precision": "amp-fp16"}]


def _run_gpu_children(count: int, quick: bool = False) -> dict[int, dict]:
    """One child per GPU, in parallel; each runs its configurations and writes what it saw."""
    folder = Path(tempfile.mkdtemp(prefix="bench-selftest-"))
    children = {}
    try:
        for index in range(count):
            spec = folder / f"gpu{index}.json"
            spec.write_text(json.dumps(gpu_configs(f"cuda:{index}", first=index == 0, quick=quick)))
            children[index] = Child(python_command("-m", "bench_core.scenarios.selftest", "runs", str(spec),
                                                   str(folder / f"gpu{index}-out.json")),
                                    log_path=folder / f"gpu{index}.log", on_line=_progress_line)
        outcomes = {index: child.wait(GPU_CHILD_TIMEOUT_S) for index, child in children.items()}
    finally:  # Ctrl-C or an error: no GPU child keeps running
        for child in children.values():
            child.stop()
    out: dict[int, dict] = {}
    for index, outcome in outcomes.items():
        result = folder / f"gpu{index}-out.json"
        if outcome.timed_out:
            out[index] = {"error": f"timed out after {GPU_CHILD_TIMEOUT_S:.0f} s (log: {folder / f'gpu{index}.log'})"}
        elif outcome.returncode == 0 and result.exists():
            out[index] = json.loads(result.read_text())
        else:
            out[index] = {"error": f"child exited with {outcome.returncode}: {outcome.last_line()[:300]}"}
    return out


PROGRESS_MARK = "selftest-progress: "


def _progress_line(line: str) -> bool:
    """A GPU child's line: its progress lines are printed here as they come (claimed); the rest
    stays in its log and the tail an error message quotes."""
    if not line.startswith(PROGRESS_MARK):
        return False
    print(f"    ... {line[len(PROGRESS_MARK):]}", flush=True)
    return True


def _child_runs(spec_path: str, out_path: str) -> int:
    """In the child: run each configuration, then read every TF32 accessor (as a notebook cell would)."""
    runs = []
    for values in json.loads(Path(spec_path).read_text()):
        started = time.perf_counter()
        row = run_benchmark(BenchConfig.from_dict(values))[0]
        # One line a configuration, which the parent prints as it comes: a GPU's runs take minutes.
        print(f"{PROGRESS_MARK}{values['device']} {values['mode']} {values['precision']} "
              f"compile={values.get('compile', 'off')}: {row['status']} in {time.perf_counter() - started:.1f} s",
              flush=True)
        try:
            tf32_flags()
            after = None
        except RuntimeError as exc:
            after = str(exc).splitlines()[0]
        runs.append({"config": values, "row": row, "tf32_unreadable_after": after})
    Path(out_path).write_text(json.dumps({"runs": runs}, default=str))
    return 0


def device_checks(checklist: Checklist, device: str, result: dict | None, seconds: float) -> None:
    if not result or "error" in result:
        checklist.add(f"{device} runs", FAIL, (result or {}).get("error", "no result"), seconds)
        return
    runs = result["runs"]
    for run in runs:
        cfg, row = run["config"], run["row"]
        name = f"{device} {cfg['mode']} {cfg['precision']} compile={cfg.get('compile', 'off')}"
        if row["status"] == "ok":
            checklist.add(name, PASS, rate_text(row))
        elif row["status"] == "unsupported":
            checklist.add(name, SKIPPED, f"unsupported here: {row['message']}")
        else:
            checklist.add(name, FAIL, f"{row['status']}: {row['message']}")
    ok_rows = [r["row"] for r in runs if r["row"]["status"] == "ok"]
    unreadable = [r["tf32_unreadable_after"] for r in runs if r["tf32_unreadable_after"]]
    checklist.add(f"{device} tf32 flags readable after every run", FAIL if unreadable else PASS,
                  unreadable[0] if unreadable else f"read after {len(runs)} runs")
    wrong_tf32 = [r["row"]["precision"] for r in runs if r["row"]["status"] == "ok"
                  and bool(r["row"]["tf32_enabled"]) != (r["row"]["precision"] == "tf32")]
    checklist.add(f"{device} tf32 on exactly for precision tf32", FAIL if wrong_tf32 else PASS,
                  f"wrong in: {', '.join(wrong_tf32)}" if wrong_tf32 else "as asked, read back from torch")
    if not ok_rows:
        for what in ("MFU <= 1", "peak memory below device memory", "NVML handle matched", "NVML energy measured",
                     "no foreign-pid flag"):
            checklist.add(f"{device} {what}", SKIPPED, "no run succeeded")
        return
    try:
        ok, why = mfu_ok(ok_rows)
        checklist.add(f"{device} MFU <= 1", PASS if ok else FAIL, why)
    except Skip as exc:
        checklist.add(f"{device} MFU <= 1", SKIPPED, str(exc))
    over = [r for r in ok_rows if not r.get("peak_mem_allocated_bytes") or not r.get("gpu_memory_bytes")
            or r["peak_mem_allocated_bytes"] >= r["gpu_memory_bytes"]]
    peak = max(r.get("peak_mem_allocated_bytes") or 0 for r in ok_rows)
    checklist.add(f"{device} peak memory below device memory", FAIL if over else PASS,
                  f"largest peak {peak / 2**20:.0f} MiB of {ok_rows[0].get('gpu_memory_bytes', 0) / 2**30:.1f} GiB"
                  + (f"; {len(over)} row(s) empty or above" if over else ""))
    notes = [r.get("telemetry_note") or "" for r in ok_rows]
    unmatched = next((n for n in notes if "gpu columns empty" in n), None)
    checklist.add(f"{device} NVML handle matched", FAIL if unmatched else PASS,
                  unmatched or ("matched by PCI bus id" if any("matched by PCI" in n for n in notes) else "matched by UUID"))
    energy = [r for r in ok_rows if r.get("energy_j")]
    if not energy and any("MIG slice" in n for n in notes):
        checklist.add(f"{device} NVML energy measured", SKIPPED,
                      "a MIG slice: NVML measures power and energy only for the whole GPU (every slice's work)")
    else:
        checklist.add(f"{device} NVML energy measured", PASS if energy else FAIL,
                      f"{len(energy)}/{len(ok_rows)} rows; method {energy[0]['energy_method']}" if energy
                      else "energy_j empty in every row")
    flagged = [r.get("noise_flags") for r in ok_rows if FOREIGN_FLAG in (r.get("noise_flags") or "")]
    checklist.add(f"{device} no foreign-pid flag", FAIL if flagged else PASS,
                  f"{flagged[0]} (our own launcher holds no context: another process shares this GPU?)" if flagged
                  else "no other process on the device during any window")


# The search and the DDP run use the first of these the GPU runs (bf16 fails below compute
# capability 7.0); a GPU's support is read from its properties, with no CUDA context here.
MIXED_PRECISIONS = ("amp-bf16", "amp-fp16", "fp32")


def mixed_precision(device_index: int = 0) -> str:
    import torch
    device = torch.device("cuda", device_index)
    return next(p for p in MIXED_PRECISIONS if support(device, resolve_precision(p)).runs)


def _batch_search() -> tuple[bool, str]:
    cfg = BenchConfig(**{**TINY, "device": "cuda:0", "mode": "train", "precision": mixed_precision()})
    search = find_max_batch(cfg, max_batch_size=SEARCH_MAX_BATCH, start_batch_size=SEARCH_MAX_BATCH // 4,
                            isolate=True)
    return search.ok, search.summary()


def _ddp_run() -> tuple[bool, str]:
    cfg = BenchConfig(**{**TINY, "device": "cuda", "mode": "train", "precision": mixed_precision(),
                         "nproc_per_node": 2})
    row = run_benchmark(cfg)[0]  # torchrun from this process, which holds no CUDA context
    if row["status"] != "ok":
        return False, f"{row['status']}: {row['message']}"
    problems = []
    if row.get("dist_backend") != "nccl":
        problems.append(f"backend {row.get('dist_backend')}")
    if row.get("replicas_in_sync") is not True:
        problems.append("replicas not in sync after the window")
    if FOREIGN_FLAG in (row.get("noise_flags") or ""):
        problems.append(f"flagged {row['noise_flags']} (the launcher must hold no context)")
    return not problems, "; ".join(problems) or f"{rate_text(row)}, replicas in sync, no foreign pid"


def _allreduce() -> tuple[bool, str]:
    with tempfile.TemporaryDirectory(prefix="bench-allreduce-") as folder:
        command = python_command("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                                 "-m", "bench_core.scenarios.selftest", "allreduce", folder)
        outcome = supervise(command, limit_s=ALLREDUCE_TIMEOUT_S)
        found = [json.loads(p.read_text()) for p in sorted(Path(folder).glob("rank*.json"))]
    if len(found) != 2:
        ended = "timed out" if outcome.timed_out else f"exit {outcome.returncode}"
        return False, f"{len(found)}/2 ranks reported ({ended}): {outcome.last_line()[:300]}"
    wrong = [f for f in found if not f["correct"]]
    return not wrong, "; ".join(f"rank {f['rank']}: got {f['got']}, expected {f['expected']}" for f in found)


def _allreduce_worker(folder: str) -> int:
    """One torchrun worker: all-reduce (sum) of rank + 1 over a 1M-element tensor on its own GPU."""
    import torch
    import torch.distributed as dist
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device, timeout=dt.timedelta(seconds=ALLREDUCE_TIMEOUT_S / 2))
    world = dist.get_world_size()
    tensor = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(tensor)
    expected = world * (world + 1) / 2
    got = tensor.unique().tolist()
    Path(folder, f"rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "got": got, "expected": expected, "correct": got == [expected]}))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    # Child entry points: `runs SPEC OUT` (one GPU's configurations), `allreduce DIR` (a torchrun worker).
    kind = sys.argv[1]
    sys.exit(_child_runs(*sys.argv[2:4]) if kind == "runs" else _allreduce_worker(sys.argv[2]))
