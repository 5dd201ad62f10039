"""A decoder's parameters counted from its config.json without torch (workload/decoder_params.py) are what a build
on the meta device counts, family by family, and the table's defaults are transformers' own: the two cannot drift
apart. Where the table cannot vouch for a config, it counts nothing."""
import pytest
import torch

from bench_core.workload.decoder_params import ACTIVATIONS, FAMILIES, NEUTRAL, decoder_config, parameter_count
from bench_core.workload.text import CAUSAL_LM, TextModel, hf_spec, known_decoder_spec

# 2 layers, 4 query heads of 16 over 2 key-value heads, a 96-token vocabulary: a build in milliseconds.
TINY = {"vocab_size": 96, "hidden_size": 64, "intermediate_size": 80, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2}
# Every key the table lets through that no family's layout reads, each with a value transformers takes.
NEUTRAL_VALUES = {"architectures": ["XForCausalLM"], "transformers_version": "4.45.0", "torch_dtype": "bfloat16",
                  "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "initializer_range": 0.02,
                  "attention_dropout": 0.0, "use_cache": True, "bos_token_id": 1, "eos_token_id": [2, 3],
                  "pad_token_id": None}


def variants(model_type: str) -> list[dict]:
    """Tied and untied heads, grouped and full key-value heads, head_dim given or not, each bias the family has."""
    family = FAMILIES[model_type]
    found = [{}, {"tie_word_embeddings": True}, {"num_key_value_heads": 4}, {"head_dim": 24, "max_position_embeddings": 64},
             NEUTRAL_VALUES, {"dtype": "float16"}]
    found += [{name: True} for name in ("attention_bias", "mlp_bias") if name in family.defaults]
    return [{"model_type": model_type, **TINY, **changes} for changes in found]


def meta_count(values: dict) -> int:
    with torch.device("meta"):
        model = TextModel(values).build(CAUSAL_LM)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_the_count_from_the_config_is_what_a_meta_build_counts(model_type):
    for values in variants(model_type):
        config = decoder_config(values)
        assert config is not None, values
        assert parameter_count(config) == meta_count(values), values


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_the_table_s_defaults_are_transformers_own(model_type):
    from transformers import AutoConfig
    made = AutoConfig.for_model(model_type, **TINY)
    for key, default in FAMILIES[model_type].defaults.items():
        if default is not None:  # (head_dim None: hidden / heads, as the counts above check)
            assert getattr(made, key) == default, key


def test_every_activation_let_through_is_one_transformers_has():
    from transformers.activations import ACT2FN
    assert set(ACTIVATIONS) <= set(ACT2FN) and set(NEUTRAL_VALUES) | {"dtype"} == set(NEUTRAL)


def test_the_spec_made_without_transformers_is_the_one_hf_spec_makes(tmp_path):
    import json
    # Each family at its default position limit and at one given (head_dim given too), with no architecture named.
    for n, values in enumerate(v for model_type in FAMILIES for v in variants(model_type)[::3][:2]):
        path = tmp_path / f"{n}.json"
        path.write_text(json.dumps(values))
        light, full = known_decoder_spec(str(path)), hf_spec(str(path))
        assert (light.name, light.task, light.source, light.notes) == (full.name, full.task, full.source, full.notes)
        assert (light.builder.default_seq_len, light.builder.max_positions, light.builder.limit_name) == \
            (full.builder.default_seq_len, full.builder.max_positions, full.builder.limit_name)


@pytest.mark.parametrize("change", [
    {"model_type": "gpt2"},                      # another layout
    {"vocab_size": None}, {"hidden_size": 64.0}, {"num_hidden_layers": True}, {"intermediate_size": 0},
    {"rope_scaling": {"rope_type": "llama3"}},   # a key the table does not vouch for
    {"rms_norm_eps": 1},                         # transformers refuses an int there
    {"hidden_act": "no-such-activation"}, {"tie_word_embeddings": 1},
    {"hidden_size": 66},                         # heads that do not divide the hidden size
    {"num_key_value_heads": 3},                  # nor the query heads
    {"head_dim": 15},                            # an odd head dim: rotary embeddings refuse it
])
def test_a_config_the_table_cannot_vouch_for_is_not_counted(change):
    values = {"model_type": "llama", **TINY, **change}
    assert decoder_config({k: v for k, v in values.items() if v is not None}) is None
