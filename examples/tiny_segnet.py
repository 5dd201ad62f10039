"""A small segmentation net of your own, benchmarked with notebook-bench without touching bench_core:

    bench run --model code:examples/tiny_segnet.py:build --mode train --batch-size 8 --device cpu

`build` is all notebook-bench needs: it is given the batch size, the device, the dtype of the inputs and
the shape fields it names (width, height: their defaults here are its defaults), and returns the model
with random weights and one synthetic batch. `blocks` names the model's repeated blocks, so that FSDP2,
activation checkpointing and tensor parallel (with `tp_plan`) can work per block.
"""
import torch
from torch import nn

from bench_core import UserModel


class Block(nn.Module):
    """A residual 3x3 convolution block, with a small channel MLP (two 1x1 convolutions as linears)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.GroupNorm(4, channels)
        self.up = nn.Linear(channels, 2 * channels)
        self.down = nn.Linear(2 * channels, channels)

    def forward(self, x):
        x = x + torch.relu(self.norm(self.conv(x)))
        mixed = self.down(torch.relu(self.up(x.permute(0, 2, 3, 1))))
        return x + mixed.permute(0, 3, 1, 2)


class TinySegNet(nn.Module):
    def __init__(self, classes: int = 5, channels: int = 16, depth: int = 2):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, stride=2, padding=1)
        self.blocks = nn.ModuleList(Block(channels) for _ in range(depth))
        self.head = nn.Conv2d(channels, classes, 1)

    def forward(self, image):
        x = self.stem(image)
        for block in self.blocks:
            x = block(x)
        return nn.functional.interpolate(self.head(x), size=image.shape[-2:], mode="bilinear")


def build(batch_size, device, dtype, width=64, height=64):
    model = TinySegNet().to(device)
    image = torch.randn(batch_size, 3, height, width, device=device, dtype=dtype)
    mask = torch.randint(0, 5, (batch_size, height, width), device=device)
    return UserModel(model, image, sample="image", blocks="blocks",
                     loss=lambda logits: nn.functional.cross_entropy(logits.float(), mask),
                     tp_plan={"up": "colwise", "down": "rowwise"})
