"""The cost frontier: Pareto points and the cheapest configuration within 10 % of the fastest.

The rows are made by a real tiny `bench run` with a price, then copied as if measured on two other
machines at other speeds and prices (names, rates and costs edited): test input, not a mock.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench_core import results
from bench_core.cli import main
from bench_core.predict.prices import Price, gpu_price, report_choices
from bench_core.predict.specs import COMPARED_TODAY, data_rows, gpu_list, spec
from bench_core.results.store import rebuild_csv
from bench_core.summary.cost import (
    cheapest_near_fastest,
    cost_points,
    option_text,
    pareto_front,
    picks_table,
    predicted_points,
)
from bench_core.summary.load import load_results
from bench_core.summary.predicted import predicted_table
from bench_core.summary.report import build_report
from bench_core.sweep.plan import parse_sweep

from conftest import bench_here

ROOT = Path(__file__).resolve().parents[1]


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


def test_the_report_draws_the_frontier_and_names_the_pick(priced_results, gpu_priced, tmp_path):
    """The measured machines' frontier and pick; beside them, hollow, the GPUs the user asked to predict (the
    H200 among them), at the prices given, never the pick. The Predicted GPUs section predicts those GPUs."""
    html = build_report([*priced_results.dirs, gpu_priced], tmp_path / "report.html", predict_gpus=CHOSEN,
                        prices=GIVEN).read_text()
    section = html[html.index('id="Cost-frontier"'):html.index('id="Published-figures"')]
    assert "Cost frontier: throughput against cost per million items" in section  # the chart's alt text
    assert "images/s at" in section and "EUR per million images" in section  # with the prices' currency
    assert "price / device-hour, EUR" in section
    assert "the cheapest within 10% of the fastest is MID-GPU" in section
    assert "faster and cheaper" in html and "This section could not be drawn" not in section
    assert "Predicted (hollow diamonds, not measured): H100-SXM5-80GB at 2.5 EUR per GPU-hour (given)" in section
    assert "1x H200-SXM-141GB (predicted from 1x A100-SXM4-80GB)" in section
    predicted = html[html.index('id="Predicted-GPUs"'):html.index('id="Failures"')]
    assert "1x H200-SXM-141GB" in predicted and "1x L4" not in predicted and "1x B200" not in predicted


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


@pytest.fixture(scope="module")
def gpu_priced(priced_results, tmp_path_factory) -> Path:
    """The priced rows as an A100 would record them (3x the CPU's speed, 1.2 EUR an hour): a GPU run that
    `bench predict` carries to GPUs that were not measured."""
    out = tmp_path_factory.mktemp("a100")
    rows = []
    for row in results.iter_rows(priced_results.dirs[0]):
        if row.get("host") in ("fast-gpu", "mid-gpu"):
            continue
        row = dict(row, run_id="a100-run", host="a100-host", device_type="cuda", device_name="NVIDIA A100-SXM4-80GB",
                   precision_support="native", peak_tflops=19.5, samples_per_s=row["samples_per_s"] * 3,
                   throughput=row["throughput"] * 3, price_per_hour=1.2)
        row["cost_per_million"] = 1.2 / (row["throughput"] * 3600) * 1e6
        row["cost_per_million_samples"] = row["cost_per_million"]
        rows.append(row)
    results.write_run(out, "a100", rows)
    rebuild_csv(out)
    return out


CHOSEN = ["H100-SXM5-80GB", "H200-SXM-141GB"]
GIVEN = ["H100-SXM5-80GB=2.5:EUR", "H200-SXM-141GB=3.5:EUR"]


def test_a_predicted_gpu_is_priced_and_stands_beside_the_measured_ones_never_on_the_frontier(gpu_priced):
    """A GPU that was not measured gets a cost per million items from its price per GPU-hour (the user's, or
    the shipped on-demand one with its provider and date): price / (predicted items/s x 3600) x 1e6."""
    table, _ = predicted_table(load_results([gpu_priced]), CHOSEN, GIVEN)
    assert set(table["gpu"]) == {"1x H100-SXM5-80GB", "1x H200-SXM-141GB"}  # the user's set, the H200 in it
    points = predicted_points(table)
    assert len(points) == 2 and not points["pareto"].any() and not points["pick"].any()
    h100 = points[points["gpu"] == "1x H100-SXM5-80GB"].iloc[0]
    assert h100["machine"] == "1x H100-SXM5-80GB (predicted from 1x A100-SXM4-80GB)" and h100["currency"] == "EUR"
    assert h100["cost_per_million"] == pytest.approx(2.5 / (h100["throughput"] * 3600) * 1e6)
    assert h100["price_from"] == "2.5 EUR per GPU-hour (given)"
    shipped, _ = predicted_table(load_results([gpu_priced]), ["H100-SXM5-80GB"])
    (row,) = shipped.to_dict("records")
    price = gpu_price("H100-SXM5-80GB")
    assert row["price_per_hour"] == price.price_per_hour and row["price_from"] == price.text()
    assert row["price_from"].startswith(f"{price.price_per_hour:g} USD per GPU-hour (RunPod (Secure Cloud), 2026-")


def test_the_shipped_prices_are_sourced_dated_on_demand_prices_of_known_gpus():
    rows = data_rows("gpu_prices.csv")
    assert {"H100-SXM5-80GB", "H200-SXM-141GB", "A100-SXM4-80GB", "B200", "L4"} <= {r["gpu"] for r in rows}
    assert len({r["gpu"] for r in rows}) == len(rows)  # one provider per GPU
    for r in rows:
        spec(r["gpu"])  # a predictable GPU of gpu_peaks.csv
        assert float(r["price_per_hour"]) > 0 and r["currency"] == "USD" and r["provider"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", r["date"]) and "https://" in r["source"]
        assert gpu_price(r["gpu"].lower()) == Price(float(r["price_per_hour"]), r["currency"], r["provider"],
                                                    r["date"], r["source"])
    assert gpu_price("RTX-3090") is None  # no sourced price: none is made up


def test_bench_predict_takes_a_price_and_refuses_a_bad_one_in_one_line(gpu_priced, capsys):
    done = bench_here(capsys, "predict", "--from", str(gpu_priced), "--gpu", "H100-SXM5-80GB", "--gpu", "RTX-3090",
                      "--price", "H100-SXM5-80GB=2.99")
    assert done.returncode == 0 and "USD / M images" in done.stdout
    assert "H100-SXM5-80GB: 2.99 USD per GPU-hour (given)" in done.stdout
    assert "no sourced price for RTX-3090. Prices change: give yours with --price NAME=PRICE." in done.stdout
    unpriced = bench_here(capsys, "predict", "--from", str(gpu_priced), "--gpu", "RTX-3090")
    cost_line = next(line for line in unpriced.stdout.splitlines() if line.startswith("cost per million"))
    assert cost_line == ("cost per million: price x GPUs / (predicted items/s x 3600) x 1e6, in the workload's own "
                         "unit (tokens for a language model); no sourced price for RTX-3090. Prices change: give "
                         "yours with --price NAME=PRICE.")
    for bad, said in (("H100=2", "price: unknown GPU 'H100' (did you mean"), ("H100-SXM5-80GB=-1", "positive number"),
                      ("H100-SXM5-80GB", "must be NAME=PRICE")):
        refused = bench_here(capsys, "predict", "--from", str(gpu_priced), "--gpu", "B200", "--price", bad)
        assert refused.returncode == 2 and said in refused.stderr and len(refused.stderr.strip().splitlines()) == 1


def test_the_report_predicts_the_gpus_the_user_names_and_the_sweep_file_can_name_them(gpu_priced, capsys, tmp_path):
    bad = bench_here(capsys, "report", str(gpu_priced), "--predict-gpus", "H100-SXM5-80GB,H2OO",
                     "--out", str(tmp_path / "r.html"))
    assert bad.returncode == 2 and bad.stderr.startswith("bench report: error: predict_gpus: unknown GPU 'H2OO'")
    assert not (tmp_path / "r.html").exists()
    assert gpu_list("") == COMPARED_TODAY and {"H100-SXM5-80GB", "H200-SXM-141GB"} <= set(COMPARED_TODAY)
    sweep = {"grid": {"model": ["resnet18"]}, "settings": {"device": "cpu"}}
    plan = parse_sweep({**sweep, "predict_gpus": ["h200-sxm-141gb", "H100-SXM5-80GB"], "price": {"H100-SXM5-80GB": 2.99}})
    assert report_choices(plan.predict_gpus, plan.prices) == (["H200-SXM-141GB", "H100-SXM5-80GB"],
                                                               ["H100-SXM5-80GB=2.99:USD"])
    path = tmp_path / "priced.yaml"
    path.write_text("grid: {model: [resnet18]}\nsettings: {device: cpu}\nprice: {H100-SXM5-80GB: free}\n")
    refused = bench_here(capsys, "sweep", str(path), "--dry-run", "--out", str(tmp_path / "out"))
    assert refused.returncode == 2 and "price: H100-SXM5-80GB's price must be a positive number" in refused.stderr
    assert not (tmp_path / "out").exists()


def test_a_measured_gpu_row_without_a_price_is_costed_at_its_gpus_on_demand_price():
    """The kept H200 runs carry no price_per_hour: their cost frontier had no point. Each GPU row is now priced at
    the H200's on-demand price (gpu_prices.csv, its provider and date said), or the one the report is given."""
    res = load_results(sorted((ROOT / "gpu" / "runs").glob("h200-2026-11-27*")))
    points = cost_points(res)
    shipped = gpu_price("H200-SXM-141GB")
    assert len(points) and (points["price_per_hour"] == shipped.price_per_hour).all()
    assert points["price_from"].str.contains(shipped.provider, regex=False).all()
    served = points[(points["model"] == "llama-1b") & (points["mode"] == "serve") & (points["load"] == "8 users")]
    assert served["cost_per_million"].item() == pytest.approx(
        shipped.price_per_hour / (served["throughput"].item() * 3600) * 1e6)
    given = cost_points(res, ["H200-SXM-141GB=3.0"])
    assert (given["price_per_hour"] == 3.0).all() and given["price_from"].str.contains("given").all()
    assert option_text(points[points["parallelism"] == "fsdp"].iloc[0]).endswith(", fsdp")
