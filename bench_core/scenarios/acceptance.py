"""`bench acceptance`: does everything work on this machine, and how fast? One command, a few
minutes: the environment, `bench sysinfo`, the acceptance sweep through the real pipeline
(`bench sweep`: papermill and the template notebook, every family and GPU path once), `bench
selftest --quick`, `bench report`, then the checks that must hold on a GPU, each judged from the
rows just written and printed as a table last.

Written for the first run on a lent GPU machine (docs/development.md#first-light-on-a-lent-gpu):
each step runs as a child process within its share of one time budget, so a step that hangs or
crashes costs its own share and the rest still runs; whatever was measured stays in the output
folder, and the table says what passed, what failed and what could not be checked. On a machine
without a GPU the same command rehearses itself with the CPU sweep (params/acceptance.yaml picks).
"""
from __future__ import annotations

import datetime as dt
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from bench_core.files import atomic_write_text
from bench_core.launch.supervisor import python_command, supervise

SWEEP = "params/acceptance.yaml"           # selects gpu-acceptance.yaml or acceptance-cpu.yaml
DEFAULT_OUT = "outputs/acceptance"
DEFAULT_BUDGET_S = 450.0
PASS, FAIL, SKIPPED = "pass", "fail", "skipped"
CLOCK_TOLERANCE = 0.02       # the device events' window against the host clock's
ENERGY_TOLERANCE = 0.10      # NVML's energy counter against the sampled power x the window
PUBLISHED_TOLERANCE = 0.15   # ResNet-50 amp training against lambdal's figure for the same GPU
LOSS_TOLERANCE = 0.02        # FSDP2's first loss against plain training's (bf16 parameters against autocast)
# Shares of what is left of the budget when a step starts; the sweep gets the rest, less what the
# steps after it are kept (so a sweep that runs long cannot starve them).
RESERVED_AFTER_SWEEP_S = {"selftest": 120.0, "report": 30.0}


@dataclass
class Step:
    name: str
    args: list[str]              # bench arguments (run as `python -m bench_core ARGS`)
    log: str                     # file name under the output folder
    most_s: float                # at most this long, whatever the budget says
    keep_after_s: float = 0.0    # seconds of the budget kept for the steps after this one


@dataclass
class StepResult:
    name: str
    returncode: int | None
    seconds: float
    timed_out: bool
    last_line: str


@dataclass
class Check:
    name: str
    status: str                  # pass | fail | skipped
    detail: str


@dataclass
class Acceptance:
    out: Path
    steps: list[StepResult] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)


def plan(out: Path, sweep: str = SWEEP) -> list[Step]:
    """The steps, in order: the sweep first (what is measured matters most), then the selftest
    and the report, each kept its share of the budget."""
    return [
        Step("sysinfo", ["sysinfo"], "sysinfo.txt", 120.0),
        Step("sweep", ["sweep", sweep, "--out", str(out), "--no-report"], "sweep.log", math.inf,
             keep_after_s=sum(RESERVED_AFTER_SWEEP_S.values())),
        Step("selftest", ["selftest", "--quick", "--out", str(out / "selftest.json")], "selftest.log", 600.0,
             keep_after_s=RESERVED_AFTER_SWEEP_S["report"]),
        Step("report", ["report", str(out)], "report.log", 600.0),
    ]


def run(out: Path, budget_s: float = DEFAULT_BUDGET_S, sweep: str = SWEEP,
        say: Callable[[str], None] = print) -> Acceptance:
    out.mkdir(parents=True, exist_ok=True)
    deadline, started = time.monotonic() + budget_s, time.time()
    result = Acceptance(out)
    write_environment(out)
    for step in plan(out, sweep):
        left = deadline - time.monotonic() - step.keep_after_s
        limit = min(step.most_s, left)
        if limit < 10:
            say(f"== {step.name}: skipped, {max(left, 0):.0f} s of the budget left")
            result.steps.append(StepResult(step.name, None, 0.0, True, "not started: budget spent"))
            continue
        say(f"== {step.name} (at most {limit:.0f} s): bench {' '.join(step.args)}")
        outcome = supervise(python_command("-m", "bench_core", *step.args), limit_s=limit, log_path=out / step.log,
                            on_line=lambda line: say(f"   {line}") and False)
        result.steps.append(StepResult(step.name, outcome.returncode, round(outcome.seconds, 1), outcome.timed_out,
                                       outcome.last_line("")[:300]))
        ended = "stopped at its limit" if outcome.timed_out else f"exit {outcome.returncode}"
        say(f"== {step.name}: {ended} after {outcome.seconds:.0f} s")
    rows = read_rows(out)
    result.checks = judge(rows, read_json(out / "selftest.json"), leftover_processes(started))
    atomic_write_text(out / "acceptance.json", json.dumps(
        {"finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "budget_s": budget_s,
         "steps": [asdict(s) for s in result.steps], "checks": [asdict(c) for c in result.checks],
         "figures": key_figures(rows)}, indent=1, default=str))
    return result


# -- what the run leaves beside the rows ------------------------------------------------------------

def write_environment(out: Path) -> None:
    """environment.json (this package's fingerprint of the machine) and, where there is one, the
    driver's own account of the GPU (`nvidia-smi -q`)."""
    from bench_core.measure import environment
    try:
        import torch
        device = torch.device("cuda", 0) if torch.cuda.is_available() else None
        env = environment.collect(device)
    except Exception as exc:  # noqa: BLE001 - a broken environment is itself a finding
        env = {"error": f"{type(exc).__name__}: {exc}"}
    atomic_write_text(out / "environment.json", json.dumps(env, indent=1, default=str))
    if shutil.which("nvidia-smi"):
        try:
            text = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            text = f"nvidia-smi -q failed: {exc}"
        atomic_write_text(out / "nvidia-smi.txt", text)


def read_rows(out: Path) -> list[dict]:
    from bench_core.results.store import iter_rows
    return list(iter_rows(out))


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


LEFTOVER_MARKS = ("bench_core", "ipykernel_launcher", "torch.distributed.run", "transformers serve",
                  "transformers.cli.transformers serve")


def leftover_processes(since: float = 0.0) -> list[str]:
    """Processes started since `since` (a time.time()) that are still running, are not this one or
    its ancestors, and are this project's or a serving engine's: a server, kernel or worker the
    steps should have stopped."""
    mine = {os.getpid()} | {p.pid for p in psutil.Process().parents()}
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "create_time"]):
        line = " ".join(proc.info.get("cmdline") or [])
        if proc.info["pid"] in mine or not line or (proc.info.get("create_time") or 0) < since:
            continue
        if any(mark in line for mark in LEFTOVER_MARKS):
            found.append(f"{proc.info['pid']}: {line[:120]}")
    return found


# -- the checks ----------------------------------------------------------------------------------

def _num(row: dict, key: str) -> float | None:
    value = row.get(key)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _label(row: dict) -> str:
    parts = [row.get("model"), row.get("mode"), row.get("precision")]
    if row.get("parallelism") and row.get("parallelism") != "ddp":
        parts.append(row["parallelism"])
    if row.get("compile") not in (None, "off"):
        parts.append(f"compile={row['compile']}")
    if row.get("mode") == "serve":
        parts.append(f"concurrency {row.get('concurrency')}")
    else:
        parts.append(f"bs {row.get('batch_size_requested') or row.get('batch_size')}")
    return " ".join(str(p) for p in parts if p)


def judge(rows: list[dict], selftest: dict | None, leftovers: list[str]) -> list[Check]:
    checks = [check_rows(rows), check_mfu(rows), check_clocks(rows), check_energy(rows)]
    checks += check_resnet50(rows)
    checks += [check_fsdp(rows), check_serving(rows), check_selftest(selftest), check_leftovers(leftovers)]
    return checks


def check_rows(rows: list[dict]) -> Check:
    name = "every row ok, or a failure row that says why"
    if not rows:
        return Check(name, FAIL, "no rows written")
    bad = [r for r in rows if r.get("status") not in ("ok", "unsupported")]
    silent = [r for r in bad if not r.get("message")]
    unsupported = [r for r in rows if r.get("status") == "unsupported"]
    detail = f"{len(rows) - len(bad) - len(unsupported)} ok, {len(unsupported)} unsupported, {len(bad)} failed"
    if bad:
        detail += ": " + "; ".join(f"{_label(r)}: {r.get('status')}: {str(r.get('message') or 'NO MESSAGE')[:160]}"
                                   for r in bad)
    if unsupported:
        detail += " | unsupported: " + "; ".join(f"{_label(r)}: {str(r.get('message'))[:120]}" for r in unsupported)
    return Check(name, FAIL if bad or silent else PASS, detail)


def check_mfu(rows: list[dict]) -> Check:
    """MFU in (0, 1] against the datasheet peak of the precision's math class; a rejected MFU
    (above 1) is a wrong peak or FLOP count."""
    name = "MFU in (0, 1] on every row that has one"
    values = [(r, _num(r, "mfu_rejected") if _num(r, "mfu_rejected") is not None else _num(r, "mfu"))
              for r in rows if r.get("status") == "ok"]
    values = [(r, v) for r, v in values if v is not None]
    if not values:
        return Check(name, SKIPPED, "no ok row has an MFU")
    bad = [(r, v) for r, v in values if not 0 < v <= 1]
    low, high = min(v for _, v in values), max(v for _, v in values)
    detail = f"{len(values)} rows, {low:.3f} to {high:.3f}"
    if bad:
        detail += "; outside: " + "; ".join(f"{_label(r)} {v:.3f} (peak {r.get('peak_tflops')})" for r, v in bad)
    return Check(name, FAIL if bad else PASS, detail)


def check_clocks(rows: list[dict]) -> Check:
    name = f"the timed window's device clock and host clock agree within {CLOCK_TOLERANCE:.0%}"
    pairs = [(r, _num(r, "timed_s"), _num(r, "timed_s_host")) for r in rows if r.get("status") == "ok"]
    pairs = [(r, d, h) for r, d, h in pairs if d and h]
    if not pairs:
        return Check(name, SKIPPED, "no ok row has both clocks")
    gaps = [(r, abs(h - d) / d) for r, d, h in pairs]
    worst_row, worst = max(gaps, key=lambda item: item[1])
    bad = [(r, g) for r, g in gaps if g > CLOCK_TOLERANCE]
    detail = f"{len(pairs)} rows; largest gap {worst:.2%} ({_label(worst_row)})"
    if bad:
        detail += f"; {len(bad)} over: " + "; ".join(f"{_label(r)} {g:.1%}" for r, g in bad[:5])
    return Check(name, FAIL if bad else PASS, detail)


def check_energy(rows: list[dict]) -> Check:
    name = f"NVML energy agrees with the sampled mean power x time within {ENERGY_TOLERANCE:.0%}"
    found = [(r, _num(r, "energy_j"), _num(r, "power_w_sampled"), _num(r, "timed_s")) for r in rows
             if r.get("status") == "ok" and r.get("energy_method") == "nvml-counter"]
    found = [(r, e, p, t) for r, e, p, t in found if e and p and t]
    if not found:
        why = "no row has NVML's energy counter and power samples"
        return Check(name, SKIPPED, why + ("" if any(r.get("device_type") == "cuda" for r in rows)
                                         else " (no GPU rows)"))
    gaps = [(r, abs(p * t - e) / e) for r, e, p, t in found]
    worst_row, worst = max(gaps, key=lambda item: item[1])
    bad = [(r, g) for r, g in gaps if g > ENERGY_TOLERANCE]
    detail = f"{len(found)} rows; largest gap {worst:.1%} ({_label(worst_row)})"
    if bad:
        detail += f"; {len(bad)} over: " + "; ".join(f"{_label(r)} {g:.0%} (window {_num(r, 'timed_s'):.1f} s)"
                                                   for r, g in bad[:5])
    return Check(name, FAIL if bad else PASS, detail)


def _resnet50(rows: list[dict], precision: str) -> dict | None:
    found = [r for r in rows if r.get("model") == "resnet50" and r.get("mode") == "train"
             and r.get("precision") == precision and r.get("status") == "ok"]
    return max(found, key=lambda r: _num(r, "samples_per_s") or 0, default=None)


def check_resnet50(rows: list[dict]) -> list[Check]:
    fp32, tf32, amp = (_resnet50(rows, p) for p in ("fp32", "tf32", "amp-bf16"))
    out = []
    name = "ResNet-50 amp-bf16 faster than fp32, outputs within tolerance"
    if fp32 and amp:
        ratio = _num(amp, "samples_per_s") / _num(fp32, "samples_per_s")
        verdict = "FASTER" if ratio > 1 else "SLOWER"
        fidelity = amp.get("output_check") or "not checked"
        ok = ratio > 1 and str(fidelity).startswith("within tolerance")
        out.append(Check(name, PASS if ok else FAIL,
                         f"{verdict}: amp-bf16 {_num(amp, 'samples_per_s'):.0f} against fp32 "
                         f"{_num(fp32, 'samples_per_s'):.0f} images/s ({ratio:.2f}x); output check: {fidelity}"))
    else:
        out.append(Check(name, SKIPPED, "needs ok resnet50 train rows in fp32 and amp-bf16"))
    name = "tf32 reported as tf32, fp32 as strict fp32"
    if fp32 and tf32:
        ok = _true(tf32.get("tf32_enabled")) and not _true(fp32.get("tf32_enabled"))
        out.append(Check(name, PASS if ok else FAIL,
                         f"tf32_enabled: tf32 row {tf32.get('tf32_enabled')}, fp32 row {fp32.get('tf32_enabled')}; "
                         f"tf32 {_num(tf32, 'samples_per_s'):.0f} against fp32 {_num(fp32, 'samples_per_s'):.0f} "
                         "images/s"))
    else:
        out.append(Check(name, SKIPPED, "needs ok resnet50 train rows in fp32 and tf32"))
    out.append(check_published([r for r in (_resnet50(rows, "amp-fp16"), amp, tf32) if r]))
    return out


def _true(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "1.0")


def check_published(ours: list[dict]) -> Check:
    """ResNet-50 training against lambdal's 1-GPU figures for the same GPU and precision (their
    AMP is fp16 in NGC's container; their FP32 on Ampere and newer ran TF32)."""
    name = f"ResNet-50 training within {PUBLISHED_TOLERANCE:.0%} of lambdal's figure for this GPU"
    ours = [r for r in ours if r.get("device_type") == "cuda"]
    if not ours:
        return Check(name, SKIPPED, "no ok resnet50 training row on a GPU")
    from bench_core.summary.reference import gpu_matches, load_reference
    reference = [r for r in load_reference().to_dict("records") if r["source"] == "lambdal"
                 and r["model"] == "resnet50" and r["mode"] == "train" and r["gpus"] == 1]
    lines, gaps = [], []
    for row in ours:
        for ref in reference:
            if row.get("precision") in ref["match_precisions"].split() and gpu_matches(row.get("device_name"),
                                                                                    ref["gpu_match"]):
                gap = _num(row, "samples_per_s") / ref["value"] - 1
                gaps.append(gap)
                batch = "batch not stated" if math.isnan(ref["batch_size"]) else f"batch {ref['batch_size']:.0f}"
                lines.append(f"{row['precision']} bs {row.get('batch_size_actual')}: ours "
                             f"{_num(row, 'samples_per_s'):.0f}, lambdal {ref['precision']} {ref['value']:.0f} "
                             f"({batch}; {ref['run_group']}): {gap:+.0%}")
    if not lines:
        return Check(name, SKIPPED, f"lambdal publishes no 1-GPU ResNet-50 row for {ours[0].get('device_name')}")
    ok = all(abs(g) <= PUBLISHED_TOLERANCE for g in gaps)
    return Check(name, PASS if ok else FAIL, "; ".join(lines))


def check_fsdp(rows: list[dict]) -> Check:
    name = f"FSDP2 on one device: the same first loss as plain training (within {LOSS_TOLERANCE:.0%})"
    train = [r for r in rows if r.get("mode") == "train" and r.get("status") == "ok" and r.get("warmup_losses")]
    sharded = [r for r in train if r.get("parallelism") == "fsdp"]
    if not sharded:
        return Check(name, SKIPPED, "no ok FSDP training row")
    fsdp = sharded[0]
    plain = next((r for r in train if r.get("model") == fsdp.get("model") and r.get("parallelism") in (None, "ddp")
                  and r.get("precision") == fsdp.get("precision")
                  and r.get("global_batch_size") == fsdp.get("global_batch_size")), None)
    if plain is None:
        return Check(name, SKIPPED, f"no plain {fsdp.get('model')} training row at the same global batch")
    a, b = _losses(plain), _losses(fsdp)
    gap = abs(a[0] - b[0]) / abs(a[0])
    return Check(name, PASS if gap <= LOSS_TOLERANCE else FAIL,
                 f"{fsdp.get('model')}: plain {', '.join(f'{x:.4f}' for x in a[:3])}; fsdp "
                 f"{', '.join(f'{x:.4f}' for x in b[:3])} (first loss {gap:.2%} apart)")


def _losses(row: dict) -> list[float]:
    value = row.get("warmup_losses")
    if isinstance(value, str):
        value = [float(v) for v in value.replace(",", " ").split()]
    return [float(v) for v in value]


def check_serving(rows: list[dict]) -> Check:
    name = "serving: no failed request, the server gone after each point"
    serve = [r for r in rows if r.get("mode") == "serve"]
    if not serve:
        return Check(name, SKIPPED, "no serve rows")
    failed = [r for r in serve if r.get("status") != "ok" or (_num(r, "request_errors") or 0) > 0]
    detail = "; ".join(f"concurrency {r.get('concurrency')}: {r.get('status')}, {r.get('requests_ok')} ok / "
                       f"{r.get('requests_sent')} sent, p99 TTFT {_fmt(_num(r, 'ttft_ms_p99'))} ms, "
                       f"{_fmt(_num(r, 'output_tokens_per_s'))} output tokens/s" for r in serve)
    return Check(name, FAIL if failed else PASS, detail + " (leftover servers: see the last check)")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def check_selftest(selftest: dict | None) -> Check:
    name = "bench selftest: no check failed"
    if not selftest:
        return Check(name, FAIL, "no selftest.json (the step failed or was not reached)")
    failed = [c for c in selftest.get("checks", []) if c.get("status") == FAIL]
    detail = f"{selftest.get('pass', 0)} passed, {selftest.get('fail', 0)} failed, {selftest.get('skipped', 0)} skipped"
    if failed:
        detail += ": " + "; ".join(f"{c['name']}: {str(c['reason'])[:160]}" for c in failed)
    return Check(name, FAIL if failed else PASS, detail)


def check_leftovers(leftovers: list[str]) -> Check:
    name = "no process left behind (kernels, workers, servers)"
    return Check(name, FAIL if leftovers else PASS, "; ".join(leftovers[:5]) or "none")


# -- the figures and the table ------------------------------------------------------------------

FIGURES = ("throughput", "throughput_unit", "mfu", "power_w_mean", "peak_mem_allocated_bytes", "ttft_ms_p99",
           "tpot_ms_p99", "compile_s")


def key_figures(rows: list[dict]) -> list[dict]:
    return [{"row": _label(r), "status": r.get("status"), **{k: r.get(k) for k in FIGURES}} for r in rows]


def table(result: Acceptance) -> str:
    lines = ["", "steps:"]
    for s in result.steps:
        ended = "stopped at its limit" if s.timed_out else f"exit {s.returncode}"
        lines.append(f"  {s.name:<9} {ended:<22} {s.seconds:7.1f} s")
    rows = read_rows(result.out)
    if rows:
        lines += ["", "figures:"]
        for r in rows:
            value = _num(r, "throughput")
            mfu, power = _num(r, "mfu"), _num(r, "power_w_mean")
            peak = _num(r, "peak_mem_allocated_bytes")
            lines.append(f"  {_label(r)[:52]:<52} {r.get('status'):<11} "
                         + (f"{value:10.4g} {r.get('throughput_unit') or '':<18}" if value else f"{'':29}")
                         + (f" MFU {mfu:.3f}" if mfu is not None else "")
                         + (f" {power:.0f} W" if power is not None else "")
                         + (f" {peak / 2**30:.1f} GiB" if peak else ""))
    lines += ["", "checks:"]
    for c in result.checks:
        lines.append(f"  [{c.status.upper():7s}] {c.name}")
        lines.append(f"            {c.detail}")
    counts = {s: sum(c.status == s for c in result.checks) for s in (PASS, FAIL, SKIPPED)}
    lines += ["", f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIPPED]} skipped; "
                  f"results in {result.out} (acceptance.json, results.csv, report.html)"]
    return "\n".join(lines)
