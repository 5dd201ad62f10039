"""The per-request record: everything a serving point's figures are computed from.

All times are seconds on one monotonic clock (time.perf_counter), taken by the client when it
receives each streamed chunk, relative to the start of the point. Token counts come from the
stream's usage (the engine's own count), never from counting chunks: a chunk can carry more
than one token. A failed request is a record too (status error, with the HTTP status and the
error's first line), never dropped.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from bench_core.files import atomic_write_text

OK, ERROR, CANCELLED = "ok", "error", "cancelled"


@dataclass
class RequestRecord:
    index: int                        # the request's number in the run (prompts differ by it)
    prompt_len: int                   # prompt tokens asked for
    max_tokens: int                   # output tokens asked for
    scheduled_s: float | None = None  # when the arrival process meant to send it (rate loads)
    send_s: float = 0.0               # when the request was handed to the HTTP client
    first_chunk_s: float | None = None  # the first chunk that carried output text
    chunk_s: list[float] = field(default_factory=list)  # every chunk that carried output text
    end_s: float | None = None        # the end of the stream (or of the failure)
    prompt_tokens: int | None = None  # from the stream's usage
    output_tokens: int | None = None  # from the stream's usage
    finish_reason: str = ""
    status: str = OK
    http_status: int | None = None
    error: str = ""
    source_line: int | None = None    # the prompt_file's or trace_file's line it came from
    turn: int | None = None           # multi-turn: its turn in its conversation (1 = the first)
    conversation: int | None = None   # multi-turn: which conversation
    reply: str | None = None          # multi-turn: the text streamed back (the next turn's history); else None

    # -- derived figures (ms), None where they do not apply -------------------------------
    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def ttft_ms(self) -> float | None:
        if not self.ok or self.first_chunk_s is None:
            return None
        return (self.first_chunk_s - self.send_s) * 1e3

    @property
    def e2e_ms(self) -> float | None:
        return (self.end_s - self.send_s) * 1e3 if self.ok and self.end_s is not None else None

    @property
    def tpot_ms(self) -> float | None:
        """(e2e - TTFT) / (output tokens - 1): the mean time of each token after the first."""
        if self.ttft_ms is None or self.e2e_ms is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1)

    @property
    def itl_ms(self) -> list[float]:
        """Gaps between successive chunks that carried text, ms (per chunk, not per token)."""
        if not self.ok:
            return []
        return [(b - a) * 1e3 for a, b in zip(self.chunk_s, self.chunk_s[1:])]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def write_records(path: Path, records: list[RequestRecord], meta: dict) -> Path:
    """One JSON file: the point's `meta` (what was asked, the window) and every record."""
    atomic_write_text(Path(path), json.dumps({"meta": meta, "records": [r.to_dict() for r in records]}, indent=0))
    return Path(path)


def read_records(path: Path) -> tuple[dict, list[RequestRecord]]:
    data = json.loads(Path(path).read_text())
    fields = {f.name for f in dataclasses.fields(RequestRecord)}
    return data["meta"], [RequestRecord(**{k: v for k, v in r.items() if k in fields}) for r in data["records"]]
