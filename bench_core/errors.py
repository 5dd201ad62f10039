"""The error every bad input raises (one line naming the field and what is allowed), SIGTERM as
an exception, and the exit codes of every command.

It lives here, importing nothing from bench_core, so that config, precision, models and devices
can all raise it without importing each other.
"""
from __future__ import annotations

import contextlib
import gc
import signal
import sys
from typing import Iterator, NoReturn


class ConfigError(ValueError):
    """A bad input: one line that names the field and what is allowed."""

    def __init__(self, field_name: str, problem: str):
        # Keys and values come from users: keep the message on one printable line.
        self.field = field_name if field_name.isidentifier() else repr(field_name)
        problem = problem.replace("\r", "\\r").replace("\n", "\\n")
        super().__init__(f"{self.field}: {problem}")


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler, `kill`, `timeout`), raised where Ctrl-C would be and handled like it:
    what finished is kept, the rest is recorded as interrupted, children are stopped."""


# Exit codes of every `bench` command: 0 all rows ok; 1 a run or configuration failed (its rows
# are written); 2 bad input (one line on stderr, nothing written); 130 interrupted by Ctrl-C
# (SIGINT), 143 by SIGTERM (128 + the signal, as a shell reports it).
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
# `bench diff` only: no regression found, but a configuration's measurements were disturbed (other
# processes, throttling, unstable repeats) so it was not judged: re-measure, don't pass or fail on it.
EXIT_DISTURBED = 3


def end_process(code: int | str | None) -> NoReturn:
    """sys.exit(code) at the end of one of bench's own processes (the `bench` command, a probe's
    fresh process, a sweep's papermill child), without the interpreter's last garbage collections.

    At exit, Python walks every object the process holds several times over: with torch,
    torchvision and dynamo imported (about 340 thousand objects), that took 0.8-1 s of every
    `bench run` process here (3.7 s -> 2.75 s), and a sweep, a batch search and a SLURM array start
    many. Frozen first, those objects are freed by their reference counts as modules are torn down,
    as before; atexit handlers still run. Only objects in reference cycles are left to the OS. Every
    result is on disk by then (atomic writes): never call this where work is still buffered in
    such an object, and never in a process that goes on (the tests call main() in theirs)."""
    gc.freeze()
    sys.exit(code)


def interrupted_exit(exc: KeyboardInterrupt) -> int:
    return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED


def interrupted_by(exc: KeyboardInterrupt) -> str:
    return "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated (a KeyboardInterrupt) in the main thread, so
    every `except KeyboardInterrupt` and `finally` that cleans up after Ctrl-C runs for it too.
    Outside the main thread (where no handler can be set) it changes nothing."""
    def handler(signum, frame):
        raise Terminated
    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Within the block, Ctrl-C and SIGTERM are ignored, so that the clean-up after the first one
    (recording what finished) is not cut short by a second; the handlers are restored after."""
    try:
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
