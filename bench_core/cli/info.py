"""`bench models`, `bench sysinfo` and `bench peak`: what this installation and machine offer.
"""
from __future__ import annotations

import argparse
import json
import sys

from bench_core.capability import capability_table
from bench_core.cli.common import paint, text_table, wrap_line
from bench_core.config.schema import validate_device_name
from bench_core.devices import Backend, resolve_device
from bench_core.errors import EXIT_OK, ConfigError
from bench_core.measure import environment
from bench_core.measure.mfu_peak import cache_path, cpu_peak, peak_for
from bench_core.measure.peaks import PEAK_CLASS
from bench_core.workload.models import library_models, model_table, params_text
from bench_core.workload.precision import resolve_precision


def add_models_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """examples:
  bench models                                 # the named models: task, default input, parameters
  bench models --search 'timm:*resnet*'        # any timm, torchvision or transformers name, by pattern
  bench models --search '*vit*' --json"""
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.add_argument("--search", metavar="PATTERN", help="list the library models --model also takes (timm:<name>, "
                   "torchvision:<name>, hf:<model_type>) whose name matches this shell pattern, e.g. 'timm:*resnet*'")


def main_models(args: argparse.Namespace) -> int:
    if args.search:
        found = library_models(args.search)
        print(json.dumps(found, indent=1) if args.json else "\n".join(found) or
              f"no library model matches {args.search!r}")
        return EXIT_OK
    table = model_table()
    shown = [{**row, "params": params_text(row["params"])} for row in table]
    print(json.dumps(table, indent=1) if args.json else text_table(shown, prose=("aliases", "source", "notes")))
    return EXIT_OK


def add_sysinfo_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = """The precision table says, per precision, whether this device runs it natively (hardware
instructions or tensor cores), emulated (it runs, slowly; rows are marked) or not at all, and why.
On a CPU, ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 shows what an AVX2-only CPU would get."""
    p.add_argument("--device", default="auto", help="also describe this device: auto, cpu, cuda, cuda:N, mps "
                   "(default: auto)")
    p.add_argument("--json", action="store_true", help="print as JSON: the fingerprint plus a 'precisions' list")


def main_sysinfo(args: argparse.Namespace) -> int:
    device = resolve_device(validate_device_name(args.device))
    info = environment.collect(device)
    table = capability_table(device)
    if args.json:
        print(json.dumps({**info, "precisions": table}, indent=1, default=str))
        return EXIT_OK
    width = max(len(k) for k in info)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in info.items() if v not in (None, "")))
    print(f"\nprecisions on {device}:")
    for line in table:
        colour = {"native": "green", "emulated": "yellow"}.get(line["support"], "red")
        text = wrap_line(f"  {line['precision']:<9} {line['support']:<11} {line['reason']}", indent=24)
        print(text.replace(line["support"], paint(line["support"], colour), 1))
    return EXIT_OK


CPU_PRECISIONS = ("fp32", "bf16", "amp-bf16", "fp16", "amp-fp16")


def add_peak_arguments(parser) -> None:
    parser.epilog = """examples:
  bench peak                          measure the peak of every CPU precision with torch's threads
  bench peak --precision fp32 --threads 1 --force
  bench peak --device cuda            the datasheet peaks of this GPU
A CPU peak is the best of a large linear and a 3x3 conv on the precision's own kernel path (a
pure cast, or autocast), and never below the fp32 peak. They are cached in
~/.cache/notebook-bench/cpu_peak.json ($XDG_CACHE_HOME), keyed by CPU model, torch version, dispatch
level (and ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA), threads and path; runs measure a missing one
on first use."""
    parser.add_argument("--precision", action="append", metavar="P",
                        help=f"precision to measure (repeatable; default on cpu: {', '.join(CPU_PRECISIONS)})")
    parser.add_argument("--threads", type=int, metavar="N", help="torch threads (default: torch's default)")
    parser.add_argument("--device", default="cpu", help="cpu (measure) or cuda / cuda:N (table lookup)")
    parser.add_argument("--force", action="store_true", help="measure again even when cached")
    parser.add_argument("--json", action="store_true", help="print as JSON")


def main_peak(args) -> int:

    device = resolve_device(validate_device_name(args.device))
    if args.threads is not None and args.threads < 1:
        raise ConfigError("threads", f"must be >= 1, got {args.threads}")
    names = [resolve_precision(p).name for p in (args.precision or [])]
    backend = Backend.for_device(device)
    for name in names:
        reason = backend.unsupported_reason(resolve_precision(name))
        if reason:
            raise ConfigError("precision", reason)
    names = names or (list(CPU_PRECISIONS) if device.type == "cpu" else list(PEAK_CLASS))
    rows = []
    for name in names:
        if device.type == "cpu":
            peak = cpu_peak(name, args.threads, force=args.force)
        else:
            peak = peak_for(device.type, backend.device_name(), name)
        rows.append({"device": backend.device_name(), "precision": name, "peak_tflops": peak.tflops,
                     "peak_source": peak.source})
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            value = f"{r['peak_tflops']:.3f}" if r["peak_tflops"] else "-"
            print(f"{r['precision']:>9}  {value:>9} TFLOP/s  {r['peak_source']}")
        if device.type == "cpu":
            print(f"cache: {cache_path()}", file=sys.stderr)
    return 0
