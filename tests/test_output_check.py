"""An output check that could not fail checks nothing: torchvision's ViT starts with a zero head, so its
outputs were 0 in every precision and amp-bf16 was 'within 0 %' of fp32. The check re-draws a layer that
is zero at initialisation on both sides and says so; a reference whose outputs are still constant is
'not checked'; no built-in model's reference is constant. And a training row whose infer mode builds
another model (Whisper's encoder alone) is checked on its own training call, where it failed on a
configuration error about infer. Real models on the CPU, tiny sizes."""
import dataclasses

import pytest
import torch
from torch import nn

from bench_core import BenchConfig
from bench_core.devices import Backend
from bench_core.results import fidelity
from bench_core.run import reference
from bench_core.run.runner import run_here
from bench_core.run.step import make_step
from bench_core.workload.models import REGISTRY, ModelSpec, model_table, register_model
from bench_core.workload.text import TextModel
from conftest import tiny
from test_models import SLOW, SMALL

CPU = Backend.for_device(torch.device("cpu"))


class ZeroHead(nn.Module):
    """Features, then a head initialised to zero, as torchvision's ViT heads.head is."""

    def __init__(self):
        super().__init__()
        self.features = nn.Linear(3 * 8 * 8, 32)
        self.head = nn.Linear(32, 10)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, x):
        return self.head(torch.relu(self.features(x.flatten(1))))


class Constant(nn.Module):
    """Outputs that do not depend on the input or the weights at all."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return torch.ones(x.shape[0], 10, device=x.device) + 0 * self.scale


class NothingFound(nn.Module):
    """A detector's output when it found nothing: boxes of shape [0, 4], on both sides."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return {"boxes": torch.zeros(0, 4, device=x.device) * self.scale, "scores": torch.zeros(0, device=x.device)}


register_model(ModelSpec("test_nothing_found", "classification", lambda cfg: NothingFound(), default_size=(8, 8, None)))
register_model(ModelSpec("test_zero_head", "classification", lambda cfg: ZeroHead(), default_size=(8, 8, None)))
register_model(ModelSpec("test_constant", "classification", lambda cfg: Constant(), default_size=(8, 8, None)))


def test_a_zero_initialised_head_is_redrawn_on_both_sides_and_the_row_says_so():
    row = run_here(tiny(model="test_zero_head", width=8, height=8, mode="infer", precision="amp-bf16"))[0]
    assert row["output_check"] == fidelity.WITHIN and 0 < row["output_rel_error"] <= 0.1, row["output_check"]
    assert row["output_reference"] == "fp32 eager NCHW (head re-drawn: zero at initialisation)"
    assert fidelity.deviation_text(row).endswith("of fp32 eager NCHW (head re-drawn: zero at initialisation)")


def test_a_reference_whose_outputs_are_constant_is_not_checked_never_within_tolerance():
    row = run_here(tiny(model="test_constant", width=8, height=8, mode="infer", precision="amp-bf16"))[0]
    assert row["status"] == "ok" and row["output_check"] == (
        "not checked: the fp32 eager NCHW reference's outputs are all 1 (constant): a comparison with them could "
        "not fail") and row["output_cosine"] is None


def test_outputs_with_no_values_are_not_checked_and_the_run_goes_on():
    row = run_here(tiny(model="test_nothing_found", width=8, height=8, mode="infer", precision="amp-bf16"))[0]
    assert row["status"] == "ok" and row["output_check"] == (
        "not checked: the fp32 eager NCHW reference's outputs are empty (no values): a comparison with them could "
        "not fail")
    # One value other than 0 (a scalar output) can fail a comparison; one 0, or many equal values, cannot.
    assert reference.degenerate([torch.tensor([2.5])]) == ""
    assert reference.degenerate([torch.tensor([0.0])]).startswith("all 0 (constant)")
    assert reference.degenerate([torch.full((3,), 2.0)]).startswith("all 2 (constant)")


# Each built-in model at a tiny size of its own architecture (llama-8b alone would need 32 GB in fp32): text
# presets with one narrow layer, speech and diffusion presets as their tiny siblings (the same classes, built by
# the same builder type), DLRM with small tables, image and 3D models at the smallest sizes tests/test_models.py
# runs them at.
TEXT_TINY = {"llama": dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=16, intermediate_size=128),
             "bert": dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128),
             "gpt2": dict(n_embd=64, n_layer=1, n_head=4),
             "t5": dict(d_model=64, d_ff=128, d_kv=16, num_layers=1, num_decoder_layers=1, num_heads=4)}
SIBLING = {"whisper-base": "whisper-micro", "whisper-small": "whisper-micro", "whisper-large-v3": "whisper-micro",
           "sd15-unet": "sd-unet-tiny", "dit-xl-2": "dit-tiny"}
BUILTIN = [row["name"] for row in model_table() if ":" not in row["name"]]
# The speech models' infer mode is their encoder alone: their training call (the decoder too) is checked as well.
CASES = [(name, "infer") for name in BUILTIN] + [(n, "train") for n in BUILTIN if REGISTRY[n].task.family == "speech"]


def tiny_of(name: str, mode: str) -> tuple[ModelSpec, BenchConfig]:
    spec = REGISTRY[SIBLING.get(name, name)]
    shape, fields = {}, spec.task.shape_fields
    if isinstance(spec.builder, TextModel):
        config = spec.builder.config
        spec = dataclasses.replace(spec, builder=TextModel({**config, **TEXT_TINY[config["model_type"]]}))
        shape = dict(seq_len=8)
    elif "width" in fields:
        shape = {"width": 32, "height": 32, "batch_size": 1, **SMALL.get(name, {})}
    elif "num_tables" in fields:
        shape = dict(num_tables=4, rows_per_table=1000, embedding_dim=16)
    elif "latent_size" in fields:
        shape = dict(latent_size=8)
    cfg = BenchConfig(**{"model": spec.name, "mode": mode, "batch_size": 2,
                         "steps": 1, "warmup_steps": 0, "repeats": 1, "min_seconds": 0, "device": "cpu", **shape})
    return spec, cfg


@pytest.mark.parametrize("name, mode", [pytest.param(n, m, marks=pytest.mark.slow) if n in SLOW else (n, m)
                                        for n, m in CASES])
def test_no_built_in_models_output_check_is_vacuous(name, mode):
    spec, cfg = tiny_of(name, mode)
    side = reference.run_side(cfg, spec, CPU, make_step, fidelity.tolerance_for("amp-bf16"))
    assert side.outputs and reference.degenerate(side.outputs) == "", (name, side.redrawn)
    if name == "vit_b_16":  # its zero head is re-drawn, and only it
        assert side.redrawn == ["heads.head"]


def test_a_training_row_is_checked_on_its_training_call_not_refused_as_an_infer_configuration():
    # Whisper trains encoder and decoder on labels of seq_len tokens; its infer mode is the encoder alone and
    # refuses seq_len: the check's forward was built as an infer configuration and failed on that ConfigError.
    cfg = BenchConfig(model="whisper-micro", batch_size=2, steps=1, warmup_steps=1, repeats=1, min_seconds=0,
                      device="cpu", precision="amp-bf16")
    found = reference.check_outputs(cfg, REGISTRY[cfg.model], CPU, make_step)
    assert cfg.seq_len and found["output_check"] == fidelity.WITHIN, found["output_check"]
    assert found["loss_rel_error"] is not None and 0 < found["output_rel_error"] <= 0.1
    # FSDP2 on one process runs bf16 parameters, not autocast: the check says it cannot build that, not why infer
    fsdp = BenchConfig(model="llama-tiny", seq_len=16, batch_size=2, steps=1, warmup_steps=1, repeats=1, min_seconds=0,
                       device="cpu", precision="amp-bf16", parallelism="fsdp")
    said = reference.check_outputs(fsdp, REGISTRY[fsdp.model], CPU, make_step)["output_check"]
    assert said.startswith("not checked: parallelism fsdp (the check builds the model unwrapped")
    assert "infer" not in said
