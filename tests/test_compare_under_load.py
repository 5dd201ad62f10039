"""`bench compare` beside a steady neighbour: A and B alternate, so a load common to both cancels in B/A. Six
rounds of B/A at 0.41-0.44, every round flagged other-processes-on-cpu, give a verdict that says it was
measured under load (exit 0), not 'disturbed: re-measure'; where B/A moves with the load, or the load fell on
one side's windows only, the verdict is still 'disturbed: re-measure' (exit 3). The rounds are a real
compare's fields; no timing is asserted."""
import re

from bench_core.errors import EXIT_DISTURBED, EXIT_OK
from bench_core.results.comparison import DISTURBED
from bench_core.results.under_load import load_cores
from bench_core.scenarios.compare import Comparison, judge

A = [100.0, 98.0, 101.0, 99.0, 102.0, 100.0]


def rounds(b, flags_a, flags_b) -> Comparison:
    """A compare's six rounds as `bench compare` records them: samples/s, each side's noise_flags, their loads."""
    rows_a = [{"status": "ok", "noise_flags": f, "precision": "fp32", "step_time_ms_median": 10.0,
               "first_step_ms": 1.0, "compile_s": None, "run_id": "a"} for f in flags_a]
    rows_b = [{**r, "noise_flags": f, "run_id": "b"} for r, f in zip(rows_a, flags_b)]
    config = {"model": "resnet18", "mode": "train", "precision": "fp32", "batch_size": 8, "width": 64, "height": 64,
              "device": "cpu"}
    flagged = [", ".join(dict.fromkeys(n for f in (fa, fb) if f for n in [f.split("(")[0]]))
               for fa, fb in zip(flags_a, flags_b)]
    result = Comparison("num_threads=2", "num_threads=1", config, config, len(A), 0.02,
                        order=["AB", "BA"] * 3, samples_per_s_a=A, samples_per_s_b=b, disturbed=flagged,
                        load_cores=[[load_cores(fa), load_cores(fb)] for fa, fb in zip(flags_a, flags_b)],
                        rows_a=rows_a, rows_b=rows_b)
    judge(result)
    return result


def busy(cores: float) -> str:
    return f"other-processes-on-cpu({cores:.2f} cores)"


def test_six_rounds_beside_a_steady_neighbour_give_a_verdict_measured_under_load():
    steady = [busy(c) for c in (0.95, 0.97, 0.96, 0.98, 0.95, 0.97)]
    result = rounds([42.0, 41.5, 43.8, 42.2, 43.0, 41.9], steady, list(reversed(steady)))
    assert result.verdict == "slower" and result.exit_status == EXIT_OK == 0
    assert result.under_load.startswith("measured under load: 6 of 6 rounds ran beside other processes")
    assert 0.41 < result.ratio < 0.44 and result.ci_low < result.ratio < result.ci_high < 1
    text = result.format()
    assert "MEASURED UNDER LOAD): SLOWER" in text.splitlines()[-1]
    assert text.count("other-processes-on-cpu: judged under load") == 6
    assert result.mean_b / result.mean_a == result.ratio or abs(result.mean_b / result.mean_a - result.ratio) < 1e-12


def test_a_ratio_that_moves_with_the_load_is_refused():
    """The heavier the neighbour, the lower B/A: the load does not cancel, so nothing is judged."""
    loads = (0.3, 0.5, 0.7, 0.9, 1.1, 1.3)
    result = rounds([a * r for a, r in zip(A, (0.60, 0.55, 0.50, 0.45, 0.40, 0.35))],
                    [busy(c) for c in loads], [busy(c) for c in loads])
    assert result.verdict == DISTURBED and result.exit_status == EXIT_DISTURBED == 3 and not result.under_load
    assert "B/A moved with the load's level" in result.reason and result.ratio is None


def test_a_load_on_one_sides_windows_only_is_refused():
    """A neighbour that woke up during B's windows and slept through A's: B/A falls where B alone was loaded."""
    loads_b = (1.0, 0.3, 1.0, 0.3, 1.0, 0.3)
    result = rounds([a * r for a, r in zip(A, (0.40, 0.46, 0.40, 0.46, 0.40, 0.46))],
                    [busy(0.3)] * 6, [busy(c) for c in loads_b])
    assert result.verdict == DISTURBED and result.exit_status == 3
    assert re.search(r"B/A moved with (the load's level|how unevenly the load fell on A's and B's windows)",
                     result.reason)


def test_a_throttled_device_is_still_not_judged_and_two_rounds_are_too_few():
    """Only other processes' load cancels: a device that slowed itself stays disturbed; and two loaded rounds
    cannot show whether B/A moves with the load."""
    throttled = rounds([42.0] * 6, ["throttle(hw_slowdown)"] * 6, ["throttle(hw_slowdown)"] * 6)
    assert throttled.verdict == DISTURBED and not throttled.under_load
    two = Comparison("a", "b", {}, {}, 2, 0.02, order=["AB", "BA"], samples_per_s_a=[100.0, 99.0],
                     samples_per_s_b=[42.0, 42.5], disturbed=["other-processes-on-cpu"] * 2)
    judge(two)
    assert two.verdict == DISTURBED and "at least 4 show whether B/A moves with the load" in two.reason
