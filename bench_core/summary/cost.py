"""The cost frontier: which machine and precision to rent for a workload.

For each workload (model, mode, input) every configuration that ran it (machine, precision,
batch, devices, compile, channels_last) is one point: median throughput against median cost per
million of the workload's items (images, volumes, tokens: its throughput unit). A point is on the Pareto frontier when no other point is at least as fast and at
least as cheap, and better in one. The pick is the cheapest configuration within
`NEAR_FASTEST` of the fastest. Prices come from the rows (`price_per_hour` per device-hour); a GPU row without
one is priced at its GPU's on-demand price (`bench report --price`, else bench_core/data/gpu_prices.csv, with
its provider and date), said where the point is shown.

GPUs that were not measured are drawn beside them, hollow and marked predicted (the report's Predicted
GPUs section: summary/predicted.py), at an on-demand price per GPU-hour, with their interval; they are
never on the frontier nor the pick, which only measured points make.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from bench_core.predict.prices import cost_per_million, parse_prices, prices_with
from bench_core.predict.published import COVERAGE
from bench_core.predict.specs import spec_for_device
from bench_core.summary.charts import FIG_WIDTH_IN, MARK_COLOUR, log_axis
from bench_core.summary.html import (
    absent,
    note,
    paragraph,
    seaborn,
    section,
    show_figure,
    show_table,
)
from bench_core.summary.load import WORKLOAD, Results, unit_items
from bench_core.summary.predicted import predicted_table
from bench_core.summary.tables import DISTURBED_MARK, DISTURBED_WHY, disturbed_marks, flag_disturbed
from bench_core.summary.text import currency_text, num_text, with_currency

NEAR_FASTEST = 0.10   # "within 10 % of the fastest"
GROUP = ["model", "mode", "input_shape"]          # what a buyer wants run
OPTION = ["machine", *[k for k in WORKLOAD if k not in GROUP]]   # what they can choose


def priced(ok: pd.DataFrame, prices=None) -> pd.DataFrame:
    """The ok rows, a GPU row without a price given its GPU's on-demand one (`prices` as `bench report --price`
    takes them, else the shipped table) and the cost per million items at it; `price_from` says where a price
    came from."""
    table = prices_with(parse_prices(prices))
    ok = ok.assign(price_from=["price_per_hour in its rows" if pd.notna(p) else None for p in ok["price_per_hour"]])
    for index, row in ok.iterrows():
        if pd.notna(row["price_per_hour"]) or row.get("device_type") != "cuda" or not row["throughput"] > 0:
            continue
        spec = spec_for_device(str(row.get("device_name") or ""))
        price = table.get(spec.gpu) if spec else None
        if price is not None:
            devices = row["world_size"] if pd.notna(row.get("world_size")) else 1
            ok.loc[index, ["price_per_hour", "currency", "price_from"]] = [price.price_per_hour, price.currency,
                                                                           price.text()]
            ok.loc[index, "cost_per_million"] = cost_per_million(price, devices, row["throughput"])
    return ok


def cost_points(res: Results, prices=None) -> pd.DataFrame:
    """One point per configuration with a price (the rows', else its GPU's on-demand price: priced): median
    throughput (IQR) in its unit and median cost per million items."""
    ok = priced(res.ok, prices).dropna(subset=["cost_per_million", "throughput"])
    ok = ok[(ok["cost_per_million"] > 0) & (ok["throughput"] > 0)]
    if ok.empty:
        return pd.DataFrame()
    points = flag_disturbed(ok).groupby(GROUP + OPTION, dropna=False, sort=False).agg(
        repeats=("throughput", "count"), disturbed=("_disturbed", "sum"), throughput=("throughput", "median"),
        q25=("throughput", lambda s: s.quantile(0.25)), q75=("throughput", lambda s: s.quantile(0.75)),
        cost_per_million=("cost_per_million", "median"), throughput_unit=("throughput_unit", "first"),
        price_per_hour=("price_per_hour", "median"), currency=("currency", "first"),
        price_from=("price_from", "first"), load=("load", "first")).reset_index()
    points["pareto"] = False
    points["pick"] = False
    points["predicted"] = False
    for _, group in points.groupby(GROUP, dropna=False, sort=False):
        points.loc[group.index, "pareto"] = pareto_front(group["throughput"].to_numpy(),
                                                         group["cost_per_million"].to_numpy())
        points.loc[cheapest_near_fastest(group), "pick"] = True
    return points


def predicted_points(table: pd.DataFrame) -> pd.DataFrame:
    """The predicted GPUs with a price (predicted_table's rows) as points: throughput in the workload's own unit,
    its interval (q25/q75 hold the interval's ends here), and the cost per million items at its price. Bounds
    from a CPU run ("at most") are left out: their cost is a floor, not a point."""
    if table.empty:
        return pd.DataFrame()
    rows = table[(table["kind"] == "prediction") & table["cost_per_million"].notna()]
    if rows.empty:
        return pd.DataFrame()
    per = rows["predicted_throughput"] / rows["predicted"]
    return pd.DataFrame({
        "model": rows["model"], "mode": rows["mode"], "input_shape": rows["input_shape"],
        "machine": [f"{g} (predicted from {m})" for g, m in zip(rows["gpu"], rows["measured_on"])],
        "gpu": rows["gpu"], "precision": rows["precision"], "batch_size": rows["batch_size"],
        "world_size": rows["devices"], "throughput": rows["predicted_throughput"],
        "q25": rows["low"] * per, "q75": rows["high"] * per, "throughput_unit": rows["throughput_unit"],
        "price_per_hour": rows["price_per_hour"], "currency": rows["currency"],
        "cost_per_million": rows["cost_per_million"], "price_from": rows["price_from"],
        "pareto": False, "pick": False, "predicted": True}).reset_index(drop=True)


def pareto_front(speed: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """True where no other point is as fast and as cheap with one of the two strictly better."""
    speed, cost = np.asarray(speed, float), np.asarray(cost, float)
    dominated = [bool(np.any((speed >= s) & (cost <= c) & ((speed > s) | (cost < c)))) for s, c in zip(speed, cost)]
    return ~np.array(dominated, dtype=bool)


def cheapest_near_fastest(group: pd.DataFrame, near: float = NEAR_FASTEST):
    """The index of the cheapest point whose throughput is within `near` of the fastest (ties: the faster)."""
    fastest = group["throughput"].max()
    close = group[group["throughput"] >= (1 - near) * fastest]
    return close.sort_values(["cost_per_million", "throughput"], ascending=[True, False]).index[0]


def picks_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per workload: the fastest configuration and the cheapest within NEAR_FASTEST of it."""
    lines = []
    for _, group in points.groupby(GROUP, dropna=False, sort=False):
        fastest = group.loc[group["throughput"].idxmax()]
        pick = group[group["pick"]].iloc[0]
        lines.append({**{k: pick[k] for k in GROUP}, "throughput_unit": pick["throughput_unit"], "options": len(group),
                      "on_frontier": int(group["pareto"].sum()),
                      "fastest": option_text(fastest), "fastest_throughput": fastest["throughput"],
                      "fastest_cost": fastest["cost_per_million"],
                      "pick": option_text(pick), "pick_throughput": pick["throughput"],
                      "pick_cost": pick["cost_per_million"],
                      "slower_pct": 100 * (1 - pick["throughput"] / fastest["throughput"]),
                      "cheaper_pct": 100 * (1 - pick["cost_per_million"] / fastest["cost_per_million"])})
    return pd.DataFrame(lines)


def option_text(point: pd.Series) -> str:
    """A configuration in a few words: machine, precision and whatever else was chosen."""
    parts = [str(point["machine"]), str(point["precision"])]
    if pd.notna(point.get("batch_size")):
        parts.append(f"batch {int(point['batch_size'])}")
    if pd.notna(point.get("load")):  # a serving point: its load, not a batch
        parts.append(str(point["load"]))
    if str(point.get("parallelism")) not in ("ddp", "nan", "None", ""):  # (FSDP2 beside plain training)
        parts.append(str(point["parallelism"]))
    if pd.notna(point.get("world_size")) and point["world_size"] > 1:
        parts.append(f"x{int(point['world_size'])} devices")
    if str(point.get("compile")) not in ("off", "nan", "None", ""):
        parts.append(f"compile {point['compile']}")
    if point.get("channels_last") is True:
        parts.append("channels_last")
    return ", ".join(parts)


@section
def show_cost_frontier(res: Results, predict_gpus=None, prices=None) -> None:
    import matplotlib.pyplot as plt
    sns = seaborn()
    points = cost_points(res, prices)
    predicted = predicted_points(predicted_table(res, predict_gpus, prices)[0])
    if points.empty and predicted.empty:
        absent("No cost frontier: no price per device-hour was given (`price_per_hour` in the sweep file, per "
             "device, or `bench run --price-per-hour`).")
        return
    if points.empty:
        note("No measured configuration has a price per device-hour (`price_per_hour`), so there is no frontier; "
             "the predicted GPUs' costs at on-demand prices are in the table below.")
        show_cost_table(predicted)
        return
    # Predicted points join a panel only in the measured points' currency: two currencies never share an axis.
    same = predicted[predicted["currency"].isin(set(points["currency"].dropna()) or {None})] \
        if not predicted.empty else predicted
    if len(same) < len(predicted):
        note(f"Predicted GPUs priced in {currency_text(predicted)} are not drawn beside measured prices in "
             f"{currency_text(points)}: give their prices in that currency (`--price NAME=PRICE:CUR`); their costs "
             "are in the table below.")
    # A panel of one option compares nothing: its figures are in the table below.
    groups = [(key, group, same_group(same, key)) for key, group in points.groupby(GROUP, dropna=False, sort=False)
              if len(group) + len(same_group(same, key)) >= 2]
    if not groups:
        note("Every workload here ran in one configuration on one machine: its cost is in the table below. Two or "
             "more (machines, precisions, batch sizes) of one workload draw its cost frontier.")
        show_cost_table(pd.concat([points, predicted], ignore_index=True))
        return
    columns = min(3, len(groups))
    rows = int(np.ceil(len(groups) / columns))
    # The whole figure within FIG_WIDTH_IN: a wider one is shrunk on the page, its text with it.
    width, height = (6.4, 4.4) if columns == 1 else (FIG_WIDTH_IN / columns, 3.6)
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)
    hue_order = sorted(points["machine"].unique())
    for ax, (key, group, guess) in zip(axes.flat, groups):
        sns.scatterplot(data=group, x="cost_per_million", y="throughput", hue="machine",
                        style="precision", hue_order=hue_order, s=60, ax=ax, legend=ax is axes.flat[0])
        ax.errorbar(group["cost_per_million"], group["throughput"],
                    yerr=[group["throughput"] - group["q25"], group["q75"] - group["throughput"]],
                    fmt="none", ecolor="#888", elinewidth=1, capsize=2, zorder=0)
        front = group[group["pareto"]].sort_values("cost_per_million")
        ax.plot(front["cost_per_million"], front["throughput"], color="black", linewidth=1,
                linestyle="--", zorder=0)
        pick = group[group["pick"]].iloc[0]
        ax.scatter([pick["cost_per_million"]], [pick["throughput"]], s=220, facecolors="none",
                   edgecolors="crimson", linewidths=1.6, zorder=3)
        for point in group[group["disturbed"] > 0].to_dict("records"):  # a figure resting on disturbed repeats
            ax.annotate(DISTURBED_MARK, (point["cost_per_million"], point["throughput"]), xytext=(6, 4),
                        textcoords="offset points", color=MARK_COLOUR, fontsize=11, fontweight="bold")
        draw_predicted(ax, guess)
        both = pd.concat([group, guess], ignore_index=True)
        unit = group["throughput_unit"].iloc[0]
        ax.set(title=" · ".join(str(k) for k in key),
               xlabel=with_currency(f"cost per million {unit_items(unit)}", both) + " (log)",
               ylabel=f"{unit} (log)")
        log_axis(ax.xaxis, both["cost_per_million"], min_span=3)
        log_axis(ax.yaxis, pd.concat([both["q25"], both["q75"], both["throughput"]]).dropna(), min_span=3)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    legend = axes.flat[0].get_legend()
    if legend:  # one legend for the figure, below every panel (under the first it ran into the second row)
        handles, labels = axes.flat[0].get_legend_handles_labels()
        legend.remove()
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0), ncol=4, fontsize=9, frameon=False)
    fig.suptitle("Throughput against cost. Dashed line: the Pareto frontier; red ring: the cheapest\n"
                 f"within {NEAR_FASTEST:.0%} of the fastest; bars: interquartile range of the repeats; hollow\n"
                 "diamonds: GPUs not measured, predicted, with their interval", y=1.08)
    fig.tight_layout()
    show_figure(fig, "Cost frontier: throughput against cost per million items (images, tokens), per workload, with "
                     "predicted GPUs hollow beside the measured ones")
    picks = picks_table(points)
    for line in picks.to_dict("records"):
        paragraph(f"{line['model']} {line['mode']} {line['input_shape']}: the cheapest within "
                  f"{NEAR_FASTEST:.0%} of the fastest is {line['pick']} ({num_text(line['pick_throughput'])} "
                  f"{line['throughput_unit']} at {num_text(line['pick_cost'])} {currency_text(points)} per million "
                  f"{unit_items(line['throughput_unit'])}"
                  + ("; it is the fastest too)." if line["pick"] == line["fastest"] else
                     f", {line['slower_pct']:.0f} % slower and {line['cheaper_pct']:.0f} % cheaper than "
                     f"{line['fastest']})."))
    if not predicted.empty:
        paragraph("Predicted (hollow diamonds, not measured): "
                  + "; ".join(dict.fromkeys(f"{g.split('x ', 1)[-1]} at {t}" for g, t in
                                            zip(predicted["gpu"], predicted["price_from"])))
                  + ". A prediction is never on the frontier nor the pick; its bar, where its kind has one, is the "
                    f"interval that holds {COVERAGE * 100:.0f} % of the published pairs of its kind (Predicted GPUs, "
                    "below).")
    show_cost_table(pd.concat([points, predicted], ignore_index=True))


def same_group(points: pd.DataFrame, key) -> pd.DataFrame:
    """The rows of `points` of one workload (GROUP's values `key`)."""
    if points.empty:
        return points
    mask = np.ones(len(points), dtype=bool)
    for column, value in zip(GROUP, key if isinstance(key, tuple) else (key,)):
        mask &= (points[column] == value).to_numpy()
    return points[mask]


def draw_predicted(ax, guess: pd.DataFrame) -> None:
    """Predicted GPUs on a panel: hollow black diamonds (no machine's colour), the interval as a bar, each
    named (its precision too where the panel's predictions differ in it), labels above and below in turn."""
    if guess.empty:
        return
    ax.scatter(guess["cost_per_million"], guess["throughput"], marker="D", s=55, facecolors="none",
               edgecolors="black", linewidths=1.3, zorder=3)
    banded = guess[guess["q25"].notna()]
    ax.errorbar(banded["cost_per_million"], banded["throughput"],
                yerr=[banded["throughput"] - banded["q25"], banded["q75"] - banded["throughput"]],
                fmt="none", ecolor="black", elinewidth=0.8, capsize=2, zorder=2)
    several = guess["precision"].nunique() > 1
    for i, (x, y, name, precision) in enumerate(zip(guess["cost_per_million"], guess["throughput"], guess["gpu"],
                                                    guess["precision"])):
        label = name.split("x ", 1)[-1] + (f" {precision}" if several else "")
        ax.annotate(label, (x, y), xytext=(5, 5 if i % 2 == 0 else -11), textcoords="offset points", fontsize=7)


def show_cost_table(points: pd.DataFrame) -> None:
    points = points.assign(measured=["predicted" if p is True else "measured" for p in points["predicted"]])
    none = pd.Series(0, index=points.index)  # a predicted point has no repeats
    flagged = points.get("disturbed", none).fillna(0)
    points = points.assign(disturbed=flagged, repeats=points.get("repeats", none).fillna(0))
    points = points.assign(disturbed_text=disturbed_marks(points))
    show_table(points, {"model": "model", "mode": "mode", "machine": "machine", "measured": "measured or predicted",
                        "precision": "precision", "batch_size": "batch / device", "load": "load",
                        "world_size": "devices", "throughput": "throughput",
                        "throughput_unit": "unit", "price_per_hour": with_currency("price / device-hour", points),
                        "price_from": "price from",
                        "cost_per_million": with_currency("cost / million items (of the unit)", points),
                        "pareto": "on the frontier", "pick": "pick",
                        **({"disturbed_text": "disturbed repeats"} if (flagged > 0).any() else {})})
    if (flagged > 0).any():
        note(f"{DISTURBED_MARK} n of m: n of the point's m repeats were flagged as disturbed ({DISTURBED_WHY}): its "
             "median includes them; re-measure on a quiet machine.")
