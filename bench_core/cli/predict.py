"""`bench predict`: a GPU that was not measured, predicted from one that was (or from a CPU), with
the ceiling that binds and the error the model shows on published pairs (docs/prediction.md).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench_core.cli.common import add_price_argument, text_table
from bench_core.cli.inputs import refuse_same_folder
from bench_core.errors import EXIT_OK, ConfigError
from bench_core.predict.bands import band_text, bands
from bench_core.predict.measured import predict_dir
from bench_core.predict.model import FLOOR_SOURCE, TERMS
from bench_core.predict.prices import parse_prices, prices_with
from bench_core.predict.own import machines, scored
from bench_core.predict.published import (ABLATION_GROUPS, COVERAGE, QUANTILES, ablations, held_out_by_gpu,
                                          predictions)
from bench_core.predict.specs import predictable_names, spec
from bench_core.predict.tables import all_errors, fmt_pct, groups_help, interval_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = f"""How, the whole step: per sample, t = max(F / P, Bf / W) + Bo / W, with F the FLOPs and Bf, Bo
the bytes the FLOP ops and all other ops move (counted in the measured run, nothing fused), P the
GPU's peak for the precision and W its memory bandwidth as microbenchmarks reach them (bench_core/
data/gpu_achieved.csv beside the datasheets of gpu_peaks.csv, each figure with its source). The
part of the measured step that t explains is scaled by the two GPUs' t; the rest (waves, tails,
latency) by their SM issue rates (SMs x clock). N GPUs add a ring all-reduce of the gradients; a
small step (the host's time) is carried over as it was measured.
How, per op: a GPU row whose profile kept its ops' table (op_profile) is predicted op by op: each
op's measured time scaled by its own roofline on the target over the source, the host's gaps
carried unchanged ('path' says which; --whole-step forces the first). 'binds' says what dominates.
Each prediction carries the interval that holds {COVERAGE * 100:.0f} % of the published pairs of its group
(the {QUANTILES[0] * 100:.0f}th to {QUANTILES[1] * 100:.0f}th percentile of measured / predicted; `bench predict --error-table`), and,
where the two GPUs were published together, that pair and the model's error on it. The groups, by
the same rule for our rows and the published pairs (docs/prediction.md states the same):
{groups_help()}
From a CPU run the figure is the GPU's roofline bound ("at most"): a CPU's efficiency against its
own peak says nothing of a GPU's, and the bound uses the run's counts, not its timing. A source that
ran above its own roofline (efficiency over 100 %: its counts hold more than the GPU did) is carried
over as measured, said so, with no interval. A row in a precision its device only emulates is not
predicted from; a prediction from a disturbed GPU row says "re-measure".
GPUs that can be predicted: {', '.join(predictable_names())}.
examples:
  bench run --model resnet18 --width 32 --height 32 --steps 2 --out outputs/cpu
  bench predict --from outputs/cpu --gpu H100-SXM5-80GB --gpu A100-SXM4-80GB
  bench predict --from outputs/a100 --gpu B200 --devices 8
  bench predict --from gpu/runs/h200-2026-11-27 --gpu H100-SXM5-80GB --price H100-SXM5-80GB=2.99
  bench predict --from gpu/runs/h200-2026-11-27 --against gpu/runs/h100-DATE   # scored against a measured GPU
  bench predict --error-table          # the model against published pairs, no results needed
  bench predict --pairs                # every published pair, predicted and actual
exit status: {EXIT_OK} ok; 2 bad input (unknown GPU, a bad price, a directory with no ok rows)."""
    p.add_argument("--from", dest="from_dir", metavar="DIR", help="a result directory (DIR/runs/*/rows.json) "
                   "measured on any device")
    p.add_argument("--gpu", action="append", default=[], metavar="NAME",
                   help="the GPU to predict (repeatable); a short name from gpu_peaks.csv, e.g. H100-SXM5-80GB")
    p.add_argument("--devices", type=int, default=1, metavar="N", help="GPUs of the prediction, data parallel "
                   "(default 1)")
    add_price_argument(p)
    p.add_argument("--against", metavar="DIR", help="a result directory measured on another GPU: each configuration "
                   "it shares with --from is predicted on its GPU and scored against what it measured (the error, and "
                   "whether it fell inside the interval); --gpu is not needed")
    p.add_argument("--whole-step", action="store_true", help="predict every row by the whole-step model, also a GPU row "
                   "whose profile carries its ops' table (by default such a row is predicted op by op)")
    p.add_argument("--error-table", action="store_true", help="print the model's error on every published pair, "
                   "per workload and pair kind, and what each term is worth (from the shipped data alone)")
    p.add_argument("--pairs", action="store_true", help="print every published pair: measured, predicted, error")
    p.add_argument("--json", action="store_true", help="print the rows as JSON (for scripts)")


def main(args: argparse.Namespace) -> int:
    if args.error_table or args.pairs:
        rows = predictions() if args.pairs else all_errors()
        if args.json:
            print(json.dumps({"pairs": rows} if args.pairs else {"errors": rows, "terms": ablations()}, indent=1))
            return EXIT_OK
        if args.pairs:
            print(text_table([{"workload": r["workload"], "precision": r["precision"], "from": r["from"],
                               "to": r["to"], "actual": f"{r['actual']:.0f}", "predicted": f"{r['predicted']:.0f}",
                               "error": f"{r['error']:+.0%}", "binds": r["binds"]} for r in rows], prose=("binds",)))
            return EXIT_OK
        print("Held-out error on published pairs (each member predicted from the other; nothing fitted):")
        print(text_table([{"group": r["group"], "pairs": r["pairs"], "median |error|": fmt_pct(r["median_abs_error"]),
                           f"{COVERAGE * 100:.0f} % interval": interval_of(r),
                           "worst factor": f"{r['worst_factor']:.2f}x", "within 15%": fmt_pct(r["within_15pct"]),
                           "worst pair": r["worst_pair"]} for r in rows], prose=("worst pair",)))
        print(f"{COVERAGE * 100:.0f} % interval: measured / predicted from its {QUANTILES[0] * 100:.0f}th to its "
              f"{QUANTILES[1] * 100:.0f}th percentile, the range that holds {COVERAGE * 100:.0f} % of the pairs")
        print("\nThe interval each group of predictions carries (bench predict --from DIR):")
        print(text_table([{"group": group, "pairs": band.pairs if band else 0,
                           "interval": band_text(group, band)} for group, band in bands().items()],
                         prose=("interval",)))
        print(f"\nWhat each term is worth (terms: {', '.join(TERMS)}):")
        print(text_table([{"model": r["model"], "median |error|": fmt_pct(r["median_abs_error"]),
                           "worst |error|": fmt_pct(r["worst_abs_error"]), "within 15%": fmt_pct(r["within_15pct"]),
                           **{f"median, {g}": fmt_pct(r[f"median_{g}"]) for g in ABLATION_GROUPS}}
                          for r in ablations()]))
        print("\nEach GPU's own microbenchmark figures held out (it takes the median fraction of the others', as a GPU "
              "never measured does), on its GPU-to-GPU pairs:")
        print(text_table([{"GPU": r["gpu"], "pairs": r["pairs"], "median |error|": fmt_pct(r["median_abs_error"]),
                           "held out": fmt_pct(r["held_out_median_abs_error"]),
                           "within 15%, held out": fmt_pct(r["held_out_within_15pct"])} for r in held_out_by_gpu()]))
        return EXIT_OK
    if not args.from_dir:
        raise ConfigError("from", "give a result directory (--from DIR) and --gpu NAME, or --error-table")
    if args.against:
        return against(args)
    if not args.gpu:
        raise ConfigError("gpu", f"give at least one --gpu NAME; allowed: {', '.join(predictable_names())}")
    if args.devices < 1:
        raise ConfigError("devices", f"must be at least 1, got {args.devices}")
    if not Path(args.from_dir).is_dir():  # not "has no ok rows" of a folder that is not there
        raise ConfigError("from", f"{args.from_dir!r} is not a directory; allowed: a result directory written by "
                                  "bench run / bench sweep --out")
    gpus = [spec(name) for name in args.gpu]
    prices = prices_with(parse_prices(args.price))
    rows, notes = predict_dir(args.from_dir, gpus, args.devices, prices=prices, per_op=not args.whole_step)
    if args.json:
        print(json.dumps({"predictions": rows, "notes": notes}, indent=1))
        return EXIT_OK
    for line in notes:
        print(f"bench predict: note: {line}")
    if not rows:
        return EXIT_OK
    print(text_table([{"model": r["model"], "mode": r["mode"], "precision": r["precision"], "batch": r["batch_size"],
                       **({"settings": r["settings"]} if any(x["settings"] for x in rows) else {}),
                       "measured on": r["measured_on"], "measured": f"{r['measured']:.4g} {r['sample_unit']}",
                       "GPU": r["gpu"],
                       "predicted": f"{'at most ' if r['kind'] == 'bound' else ''}{r['predicted']:.4g} {r['sample_unit']}",
                       "x measured": f"{r['ratio']:.2f}x" if r["ratio"] else "",
                       f"{COVERAGE * 100:.0f} % interval": interval_text(r),
                       "cost per million": cost_text(r), "path": r["path"],
                       "binds": "; ".join(t for t in (r["binds"], r["above_roofline"], r["disturbed"]) if t)}
                      for r in rows], prose=("binds",)))
    print(f"\n{COVERAGE * 100:.0f} % interval, per prediction (its group's published pairs: bench predict --error-table):")
    for text in dict.fromkeys(f"{r['model']} {r['mode']} {r['precision']} bs {r['batch_size']}"
                              f"{' (' + r['settings'] + ')' if r['settings'] else ''} on {r['gpu']}: {r['band_text']}"
                              for r in rows):
        print(f"  {text}")
    priced = dict.fromkeys(f"{r['gpu'].split('x ', 1)[-1]}: {r['price_from']}" for r in rows if r["price_from"])
    unpriced = dict.fromkeys(r["gpu"].split("x ", 1)[-1] for r in rows if not r["price_from"])
    if priced or unpriced:
        print("cost per million: price x GPUs / (predicted items/s x 3600) x 1e6, in the workload's own unit "
              "(tokens for a language model)" + (", at " + "; ".join(priced) if priced else "")
              + (f"; no sourced price for {', '.join(unpriced)}" if unpriced else "")
              + ". Prices change: give yours with --price NAME=PRICE.")
    beside = dict.fromkeys(r["published_pair"] for r in rows if r["published_pair"])
    if beside:
        print("published pairs of the same two GPUs (the model's error on them is the one to expect here):")
        for text in beside:
            print(f"  {text}")
    if any(r["kind"] == "bound" for r in rows):
        print("\nat most: measured on a CPU, so the GPU's roofline bound for the FLOPs and bytes the run counted "
              "(no efficiency carried over), capped by the launch floor where the host binds.")
    if any(r["binds"].startswith("launch floor") for r in rows):
        print(f"launch floor: the kernels one eager step ran (counted in the run) x the host's time per kernel, "
              f"{FLOOR_SOURCE}: no GPU runs this eager step faster (a compiled step, with fused kernels or CUDA "
              f"graphs, gets no floor).")
    return EXIT_OK


def interval_text(row: dict) -> str:
    """The prediction's interval in its unit, or why it has none (its group's line below says more)."""
    if row["low"] is not None:
        return f"{figure(row['low'])}-{figure(row['high'])}"
    if row["kind"] == "bound":
        return "none (a bound)"
    if row.get("path") == "per op":
        return "none (per op: below)"
    return "none (above its roofline)" if row["above_roofline"] else "none (unvalidated)"


def figure(value: float) -> str:
    """A rate as people read it: whole numbers with separators from 100 up, three figures below."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def cost_text(row: dict) -> str:
    """What a million of the workload's items cost on the predicted GPU ("at least" from a bound)."""
    if row["cost_per_million"] is None:
        return ""
    least = "at least " if row["kind"] == "bound" else ""
    return f"{least}{row['cost_per_million']:.3g} {row['currency']} / M {row['throughput_unit'].removesuffix('/s')}"


def against(args: argparse.Namespace) -> int:
    """--against DIR: every configuration measured in both directories, predicted on DIR's GPU from --from's
    rows and scored against what DIR measured (bench_core/predict/own.py, as the kept runs' pairs are)."""
    refuse_same_folder("against", [("--from", args.from_dir), ("--against", args.against)],
                       "a folder measured on another GPU (a folder scored against itself is +0.0 % by construction)")
    sources, targets = machines(Path(args.from_dir)), machines(Path(args.against))
    for field_name, found, folder in (("from", sources, args.from_dir), ("against", targets, args.against)):
        if not found:
            raise ConfigError(field_name, f"{folder} has no ok GPU rows (runs/*/rows.json): a pair is scored between "
                                          "two GPU runs")
    pairs = [p for a, rows_a in sources.items() for b, rows_b in targets.items() for p in scored(rows_a, rows_b, a, b)]
    if args.json:
        print(json.dumps({"pairs": pairs}, indent=1))
        return EXIT_OK
    if not pairs:
        print("bench predict: note: no configuration was measured in both directories (same model, mode, precision, "
              "batch, input, devices, compile and layout) on a GPU with a spec sheet: nothing to score")
        return EXIT_OK
    print(text_table([{"model": p["model"], "mode": p["mode"], "precision": p["precision"], "batch": p["batch_size"],
                       **({"settings": p["settings"]} if any(x["settings"] for x in pairs) else {}),
                       "from": p["from_machine"], "to": p["to_machine"], "measured there": figure(p["actual"]),
                       "predicted": figure(p["predicted"]), "error": f"{p['error'] * 100:+.1f} %",
                       f"inside its {COVERAGE * 100:.0f} % interval": interval_text(p) if p["inside"] is None
                       else "yes" if p["inside"] else "no"} for p in pairs]))
    inside = [p["inside"] for p in pairs if p["inside"] is not None]
    if inside:
        print(f"\n{sum(inside)} of {len(inside)} measured figures fell inside their prediction's {COVERAGE * 100:.0f} % "
              f"interval (the interval holds {COVERAGE * 100:.0f} % of its group's published pairs).")
    if any(p["same_kind"] for p in pairs):
        print("same GPU kind on both sides: the true ratio is 1, and the error is how much the two machines differ.")
    return EXIT_OK
