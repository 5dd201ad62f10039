"""Synthetic prompts of exact token lengths, made with the served model's tokenizer.

A prompt is a run of whole-word tokens (a token whose text is one space-led word that encodes
back to itself), so joining them gives text that encodes to exactly that many tokens. Prompt i
starts with the digits of i written in that word alphabet: no two prompts of a run share their
first tokens, so no prefix cache answers any of them (warm-up and every repeat take new
numbers). The rest is drawn with a fixed seed. Each prompt is checked by encoding it again.
"""
from __future__ import annotations

import random

from bench_core.errors import ConfigError

UNIQUE_PREFIX = 3  # tokens that spell a prompt's number


class PromptMaker:
    def __init__(self, tokenizer, seed: int = 0):
        self.tokenizer = tokenizer
        self.seed = seed
        self.words = word_tokens(tokenizer)
        if len(self.words) < 8:
            raise ConfigError("model", f"its tokenizer has only {len(self.words)} whole-word tokens; synthetic "
                                       "prompts of exact lengths need at least 8")

    def count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt(self, index: int, length: int) -> str:
        """The prompt of request `index`: exactly `length` tokens."""
        base = len(self.words)
        rng = random.Random(self.seed * 1_000_003 + index)
        head = [self.words[(index // base ** k) % base] for k in range(min(UNIQUE_PREFIX, length))]
        tail = [rng.choice(self.words) for _ in range(length - len(head))]
        text = "".join(head + tail)
        got = self.count(text)
        if got != length:  # never seen with whole-word tokens; said rather than sent wrong
            raise ConfigError("prompt_len", f"could not make a prompt of exactly {length} tokens with this "
                                            f"tokenizer (got {got})")
        return text


def word_tokens(tokenizer) -> list[str]:
    """Texts of the tokens that are one space-led word and encode back to that one token."""
    vocab = tokenizer.get_vocab()
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    ids = sorted(i for i in vocab.values() if i not in special)
    texts = tokenizer.batch_decode([[i] for i in ids])
    words = []
    for i, text in zip(ids, texts):
        if len(text) > 1 and text[0] == " " and text[1:].isalpha() and " " not in text[1:]:
            if tokenizer(text, add_special_tokens=False)["input_ids"] == [i]:
                words.append(text)
    return words
