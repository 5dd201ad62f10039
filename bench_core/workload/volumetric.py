"""The volumetric family: the 3D UNet of the 3D-UNet seed. A sample is one volume (volumes/s);
depth x height x width in voxels shape it, and MVox/s (output voxels only) is its size-aware rate.

torch is imported where a batch or a model is made (see family.py).
"""
from __future__ import annotations

from bench_core.errors import ConfigError
from bench_core.workload.family import ModelSpec, Task, Workload, random_tensor, seeded_generator
from bench_core.workload.vision import check_sides


class VolumeTask(Task):
    """A batch of 1 x depth x height x width volumes and a random dense target."""
    name = "volumetric"
    family = "volumetric"
    sample = "volume"
    unit = "volumes/s"
    shape_fields = ("width", "height", "depth")
    description = "a 3D model"

    def check(self, spec: ModelSpec, cfg) -> None:
        width, height, depth = spec.default_size
        cfg.width = cfg.width or width
        cfg.height = cfg.height or height
        cfg.depth = cfg.depth or depth
        super().check(spec, cfg)
        check_sides(spec, {"width": cfg.width, "height": cfg.height, "depth": cfg.depth})
        if cfg.channels_last:
            raise ConfigError("channels_last", f"applies to 2D models only; {spec.name} is a 3D model")

    def default_input(self, spec: ModelSpec) -> str:
        return "x".join(str(v) for v in spec.default_size)

    def sample_shape(self, cfg) -> str:
        return f"1x{cfg.depth}x{cfg.height}x{cfg.width}"

    def throughput_columns(self, cfg, samples_per_s: float) -> dict:
        return {"mpx_per_s": None, "mvox_per_s": cfg.width * cfg.height * cfg.depth * samples_per_s / 1e6}

    def make_workload(self, spec: ModelSpec, cfg, device, dtype, rank: int = 0) -> Workload:
        import torch
        import torch.nn.functional as F
        generator = seeded_generator(device, cfg.seed + rank)
        shape = (cfg.batch_size, 1, cfg.depth, cfg.height, cfg.width)
        x = random_tensor(shape, device, dtype, generator)
        target = torch.rand(shape, device=device, generator=generator)
        return Workload(x, lambda out: F.mse_loss(out.float(), target), lambda m: m(x), lambda m: m(x))


VOLUMETRIC = VolumeTask()
TASKS = (VOLUMETRIC,)


def _unet3d(cfg):
    # The network is torch code (nn.Module subclasses): imported only when the model is built.
    from bench_core.workload.unet3d import UNet3D
    return UNet3D(in_channels=1, out_channels=1, base_features=32, levels=4)


MODELS = (
    ModelSpec("unet3d", VOLUMETRIC, _unet3d, default_size=(64, 64, 64), multiple_of=8, min_size=8,
              source="bench_core", notes="3D UNet of the 3D-UNet seed: 4 levels, 32 base features; sides a multiple of 8"),
)
