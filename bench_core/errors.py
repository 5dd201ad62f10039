"""The error every bad input raises (one line naming the field and what is allowed), SIGTERM as
an exception (with a watchdog for a main thread stuck in one long native call), and the exit codes
of every command.

It lives here, importing nothing from bench_core, so that config, precision, models and devices
can all raise it without importing each other.
"""
from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import socket
import sys
import threading
import time
from typing import Callable, Iterator, NoReturn


class ConfigError(ValueError):
    """A bad input: one line that names the field and what is allowed."""

    def __init__(self, field_name: str, problem: str):
        # Keys and values come from users: keep the message on one printable line.
        self.field = field_name if field_name.isidentifier() else repr(field_name)
        problem = problem.replace("\r", "\\r").replace("\n", "\\n")
        super().__init__(f"{self.field}: {problem}")


def user_frame(exc: BaseException) -> str:
    """' (at net.py:42 in forward)': the last frame of an exception's traceback in code that is neither
    bench_core's, Python's nor an installed library's (the user's model, a notebook cell); '' where none is."""
    import sysconfig
    import traceback
    ours = os.path.dirname(os.path.abspath(__file__)) + os.sep
    libraries = tuple({os.path.abspath(p) + os.sep for p in sysconfig.get_paths().values()} |
                      {os.path.abspath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)} - {os.sep})
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        path = os.path.abspath(frame.filename)
        if not frame.filename.startswith("<frozen") and not path.startswith(ours) and not path.startswith(libraries):
            found = frame
    return f" (at {os.path.basename(found.filename)}:{found.lineno} in {found.name})" if found else ""


def error_message(exc: BaseException) -> str:
    """`Type: first line of the message`, as failure rows, notes and refusals carry it, and where the user's
    own code raised it (a model from code:, a notebook cell): ' (at net.py:42 in forward)'."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:500] if lines else type(exc).__name__}{user_frame(exc)}"


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


# How long the main thread has to act on a Ctrl-C or SIGTERM before the watchdog acts for it.
STOP_GRACE_S = 3.0
# What the watchdog does for a stuck main thread, innermost first (see when_stuck).
_stuck_hooks: list[Callable[[KeyboardInterrupt], None]] = []


@contextlib.contextmanager
def sigterm_as_interrupt(grace_s: float = STOP_GRACE_S) -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated (a KeyboardInterrupt) in the main thread, so
    every `except KeyboardInterrupt` and `finally` that cleans up after Ctrl-C runs for it too.

    Python runs a signal handler in the main thread only between bytecodes, so a main thread
    inside one long native call (a torch op over a huge sequence: one attention call of a 65,536-
    token prompt ran for a minute here) takes the signal only when the call returns: SIGTERM took
    61 s to stop such a run. So a watchdog thread learns of each Ctrl-C and SIGTERM from the C
    level (signal.set_wakeup_fd: written by the interpreter's own C handler, whatever the main
    thread is doing). If the main thread has not taken it within `grace_s`, or a second one comes
    first, the watchdog does what the main thread's clean-up would have done (the when_stuck
    hooks: keep the finished rows, record the interrupted one) and ends the process with 143 (130
    for Ctrl-C). torch releases the GIL inside its ops, so the watchdog runs beside one; a native
    call holding the GIL would hold it too. Outside the main thread it changes nothing."""
    watchdog = _Watchdog(grace_s)

    def on_term(signum, frame):
        watchdog.taken()
        raise Terminated

    def on_int(signum, frame):
        watchdog.taken()
        raise KeyboardInterrupt

    try:
        previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, on_term)}
    except ValueError:  # not the main thread
        yield
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where Ctrl-C is ignored
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, on_int)
    watchdog.start()
    try:
        yield
    finally:
        watchdog.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def when_stuck(hook: Callable[[KeyboardInterrupt], None]) -> Iterator[None]:
    """Within the block, if a Ctrl-C or SIGTERM finds the main thread stuck in a long native call,
    sigterm_as_interrupt's watchdog calls `hook(exc)` from its own thread (innermost block first,
    `exc` the Terminated or KeyboardInterrupt the main thread would have raised) before it ends the
    process. A hook does what the block's `except KeyboardInterrupt` does, without waiting on the
    main thread (which never returns)."""
    _stuck_hooks.append(hook)
    try:
        yield
    finally:
        _stuck_hooks.remove(hook)


class _Watchdog:
    """The thread behind sigterm_as_interrupt. Its state is shared with the main thread's signal
    handlers under one lock: a handler that runs takes every signal so far (it drains the wake-up
    bytes), so a signal is pending only while the main thread has not run its handler since."""

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.lock = threading.Lock()
        self.reader, self.writer = socket.socketpair()
        self.reader.setblocking(False)
        self.writer.setblocking(False)
        self.pending: tuple[int, float] | None = None  # (signal, deadline) not yet taken
        self.acting = self.stopping = False
        self.thread = threading.Thread(target=self._watch, name="bench-stop-watchdog", daemon=True)
        self.previous_fd = -1

    def start(self) -> None:
        self.previous_fd = signal.set_wakeup_fd(self.writer.fileno(), warn_on_full_buffer=False)
        self.thread.start()

    def stop(self) -> None:
        signal.set_wakeup_fd(self.previous_fd)
        with self.lock:
            self.stopping = True
        with contextlib.suppress(OSError):
            self.writer.send(b"\0")  # wakes the thread
        self.thread.join()
        self.reader.close()
        self.writer.close()

    def taken(self) -> None:
        """In the main thread's handler: this signal (and any before it) is the main thread's."""
        with self.lock:
            acting = self.acting
            if not acting:
                self._drain()
                self.pending = None
        if acting:  # the watchdog is recording the stop: the main thread must not record it too
            threading.Event().wait()

    def _drain(self) -> bytes:
        data = b""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while chunk := self.reader.recv(64):
                data += chunk
        return data

    def _watch(self) -> None:
        while True:
            with self.lock:
                deadline = self.pending[1] if self.pending else None
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            select.select([self.reader], [], [], timeout)
            with self.lock:
                if self.stopping:
                    return
                signals = [b for b in self._drain() if b]
                if signals and self.pending:  # a second signal before the first was taken
                    self.acting = True
                elif signals:
                    self.pending = (signals[-1], time.monotonic() + self.grace_s)
                elif self.pending and time.monotonic() >= self.pending[1]:
                    self.acting = True
                sig = self.pending[0] if self.pending else 0
            if self.acting:
                self._act(sig)

    def _act(self, sig: int) -> NoReturn:
        exc = Terminated() if sig == signal.SIGTERM else KeyboardInterrupt()
        print(f"interrupted ({interrupted_by(exc)}) inside a long operation: stopping without waiting "
              "for it to return", file=sys.stderr, flush=True)
        for hook in reversed(_stuck_hooks):
            try:
                hook(exc)
            except Exception as error:  # noqa: BLE001 - the process ends either way; say why the record may lack
                print(f"while stopping: {type(error).__name__}: {error}", file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(interrupted_exit(exc))


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
