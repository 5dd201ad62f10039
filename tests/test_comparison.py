"""The comparison primitive: ratio, interval and verdict, checked on known samples and on seeded
simulations whose true ratio is known (the interval must cover it about 95 % of the time)."""
import math

import numpy as np
import pandas as pd
import pytest

from bench_core.results.comparison import (
    METHOD_TEXT,
    MIN_EFFECT,
    ONE_RUN,
    Comparison,
    compare_groups,
    compare_paired,
    compare_rows,
    compare_samples,
)

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


def test_runs_are_the_samples_when_both_sides_have_several():
    """A run can shift as a whole (another process, another memory layout): two runs of the same
    code, 10 % apart, with tight repeats inside each. Compared run by run there is no clear
    difference; one run against one run looks like a confident 10 % change, and the unit says so."""
    def rows(runs):
        return pd.DataFrame([{"run_id": f"r{i}", "samples_per_s": v} for i, run in enumerate(runs) for v in run])

    fast, slow = [100.0, 101.0, 99.5], [90.0, 90.5, 89.8]
    c, unit, old_mean, new_mean = compare_rows(rows([fast, slow]), rows([slow, fast]))
    assert unit == "runs, 2 vs 2" and c.verdict == "no clear difference" and c.low < 1 < c.high
    assert old_mean == pytest.approx(new_mean)
    c, unit, _, _ = compare_rows(rows([fast]), rows([slow]))
    assert unit == ONE_RUN and c.verdict == "slower" and c.high < 1
    c, unit, _, _ = compare_rows(rows([fast, slow]), rows([[95.0, 95.5, 94.8]]))
    assert unit == ONE_RUN  # runs only where both sides have 2 or more
