"""The cost frontier: Pareto points and the cheapest configuration within 10 % of the fastest.

The rows are made by a real tiny `bench run` with a price, then copied as if measured on two other
machines at other speeds and prices (names, rates and costs edited): test input, not a mock.
"""
from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pandas as pd
import pytest

from bench_core.cli import main
from bench_core.results.store import rebuild_csv
from bench_core.summary.cost import (
    cheapest_near_fastest,
    cost_points,
    pareto_front,
    picks_table,
)
from bench_core.summary.load import load_results
from bench_core.summary.report import build_report


def test_pareto_front_keeps_only_points_nothing_beats_on_both():
    speed = np.array([100, 90, 80, 50, 100])
    cost = np.array([10, 5, 6, 2, 12])
    # (80, 6) is beaten by (90, 5); (100, 12) by (100, 10); the rest trade speed for cost.
    assert pareto_front(speed, cost).tolist() == [True, True, False, True, False]


def test_the_pick_is_the_cheapest_within_ten_percent_of_the_fastest():
    group = pd.DataFrame({"throughput": [100.0, 91.0, 89.0], "cost_per_million": [10.0, 7.0, 1.0]})
    assert cheapest_near_fastest(group) == 1          # 89 is 11 % slower: out, however cheap
    group = pd.DataFrame({"throughput": [100.0, 50.0], "cost_per_million": [10.0, 1.0]})
    assert cheapest_near_fastest(group) == 0          # nothing is near: the fastest is the pick


@pytest.fixture(scope="module")
def priced_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("priced")
    # `bench run` in this process (its own start is not what these tests check): capsys is per test.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(["run", "--model", "resnet18", "--width", "32", "--height", "32", "--batch-size", "2",
                     "--steps", "2", "--min-seconds", "0", "--warmup-steps", "1", "--repeats", "2", "--mode", "infer",
                     "--device", "cpu", "--price-per-hour", "1.5", "--currency", "eur", "--out", str(out), "-q"])
    assert code == 0, err.getvalue()
    run_dir = next((out / "runs").iterdir())
    rows = json.loads((run_dir / "rows.json").read_text())
    for name, speed, price in (("fast-gpu", 10.0, 30.0), ("mid-gpu", 9.5, 6.0)):
        copy = []
        for row in rows:
            row = dict(row, run_id=f"{name}-run", host=name, device_name=name.upper(),
                       samples_per_s=row["samples_per_s"] * speed, throughput=row["throughput"] * speed,
                       price_per_hour=price)
            row["cost_per_million_samples"] = price / (row["samples_per_s"] * 3600) * 1e6
            row["cost_per_million"] = price / (row["throughput"] * 3600) * 1e6
            copy.append(row)
        (out / "runs" / name).mkdir()
        (out / "runs" / name / "rows.json").write_text(json.dumps(copy))
    rebuild_csv(out)
    return load_results([out])


def test_the_report_draws_the_frontier_and_names_the_pick(priced_results, tmp_path):
    html = build_report(priced_results.dirs, tmp_path / "report.html").read_text()
    section = html[html.index('id="Cost-frontier"'):html.index('id="Published-figures"')]
    assert "Cost frontier: throughput against cost per million items" in section  # the chart's alt text
    assert "images/s at" in section and "EUR per million images" in section  # with the prices' currency
    assert "price / device-hour, EUR" in section
    assert "the cheapest within 10% of the fastest is MID-GPU" in section
    assert "faster and cheaper" in html and "This section could not be drawn" not in section


def test_three_machines_give_a_frontier_and_a_pick(priced_results):
    points = cost_points(priced_results)
    assert len(points) == 3 and points["pareto"].sum() >= 2
    picks = picks_table(points)
    assert len(picks) == 1
    line = picks.iloc[0]
    # mid-gpu is 5 % slower than fast-gpu at a fifth of its price per hour: it is the pick.
    assert line["fastest"].startswith("FAST-GPU") and line["pick"].startswith("MID-GPU"), (line["fastest"], line["pick"])
    assert line["slower_pct"] == pytest.approx(5, abs=0.5) and line["cheaper_pct"] > 70


def test_no_price_no_points(priced_results):
    rows = priced_results.rows.assign(cost_per_million=np.nan)
    assert cost_points(type(priced_results)(rows=rows, dirs=priced_results.dirs)).empty


def test_a_currency_is_letters_and_belongs_to_a_price():
    from bench_core import BenchConfig, ConfigError
    assert BenchConfig(model="resnet18", price_per_hour=2.5, currency=" usd ").currency == "USD"
    with pytest.raises(ConfigError, match="^currency: USD is the currency of price_per_hour, which is not given$"):
        BenchConfig(model="resnet18", currency="USD")
    with pytest.raises(ConfigError, match="^currency: must be a currency code of letters, such as USD or EUR, got"):
        BenchConfig(model="resnet18", price_per_hour=2.5, currency="$$")
