"""`bench find-batch`: the largest per-device batch size that runs, found by an explicit search.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench_core.cli.common import (
    config_from_args,
    note_line,
    progress_printer,
    write_json,
)
from bench_core.cli.flags import check_find_batch
from bench_core.config.schema import MAX_BATCH
from bench_core.devices import check_runnable
from bench_core.errors import EXIT_FAILED, EXIT_OK
from bench_core.files import check_writable
from bench_core.launch.batch_search import find_max_batch

def main(args: argparse.Namespace) -> int:
    check_find_batch(args)  # (again: main may be called without the dispatcher)
    cfg = config_from_args(args)
    check_runnable(cfg)
    if args.out is not None:
        check_writable(args.out)
    # No --batch-size: the first probe is the largest batch the memory estimate fits (1 where it has none)
    start = None if getattr(args, "batch_size", None) is None or cfg.batch_size == MAX_BATCH else cfg.batch_size
    search = find_max_batch(cfg, start_batch_size=start, isolate=args.isolate, progress=progress_printer(args))
    if args.out:
        path = write_json(Path(args.out) / "find-batch", cfg, search.to_dict())
        note_line(args, f"search written to {path}")
    print(json.dumps(search.to_dict(), indent=1, default=str) if args.json else search.format())
    return EXIT_OK if search.ok else EXIT_FAILED
