"""The 3D UNet of the 3D-UNet seed: two Conv3d+ReLU per level, MaxPool3d down,
ConvTranspose3d up, skip connections, no normalization."""
from __future__ import annotations

import torch
from torch import nn


def _double_conv(in_ch: int, out_ch: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv3d(in_ch, out_ch, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv3d(out_ch, out_ch, 3, padding=1), nn.ReLU(inplace=True),
    )


class UNet3D(nn.Module):
    def __init__(self, in_channels: int = 1, out_channels: int = 1, base_features: int = 32, levels: int = 4):
        super().__init__()
        widths = [base_features * 2**i for i in range(levels)]
        self.down = nn.ModuleList()
        channels = in_channels
        for width in widths:
            self.down.append(_double_conv(channels, width))
            channels = width
        self.pool = nn.MaxPool3d(2)
        self.upsample = nn.ModuleList(nn.ConvTranspose3d(w * 2, w, 2, stride=2) for w in reversed(widths[:-1]))
        self.up = nn.ModuleList(_double_conv(w * 2, w) for w in reversed(widths[:-1]))
        self.head = nn.Conv3d(base_features, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, block in enumerate(self.down):
            x = block(x)
            if i < len(self.down) - 1:
                skips.append(x)
                x = self.pool(x)
        for upsample, block, skip in zip(self.upsample, self.up, reversed(skips)):
            x = block(torch.cat([upsample(x), skip], dim=1))
        return self.head(x)
