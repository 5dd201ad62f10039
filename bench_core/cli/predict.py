"""`bench predict`: a GPU that was not measured, predicted from one that was (or from a CPU), with
the ceiling that binds and the error the model shows on published pairs (docs/prediction.md).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench_core.cli.common import text_table
from bench_core.errors import EXIT_OK, ConfigError
from bench_core.predict.measured import band_text, bands, predict_dir
from bench_core.predict.model import FLOOR_SOURCE, TERMS
from bench_core.predict.published import ablations, error_table, fmt_pct, predictions
from bench_core.predict.specs import predictable_names, spec


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = f"""How: per sample, t = max(F / P, Bf / W) + Bo / W, with F the FLOPs and Bf, Bo the bytes the
FLOP ops and all other ops move (counted in the measured run, nothing fused), P the GPU's dense
peak for the precision and W its memory bandwidth (bench_core/data/gpu_peaks.csv, each figure
with its datasheet). The efficiency the measured device reached against its own t is carried to
the target; N GPUs add a ring all-reduce of the gradients over the GPU's link. 'binds' says which
ceiling dominates. A band is shown only where pairs of the prediction's group were measured: GPU
to GPU in training at batch 32 or more has the published pairs' median error (`bench predict
--error-table`); inference, LLM training and small batches have no measured pair, so they say
"unvalidated" and show none. From a CPU run the figure is the GPU's roofline bound ("at most"):
a CPU's efficiency against its own peak says nothing of a GPU's. A row in a precision its device
only emulates is not predicted from; a disturbed row's predictions say "re-measure".
GPUs that can be predicted: {', '.join(predictable_names())}.
examples:
  bench run --model resnet18 --width 32 --height 32 --steps 2 --out outputs/cpu
  bench predict --from outputs/cpu --gpu H100-SXM5-80GB --gpu A100-SXM4-80GB
  bench predict --from outputs/a100 --gpu B200 --devices 8
  bench predict --error-table          # the model against published pairs, no results needed
  bench predict --pairs                # every published pair, predicted and actual
exit status: {EXIT_OK} ok; 2 bad input (unknown GPU, a directory with no ok rows)."""
    p.add_argument("--from", dest="from_dir", metavar="DIR", help="a result directory (DIR/runs/*/rows.json) "
                   "measured on any device")
    p.add_argument("--gpu", action="append", default=[], metavar="NAME",
                   help="the GPU to predict (repeatable); a short name from gpu_peaks.csv, e.g. H100-SXM5-80GB")
    p.add_argument("--devices", type=int, default=1, metavar="N", help="GPUs of the prediction, data parallel "
                   "(default 1)")
    p.add_argument("--error-table", action="store_true", help="print the model's error on every published pair, "
                   "per workload and pair kind, and what each term is worth (from the shipped data alone)")
    p.add_argument("--pairs", action="store_true", help="print every published pair: measured, predicted, error")
    p.add_argument("--json", action="store_true", help="print the rows as JSON (for scripts)")


def main(args: argparse.Namespace) -> int:
    if args.error_table or args.pairs:
        rows = predictions() if args.pairs else error_table()
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
                           "worst |error|": fmt_pct(r["worst_abs_error"]), "worst factor": f"{r['worst_factor']:.2f}x",
                           "within 15%": fmt_pct(r["within_15pct"]), "worst pair": r["worst_pair"]} for r in rows],
                         prose=("worst pair",)))
        print("\nThe band each group of predictions carries (bench predict --from DIR):")
        print(text_table([{"group": group, "pairs": measured[1] if measured else 0,
                           "band": band_text(group, measured)} for group, measured in bands().items()],
                         prose=("band",)))
        print(f"\nWhat each term is worth (terms: {', '.join(TERMS)}):")
        print(text_table([{"model": r["model"], "median |error|": fmt_pct(r["median_abs_error"]),
                           "worst |error|": fmt_pct(r["worst_abs_error"]), "within 15%": fmt_pct(r["within_15pct"])}
                          for r in ablations()]))
        return EXIT_OK
    if not args.from_dir:
        raise ConfigError("from", "give a result directory (--from DIR) and --gpu NAME, or --error-table")
    if not args.gpu:
        raise ConfigError("gpu", f"give at least one --gpu NAME; allowed: {', '.join(predictable_names())}")
    if args.devices < 1:
        raise ConfigError("devices", f"must be at least 1, got {args.devices}")
    if not Path(args.from_dir).is_dir():  # not "has no ok rows" of a folder that is not there
        raise ConfigError("from", f"{args.from_dir!r} is not a directory; allowed: a result directory written by "
                                  "bench run / bench sweep --out")
    gpus = [spec(name) for name in args.gpu]
    rows, notes = predict_dir(args.from_dir, gpus, args.devices)
    if args.json:
        print(json.dumps({"predictions": rows, "notes": notes}, indent=1))
        return EXIT_OK
    for line in notes:
        print(f"bench predict: note: {line}")
    if not rows:
        return EXIT_OK
    print(text_table([{"model": r["model"], "mode": r["mode"], "precision": r["precision"], "batch": r["batch_size"],
                       "measured on": r["measured_on"], "measured": f"{r['measured']:.4g} {r['sample_unit']}",
                       "GPU": r["gpu"],
                       "predicted": f"{'at most ' if r['kind'] == 'bound' else ''}{r['predicted']:.4g} {r['sample_unit']}",
                       "band": r["band_text"], "binds": r["binds"] + (f"; {r['disturbed']}" if r["disturbed"] else "")}
                      for r in rows], prose=("band", "binds")))
    if any(r["kind"] == "bound" for r in rows):
        print("\nat most: measured on a CPU, so the GPU's roofline bound for the FLOPs and bytes the run counted "
              "(no efficiency carried over), capped by the launch floor where the host binds.")
    if any(r["binds"].startswith("launch floor") for r in rows):
        print(f"launch floor: the kernels one eager step ran (counted in the run) x the host's time per kernel, "
              f"{FLOOR_SOURCE}: no GPU runs this eager step faster (a compiled step, with fused kernels or CUDA "
              f"graphs, gets no floor).")
    return EXIT_OK
