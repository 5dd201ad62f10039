"""The diffusion family: denoisers from `diffusers`, built from a configuration with random weights
(never `from_pretrained`): a Stable-Diffusion-1.5-shaped UNet (UNet2DConditionModel, conditioned on
77 text embeddings through cross-attention) and a DiT-XL/2-shaped transformer (DiTTransformer2DModel,
conditioned on a class label), and a tiny one of each for CPU runs. The input is a square latent of
`latent_size` latent pixels (the image is 8x as wide: SD's VAE, which DiT uses too).

Train: one denoising training step: the noise predicted from random noisy latents, timesteps and
conditioning, with the mean squared error against random noise (a sample is an image: images/s).
Infer: one denoising step as a pipeline runs it, with classifier-free guidance: one denoiser call on
the conditional and the unconditional halves at once (2 x batch latents), then the guidance. A sample
is one image advanced one step (denoising steps/s); images/s divides that by `denoise_steps`. Only the
denoiser is timed: no text encoder, VAE decode or scheduler update.

Plain data at import; diffusers and torch are imported where a model or a batch is made.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from bench_core.errors import ConfigError
from bench_core.workload.family import ModelSpec, Task, Workload, random_tensor, seeded_generator

VAE_FACTOR = 8         # an image is 8x the latent's side (SD's VAE; DiT's pipeline uses the same VAE)
LATENT_CHANNELS = 4
TEXT_TOKENS = 77       # SD's text embeddings: CLIP's 77-token context
CLASSES = 1000         # DiT's ImageNet classes; label CLASSES is its unconditional ("null") class
TRAIN_TIMESTEPS = 1000
DENOISE_STEPS = 50     # num_inference_steps of diffusers' StableDiffusionPipeline and DiTPipeline
GUIDANCE_SCALE = 7.5   # StableDiffusionPipeline's default; the value does not change the work
STEPS_UNIT = "denoising steps/s"


@dataclass(frozen=True)
class Denoiser:
    """How to build one denoiser: `kind` unet (text-conditioned) or dit (class-conditioned) and the
    diffusers constructor's arguments as plain values."""
    kind: str
    config: dict = field(hash=False)
    default_latent: int = 64

    @property
    def patch(self) -> int:
        """The side a latent must be a multiple of: DiT's patch; 1 for a UNet (diffusers sizes its
        up-sampling to the skip connections, so a UNet takes any side)."""
        return int(self.config.get("patch_size", 1))

    def build(self, latent_size: int):
        import logging

        import diffusers
        logging.getLogger("diffusers.models.modeling_utils").addFilter(no_empty_fp32_warning)  # once: same function
        if self.kind == "unet":
            return diffusers.UNet2DConditionModel(**self.config)
        # Its sin-cos position table is made for sample_size; made for the latent it will see, it is
        # not recomputed at every call.
        return diffusers.DiTTransformer2DModel(**self.config, sample_size=latent_size)

    def conditioning(self, rows: int, guided: bool, device, dtype, generator) -> dict:
        """The denoiser's conditioning for `rows` latents: random text embeddings (UNet) or random
        class labels (DiT); with guidance the second half is the unconditional one (another random
        embedding, as an empty prompt's; DiT's null class)."""
        import torch
        if self.kind == "unet":
            width = self.config["cross_attention_dim"]
            return {"encoder_hidden_states": random_tensor((rows, TEXT_TOKENS, width), device, dtype, generator)}
        labels = torch.randint(0, CLASSES, (rows,), device=device, generator=generator)
        if guided:
            labels[rows // 2:] = CLASSES
        return {"class_labels": labels}


def no_empty_fp32_warning(record) -> bool:
    """diffusers (0.42) warns at every `.to(dtype)` that modules 'should be kept in float32: []' even
    when its list is empty (a pure-cast precision casts the model so): that false alarm is dropped; a
    warning that names modules still shows."""
    return "should be kept in float32: []" not in record.getMessage()


class DiffusionTask(Task):
    """A denoiser trained (images/s) or run one denoising step with guidance (denoising steps/s)."""
    name = "diffusion"
    family = "diffusion"
    sample = "image"
    unit = "images/s"
    shape_fields = ("latent_size", "denoise_steps")
    modes = ("train", "infer")
    description = "a diffusion model (a denoiser)"
    memory_layout = True  # its latents are 4D

    def build(self, spec: ModelSpec, cfg):
        return spec.builder.build(cfg.latent_size)

    def check(self, spec: ModelSpec, cfg) -> None:
        super().check(spec, cfg)
        denoiser: Denoiser = spec.builder
        cfg.latent_size = cfg.latent_size or denoiser.default_latent
        side, patch = cfg.latent_size, denoiser.patch
        if side % patch:
            raise ConfigError("latent_size", f"{spec.name} cuts the latent into {patch}x{patch} patches: a multiple "
                                             f"of {patch}, got {side}")
        if cfg.mode == "train":
            if cfg.denoise_steps is not None:
                raise ConfigError("denoise_steps", "applies to mode infer only (a training step is one denoising "
                                                   "step at a random timestep)")
            return
        cfg.denoise_steps = cfg.denoise_steps or DENOISE_STEPS

    def default_input(self, spec: ModelSpec) -> str:
        side = spec.builder.default_latent
        return f"latent {side} ({side * VAE_FACTOR} px)"

    def sample_shape(self, cfg) -> str:
        side = cfg.latent_size
        text = f"{LATENT_CHANNELS}x{side}x{side} latent ({side * VAE_FACTOR} px)"
        return text if cfg.mode == "train" else f"{text}, CFG, {cfg.denoise_steps} steps"

    def input_text(self, cfg) -> str:
        text = f"latent {cfg.latent_size}"
        return text if cfg.mode == "train" else f"{text}, {cfg.denoise_steps} steps"

    def units(self, cfg) -> tuple[str, str]:
        return ("images/s", "images/s") if cfg.mode == "train" else (STEPS_UNIT, STEPS_UNIT)

    def throughput_columns(self, cfg, samples_per_s: float) -> dict:
        if cfg.mode == "train":
            return {}
        return {"denoise_steps_per_s": samples_per_s, "images_per_s": samples_per_s / cfg.denoise_steps}

    def model_facts(self, model) -> dict:
        # diffusers' AttnProcessor2_0 calls torch's scaled_dot_product_attention: SDPA, as transformers says it
        names = sorted({type(m.processor).__name__ for m in model.modules() if hasattr(m, "processor")})
        return {"attn_implementation": "sdpa" if names == ["AttnProcessor2_0"] else ", ".join(names) or None}

    def make_workload(self, spec: ModelSpec, cfg, device, dtype, rank: int = 0) -> Workload:
        import torch
        import torch.nn.functional as F
        generator = seeded_generator(device, cfg.seed + rank)
        denoiser: Denoiser = spec.builder
        guided = cfg.mode == "infer"
        rows = 2 * cfg.batch_size if guided else cfg.batch_size  # guidance: both halves in one call
        shape = (rows, LATENT_CHANNELS, cfg.latent_size, cfg.latent_size)
        latents = random_tensor(shape, device, dtype, generator, torch.channels_last if cfg.channels_last else None)
        if guided:  # a pipeline's step: one timestep for the whole batch
            timesteps = torch.randint(0, TRAIN_TIMESTEPS, (1,), device=device, generator=generator).expand(rows)
        else:
            timesteps = torch.randint(0, TRAIN_TIMESTEPS, (rows,), device=device, generator=generator)
        conditioning = denoiser.conditioning(rows, guided, device, dtype, generator)
        noise = torch.randn(shape, device=device, generator=generator)

        def predict(model):
            # DiT predicts the noise and its variance (8 channels): the noise is the first 4
            return model(latents, timestep=timesteps, **conditioning).sample[:, :LATENT_CHANNELS]

        def guided_step(model):
            conditional, unconditional = predict(model).chunk(2)
            return unconditional + GUIDANCE_SCALE * (conditional - unconditional)

        return Workload(latents, loss=lambda predicted: F.mse_loss(predicted.float(), noise),
                        train_call=predict, infer_call=guided_step)


DIFFUSION = DiffusionTask()
TASKS = (DIFFUSION,)


# Stable Diffusion 1.5's UNet, as its published unet/config.json gives it (diffusers'
# UNet2DConditionModel defaults are the same but for cross_attention_dim 1280): "attention_head_dim"
# 8 is, in diffusers' naming, 8 heads per attention layer.
_SD15 = {"in_channels": LATENT_CHANNELS, "out_channels": LATENT_CHANNELS, "layers_per_block": 2,
         "block_out_channels": (320, 640, 1280, 1280),
         "down_block_types": ("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
         "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
         "cross_attention_dim": 768, "attention_head_dim": 8, "norm_num_groups": 32, "norm_eps": 1e-5,
         "act_fn": "silu", "flip_sin_to_cos": True, "freq_shift": 0, "downsample_padding": 1, "sample_size": 64}
# DiT-XL/2 as diffusers' scripts/convert_dit_to_diffusers.py builds it: 28 layers, 16 heads of 72
# (1152 wide), 2x2 patches, learned variance (8 output channels), 1000 classes, adaLN-Zero.
_DIT_XL_2 = {"num_layers": 28, "num_attention_heads": 16, "attention_head_dim": 72, "in_channels": LATENT_CHANNELS,
             "out_channels": 2 * LATENT_CHANNELS, "patch_size": 2, "attention_bias": True,
             "activation_fn": "gelu-approximate", "num_embeds_ada_norm": CLASSES, "norm_type": "ada_norm_zero",
             "norm_elementwise_affine": False}
_SOURCE = "diffusers"
MODELS = (
    ModelSpec("sd15-unet", DIFFUSION, Denoiser("unet", _SD15, default_latent=64), source=_SOURCE,
              notes="Stable Diffusion 1.5's UNet from its published config: 77x768 text embeddings by "
                    "cross-attention"),
    ModelSpec("dit-xl-2", DIFFUSION, Denoiser("dit", _DIT_XL_2, default_latent=32), source=_SOURCE,
              notes="DiT-XL/2, class-conditioned (the paper's 675M: diffusers copies the embedders into each "
                    "of its 28 blocks)"),
    ModelSpec("sd-unet-tiny", DIFFUSION, Denoiser("unet", {
        **_SD15, "block_out_channels": (32, 64), "layers_per_block": 1, "cross_attention_dim": 32,
        "attention_head_dim": 2, "norm_num_groups": 8, "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
        "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"), "sample_size": 8}, default_latent=8),
              source=_SOURCE, notes="SD-UNet-shaped, 2 levels of 32 and 64 channels, 77x32 text embeddings: "
                                    "for quick CPU runs"),
    ModelSpec("dit-tiny", DIFFUSION, Denoiser("dit", {
        **_DIT_XL_2, "num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 16}, default_latent=8),
              source=_SOURCE, notes="DiT-shaped, 2 layers, 32 wide, 2x2 patches: for quick CPU runs"),
)
