"""When a measurement is too noisy to trust, and what bound it: the flags a row gets, their stated thresholds,
and the rules the report prints. Plain arithmetic, no torch.

Two flags say what bound a row, not that it was disturbed (results/disturbed.py reads which are):
power-capped (the GPU ran at its power cap: how that GPU runs that workload) and host-bound (the GPU
idled waiting for the host: the figure is the host's). A re-measure gives the same; the row stays in
every comparison, and the comparison says what it compares.
"""
from __future__ import annotations

import math
import statistics

from bench_core.results.disturbed import legacy_power_cap

# A window's throughput is the mean over its steps, so its own uncertainty is the step-time CV
# over the square root of the step count (the standard error of the mean step). Above this the
# window was too short for how much its steps varied: its samples/s is uncertain by more than it.
WINDOW_SE_THRESHOLD = 0.05


# Repeats of one configuration whose samples/s differ by a CV above this disagree with each other
# by more than the differences a reader looks for (precisions, machines): something changed
# between windows (another process, clocks, memory). Needs at least MIN_REPEATS_FOR_CV repeats.
REPEAT_CV_THRESHOLD = 0.10


MIN_REPEATS_FOR_CV = 3


# Other processes' CPU use during the window, in cores, above which a CPU row is flagged (telemetry).
FOREIGN_CPU_CORES = 0.25


# Steal time over the window (measure/steal.py: the hypervisor ran someone else on this VM's cores while they had
# work), in cores, above which a row is flagged cpu-steal. Lower than FOREIGN_CPU_CORES because steal lands on the
# run's own cores: on a quiet VM the only vCPUs with work are the run's, and its threads compute in step (an
# intra-op parallel region ends when its slowest thread does), so a slice stolen from any one of them stalls the
# whole step, and s cores of steal can cost the window up to s of its time (0.05: 5 %); another process on a core
# the run does not use costs it nothing. 5 % is half the run-to-run shift a CPU comparison allows for
# (results/comparison.py RUN_SHIFT, 10 %) and over twice the 2 % it calls a difference. Steal's background on a
# quiet 2-core Zen 3 VM was 1 tick (0.01 s) in 30 s, 0.0003 cores: far below, so it does not flag every row.
STEAL_CPU_CORES = 0.05


# A minimum SM clock below this fraction of the window's mean clock: the clock fell mid-window.
CLOCK_DROP_RATIO = 0.9


# Clock-event reasons that mean throttling. gpu_idle, applications_clocks_setting,
# sync_boost and display_clock_setting are states or settings, not a slowdown imposed on us.
THROTTLING_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
# sw_power_cap is how a GPU runs at its power limit: a T4, L4 or A10 in nearly every window, an H200 under
# ResNet-50 amp-fp16 channels_last (688-689 W of its 700 W, SM 1605-1980 MHz, on two machines alike). The
# clock is the cap's lever, so a clock that falls under it is the cap's effect. Not a disturbance: a
# re-measure on the same GPU gives the same (the kept H200 rows did), so the row is reported as power-capped
# and judged in every comparison.
POWER_CAP_REASON = "sw_power_cap"
# A window ran at its cap where sw_power_cap was seen and its mean power reached this share of the enforced
# limit (NVML), or its SM clock fell (CLOCK_DROP_RATIO). The share leaves room for NVML's power readings
# trailing the limiter (the H200 rows: 688 W of 700 W with the clock falling, 667 W with it steady).
POWER_CAP_SHARE = 0.95


# A GPU row is host-bound when its kernels ran (on the GPU's own clock: torch.profiler's CUDA activity over a
# few steps after the window, run/busy.py) for less than this share of the window's mean step: for the rest
# the GPU waited for the host (Python, PyTorch's dispatch, the launch path, the CPU). Below one half the GPU's
# own work is less than half the step: a GPU twice as slow would still keep up, so the figure is the host's.
# From the H200 resnet18 inference ladder (amp-bf16, 224 px): a bare loop took 2.09 ms a step at batch 1 and
# 2.11 ms at batch 16 (478 and 7,584 images/s), through the notebook 3.5-3.7 ms at 1, 4 and 16 alike: the
# host set those steps, and NVML counted a kernel running 17, 21 and 31 % of the time. Batch 64 and 256 (2.9
# and 9.6 ms a step; 22,199 and 26,755 images/s: the GPU saturating) ran kernels 90 and 93 % of it. No step of
# the ladder fell between 31 and 90 %; one half lies in that gap and has the meaning above. First light's batch
# 64 on a slower host (69 %, 17,373 images/s against 22,148) is not flagged: its GPU still did two thirds of
# the step. The GPU's own time is what the host hides: at batch 1, NVML's share times the step is 0.63 ms
# through the notebook (17 % of 3.72 ms) and 0.65 ms through bench run on the other machine (30 % of 2.15 ms).
HOST_BOUND_BUSY = 0.5
# The schema that brought gpu_busy and power_limit_w (results/rows.py): rows written before it said a GPU at
# its power cap as throttle(sw_power_cap) and clock-drop, and had no gpu_busy; current_flags reads them anew.
BUSY_SCHEMA = 9


def noise_flags(row: dict, cfg) -> list[str]:
    """Why this row may be disturbed, and what bound it; the sampler's own flags (other processes) come first."""
    flags = [f for f in str(row.get("noise_flags") or "").split(";") if f]
    low, mean = row.get("sm_clock_mhz_min"), row.get("sm_clock_mhz_mean")
    dropped = clock_dropped(row)
    throttled = [r for r in str(row.get("throttle_reasons") or "").split(";") if r in THROTTLING_REASONS]
    capped = power_capped_flag(row)
    if throttled:
        flags.append(f"throttle({','.join(throttled)})")
    if dropped and (throttled or not capped):  # under the cap alone, the clock fell because of the cap
        flags.append(f"clock-drop(min {low:.0f} < {CLOCK_DROP_RATIO} x mean {mean:.0f} MHz)")
    if capped:
        flags.append(capped)
    se = window_se(row)
    if se is not None and se > WINDOW_SE_THRESHOLD:
        flags.append(f"noisy-window(CV/sqrt(steps) {se:.3f} > {WINDOW_SE_THRESHOLD})")
    seconds, wanted = row.get("timed_s"), getattr(cfg, "min_seconds", 0) or 0
    if seconds is not None and seconds < wanted:
        flags.append(f"short-window({seconds:.2f} s < min_seconds {wanted:g})")
    rejected = row.get("mfu_rejected")
    if rejected is not None:
        flags.append(f"mfu-above-1({rejected:.2f} > 1: mfu not shown; the peak is too low: re-measure with "
                     f"`bench peak --force`, or a wrong table entry)")
    return flags


def clock_dropped(row: dict) -> bool:
    """The SM clock's minimum fell below CLOCK_DROP_RATIO of its mean within the window."""
    low, mean = _number(row.get("sm_clock_mhz_min")), _number(row.get("sm_clock_mhz_mean"))
    return low is not None and bool(mean) and low < CLOCK_DROP_RATIO * mean


def power_capped_flag(row: dict) -> str | None:
    """'power-capped(689 W of 700 W cap, SM clock min 1605 mean 1833 MHz)' where the window ran at the GPU's power
    cap (POWER_CAP_SHARE), else None."""
    if POWER_CAP_REASON not in str(row.get("throttle_reasons") or "").split(";"):
        return None
    power, cap = _number(row.get("power_w_mean")), _number(row.get("power_limit_w"))
    if not (power and cap and power >= POWER_CAP_SHARE * cap) and not clock_dropped(row):
        return None
    # no ';' inside: it separates the flags
    watts = (f"{power:.0f} W of {cap:.0f} W cap" if power and cap else f"{power:.0f} W of a cap not recorded" if power
             else f"power not recorded, cap {cap:.0f} W" if cap else "power not recorded")
    low, mean = _number(row.get("sm_clock_mhz_min")), _number(row.get("sm_clock_mhz_mean"))
    clocks = f", SM clock min {low:.0f} mean {mean:.0f} MHz" if low and mean else ""
    return f"power-capped({watts}{clocks})"


def host_bound_flag(row: dict) -> str | None:
    """'host-bound(gpu busy 31%)' for a GPU row whose GPU was busy less than HOST_BOUND_BUSY of its step, else
    None. gpu_busy is the profiler's (run/busy.py); where a GPU row has none (no CUPTI, a row from before it),
    NVML's utilization over the window, the share of time a kernel ran, stands in and the flag says so. Never a
    serving point: its GPU idles by the load it is given (1 user), not by its host."""
    if row.get("device_type") != "cuda" or row.get("mode") == "serve":
        return None
    busy, how = _number(row.get("gpu_busy")), ""
    if busy is None:
        util = _number(row.get("gpu_util_pct_mean"))
        busy, how = (None, "") if util is None else (util / 100.0, " by NVML utilization")
    if busy is None or busy >= HOST_BOUND_BUSY:
        return None
    return f"host-bound(gpu busy {busy:.0%}{how})"


def current_flags(row: dict) -> str | None:
    """A row's noise_flags under today's rules, for a row read back (the report, bench predict). A row from before
    schema BUSY_SCHEMA said throttle(sw_power_cap) and clock-drop of a GPU at its power cap: those become
    power-capped; and it had no gpu_busy: a GPU row gets host-bound from NVML's utilization. The files stay as
    they were written."""
    flags = [f for f in str(row.get("noise_flags") or "").split(";") if f.strip()] \
        if isinstance(row.get("noise_flags"), str) else []
    if legacy_power_cap(flags):
        flags = [f for f in flags if f.split("(")[0].strip() not in ("throttle", "clock-drop")]
        flags.append(power_capped_flag(row) or "power-capped(sw_power_cap, read from a row before schema 9)")
    version = _number(row.get("schema_version"))
    if version is not None and version < BUSY_SCHEMA and not any(f.startswith("host-bound(") for f in flags):
        flags.append(host_bound_flag(row) or "")
    return ";".join(f for f in flags if f) or None


def _number(value) -> float | None:
    """A finite number, or None (None, NaN, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def window_se(row: dict) -> float | None:
    """Relative standard error of the window's mean step time: step-time CV / sqrt(steps)."""
    cv, steps = row.get("step_time_cv"), row.get("timed_steps")
    if cv is None or not steps or cv != cv:  # NaN
        return None
    return cv / math.sqrt(steps)


def flag_unstable_repeats(rows: list[dict]) -> None:
    """After every repeat of one configuration: flag all its rows when their samples/s disagree."""
    rates = [r["samples_per_s"] for r in rows if r.get("status") == "ok" and r.get("samples_per_s")]
    if len(rates) < MIN_REPEATS_FOR_CV:
        return
    cv = statistics.stdev(rates) / statistics.fmean(rates)
    if cv <= REPEAT_CV_THRESHOLD:
        return
    flag = f"unstable-repeats(CV {cv:.3f} > {REPEAT_CV_THRESHOLD} over {len(rates)} repeats)"
    for row in rows:
        row["noise_flags"] = ";".join(f for f in [*(row.get("noise_flags") or "").split(";"), flag] if f)


# A serving point's client (bench_core.serving) saturated: its CPU time over the window above this share of one
# core, or its event loop's p99 lag above this many ms. Then the client, not the server, may have set the pace.
CLIENT_CPU_LIMIT = 0.9
LOOP_LAG_LIMIT_MS = 50.0


def noise_rules() -> list[dict]:
    """Each flag the code can raise, its threshold and why (the report's Method section shows this
    table; tests/test_report.py checks that every flag the code writes is here)."""
    return [
        {"flag": "noisy-window", "threshold": f"step-time CV / sqrt(timed steps) > {WINDOW_SE_THRESHOLD}",
         "why": "the window's samples/s is a mean over its steps; past this its own uncertainty exceeds 5%: "
                "run longer (min_seconds) or on a quieter machine"},
        {"flag": "unstable-repeats", "threshold": f"CV of samples/s over >= {MIN_REPEATS_FOR_CV} repeats > "
                                                  f"{REPEAT_CV_THRESHOLD}",
         "why": "the repeats disagree by more than the differences worth reading; something changed between "
                "windows"},
        {"flag": "short-window", "threshold": "timed seconds < min_seconds",
         "why": "a fixed step count (distributed runs) ended before the minimum duration"},
        {"flag": "clock-drop", "threshold": f"min SM clock < {CLOCK_DROP_RATIO} x mean (GPU)",
         "why": "the clock fell inside the window"},
        {"flag": "throttle", "threshold": "a hardware, thermal or power-brake slowdown reason (GPU, NVML)",
         "why": "the device slowed itself down (sw_power_cap is not one: see power-capped)"},
        {"flag": "power-capped", "threshold": f"sw_power_cap seen (GPU, NVML) and the mean power >= "
                                              f"{POWER_CAP_SHARE:.0%} of the enforced cap, or the SM clock fell",
         "why": "not a disturbance: the GPU ran at its power cap, how it runs this workload (a re-measure gives the "
                "same); the row stays in every comparison, and its clock drop is the cap's, not flagged apart. "
                "Rows before schema 9 said throttle(sw_power_cap) and clock-drop: they are read so"},
        {"flag": "host-bound", "threshold": f"GPU busy < {HOST_BOUND_BUSY:.0%} of the window's mean step (kernel time "
                                            "from torch.profiler over a few steps after the window; where a row "
                                            "has none, NVML's utilization, said so in the flag)",
         "why": "not a disturbance: the GPU waited for the host (CPU, Python, dispatch, launches), so the figure "
                "is the host's; a comparison of such rows across GPUs compares hosts"},
        {"flag": "other-processes-on-cpu", "threshold": f"other processes used > {FOREIGN_CPU_CORES} cores during the "
                                                       "window (single-process runs)",
         "why": "another process shared the CPU cores the run's threads compute on"},
        {"flag": "cpu-steal", "threshold": f"steal time on the run's cores (/proc/stat) > {STEAL_CPU_CORES} cores "
                                           "during the window, beyond one tick of the counter",
         "why": "the hypervisor gave this VM's cores to someone else while the run had work on them (no process "
                "here shows it); a slice stolen from one thread stalls a step all its threads share"},
        {"flag": "other-processes-on-device", "threshold": "any foreign process on the GPU (NVML)",
         "why": "another process shared the device"},
        {"flag": "mfu-above-1", "threshold": "MFU > 1", "why": "impossible: the peak is too low; MFU is not shown"},
        {"flag": "client-saturated", "threshold": f"serving: the client used > {CLIENT_CPU_LIMIT} of a core, or its "
                                                  f"event loop's p99 lag > {LOOP_LAG_LIMIT_MS:g} ms",
         "why": "the load generator, not the server, may have set the pace: its latencies include its own queueing"},
    ]
