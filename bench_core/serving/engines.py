"""Named presets of the serving engines people deploy: how each is started, where it answers
health checks, which request fields it accepts and where its version comes from.

Every engine here speaks the OpenAI-compatible API (/v1/completions, /v1/chat/completions,
streamed as server-sent events). They differ in the details a benchmark must respect:
- `transformers serve` answers 422 to any request field it does not know, `ignore_eos` and
  `min_tokens` included: it is sent only the standard fields, and the counts it produces are
  read from the stream's usage (with random weights, end-of-sequence can stop a request early).
- vLLM and SGLang accept `ignore_eos` (and vLLM `min_tokens`), so a request gets exactly the
  output length asked for, and load random weights with `--load-format dummy`.
- The command line is a list (no shell); `{model}`, `{port}` and `{host}` are filled in.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import sys
from dataclasses import dataclass

from bench_core.errors import ConfigError

STANDARD_FIELDS = ("model", "prompt", "messages", "max_tokens", "stream", "stream_options", "temperature", "seed")


@dataclass(frozen=True)
class Engine:
    name: str
    description: str
    command: tuple[str, ...]            # the launcher; {model} {port} {host} are filled in
    health_path: str = "/health"
    extra_fields: tuple[str, ...] = ()  # request fields beyond STANDARD_FIELDS this engine accepts
    dummy_weights: tuple[str, ...] = ()  # arguments that make it load random weights itself
    package: str = ""                   # the Python distribution whose version is the engine's version
    version_path: str = ""              # or an HTTP path answering {"version": ...}
    metrics_path: str = ""              # Prometheus metrics (queue length, KV-cache use), if it serves them

    @property
    def program(self) -> str:
        return self.command[0]

    def command_line(self, model: str, port: int, host: str = "127.0.0.1", extra: tuple[str, ...] = (),
                     dummy: bool = False) -> list[str]:
        values = {"model": model, "port": str(port), "host": host}
        line = [part.format(**values) for part in self.command]
        if line[0] == "python":
            line[0] = sys.executable  # this environment's interpreter
        return line + (list(self.dummy_weights) if dummy else []) + list(extra)

    def request_fields(self, max_tokens: int) -> dict:
        """Fields that ask for exactly `max_tokens` output tokens, where the engine allows it."""
        fields = {}
        if "ignore_eos" in self.extra_fields:
            fields["ignore_eos"] = True
        if "min_tokens" in self.extra_fields:
            fields["min_tokens"] = max_tokens
        return fields

    def installed(self) -> bool:
        program = self.command[0]
        if program == "python":
            module = self.command[2] if len(self.command) > 2 and self.command[1] == "-m" else ""
            return bool(module) and importlib.util.find_spec(module.split(".")[0]) is not None
        return shutil.which(program) is not None

    def check_installed(self) -> None:
        """Refuse (bad input) an engine this machine cannot start: checked before the model folder is
        written or any line says it is starting, so a refusal leaves nothing behind."""
        if not self.installed():
            raise ConfigError("engine", f"{self.name}: {self.program} is not installed here ({self.description}); "
                                        "install it, or give server_url of a running server")

    def local_version(self) -> str:
        """The engine's version as installed here ('' when unknown)."""
        if not self.package:
            return ""
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return ""


_LISTEN = ("--host", "{host}", "--port", "{port}")
ENGINES: dict[str, Engine] = {e.name: e for e in (
    # The KV cache is bounded (64 pages of 256 tokens, batches of at most 2048 tokens): left to size
    # itself, transformers serve takes 60 % of the host's free RAM on CPU (13 GB here: OOM-killed on a
    # shared machine). server_args given after these win.
    Engine("transformers", "Hugging Face `transformers serve` with continuous batching (CPU or GPU)",
           ("python", "-m", "transformers.cli.transformers", "serve", "{model}", "--continuous-batching",
            "--cb-num-blocks", "64", "--cb-max-batch-tokens", "2048", *_LISTEN), package="transformers"),
    Engine("vllm", "vLLM's OpenAI-compatible server (`vllm serve`)",
           ("vllm", "serve", "{model}", *_LISTEN), extra_fields=("ignore_eos", "min_tokens"),
           dummy_weights=("--load-format", "dummy"), package="vllm", version_path="/version",
           metrics_path="/metrics"),
    Engine("sglang", "SGLang (`python -m sglang.launch_server`)",
           ("python", "-m", "sglang.launch_server", "--model-path", "{model}", *_LISTEN),
           extra_fields=("ignore_eos", "min_tokens"), dummy_weights=("--load-format", "dummy"), package="sglang",
           metrics_path="/metrics"),  # with --enable-metrics in server_args
    Engine("trtllm", "TensorRT-LLM's OpenAI-compatible server (`trtllm-serve`)",
           ("trtllm-serve", "{model}", *_LISTEN), extra_fields=("ignore_eos", "min_tokens"),
           package="tensorrt_llm"),
    Engine("tgi", "Text Generation Inference (`text-generation-launcher`)",
           ("text-generation-launcher", "--model-id", "{model}", "--hostname", "{host}", "--port", "{port}"),
           version_path="/info", metrics_path="/metrics"),
    Engine("llamacpp", "llama.cpp's `llama-server` (a GGUF file as the model)",
           ("llama-server", "-m", "{model}", *_LISTEN), extra_fields=("ignore_eos",)),
)}


def resolve_engine(name: str) -> Engine:
    key = str(name).strip().lower()
    if key not in ENGINES:
        raise ConfigError("engine", f"got {name!r}; allowed: {', '.join(ENGINES)}")
    return ENGINES[key]
