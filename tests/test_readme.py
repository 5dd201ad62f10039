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
def test_readme_cpu_commands_run_as_written(tmp_path, capsys, monkeypatch):
    """The first command through the installed `bench` script, as typed in a shell; the others through the
    same main in this process (in the same folder, with the same arguments): each a process importing torch
    only to run what the script's main runs here. A report's kernel is its own process still."""
    from conftest import bench_here
    # A scratch working directory that looks like the repository, so outputs land in tmp_path.
    for name in ("README.md", "docs", "examples", "notebooks", "params", "pyproject.toml"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "MPLBACKEND": "Agg"}
    first, *rest = COMMANDS
    proc = subprocess.run(shlex.split(first), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{first}\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    for command in rest:
        program, *args = shlex.split(command)
        assert program == "bench", command  # a README command of another program would need its own process
        proc = bench_here(capsys, *args)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}"
    assert (tmp_path / "outputs" / "quick" / "report.html").stat().st_size > 10_000
    assert len((tmp_path / "outputs" / "quick" / "results.csv").read_text().splitlines()) == 1 + 2 + 1


def first_example(text: str) -> tuple[list[str], list[str]]:
    """The README's first sample output: its command's arguments, and the lines it shows."""
    block = re.search(r"What a result looks like.*?```text\n(.*?)```", text, flags=re.S).group(1).splitlines()
    assert block[0].startswith("$ bench run ")
    return shlex.split(block[0][len("$ bench "):]), block[1:]


def shape(lines: list[str]) -> list[list[str]]:
    """What a sample output shows, less what differs from one machine or moment to the next: numbers, paths,
    the device's name, and the marks a disturbed run adds (a quiet machine's output has none)."""
    shown = []
    for line in lines:
        if re.search(r": warm-up(: first step| step \d+ done)", line):  # a warm-up of 20 s or more, step by step
            continue
        line = re.sub(r"\[(\w+), DISTURBED: [^\]]*\]", r"[\1]", line)  # a repeat's progress line
        line = re.sub(r"\s*DISTURBED: .*$|\s*\d+ of \d+ disturbed$|\s*disturbed by$|, \d+ disturbed \(.*$", "", line)
        line = re.sub(r"^(\S+ \S+ \S+ batch \d+ x\d+ on ).*$", r"\1DEVICE", line)
        line = re.sub(r"\S*/\S*", "PATH", line)
        shown.append(re.sub(r"[-+]?\d[\d.,]*(e[-+]?\d+)?", "#", line).split())
    return shown


def test_the_first_sample_output_is_what_the_command_prints(capsys, tmp_path, monkeypatch):
    # Its columns and summary lines had drifted from what bench run prints. The same command, shortened (a
    # smaller input, fewer steps), prints what the README shows, quiet machine or busy.
    from conftest import bench_here
    monkeypatch.delenv("COLUMNS", raising=False)  # whole lines, as in a wide terminal
    args, shown = first_example((ROOT / "README.md").read_text())
    quicker = ["--width", "32", "--height", "32", "--batch-size", "2", "--steps", "2", "--warmup-steps", "1",
               "--min-seconds", "0", "--out", str(tmp_path / "quick")]
    done = bench_here(capsys, *args, *quicker)
    assert done.returncode == 0, done.stderr
    printed = (done.stderr + done.stdout).splitlines()  # in a terminal: the progress, then the table
    assert shape(printed) == shape(shown), "\n".join(printed)
