"""bench_captured: `bench ARGS` through bench's main in the test's process with its stdout and stderr captured, as
conftest's bench_here gives them, for a module fixture (which has no capsys): one sweep read by several tests.
The command's own process start (a second torch import, 4-7 s of CPU) is not what those tests check; a sweep's
executions still run in processes of their own."""
import contextlib
import io
import subprocess

from bench_core.cli import main


def exit_status(*args: str) -> int | str | None:
    """`bench ARGS` through bench's main in this process: its exit status (argparse's --help and usage errors
    end in SystemExit, whose code it is)."""
    try:
        return main(list(args))
    except SystemExit as stop:
        return stop.code


def bench_captured(*args: str) -> subprocess.CompletedProcess:
    """Exit status, stdout and stderr of `bench ARGS` run here; stderr is no terminal (as in a CI log)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = exit_status(*args)
    return subprocess.CompletedProcess(["bench", *args], code, out.getvalue(), err.getvalue())
