"""The `bench` command: one module per subcommand (cli/<command>.py), each giving
`add_arguments(parser)` and `main(args)` (cli/info.py serves models, sysinfo and peak with
`add_<command>_arguments` and `main_<command>`; a command in FLAGS has its flags in the module FLAGS names,
cli/flags.py or cli/compare_flags.py, apart from its torch); the only place that parses arguments.

Exit codes (bench_core.errors): 0 all rows ok; 1 a run or configuration failed (its rows are
written); 2 bad input (a line on stderr naming the field, one per mistake; nothing written); 130
interrupted.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
import warnings
from typing import Iterable

from bench_core import __version__
from bench_core.cli.common import EXAMPLES, OneLineParser, one_line_warnings, unknown_command, unrecognized
from bench_core.errors import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    ConfigError,
    end_process,
    interrupted_by,
    interrupted_exit,
    sigterm_as_interrupt,
)
from bench_core.files import skip_iri_grammars

# name -> (module, one-line help). `bench --help` lists them from this table alone; a command's
# module (and with it torch, for most) is imported only when that command runs or shows its --help.
COMMANDS = {
    "run": ("bench_core.cli.run", "run one benchmark configuration (train, infer or generate) and print its rows"),
    "models": ("bench_core.cli.info", "list every model: name, task, default input, notes"),
    "sysinfo": ("bench_core.cli.info", "print the environment fingerprint and which precisions run natively"),
    "sweep": ("bench_core.cli.sweep", "run a params/*.yaml sweep through the notebook template (papermill)"),
    "report": ("bench_core.cli.report", "render the summary notebook and HTML report of result directories"),
    "slurm": ("bench_core.cli.slurm", "submit a sweep or run to SLURM as job arrays (one task per execution)"),
    "peak": ("bench_core.cli.info", "measure this CPU's peak FLOP/s per precision (for MFU), cached per machine"),
    "memory": ("bench_core.cli.memory", "estimate the memory one rank of a configuration needs, before building it"),
    "find-batch": ("bench_core.cli.find_batch", "find the largest per-device batch size that fits"),
    "compare": ("bench_core.cli.compare", "run two variants interleaved (A B A B) and give a verdict"),
    "diff": ("bench_core.cli.diff", "compare two result directories configuration by configuration; exit 1 on a regression"),
    "history": ("bench_core.cli.history", "result folders of many dates as one trend per configuration: its steps and "
                                          "what changed there; --new: a run against the last stable stretch, exit 1 "
                                          "on a drop"),
    "selftest": ("bench_core.cli.selftest", "check this machine's GPU (or CPU) paths with tiny runs: a pass/fail checklist"),
    "acceptance": ("bench_core.cli.acceptance", "run every GPU (or CPU) path in a few minutes: sysinfo, a sweep of "
                                                "every family, selftest, report, and a table of checks"),
    "ladder": ("bench_core.cli.ladder", "serve: double the load until the server saturates, then print the throughput / "
                                        "interactivity frontier and the highest load meeting the SLO"),
    "predict": ("bench_core.cli.predict", "predict a GPU you have not measured from one you have: the ceiling that "
                                          "binds, its interval from published pairs of its kind, and its cost"),
}


# Commands whose flags live apart from what they run: their --help, and a value the configuration's checks refuse,
# are answered without importing the command's module (and torch with it: 3-4 s of a 2-core CPU).
FLAGS = {**{name: "bench_core.cli.flags" for name in ("run", "sweep", "find-batch", "ladder")},
         "compare": "bench_core.cli.compare_flags"}


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """`bench` with every command listed; the flags of `commands` (default: all of them) are added,
    which imports their modules. A parser that will parse one command needs only that one's flags."""
    parser = OneLineParser(prog="bench", description="notebook-bench: honest deep-learning training and "
                           "inference benchmarks on synthetic data.", epilog=EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"notebook-bench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if commands is None or name in commands:
            add_command(p, name, module_name)
    return parser


def add_command(p: argparse.ArgumentParser, name: str, module_name: str) -> None:
    # Imported here, not at the top: a command's own module, loaded only when that command is used; its flags'
    # module (FLAGS, else the same) for the parser, the command's own when it runs.
    flags = importlib.import_module(FLAGS.get(name, module_name))
    attr = name.replace("-", "_")
    adder = getattr(flags, f"add_{attr}_arguments", None) or flags.add_arguments
    adder(p)
    # Only a FLAGS module's check: a command's own module has names of its own (cli/ladder.py imports check_ladder).
    check = getattr(flags, f"check_{attr}", None) if name in FLAGS else None
    p.set_defaults(handler=functools.partial(run_command, check, module_name, attr), parser=p)


def run_command(check, module_name: str, attr: str, args: argparse.Namespace) -> int:
    """The command's main, its module imported now; first `check` (check_<command> of its flags module), where
    there is one, which may answer the command itself (its exit status) without the command's module."""
    answered = check(args) if check is not None else None
    if answered is not None:
        return answered
    module = importlib.import_module(module_name)
    return (getattr(module, f"main_{attr}", None) or module.main)(args)


def command_in(argv: list[str]) -> str | None:
    """The command word of a `bench` command line: its first argument that is not an option
    (`bench` itself takes no option with a value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    skip_iri_grammars()  # before any command imports papermill or nbconvert
    command = command_in(argv)
    parser = build_parser(commands=[command] if command else [])
    if command and command not in COMMANDS:
        parser.error(unknown_command(command, list(COMMANDS)))
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the subcommand's parser, so the line points at its --help
        target = getattr(args, "parser", None) or parser
        target.error(unrecognized(target, unknown, command))
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        with warnings.catch_warnings(), sigterm_as_interrupt():
            warnings.showwarning = one_line_warnings(args.command, warnings.showwarning)
            return args.handler(args)
    except ConfigError as exc:
        print(f"bench {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        print(f"bench {args.command}: interrupted ({interrupted_by(exc)})", file=sys.stderr)
        return interrupted_exit(exc)
    except BrokenPipeError:  # `bench models | head`: the reader has gone, there is no one to tell
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python's own advice)
        return EXIT_OK


def entry_point() -> None:
    """The `bench` command and `python -m bench_core`: main() in a process of its own."""
    end_process(main())


if __name__ == "__main__":
    entry_point()
