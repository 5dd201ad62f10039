"""Faster only when still correct: a variant whose outputs stray beyond its precision's tolerance of
fp32 eager NCHW is 'wrong results' (bench compare exits 1, no speed verdict; the report's effect
tables give no ratio); a faithful one (amp-bf16 on a tiny resnet) passes, with its deviation
recorded. Real runs of tiny models on the CPU; no timing is asserted."""
import json

import pandas as pd
import pytest
import torch
from torch import nn

from bench_core.config.schema import BenchConfig
from bench_core.errors import EXIT_FAILED
from bench_core.results import fidelity
from bench_core.run.runner import run_here
from bench_core.summary.effects import compare_variants
from bench_core.workload.models import ModelSpec, register_model
from conftest import bench_here


class LoudNorm(nn.Module):
    """Activations in the thousands, then an RMS norm (as Llama and T5 have): their squares overflow
    float16's 65504, so in fp16 the mean square is inf, its inverse root 0 and every logit the bias
    alone. Finite, so no 'nan' row catches it: only the comparison with fp32 does."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(3 * 8 * 8, 64)
        nn.init.normal_(self.up.weight, std=100.0)  # inputs ~N(0, 1): activations ~1400, squares ~2e6
        self.head = nn.Linear(64, 1000)

    def forward(self, x):
        h = self.up(x.flatten(1))
        return self.head(h * torch.rsqrt(h.pow(2).mean(dim=1, keepdim=True) + 1e-6))


register_model(ModelSpec("test_loud_norm", "classification", lambda cfg: LoudNorm(), default_size=(8, 8, None)))

QUICK = ["--batch-size", "2", "--steps", "2", "--warmup-steps", "1", "--min-seconds", "0", "--device", "cpu",
         "--rounds", "2", "-q"]


def tiny(**over) -> BenchConfig:
    values = dict(model="resnet18", width=32, height=32, batch_size=2, steps=1, warmup_steps=1, repeats=1,
                  min_seconds=0, device="cpu")
    return BenchConfig.from_dict({**values, **over})


def test_compare_of_a_variant_that_changes_the_results_says_wrong_results_not_faster(capsys, tmp_path):
    done = bench_here(capsys, "compare", "--model", "test_loud_norm", "--mode", "infer", *QUICK,
                      "--b", "precision=fp16", "--out", str(tmp_path))
    assert done.returncode == EXIT_FAILED, done.stdout + done.stderr
    verdict = done.stdout.splitlines()[-1]
    assert verdict.startswith("B/A throughput: WRONG RESULTS - B (precision=fp16): outputs "), verdict
    assert "off fp32 eager NCHW" in verdict and "float16: cosine >= 0.999" in verdict
    assert not any(word in done.stdout for word in ("FASTER", "SLOWER", "NO CLEAR DIFFERENCE"))
    saved = json.loads(next((tmp_path / "compare").glob("*.json")).read_text())
    assert saved["verdict"] == "wrong results" and saved["ratio"] is None
    rows_b = json.loads((tmp_path / "runs" / saved["run_id_b"] / "rows.json").read_text())
    assert {r["output_check"] for r in rows_b} == {"wrong results"} and {r["status"] for r in rows_b} == {"ok"}
    assert rows_b[0]["output_rel_error"] > 0.5 and rows_b[0]["output_cosine"] < 0.9  # not a rounding matter
    rows_a = json.loads((tmp_path / "runs" / saved["run_id_a"] / "rows.json").read_text())
    assert rows_a[0]["output_check"] is None  # fp32 eager NCHW is the reference itself


@pytest.mark.parametrize("mode", ["infer", "train"])
def test_amp_bf16_on_a_tiny_resnet_passes_the_check_with_its_deviation_recorded(mode):
    row = run_here(tiny(mode=mode, precision="amp-bf16"))[0]
    assert row["status"] == "ok" and row["output_check"] == fidelity.WITHIN, row
    tol = fidelity.TOLERANCES["bfloat16"]
    assert tol.min_cosine <= row["output_cosine"] <= 1 + 1e-9 and 0 < row["output_rel_error"] <= tol.max_rel_error
    assert (row["loss_rel_error"] is not None) == (mode == "train")
    assert fidelity.deviation_text(row).startswith("outputs within ") and "of fp32 eager NCHW" in \
        fidelity.deviation_text(row)


def test_fp32_under_channels_last_is_checked_against_the_tight_fp32_tolerance():
    row = run_here(tiny(mode="infer", channels_last=True))[0]
    assert row["output_check"] == fidelity.WITHIN and row["output_tolerance"].startswith("float32: cosine >= 0.99999")
    assert row["output_rel_error"] <= fidelity.TOLERANCES["float32"].max_rel_error


def test_the_report_gives_a_wrong_variant_no_speed_verdict_and_a_faithful_one_its_deviation():
    """compare_variants on rows as a sweep records them: the precision comparison carries the
    output check beside the speed-up, and no ratio where the variant's outputs are wrong."""
    base = {"machine": "m", "model": "x", "mode": "infer", "batch_size": 2, "run_id": "r1", "device_type": "cpu",
            "noise_flags": ""}
    rows = []
    for precision, speed, check, error in (("fp32", 100.0, None, None), ("amp-bf16", 190.0, fidelity.WITHIN, 0.0031),
                                           ("fp16", 300.0, fidelity.WRONG_RESULTS, 0.97)):
        for repeat, wobble in enumerate((0.99, 1.0, 1.01)):
            rows.append({**base, "precision": precision, "repeat": repeat, "samples_per_s": speed * wobble,
                         "output_check": check, "output_rel_error": error, "output_cosine": 0.1 if error == 0.97
                         else 0.99999, "output_reference": fidelity.REFERENCE if check else None,
                         "output_tolerance": fidelity.tolerance_for(precision).text()})
    table = compare_variants(pd.DataFrame(rows), "precision", "fp32", keys=["machine", "model", "mode", "batch_size"])
    amp, fp16 = (table[table["precision"] == p].iloc[0] for p in ("amp-bf16", "fp16"))
    assert amp["verdict"] == "faster" and amp["text"].endswith("faster; outputs within 0.31 % of fp32 eager NCHW")
    assert fp16["verdict"] == "wrong results" and pd.isna(fp16["ratio"])
    assert fp16["text"] == "wrong results (variant): no speed verdict"
    assert fp16["outputs"].startswith("WRONG RESULTS: outputs 97 % off fp32 eager NCHW (cosine 0.1;")


def test_bench_run_of_a_wrong_variant_says_so_on_its_last_line_and_exits_1(capsys):
    done = bench_here(capsys, "run", "--model", "test_loud_norm", "--mode", "infer", "--precision", "fp16",
                      "--batch-size", "2", "--steps", "2", "--warmup-steps", "1", "--repeats", "1", "--min-seconds", "0",
                      "--device", "cpu", "-q")
    assert done.returncode == EXIT_FAILED, done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith("1/1 rows ok") and "; WRONG RESULTS: outputs " in last and "off fp32 eager NCHW" in last
