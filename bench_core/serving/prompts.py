"""Synthetic prompts of exact token lengths, made with the served model's tokenizer.

A prompt is a run of whole-word tokens (a token whose text is one space-led word that encodes
back to itself), so joining them gives text that encodes to exactly that many tokens. Prompt i
starts with the digits of i written in that word alphabet: no two prompts of a run share their
first tokens, so no prefix cache answers any of them (warm-up and every repeat take new
numbers). The rest is drawn with a fixed seed. Each prompt is checked by encoding it again.

Prefix reuse is asked for, never a side effect: with `shared` > 0 every prompt begins with the
same `shared` tokens (drawn once from the seed: a system prompt), then its number, then its own
draw, so exactly `shared` leading tokens are common to all of them.
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

    def shared_prefix(self, length: int) -> list[str]:
        """The `length` words every prompt of a run with prefix reuse starts with (same seed, same words)."""
        rng = random.Random(-1 - self.seed)  # apart from every prompt's own draw (those seeds are >= 0)
        return [rng.choice(self.words) for _ in range(length)]

    def prompt(self, index: int, length: int, shared: int = 0) -> str:
        """The prompt of request `index`: exactly `length` tokens, the first `shared` of them common
        to every prompt (0 <= shared < length), the next spelling `index`."""
        base = len(self.words)
        rng = random.Random(self.seed * 1_000_003 + index)
        head = [self.words[(index // base ** k) % base] for k in range(min(UNIQUE_PREFIX, length - shared))]
        tail = [rng.choice(self.words) for _ in range(length - shared - len(head))]
        text = "".join(self.shared_prefix(shared) + head + tail)
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
