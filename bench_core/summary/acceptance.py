"""The checks of `bench acceptance` (bench_core/scenarios/acceptance.py runs its steps), judged from
the rows a run wrote, and the table it prints last: what must hold on every real GPU row (MFU in
(0, 1], the device and host clocks agreeing, NVML's energy against its power samples), what a
GPU must show (AMP faster than fp32 with its outputs within tolerance, tf32 reported as tf32,
ResNet-50 near lambdal's figure for that GPU, FSDP2's losses as plain training's, how busy the GPU was
measured on every row and the small batches host-bound, float8 compiled with its outputs checked), serving
without failed requests, the selftest green and no process left behind.
"""
from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from bench_core.files import atomic_write_text
from bench_core.results.bound import host_bound
from bench_core.results.disturbed import disturbances, disturbed_note
from bench_core.results.fidelity import WITHIN
from bench_core.results.store import iter_rows
from bench_core.summary.reference import gpu_matches, load_reference

PASS, FAIL, SKIPPED = "pass", "fail", "skipped"
CLOCK_TOLERANCE = 0.02       # the device events' window against the host clock's
ENERGY_TOLERANCE = 0.10      # NVML's energy counter against the sampled power x the window
ENERGY_MIN_WINDOW_S = 5.0    # ... judged on windows this long or longer (the power readings are 1 s averages)
PUBLISHED_TOLERANCE = 0.15   # ResNet-50 amp training against lambdal's figure for the same GPU
LOSS_TOLERANCE = 0.02        # FSDP2's first loss against plain training's (bf16 parameters against autocast)
BUSY_TOLERANCE = 0.15        # gpu_busy (the profiler's kernel time) against NVML's share of time a kernel ran


@dataclass
class Check:
    name: str
    status: str                  # pass | fail | skipped
    detail: str


def finish(result) -> list[Check]:
    """The checks of a finished run (scenarios.acceptance.Acceptance), written beside its rows as
    acceptance.json."""
    rows = list(iter_rows(result.out))
    checks = judge(rows, read_json(result.out / "selftest.json"), result.leftovers, result.skipped)
    atomic_write_text(result.out / "acceptance.json", json.dumps(
        {"finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "budget_s": result.budget_s,
         "steps": [asdict(s) for s in result.steps], "checks": [asdict(c) for c in checks],
         "figures": key_figures(rows)}, indent=1, default=str))
    return checks


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


def judge(rows: list[dict], selftest: dict | None, leftovers: list[str], skipped: tuple[str, ...] = ()) -> list[Check]:
    checks = [check_rows(rows), check_mfu(rows), check_clocks(rows), check_energy(rows)]
    checks += check_resnet50(rows)
    checks += [check_fsdp(rows), check_busy(rows), check_float8(rows), check_serving(rows)]
    checks += [Check("bench selftest: no check failed", SKIPPED, "left out (--skip selftest)") if "selftest" in skipped
               else check_selftest(selftest), check_leftovers(leftovers)]
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
    """Judged on windows of at least ENERGY_MIN_WINDOW_S: NVML's power readings on Ampere and newer
    (A100 excepted) are 1 s averages, so over a window of a few seconds their mean lags the counter
    by however much the power moved at its edges (first light: 15 % over Whisper's 2.5 s generate
    window, 1 to 3 % over ResNet-50's 3 to 6 s)."""
    name = (f"NVML energy agrees with the sampled mean power x time within {ENERGY_TOLERANCE:.0%} "
            f"(windows of {ENERGY_MIN_WINDOW_S:.0f} s or more)")
    found = [(r, _num(r, "energy_j"), _num(r, "power_w_sampled"), _num(r, "timed_s")) for r in rows
             if r.get("status") == "ok" and r.get("energy_method") == "nvml-counter"]
    found = [(r, e, p, t) for r, e, p, t in found if e and p and t]
    if not found:
        why = "no row has NVML's energy counter and power samples"
        return Check(name, SKIPPED, why + ("" if any(r.get("device_type") == "cuda" for r in rows)
                                         else " (no GPU rows)"))
    gaps = [(r, abs(p * t - e) / e, t) for r, e, p, t in found]
    judged = [(r, g) for r, g, t in gaps if t >= ENERGY_MIN_WINDOW_S]
    short = [(r, g) for r, g, t in gaps if t < ENERGY_MIN_WINDOW_S]
    shown = "; not judged (shorter windows): " + ", ".join(f"{_label(r)} {g:.1%}" for r, g in short) if short else ""
    if not judged:
        return Check(name, SKIPPED, f"no window of {ENERGY_MIN_WINDOW_S:.0f} s or more{shown}")
    worst_row, worst = max(judged, key=lambda item: item[1])
    bad = [(r, g) for r, g in judged if g > ENERGY_TOLERANCE]
    detail = f"{len(judged)} rows; largest gap {worst:.1%} ({_label(worst_row)})"
    if bad:
        detail += f"; {len(bad)} over: " + "; ".join(f"{_label(r)} {g:.0%}" for r, g in bad[:5])
    return Check(name, FAIL if bad else PASS, detail + shown)


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
    amp_fp16 = [r for r in rows if r.get("model") == "resnet50" and r.get("mode") == "train"
                and r.get("precision") == "amp-fp16" and r.get("status") == "ok"]
    out.append(check_published([*amp_fp16, *(r for r in (amp, tf32) if r)]))
    return out


def _true(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "1.0")


def check_published(ours: list[dict]) -> Check:
    """ResNet-50 training against lambdal's 1-GPU figures for the same GPU and precision (their
    AMP is fp16 in NGC's container; their FP32 on Ampere and newer ran TF32). A figure is met when
    one of our rows of its precision is within the tolerance: lambdal's memory layout and, in their
    newer run, their batch are not published, so ours are measured in both layouts."""
    name = f"ResNet-50 training within {PUBLISHED_TOLERANCE:.0%} of lambdal's figure for this GPU"
    ours = [r for r in ours if r.get("device_type") == "cuda"]
    if not ours:
        return Check(name, SKIPPED, "no ok resnet50 training row on a GPU")
    reference = [r for r in load_reference().to_dict("records") if r["source"] == "lambdal"
                 and r["model"] == "resnet50" and r["mode"] == "train" and r["gpus"] == 1
                 and gpu_matches(ours[0].get("device_name"), r["gpu_match"])]
    lines, met = [], []
    for ref in reference:
        mine = [r for r in ours if r.get("precision") in ref["match_precisions"].split()]
        if not mine:
            continue
        batch = "batch not stated" if math.isnan(ref["batch_size"]) else f"batch {ref['batch_size']:.0f}"
        gaps = [_num(r, "samples_per_s") / ref["value"] - 1 for r in mine]
        met.append(any(abs(g) <= PUBLISHED_TOLERANCE for g in gaps))
        lines.append(f"lambdal {ref['precision']} {ref['value']:.0f} images/s ({batch}; {ref['run_group']}) against "
                     + ", ".join(f"{r['precision']}{' channels_last' if _true(r.get('channels_last')) else ''} "
                                 f"bs {r.get('batch_size_actual')} {_num(r, 'samples_per_s'):.0f} ({g:+.0%})"
                                 for r, g in zip(mine, gaps)))
    if not lines:
        return Check(name, SKIPPED, f"lambdal publishes no 1-GPU ResNet-50 row for {ours[0].get('device_name')} "
                                    "in these precisions")
    return Check(name, PASS if all(met) else FAIL, "; ".join(lines))


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


def check_busy(rows: list[dict]) -> Check:
    """What bound each row, measured (run/busy.py): gpu_busy on every GPU row, near NVML's share of time with a
    kernel running, and the resnet18 inference ladder host-bound at batch 1 and not at 256 (the H200's
    ladder: 17-31 % busy up to batch 16, 90-93 % at 64 and 256)."""
    name = (f"GPU busy measured on every GPU row, within {BUSY_TOLERANCE:.2f} of NVML's; resnet18's ladder "
            "host-bound at batch 1, not at 256")
    gpu = [r for r in rows if r.get("status") == "ok" and r.get("device_type") == "cuda" and r.get("mode") != "serve"]
    if not gpu:
        return Check(name, SKIPPED, "no ok GPU row")
    missing = [_label(r) for r in gpu if _num(r, "gpu_busy") is None]
    apart = [f"{_label(r)} {_num(r, 'gpu_busy'):.2f} against NVML {_num(r, 'gpu_util_pct_mean') / 100:.2f}"
             for r in gpu if _num(r, "gpu_busy") is not None and _num(r, "gpu_util_pct_mean") is not None
             and abs(_num(r, "gpu_busy") - _num(r, "gpu_util_pct_mean") / 100) > BUSY_TOLERANCE]
    ladder = {int(_num(r, "batch_size")): r for r in gpu if (r.get("model"), r.get("mode"), r.get("compile")) ==
              ("resnet18", "infer", "off")}
    bound = {batch: bool(host_bound(r.get("noise_flags"))) for batch, r in ladder.items()}
    wrong = [f"batch {b} {'host-bound' if bound[b] else 'not host-bound'}" for b, want in ((1, True), (256, False))
             if b in bound and bound[b] != want]
    said = "; ".join(f"bs {b} " + (f"{_num(ladder[b], 'gpu_busy'):.2f}" if _num(ladder[b], "gpu_busy") is not None
                                   else "-") + (" host-bound" if bound[b] else "") for b in sorted(ladder))
    detail = (f"{len(gpu) - len(missing)} of {len(gpu)} rows measured; ladder: {said or 'not run'}"
              + (f"; not measured: {', '.join(missing[:4])}" if missing else "")
              + (f"; apart from NVML: {'; '.join(apart[:4])}" if apart else "")
              + (f"; {', '.join(wrong)}" if wrong else ""))
    return Check(name, FAIL if missing or apart or wrong else PASS, detail)


def check_float8(rows: list[dict]) -> Check:
    """float8 as it is run: compiled, against amp-bf16 under the same compile setting, its outputs checked (its
    first training losses against amp-bf16's: results/fidelity.py)."""
    name = "float8 training: compiled, its outputs within tolerance, against amp-bf16 under the same compile setting"
    fp8 = [r for r in rows if str(r.get("precision")).startswith("fp8") and r.get("status") == "ok"]
    if not fp8:
        return Check(name, SKIPPED, "no ok float8 row (torchao not installed, or a GPU below compute capability 8.9)")
    lines, bad = [], False
    for row in fp8:
        twin = next((r for r in rows if r.get("status") == "ok" and r.get("precision") == "amp-bf16" and all(
            r.get(k) == row.get(k) for k in ("model", "mode", "batch_size", "seq_len", "compile", "parallelism"))), None)
        ratio = f"{_num(row, 'throughput') / _num(twin, 'throughput'):.2f}x amp-bf16" if twin else "no amp-bf16 twin"
        bad |= twin is None or row.get("compile") in (None, "off") or row.get("output_check") != WITHIN
        lines.append(f"{_label(row)}: {_fmt(_num(row, 'throughput'))} {row.get('throughput_unit')}, {ratio}; "
                     f"outputs: {row.get('output_check')}")
    return Check(name, FAIL if bad else PASS, "; ".join(lines))


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


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def table(result, checks: list[Check]) -> str:
    lines = ["", "steps:"]
    for s in result.steps:
        ended = "stopped at its limit" if s.timed_out else f"exit {s.returncode}"
        lines.append(f"  {s.name:<9} {ended:<22} {s.seconds:7.1f} s")
    rows = list(iter_rows(result.out))
    if rows:
        lines += ["", "figures:"]
        for r in rows:
            value = _num(r, "throughput")
            mfu, power = _num(r, "mfu"), _num(r, "power_w_mean")
            peak = _num(r, "peak_mem_allocated_bytes")
            flags = disturbances(r.get("noise_flags"))  # a disturbed figure is marked where it is shown
            lines.append(f"  {_label(r)[:52]:<52} {r.get('status'):<11} "
                         + (f"{value:10.4g} {r.get('throughput_unit') or '':<18}" if value else f"{'':29}")
                         + (f" MFU {mfu:.3f}" if mfu is not None else "")
                         + (f" {power:.0f} W" if power is not None else "")
                         + (f" {peak / 2**30:.1f} GiB" if peak else "")
                         + (f" DISTURBED: {flags}" if flags else ""))
    lines += ["", "checks:"]
    for c in checks:
        lines.append(f"  [{c.status.upper():7s}] {c.name}")
        lines.append(f"            {c.detail}")
    counts = {s: sum(c.status == s for c in checks) for s in (PASS, FAIL, SKIPPED)}
    kept = [name for name in ("acceptance.json", "results.csv", "report.html", "selftest.json")
            if (result.out / name).is_file()]
    note = disturbed_note(rows)  # the checks that compare speeds rest on these figures
    lines += ["", f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIPPED]} skipped; "
                  f"results in {result.out} ({', '.join(kept)})" + (f"; {note}" if note else "")]
    return "\n".join(lines)
