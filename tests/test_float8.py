"""float8 training (torchao): refused with the reason where no float8 tensor cores exist (every CPU, GPUs
before compute capability 8.9), compiled unless compile off is asked for (then the row says why it is
slow), the conversion of a transformer's linear layers and the output check of its training losses
against amp-bf16 (run here on torch's CPU reference float8 matmul, for correctness only), and MFU stated
against both the FP8 and the BF16 peak."""
import importlib.util
import json

import pandas as pd
import pytest
import torch

from bench_core import BenchConfig, ConfigError, run_benchmark
from bench_core.capability import UNSUPPORTED, capability_table, cuda_support
from bench_core.cli.common import format_rows
from bench_core.devices import Backend
from bench_core.measure import efficiency
from bench_core.results import fidelity
from bench_core.run import float8, reference
from bench_core.run.step import make_step
from bench_core.scenarios.compare import mixed_settings, pair_compile
from bench_core.summary.effects import float8_notes, settings_effects
from bench_core.summary.load import WORKLOAD, Results
from bench_core.workload.models import resolve_model
from bench_core.workload.precision import PRECISIONS, resolve_precision
from conftest import bench_here, tiny

FP8 = ("fp8-tensorwise", "fp8-rowwise")
# Three warm-up steps: an fp8 configuration compiles by default, and compile keeps its first steps out of the window.
LLAMA = dict(model="llama-tiny", seq_len=16, batch_size=2, steps=1, warmup_steps=3, repeats=1, min_seconds=0,
             device="cpu")
# llama-1b training on an H200 (gpu/runs/h200-2026-11-27-b): ops a step of fp8-tensorwise eager and amp-bf16 eager.
H200_FP8_EAGER_OPS, H200_BF16_EAGER_OPS = 9971, 2915


def test_fp8_is_none_on_this_cpu_with_the_reason_in_sysinfo_and_in_the_row(capsys):
    table = {line["precision"]: line for line in capability_table(torch.device("cpu"))}
    for name in FP8:
        assert table[name]["support"] == UNSUPPORTED and "compute capability 8.9+" in table[name]["reason"]
    done = bench_here(capsys, "sysinfo", "--json")
    listed = {p["precision"]: p for p in json.loads(done.stdout)["precisions"]}
    assert listed["fp8-rowwise"]["support"] == UNSUPPORTED
    (row,) = run_benchmark(BenchConfig(**LLAMA, precision="fp8-tensorwise"))
    assert row["status"] == "unsupported" and "no CPU has float8 matrix units" in row["message"]


@pytest.mark.parametrize("capability, name, level", [
    ((8, 0), "NVIDIA A100-SXM4-80GB", UNSUPPORTED), ((8, 6), "NVIDIA GeForce RTX 3090", UNSUPPORTED),
    ((8, 9), "NVIDIA L4", "native"), ((9, 0), "NVIDIA H100 80GB HBM3", "native"), ((10, 0), "NVIDIA B200", "native"),
])
def test_fp8_is_native_from_compute_capability_8_9(capability, name, level):
    found = cuda_support(PRECISIONS["fp8-rowwise"], capability, name)
    if level == UNSUPPORTED:
        assert found.level == UNSUPPORTED and f"{name} is {capability[0]}.{capability[1]}" in found.reason
    elif importlib.util.find_spec("torchao") is None:  # an optional dependency: its absence is the reason
        assert found.level == UNSUPPORTED and "needs torchao" in found.reason
    else:
        assert found.level == level and "torchao rowwise scaling" in found.reason


@pytest.mark.parametrize("changes, words", [
    (dict(model="resnet18", seq_len=None), "resnet18 is"),
    (dict(mode="infer"), "in mode infer"),
])
def test_fp8_outside_transformer_training_names_the_field(changes, words):
    with pytest.raises(ConfigError) as caught:
        BenchConfig(**{**LLAMA, "precision": "fp8-tensorwise", **changes})
    assert caught.value.field == "precision" and words in str(caught.value)


@pytest.mark.parametrize("recipe", FP8)
def test_the_linear_layers_train_in_float8_and_the_output_layer_stays(recipe):
    pytest.importorskip("torchao", reason="torchao is an optional dependency (pip install notebook-bench[float8])")
    cfg = BenchConfig(**LLAMA)
    spec = resolve_model(cfg.model)
    ids = torch.randint(0, 32000, (2, 16), generator=torch.Generator().manual_seed(0))
    losses = {}
    for name in ("amp-bf16", recipe):
        torch.manual_seed(0)
        model = spec.build(cfg)
        facts = float8.convert(model, resolve_precision(name))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses[name] = float(loss)
    # 2 blocks x (q, k, v, o, gate, up, down); the tied output layer is left alone
    assert facts == {"float8_linears": 14} and type(model.lm_head) is torch.nn.Linear
    assert type(model.model.layers[0].mlp.down_proj).__name__ == "Float8Linear"
    assert model.model.layers[0].mlp.down_proj.weight.grad is not None
    assert losses[recipe] == pytest.approx(losses["amp-bf16"], rel=0.01)  # float8 rounding, not another model


def test_fp8_mfu_is_stated_against_the_fp8_and_the_bf16_peak():
    row = {"device_type": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "precision": "fp8-tensorwise",
           "flops_per_sample": 1e12, "samples_per_s": 4000.0, "world_size": 8, "timed_s": 1.0}
    out = efficiency.derive(row, BenchConfig(**LLAMA))
    assert out["peak_tflops"] == 1979 and out["peak_tflops_bf16"] == 989.5
    assert out["mfu"] == pytest.approx(4000 / (1979 * 8)) and out["mfu_bf16_peak"] == pytest.approx(2 * out["mfu"])


def test_fp8_compiles_unless_compile_off_is_asked_for_and_the_row_records_the_mode(capsys):
    for name in FP8:
        assert BenchConfig(**LLAMA, precision=name).compile == "default"
        assert BenchConfig(**LLAMA, precision=name, compile="off").compile == "off"  # asked for: kept
    assert BenchConfig(**LLAMA, precision="amp-bf16").compile == "off"
    (row,) = run_benchmark(BenchConfig(**LLAMA, precision="fp8-tensorwise"))
    assert row["status"] == "unsupported" and row["compile"] == "default"  # what would have run, in the row
    with pytest.raises(ConfigError) as caught:
        BenchConfig(**{**LLAMA, "warmup_steps": 1}, precision="fp8-rowwise")
    assert caught.value.field == "warmup_steps" and "fp8-rowwise compiles by default; compile off runs it eager" \
        in str(caught.value)
    helped = bench_here(capsys, "run", "--help")
    assert "default for fp8-tensorwise / fp8-rowwise" in " ".join(helped.stdout.split())


def test_an_eager_fp8_row_says_why_it_is_slow_and_a_compiled_one_does_not():
    eager = BenchConfig(**LLAMA, precision="fp8-tensorwise", compile="off")
    note = float8.eager_note(eager, H200_FP8_EAGER_OPS, H200_BF16_EAGER_OPS)["precision_note"]
    assert "ran eager (compile off was asked for): 9,971 ops a step against 2,915 for the same model in " \
           "amp-bf16 eager (3.4x)" in note and "float8 is meant to be compiled" in note
    assert float8.eager_note(BenchConfig(**LLAMA, precision="fp8-tensorwise"), 10263, H200_BF16_EAGER_OPS) == {}
    assert float8.eager_note(BenchConfig(**LLAMA, precision="amp-bf16"), 2915, None) == {}
    # Where the check did not count the twin's ops (a multi-process run), the note still says why.
    assert "9,971 ops a step, float8's casts" in float8.eager_note(eager, H200_FP8_EAGER_OPS, None)["precision_note"]
    (row,) = run_benchmark(tiny(repeats=1))  # the terminal prints the note under the table
    assert format_rows([{**row, "precision_note": note}]).endswith(f"\nnote: {note}")


def test_the_float8_verdict_compares_with_amp_bf16_under_the_same_compile_setting():
    rows = []
    for precision, compile_mode, speed in (("amp-bf16", "off", 100.0), ("fp8-tensorwise", "off", 35.0),
                                           ("fp8-tensorwise", "default", 137.0), ("fp8-rowwise", "default", 120.0)):
        for repeat, wobble in enumerate((0.99, 1.0, 1.01)):
            rows.append({"machine": "h200", "model": "llama-1b", "mode": "train", "precision": precision,
                         "batch_size": 4, "compile": compile_mode, "status": "ok", "repeat": repeat,
                         "samples_per_s": speed * wobble, "noise_flags": "", "run_id": "r",
                         "precision_note": "fp8-tensorwise ran eager (...)" if compile_mode == "off" and
                         precision != "amp-bf16" else None})
    # every configuration field (WORKLOAD) a table groups by, empty where these rows do not set it
    res = Results(pd.DataFrame(rows).reindex(columns=[*rows[0], *(k for k in WORKLOAD if k not in rows[0])]), [])
    table = settings_effects(res)
    float8_rows = table[table["setting"].str.endswith("vs amp-bf16")]
    # fp8 eager against amp-bf16 eager only: the compiled fp8 rows have no amp-bf16 twin with compile=default
    assert list(zip(float8_rows["setting"], float8_rows["compile"])) == [("fp8-tensorwise vs amp-bf16", "off")]
    assert float8_rows.iloc[0]["verdict"] == "slower" and float8_rows.iloc[0]["ratio"] == pytest.approx(0.35)
    notes = float8_notes(res)
    unpaired = [n for n in notes if "not compared" in n]
    assert len(unpaired) == 2 and all("amp-bf16 only with compile=off" in n and "ran with compile=default" in n
                                      for n in unpaired)
    assert "fp8-tensorwise ran eager (...)" in notes


def test_bench_compare_of_a_precision_and_fp8_runs_both_under_one_compile_setting():
    bf16, fp8 = BenchConfig(**LLAMA, precision="amp-bf16"), BenchConfig(**LLAMA, precision="fp8-tensorwise")
    a, b, note = pair_compile(bf16, fp8, given=False)
    assert (a.compile, b.compile) == ("default", "default") and "fp8-tensorwise compiles by default" in note
    assert pair_compile(bf16, fp8, given=True)[:2] == (bf16, fp8)  # asked for: kept, and the verdict says so
    assert "B/A is of both changes together" in mixed_settings(bf16.to_dict(), fp8.to_dict())
    assert mixed_settings(a.to_dict(), b.to_dict()) == ""


def test_a_float8_check_that_cannot_run_names_what_failed_not_an_inference_config(tmp_path):
    # GPT-2 has no torch.nn.Linear (its projections are Conv1D): float8 has nothing to convert, or no torchao here.
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 256,
                                  "n_positions": 32}))
    cfg = BenchConfig(**{**LLAMA, "model": f"hf:{config}"}, precision="fp8-tensorwise", compile="off")
    found = reference.check_outputs(cfg, resolve_model(cfg.model), Backend.for_device(torch.device("cpu")), make_step)
    assert found["output_check"].startswith("not checked: the check failed in the fp8-tensorwise variant (")
    assert "ConfigError" not in found["output_check"] and found["output_reference"] == "amp-bf16 eager"


@pytest.mark.parametrize("recipe", FP8)
def test_the_float8_check_compares_the_first_training_losses_with_amp_bf16(recipe):
    pytest.importorskip("torchao", reason="torchao is an optional dependency (pip install notebook-bench[float8])")
    cfg = BenchConfig(**LLAMA, precision=recipe, compile="off")
    found = reference.check_outputs(cfg, resolve_model(cfg.model), Backend.for_device(torch.device("cpu")), make_step)
    assert found["output_check"] == fidelity.WITHIN and found["output_reference"] == "amp-bf16 eager", found
    # On this CPU: 0.05 % (tensorwise) and 0.03 % (rowwise); logits are not compared (results/fidelity.py says why).
    assert 0 < found["loss_rel_error"] <= 0.01 and found["output_cosine"] is None
    assert found["reference_ops_per_step"] > 0  # the amp-bf16 twin's, for an eager row's note
    text = fidelity.deviation_text({**found, "precision": recipe})
    assert text.startswith("training losses within ") and text.endswith("of amp-bf16 eager's")
