"""`bench ladder`: a serve configuration's load doubled until the server saturates, the throughput /
interactivity frontier and the highest load meeting the SLO (scenarios/ladder.py), rows to --out.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench_core import results
from bench_core.cli.common import config_from_args, paint, progress_printer
from bench_core.devices import check_runnable
from bench_core.errors import EXIT_FAILED, EXIT_OK, ConfigError
from bench_core.files import check_results_folder
from bench_core.results.disturbed import disturbed_note
from bench_core.scenarios.ladder import FAILED, Ladder, check_ladder, climb
from bench_core.serving.slo import frontier


def main(args: argparse.Namespace) -> int:
    if getattr(args, "mode", "serve") != "serve":
        raise ConfigError("mode", f"bench ladder measures mode serve; got {args.mode}")
    args.mode = "serve"
    cfg = config_from_args(args)
    check_ladder(args.ladder, args.start, args.max_points, args.min_gain, args.max_ttft_ms)
    if args.ladder == "rate" and cfg.trace_file:
        raise ConfigError("ladder", "a trace sets its own arrivals: scale them with trace_time_scale, or climb "
                                    "concurrency (the most requests in flight)")
    check_runnable(cfg)
    if args.out is not None:  # an empty --out is refused, not ignored (as bench run's)
        check_results_folder(args.out)
        os.environ.setdefault("BENCH_SERVING_DIR", str(Path(args.out) / "serving"))
    ladder = climb(cfg, args.ladder, args.start, args.max_points, args.min_gain, args.max_ttft_ms,
                   say=progress_printer(args))
    if args.out:
        for rung in ladder.rungs:
            results.write_run(args.out, rung.rows[0]["run_id"], rung.rows)
    print(summary_text(ladder, cfg.slo_ttft_ms, cfg.slo_tpot_ms, cfg.price_per_hour, cfg.currency))
    if args.out:
        points = f"{len(ladder.rungs)} point{'' if len(ladder.rungs) == 1 else 's'}"
        print(f"rows of {points} in {Path(args.out) / 'results.csv'}; bench report {args.out} draws the frontier",
              file=sys.stderr)
    return EXIT_FAILED if ladder.stop == FAILED and len(ladder.rungs) == 1 else EXIT_OK


def summary_text(ladder: Ladder, slo_ttft_ms: float, slo_tpot_ms: float, price: float | None,
                 currency: str | None = None) -> str:
    points = ladder.points()
    on_front = {id(p) for p in frontier(points)}
    marked = any(p["disturbed"] for p in points)  # a disturbed figure is marked where it is shown
    head = (f"{ladder.kind:>11} {'requests/s':>10} {'output tok/s':>12} {'tok/s/user':>10} {'TTFT p50':>9} "
            f"{'TTFT p99':>9} {'TPOT p99':>9} {'client CPU':>10} {'SLO':>4} {'cost/M':>8}  frontier"
            + ("  disturbed by" if marked else ""))
    lines = [head]
    for p in points:
        if p["status"] != "ok":
            lines.append(f"{p['load']:>11g} {p['status']}: {p['message'][:100]}")
            continue
        cost = f"{p['cost_per_million']:.3g}" if p.get("cost_per_million") is not None else ""
        line = (f"{p['load']:>11g} {_n(p['requests_per_s']):>10} {_n(p['output_tokens_per_s']):>12} "
                f"{_n(p['tokens_per_s_per_user']):>10} {_n(p['ttft_ms_p50']):>9} {_n(p['ttft_ms_p99']):>9} "
                f"{_n(p['tpot_ms_p99']):>9} {_n(p['client_cpu_fraction']):>10} "
                f"{'yes' if p['slo_met'] else 'no':>4} {cost:>8}  {'*' if id(p) in on_front else '':<8}")
        lines.append((line + (f"  DISTURBED: {p['disturbed']}" if p["disturbed"] else "")).rstrip())
    # Where it stopped, the frontier and the SLO answer rest on these figures: a disturbed one says so here too.
    note = disturbed_note(ladder.rows())
    lines.append(paint(f"stopped: {ladder.why}" + (f"; {note}" if note else ""),
                       "yellow" if ladder.stop == FAILED or note else "green"))
    top = next((p for p in reversed(points) if p["status"] == "ok"), None)
    if top is not None:
        lines.append(f"client at the highest load ({ladder.kind} {top['load']:g}): {top['client_cpu_fraction'] or 0:.2f} "
                     f"of a core{' - saturated: it set the pace' if top['client_saturated'] else ', not saturated'}")
    lines.append("frontier (*): no other point has both more output tokens/s and more tokens/s per user"
                 + (f"; cost per million output tokens from --price-per-hour, in {currency or 'its currency'}" if price else
                    "; give --price-per-hour for the cost per million output tokens along it"))
    lines.append(f"SLO (p99 TTFT <= {slo_ttft_ms:g} ms, p99 TPOT <= {slo_tpot_ms:g} ms): "
                 f"{ladder.slo().headline(slo_ttft_ms, slo_tpot_ms)}")
    return "\n".join(lines)


def _n(value) -> str:
    return f"{value:.4g}" if value is not None else ""
