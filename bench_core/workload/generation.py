"""Generate, timed in phases: a prompt (token ids, or an encoder's input such as log-mel frames), then
exactly `new_tokens` tokens with the KV cache (transformers' eager `generate`, greedy), each new
token's end marked on the window's clock.

transformers calls a generation's stopping criteria once per new token, the first right after
the prefill, so a criterion that never stops is where the marks go: no decode step runs outside
the call the window times. torch and transformers code: the text and speech families import it only
when they make a generate workload.
"""
from __future__ import annotations

from typing import Callable

import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList


class TokenMarks(StoppingCriteria):
    """Marks the clock after every new token and keeps the last token's scores (a reference,
    no copy: the finiteness check reads it after the window); never stops a generation."""

    def __init__(self) -> None:
        self.mark = None
        self.count = 0
        self.scores = None

    def __call__(self, input_ids, scores, **kwargs):
        if self.mark is not None:
            self.mark()
        self.count += 1
        self.scores = scores
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class Generation:
    """One generate call per step on fixed inputs (generate's keyword arguments: input_ids and
    attention_mask, or input_features); `facts` gets the KV cache's bytes once. `generate`
    (model, **kwargs) replaces the model's own generate method where given."""

    def __init__(self, inputs: dict, new_tokens: int, generate: Callable | None = None):
        self.inputs = inputs
        self.new_tokens = new_tokens
        self.generate = generate
        self.marks = TokenMarks()
        # min = max: end-of-sequence cannot stop it early (random weights make any token likely).
        self.config = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                                       num_beams=1, use_cache=True, pad_token_id=0, return_dict_in_generate=True)
        self.facts: dict = {}

    def __call__(self, model, mark=None):
        self.marks.mark, self.marks.count = mark, 0
        settings = dict(generation_config=self.config, stopping_criteria=StoppingCriteriaList([self.marks]))
        if self.generate is None:
            out = model.generate(**self.inputs, **settings)
        else:
            out = self.generate(model, **self.inputs, **settings)
        # An encoder-decoder's output starts from its decoder start token, a decoder's from the prompt.
        given = 1 if model.config.is_encoder_decoder else self.inputs["input_ids"].shape[-1]
        produced = out.sequences.shape[-1] - given
        if produced != self.new_tokens or self.marks.count != self.new_tokens:
            raise RuntimeError(f"generate produced {produced} tokens ({self.marks.count} marked), asked for "
                               f"exactly {self.new_tokens}")
        if "kv_cache_bytes" not in self.facts:
            # `cache` since transformers 5 (reading `past_key_values` there logs a deprecation line on
            # every run); `past_key_values` before it.
            self.facts["kv_cache_bytes"] = tensor_bytes(out.cache if hasattr(out, "cache") else out.past_key_values)
        return self.marks.scores


def tensor_bytes(obj, seen: set | None = None, depth: int = 0) -> int:
    """Bytes of the distinct tensors an object holds (a KV cache: its layers' keys and values;
    an encoder-decoder's self- and cross-attention caches), found through its attributes."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        key = (obj.untyped_storage().data_ptr(), obj.untyped_storage().nbytes())
        if key in seen:
            return 0
        seen.add(key)
        return obj.untyped_storage().nbytes()
    if depth > 5 or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
        return 0
    if isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        children = list(obj)
    else:
        children = list(getattr(obj, "__dict__", {}).values())
    return sum(tensor_bytes(child, seen, depth + 1) for child in children)
