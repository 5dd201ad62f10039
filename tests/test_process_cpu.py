"""benchmarks/process_cpu: every Python process started with it on PYTHONPATH writes its own CPU as it ends, however
it ends, and ends as it would have without it."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "benchmarks" / "process_cpu"


def _env(out: Path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(FOLDER), os.environ.get("PYTHONPATH", "")]),
            "PROCESS_CPU_OUT": str(out)}


def test_a_process_writes_its_cpu_at_exit_at_os_exit_and_at_sigterm_and_ends_as_it_would(tmp_path):
    out = tmp_path / "procs.jsonl"
    env = _env(out)
    spin = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    plain = subprocess.run([sys.executable, "-c", spin + "import json"], env=env)
    quick = subprocess.run([sys.executable, "-c", "import os; os._exit(3)"], env=env)
    waiting = subprocess.Popen([sys.executable, "-c", "import sys, time; print('up', flush=True); time.sleep(60)"],
                               env=env, stdout=subprocess.PIPE, text=True)
    assert waiting.stdout.readline() == "up\n"
    started = time.monotonic()
    waiting.send_signal(signal.SIGTERM)
    assert waiting.wait(timeout=30) == -signal.SIGTERM and time.monotonic() - started < 10
    assert (plain.returncode, quick.returncode) == (0, 3)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["ended_by"] for r in records] == ["exit", "os._exit", "SIGTERM"]
    assert records[0]["cpu_s"] >= 0.3 and records[0]["argv"][1] == "-c" and "torch" not in records[0]["imported"]
    table = subprocess.run([sys.executable, str(FOLDER), str(out)], capture_output=True, text=True, check=True).stdout
    assert table.startswith("3 processes,") and "-c import time" in table and "-c import os; os._exit(3)" in table


def test_without_its_variable_a_process_writes_nothing(tmp_path):
    env = {**_env(tmp_path / "procs.jsonl"), "PROCESS_CPU_OUT": ""}
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    assert not (tmp_path / "procs.jsonl").exists()


def test_each_process_is_named_by_what_it_ran():
    sys.path.insert(0, str(FOLDER.parent))
    try:
        from process_cpu.__main__ import kind
    finally:
        sys.path.remove(str(FOLDER.parent))
    python = sys.executable
    assert kind([python, "-u", "-m", "bench_core", "run", "--model", "resnet18"]) == "bench run"
    assert kind([python, "/venv/bin/bench", "sweep", "x.yaml"]) == "bench sweep"
    assert kind([python, "-m", "ipykernel_launcher", "-f", "k.json"]) == "-m ipykernel_launcher"
    assert kind([python, "/x/torch/distributed/run.py", "--nproc-per-node", "2"]) == "run.py"
    assert kind([python, "-c", "\nimport sys\nprint(1)"]) == "-c import sys"
    assert kind([python]) == "python"


def test_the_import_floor_says_how_much_of_the_cpu_is_starting_the_processes(tmp_path):
    # Two processes as sitecustomize writes them: one that imported none of its libraries, one that imported pandas.
    out = tmp_path / "procs.jsonl"
    python = sys.executable
    out.write_text("".join(json.dumps({"argv": [python, "-c", code], "cpu_s": 5.0, "imported": imported,
                                       "test": ""}) + "\n"
                           for code, imported in (("import json", []), ("import pandas", ["pandas"]))))
    table = subprocess.run([sys.executable, str(FOLDER), str(out), "--floor", "1"], capture_output=True, text=True,
                           check=True).stdout
    floors = {line.split()[-1]: float(line.split()[4]) for line in table.splitlines()
              if line.strip().endswith(("-c import json", "-c import pandas"))}
    assert 0 <= floors["json"] < floors["pandas"] < 5.0, table  # an interpreter alone, then one importing pandas
    (line,) = [line for line in table.splitlines() if line.startswith("import floor: ")]
    floor = float(line.split()[2])  # the two floors' sum, each printed to 0.01 s
    assert abs(floor - floors["json"] - floors["pandas"]) <= 0.06 and " of the 10 CPU s " in line, line
    rest = float(line.split("the rest, ")[1].split(" s, is their work")[0])
    assert abs(rest - (10 - floor)) <= 0.6, line
