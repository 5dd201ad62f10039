"""When a measurement is too noisy to trust: the flags a row gets, their stated thresholds, and the rules the report prints. Plain arithmetic, no torch.
"""
from __future__ import annotations

import math
import statistics

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


# A minimum SM clock below this fraction of the window's mean clock: the clock fell mid-window.
CLOCK_DROP_RATIO = 0.9


# Clock-event reasons that mean throttling. gpu_idle, applications_clocks_setting,
# sync_boost and display_clock_setting are states or settings, not a slowdown imposed on us.
THROTTLING_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
# sw_power_cap is how a power-limited card (T4, L4, A10) runs under load: set in nearly every
# window, at the clocks its rated power allows. A recorded condition (throttle_reasons), and
# noise only when the clock actually fell within the window.
POWER_CAP_REASON = "sw_power_cap"


def noise_flags(row: dict, cfg) -> list[str]:
    """Why this row may be disturbed; the sampler's own flags (other processes) come first."""
    flags = [f for f in str(row.get("noise_flags") or "").split(";") if f]
    low, mean = row.get("sm_clock_mhz_min"), row.get("sm_clock_mhz_mean")
    dropped = low is not None and bool(mean) and low < CLOCK_DROP_RATIO * mean
    throttled = [r for r in str(row.get("throttle_reasons") or "").split(";")
                 if r in THROTTLING_REASONS or (r == POWER_CAP_REASON and dropped)]
    if throttled:
        flags.append(f"throttle({','.join(throttled)})")
    if dropped:
        flags.append(f"clock-drop(min {low:.0f} < {CLOCK_DROP_RATIO} x mean {mean:.0f} MHz)")
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
        {"flag": "throttle", "threshold": "a hardware, thermal or power-brake slowdown reason (GPU, NVML); "
                                          "sw_power_cap only with a clock drop",
         "why": "the device slowed itself down (a power-limited card runs at its power cap under any load: "
                "that alone is recorded in throttle_reasons, not flagged)"},
        {"flag": "other-processes-on-cpu", "threshold": f"other processes used > {FOREIGN_CPU_CORES} cores during the "
                                                       "window (single-process runs)",
         "why": "another process shared the CPU cores the run's threads compute on"},
        {"flag": "other-processes-on-device", "threshold": "any foreign process on the GPU (NVML)",
         "why": "another process shared the device"},
        {"flag": "mfu-above-1", "threshold": "MFU > 1", "why": "impossible: the peak is too low; MFU is not shown"},
        {"flag": "client-saturated", "threshold": f"serving: the client used > {CLIENT_CPU_LIMIT} of a core, or its "
                                                  f"event loop's p99 lag > {LOOP_LAG_LIMIT_MS:g} ms",
         "why": "the load generator, not the server, may have set the pace: its latencies include its own queueing"},
    ]
