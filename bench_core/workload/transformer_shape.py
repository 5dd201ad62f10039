"""What a transformers model's shape says, read from its config and modules (a model on the meta device
will do): the standard FLOP formula MFU divides, its transformer blocks, the tensor-parallel plan
transformers states for it, and the activations its training keeps. The text family's tasks declare
these (workload/text.py); torch is imported where modules are read.
"""
from __future__ import annotations

from bench_core.errors import ConfigError

# -- FLOPs: PaLM (appendix B), as nanoGPT and torchtitan compute MFU ----------------------------

def flops_formula(model, cfg) -> tuple[float, str] | None:
    """FLOPs per sequence: 6N + 12·L·H·Q·T per trained token, 2N + 4·L·H·Q·T per forward token (N
    the parameters that multiply: all but embedding lookups; an encoder-decoder's attention counts
    its encoder layers and twice its decoder layers: self and cross). Generate (decoder only):
    the prompt's forward, the LM head once for the first token, then each new token's forward over
    its context. None where no formula applies (encoder-decoder generate: counted instead)."""
    shape = attention_shape(model.config)
    if shape is None:
        return None
    layers, heads, head_dim = shape
    n = matmul_parameters(model)
    attention = 4 * heads * head_dim
    if cfg.mode == "generate":
        if getattr(model.config, "is_encoder_decoder", False):
            return None
        head = model.get_output_embeddings().weight.numel() if model.get_output_embeddings() is not None else 0
        p, new = cfg.prompt_len, cfg.new_tokens
        prefill = 2 * (n - head) * p + 2 * head + attention * layers * p * p
        decode = sum(2 * n + attention * layers * (p + k) for k in range(1, new))
        return float(prefill + decode), "formula: prefill 2N·P + 4·L·H·Q·P² (LM head once), each new token 2N + " \
                                        "4·L·H·Q·context (PaLM B)"
    t = cfg.seq_len
    forward = 2 * n * t + attention * layers * t * t
    factor, per_token = (3, "6N + 12·L·H·Q·T") if cfg.mode == "train" else (1, "2N + 4·L·H·Q·T")
    return float(factor * forward), f"formula: {per_token} per token (PaLM B; N = {n:,} multiplying parameters)"


# The config keys that count a transformer's repeated layers (decoder-only, encoder-decoder, GPT-2's).
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "encoder_layers", "decoder_layers")
COUNTED_WHOLE_UP_TO = 4  # layers: a model this shallow is counted on a whole meta build (as quick)


def count_by_layers(config: dict, count) -> int | None:
    """A deep transformer's parameter count from models of one and two layers (`count(layers)` builds one on
    the meta device with those layer counts and counts it): the one-layer model, plus each layer key's extra
    layer times the layers it has beyond one. Exact for a stack of identical layers; a 1.2-trillion-parameter
    config is counted in a second, where its whole meta build takes many. None where it does not apply (a
    shallow model; a config whose values depend on its layer count refuses the smaller ones)."""
    keys = [k for k in LAYER_KEYS if isinstance(config.get(k), int) and config[k] > COUNTED_WHOLE_UP_TO]
    if not keys or any(isinstance(v, (list, tuple)) and len(v) in {config[k] for k in keys} for v in config.values()):
        return None  # (a per-layer list, as layer_types: its model differs layer by layer)
    ones = dict.fromkeys(keys, 1)
    try:
        base = count(ones)
        return base + sum((count({**ones, key: 2}) - base) * (config[key] - 1) for key in keys)
    except (ValueError, TypeError, KeyError, IndexError):  # a config that cannot be made smaller
        return None


def attention_shape(config) -> tuple[int, int, int] | None:
    """(attention layers, query heads, head dim) from a transformers config; an encoder-decoder's
    layers are its encoder's plus twice its decoder's (self- and cross-attention)."""
    heads = _first(config, "num_attention_heads", "n_head", "num_heads", "encoder_attention_heads")
    hidden = _first(config, "hidden_size", "n_embd", "d_model")
    if not heads or not hidden:
        return None
    head_dim = _first(config, "head_dim", "d_kv") or hidden // heads
    if getattr(config, "is_encoder_decoder", False):
        encoder = _first(config, "num_layers", "encoder_layers")
        decoder = _first(config, "num_decoder_layers", "decoder_layers") or encoder
        return (encoder + 2 * decoder, heads, head_dim) if encoder else None
    layers = _first(config, "num_hidden_layers", "n_layer", "num_layers")
    return (layers, heads, head_dim) if layers else None


def _first(config, *names) -> int | None:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def matmul_parameters(model) -> int:
    """Parameters that take part in a matrix multiply: all but embedding tables used only for a
    lookup (token, position, type embeddings), except one tied to the output layer."""
    import torch
    linear = {id(m.weight) for m in model.modules() if hasattr(m, "weight") and not isinstance(m, torch.nn.Embedding)}
    lookup = {id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    return sum(p.numel() for p in model.parameters()) - sum(n for key, n in lookup.items() if key not in linear)


# -- sharding and memory ----------------------------------------------------------------------

LOGIT_COPIES = 4  # float32 vocabulary-wide rows the LM head keeps per token (see activation_bytes)


def check_tensor_parallel(name: str, config, degree: int) -> None:
    """Refuse a tensor-parallel degree the model cannot take: a plan transformers states, heads it divides."""
    if not getattr(config, "base_model_tp_plan", None):
        raise ConfigError("parallelism", f"fsdp-tp: transformers states no tensor-parallel plan for {config.model_type} "
                                         "(base_model_tp_plan); allowed: ddp, fsdp, hsdp")
    heads = _first(config, "num_attention_heads", "n_head", "num_heads") or 0
    for what, count in (("query", heads), ("key/value", _first(config, "num_key_value_heads") or heads)):
        if count % degree:
            raise ConfigError("tp_degree", f"{degree} does not divide {name}'s {count} {what} heads")


def transformer_blocks(model) -> list:
    """Every outermost ModuleList of blocks of one class (a decoder's layers; an encoder-decoder's two)."""
    import torch
    found, names = [], []
    for name, module in model.named_modules():
        if any(name.startswith(outer + ".") for outer in names):
            continue
        if isinstance(module, torch.nn.ModuleList) and len(module) and len({type(m) for m in module}) == 1 \
                and any(True for _ in module[0].parameters()):
            found.append(module)
            names.append(name)
    return found


def tensor_parallel_plan(model) -> dict[str, str] | None:
    """transformers' own plan (config.base_model_tp_plan: 'layers.*.self_attn.q_proj': 'colwise'), as
    names inside one block."""
    plan = getattr(model.config, "base_model_tp_plan", None) or {}
    return {key.split(".*.", 1)[1]: style for key, style in plan.items() if ".*." in key} or None


def activation_bytes(model, cfg, dtype_bytes: int, tp_degree: int) -> tuple[int, str] | None:
    """Per token and block, what the backward keeps: 4·H elements replicated (the norms' inputs and
    outputs), 6·H + 4·I split by tensor parallel (q, k and v with grouped heads expanded, the attention
    output and its copy; the MLP's gate, up, activation and product); full checkpointing keeps each
    block's input (H) and recomputes one block at a time; selective every second block. The LM head
    keeps LOGIT_COPIES float32 vocabulary-wide rows per token (logits, their float32 copy, the
    log-softmax and its gradient)."""
    shape, hidden = attention_shape(model.config), _first(model.config, "hidden_size", "n_embd", "d_model")
    if cfg.mode != "train" or shape is None or not hidden:
        return None
    layers = shape[0]
    inner = _first(model.config, "intermediate_size", "n_inner", "d_ff", "encoder_ffn_dim") or 4 * hidden
    block = 4 * hidden + (6 * hidden + 4 * inner) // tp_degree
    kept = {"none": layers * block, "selective": (layers + 1) // 2 * block + layers // 2 * hidden,
            "full": layers * hidden + block}[cfg.activation_checkpointing]
    tokens = cfg.batch_size * cfg.seq_len
    head = LOGIT_COPIES * (_first(model.config, "vocab_size") or 0) * 4
    return tokens * (kept * dtype_bytes + head), (f"{tokens} tokens x ({kept:,} block elements x {dtype_bytes} B + "
                                                  f"{LOGIT_COPIES} x vocabulary x 4 B)")


def kv_cache_bytes(config, sequences: int, tokens: int, dtype_bytes: int, cross_tokens: int = 0,
                   tokens_how: str = "") -> tuple[int, str]:
    """(bytes, how) of the keys and values a decoder caches: for each of its layers, key/value heads x head
    dim elements twice (key and value) per cached position, for `tokens` positions of its own (a prompt and
    the new tokens but the last, whose keys and values are never computed) and, in an encoder-decoder's
    cross-attention, `cross_tokens` encoder positions; `sequences` of them, each element `dtype_bytes`
    (`tokens_how`: how `tokens` was counted, for the text)."""
    encoder_decoder = getattr(config, "is_encoder_decoder", False)
    layers = (_first(config, "num_decoder_layers", "decoder_layers") if encoder_decoder else None) or \
        _first(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(config, "decoder_attention_heads", "num_attention_heads", "n_head", "num_heads")
    kv_heads = _first(config, "num_key_value_heads") or heads
    head_dim = _first(config, "head_dim", "d_kv") or _first(config, "hidden_size", "n_embd", "d_model") // heads
    per_token = 2 * layers * kv_heads * head_dim * dtype_bytes
    positions = tokens + cross_tokens
    cross = f" + {cross_tokens} encoder positions (cross-attention)" if cross_tokens else ""
    tokens_how = f"{tokens_how} = " if tokens_how else ""
    return sequences * positions * per_token, (f"KV cache: {sequences} sequences x ({tokens_how}{tokens} positions"
                                               f"{cross}) x {layers} layers x 2 x {kv_heads} KV heads x {head_dim} x "
                                               f"{dtype_bytes} B")
