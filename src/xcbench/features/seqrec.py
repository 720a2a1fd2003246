"""Sequence encoders for next-item recommendation (MIDX paper section 6.3: SASRec and GRU4Rec, d = 64).

Input: item ids x (B, T), left-padded with -1. Output h (B*T, d): position t's representation of
the items up to t (a query at every position). Padding positions get a zero item vector. The item
table (`input_embedding`, (n, d)) is meant to be tied to the head's class embeddings
(`model.tie_embeddings: true`), as SASRec scores the next item by h . e_item.

- `sasrec` (Kang & McAuley 2018): item embedding * sqrt(d) + learned position embedding ->
  dropout -> `layers` pre-norm Transformer blocks with causal self-attention (position t attends to
  positions s <= t that are not padding; a padding position attends to itself only) -> LayerNorm.
- `gru4rec` (Hidasi et al. 2016): item embedding -> dropout -> `layers`-layer GRU (hidden d).
Weights come from the explicit generator: normal(0, 0.02) for embeddings and projections.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from xcbench.features.base import Dropout, Encoder, init_normal_
from xcbench.registry import ENCODERS


class _ItemEncoder(Encoder):
    def __init__(self, n_items: int, dim: int) -> None:
        super().__init__()
        self.out_dim = dim
        self.items = nn.Embedding(n_items, dim)                                                 # (n, d)

    def item_vectors(self, x: torch.Tensor) -> torch.Tensor:
        return self.items(x.clamp(min=0)) * (x >= 0).unsqueeze(-1)                              # (B, T, d)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self(x).view(x.shape[0], x.shape[1], self.out_dim)[:, -1]                       # (B, d)

    def input_embedding(self) -> nn.Embedding:
        return self.items


@ENCODERS.register("sasrec")
class SASRec(_ItemEncoder):
    def __init__(self, in_dim: int, gen: torch.Generator, dim: int = 64, layers: int = 2, heads: int = 1,
                 dropout: float = 0.2, max_len: int = 20) -> None:
        super().__init__(in_dim, dim)
        self.heads, self.max_len = heads, max_len
        self.pos = nn.Embedding(max_len, dim)                                                   # (T, d)
        block = nn.TransformerEncoderLayer(dim, heads, dim, dropout, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.drop = Dropout(dropout)
        init_normal_(self, gen)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T = x.shape
        if T > self.max_len:
            raise ValueError(f"sasrec: sequences of {T} items exceed max_len = {self.max_len}")
        z = self.item_vectors(x) * math.sqrt(self.out_dim) + self.pos(torch.arange(T, device=x.device))
        valid = x >= 0                                                                          # (B, T)
        ar = torch.arange(T, device=x.device)
        allowed = (ar[None, :, None] >= ar[None, None, :]) & (valid[:, None, :] | torch.eye(T, dtype=torch.bool, device=x.device))
        mask = torch.zeros(B, T, T, device=x.device).masked_fill(~allowed, float("-inf"))     # (B, T, T)
        z = self.blocks(self.drop(z), mask=mask.repeat_interleave(self.heads, 0))
        return self.norm(z).reshape(-1, self.out_dim)                                           # (B*T, d)


@ENCODERS.register("gru4rec")
class GRU4Rec(_ItemEncoder):
    def __init__(self, in_dim: int, gen: torch.Generator, dim: int = 64, layers: int = 1, dropout: float = 0.2) -> None:
        super().__init__(in_dim, dim)
        self.gru = nn.GRU(dim, dim, num_layers=layers, batch_first=True)
        self.drop = Dropout(dropout)
        init_normal_(self, gen)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.drop(self.item_vectors(x)))                                      # (B, T, d)
        return out.reshape(-1, self.out_dim)
