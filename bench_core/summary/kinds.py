"""The report's "this or that": two kinds of machine (GPU or CPU models, machine_kind) compared on every
workload both ran, each kind's instances pooled; how far the instances of one kind differ; the cost per
million items on each at a price per hour; and the published figures of both kinds beside ours.

A kind's instances are pooled as its runs (results.comparison.compare_rows): with two or more runs a
side each run is one sample, so the interval covers how runs and instances differ; with one run a
side the repeats are the samples and a stated run-to-run shift is added. How a row's interval was made
is said in its own words beside it. Plain pandas for the tables; show_kinds draws the section.
"""
from __future__ import annotations

import pandas as pd

from bench_core.predict.prices import parse_prices, per_million, prices_with
from bench_core.predict.specs import spec_for_device
from bench_core.results.comparison import ONE_RUN, RUN_SHIFT, SAME_RUNS
from bench_core.summary.effects import compare_variants, verdict_summary
from bench_core.summary.html import absent, esc, note, paragraph, section, show_html, show_table
from bench_core.summary.load import WORKLOAD, Results
from bench_core.summary.reference import MEASURED_SOURCE, definition_differences, gpu_matches, load_reference
from bench_core.summary.speed import show_per_unit
from bench_core.summary.tables import flag_disturbed, marked
from bench_core.summary.text import is_number, is_present, num_text, short_list



def kinds_in(res: Results) -> dict[str, list[str]]:
    """Each kind of machine in the results, in the order of their result directories, with its instances."""
    ok = res.ok
    return {kind: list(dict.fromkeys(ok.loc[ok["kind"] == kind, "machine"])) for kind in dict.fromkeys(ok["kind"])}


def instance_name(machine: str, kind: str) -> str:
    """A machine without its kind: 'vm · GPU-5faf33eb' of 'NVIDIA H200 · vm · GPU-5faf33eb'."""
    return machine.removeprefix(f"{kind} · ")


def instance_spread(res: Results) -> pd.DataFrame:
    """Per kind with two or more instances, every configuration two or more of them ran: each instance's
    median side by side and the fastest over the slowest, how far machines of one kind differ."""
    ok = res.ok
    lines = []
    for kind, machines in kinds_in(res).items():
        if len(machines) < 2:
            continue
        mine = ok[ok["kind"] == kind]
        for _, group in mine.groupby(list(WORKLOAD), dropna=False, sort=False):
            medians = group.groupby("machine", sort=False)["throughput"].median()
            if len(medians) < 2:
                continue
            hit = flag_disturbed(group).groupby("machine", sort=False)["_disturbed"].any()  # marked where shown
            lines.append({"kind": kind, "config": group["config"].iloc[0], "instances": len(medians),
                          "medians": "; ".join(f"{instance_name(m, kind)}: {marked(num_text(v), hit[m])}"
                                               for m, v in medians.items()),
                          "spread": medians.max() / medians.min(), "throughput_unit": group["throughput_unit"].iloc[0],
                          "repeats": int(group["throughput"].count())})
    return pd.DataFrame(lines)


def interval_words(unit: str, device_types) -> str:
    """How a comparison's interval was made (compare_rows' unit), in words."""
    if unit.startswith("runs"):
        return (f"{unit.removeprefix('runs, ')} runs, instances pooled: each run one sample, so the interval covers "
                "how runs and instances differ")
    if unit == ONE_RUN:
        shift = max((RUN_SHIFT.get(str(t), max(RUN_SHIFT.values())) for t in device_types if is_present(t)),
                    default=max(RUN_SHIFT.values()))
        return (f"repeats as samples, and a stated run-to-run shift of {shift:.0%} a run, which a side with one run "
                "cannot measure")
    return "repeats as samples" if unit == SAME_RUNS else unit


def kind_prices(res: Results, prices=None) -> dict[str, dict]:
    """kind -> {price_per_hour, currency, source}: the median price_per_hour its rows carry (what the user
    gave), else the price of its GPU: `prices` as `bench report --price` takes them (NAME=PRICE[:CURRENCY]),
    else the sourced on-demand price of bench_core/data/gpu_prices.csv (provider and date said)."""
    priced = prices_with(parse_prices(prices))
    out = {}
    for kind in kinds_in(res):
        rows = res.ok[(res.ok["kind"] == kind) & res.ok["price_per_hour"].notna()]
        if len(rows):
            out[kind] = {"price_per_hour": float(rows["price_per_hour"].median()),
                         "currency": next((str(c) for c in rows["currency"] if is_present(c)), ""),
                         "source": "price_per_hour in its rows"}
            continue
        spec = spec_for_device(kind)
        price = priced.get(spec.gpu) if spec else None
        if price is not None:
            where = ", ".join(p for p in (price.provider, price.date, price.source) if p)
            out[kind] = {"price_per_hour": price.price_per_hour, "currency": price.currency, "source": where}
    return out


def published_pairs(model, mode, precision, input_shape, devices, kinds: tuple[str, str]) -> str:
    """Published figures of both kinds for a workload, from one source's one run, as 'lambdal (newer run):
    3,079 / 2,790 = 1.10x'; '' where no source measured both."""
    ref = load_reference()
    ref = ref[(ref["source"] != MEASURED_SOURCE) & (ref["model"] == model) & (ref["mode"] == mode)
              & (ref["input_shape"] == input_shape) & (ref["gpus"] == devices)]
    ref = ref[ref["match_precisions"].map(lambda m: precision in str(m).split()).astype(bool)]
    found = []
    for group_name, group in ref.groupby("run_group", sort=False):
        values = [group[group["gpu_match"].map(lambda m, kind=kind: gpu_matches(kind, m)).astype(bool)]["value"]
                  for kind in kinds]
        if all(len(v) for v in values):
            base, other = float(values[0].iloc[0]), float(values[1].iloc[0])
            differs = definition_differences(group.iloc[0].to_dict(), {"precision": precision})
            found.append(f"{group['source'].iloc[0]} ({group_name}): {num_text(other)} / {num_text(base)} = "
                         f"{other / base:.2f}x" + (f" (defined differently: {differs})" if differs else ""))
    return "; ".join(found)


def kind_comparison(res: Results, baseline: str | None = None, prices: dict | None = None) -> pd.DataFrame:
    """Every other kind against the baseline kind (the first result directory's, or the one `baseline`
    names), per workload both ran: medians, ratio with its interval and verdict (its text saying where
    host-bound rows make it a comparison of hosts), how the interval was made, the cost per million items on
    each, and the published figures of both kinds."""
    ok = res.ok
    kinds = list(kinds_in(res))
    if len(kinds) < 2:
        return pd.DataFrame()
    base = next((k for k in kinds if baseline and baseline.lower() in k.lower()), kinds[0])
    prices = kind_prices(res) if prices is None else prices
    table = compare_variants(ok, "kind", base, keys=list(WORKLOAD), value="throughput")

    def key(row: dict) -> str:  # (an empty value one way, whether None or NaN)
        return "|".join(str(row[k]) if is_present(row[k]) else "" for k in WORKLOAD)
    workloads = pd.Series([key(r) for r in ok[list(WORKLOAD)].to_dict("records")], index=ok.index)
    lines = []
    for row in table.to_dict("records"):
        pair = ok[(workloads == key(row)) & ok["kind"].isin([base, row["kind"]])]
        unit = str(pair["throughput_unit"].iloc[0]) if len(pair) else ""
        cost = {side: cost_per_million(prices.get(kind), median, row["world_size"]) for side, kind, median in
                (("base", base, row["baseline_median"]), ("other", row["kind"], row["median"]))}
        lines.append({**row, "baseline_kind": base, "config": pair["config"].iloc[0] if len(pair) else "",
                      "throughput_unit": unit, "how": interval_words(row["unit"], pair["device_type"]),
                      "base_cost": cost["base"], "other_cost": cost["other"],
                      "instances": f"{pair.loc[pair['kind'] == base, 'machine'].nunique()} and "
                                   f"{pair.loc[pair['kind'] == row['kind'], 'machine'].nunique()}",
                      "published": published_pairs(row["model"], row["mode"], row["precision"], row["input_shape"],
                                                   row["world_size"], (base, row["kind"]))})
    return pd.DataFrame(lines)


def cost_per_million(price: dict | None, throughput, devices) -> float:
    """A kind's cost of a million of the unit's items at `throughput` (predict.prices' formula); NaN without a price."""
    found = per_million(price["price_per_hour"], devices, throughput) if price and is_number(throughput) else None
    return float("nan") if found is None else found


@section
def show_kinds(res: Results, baseline: str | None = None, prices=None) -> None:
    kinds = kinds_in(res)
    spread = instance_spread(res)
    prices = kind_prices(res, prices)  # NAME=PRICE texts in, kind -> price out
    table = kind_comparison(res, baseline, prices)
    if not len(spread) and table.empty:
        absent(f"One kind of machine here ({short_list(kinds) or 'none'}), in one instance: a result directory of "
               "another kind (an H100's beside an H200's) answers 'this or that' here, and a second machine of the "
               "same kind says how far two of one kind differ.")
        return
    for kind, machines in kinds.items():
        if len(machines) > 1:
            names = ", ".join(instance_name(m, kind) for m in machines)
            paragraph(f"{kind}: {len(machines)} machines of this kind ({names}) are pooled as one kind in the "
                      "comparison below, never as repeats of one machine; where two or more of them ran a "
                      "configuration, their medians side by side:")
    if len(spread):
        show_table(spread.assign(spread_text=[f"{v:.2f}x" for v in spread["spread"]]),
                   {"kind": "kind", "config": "configuration", "medians": "median of each machine",
                    "spread_text": "fastest / slowest", "throughput_unit": "unit", "repeats": "repeats"})
        note("Machines of one kind differ by what this table shows, beside the repeats of one machine: a comparison "
             "of two kinds from one machine each is read against it.")
    if table.empty:
        if len(kinds) > 1:
            note("No workload ran on two kinds of machine with everything else the same.")
        else:
            note("One kind of machine here: a result directory of another kind answers 'this or that'.")
        return
    base = table["baseline_kind"].iloc[0]
    items = "".join(f"<li><strong>{esc(k)}</strong> against {esc(base)}: {esc(verdict_summary(part, 'workload'))}"
                    "</li>" for k, part in table.groupby("kind", sort=False))
    show_html(f"<p>Each kind's throughput over {esc(base)}'s on every workload both ran (above 1: faster), its "
              "machines pooled, with a 95 % interval and verdict (and, where a side was host-bound, that it "
              "compares the hosts), how each interval was made and what a million items cost on each.</p>"
              f"<ul>{items}</ul>")
    currency = {str(p.get("currency") or "") for p in prices.values()}
    money = ", ".join(sorted(currency - {""})) or "no price"
    show_per_unit(table.assign(text_cost=[_cost_text(b, o) for b, o in zip(table["base_cost"], table["other_cost"])]), {
        "config": "workload", "kind": "kind", "baseline_median": f"{base}, {{unit}} (median)",
        "median": "this kind, {unit} (median)", "text": f"× {base} [95% CI], verdict",
        "instances": "machines (each side)", "how": "how the interval is made",
        "text_cost": f"cost per million items, {base} / this kind ({money})",
        "published": "published: this kind / base kind"})
    if prices:
        paragraph("Prices per device-hour: " + "; ".join(
            f"{k}: {num_text(p['price_per_hour'])} {p['currency']} ({p['source']})" for k, p in prices.items()) + ".")
    else:
        note("No cost: no price per device-hour in the rows (bench run --price-per-hour, or price_per_hour in the "
             "sweep file) and no default price for these kinds.")


def _cost_text(base, other) -> str:
    if not (is_number(base) or is_number(other)):
        return ""
    return f"{num_text(base) if is_number(base) else '?'} / {num_text(other) if is_number(other) else '?'}"
