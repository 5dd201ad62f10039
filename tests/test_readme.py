"""The README's CPU-safe shell blocks (marked `<!-- ci: run -->`) run as a new user types them."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- ci: run -->"


def marked_commands(text: str) -> list[str]:
    commands = []
    for block in re.findall(re.escape(MARK) + r"\s*```bash\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        commands += [line.split(" #")[0].strip() for line in joined.splitlines()
                     if line.strip() and not line.strip().startswith("#")]
    return commands


COMMANDS = marked_commands((ROOT / "README.md").read_text())


def test_the_readme_has_a_block_to_try():
    assert len(COMMANDS) >= 5


@pytest.mark.slow
def test_readme_cpu_commands_run_as_written(tmp_path):
    # A scratch working directory that looks like the repository, so outputs land in tmp_path.
    for name in ("README.md", "docs", "examples", "notebooks", "params", "pyproject.toml"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "MPLBACKEND": "Agg"}
    for command in COMMANDS:
        proc = subprocess.run(shlex.split(command), cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}"
    assert (tmp_path / "outputs" / "quick" / "report.html").stat().st_size > 10_000
    assert len((tmp_path / "outputs" / "quick" / "results.csv").read_text().splitlines()) == 1 + 2 + 1
