"""The error every bad input raises (one line naming the field and what is allowed), SIGTERM as
an exception (with a watchdog for a main thread stuck in one long native call), and the exit codes
of every command.

It lives here, importing nothing from bench_core, so that config, precision, models and devices
can all raise it without importing each other.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import itertools
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
    own code raised it (a model from code:, a notebook cell): ' (at net.py:42 in forward)'. An exit says
    its call: 'SystemExit: exit(2) called' (an argument parser's), 'exit() called'."""
    if isinstance(exc, SystemExit) and not isinstance(exc.code, str):
        text = f"exit({'' if exc.code is None else repr(exc.code)}) called"
    else:
        lines = str(exc).strip().splitlines()
        text = lines[0][:500] if lines else type(exc).__name__
    return f"{type(exc).__name__}: {text}{user_frame(exc)}"


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


def die_with_parent(parent_pid: int, signum: int, status: int) -> None:
    """At the start of a helper process (a sweep's papermill child, a serving point's client worker): Linux
    sends it `signum` when its parent dies, even by SIGKILL (PR_SET_PDEATHSIG), so nothing is left running
    after the process that started it. A parent already gone before the request took effect (the helper now
    belongs to init): exit at once with `status`. Elsewhere than Linux, only that second check."""
    if sys.platform.startswith("linux"):
        import ctypes
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, int(signum))  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:
        os._exit(status)


def interrupted_exit(exc: KeyboardInterrupt) -> int:
    return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED


def interrupted_by(exc: KeyboardInterrupt) -> str:
    return "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"


# How long the main thread has to act on a Ctrl-C or SIGTERM before the watchdog acts for it. A test that
# checks a stop ends by itself, on a machine its other workers load, gives it longer (BENCH_STOP_GRACE_S).
STOP_GRACE_S = 3.0
GRACE_ENV = "BENCH_STOP_GRACE_S"
# Signals that land this soon after a stop began are that stop: `timeout` signals the process and then
# its whole group, SLURM's scancel and many process managers every process of a job, microseconds apart.
# One later (a second Ctrl-C, a second `kill`) insists: the stop must end within the grace after it.
BURST_S = 1.0
# How often the watchdog looks again while clean-up records rows with interrupts held.
HELD_POLL_S = 0.1
# A stop the main thread has not taken this long after the signal is nudged (see _nudge_main), and again as often.
NUDGE_S = 0.2
# What the watchdog does for a stuck main thread, innermost first (see when_stuck).
_stuck_hooks: list[Callable[[KeyboardInterrupt], None]] = []
_held = 0  # interrupts_held blocks open: rows are being recorded, the watchdog waits for them
_marked = 0  # sigterm_as_interrupt blocks where every Ctrl-C and SIGTERM is raised marked (from_signal)


def from_outside(exc: BaseException) -> bool:
    """Whether `exc` is a stop sent to this process (Ctrl-C, SIGTERM), not an exit the running code raised
    itself (sys.exit(), exit(), an argument parser's error, its own `raise KeyboardInterrupt`): those are
    failures like any other. Where bench's handlers mark the stops they raise (inside sigterm_as_interrupt),
    an unmarked KeyboardInterrupt is the code's own; elsewhere (a notebook, a library call) every
    KeyboardInterrupt is taken for a Ctrl-C, as Python takes it."""
    if not isinstance(exc, KeyboardInterrupt):
        return False
    return getattr(exc, "from_signal", False) or not _marked


def _signalled(kind: type[KeyboardInterrupt]) -> KeyboardInterrupt:
    exc = kind()
    exc.from_signal = True  # a stop sent to this process, not one the running code raised itself
    return exc


def _grace_from_env() -> float:
    """STOP_GRACE_S, or the seconds BENCH_STOP_GRACE_S gives (a test hook; a value that is not a positive
    number is ignored)."""
    try:
        value = float(os.environ.get(GRACE_ENV, ""))
    except ValueError:
        return STOP_GRACE_S
    return value if value > 0 else STOP_GRACE_S


@contextlib.contextmanager
def sigterm_as_interrupt(grace_s: float | None = None) -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated (a KeyboardInterrupt) in the main thread, so
    every `except KeyboardInterrupt` and `finally` that cleans up after Ctrl-C runs for it too.

    One stop is raised, once: the signals of a burst (two SIGTERMs microseconds apart, a SIGINT
    inside the SIGTERM's handler) and any that land while the stop's clean-up runs return at once
    from their handler, so nothing cuts that clean-up short. No handler takes a lock or waits:
    Python may run a handler inside another, and inside code that holds a lock (a stream's).

    Python runs a signal handler in the main thread only between bytecodes, so a main thread
    inside one long native call (a torch op over a huge sequence: one attention call of a 65,536-
    token prompt ran for a minute here) takes the signal only when the call returns: SIGTERM took
    61 s to stop such a run. So a watchdog thread learns of each Ctrl-C and SIGTERM from the C
    level (signal.set_wakeup_fd: written by the interpreter's own C handler, whatever the main
    thread is doing). If the main thread has not taken it within `grace_s`, or a stop under way
    has not ended within `grace_s` of a signal sent more than BURST_S after it began (someone
    insists), the watchdog does what the main thread's clean-up would have done (the when_stuck
    hooks: keep the finished rows, record the interrupted one; never while interrupts_held records
    them) and ends the process with 143 (130 for Ctrl-C). torch releases the GIL inside its ops,
    so the watchdog runs beside one; a native call holding the GIL would hold it too. A main thread
    blocked in a wait (a lock, a pool's result) that a signal did not wake, because the kernel handed it
    to another thread, is woken every NUDGE_S until it takes it. Outside the main thread it changes
    nothing."""
    global _marked
    watchdog = _Watchdog(grace_s if grace_s is not None else _grace_from_env())

    def on_term(signum, frame):
        watchdog.take(Terminated)

    def on_int(signum, frame):
        watchdog.take(KeyboardInterrupt)

    try:
        previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, on_term)}
    except ValueError:  # not the main thread
        yield
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where Ctrl-C is ignored
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, on_int)
    # Every stop this process can be sent is raised marked, unless another handler of SIGINT raises its own.
    marking = signal.getsignal(signal.SIGINT) in (on_int, signal.SIG_IGN, signal.SIG_DFL)
    _marked += marking
    _nudge_signal()
    watchdog.start(set(previous))
    try:
        yield
    finally:
        try:
            watchdog.close()  # from here on no handler raises: a signal now cannot cut the restoring short
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            _marked -= marking
            watchdog.stop()


@functools.cache
def _nudge_signal() -> int | None:
    """The signal the watchdog sends the main thread to wake it (see _Watchdog._nudge_main): a real-time one
    no library here uses, given a handler that does nothing, once per process and never taken back (so a
    nudge that lands as a block closes finds it still there). None where there is none (not Linux)."""
    nudge = getattr(signal, "SIGRTMAX", None)
    if nudge is None or not hasattr(signal, "pthread_kill"):
        return None
    nudge -= 2
    if signal.getsignal(nudge) not in (signal.SIG_DFL, None):  # someone's own: leave it
        return None
    signal.signal(nudge, lambda signum, frame: None)
    return nudge


@contextlib.contextmanager
def when_stuck(hook: Callable[[KeyboardInterrupt], None]) -> Iterator[None]:
    """Within the block, if a Ctrl-C or SIGTERM finds the main thread stuck in a long native call,
    sigterm_as_interrupt's watchdog calls `hook(exc)` from its own thread (innermost block first,
    `exc` the Terminated or KeyboardInterrupt the main thread would have raised, or has raised) before
    it ends the process. A hook does what the block's `except KeyboardInterrupt` does, without waiting
    on the main thread (which may never return)."""
    _stuck_hooks.append(hook)
    try:
        yield
    finally:
        _stuck_hooks.remove(hook)


class _Watchdog:
    """The thread behind sigterm_as_interrupt, and the stop it shares with the main thread's handlers.

    Whoever claims the stop first owns it: a handler (it raises the stop) or the watchdog (it ends the
    process). The claim is one call of a C iterator, which no handler can interrupt halfway; after it, a
    handler only stores plain values (no lock, no wait, no I/O). The watchdog reads the wake-up bytes
    and decides by their times, under nothing the handlers take."""

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.claims = itertools.count()  # next() == 0: the first claim, the stop's owner
        self.stop_exc: KeyboardInterrupt | None = None  # the stop the main thread raised
        self.taken_at: float | None = None  # when it raised it (monotonic)
        self.reader, self.writer = socket.socketpair()
        self.reader.setblocking(False)
        self.writer.setblocking(False)
        self.watched: set[int] = set()
        self.stopping = False
        self.thread = threading.Thread(target=self._watch, name="bench-stop-watchdog", daemon=True)
        self.previous_fd = -1
        self.main = threading.main_thread().ident
        self.closed = False

    def start(self, watched: set[int]) -> None:
        self.watched = {int(sig) for sig in watched}
        self.previous_fd = signal.set_wakeup_fd(self.writer.fileno(), warn_on_full_buffer=False)
        self.thread.start()

    def take(self, kind: type[KeyboardInterrupt]) -> None:
        """A main-thread handler: raise the stop if it is the first claim; else return at once (a stop is
        under way, the block is closing, or the watchdog is ending the process)."""
        if next(self.claims):
            return
        exc = _signalled(kind)
        self.stop_exc, self.taken_at = exc, time.monotonic()
        raise exc

    def close(self) -> None:
        """The block ends: no later handler raises (the claim is gone)."""
        next(self.claims)
        self.closed = True

    def stop(self) -> None:
        signal.set_wakeup_fd(self.previous_fd)
        self.stopping = True
        with contextlib.suppress(OSError):
            self.writer.send(b"\0")  # wakes the thread
        self.thread.join()
        self.reader.close()
        self.writer.close()

    def _drain(self) -> bytes:
        data = b""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while chunk := self.reader.recv(64):
                data += chunk
        return data

    def _watch(self) -> None:
        first_at: float | None = None          # when the first signal was read
        due: float | None = None               # when to act, unless the stop is taken or ends first
        due_for: tuple[float, int] | None = None  # (when read, which signal) of the signal `due` is for
        nudge_at: float | None = None          # when to nudge the main thread, while it has not taken a signal
        while True:
            now = time.monotonic()
            timeout = None if due is None else HELD_POLL_S if _held and now >= due else max(due - now, 0.0)
            if nudge_at is not None:
                timeout = max(min(nudge_at - now, timeout if timeout is not None else NUDGE_S), 0.0)
            select.select([self.reader], [], [], timeout)
            received = self._drain()
            # After the read, not before: stop() sets the flag, then sends its byte; a read between a check and
            # the byte's arrival took the byte and left the flag unseen, and the thread waited for ever (a run
            # whose main thread took its SIGTERM hung in the join at the block's end: 5 of 40 beside two busy loops)
            if self.stopping:
                return
            now = time.monotonic()
            signals = [sig for sig in received if sig in self.watched]
            if self.taken_at is not None or self.closed:
                nudge_at = None
            elif signals and nudge_at is None:
                nudge_at = now + NUDGE_S
            elif nudge_at is not None and now >= nudge_at:
                self._nudge_main()
                nudge_at = now + NUDGE_S
            began = min(t for t in (first_at, self.taken_at, now) if t is not None)
            if signals and (first_at is None and self.taken_at is None or now - began >= BURST_S):
                first_at = now if first_at is None else first_at
                if due is None:  # the first signal, or one that insists: the stop ends within the grace
                    due, due_for = now + self.grace_s, (now, signals[0])
            taken_at = self.taken_at
            if due_for and taken_at is not None and due_for[0] < taken_at + BURST_S:
                due = due_for = None  # the main thread took it (it raised the stop)
            if due is None or now < due or _held:
                continue
            if next(self.claims) == 0:  # the main thread never took it: stuck in one long call
                self._act(_signalled(Terminated if due_for[1] == signal.SIGTERM else KeyboardInterrupt))
            if self.stop_exc is not None and taken_at is not None:  # insisted on a stop under way
                self._act(self.stop_exc)
            due = due_for = None  # the block closed meanwhile

    def _nudge_main(self) -> None:
        """Wake a main thread that has not taken its signal: the kernel may hand a process's signal to any of
        its threads, and one that lands just before the main thread blocks (a lock's wait on a pool's result)
        leaves Python's handler waiting until the block ends (a trace's next arrival, 50 minutes off). A
        signal sent to the main thread itself breaks its wait (EINTR), and Python then runs every handler
        due (ours raise the stop). A main thread in a long native call is left as it was."""
        nudge = _nudge_signal()
        if nudge is not None:
            with contextlib.suppress(OSError, ValueError):
                signal.pthread_kill(self.main, nudge)

    def _act(self, exc: KeyboardInterrupt) -> NoReturn:
        print(f"interrupted ({interrupted_by(exc)}) inside a long operation: stopping without waiting "
              "for it to return", file=sys.stderr, flush=True)
        for hook in reversed(list(_stuck_hooks)):
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
    (recording what finished) is not cut short by a second; the handlers are restored after. The
    watchdog does not end the process while a block records."""
    global _held
    try:
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        yield
        return
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        for sig, handler in previous.items():
            signal.signal(sig, handler)
