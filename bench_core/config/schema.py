"""BenchConfig: the one schema behind the CLI, notebook parameters and sweep files.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from bench_core.config.mistakes import Mistakes
from bench_core.config.serve import SERVE_FIELDS, check_shared_prefix, validate_serving
from bench_core.config.values import MAX_WHOLE, as_bool, as_choice, as_currency, as_float, as_int, as_str
from bench_core.errors import ConfigError
from bench_core.workload.models import resolve_model
from bench_core.workload.precision import resolve_precision

MODES = ("train", "infer", "generate", "serve")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")
OPTIMIZERS = ("sgd", "adam", "adamw")
PARALLELISMS = ("ddp", "fsdp", "hsdp", "fsdp-tp")
CHECKPOINTING = ("none", "selective", "full")
MAX_BATCH = "max"            # batch_size: max -- the largest batch that fits, found by an explicit search
DEFAULT_MAX_BATCH = 4096     # the search's default cap
SEARCH_FIELDS = ("max_batch_size", "batch_margin")  # settings of that search: part of a config only with max
# Fields added after results were first recorded: they count in a configuration's hash only when set,
# so a configuration measured before they existed keeps its hash (a sweep re-run finds it complete).
HASHED_WHEN_SET = ("seq_len", "prompt_len", "new_tokens", "num_tables", "rows_per_table", "embedding_dim",
                   "indices_per_lookup", "zipf_exponent", "latent_size", "denoise_steps", "audio_frames", "currency",
                   *SERVE_FIELDS)
# Fields added later still whose default is not None: they count in the hash only when not at this default.
HASHED_WHEN_NOT = {"parallelism": "ddp", "tp_degree": 1, "activation_checkpointing": "none", "shared_prefix_len": 0,
                   "length_dist": "fixed", "trace_time_scale": 1.0, "turns": 1, "think_time_s": 0, "saturation_s": 15, "client_workers": 1}


# With compile on, the first calls compile and (reduce-overhead) record CUDA graphs over 2-3
# calls: with fewer warm-up steps that lands in the timed window, and in DDP agree_steps would
# estimate the step time from a compile step.
MIN_COMPILE_WARMUP_STEPS = 3


def _opt(help_text: str, **extra) -> dict:
    return {"help": help_text, **extra}


@dataclass
class BenchConfig:
    """One benchmark configuration: a model, a mode, a precision, a shape, a device."""

    model: str = field(default="resnet50", metadata=_opt(
        "model name (see `bench models`), timm:<name> / torchvision:<name> / hf:<model_type>, or your own model "
        "from your own code: code:<file.py>:<function> or code:<module>:<function> (docs/custom-models.md)"))
    mode: str = field(default="train", metadata=_opt(
        "train, infer (one forward pass; diffusion: a denoising step; speech: the encoder), generate (text "
        "decoders, speech: a prompt, then new_tokens tokens with the KV cache) or serve (a causal LM behind a serving "
        "engine's OpenAI-compatible API, under load: docs/serving.md)", choices=MODES))
    precision: str = field(default="fp32", metadata=_opt(
        "fp32 (strict IEEE), tf32, fp16 / bf16 (pure cast), amp-fp16, amp-bf16 (autocast), fp8-tensorwise / "
        "fp8-rowwise (training transformers: torchao float8 linear layers, the rest amp-bf16; CUDA 8.9+)"))
    batch_size: int | str = field(default=16, metadata=_opt(
        "samples per device per step, or max: the largest that fits, found first by an explicit, recorded "
        "search (bench find-batch; each probe in a fresh process)"))
    max_batch_size: int = field(default=DEFAULT_MAX_BATCH, metadata=_opt(
        "with batch_size max: the largest batch the search tries"))
    batch_margin: float = field(default=0.1, metadata=_opt(
        "with batch_size max (and find-batch): when out of memory bounded the search, run this fraction below "
        "the largest batch that ran -- headroom for the longer run (0: at the edge)"))
    width: int | None = field(default=None, metadata=_opt("input width in px (default: the model's)"))
    height: int | None = field(default=None, metadata=_opt("input height in px (default: the model's)"))
    depth: int | None = field(default=None, metadata=_opt("input depth in voxels (3D models only)"))
    seq_len: int | None = field(default=None, metadata=_opt(
        "tokens per sequence, text models in train and infer; a speech model's transcript tokens in train "
        "(default: the model's)"))
    prompt_len: int | None = field(default=None, metadata=_opt("prompt tokens per sequence, mode generate (default 256)"))
    new_tokens: int | None = field(default=None, metadata=_opt(
        "tokens generated per sequence, exactly, mode generate (default 64 for text models, 128 for speech)"))
    num_tables: int | None = field(default=None, metadata=_opt(
        "embedding tables (sparse features), recommendation models (default: the model's, 26)"))
    rows_per_table: int | None = field(default=None, metadata=_opt(
        "rows of each embedding table, recommendation models (default 500000)"))
    embedding_dim: int | None = field(default=None, metadata=_opt(
        "width of an embedding row, recommendation models (default: the model's, 128)"))
    indices_per_lookup: int | None = field(default=None, metadata=_opt(
        "indices summed per table and sample (multi-hot size), recommendation models (default: the model's)"))
    zipf_exponent: float | None = field(default=None, metadata=_opt(
        "power-law skew of the embedding indices, recommendation models (default 1.05; 0: uniform)"))
    latent_size: int | None = field(default=None, metadata=_opt(
        "side of the square latent a diffusion model denoises, in latent pixels: the image is 8x as wide "
        "(default: the model's)"))
    denoise_steps: int | None = field(default=None, metadata=_opt(
        "diffusion models in infer: denoising steps per image, for images/s (default 50)"))
    audio_frames: int | None = field(default=None, metadata=_opt(
        "log-mel frames per utterance of a speech model, 100 a second (default and only value: what the "
        "model's encoder takes, 3000 = 30 s for Whisper)"))
    steps: int = field(default=20, metadata=_opt("minimum timed steps per repeat (mode serve: requests per repeat)"))
    min_seconds: float = field(default=1.0, metadata=_opt("minimum timed seconds per repeat"))
    warmup_steps: int = field(default=5, metadata=_opt(
        f"untimed steps before the first repeat (at least {MIN_COMPILE_WARMUP_STEPS} with compile; mode serve: "
        "untimed warm-up requests)"))
    repeats: int = field(default=3, metadata=_opt("timed repeats; each is one result row"))
    device: str = field(default="auto", metadata=_opt("auto, cpu, cuda, cuda:N or mps"))
    channels_last: bool = field(default=False, metadata=_opt("use channels_last memory format (2D models)"))
    compile: str | None = field(default=None, metadata=_opt(
        "torch.compile mode (default: default for fp8-tensorwise / fp8-rowwise, which are meant to be compiled: "
        "eager, float8's casts and scales are kernels of their own; off for the other precisions)",
        choices=COMPILE_MODES))
    optimizer: str = field(default="sgd", metadata=_opt("optimizer for train mode", choices=OPTIMIZERS))
    seed: int = field(default=0, metadata=_opt("random seed for weights and synthetic data"))
    cudnn_benchmark: bool = field(default=True, metadata=_opt("set torch.backends.cudnn.benchmark"))
    num_threads: int = field(default=0, metadata=_opt("torch intra-op threads (0: torch's default)"))
    nproc_per_node: int = field(default=1, metadata=_opt("worker processes (devices) per node; >1 runs DDP via torchrun"))
    parallelism: str = field(default="ddp", metadata=_opt(
        "how training spreads over the processes: ddp (a whole replica of the model, its gradients and "
        "optimizer state on every process; gradients all-reduced), fsdp (FSDP2 fully_shard per transformer "
        "block, then the root: parameters, gradients and optimizer state split over all processes), hsdp "
        "(FSDP2 sharded within a node, replicated across nodes; nnodes >= 2), fsdp-tp (a 2-D mesh: tensor "
        "parallel over tp_degree processes inside each FSDP shard group; tp_degree = all processes is tensor "
        "parallel alone). All but ddp apply to models that declare transformer blocks (text), in mode train",
        choices=PARALLELISMS))
    tp_degree: int = field(default=1, metadata=_opt(
        "with parallelism fsdp-tp: processes each transformer block's matmuls are split over (it must divide "
        "the processes and the model's query and key/value heads)"))
    activation_checkpointing: str = field(default="none", metadata=_opt(
        "train, models with transformer blocks: none (every activation kept for the backward), selective "
        "(every second block recomputed in the backward, torchtitan's per-layer selective), full (every block "
        "recomputed: only its input kept)", choices=CHECKPOINTING))
    nnodes: int = field(default=1, metadata=_opt("number of nodes in a multi-node run"))
    node_rank: int = field(default=0, metadata=_opt("this node's rank in a multi-node run"))
    rdzv_endpoint: str = field(default="", metadata=_opt("host:port of the c10d rendezvous (multi-node)"))
    dist_timeout_s: float = field(default=300.0, metadata=_opt("collective / rendezvous timeout in seconds"))
    profile: bool = field(default=False, metadata=_opt("run torch.profiler over a few steps after the timed window"))
    price_per_hour: float | None = field(default=None, metadata=_opt("device price per hour, for cost per million samples"))
    currency: str | None = field(default=None, metadata=_opt("the currency of price_per_hour: USD, EUR, ... (letters)"))

    # -- mode serve (bench_core/serving; docs/serving.md) -------------------------------------
    engine: str | None = field(default=None, metadata=_opt(
        "mode serve: the serving engine preset: transformers, vllm, sglang, trtllm, tgi, llamacpp (default "
        "transformers)"))
    server_url: str | None = field(default=None, metadata=_opt(
        "mode serve: base URL of a running server to measure (default: start the engine on a free port)"))
    served_model: str | None = field(default=None, metadata=_opt(
        "mode serve: the model name to send (default: the folder the engine was started on)"))
    model_dir: str | None = field(default=None, metadata=_opt(
        "mode serve: a local model folder to serve and take the tokenizer from (default: model's shape with random "
        "weights and an offline tokenizer, written once and cached)"))
    server_args: str | None = field(default=None, metadata=_opt(
        "mode serve: extra arguments appended to the engine's command line (space separated)"))
    endpoint: str | None = field(default=None, metadata=_opt(
        "mode serve: completions (/v1/completions) or chat (/v1/chat/completions) (default completions)"))
    concurrency: int | None = field(default=None, metadata=_opt(
        "mode serve: users in a closed loop; with request_rate, the most requests in flight (default 1 without a "
        "rate)"))
    request_rate: float | None = field(default=None, metadata=_opt(
        "mode serve: requests/s of an open-loop arrival process (gamma gaps, see burstiness); empty: closed loop"))
    burstiness: float | None = field(default=None, metadata=_opt(
        "mode serve with request_rate: the gamma shape of the gaps, 1 = Poisson, < 1 burstier (default 1)"))
    request_timeout_s: float | None = field(default=None, metadata=_opt(
        "mode serve: a request fails when no chunk arrives for this many seconds (default 120)"))
    server_timeout_s: float | None = field(default=None, metadata=_opt(
        "mode serve: how long a started server may take to become healthy (default 600)"))
    slo_ttft_ms: float | None = field(default=None, metadata=_opt(
        "mode serve: p99 time-to-first-token bound of the SLO, ms (default 500: MLPerf Llama-3.1-8B interactive)"))
    slo_tpot_ms: float | None = field(default=None, metadata=_opt(
        "mode serve: p99 time-per-output-token bound of the SLO, ms (default 30: MLPerf Llama-3.1-8B interactive)"))
    max_error_rate: float | None = field(default=None, metadata=_opt(
        "mode serve: stop a point when more than this fraction of its requests failed (default 0.5)"))
    shared_prefix_len: int | None = field(default=None, metadata=_opt(
        "mode serve: leading tokens every prompt of the run shares (a system prompt), the rest of each prompt "
        "unique; 0 (default): every prompt starts differently, so no prefix cache answers it. Above 0 a warm "
        "prefix cache may inflate throughput: the row says so in noise_flags (shared-prefix)"))
    length_dist: str | None = field(default=None, metadata=_opt(
        "mode serve: lengths around prompt_len and new_tokens: fixed (default), uniform:R, normal:CV, lognormal:SIGMA"))
    prompt_file: str | None = field(default=None, metadata=_opt(
        "mode serve: JSONL of your prompts, a line each: {\"prompt\": ...} or {\"messages\": [...]}, [\"max_tokens\"]"))
    trace_file: str | None = field(default=None, metadata=_opt("mode serve: JSONL trace to replay (Mooncake's form)"))
    client_workers: int | None = field(default=None, metadata=_opt("mode serve: client processes (default 1)"))
    trace_time_scale: float | None = field(default=None, metadata=_opt("mode serve: trace gaps x this (default 1)"))
    turns: int | None = field(default=None, metadata=_opt("mode serve: turns of each conversation (default 1)"))
    think_time_s: float | None = field(default=None, metadata=_opt("mode serve, turns > 1: wait after a reply, s"))
    saturation_s: float | None = field(default=None, metadata=_opt("mode serve: over-saturation window, s (default 15)"))

    def __post_init__(self) -> None:
        _validate(self)

    # -- construction -------------------------------------------------------------
    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "BenchConfig":
        """Build from a dict (notebook parameters, YAML); unknown keys are refused."""
        if not isinstance(values, dict):
            raise ConfigError("config", f"must be a mapping of field names to values, got {type(values).__name__}")
        check_known_keys(values, cls.field_names(), where="config")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "BenchConfig":
        return dataclasses.replace(self, **changes)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def config_hash(self) -> str:
        """Stable id of what is measured (the same config always has the same hash).

        The search's settings count only with batch_size max (they change nothing else), and the
        fields of HASHED_WHEN_SET only when set."""
        values = self.to_dict()
        if self.batch_size != MAX_BATCH:
            for name in SEARCH_FIELDS:
                values.pop(name)
        for name in HASHED_WHEN_SET:
            if values[name] is None:
                values.pop(name)
        for name, default in HASHED_WHEN_NOT.items():
            if values.get(name, default) == default:
                values.pop(name, None)
        blob = json.dumps(values, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def check_known_keys(values: dict, allowed: list[str], where: str) -> None:
    """Every key not in `allowed` refused at once (one line each), with the key a typo meant."""
    found = Mistakes()
    for key in values:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            found.add(ConfigError(str(key), f"unknown key in {where}{hint}; allowed: {', '.join(allowed)}"))
    found.raise_any(where)


def _as_batch_size(value: Any) -> int | str:
    if isinstance(value, str) and value.strip().lower() == MAX_BATCH:
        return MAX_BATCH
    try:
        number = as_int("batch_size", value, minimum=1, maximum=2**63 - 1)
    except ConfigError:
        raise ConfigError("batch_size", f"must be a whole number >= 1 or max, got {value!r}") from None
    return as_int("batch_size", number, maximum=MAX_WHOLE)


_DEVICE_RE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def validate_device_name(name: str) -> str:
    """Syntax only; whether the device exists is checked when a run resolves it."""
    key = name.strip().lower()
    if not _DEVICE_RE.match(key):
        raise ConfigError("device", f"got {name!r}; allowed: auto, cpu, cuda, cuda:N, mps")
    return key


def _as_margin(value: Any) -> float:
    margin = as_float("batch_margin", value)
    if margin >= 1:
        raise ConfigError("batch_margin", f"must be a fraction in [0, 1), got {margin!r}")
    return margin


MAX_THREADS = 1024
DAY_S = 86_400.0  # the longest a repeat's window or a collective's wait may be: a day


def _whole(name: str, minimum: int, optional: bool = False) -> Callable[[Any], int | None]:
    return lambda value: as_int(name, value, minimum=minimum, optional=optional)


# Each field read alone, so that every wrong value among them is said at once (config.mistakes); the checks
# after them combine fields, and run once each field is right, as do the serving fields' (config/serve.py,
# one mistake at a time).
FIELD_CHECKS: dict[str, Callable[[Any], Any]] = {
    "mode": lambda v: as_choice("mode", v, MODES),
    # None: the precision's own default (fp8 compiles), filled in once the precision is known
    "compile": lambda v: None if v is None else as_choice("compile", v, COMPILE_MODES),
    "optimizer": lambda v: as_choice("optimizer", v, OPTIMIZERS),
    "parallelism": lambda v: as_choice("parallelism", v, PARALLELISMS),
    "activation_checkpointing": lambda v: as_choice("activation_checkpointing", v, CHECKPOINTING),
    "precision": lambda v: resolve_precision(as_str("precision", v) if isinstance(v, str) else str(v)).name,
    "device": lambda v: validate_device_name(as_str("device", v)),
    "rdzv_endpoint": lambda v: as_str("rdzv_endpoint", v),
    "batch_size": _as_batch_size,
    "max_batch_size": _whole("max_batch_size", 1),
    "batch_margin": _as_margin,
    **{name: _whole(name, low) for name, low in (("steps", 1), ("warmup_steps", 0), ("repeats", 1),
                                                ("nproc_per_node", 1), ("nnodes", 1), ("node_rank", 0),
                                                ("tp_degree", 1))},
    "seed": lambda v: as_int("seed", v, minimum=0, maximum=2**63 - 1),  # what torch's generators take
    # Far beyond any CPU's cores; torch.set_num_threads(99999) ran out of memory and crashed the process.
    "num_threads": lambda v: as_int("num_threads", v, minimum=0, maximum=MAX_THREADS),
    "min_seconds": lambda v: as_float("min_seconds", v, maximum=DAY_S),
    "dist_timeout_s": lambda v: as_float("dist_timeout_s", v, minimum=1.0, maximum=DAY_S),
    "price_per_hour": lambda v: as_float("price_per_hour", v, optional=True),
    **{name: (lambda v, name=name: as_bool(name, v)) for name in ("channels_last", "cudnn_benchmark", "profile")},
    **{name: _whole(name, 1, optional=True) for name in ("width", "height", "depth", "seq_len", "prompt_len",
                                                         "new_tokens", "num_tables", "embedding_dim",
                                                         "indices_per_lookup", "latent_size", "denoise_steps",
                                                         "audio_frames")},
    # (a recommendation model's own check bounds it, at 2**31: what its hashed indices stay inside int64 with)
    "rows_per_table": lambda v: as_int("rows_per_table", v, minimum=1, optional=True, maximum=2**63 - 1),
    "zipf_exponent": lambda v: as_float("zipf_exponent", v, optional=True),
}


def _validate(cfg: BenchConfig) -> None:
    found = Mistakes()
    with found.kept():
        spec = resolve_model(as_str("model", cfg.model))
    for name, check in FIELD_CHECKS.items():
        with found.kept():
            setattr(cfg, name, check(getattr(cfg, name)))
    found.raise_any()
    cfg.model = spec.name
    compile_defaulted = cfg.compile is None  # the row records the mode that ran: the precision's default
    if compile_defaulted:
        cfg.compile = resolve_precision(cfg.precision).default_compile
    cfg.currency = as_currency(cfg.currency, cfg.price_per_hour)

    if cfg.mode == "train" and cfg.precision == "fp16" and cfg.optimizer in ("adam", "adamw"):
        raise ConfigError("optimizer", f"{cfg.optimizer} with precision fp16 trains to NaN: its state is float16 (eps "
                                       "1e-8 rounds to 0, the second moment underflows) and pure fp16 has no master "
                                       "weights or loss scaling; allowed: sgd with fp16, or precision amp-fp16")
    if cfg.batch_size == MAX_BATCH:
        check_spread_search(cfg)
    if cfg.node_rank >= cfg.nnodes:
        raise ConfigError("node_rank", f"must be < nnodes ({cfg.nnodes}), got {cfg.node_rank}")
    if cfg.nnodes > 1 and not cfg.rdzv_endpoint:
        raise ConfigError("rdzv_endpoint", "is required when nnodes > 1 (host:port reachable from every node)")
    if cfg.rdzv_endpoint and not _is_endpoint(cfg.rdzv_endpoint):
        raise ConfigError("rdzv_endpoint", f"must be host:port, got {cfg.rdzv_endpoint!r}")
    _check_mesh(cfg)

    validate_serving(cfg)
    spec.check(cfg)  # fills the model's default input, refuses inputs, modes and settings its task cannot take
    if cfg.compile != "off" and cfg.warmup_steps < MIN_COMPILE_WARMUP_STEPS:  # after the precision's refusals
        why = f" ({cfg.precision} compiles by default; compile off runs it eager)" if compile_defaulted else ""
        raise ConfigError("warmup_steps", f"must be >= {MIN_COMPILE_WARMUP_STEPS} with compile {cfg.compile}{why} "
                                          f"(compilation and CUDA-graph capture stay out of the window), "
                                          f"got {cfg.warmup_steps}")
    check_shared_prefix(cfg)  # against prompt_len, which the model's check fills


def check_spread_search(cfg: BenchConfig) -> None:
    """Where a batch-size search may run on several processes: on one node, with a sharded parallelism, every
    probe a run of all the processes at one per-rank batch (so every rank uses the same batch)."""
    if cfg.world_size == 1:
        return
    if cfg.nnodes > 1:
        raise ConfigError("batch_size", f"max is searched on one node; over {cfg.nnodes} nodes each would search on "
                                        "its own and could settle on another batch: give a number (search it on "
                                        "one node with the same nproc_per_node)")
    if cfg.parallelism == "ddp":
        raise ConfigError("batch_size", f"max with {cfg.world_size} processes is searched for a sharded parallelism "
                                        "(fsdp, fsdp-tp); under ddp every rank holds the whole model, as one process "
                                        "does: give a number (find it with bench find-batch on one device)")


def _check_mesh(cfg: BenchConfig) -> None:
    """The parallelism against the processes started; what the model takes is its task's check."""
    sharded = cfg.parallelism != "ddp" or cfg.activation_checkpointing != "none"
    if sharded and cfg.mode != "train":
        name = "parallelism" if cfg.parallelism != "ddp" else "activation_checkpointing"
        raise ConfigError(name, f"{getattr(cfg, name)} applies to mode train only (mode is {cfg.mode}); "
                                f"allowed: {'ddp' if name == 'parallelism' else 'none'}")
    if cfg.parallelism != "fsdp-tp":
        if cfg.tp_degree != 1:
            raise ConfigError("tp_degree", f"applies to parallelism fsdp-tp only (parallelism is {cfg.parallelism})")
    elif cfg.tp_degree < 2:
        raise ConfigError("tp_degree", "must be >= 2 with parallelism fsdp-tp (1 is fsdp)")
    elif cfg.tp_degree > cfg.world_size:
        raise ConfigError("tp_degree", f"a tensor-parallel mesh of {cfg.tp_degree} is larger than the "
                                       f"{cfg.world_size} process(es) started (nproc_per_node x nnodes)")
    elif cfg.world_size % cfg.tp_degree:
        raise ConfigError("tp_degree", f"{cfg.tp_degree} does not divide the {cfg.world_size} processes "
                                       "(nproc_per_node x nnodes)")
    if cfg.parallelism != "ddp" and cfg.precision == "amp-fp16":
        raise ConfigError("precision", f"amp-fp16 with {cfg.parallelism} is not run here: its loss scaling would have "
                                       "to unscale sharded gradients; allowed: fp32, fp16, bf16, amp-bf16 (FSDP's "
                                       "bf16 parameters with fp32 reductions, as torchtitan trains)")
    if cfg.parallelism == "hsdp" and cfg.nnodes < 2:
        raise ConfigError("parallelism", "hsdp shards within a node and replicates across nodes: it needs "
                                         "nnodes >= 2; on one node use fsdp")


def _is_endpoint(text: str) -> bool:
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536
