"""Each Python process's own CPU, written when it ends: where a suite's (or a sweep's) CPU goes, process by process.

Put this folder first on PYTHONPATH and name a file in PROCESS_CPU_OUT; every Python process that inherits both
(the pytest workers, bench runs, torchrun agents and workers, notebook kernels, SLURM tasks) appends one JSON line
as it ends: its command, its CPU (RUSAGE_SELF, user + system) and wall time, which heavy libraries it imported,
and the test that started it (PYTEST_CURRENT_TEST). A process ends here through atexit, os._exit (torchrun's
workers, multiprocessing) or a SIGTERM it had left at the default (the handler writes the line, then dies of the
signal as it would have); one killed outright writes nothing: SIGKILL, and so the notebook kernels of sweeps
and reports, which papermill shuts down "immediate" (benchmarks/suite_cpu.py counts them in their tests). Not for
timing: the handler makes a SIGTERM wait for the interpreter's next bytecode. `python benchmarks/process_cpu FILE` prints the table.

    PYTHONPATH=benchmarks/process_cpu:benchmarks PROCESS_CPU_OUT=/tmp/procs.jsonl .venv/bin/python -m pytest
    .venv/bin/python benchmarks/process_cpu /tmp/procs.jsonl --floor 3   # and how much of it is imports
"""
import atexit
import json
import os
import resource
import signal
import sys
import time

OUT_ENV = "PROCESS_CPU_OUT"
LIBRARIES = ("torch", "torchvision", "torch._dynamo", "transformers", "pandas", "matplotlib")
_STARTED = time.monotonic()
_written = []


def _write(how: str) -> None:
    if _written or not os.environ.get(OUT_ENV):
        return
    _written.append(how)
    own = resource.getrusage(resource.RUSAGE_SELF)
    record = {"argv": [str(a) for a in getattr(sys, "orig_argv", sys.argv)][:8], "pid": os.getpid(),
              "ppid": os.getppid(), "cpu_s": own.ru_utime + own.ru_stime, "wall_s": time.monotonic() - _STARTED,
              "ended_by": how, "imported": [name for name in LIBRARIES if name in sys.modules],
              "test": os.environ.get("PYTEST_CURRENT_TEST", "")}
    try:
        with open(os.environ[OUT_ENV], "a") as handle:  # one short line a process: appends do not interleave
            handle.write(json.dumps(record) + "\n")
    except OSError:
        pass


def _exit_writing(code, _exit=os._exit):
    _write("os._exit")
    _exit(code)


def _sigterm_writing(signum, frame):
    _write("SIGTERM")
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


if os.environ.get(OUT_ENV):
    atexit.register(_write, "exit")
    os._exit = _exit_writing
    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _sigterm_writing)
    except ValueError:  # not the main thread of the main interpreter
        pass
