"""A real one-node SLURM cluster for the tests: munged, slurmctld and slurmd started from a
slurm.conf written into a temporary folder (state, spool, pid and log files all in it), and
stopped afterwards with everything they started.

Debian's `slurm-wlm` and `munge` packages provide the daemons (`make test` installs them as
root). The daemons run in the foreground as children of the test process, with Linux's
PR_SET_PDEATHSIG, so that even a test process killed outright takes them down; `stop()` ends
the jobs, then the daemons, then any process they left, and returns what it could not end.

    python tests/slurm_cluster.py            # start one, print how to use it, stop it on Enter
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "sinfo", "squeue", "scancel")
PARTITION = "debug"
MAX_TIME_MIN = 10  # the partition's time limit: a longer --time is refused by bench slurm


def skip_reason() -> str | None:
    """Why a real cluster cannot run here, or None."""
    if not sys.platform.startswith("linux"):
        return "SLURM tests run on Linux only"
    if os.geteuid() != 0:
        return "SLURM tests start slurmctld/slurmd as root (SlurmUser=root); not root here"
    missing = [name for name in DAEMONS + CLIENTS if shutil.which(name) is None]
    if missing:
        return (f"SLURM not installed ({', '.join(missing)} missing): `make test` installs "
                "slurm-wlm and munge when run as root")
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def machine_node_line(node: str) -> str:
    """`NodeName=... CPUs=... RealMemory=...` of this machine, as slurmd itself measures it."""
    found = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout.split()
    fields = [f for f in found if f.split("=")[0] in
              ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")]
    return " ".join([f"NodeName={node}", *fields, "State=UNKNOWN"])


class SlurmCluster:
    """One node (this machine, its CPUs and memory), one partition, state and logs in `folder`."""

    def __init__(self, folder: Path):
        self.folder = Path(folder).resolve()
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.folder / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: dict[str, subprocess.Popen] = {}
        self.partition = PARTITION

    # -- set-up --------------------------------------------------------------------------

    def write_files(self) -> None:
        f = self.folder
        for sub in ("state", "spool", "log", "munge"):
            (f / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(f / "munge", 0o700)  # munged refuses a key or socket others could reach
        key = f / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.conf.write_text("\n".join([
            "ClusterName=benchtest",
            f"SlurmctldHost={self.node}",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge",
            # cred_expire: how long a requeued job waits before it may start again (default 120 s)
            f"AuthInfo=socket={f / 'munge' / 'munge.socket'},cred_expire=5",
            f"StateSaveLocation={f / 'state'}", f"SlurmdSpoolDir={f / 'spool'}",
            f"SlurmctldPidFile={f / 'slurmctld.pid'}", f"SlurmdPidFile={f / 'slurmd.pid'}",
            f"SlurmctldLogFile={f / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={f / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "ReturnToService=2", "MpiDefault=none", "JobRequeue=1",
            "KillWait=10",  # SIGTERM, then SIGKILL 10 s later: time enough to record what finished
            "MinJobAge=600",  # finished jobs stay visible to scontrol for 10 minutes
            "SchedulerType=sched/backfill",
            # A requeued task may start again once cred_expire has passed, but only when a scheduling
            # pass next looks at it: the main loop's every 60 s and backfill's every 30 s by default.
            "SchedulerParameters=sched_interval=1,bf_interval=1",
            machine_node_line(self.node),
            f"PartitionName={self.partition} Nodes={self.node} Default=YES MaxTime={MAX_TIME_MIN} State=UP",
        ]) + "\n")

    def start(self, timeout_s: float = 60) -> "SlurmCluster":
        self.write_files()
        m = self.folder / "munge"
        self._daemon("munged", ["munged", "--foreground", "--force", f"--key-file={m / 'munge.key'}",
                                f"--socket={m / 'munge.socket'}", f"--pid-file={m / 'munged.pid'}",
                                f"--log-file={self.folder / 'log' / 'munged.log'}",
                                f"--seed-file={m / 'munged.seed'}"])
        self._wait(lambda: (m / "munge.socket").exists(), timeout_s, "munged to create its socket")
        self._daemon("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self.run("scontrol", "ping", check=False).returncode == 0, timeout_s,
                   "slurmctld to answer scontrol ping")
        self._daemon("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.node])
        self._wait(lambda: self.node_state() == "idle", timeout_s, f"sinfo to show node {self.node} idle")
        return self

    def _daemon(self, name: str, command: list[str]) -> None:
        log = open(self.folder / "log" / f"{name}.out", "w")
        self.procs[name] = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        log.close()

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited while waiting for {what}: {self.logs()}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}: {self.logs()}")

    def logs(self, lines: int = 15) -> str:
        parts = []
        for path in sorted((self.folder / "log").glob("*")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    # -- use -----------------------------------------------------------------------------

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        """A SLURM client command against this cluster."""
        return subprocess.run(list(command), env=self.env, capture_output=True, text=True, check=check, timeout=60)

    def node_state(self) -> str:
        done = self.run("sinfo", "-h", "-n", self.node, "-o", "%T", check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    def job(self, job_id: str) -> list[dict]:
        """`scontrol show job -o` of a job (an array: one dict per task), fields as strings."""
        out = self.run("scontrol", "show", "job", "-o", str(job_id)).stdout
        return [dict(item.split("=", 1) for item in line.split() if "=" in item)
                for line in out.splitlines() if line.strip()]

    def queue(self) -> list[str]:
        """Job ids SLURM still has pending or running."""
        return self.run("squeue", "-h", "-o", "%i").stdout.split()

    # -- tear-down -------------------------------------------------------------------------

    def stop(self) -> list[str]:
        """Cancel every job, stop the daemons and whatever they started; what is still alive after."""
        with contextlib.suppress(Exception):
            self.run("scancel", "--full", "--partition", self.partition, check=False)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if not self.queue():
                    break
            time.sleep(0.5)
        started = []
        for proc in self.procs.values():
            with contextlib.suppress(psutil.Error):
                started += psutil.Process(proc.pid).children(recursive=True)
        for name in reversed(DAEMONS):  # slurmd, slurmctld, munged
            proc = self.procs.get(name)
            if proc and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        for child in started:  # slurmstepd and job processes that outlived slurmd
            with contextlib.suppress(psutil.Error):
                child.kill()
        psutil.wait_procs(started, timeout=5)
        return self.leftovers(started)

    def leftovers(self, started=()) -> list[str]:
        """Processes of this cluster still alive: the daemons, what they started, and anything
        whose command line names this cluster's folder."""
        alive = []
        procs = [psutil.Process(p.pid) for p in self.procs.values() if p.poll() is None] + list(started)
        for proc in psutil.process_iter(["cmdline"]):
            if str(self.folder) in " ".join(proc.info["cmdline"] or []) and proc.pid != os.getpid():
                procs.append(proc)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
        return sorted(set(alive))


if __name__ == "__main__":
    reason = skip_reason()
    if reason:
        sys.exit(reason)
    import tempfile
    cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="slurm-cluster-")))
    try:
        cluster.start()
        print(f"cluster up: export SLURM_CONF={cluster.conf}\n{cluster.run('sinfo').stdout}Enter stops it.")
        input()
    finally:
        print("left running:", cluster.stop() or "nothing")
