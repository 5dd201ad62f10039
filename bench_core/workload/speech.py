"""The speech family: Whisper-shaped encoder-decoders from Hugging Face `transformers`, built from a
configuration with random weights (never `from_pretrained`). The input is an utterance of log-mel
frames (100 a second; Whisper's encoder takes exactly 2 x max_source_positions of them: 3000, 30 s).

Train: random log-mel frames and `seq_len` random transcript tokens, the model's own loss. Infer: the
encoder alone over the audio (the model built is the encoder). Both in audio seconds per second (audio
s/s: global batch x the utterance's seconds x steps / seconds). Generate: the encoder over the audio
(the prompt), then exactly `new_tokens` tokens with the KV cache, in the text family's units (time to
first token, decode tokens/s, output tokens/s) and audio s/s beside them (what one transcription call
gets through: the inverse real-time factor).

Its own module rather than a text task: the input is frames, not token ids, the encoder runs alone
in infer, and the units differ by mode. The named models are plain data; transformers and torch are
imported where a model or a batch is made.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from bench_core.errors import ConfigError
from bench_core.workload import transformer_shape as shape
from bench_core.workload.family import ModelSpec, Task, Workload, random_tensor, seeded_generator

FRAMES_PER_S = 100     # WhisperFeatureExtractor: 16 kHz audio, a frame every 160 samples
TRANSCRIPT_TOKENS = 128  # default seq_len and new_tokens: 30 s of speech is about 75 words, about 100 tokens
AUDIO_UNIT = "audio s/s"


@dataclass(frozen=True)
class SpeechModel:
    """A Whisper configuration as plain values (whisper's own names), read by validation without
    importing transformers."""
    config: dict = field(hash=False)

    @property
    def frames(self) -> int:
        """What the encoder takes: its two convolutions (strides 1 and 2) make max_source_positions
        positions of 2 x max_source_positions frames, and it refuses any other length."""
        return 2 * int(self.config["max_source_positions"])

    @property
    def mel_bins(self) -> int:
        return int(self.config["num_mel_bins"])

    @property
    def max_tokens(self) -> int:
        return int(self.config["max_target_positions"])

    def build(self, mode: str):
        from transformers import WhisperConfig, WhisperForConditionalGeneration
        from transformers.models.whisper.modeling_whisper import WhisperEncoder
        config = WhisperConfig(**self.config)
        # infer times the encoder alone: build only it (its parameters are the row's params_count)
        return WhisperEncoder(config) if mode == "infer" else WhisperForConditionalGeneration(config)


class SpeechTask(Task):
    """Log-mel frames in; the model's own loss (train), the encoder's output (infer), or generate."""
    name = "speech-to-text"
    family = "speech"
    sample = "utterance"
    unit = AUDIO_UNIT
    shape_fields = ("audio_frames", "seq_len", "new_tokens")
    modes = ("train", "infer", "generate")
    description = "a speech model (Whisper-shaped encoder-decoder)"

    def build(self, spec: ModelSpec, cfg):
        return spec.builder.build(cfg.mode)

    def check(self, spec: ModelSpec, cfg) -> None:
        super().check(spec, cfg)
        model: SpeechModel = spec.builder
        if cfg.channels_last:
            raise ConfigError("channels_last", f"applies to image models only; {spec.name} is {self.description}")
        cfg.audio_frames = cfg.audio_frames or model.frames
        if cfg.audio_frames != model.frames:
            raise ConfigError("audio_frames", f"{spec.name}'s encoder takes exactly {model.frames} frames (2 x "
                                              f"max_source_positions: {model.frames / FRAMES_PER_S:g} s; Whisper pads "
                                              f"shorter audio to it and cuts longer audio into windows of it), got "
                                              f"{cfg.audio_frames}; allowed: {model.frames}")
        if cfg.mode == "infer":
            for name in ("seq_len", "new_tokens"):
                if getattr(cfg, name) is not None:
                    raise ConfigError(name, f"infer runs {spec.name}'s encoder alone (no tokens); use mode train or "
                                            "generate for the decoder")
            return
        limit = model.max_tokens
        if cfg.mode == "train":
            if cfg.new_tokens is not None:
                raise ConfigError("new_tokens", "applies to mode generate only (mode is train: give seq_len)")
            cfg.seq_len = cfg.seq_len or min(TRANSCRIPT_TOKENS, limit)
            if cfg.seq_len > limit:
                raise ConfigError("seq_len", f"{spec.name}'s decoder takes at most {limit} positions "
                                             f"(max_target_positions), got {cfg.seq_len}")
            return
        if cfg.seq_len is not None:
            raise ConfigError("seq_len", "with mode generate the transcript is new_tokens long: give that instead")
        if cfg.compile != "off":
            raise ConfigError("compile", "not with mode generate: transformers' dynamic KV cache changes shape at "
                                         "every token, so a compiled model would recompile inside the timed window; "
                                         "allowed: off")
        cfg.new_tokens = cfg.new_tokens or min(TRANSCRIPT_TOKENS, limit - 1)
        if cfg.new_tokens < 2:
            raise ConfigError("new_tokens", f"must be >= 2 (decode is timed over new_tokens - 1 steps), got "
                                            f"{cfg.new_tokens}")
        if cfg.new_tokens + 1 > limit:
            raise ConfigError("new_tokens", f"the start token + new_tokens = {cfg.new_tokens + 1} is beyond "
                                            f"{spec.name}'s {limit} decoder positions (max_target_positions)")

    def seconds(self, cfg) -> float:
        """The utterance's audio seconds."""
        return cfg.audio_frames / FRAMES_PER_S

    def default_input(self, spec: ModelSpec) -> str:
        return f"{spec.builder.frames / FRAMES_PER_S:g} s audio"

    def sample_shape(self, cfg) -> str:
        audio = f"{cfg.audio_frames} frames ({self.seconds(cfg):g} s)"  # of the model's mel bins (bench models)
        if cfg.mode == "train":
            return f"{audio} + {cfg.seq_len} tokens"
        return f"{audio} + {cfg.new_tokens} new tokens" if cfg.mode == "generate" else audio

    def input_text(self, cfg) -> str:
        audio = f"{self.seconds(cfg):g} s audio"
        if cfg.mode == "train":
            return f"{audio}, seq {cfg.seq_len}"
        return f"{audio} + {cfg.new_tokens} new" if cfg.mode == "generate" else audio

    def units(self, cfg) -> tuple[str, str]:
        return f"{self.sample}s/s", ("tokens/s" if cfg.mode == "generate" else AUDIO_UNIT)

    def throughput(self, cfg, samples_per_s: float) -> float:
        return samples_per_s * (cfg.new_tokens if cfg.mode == "generate" else self.seconds(cfg))

    def throughput_columns(self, cfg, samples_per_s: float) -> dict:
        audio = {"audio_s_per_s": samples_per_s * self.seconds(cfg)}
        return {**audio, "tokens_per_s": samples_per_s * cfg.new_tokens} if cfg.mode == "generate" else audio

    def model_facts(self, model) -> dict:
        return {"attn_implementation": getattr(model.config, "_attn_implementation", None)}

    def kv_cache_bytes(self, spec: ModelSpec, cfg, sequences: int, dtype_bytes: int) -> tuple[int, str] | None:
        """The decoder's tokens (the start token and the new ones but the last) and, for cross-attention,
        the encoder's max_source_positions."""
        if cfg.mode != "generate":
            return None
        from transformers import WhisperConfig  # transformers: imported where a model's shape is read
        model: SpeechModel = spec.builder
        return shape.kv_cache_bytes(WhisperConfig(**model.config), sequences, cfg.new_tokens, dtype_bytes,
                                    int(model.config["max_source_positions"]), f"start token + {cfg.new_tokens} new - 1")

    def make_workload(self, spec: ModelSpec, cfg, device, dtype, rank: int = 0) -> Workload:
        import torch
        generator = seeded_generator(device, cfg.seed + rank)
        model: SpeechModel = spec.builder
        features = random_tensor((cfg.batch_size, model.mel_bins, cfg.audio_frames), device, dtype, generator)
        if cfg.mode == "generate":
            # transformers' generate itself, as WhisperForConditionalGeneration.generate calls it for a clip
            # of up to 30 s once it has chosen the start tokens: without its language detection, timestamp
            # rules and temperature fallback, whose work would depend on what random weights predict.
            from transformers import GenerationMixin

            from bench_core.workload.generation import Generation
            run = Generation({"input_features": features}, cfg.new_tokens, generate=GenerationMixin.generate)
            # The memory estimate traces the prefill: the encoder, and the decoder over the start token.
            start = torch.full((cfg.batch_size, 1), int(model.config["decoder_start_token_id"]), device=device)
            return Workload(features, loss=_model_loss, train_call=None, infer_call=None, generate_call=run,
                            facts=run.facts, trace_note="generate traced as its prefill",
                            trace_call=lambda m: m(input_features=features, decoder_input_ids=start, use_cache=False))
        vocab = int(model.config["vocab_size"])
        labels = torch.randint(0, vocab, (cfg.batch_size, cfg.seq_len or 1), device=device, generator=generator)
        return Workload(features, loss=_model_loss, train_call=lambda m: m(input_features=features, labels=labels),
                        infer_call=lambda m: m(input_features=features))


def _model_loss(output):
    return output.loss


SPEECH = SpeechTask()
TASKS = (SPEECH,)


def _whisper(width: int, layers: int, heads: int, mel_bins: int = 80, vocab: int = 51865, **more) -> dict:
    """A Whisper configuration: as many encoder as decoder layers and heads, a 4x feed-forward, 30 s of
    audio (1500 source positions), a 448-token decoder, and the published special tokens."""
    return {"d_model": width, "encoder_layers": layers, "decoder_layers": layers, "encoder_attention_heads": heads,
            "decoder_attention_heads": heads, "encoder_ffn_dim": 4 * width, "decoder_ffn_dim": 4 * width,
            "num_mel_bins": mel_bins, "vocab_size": vocab, "max_source_positions": 1500, "max_target_positions": 448,
            "decoder_start_token_id": 50258, "bos_token_id": 50257, "eos_token_id": 50257, "pad_token_id": 50257,
            **more}


_SOURCE = "transformers"
MODELS = (
    ModelSpec("whisper-base", SPEECH, SpeechModel(_whisper(512, 6, 8)), source=_SOURCE,
              notes="shaped as OpenAI's whisper-base (74M): 6 + 6 layers, 512 wide, 80 mel bins"),
    ModelSpec("whisper-small", SPEECH, SpeechModel(_whisper(768, 12, 12)), source=_SOURCE,
              notes="shaped as OpenAI's whisper-small (244M): 12 + 12 layers, 768 wide, 80 mel bins"),
    ModelSpec("whisper-large-v3", SPEECH, SpeechModel(_whisper(1280, 32, 20, mel_bins=128, vocab=51866)),
              source=_SOURCE, notes="shaped as OpenAI's whisper-large-v3 (1.55B; MLPerf Inference's Whisper): "
                                    "32 + 32 layers, 128 mel bins"),
    ModelSpec("whisper-micro", SPEECH, SpeechModel(_whisper(64, 2, 4, max_source_positions=100,
                                                            max_target_positions=64)),
              source=_SOURCE, notes="Whisper-shaped, 2 + 2 layers, 64 wide, 200 frames (2 s): for quick CPU runs "
                                    "(not OpenAI's whisper-tiny)"),
)
