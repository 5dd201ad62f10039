"""Intel/AMD RAPL energy counters of the CPU package (Linux powercap), read over the timed window.
"""
from __future__ import annotations

import re
from pathlib import Path

RAPL_ROOT = Path("/sys/class/powercap")


def open_rapl(device, root: Path, notes: list[str]) -> "RaplCounter | None":
    if device.type == "mps":
        notes.append("energy empty: no energy counter is read on mps")
    if device.type != "cpu":
        return None
    counter, reason = RaplCounter.open(root)
    if counter is None:
        notes.append(f"energy empty: {reason}")
    else:
        notes.append("energy is RAPL package energy: the whole CPU package, every process on it")
    return counter


class RaplCounter:
    """Package energy from <root>/intel-rapl:N/energy_uj, summed over packages.

    The counter wraps at max_energy_range_uj; reading it every sample and adding the
    per-interval deltas counts every wrap (a window can outlast one wrap period).
    """

    def __init__(self, zones: list[Path], ranges_uj: list[int]):
        self.zones = zones
        self.ranges_uj = ranges_uj
        self.energy_uj = 0
        self.power_w_max: float | None = None
        self._last: list[int] | None = None
        self._last_t: float | None = None

    @classmethod
    def open(cls, root: Path | str = RAPL_ROOT) -> tuple["RaplCounter | None", str | None]:
        root = Path(root)
        zones = sorted(p for p in root.glob("intel-rapl:*") if re.fullmatch(r"intel-rapl:\d+", p.name))
        if not zones:
            return None, f"no RAPL package zone under {root} (intel-rapl:N)"
        try:
            counter = cls(zones, [int((z / "max_energy_range_uj").read_text()) for z in zones])
            counter.read()
        except PermissionError:
            return None, f"RAPL {zones[0]}/energy_uj is not readable (root only since Linux 5.10)"
        except (OSError, ValueError) as exc:
            return None, f"RAPL unreadable ({(str(exc) or type(exc).__name__)})"
        return counter, None

    def read(self) -> list[int]:
        return [int((z / "energy_uj").read_text()) for z in self.zones]

    def sample(self, now: float) -> None:
        try:
            values = self.read()
        except (OSError, ValueError):
            return
        if self._last is not None:
            delta = 0
            for cur, prev, span in zip(values, self._last, self.ranges_uj):
                delta += cur - prev if cur >= prev else cur + span - prev
            self.energy_uj += delta
            if now > self._last_t:
                watts = delta / 1e6 / (now - self._last_t)
                self.power_w_max = max(self.power_w_max or 0.0, watts)
        self._last, self._last_t = values, now

    @property
    def energy_j(self) -> float:
        return self.energy_uj / 1e6

    def columns(self, wall_s: float) -> dict:
        return {"energy_j": self.energy_j, "energy_method": "rapl",
                "power_w_mean": self.energy_j / wall_s if wall_s > 0 else None, "power_w_max": self.power_w_max}
