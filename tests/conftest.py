"""Shared test set-up: tiny configurations that run the real code in a second or two."""
import collections
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
# One OpenMP thread per test process (and the sweeps, kernels and workers it starts): the suite
# runs three pytest workers on two cores (pyproject addopts), and two workers each spinning two
# OpenMP threads made it slower than one worker. Nothing here measures multi-threaded speed.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from bench_core import BenchConfig  # noqa: E402
from bench_core.capability import CPU_KIND_VARIABLE, CPU_KINDS  # noqa: E402
from bench_captured import exit_status  # noqa: E402 - bench's main in this process, its exit status
from bench_core.files import skip_iri_grammars  # noqa: E402

skip_iri_grammars()  # as bench's own processes do: the test modules import nbformat (0.8 s a worker)

TINY = dict(model="resnet18", width=32, height=32, batch_size=2, steps=2, warmup_steps=1,
            repeats=1, min_seconds=0, device="cpu")


def tiny(**changes) -> BenchConfig:
    """A real configuration small enough for CI: resnet18, 32 px, batch 2, 2 steps."""
    return BenchConfig(**{**TINY, **changes})


@pytest.fixture
def tiny_config():
    return tiny


def forget_cpu_answers() -> None:
    """Drop what this process has read of its CPU (its kind, its precisions' answers, the environment
    columns), so that the next reading sees BENCH_CPU_AS as it is now."""
    from bench_core import capability
    from bench_core.measure import environment
    capability.cpu_facts.cache_clear()
    environment.machine_facts_forget()


@pytest.fixture
def real_cpu(monkeypatch):
    """A test of this CPU's own detection (torch's dispatch level, oneDNN's checks, the timed block) reads the
    machine itself, even in a suite run as another kind (BENCH_CPU_AS=KIND make test)."""
    monkeypatch.delenv(CPU_KIND_VARIABLE, raising=False)
    forget_cpu_answers()
    yield
    forget_cpu_answers()


@pytest.fixture(params=list(CPU_KINDS))
def cpu_kind(request, monkeypatch):
    """A test whose answer depends on what the CPU runs natively runs once per CPU kind the suite meets
    (capability.CPU_KINDS: Intel with AMX, Zen 4/5 with AVX512_BF16, AVX-512 alone, AVX2 alone), through
    BENCH_CPU_AS: in this process and in every process it starts. The kernels stay this CPU's."""
    monkeypatch.setenv(CPU_KIND_VARIABLE, request.param)
    forget_cpu_answers()
    yield request.param
    forget_cpu_answers()  # (the variable is restored after this, by monkeypatch: nothing reads it between)


@contextlib.contextmanager
def cpu_hog():
    """A process spinning on one core, started as another user's job would be: through a shell that exits at
    once, so it is nobody's child here (the sampler counts this process's own children as its work, not as
    other processes). Busy before this yields it; killed after."""
    import psutil
    started = subprocess.run(["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True)
    busy = psutil.Process(int(started.stdout))
    try:
        assert busy not in psutil.Process().children(recursive=True)
        while busy.cpu_times().user < 0.3:  # busy before the first window opens
            time.sleep(0.05)
        yield busy
    finally:
        busy.kill()
        busy.wait()


def sigint_at_default() -> None:
    """preexec_fn of a child that takes Ctrl-C as a terminal's foreground command does: with SIGINT at its
    default. A suite started in the background (`make test &`, nohup) inherits SIGINT ignored, and Python
    keeps an ignored SIGINT ignored, so the child would never see the test's SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def bench_here(capsys, *args: str) -> subprocess.CompletedProcess:
    """`bench ARGS` through the same main in this test's process: exit status, stdout and stderr.
    For the tests where the command's own process start (a second torch import, 1.6 s) is not what
    they check; a sweep's executions still run in processes of their own."""
    code = exit_status(*args)
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["bench", *args], code, out.out, out.err)


# A test marked `alone` measures something that needs the cores to itself (the serving client's own CPU
# share, an A/A verdict): while it runs (setup, call and teardown), no other test of this
# session runs. A verdict on timings (bench diff of the same code twice, where a ladder saturates) is no test
# at all: those tests assert that the verdict agrees with what was measured, and need no quiet machine.
# Every test holds a shared lock on one file per session; an `alone` test holds it exclusively, so
# the other workers wait between their tests. A second file is the turnstile every test passes
# before it takes the shared lock: an `alone` test holds it while it waits, so no new test starts
# then (with more than two workers, e.g. `-n 4` on a larger machine, the others' tests would otherwise
# overlap without end and starve it: 135 s with three).
# A part of a test can have the machine to itself the same way (cores_to_itself): a measurement in a fixture
# that several tests read (test_memory's allocator count, read by six) waits for the others once, not six times.
# Processes outside the suite are not ours to stop: the test still says what they did (noise flags).
try:  # POSIX; elsewhere tests simply run side by side
    import fcntl
except ImportError:  # pragma: no cover - not on the machines the tests run on
    fcntl = None


def pytest_report_header(config):
    """The machine the suite ran on, at the top of its output (a CI log, a note): its time and the tests that hold
    only on some CPU kinds are read against it."""
    from bench_core import capability, host
    facts = capability.cpu_facts()
    dtypes = host.cpu_columns(facts.flags, ())["cpu_dtype_flags"] or "none"
    return (f"cpu: {host.cpu_model()}, {os.cpu_count()} cores; torch dispatch {facts.torch_capability}, "
            f"bf16/fp16 ISA flags: {dtypes}" + "".join(f"; {k}={v}" for k, v in facts.dispatch_env))


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: runs while no other test of this session runs (a quiet machine)")
    config.addinivalue_line("markers", "waits: a test file that mostly waits (a scheduler, timeouts); it starts "
                                       "first, so the other workers have the cores meanwhile")
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        # xdist's controller: name the session's run here (xdist would otherwise pick one), so that
        # pytest_unconfigure knows the lock files its workers made and removes them.
        config.option.testrunuid = config.option.testrunuid or uuid.uuid4().hex


def lock_files(run: str) -> tuple[str, str]:
    """The `alone` lock and its turnstile of one xdist session (see pytest_runtest_protocol)."""
    folder = tempfile.gettempdir()
    return (os.path.join(folder, f"notebook-bench-tests-{run}.lock"),
            os.path.join(folder, f"notebook-bench-tests-{run}.turnstile"))


def pytest_unconfigure(config):
    run = getattr(config.option, "testrunuid", None)
    if run and not hasattr(config, "workerinput"):  # the controller, after every worker has stopped
        for path in lock_files(run):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


def pytest_collection_modifyitems(config, items):
    """The order xdist hands files out in (`--no-loadscope-reorder` keeps it), longest first as far as
    the markers tell: files marked `waits` first, then by their number of `slow` tests, then by their
    number of tests (xdist's own order). Started last, the SLURM file's 60-90 s of waiting on the
    scheduler became the suite's tail; so did two files of one or two slow tests each (the README's
    commands, JupyterLab: 13 s each) while the other workers had nothing left."""
    per_file = collections.Counter(item.path for item in items)
    slow_per_file = collections.Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: (item.get_closest_marker("waits") is None, -slow_per_file[item.path],
                                 -per_file[item.path], str(item.path)))


def pytest_collection_finish(session):
    """Every test module is imported now (torch, transformers, pandas, hypothesis: half a million
    objects that live as long as the process). Freeze them out of the garbage collector's reach:
    each run ends with a full gc.collect (a clean state for the next configuration), which would
    otherwise walk all of them every time, about 0.2 s a run. What the tests make is collected
    as before."""
    import gc
    gc.collect()
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # set in every worker of one xdist session
    if fcntl is None or not run:
        yield
        return
    lock_path, turnstile_path = lock_files(run)
    with open(lock_path, "a") as lock, open(turnstile_path, "a") as turnstile:
        _take(lock, turnstile, fcntl.LOCK_EX if item.get_closest_marker("alone") else fcntl.LOCK_SH)
        _HELD[:] = [lock, turnstile]
        try:
            yield
        finally:
            _HELD.clear()
            fcntl.flock(lock, fcntl.LOCK_UN)


_HELD: list = []  # the lock and turnstile of the test this worker runs now


def _take(lock, turnstile, how: int) -> None:
    """The session lock, shared or exclusive, through the turnstile (held while an exclusive taker waits)."""
    fcntl.flock(turnstile, fcntl.LOCK_EX)
    try:
        fcntl.flock(lock, how)
    finally:
        fcntl.flock(turnstile, fcntl.LOCK_UN)


@contextlib.contextmanager
def cores_to_itself():
    """Inside a test (its fixture, a part of it): while the block runs, no other test of this session runs,
    as for an `alone` test's whole run. For a measurement that needs a quiet machine inside a fixture that
    several tests share: the session waits for the measurement once, not for each test that reads it. The
    shared lock is given up before the turnstile is taken, so two tests asking at once wait in turn."""
    if not _HELD:  # not under xdist, or no lock: tests run one at a time anyway
        yield
        return
    lock, turnstile = _HELD
    fcntl.flock(lock, fcntl.LOCK_UN)
    _take(lock, turnstile, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(lock, fcntl.LOCK_SH)  # the rest of the test, beside the others again
