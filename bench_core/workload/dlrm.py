"""DLRM-shaped recommendation models (Naumov et al. 2019, "Deep Learning Recommendation Model for
Personalization and Recommendation Systems"; MLPerf's DLRM and DLRM-DCNv2): a bottom MLP over the
dense features, one summed embedding bag per sparse feature, an interaction, and a top MLP that
gives one click logit.

- `dot`: the pairwise dot products of the bottom MLP's output and every pooled embedding (each pair
  once, no self-products), beside the bottom output (the DLRM paper, facebookresearch/dlrm);
- `dcn`: a low-rank DCNv2 cross network over their concatenation (Wang et al. 2021; torchrec's
  LowRankCrossNet, as MLPerf's DLRM-DCNv2 reference).

Embedding gradients are sparse (nn.EmbeddingBag(sparse=True)): a step updates only the rows its
batch looked up, as the DLRM reference trains. torch code: the recommendation family imports it only
when a model is built.
"""
from __future__ import annotations

import torch
from torch import nn


def mlp(sizes: list[int], last_relu: bool = True) -> nn.Sequential:
    """Linear layers between `sizes`, each followed by a ReLU (the last one only if `last_relu`)."""
    layers: list[nn.Module] = []
    for i, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(m, n))
        if last_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class LowRankCrossNet(nn.Module):
    """DCNv2's cross layers with low-rank weights: x_{l+1} = x_0 * (W_l V_l x_l + b_l) + x_l."""

    def __init__(self, width: int, layers: int, rank: int):
        super().__init__()
        self.down = nn.ModuleList(nn.Linear(width, rank, bias=False) for _ in range(layers))
        self.up = nn.ModuleList(nn.Linear(rank, width) for _ in range(layers))

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        x = x0
        for down, up in zip(self.down, self.up):
            x = x0 * up(down(x)) + x
        return x


class DLRM(nn.Module):
    """Dense features (batch, dense) and sparse indices (tables, batch, indices per lookup) -> one
    logit per sample. Tables are made in `table_dtype` (a pure-cast precision's: they are the
    model's bulk, and building them in float32 first would need 1.5x their memory)."""

    def __init__(self, dense_features: int, tables: int, rows: int, dim: int, bottom: list[int], top: list[int],
                 interaction: str = "dot", cross_layers: int = 3, cross_rank: int = 512,
                 table_dtype: torch.dtype = torch.float32):
        super().__init__()
        self.interaction = interaction
        self.bottom = mlp([dense_features, *bottom, dim])
        self.tables = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum", sparse=True, dtype=table_dtype)
                                    for _ in range(tables))
        for table in self.tables:  # the DLRM reference's initialisation: U(-1/sqrt(rows), 1/sqrt(rows))
            nn.init.uniform_(table.weight, -rows ** -0.5, rows ** -0.5)
        features = tables + 1
        if interaction == "dot":
            self.cross = None
            width = dim + features * (features - 1) // 2
            pairs = torch.tril_indices(features, features, offset=-1)
            self.register_buffer("pairs", pairs, persistent=False)
        else:
            width = dim * features
            self.cross = LowRankCrossNet(width, cross_layers, cross_rank)
        self.top = mlp([width, *top, 1], last_relu=False)

    def forward(self, dense: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        pooled = [table(idx) for table, idx in zip(self.tables, indices)]
        features = torch.stack([x, *[p.to(x.dtype) for p in pooled]], dim=1)  # (batch, tables + 1, dim)
        if self.cross is None:
            products = torch.bmm(features, features.transpose(1, 2))
            z = torch.cat([x, products[:, self.pairs[0], self.pairs[1]]], dim=1)
        else:
            z = self.cross(features.flatten(1))
        return self.top(z).squeeze(1)
