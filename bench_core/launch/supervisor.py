"""The one way bench_core runs a child process it must be able to stop: sweeps' papermill
executions, torchrun launches and fresh-process batch probes all go through `supervise`.

The child starts in a session of its own, with Linux PR_SET_PDEATHSIG set before it execs (if
this process dies, even by SIGKILL, the child gets SIGTERM). Its output is read line by line:
each line goes to the log file, to `on_line` (which may claim it, e.g. a progress line) and
otherwise to the tail kept for the error message. On the time limit, on Ctrl-C / SIGTERM in
this process (any exception) and after a normal exit, `kill_tree` stops every process the
child ever started, including those in other sessions (a Jupyter kernel, torchrun workers):
SIGTERM to the child's session, a grace period, then SIGKILL to whatever is left.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

KILL_GRACE_S = 5.0
TAIL_LINES = 400
POLL_S = 0.5

# Linux PR_SET_PDEATHSIG, kept across exec: the child gets SIGTERM if its parent dies without
# cleaning up (killed, or a notebook kernel shut down). Then it execs the real command: this
# interpreter for a python_command(...), any other program (a serving engine's launcher) by PATH.
_PARENT_DEATH_SHIM = """import ctypes, os, signal, sys
try:
    ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))
except (OSError, AttributeError):
    pass
os.execvp(sys.argv[1], sys.argv[1:])"""


@dataclass
class ChildOutcome:
    returncode: int | None       # None when it was stopped at the time limit
    timed_out: bool
    seconds: float
    tail: list[str] = field(default_factory=list)   # the last output lines not claimed by on_line
    killed: int = 0              # processes of the tree still running when it was stopped

    @property
    def killed_by_sigkill(self) -> bool:
        """Killed from outside by SIGKILL (on Linux, usually the kernel's OOM killer)."""
        return self.returncode == -signal.SIGKILL

    def last_line(self, default: str = "no output") -> str:
        return next((line.strip() for line in reversed(self.tail) if line.strip()), default)


def python_command(*args: str) -> list[str]:
    """`python ARGS...` with this interpreter."""
    return [sys.executable, *args]


class Child:
    """One supervised child process: started at once, its output read on a thread; `wait` it
    (within a time limit) or `stop` it. Several can run side by side (one per GPU)."""

    def __init__(self, command: list[str], *, env: dict | None = None, on_line: Callable[[str], bool] | None = None,
                 log_path: Path | None = None, cwd: str | Path | None = None):
        self.start = time.perf_counter()
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.proc = subprocess.Popen([sys.executable, "-c", _PARENT_DEATH_SHIM, *command], env=env, cwd=cwd,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace", bufsize=1, start_new_session=True)
        self.reader = threading.Thread(target=_read_output, args=(self.proc.stdout, log_path, self.tail, on_line),
                                       daemon=True)
        self.reader.start()
        self.seen: dict[int, psutil.Process] = {}  # every descendant ever seen: some run in sessions of their own

    def wait(self, limit_s: float | None = None, tick: Callable[[], None] | None = None) -> ChildOutcome:
        """Until the child exits or `limit_s` (from its start) passes; then stop whatever is left. `tick` is
        called between polls (every POLL_S: a look at what the child has written so far).
        Any exception here (KeyboardInterrupt included) stops the whole tree, then re-raises."""
        timed_out = False
        try:
            while True:
                _remember_descendants(self.proc.pid, self.seen)
                if tick is not None:
                    tick()
                if limit_s is not None and time.perf_counter() - self.start > limit_s:
                    timed_out = True
                    break
                try:
                    self.proc.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
        finally:
            # Runs on success too: nothing the child started may outlive it.
            killed = self.stop()
        return ChildOutcome(returncode=None if timed_out else self.proc.returncode, timed_out=timed_out,
                            seconds=time.perf_counter() - self.start, tail=list(self.tail), killed=killed)

    def pids(self) -> set[int]:
        """The child's process tree as it is now (the child, and what it started and still runs)."""
        found: dict = {}
        _remember_descendants(self.proc.pid, found)
        return {self.proc.pid, *found}

    def stop(self) -> int:
        """Stop the child and everything it started; how many of them were still running."""
        killed = kill_tree(self.proc, self.seen)
        self.reader.join(timeout=KILL_GRACE_S)
        return killed


def supervise(command: list[str], *, env: dict | None = None, limit_s: float | None = None,
              on_line: Callable[[str], bool] | None = None, log_path: Path | None = None,
              cwd: str | Path | None = None, tick: Callable[[], None] | None = None) -> ChildOutcome:
    """Run `command` (python_command(...), or any program on PATH) to its end, within `limit_s`.

    `on_line(text)` sees every output line; returning True claims it (it is not kept in the
    tail). Any exception here (KeyboardInterrupt included) stops the whole tree, then re-raises.
    """
    return Child(command, env=env, on_line=on_line, log_path=log_path, cwd=cwd).wait(limit_s, tick)


def _read_output(stream, log_path: Path | None, tail: deque, on_line) -> None:
    """Drain the child's output to the end, whatever happens to the log: a child whose pipe is not
    read blocks. A log that cannot be written (a full disk) is given up with a line in the tail."""
    log = None
    try:
        log = open(log_path, "w") if log_path else None
    except OSError as exc:
        tail.append(f"(log {log_path} not written: {exc.strerror or exc})")
    try:
        for line in stream:
            if log:
                try:
                    log.write(line)
                    log.flush()
                except OSError as exc:
                    tail.append(f"(log {log_path} cut short: {exc.strerror or exc})")
                    log = None
            text = line.rstrip("\n")
            if not (on_line and on_line(text)):
                tail.append(text)
    finally:
        if log:
            with contextlib.suppress(OSError):
                log.close()


def _remember_descendants(pid: int, seen: dict) -> None:
    try:
        for child in psutil.Process(pid).children(recursive=True):
            seen.setdefault(child.pid, child)
    except psutil.Error:
        pass


def kill_tree(proc: subprocess.Popen, seen: dict | None = None) -> int:
    """SIGTERM the child's session (so torchrun or papermill can stop their own children), then
    SIGKILL whatever is left of every process it ever started. Returns how many were running."""
    seen = {} if seen is None else seen
    _remember_descendants(proc.pid, seen)
    running = sum(1 for p in seen.values() if _running(p)) + (proc.poll() is None)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=KILL_GRACE_S)
    alive = [p for p in seen.values() if _running(p)]
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    # Gone or a zombie: a zombie whose parent has exited may never be reaped here (a container
    # without an init), so psutil.wait_procs would wait out its whole timeout for it.
    deadline = time.perf_counter() + KILL_GRACE_S
    while any(_running(p) for p in alive) and time.perf_counter() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)
    return running


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
