"""The comparison primitive: ratio, interval and verdict, checked on known samples and on seeded
simulations whose true ratio is known (the interval must cover it about 95 % of the time)."""
import math

import numpy as np
import pandas as pd
import pytest

from bench_core.results.disturbed import DISTURBING_FLAGS, disturbances
from bench_core.results.comparison import (
    DISTURBED,
    METHOD_TEXT,
    MIN_EFFECT,
    ONE_RUN,
    POWER,
    RUN_SHIFT,
    SAME_RUNS,
    Comparison,
    compare_groups,
    compare_paired,
    compare_rows,
    compare_samples,
)
from bench_core.summary.effects import compare_variants

TRIALS = 400
NOISE = 0.03  # 3 % run-to-run noise (sigma of log throughput)


def simulate(true_ratio: float, paired: bool, repeats: int = 5, trials: int = TRIALS, seed: int = 0):
    """Comparisons of lognormal throughputs (100 samples/s baseline) with a known true ratio."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        base = 100 * np.exp(rng.normal(0, NOISE, repeats))
        cand = 100 * true_ratio * np.exp(rng.normal(0, NOISE, repeats))
        out.append((compare_paired if paired else compare_samples)(base, cand))
    return out


@pytest.mark.parametrize("paired", [False, True], ids=["independent", "paired"])
@pytest.mark.parametrize("true_ratio, expected", [(1.10, "faster"), (1.0, "no clear difference"),
                                                  (0.90, "slower")])
def test_the_interval_covers_the_true_ratio_about_95_percent_of_the_time(paired, true_ratio, expected):
    found = simulate(true_ratio, paired, seed=int(true_ratio * 100) + paired)
    covered = np.mean([c.low <= true_ratio <= c.high for c in found])
    assert 0.90 <= covered <= 0.99, covered
    verdicts = pd.Series([c.verdict for c in found]).value_counts(normalize=True)
    assert verdicts.get(expected, 0) >= 0.85, verdicts.to_dict()


def test_identical_samples_give_ratio_1_and_no_clear_difference():
    for compare in (compare_samples, compare_paired):
        c = compare([120.0, 120.0, 120.0], [120.0, 120.0, 120.0])
        assert c.ratio == 1.0 and c.low <= 1.0 <= c.high and c.verdict == "no clear difference"
        assert c.text() == "1.00x [1.00-1.00] no clear difference"
    c = compare_samples([100, 103, 98, 101], [100, 103, 98, 101])
    assert c.ratio == pytest.approx(1.0) and c.low < 1.0 < c.high and "includes 1" in c.reason


def test_clear_changes_are_faster_or_slower_with_their_interval():
    base = [100.0, 101.0, 99.0, 100.5, 99.5]
    faster = compare_samples(base, [184.0, 183.0, 186.0, 185.0, 184.5])
    assert faster.verdict == "faster" and 1.0 < faster.low < faster.ratio < faster.high
    assert faster.text() == "1.85x [1.83-1.86] faster"
    slower = compare_samples(base, [90.0, 91.0, 89.5, 90.5, 90.0])
    assert slower.verdict == "slower" and slower.high < 1.0 and "9.8% slower" in slower.reason
    # The candidate / baseline order decides the direction, and the interval mirrors exactly.
    back = compare_samples([90.0, 91.0, 89.5, 90.5, 90.0], base)
    assert back.verdict == "faster" and back.ratio == pytest.approx(1 / slower.ratio)
    assert back.low == pytest.approx(1 / slower.high) and back.high == pytest.approx(1 / slower.low)


def test_a_change_under_the_minimum_effect_is_no_clear_difference_even_when_certain():
    base = [100.0, 100.1, 99.9, 100.0, 100.05]
    c = compare_samples(base, [101.0, 101.1, 100.9, 101.0, 101.05])
    assert c.low > 1.0 and c.verdict == "no clear difference" and "under the minimum effect 2%" in c.reason
    assert compare_samples(base, [101.0, 101.1, 100.9, 101.0, 101.05], min_effect=0.005).verdict == "faster"
    assert c.min_effect == MIN_EFFECT and c.confidence == 0.95


def test_fewer_than_two_repeats_give_no_interval_and_no_verdict():
    c = compare_samples([100.0], [120.0, 121.0])
    assert c.verdict == "too few repeats" and not c.has_interval and c.low is None and c.high is None
    assert c.ratio == pytest.approx(120.5 / 100, rel=1e-3)
    assert c.text() == "1.20x (too few repeats for an interval)"
    assert "at least 2" in c.reason and (c.n_baseline, c.n_candidate) == (1, 2)
    paired = compare_paired([100.0], [120.0])
    assert paired.verdict == "too few repeats" and paired.text() == "1.20x (too few repeats for an interval)"


def test_non_positive_and_nan_samples_are_left_out_and_said():
    c = compare_samples([100.0, 0.0, float("nan"), 101.0, None, -5], [150.0, 151.0, float("inf")])
    assert (c.n_baseline, c.n_candidate) == (2, 2) and c.verdict == "faster"
    assert "4 non-positive or NaN baseline repeat(s) left out" in c.reason
    assert "1 non-positive or NaN candidate repeat(s) left out" in c.reason
    empty = compare_samples([0.0, float("nan")], [100.0, 101.0])
    assert empty.verdict == "no data" and empty.ratio is None and not empty.has_interval
    assert "every baseline repeat is non-positive or NaN (2 left out)" == empty.reason and empty.text() == "no data"
    assert compare_samples([], []).reason == "no baseline repeats; no candidate repeats"


def test_paired_rounds_drop_a_round_with_an_unusable_side():
    c = compare_paired([100.0, 0.0, 100.0, 100.0], [130.0, 131.0, 129.0, 130.5])
    assert c.verdict == "faster" and c.n_baseline == 3 and "1 round(s) without a usable throughput" in c.reason
    assert compare_paired([0.0, 0.0], [1.0, 1.0]).verdict == "no data"
    with pytest.raises(ValueError, match="same number of rounds"):
        compare_paired([1.0, 2.0], [1.0])


def test_pairing_removes_drift_that_independent_repeats_cannot():
    # Both variants slow down together round after round (a warming machine): the per-round
    # ratio is steady, so the paired interval is narrow while Welch's sees only the spread.
    drift = np.linspace(100, 70, 8)
    base, cand = drift, drift * 1.05 * np.exp(np.random.default_rng(1).normal(0, 0.005, 8))
    paired, independent = compare_paired(base, cand), compare_samples(base, cand)
    assert paired.verdict == "faster" and independent.verdict == "no clear difference"
    assert paired.high - paired.low < (independent.high - independent.low) / 5


def test_compare_groups_gives_one_row_per_group():
    frame = pd.DataFrame({
        "model": ["a"] * 6 + ["b"] * 3,
        "side": ["baseline"] * 3 + ["candidate"] * 3 + ["baseline"] * 3,
        "samples_per_s": [10, 10.2, 9.9, 20, 20.3, 19.8, 5, 5.1, 5.0]})
    table = compare_groups(frame, ["model"])
    assert list(table["model"]) == ["a", "b"] and list(table["verdict"]) == ["faster", "no data"]
    assert table.loc[0, "ratio"] == pytest.approx(2.0, rel=0.02) and table.loc[0, "text"].endswith("faster")


def test_bad_settings_and_the_method_text():
    with pytest.raises(ValueError, match="min_effect"):
        compare_samples([1, 2], [1, 2], min_effect=1.5)
    with pytest.raises(ValueError, match="confidence"):
        compare_samples([1, 2], [1, 2], confidence=95)
    assert "Welch" in METHOD_TEXT and "bootstrap" in METHOD_TEXT and "2 %" in METHOD_TEXT
    c = Comparison(1.5, 1.2, 1.9, "faster", "why", 3, 3)
    assert c.has_interval and c.text() == "1.50x [1.20-1.90] faster" and math.isclose(c.confidence, 0.95)


def rows(runs, prefix="r", flags=None, device="cpu"):
    """Result rows: one per repeat, `runs` a list of runs (each a list of samples/s)."""
    return pd.DataFrame([{"run_id": f"{prefix}{i}", "samples_per_s": v, "device_type": device,
                          "disturbed_by": (flags or {}).get((i, j), "")}
                         for i, run in enumerate(runs) for j, v in enumerate(run)])


def test_runs_are_the_samples_when_both_sides_have_several():
    """A run can shift as a whole (another process, another memory layout): two runs of the same
    code, 10 % apart, with tight repeats inside each. Compared run by run there is no clear
    difference. One run against one run used to look like a confident 10 % change (issue 27: the
    gate failed on unchanged code); now the interval adds the stated run shift, and it holds."""
    fast, slow = [100.0, 101.0, 99.5], [90.0, 90.5, 89.8]
    found = compare_rows(rows([fast, slow], "a"), rows([slow, fast], "b"))
    c = found.comparison
    assert found.unit == "runs, 2 vs 2" and c.verdict == "no clear difference" and c.low < 1 < c.high
    assert found.baseline_mean == pytest.approx(found.candidate_mean)
    found = compare_rows(rows([fast], "a"), rows([slow], "b"))
    assert found.unit == ONE_RUN and found.comparison.verdict == "no clear difference"
    assert found.comparison.low < 1 < found.comparison.high and f"run-to-run shift of {RUN_SHIFT['cpu']:.0%}" in found.comparison.reason
    assert compare_rows(rows([fast, slow], "a"), rows([[95.0, 95.5, 94.8]], "b")).unit == ONE_RUN  # runs need 2+ a side
    # A large change is still called from one run a side.
    halved = compare_rows(rows([fast], "a"), rows([[v / 2 for v in fast]], "b")).comparison
    assert halved.verdict == "slower" and halved.high < 1 and halved.regressed(0.05)


def test_sides_measured_in_one_process_share_the_shift():
    """fp32 against amp-bf16 in one process: the run's shift is common to both, so no stated shift
    is added and a tight 10 % difference is a finding; a GPU's stated shift is smaller than a CPU's."""
    fast, slow = [100.0, 101.0, 99.5], [90.0, 90.5, 89.8]
    found = compare_rows(rows([fast], "r"), rows([slow], "r"))
    assert found.unit == SAME_RUNS and found.comparison.verdict == "slower"
    assert compare_rows(rows([fast], "r"), rows([slow], "r"), separate_runs=True).comparison.verdict != "slower"
    cpu = compare_rows(rows([fast], "a"), rows([fast], "b")).comparison
    gpu = compare_rows(rows([fast], "a", device="cuda"), rows([fast], "b", device="cuda")).comparison
    assert RUN_SHIFT["cuda"] < RUN_SHIFT["cpu"] and gpu.high < cpu.high


def test_disturbed_repeats_are_left_out_and_too_few_left_is_disturbed():
    """A neighbour made three of five new repeats 3x slower and they are flagged: the verdict rests on
    the two undisturbed ones. With every new repeat flagged there is nothing to judge: no ratio, no
    interval, 'disturbed: re-measure', never faster or slower."""
    old = [[100.0, 101.0, 99.0, 100.5, 99.5]]
    hit = {(0, j): "other-processes-on-cpu" for j in range(3)}
    found = compare_rows(rows(old, "a"), rows([[33.0, 34.0, 33.5, 100.2, 99.8]], "b", hit))
    c = found.comparison
    assert c.verdict == "no clear difference" and c.ratio == pytest.approx(1.0, abs=0.01)
    assert "3 candidate repeat(s) left out as disturbed (other-processes-on-cpu)" in c.reason
    assert found.left_out == (0, 3) and found.candidate_mean == pytest.approx(100.0, abs=0.1)
    everything = {(0, j): "other-processes-on-cpu, throttle" for j in range(5)}
    found = compare_rows(rows(old, "a"), rows([[33.0, 34.0, 33.5, 33.2, 33.8]], "b", everything))
    c = found.comparison
    assert c.verdict == DISTURBED and c.ratio is None and not c.has_interval and c.text() == DISTURBED
    assert found.disturbed_by == ((), ("other-processes-on-cpu", "throttle")) and not c.regressed(0.05)
    assert math.isnan(found.candidate_mean)
    # Runs: a wholly disturbed run is left out; the others still compare run by run.
    runs = [[100.0, 100.5], [101.0, 100.0], [99.0, 99.5]]
    found = compare_rows(rows(runs, "a"), rows(runs + [[30.0, 31.0]], "b", {(3, 0): "unstable-repeats",
                                                                           (3, 1): "unstable-repeats"}))
    assert found.unit == "runs, 3 vs 3" and found.comparison.verdict == "no clear difference"


def test_which_flags_disturb_and_the_method_text_says_so():
    assert disturbances("other-processes-on-cpu(0.94 cores);noisy-window(0.2 > 0.05)") == "other-processes-on-cpu"
    assert disturbances("throttle(hw_slowdown); unstable-repeats(CV 0.2 > 0.1 over 3 repeats)") == \
        "throttle, unstable-repeats"
    # A row from before schema 9 at its power cap: its throttle(sw_power_cap) and clock drop were the cap.
    assert disturbances("throttle(sw_power_cap);clock-drop(min 1605 < 0.9 x mean 1833 MHz)") == ""
    assert disturbances("power-capped(689 W of 700 W cap);host-bound(gpu busy 17%)") == ""
    assert disturbances("noisy-window(0.2 > 0.05);short-window(1 s < min_seconds 2)") == ""
    assert disturbances(float("nan")) == "" and disturbances(None) == ""
    for flag in DISTURBING_FLAGS:
        assert flag in METHOD_TEXT
    assert f"{RUN_SHIFT['cpu']:.0%}" in METHOD_TEXT and "disturbed: re-measure" in METHOD_TEXT


def gate_trials(runs: int, run_sd: float, factor: float, trials: int, seed: int, repeats: int = 3,
                repeat_sd: float = 0.02, separate_runs=None) -> list:
    """Seeded 'two sweeps' on a simulated machine: each run shifts by N(0, run_sd) in log throughput,
    each repeat by N(0, repeat_sd); the candidate is `factor` times as fast. Returns the comparisons."""
    rng = np.random.default_rng(seed)

    def sweep(prefix, scale):
        return pd.DataFrame([{"run_id": f"{prefix}{r}", "samples_per_s": 100 * scale * math.exp(shift + noise),
                              "device_type": "cpu"}
                             for r, shift in enumerate(rng.normal(0, run_sd, runs))
                             for noise in rng.normal(0, repeat_sd, repeats)])
    return [compare_rows(sweep("a", 1.0), sweep("b", factor), separate_runs=separate_runs).comparison
            for _ in range(trials)]


GATE_TRIALS = 300


def test_with_runs_the_gate_rarely_cries_wolf_and_catches_a_15_percent_slowdown():
    """The CI recipe (5 runs a side, params/ci-gate.yaml) under run-to-run shifts of 5 %, more than
    TorchBench reports between runs of one build: identical code is a regression (exit 1) in at most
    5 % of trials (2 % with this seed), a 15 % slowdown in at least 95 % (99.7 %). Why 5: with 3 runs
    a side the same slowdown is caught in only 75 %."""
    same = gate_trials(5, 0.05, 1.0, GATE_TRIALS, seed=11)
    slower = gate_trials(5, 0.05, 0.85, GATE_TRIALS, seed=12)
    false_alarms = np.mean([c.regressed(0.05) for c in same])
    detected = np.mean([c.regressed(0.05) for c in slower])
    assert false_alarms <= 0.05 and detected >= 0.95, (false_alarms, detected)
    assert np.mean([c.regressed(0.05) for c in gate_trials(3, 0.05, 0.85, GATE_TRIALS, seed=12)]) < 0.9


def test_one_run_a_side_holds_where_it_used_to_cry_wolf():
    """One run a side with run shifts as large as the stated one (RUN_SHIFT on CPU): the repeats alone
    called a regression in more than a quarter of the trials; with the stated shift, in at most 5 %."""
    with_shift = gate_trials(1, RUN_SHIFT["cpu"], 1.0, GATE_TRIALS, seed=13)
    repeats_only = gate_trials(1, RUN_SHIFT["cpu"], 1.0, GATE_TRIALS, seed=13, separate_runs=False)
    assert np.mean([c.regressed(0.05) for c in with_shift]) <= 0.05
    assert np.mean([c.regressed(0.05) for c in repeats_only]) >= 0.25


def test_the_detectable_slowdown_is_caught_about_as_often_as_it_says():
    """'detects' promises: a slowdown of that size is called POWER (95 %) of the time at this noise."""
    noise = gate_trials(5, 0.04, 1.0, GATE_TRIALS, seed=14)
    detectable = float(np.median([c.detectable(0.05) for c in noise]))
    assert 0.05 < detectable < 0.2
    caught = np.mean([c.regressed(0.05) for c in gate_trials(5, 0.04, 1 - detectable, GATE_TRIALS, seed=15)])
    assert POWER - 0.08 <= caught <= 1.0, (detectable, caught)
    one_run = gate_trials(1, 0.0, 1.0, 5, seed=16)
    floor = 1 - math.exp(-(1.96 + 1.645) * RUN_SHIFT["cpu"] * math.sqrt(2))
    assert all(c.detectable(0.05) >= floor - 1e-9 for c in one_run)  # one run cannot claim to see finer


def test_the_report_adds_the_run_shift_between_machines_not_between_precisions_of_one_process():
    """A sweep measures fp32 and amp-bf16 of one model in one process: a tight 10 % gap is a finding.
    Two machines are two processes: the same gap from one run each is within the stated shift."""
    fast, slow = [100.0, 101.0, 99.5], [110.0, 110.5, 109.8]

    def frame(column, values):
        return pd.DataFrame([{"model": "m", column: value, "run_id": f"run-{value}", "samples_per_s": v,
                              "device_type": "cpu", "noise_flags": None}
                             for value, samples in zip(values, (fast, slow)) for v in samples])
    precision = compare_variants(frame("precision", ["fp32", "amp-bf16"]), "precision", "fp32", keys=["model"])
    machines = compare_variants(frame("machine", ["a", "b"]), "machine", "a", keys=["model"])
    assert precision["verdict"].tolist() == ["faster"] and precision["unit"].tolist() == [SAME_RUNS]
    assert machines["verdict"].tolist() == ["no clear difference"] and machines["unit"].tolist() == [ONE_RUN]
    assert precision["ratio"].tolist() == pytest.approx(machines["ratio"].tolist())
