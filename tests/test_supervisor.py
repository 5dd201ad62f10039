"""The one child-process supervisor (sweeps, torchrun launches and fresh-process probes use it):
real processes, real signals; what is checked is what a user would check with `ps` afterwards."""
import signal

import psutil
import pytest

from bench_core.launch.supervisor import python_command, supervise

# A child that starts a grandchild in a session of its own (as Jupyter starts its kernel and
# torchrun its workers), says so, and then waits forever.
FAMILY = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
print("grandchild", grandchild.pid, flush=True)
print("progress: half way", flush=True)
time.sleep(600)
"""


def _pids(tail: list[str]) -> list[int]:
    return [int(line.split()[1]) for line in tail if line.startswith("grandchild")]


def test_time_limit_stops_the_whole_tree_and_says_so(tmp_path):
    claimed = []
    outcome = supervise(python_command("-c", FAMILY), limit_s=3, log_path=tmp_path / "child.log",
                        on_line=lambda line: line.startswith("progress:") and not claimed.append(line))
    assert outcome.timed_out and outcome.returncode is None
    assert outcome.killed >= 2  # the child and its grandchild were still running
    (grandchild,) = _pids(outcome.tail)
    assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
    assert claimed == ["progress: half way"]  # claimed lines go to on_line, not to the tail
    assert "progress: half way" not in outcome.tail
    assert "grandchild" in (tmp_path / "child.log").read_text()  # the log has every line


def test_exit_status_and_last_line_come_back():
    outcome = supervise(python_command("-c", "import sys; print('first'); print('the reason'); sys.exit(3)"))
    assert (outcome.returncode, outcome.timed_out, outcome.last_line()) == (3, False, "the reason")
    killed = supervise(python_command("-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    assert killed.killed_by_sigkill  # what a probe reports as out of memory


def test_ctrl_c_while_waiting_stops_the_children_then_goes_on(tmp_path):
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.alarm(3)  # Ctrl-C arrives while the supervisor waits
    try:
        with pytest.raises(KeyboardInterrupt):
            supervise(python_command("-c", FAMILY), log_path=tmp_path / "child.log")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    (grandchild,) = [int(line.split()[1]) for line in (tmp_path / "child.log").read_text().splitlines()
                     if line.startswith("grandchild")]
    assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
