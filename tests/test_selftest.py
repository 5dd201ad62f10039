"""`bench selftest` on this CPU, for real, as CI runs it: exit 0, the JSON checklist, GPU checks skipped."""
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def test_selftest_on_cpu_passes_and_skips_the_gpu_checks(tmp_path):
    out = tmp_path / "selftest.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-m", "bench_core", "selftest", "--out", str(out)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(out.read_text())
    checks = {c["name"]: c for c in report["checks"]}
    assert report["fail"] == 0 and report["pass"] >= 5
    for name in ("cpu fp32 train (resnet18, 32 px)", "cpu fp32 infer (resnet18, 32 px)",
                 "tf32 flags readable after the runs", "cpu MFU <= 1 or empty", "a row is written and reads back"):
        assert checks[name]["status"] == "pass", checks[name]
    assert "cuda.matmul.allow_tf32=False" in checks["tf32 flags readable after the runs"]["reason"]
    assert (tmp_path / "rows" / "results.csv").exists()
    if not torch.cuda.is_available():
        gpu = [c for c in report["checks"] if not c["name"].startswith(("cpu", "tf32", "a row"))]
        assert gpu and all(c["status"] == "skipped" and "no CUDA device" in c["reason"] for c in gpu)
    # The printed checklist says the same, one line per check.
    assert "[SKIPPED]" in proc.stdout and "checklist written to" in proc.stdout
    assert "precisions on cpu:" in proc.stdout and "fp32      native" in proc.stdout
