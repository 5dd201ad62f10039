"""The build records the project's commit in the package it builds, so that the rows of a package
installed with `pip install .` (or a wheel, or an sdist built from a checkout) name their commit as
rows run from a checkout do: bench_core/data/build.json, read by bench_core.measure.environment.

Everything else about the package is in pyproject.toml. The commit is BENCH_GIT_COMMIT when set,
else `git rev-parse` of the folder being built (with -dirty for uncommitted changes); an editable
install records nothing (it reads git when it runs), and neither does a build without either.
"""
import json
import os
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

RECORD = Path("bench_core", "data", "build.json")


def source_commit(folder: Path) -> str | None:
    if os.environ.get("BENCH_GIT_COMMIT"):
        return os.environ["BENCH_GIT_COMMIT"]
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0 or not head.stdout.strip():
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def record(path: Path, commit: str | None) -> None:
    """Write the record; without a commit, keep one already there (an sdist's, copied as package data)."""
    if commit:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"git_commit": commit}) + "\n")


class BuildPyRecordingCommit(build_py):
    def run(self):
        super().run()
        if not self.editable_mode:
            record(Path(self.build_lib) / RECORD, source_commit(Path(__file__).resolve().parent))


class SdistRecordingCommit(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        record(Path(base_dir) / RECORD, source_commit(Path(__file__).resolve().parent))


setup(cmdclass={"build_py": BuildPyRecordingCommit, "sdist": SdistRecordingCommit})
