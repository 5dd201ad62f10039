"""What each request of a serving point sends, and when: the traffic shapes of config/traffic.py made into
request bodies with the served model's tokenizer, and multi-turn conversations.

- Independent requests (turns 1): request i's prompt is prompt_len tokens (or a length drawn from
  length_dist, per request from the seed), a prompt_file's line i (cycling), or a trace line's input
  length; its max_tokens likewise.
- A trace also sets when: its arrival times, scaled by trace_time_scale, replace the load's gaps.
- Conversations (turns > 1): each of `concurrency` users sends its history (every earlier message and
  the model's replies, as the engine streamed them) plus a new message of prompt_len tokens, `turns`
  times, waiting think_time_s after each reply, then starts a new conversation. The growing history is
  the shared prefix a prefix cache is for: records carry the turn, and the row TTFT by turn.

Every request is checked against the model's context before anything is sent (prepare calls check).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bench_core.config.traffic import MAX_FACTOR, parse_length_dist, read_prompt_file, read_trace
from bench_core.errors import ConfigError
from bench_core.serving.client import payload
from bench_core.serving.records import RequestRecord


def draw(shape: str, param: float | None, centre: int, rng: random.Random) -> int:
    """One length around `centre` (see config/traffic.py), clipped to [1, MAX_FACTOR x centre]."""
    if shape == "uniform":
        value = rng.uniform(centre * (1 - param), centre * (1 + param))
    elif shape == "normal":
        value = rng.gauss(centre, param * centre)
    elif shape == "lognormal":
        value = rng.lognormvariate(math.log(centre), param)
    else:
        return centre
    return int(min(max(round(value), 1), MAX_FACTOR * centre))


def context_of(folder: Path) -> int | None:
    import json
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    limit = config.get("max_position_embeddings")
    return int(limit) if limit else None


def render(tokenizer, messages) -> str:
    """A conversation as the completions endpoint takes it: the tokenizer's own chat template."""
    return tokenizer.apply_chat_template([{"role": r, "content": c} for r, c in messages], tokenize=False,
                                         add_generation_prompt=True)


def check(cfg, limit: int | None, make_tokenizer: Callable[[], object]) -> None:
    """Refuse, before any request, what a model of context `limit` cannot take: a prompt file's line or a
    trace's request longer than its context, or conversations that would outgrow it (one line naming the
    field). `make_tokenizer` gives the model's tokenizer: called only with a prompt file (it is heavy)."""
    if not limit:
        return
    if cfg.prompt_file:
        tokenizer = make_tokenizer()
        for line in read_prompt_file(cfg.prompt_file):
            text = line.prompt if line.prompt is not None else render(tokenizer, line.messages)
            tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            wanted = line.max_tokens or cfg.new_tokens
            if tokens + wanted > limit:
                raise ConfigError("prompt_file", f"{cfg.prompt_file} line {line.number}: {tokens} prompt tokens + "
                                                 f"{wanted} new ones are beyond the model's context of {limit}")
    if cfg.trace_file:
        for line in read_trace(cfg.trace_file)[:cfg.steps]:
            if line.input_len + line.output_len > limit:
                raise ConfigError("trace_file", f"{cfg.trace_file} line {line.number}: {line.input_len} input + "
                                                f"{line.output_len} output tokens are beyond the model's context of "
                                                f"{limit}")
    if cfg.turns > 1 and cfg.turns * (cfg.prompt_len + cfg.new_tokens) > limit:
        raise ConfigError("turns", f"{cfg.turns} turns of {cfg.prompt_len} + {cfg.new_tokens} tokens grow a "
                                   f"conversation to {cfg.turns * (cfg.prompt_len + cfg.new_tokens)} tokens, beyond the "
                                   f"model's context of {limit}; allowed: at most "
                                   f"{limit // (cfg.prompt_len + cfg.new_tokens)} turns")


def describe(cfg) -> str:
    """The traffic's design in words, as the row's `traffic` and input_shape say it."""
    if cfg.trace_file:
        scale = f", gaps x{cfg.trace_time_scale:g}" if cfg.trace_time_scale != 1 else ""
        return f"trace {Path(cfg.trace_file).name} ({len(read_trace(cfg.trace_file))} arrivals{scale})"
    if cfg.prompt_file:
        return f"prompts from {Path(cfg.prompt_file).name} ({len(read_prompt_file(cfg.prompt_file))} lines)"
    shared = f", {cfg.shared_prefix_len}-token shared system prompt" if cfg.shared_prefix_len else ""
    lengths = f"prompt {cfg.prompt_len} + {cfg.new_tokens} new tokens" if cfg.length_dist in (None, "fixed") else \
        f"{cfg.length_dist} lengths around prompt {cfg.prompt_len} + {cfg.new_tokens} new tokens"
    if cfg.turns > 1:
        think = f", {cfg.think_time_s:g} s think time" if cfg.think_time_s else ""
        return (f"{cfg.turns}-turn conversations (each turn resends its history: a prefix by design), "
                f"{lengths} a turn{think}{shared}")
    return lengths + shared


class Traffic:
    """The requests of one configuration against one session's model and tokenizer."""

    def __init__(self, cfg, prompts, model: str, engine, tokenizer, limit: int | None = None):
        self.cfg, self.prompts, self.model, self.engine, self.tokenizer = cfg, prompts, model, engine, tokenizer
        self.limit = limit
        self.dist = parse_length_dist(cfg.length_dist or "fixed")
        self.lines = read_prompt_file(cfg.prompt_file) if cfg.prompt_file else ()
        self.trace = read_trace(cfg.trace_file) if cfg.trace_file else ()

    def requests(self, asked: int) -> int:
        """How many requests a point sends: `asked` (steps), or as many of the trace's lines."""
        return min(asked, len(self.trace)) if self.trace else asked

    def arrivals(self, count: int) -> list[float] | None:
        """The trace's arrival times for a point's `count` requests (from its first line, scaled), else None."""
        if not self.trace:
            return None
        return [line.arrival_s * self.cfg.trace_time_scale for line in self.trace[:count]]

    def lengths(self, index: int, within: int) -> tuple[int, int]:
        """(prompt tokens, output tokens) of request `index` (`within`: its place in the point, for a trace)."""
        cfg = self.cfg
        if self.trace:
            line = self.trace[within % len(self.trace)]
            return line.input_len, line.output_len
        if self.dist.shape == "fixed":
            return cfg.prompt_len, cfg.new_tokens
        rng = random.Random(f"lengths:{cfg.seed}:{index}")
        prompt = max(draw(self.dist.shape, self.dist.param, cfg.prompt_len, rng), (cfg.shared_prefix_len or 0) + 1)
        output = draw(self.dist.shape, self.dist.param, cfg.new_tokens, rng)
        if self.limit and prompt + output > self.limit:  # a long draw is cut to the context, prompt first
            prompt = max(self.limit - output, (cfg.shared_prefix_len or 0) + 1)
            output = self.limit - prompt
        return prompt, output

    def body(self, index: int, within: int) -> tuple[dict, RequestRecord]:
        """The body and the empty record of an independent request."""
        cfg = self.cfg
        if self.lines:
            line = self.lines[index % len(self.lines)]
            wanted = line.max_tokens or cfg.new_tokens
            if line.prompt is not None:
                text, messages = line.prompt, None
            else:
                messages = [{"role": r, "content": c} for r, c in line.messages]
                text = render(self.tokenizer, line.messages)
            return (self._send(text, messages, wanted),
                    RequestRecord(index, self.prompts.count(text), wanted, source_line=line.number))
        prompt_len, wanted = self.lengths(index, within)
        text = self.prompts.prompt(index, prompt_len, cfg.shared_prefix_len or 0)
        record = RequestRecord(index, prompt_len, wanted, source_line=self.trace[within].number if self.trace else None)
        return self._send(text, None, wanted), record

    def _send(self, text: str, messages: list | None, max_tokens: int) -> dict:
        body = payload(self.cfg.endpoint, self.model, text, max_tokens, self.engine.request_fields(max_tokens))
        if messages is not None and self.cfg.endpoint == "chat":
            body["messages"] = messages
        return body


@dataclass
class Conversation:
    number: int
    turn: int = 0                                  # turns sent so far
    history: list = field(default_factory=list)    # (role, content) of every earlier message and reply
    history_tokens: int = 0                        # their tokens, as counted here and by the engine


class Conversations:
    """The multi-turn traffic: one conversation per user at a time, each `turns` turns long."""

    def __init__(self, traffic: Traffic, turns: int):
        self.traffic, self.turns = traffic, turns
        self.open: dict[int, Conversation] = {}
        self.started = 0

    def body(self, index: int, user: int) -> tuple[dict, RequestRecord]:
        cfg, traffic = self.traffic.cfg, self.traffic
        talk = self.open.get(user)
        if talk is None or talk.turn >= self.turns:
            talk = self.open[user] = Conversation(self.started)
            self.started += 1
        text = traffic.prompts.prompt(index, cfg.prompt_len, cfg.shared_prefix_len or 0)
        messages = [*talk.history, ("user", text)]
        chat = [{"role": r, "content": c} for r, c in messages]
        sent = render(traffic.tokenizer, messages) if cfg.endpoint != "chat" else text
        body = traffic._send(sent, chat, cfg.new_tokens)
        record = RequestRecord(index, talk.history_tokens + cfg.prompt_len, cfg.new_tokens, turn=talk.turn + 1,
                               conversation=talk.number, reply="")
        talk.history.append(("user", text))
        return body, record

    def after(self, user: int, record: RequestRecord) -> None:
        """The reply joins the history; a failed turn ends its conversation (the next turn starts anew)."""
        talk = self.open.get(user)
        if talk is None:
            return
        if not record.ok:
            self.open.pop(user)
            return
        talk.history.append(("assistant", record.reply or ""))
        talk.history_tokens += self.traffic.cfg.prompt_len + (record.output_tokens or 0)
        talk.turn += 1
