"""`bench selftest` on this CPU, for real, as CI runs it: exit 0, the JSON checklist, GPU checks
skipped; and the GPU checks' own logic, fed rows as a GPU child reports them."""
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from bench_core.scenarios import selftest

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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["selftest.json"]  # --out FILE writes FILE, nothing beside it
    if not torch.cuda.is_available():
        gpu = [c for c in report["checks"] if not c["name"].startswith(("cpu", "tf32", "a row"))]
        assert gpu and all(c["status"] == "skipped" and "no CUDA device" in c["reason"] for c in gpu)
    # The printed checklist says the same, one line per check.
    assert "[SKIPPED]" in proc.stdout and "checklist written to" in proc.stdout
    assert "precisions on cpu:" in proc.stdout and "fp32      native" in proc.stdout


# -- the GPU checks' logic, fed rows as a GPU child would report them (no GPU here) ---------------


def gpu_run(precision="amp-bf16", **row):
    base = {"status": "ok", "samples_per_s": 1000.0, "precision": precision, "tf32_enabled": precision == "tf32",
            "mfu": 0.4, "mfu_rejected": None, "peak_mem_allocated_bytes": 2**30, "gpu_memory_bytes": 80 * 2**30,
            "telemetry_note": None, "energy_j": 12.0, "energy_method": "nvml-counter", "noise_flags": None}
    return {"config": {"mode": "train", "precision": precision}, "row": {**base, **row},
            "tf32_unreadable_after": None}


def device_checklist(runs) -> dict:
    checklist = selftest.Checklist(say=lambda line: None)
    selftest.device_checks(checklist, "cuda:0", {"runs": runs}, 1.0)
    return {c.name: c for c in checklist.checks}


def test_an_mfu_above_one_fails_the_check_though_mfu_is_empty():
    # efficiency.derive moves an MFU above 1 to mfu_rejected and leaves mfu empty
    checks = device_checklist([gpu_run(), gpu_run("fp16", mfu=None, mfu_rejected=1.7)])
    assert checks["cuda:0 MFU <= 1"].status == selftest.FAIL
    assert "1.700" in checks["cuda:0 MFU <= 1"].reason
    assert device_checklist([gpu_run(), gpu_run("fp16", mfu=None)])["cuda:0 MFU <= 1"].status == selftest.PASS


def test_energy_on_a_mig_slice_is_skipped_not_failed():
    note = "power and energy empty: this is a MIG slice and NVML measures only the whole GPU (every slice's work)"
    checks = device_checklist([gpu_run(energy_j=None, energy_method=None, telemetry_note=note)])
    assert checks["cuda:0 NVML energy measured"].status == selftest.SKIPPED
    checks = device_checklist([gpu_run(energy_j=None, energy_method=None)])
    assert checks["cuda:0 NVML energy measured"].status == selftest.FAIL


def test_the_search_and_ddp_checks_use_a_precision_the_gpu_runs(monkeypatch):
    # Device properties only (no GPU here): a P100 cannot run bf16 GEMMs, a V100 can (emulated).
    import types
    props = {"major": 6, "minor": 0, "name": "Tesla P100-PCIE-16GB"}
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(**props))
    assert selftest.mixed_precision() == "amp-fp16"
    props.update(major=7, name="Tesla V100-SXM2-16GB")
    assert selftest.mixed_precision() == "amp-bf16"
