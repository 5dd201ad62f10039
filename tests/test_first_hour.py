"""What a new user meets in the first hour (issue 62): a refused command leaves nothing behind and says
nothing it did not do, every mistake of a file is said at once, messages are true, disturbed figures say
so wherever they are printed, and labels name only what applies."""
from pathlib import Path

import pytest

from conftest import bench_here

SWEEP_WITH_A_BAD_VALUE = """name: refused
grid:
  model: [resnet18]
  precision: [fp64]
settings:
  device: cpu
"""


def every_path(*roots: Path) -> set[str]:
    return {str(p) for root in roots for p in root.rglob("*")}


@pytest.mark.parametrize("command", [
    "ladder --model llama-tiny --engine vllm --out out",
    "run --mode serve --model llama-tiny --engine vllm --out out",
    "run --model resnet18 --device cpu --batch-size 0 --out out",
    "sweep refused.yaml --out out",
    "compare --model resnet18 --device cpu --b compile=sometimes --out out",
    "find-batch --model resnet18 --device cpu --steps 3 --out out",
    "memory --model resnet18 --device-memory-gib 0",
    "predict --from nothing-here --gpu H100-SXM5-80GB",
    "report nothing-here --out out/report.html",
    "diff nothing-here nothing-there --html out/diff.html",
    "slurm refused.yaml --out out",
    "acceptance --budget-s 0 --out out",
])
def test_a_refused_command_writes_nothing_and_says_only_why(capsys, tmp_path, monkeypatch, command):
    # The engine is not installed here (vllm): it used to say "serve: starting vllm", write a model folder
    # to the cache and an empty serving/logs folder, then refuse.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("BENCH_SERVING_DIR", raising=False)
    (tmp_path / "refused.yaml").write_text(SWEEP_WITH_A_BAD_VALUE)
    before = every_path(tmp_path)
    done = bench_here(capsys, *command.split())
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert every_path(tmp_path) == before, command
    assert done.stdout == "" and done.stderr.count("\n") == 1 and " error: " in done.stderr, done.stderr
