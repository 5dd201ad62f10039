"""What bound a row, where that was not a disturbance: the host (host-bound: the GPU waited for the host's
next launch, so the figure is the host's) or the GPU's power cap (power-capped: how that GPU runs that
workload). Read off a row's noise_flags (measure/noise.py writes them); the words every place that shows or
uses such a figure says: the terminal, bench compare, the report's comparisons and bench predict. Plain
Python, no torch and no pandas.
"""
from __future__ import annotations

import re

HOST_BOUND, POWER_CAPPED = "host-bound", "power-capped"
# What a host-bound figure measures: say it wherever one is shown.
HOSTS = "the host (CPU, Python, PyTorch's dispatch, kernel launches) set the step's pace, not the GPU"


def flag_of(flags, name: str) -> str:
    """The first flag called `name` in a row's noise_flags ('host-bound(gpu busy 31%)'), or ''."""
    if not isinstance(flags, str):
        return ""
    return next((f.strip() for f in flags.split(";") if f.strip().startswith(name + "(")), "")


def host_bound(flags) -> str:
    """'gpu busy 31%' (what is inside the host-bound flag) where the row is host-bound, else ''."""
    flag = flag_of(flags, HOST_BOUND)
    return flag[len(HOST_BOUND) + 1:].removesuffix(")") if flag else ""


def power_capped(flags) -> str:
    """'689 W of 700 W cap, SM clock min 1605 mean 1833 MHz' where the row ran at its power cap, else ''."""
    flag = flag_of(flags, POWER_CAPPED)
    return flag[len(POWER_CAPPED) + 1:].removesuffix(")") if flag else ""


def busy_share(texts: list[str]) -> str:
    """'17%' or '17-19%': the gpu busy share over several host-bound rows' flag texts."""
    shares = sorted({int(m[1]) for t in texts if (m := re.search(r"gpu busy (\d+)%", t))})
    return "" if not shares else f"{shares[0]}%" if len(shares) == 1 else f"{shares[0]}-{shares[-1]}%"


def by_nvml(texts: list[str]) -> str:
    """' by NVML utilization' where a row's share is NVML's (no profile), else ''."""
    return " by NVML utilization" if any("NVML" in t for t in texts) else ""


def busy_range(texts: list[str]) -> str:
    """'gpu busy 17%' or 'gpu busy 17-19% by NVML utilization' over several host-bound rows."""
    return f"gpu busy {busy_share(texts)}{by_nvml(texts)}" if busy_share(texts) else ""


def bound_note(rows: list[dict]) -> str:
    """bench run's words for its ok rows: '2 host-bound (gpu busy 17-18%): the host (...) set the step's pace, not
    the GPU; 2 at the GPU's power cap (689 W of 700 W cap, ...): how this GPU runs it, not a disturbance', or ''
    where neither."""
    ok = [r for r in rows if r.get("status") == "ok"]
    hosts = [t for t in (host_bound(r.get("noise_flags")) for r in ok) if t]
    caps = [t for t in (power_capped(r.get("noise_flags")) for r in ok) if t]
    parts = []
    if hosts:
        parts.append(f"{len(hosts)} host-bound ({busy_range(hosts)}): {HOSTS}")
    if caps:
        parts.append(f"{len(caps)} at the GPU's power cap ({caps[0]}): how this GPU runs it, not a disturbance")
    return "; ".join(parts)


def comparison_note(sides: list[tuple[str, list[dict]]], across_machines: bool = False) -> str:
    """What a comparison of host-bound rows compares, or '': 'host-bound (gpu busy: A 17%, B 15%): the host set the
    pace, not the GPU'. `sides`: (name, rows) each; `across_machines`: the sides ran on different machines, so
    the ratio compares their hosts."""
    found = [(name, texts) for name, rows in sides
             if (texts := [t for t in (host_bound(r.get("noise_flags")) for r in rows) if t])]
    if not found:
        return ""
    which = ", ".join(f"{name} {busy_share(texts)}" for name, texts in found)
    how = by_nvml([t for _, texts in found for t in texts])
    what = "compares the hosts, not the GPUs" if across_machines else "the host set the pace, not the GPU"
    return f"host-bound (gpu busy: {which}{how}): {what}"
