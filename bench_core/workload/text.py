"""The text family: transformer language models from Hugging Face `transformers`, built from a
configuration with random weights (`from_config`: never `from_pretrained`, no hub call). BERT is a
masked-LM encoder, GPT-2 and the Llama-shaped models causal-LM decoders (grouped-query attention),
T5 an encoder-decoder; `hf:<model_type>` and `hf:<path to config.json>` build any other.

A sample is one sequence (sequences/s); the unit is tokens/s: seq_len tokens per sequence in
train and infer (one forward over the whole sequence: the encoder or prefill cost), new_tokens
output tokens per sequence in generate (a prompt of prompt_len tokens, then exactly new_tokens
tokens with the KV cache). MFU divides the standard transformer FLOPs (flops_formula), which a
row records beside the FLOP counter's figure.

The named models are plain data (config validation reads their position limits without loading
transformers or torch); transformers and torch are imported where a model or a batch is made.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

from bench_core.errors import ConfigError
from bench_core.workload import transformer_shape as shape
from bench_core.workload.decoder_params import decoder_config
from bench_core.workload.family import ModelSpec, Task, Workload, seeded_generator
from bench_core.workload.vision import closest

# Generation's defaults (the common small point of optimum-benchmark and the HF LLM-Perf board).
PROMPT_LEN, NEW_TOKENS = 256, 64
MASKED_FRACTION = 0.15  # masked-LM: the share of positions whose token the loss predicts
HF_DEFAULT_SEQ_LEN = 512


@dataclass(frozen=True)
class TextModel:
    """How to build one text model: a transformers config as plain values, read by validation
    without importing transformers. `config` holds the model's own arguments (model_type first)."""
    config: dict = field(hash=False)
    default_seq_len: int = 512

    @property
    def model_type(self) -> str:
        return self.config["model_type"]

    @property
    def max_positions(self) -> int | None:
        """The longest sequence the model takes (absolute position embeddings or a trained
        context), or None where positions are relative (T5)."""
        for name in ("max_position_embeddings", "n_positions", "max_target_positions"):
            if self.config.get(name):
                return int(self.config[name])
        return None

    @property
    def limit_name(self) -> str:
        return next((n for n in ("max_position_embeddings", "n_positions", "max_target_positions")
                     if self.config.get(n)), "")

    def hf_config(self):
        from transformers import AutoConfig
        values = dict(self.config)
        return AutoConfig.for_model(values.pop("model_type"), **values)

    def build(self, task: "TextTask"):
        import transformers
        config = self.hf_config()
        if config.is_encoder_decoder:  # seq2seq training shifts the labels right from this token
            if getattr(config, "decoder_start_token_id", None) is None:
                config.decoder_start_token_id = 0
            if getattr(config, "pad_token_id", None) is None:
                config.pad_token_id = 0
        model = getattr(transformers, task.auto_class).from_config(config)
        if task.loss_type:  # said explicitly where transformers would warn that it has to guess (it reads the
            model.loss_type = task.loss_type  # model's, set from its class name: GPT2LMHeadModel names none)
        return model


class TextTask(Task):
    """A batch of random token ids; the model's own loss (labels given to the model)."""
    family = "text"
    sample = "sequence"
    unit = "tokens/s"
    shape_fields = ("seq_len", "prompt_len", "new_tokens")
    has_transformer_blocks = True

    def __init__(self, name: str, auto_class: str, modes: tuple[str, ...], description: str,
                 loss_type: str | None = None, masked: bool = False, encoder_decoder: bool = False):
        self.name, self.auto_class, self.loss_type = name, auto_class, loss_type
        self.modes, self.description = modes, description
        self.masked, self.encoder_decoder = masked, encoder_decoder

    def build(self, spec: ModelSpec, cfg):
        return spec.builder.build(self)

    # -- configuration --------------------------------------------------------------------
    def check(self, spec: ModelSpec, cfg) -> None:
        super().check(spec, cfg)
        if getattr(cfg, "parallelism", "ddp") == "fsdp-tp":
            shape.check_tensor_parallel(spec.name, spec.builder.hf_config(), cfg.tp_degree)
        if cfg.channels_last:
            raise ConfigError("channels_last", f"applies to image models only; {spec.name} is {self.description}")
        limit, where = spec.builder.max_positions, spec.builder.limit_name
        if cfg.mode in ("generate", "serve"):  # serve: a request's prompt and output, as in generate
            if cfg.seq_len is not None:
                raise ConfigError("seq_len", f"with mode {cfg.mode} a sequence is prompt_len + new_tokens: give those "
                                             "instead")
            if cfg.compile != "off":
                raise ConfigError("compile", f"not with mode {cfg.mode}: transformers' dynamic KV cache changes shape at "
                                             "every token, so a compiled model would recompile inside the timed "
                                             "window; allowed: off")
            cfg.prompt_len = cfg.prompt_len or PROMPT_LEN
            cfg.new_tokens = cfg.new_tokens or NEW_TOKENS
            if cfg.new_tokens < 2:
                raise ConfigError("new_tokens", f"must be >= 2 (decode is timed over new_tokens - 1 steps), "
                                                f"got {cfg.new_tokens}")
            if limit and cfg.prompt_len + cfg.new_tokens > limit:
                raise ConfigError("new_tokens", f"prompt_len + new_tokens = {cfg.prompt_len + cfg.new_tokens} is beyond "
                                                f"{spec.name}'s {limit} positions ({where})")
            return
        for name in ("prompt_len", "new_tokens"):
            if getattr(cfg, name) is not None:
                raise ConfigError(name, f"applies to mode generate only (mode is {cfg.mode}: give seq_len)")
        cfg.seq_len = cfg.seq_len or min(spec.builder.default_seq_len, limit or spec.builder.default_seq_len)
        if limit and cfg.seq_len > limit:
            raise ConfigError("seq_len", f"{spec.name} takes at most {limit} positions ({where}), got {cfg.seq_len}")

    def default_input(self, spec: ModelSpec) -> str:
        return f"seq {spec.builder.default_seq_len}"

    def sample_shape(self, cfg) -> str:
        if cfg.mode in ("generate", "serve"):
            return f"prompt {cfg.prompt_len} + {cfg.new_tokens} new tokens"
        return f"{cfg.seq_len} tokens"

    def input_text(self, cfg) -> str:
        return f"prompt {cfg.prompt_len} + {cfg.new_tokens} new" if cfg.mode in ("generate", "serve") else f"seq {cfg.seq_len}"

    def tokens_per_sample(self, cfg) -> int:
        return cfg.new_tokens if cfg.mode == "generate" else cfg.seq_len

    def throughput(self, cfg, samples_per_s: float) -> float:
        return samples_per_s * self.tokens_per_sample(cfg)

    def throughput_columns(self, cfg, samples_per_s: float) -> dict:
        return {"tokens_per_s": self.throughput(cfg, samples_per_s)}

    # -- the batch ------------------------------------------------------------------------
    def make_workload(self, spec: ModelSpec, cfg, device, dtype, rank: int = 0) -> Workload:
        import torch
        generator = seeded_generator(device, cfg.seed + rank)
        vocab = _vocab_size(spec)
        if cfg.mode == "generate":
            from bench_core.workload.generation import Generation
            prompt = torch.randint(0, vocab, (cfg.batch_size, cfg.prompt_len), device=device, generator=generator)
            run = Generation({"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}, cfg.new_tokens)
            # What the memory estimate traces: the prefill (one forward over the prompt, the first token's logits;
            # its KV cache is counted apart, kv_cache_bytes): generate itself stops on values fake tensors lack.
            first = {"decoder_input_ids": prompt[:, :1]} if self.encoder_decoder else {"logits_to_keep": 1}
            return Workload(prompt, loss=_model_loss, train_call=None, infer_call=None, generate_call=run,
                            facts=run.facts, trace_call=lambda m: m(input_ids=prompt, use_cache=False, **first),
                            trace_note="generate traced as its prefill")
        # The global batch drawn alike on every rank, this rank's part cut from it: a sharded run and one process
        # given the whole batch train on the same sequences.
        parts, part = cfg.world_size // cfg.tp_degree, slice(rank * cfg.batch_size, (rank + 1) * cfg.batch_size)
        generator.manual_seed(cfg.seed)
        ids = torch.randint(0, vocab, (cfg.batch_size * parts, cfg.seq_len), device=device, generator=generator)
        labels = self.labels(ids, generator)[part]
        ids = ids[part]
        # An encoder-decoder's forward runs its decoder too: over a target as long as the input, as in training.
        given = {"decoder_input_ids": ids} if self.encoder_decoder else {}
        return Workload(ids, loss=_model_loss, train_call=lambda m: m(input_ids=ids, labels=labels),
                        infer_call=lambda m: m(input_ids=ids, **given))

    def labels(self, ids, generator):
        """What the loss predicts: the next token (causal LM; transformers shifts), a target sequence
        of the same length (seq2seq), or MASKED_FRACTION of the positions (masked LM, -100 elsewhere)."""
        if not self.masked:
            return ids
        import torch
        masked = torch.rand(ids.shape, device=ids.device, generator=generator) < MASKED_FRACTION
        masked[:, 0] = True  # at least one position per sequence, so the loss is defined
        return torch.where(masked, ids, torch.full_like(ids, -100))

    def model_facts(self, model) -> dict:
        return {"attn_implementation": getattr(model.config, "_attn_implementation", None)}

    # -- FLOPs ---------------------------------------------------------------------------
    def formula_flops(self, model, cfg) -> tuple[float, str] | None:
        """FLOPs per sequence by the standard transformer formula (see flops_formula)."""
        return shape.flops_formula(model, cfg)

    # -- sharding and memory: from the model's shape (transformer_shape.py) ------------------
    def kv_cache_bytes(self, spec: ModelSpec, cfg, sequences: int, dtype_bytes: int) -> tuple[int, str] | None:
        """A decoder caches the prompt and the new tokens; an encoder-decoder its decoder's tokens (a start
        token and the new ones) and, for cross-attention, the encoded prompt."""
        if cfg.mode not in ("generate", "serve"):
            return None
        if self.encoder_decoder:
            tokens, cross, how = cfg.new_tokens, cfg.prompt_len, f"start token + {cfg.new_tokens} new - 1"
        else:
            tokens, cross = cfg.prompt_len + cfg.new_tokens - 1, 0
            how = f"prompt {cfg.prompt_len} + {cfg.new_tokens} new - 1"
        return shape.kv_cache_bytes(spec.builder.hf_config(), sequences, tokens, dtype_bytes, cross, how)

    def parameter_count(self, spec: ModelSpec, cfg) -> int | None:
        def count(layers: dict) -> int:
            import torch  # (the text family's declarations are read without torch; counting builds on meta)
            with torch.device("meta"), torch.random.fork_rng(devices=[]):
                model = TextModel({**spec.builder.config, **layers}).build(self)
            return sum(p.numel() for p in model.parameters())
        return shape.count_by_layers(spec.builder.config, count)

    def transformer_blocks(self, model) -> list:
        return shape.transformer_blocks(model)

    def tensor_parallel_plan(self, model) -> dict[str, str] | None:
        return shape.tensor_parallel_plan(model)

    def activation_bytes(self, model, cfg, dtype_bytes: int, tp_degree: int) -> tuple[int, str] | None:
        return shape.activation_bytes(model, cfg, dtype_bytes, tp_degree)


# loss_type: said where the class name would not tell transformers (GPT2LMHeadModel); a
# ...ForConditionalGeneration class names its own.
MASKED_LM = TextTask("masked-lm", "AutoModelForMaskedLM", ("train", "infer"), "an encoder (masked language model)",
                     loss_type="ForMaskedLM", masked=True)
CAUSAL_LM = TextTask("causal-lm", "AutoModelForCausalLM", ("train", "infer", "generate", "serve"),
                     "a decoder (causal language model)", loss_type="ForCausalLM")
SEQ2SEQ_LM = TextTask("seq2seq-lm", "AutoModelForSeq2SeqLM", ("train", "infer", "generate"),
                      "an encoder-decoder (sequence-to-sequence language model)", encoder_decoder=True)
TASKS = (MASKED_LM, CAUSAL_LM, SEQ2SEQ_LM)


def _model_loss(output):
    return output.loss


def _vocab_size(spec: ModelSpec) -> int:
    return int(spec.builder.config.get("vocab_size") or spec.builder.hf_config().vocab_size)


# -- the models ------------------------------------------------------------------------------

def _llama(hidden: int, layers: int, heads: int, ffn: int, tied: bool, rope_factor: float, **more) -> dict:
    """Llama 3.x shapes (grouped-query attention, 8 KV heads, 128,256-token vocabulary)."""
    return {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": 8, "intermediate_size": ffn, "vocab_size": 128256, "head_dim": hidden // heads,
            "max_position_embeddings": 131072, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
            "rope_scaling": {"rope_type": "llama3", "factor": rope_factor, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
            "tie_word_embeddings": tied, **more}


_BERT = {"model_type": "bert", "vocab_size": 30522, "max_position_embeddings": 512}
_SOURCE = "transformers"
MODELS = (
    ModelSpec("bert-base", MASKED_LM, TextModel({**_BERT, "hidden_size": 768, "num_hidden_layers": 12,
                                                "num_attention_heads": 12, "intermediate_size": 3072}, 128),
              source=_SOURCE, notes="BERT-base (110M): masked-LM training on 15% of the positions"),
    ModelSpec("bert-large", MASKED_LM, TextModel({**_BERT, "hidden_size": 1024, "num_hidden_layers": 24,
                                                 "num_attention_heads": 16, "intermediate_size": 4096}, 128),
              source=_SOURCE, notes="BERT-large (335M): masked-LM training on 15% of the positions"),
    ModelSpec("gpt2", CAUSAL_LM, TextModel({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
                                           "vocab_size": 50257, "n_positions": 1024}, 1024),
              source=_SOURCE, notes="GPT-2 124M; causal-LM training and generation"),
    ModelSpec("llama-1b", CAUSAL_LM, TextModel(_llama(2048, 16, 32, 8192, tied=True, rope_factor=32.0), 2048),
              source=_SOURCE, notes="shaped as Llama 3.2 1B: 16 layers, 32 query / 8 KV heads"),
    ModelSpec("llama-3b", CAUSAL_LM, TextModel(_llama(3072, 28, 24, 8192, tied=True, rope_factor=32.0), 2048),
              source=_SOURCE, notes="shaped as Llama 3.2 3B: 28 layers, 24 query / 8 KV heads"),
    ModelSpec("llama-8b", CAUSAL_LM, TextModel(_llama(4096, 32, 32, 14336, tied=False, rope_factor=8.0), 2048),
              source=_SOURCE, notes="shaped as Llama 3.1 8B: 32 layers, 32 query / 8 KV heads"),
    ModelSpec("llama-tiny", CAUSAL_LM, TextModel(_llama(256, 2, 8, 768, tied=True, rope_factor=32.0,
                                                        num_key_value_heads=2, vocab_size=32000), 128),
              source=_SOURCE, notes="Llama-shaped, 2 layers, 256 wide, 8 query / 2 KV heads, 32,000-token "
                                    "vocabulary: for quick CPU runs"),
    ModelSpec("t5-base", SEQ2SEQ_LM, TextModel({"model_type": "t5", "d_model": 768, "d_ff": 3072, "d_kv": 64,
                                               "num_layers": 12, "num_decoder_layers": 12, "num_heads": 12,
                                               "vocab_size": 32128}, 512),
              source=_SOURCE, notes="T5-base (223M) encoder-decoder, the modern stand-in for GNMT; the target "
                                    "is as long as the input; tokens/s counts input tokens"),
)


# -- any transformers architecture: hf:<model_type> or hf:<path to config.json> ------------------

@functools.cache  # config validation and the run both resolve the name: read and check the file once
def hf_spec(inner: str) -> ModelSpec:
    """A model from transformers' own default configuration of a type, or from a local config.json."""
    path = Path(inner).expanduser()
    if inner.endswith(".json") or path.exists():
        values = _read_config(path / "config.json" if path.is_dir() else path, inner)
    else:
        from transformers import CONFIG_MAPPING
        if inner not in CONFIG_MAPPING:
            close = closest(inner, list(CONFIG_MAPPING), "hf:")
            raise ConfigError("model", f"hf:{inner} is neither a transformers model type{close} nor a local config file; "
                                       f"notebook-bench never downloads (a hub name such as meta-llama/Llama-3.2-1B "
                                       f"would need one): save the model's config.json and give hf:/path/to/config.json"
                                       f", or a model type such as hf:llama")
        values = {"model_type": inner}
    model = TextModel(_complete(values, inner))
    return _hf_model(inner, model, _task_of(model, values))


def _hf_model(inner: str, model: TextModel, task: TextTask) -> ModelSpec:
    default = min(HF_DEFAULT_SEQ_LEN, model.max_positions or HF_DEFAULT_SEQ_LEN)
    return ModelSpec(f"hf:{inner}", task, TextModel(model.config, default), source=_SOURCE,
                     notes=f"transformers {model.model_type}, random weights")


def known_decoder_spec(inner: str) -> ModelSpec | None:
    """What hf_spec makes of `hf:<inner>`, where inner is a config.json of a decoder family whose parameters are
    counted from the file (decoder_params.py), made without transformers: the config as decoder_config completes
    it (its sizes and position limit, as transformers would fill them) and the causal-LM task. None for anything
    else, a file that cannot be read among it: hf_spec says why."""
    path = Path(inner).expanduser()
    if not (inner.endswith(".json") or path.is_dir()):
        return None
    try:
        values = _read_config(path / "config.json" if path.is_dir() else path, inner)
    except ConfigError:
        return None
    config = decoder_config(values)
    if config is None or " ".join(values.get("architectures") or []).endswith("ForMaskedLM"):
        return None  # (any other architecture of these types is a causal LM to _task_of)
    return _hf_model(inner, TextModel(config), CAUSAL_LM)


def _read_config(path: Path, inner: str) -> dict:
    try:
        values = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError("model", f"hf:{inner}: no such config file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("model", f"hf:{inner}: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError("model", f"hf:{inner}: {path} is not JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(values, dict) or not isinstance(values.get("model_type"), str):
        raise ConfigError("model", f"hf:{inner}: {path} has no model_type (a transformers config.json names it, "
                                   "e.g. \"model_type\": \"llama\")")
    return values


def _complete(values: dict, inner: str) -> dict:
    """The config's values as transformers fills them (its defaults), checked by building it."""
    from transformers import AutoConfig
    given = {k: v for k, v in values.items() if not k.startswith("_") and k not in ("architectures", "transformers_version")}
    try:
        config = AutoConfig.for_model(given.pop("model_type"), **given)
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError("model", f"hf:{inner}: transformers cannot make this configuration: "
                                   f"{str(exc).splitlines()[0][:200]}") from None
    return {"model_type": config.model_type, **{k: v for k, v in config.to_diff_dict().items()
                                                   if k not in ("model_type", "transformers_version")}}


def _task_of(model: TextModel, values: dict) -> TextTask:
    """The task the architecture is built for: from config.json's architectures when it names one,
    else by which transformers head the type has (encoder-decoders first, then encoders)."""
    from transformers.models.auto import modeling_auto as auto
    named = " ".join(values.get("architectures") or [])
    kind = model.model_type
    if named.endswith("ForCausalLM"):
        return CAUSAL_LM
    if named.endswith("ForMaskedLM"):
        return MASKED_LM
    if model.config.get("is_encoder_decoder") and kind in auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return SEQ2SEQ_LM
    if kind in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return MASKED_LM
    if kind in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return CAUSAL_LM
    raise ConfigError("model", f"hf:{kind} has no causal, masked or sequence-to-sequence language-model head in "
                               "transformers; allowed: a language-model architecture (e.g. hf:llama, hf:bert, hf:t5)")


def _model_types() -> list[str]:
    from transformers import CONFIG_MAPPING
    return sorted(CONFIG_MAPPING)


PREFIXES = {"hf": hf_spec}
LISTS = {"hf": _model_types}  # what bench models --search looks through
PREFIX_ROWS = (
    {"name": "hf:<model_type>", "task": "text", "default_input": f"seq {HF_DEFAULT_SEQ_LEN}", "aliases": "",
     "source": _SOURCE, "notes": "any transformers language model at its default size, random weights"},
    {"name": "hf:<config.json>", "task": "text", "default_input": f"seq {HF_DEFAULT_SEQ_LEN}", "aliases": "",
     "source": _SOURCE, "notes": "your own architecture from a local config.json; never downloads"},
)
