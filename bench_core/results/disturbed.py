"""Which rows were disturbed, not merely imprecise: the flag names that say so, read off a row's
noise_flags, and the one line every place that shows figures says about them. Plain Python, no
torch and no pandas (summary.csv and the terminal read it).

measure/noise.py decides the flags; this is how they are read wherever a figure is shown or judged.
"""
from __future__ import annotations

# Flags that say a measurement was disturbed, not merely imprecise: something else ran on the CPU or
# the device (cpu-steal: on this VM's cores, by the hypervisor's choice), the device slowed itself, or
# the repeats disagreed beyond noise.REPEAT_CV_THRESHOLD. A comparison (bench diff, bench compare, the
# report) leaves such repeats out and, with too few left, says "disturbed: re-measure" instead of
# faster or slower. noisy-window and short-window are imprecision that the spread of the repeats
# already carries; mfu-above-1 concerns the peak, not the timing.
# client-saturated: a serving point whose client (CPU or event loop) may have set the pace (bench_core.serving).
# power-capped and host-bound say what bound a row (a re-measure gives the same): not disturbances.
DISTURBING_FLAGS = ("other-processes-on-cpu", "cpu-steal", "other-processes-on-device", "throttle", "clock-drop",
                    "unstable-repeats", "client-saturated")
RE_MEASURE = "re-measure on a quiet machine"


def legacy_power_cap(parts: list[str]) -> bool:
    """Flags written before schema 9 for a GPU at its power cap: a throttle(...) naming sw_power_cap alone (since
    then, sw_power_cap is never a throttle: measure/noise.py writes power-capped). With it, that row's clock-drop
    was the cap's effect: neither disturbed the measurement."""
    return any(p.strip().startswith("throttle(") and p.strip()[len("throttle("):].rstrip(")").split(",") == ["sw_power_cap"]
               for p in parts)


def disturbances(flags) -> str:
    """The disturbing flags' names in a row's noise_flags ('other-processes-on-cpu(0.94 cores);noisy-window(..)'
    -> 'other-processes-on-cpu'), comma separated, each once; '' when none (NaN and None too). An older row's
    throttle(sw_power_cap) and its clock-drop are a power cap (legacy_power_cap), not a disturbance."""
    if not isinstance(flags, str):
        return ""
    parts = flags.split(";")
    capped = legacy_power_cap(parts)
    names = [part.split("(")[0].strip() for part in parts]
    return ", ".join(dict.fromkeys(n for n in names if n in DISTURBING_FLAGS
                                   and not (capped and n in ("throttle", "clock-drop"))))


def disturbed_rows(rows: list[dict]) -> tuple[int, str]:
    """(how many of the ok rows are disturbed, their flag names comma separated, each once)."""
    found = [disturbances(r.get("noise_flags")) for r in rows if r.get("status") == "ok"]
    hit = [f for f in found if f]
    return len(hit), ", ".join(dict.fromkeys(n for f in hit for n in f.split(", ")))


def disturbed_note(rows: list[dict]) -> str:
    """'2 disturbed (other-processes-on-cpu): re-measure on a quiet machine', or '' when none is."""
    count, flags = disturbed_rows(rows)
    return f"{count} disturbed ({flags}): {RE_MEASURE}" if count else ""
