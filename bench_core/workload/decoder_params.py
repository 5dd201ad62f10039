"""A decoder language model's parameters counted from its config.json alone, without torch or transformers, for the
families whose blocks are Llama's (an embedding, per layer q/k/v/o projections, a gated MLP and two RMSNorms, a
final norm, an LM head unless tied): llama, mistral, qwen2, qwen3. What transformers would build from the config
is counted as a meta build counts it (tests/test_decoder_params.py holds the two together on tiny configs of each
family). Only a config this table can vouch for is counted: a known model_type, every size given as a positive
whole number, and no key but those listed here, each with a value transformers takes; for anything else, None,
and the model is counted the usual way (a build on torch's meta device).
"""
from __future__ import annotations

from dataclasses import dataclass, field

# The sizes a count needs, given in the config itself (a default would be transformers' idea of a 7B model).
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads")
# transformers' activation names (transformers.activations.ACT2FN holds them: the test checks) a config may give.
ACTIVATIONS = ("silu", "swish", "gelu", "relu", "gelu_new", "gelu_pytorch_tanh")
DTYPES = ("float32", "float16", "bfloat16")


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _token_id(v) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# Keys of no family's parameter layout, each with the values transformers' config classes take (a value they
# refuse is bad input, said by the configuration's own check, not here).
NEUTRAL = {
    "architectures": lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
    "transformers_version": lambda v: isinstance(v, str),
    "torch_dtype": lambda v: v in DTYPES, "dtype": lambda v: v in DTYPES,
    "hidden_act": lambda v: v in ACTIVATIONS,
    "rms_norm_eps": lambda v: isinstance(v, float) and v > 0,  # (an int is refused by transformers' strict check)
    "rope_theta": lambda v: _number(v) and v > 0,
    "initializer_range": lambda v: isinstance(v, float) and 0 <= v <= 1,
    "attention_dropout": lambda v: _number(v) and 0 <= v <= 1,
    "use_cache": lambda v: isinstance(v, bool),
    "bos_token_id": _token_id, "pad_token_id": _token_id,
    "eos_token_id": lambda v: _token_id(v) or (isinstance(v, list) and all(map(_token_id, v))),
}


@dataclass(frozen=True)
class DecoderFamily:
    """One model_type's layout: the optional keys it reads with transformers' defaults (the test compares them with
    transformers' config classes), which projections carry biases, and whether q and k have their own norms."""
    defaults: dict = field(hash=False)   # optional key -> transformers' default (head_dim None: hidden / heads)
    qkv_bias: bool = False               # q, k and v biased whatever the config says (qwen2)
    qk_norm: bool = False                # an RMSNorm over the head dim on q and on k, in every layer (qwen3)


FAMILIES = {
    "llama": DecoderFamily({"max_position_embeddings": 2048, "tie_word_embeddings": False, "head_dim": None,
                            "attention_bias": False, "mlp_bias": False}),
    "mistral": DecoderFamily({"max_position_embeddings": 131072, "tie_word_embeddings": False, "head_dim": None}),
    "qwen2": DecoderFamily({"max_position_embeddings": 32768, "tie_word_embeddings": False, "head_dim": None},
                           qkv_bias=True),
    "qwen3": DecoderFamily({"max_position_embeddings": 32768, "tie_word_embeddings": False, "head_dim": 128,
                            "attention_bias": False}, qk_norm=True),
}
_FLAGS = ("tie_word_embeddings", "attention_bias", "mlp_bias")


def decoder_config(values: dict) -> dict | None:
    """A config.json's values (keys starting with '_' dropped, as transformers drops them) completed with its
    family's defaults, every size a positive whole number; None where this table cannot vouch for it: another
    model_type, a size missing or not a positive whole number, a key of its own, a value transformers refuses,
    heads that do not divide the hidden size or the query heads, an odd head dim (rotary embeddings refuse it)."""
    family = FAMILIES.get(values.get("model_type"))
    if family is None:
        return None
    given = {k: v for k, v in values.items() if not k.startswith("_") and k != "model_type"}
    if not all(_positive_int(given.get(k)) for k in REQUIRED):
        return None
    for key, value in given.items():
        if key in REQUIRED:
            continue
        if key in family.defaults:
            ok = isinstance(value, bool) if key in _FLAGS else _positive_int(value)
        else:
            ok = key in NEUTRAL and NEUTRAL[key](value)
        if not ok:
            return None
    config = {"model_type": values["model_type"], **family.defaults, **{k: given[k] for k in REQUIRED},
              **{k: v for k, v in given.items() if k in family.defaults}}
    heads, kv_heads, hidden = config["num_attention_heads"], config["num_key_value_heads"], config["hidden_size"]
    config["head_dim"] = config["head_dim"] or hidden // heads
    if hidden % heads or heads % kv_heads or config["head_dim"] % 2:
        return None
    return config


def parameter_count(config: dict) -> int:
    """The parameters of decoder_config's `config` as transformers' ...ForCausalLM builds it (a tied LM head shares
    the embedding's, counted once, as model.parameters() gives it)."""
    family = FAMILIES[config["model_type"]]
    hidden, inner, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    queries = config["num_attention_heads"] * config["head_dim"]
    keys = config["num_key_value_heads"] * config["head_dim"]
    attention_bias = config.get("attention_bias", False)
    qkv_bias = family.qkv_bias or attention_bias
    attention = hidden * (queries + 2 * keys) + queries * hidden + \
        ((queries + 2 * keys) if qkv_bias else 0) + (hidden if attention_bias else 0)
    mlp = 3 * hidden * inner + ((2 * inner + hidden) if config.get("mlp_bias", False) else 0)
    norms = 2 * hidden + (2 * config["head_dim"] if family.qk_norm else 0)
    embedding = config["vocab_size"] * hidden
    head = 0 if config["tie_word_embeddings"] else embedding
    return embedding + layers * (attention + mlp + norms) + hidden + head
