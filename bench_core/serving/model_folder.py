"""A local model folder a serving engine can load offline: the config of a named text model (or
an `hf:` config), random weights, and a tokenizer built here with no hub call.

The tokenizer is a byte-level BPE trained on a few lines of text, wrapped in
PreTrainedTokenizerFast with a one-line chat template. Its vocabulary is the model's (the BPE is
padded with filler tokens up to the model's vocab_size, or the model's vocabulary is cut to the
tokenizer's), so every id the engine samples decodes. Folders are written once and cached under
~/.cache/notebook-bench/serving-models/ ($XDG_CACHE_HOME), keyed by the config; a folder is
complete only when its marker file exists (written last), so an interrupted write is redone.

Engines that can load random weights themselves (vLLM, SGLang: --load-format dummy) are still
given the folder for its config and tokenizer; the weights are written anyway (small models) or
skipped (`weights=False`) for large shapes.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

from bench_core.errors import ConfigError
from bench_core.files import atomic_write_text, cache_folder
from bench_core.workload.models import resolve_model

# Heavy optional imports (transformers, tokenizers, torch) happen inside the functions that need
# them: config validation and `bench --help` import this module without them.
DONE_MARKER = "notebook-bench-model.json"
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")
# A few lines to train the tokenizer on: enough merges for prompts of words, always the same.
TRAINING_TEXT = [
    "the quick brown fox jumps over the lazy dog",
    "a serving benchmark sends prompts of exact token lengths to an engine",
    "time to first token, time per output token and inter-token latency",
    "every request is recorded with its send time and the time of each chunk",
    "continuous batching pages the key value cache across many concurrent users",
    "numbers letters and words: 0 1 2 3 4 5 6 7 8 9 alpha beta gamma delta epsilon",
]
BPE_VOCAB = 1000  # the tokenizer's learned vocabulary, before padding to the model's


def cache_root() -> Path:
    return cache_folder("serving-models")


def model_config(model: str) -> dict:
    """The transformers config values of a named text model or hf: config (model_type first)."""
    spec = resolve_model(model)
    config = getattr(spec.builder, "config", None)
    if not isinstance(config, dict) or spec.task.name != "causal-lm":
        raise ConfigError("model", f"{spec.name} is not a causal language model; serving needs one "
                                   "(e.g. llama-tiny, llama-8b, hf:llama)")
    return dict(config)


def planned(model: str) -> tuple[int | None, Callable]:
    """What `model`'s folder holds, made in memory before any folder is written (a refused command writes
    nothing): its context (max_position_embeddings as transformers fills it in) and a maker of its tokenizer."""
    import transformers

    values = model_config(model)
    limit = getattr(transformers.AutoConfig.for_model(values.pop("model_type"), **values),
                    "max_position_embeddings", None)
    return (int(limit) if limit else None), lambda: build_tokenizer(int(values.get("vocab_size") or BPE_VOCAB))


def folder_for(model: str, weights: bool = True, root: Path | None = None) -> Path:
    """The cached folder of `model` (written now if absent): config, tokenizer and (with
    `weights`) random weights saved with save_pretrained."""
    config = model_config(model)
    key = hashlib.sha256(json.dumps([config, weights, BPE_VOCAB, TRAINING_TEXT, CHAT_TEMPLATE],
                                    sort_keys=True, default=str).encode()).hexdigest()[:12]
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)
    folder = (root or cache_root()) / f"{name}-{key}"
    if not (folder / DONE_MARKER).exists():
        write_folder(folder, config, weights)
        atomic_write_text(folder / DONE_MARKER, json.dumps({"model": model, "weights": weights}))
    return folder


def write_folder(folder: Path, config: dict, weights: bool = True) -> None:
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    values = dict(config)
    tokenizer = build_tokenizer(int(values.get("vocab_size") or BPE_VOCAB))
    values["vocab_size"] = len(tokenizer)
    values.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  pad_token_id=tokenizer.pad_token_id)
    tokenizer.save_pretrained(folder)
    hf_config = transformers.AutoConfig.for_model(values.pop("model_type"), **values)
    if weights:
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
        model.save_pretrained(folder)
    else:
        hf_config.save_pretrained(folder)


def build_tokenizer(vocab_size: int = BPE_VOCAB):
    """A byte-level BPE trained on TRAINING_TEXT, its vocabulary filled up to `vocab_size` ids
    with filler entries (a random-weight model samples any id, and each must decode), as a
    transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|begin|>", "<|end|>", "<|pad|>"]
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    learner = Tokenizer(models.BPE())
    learner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    learner.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    learned = json.loads(learner.to_str())["model"]
    vocab = dict(learned["vocab"])
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    for i in range(vocab_size - len(vocab)):  # plain ASCII: the byte-level decoder maps it to itself
        vocab[f"~w{i}"] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(specials)
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=specials[0], eos_token=specials[1],
                                   pad_token=specials[2], chat_template=CHAT_TEMPLATE,
                                   model_max_length=1 << 30)
