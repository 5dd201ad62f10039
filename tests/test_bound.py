"""What bound a row, said truly (issue 59): a GPU at its power cap is power-capped, not disturbed, and stays in
every comparison; a GPU that waited for the host is host-bound, and every place that shows or uses its figure
says so. The kept H200 rows (gpu/runs/) are read by today's rules."""
from pathlib import Path

import pytest

from bench_core.results.comparison import DISTURBED
from bench_core.results.disturbed import disturbances
from bench_core.summary.effects import settings_effects
from bench_core.summary.load import load_results

ROOT = Path(__file__).resolve().parents[1]
H200_RUNS = [ROOT / "gpu" / "runs" / "h200-2026-11-27", ROOT / "gpu" / "runs" / "h200-2026-11-27-b"]


@pytest.fixture(scope="module")
def h200():
    return load_results(H200_RUNS)


def test_the_kept_h200_rows_at_the_power_cap_are_judged_not_disturbed(h200):
    capped = h200.ok[(h200.ok["model"] == "resnet50") & (h200.ok["precision"] == "amp-fp16") & h200.ok["channels_last"]]
    assert len(capped) == 2  # written as throttle(sw_power_cap);clock-drop(...) on both machines
    assert list(capped["noise_flags"]) == [
        "power-capped(689 W of a cap not recorded, SM clock min 1605 mean 1833 MHz)",
        "power-capped(688 W of a cap not recorded, SM clock min 1650 mean 1847 MHz)"]
    assert not any(disturbances(f) for f in capped["noise_flags"])
    layout = settings_effects(h200)
    (verdict,) = layout[(layout["setting"] == "channels_last vs NCHW") & (layout["precision"] == "amp-fp16")].to_dict("records")
    assert verdict["verdict"] != DISTURBED and verdict["ratio"] == pytest.approx(2.08, abs=0.01)  # the 2.08x


def test_the_kept_h200_ladder_reads_host_bound_from_nvml_where_it_had_no_profile(h200):
    ladder = h200.ok[(h200.ok["model"] == "resnet18") & (h200.ok["compile"] == "off")]
    flags = {int(b): f for b, f in zip(ladder["batch_size"], ladder["noise_flags"]) if isinstance(f, str)}
    assert flags == {1: "host-bound(gpu busy 17% by NVML utilization)", 4: "host-bound(gpu busy 21% by NVML utilization)",
                     16: "host-bound(gpu busy 31% by NVML utilization)"}  # not 64 (69 %, 90 %) nor 256 (93 %)
