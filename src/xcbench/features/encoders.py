"""Encoders h = f(x) over fixed features, trained jointly with the head.

Interface in features/base.py.

- `identity`: h = x (a linear classifier on the fixed features).
- `linear`: h = x P, a learned (e, out) projection without bias (the RF-softmax XMC model maps the
  v-dim BOW to 128-d by a v x 128 matrix; here x is the fixed feature vector, see the experiment).
- `mlp`: h = ReLU(dropout(x) A + a), one hidden layer (the intermediate layer of the sparse-layer
  paper, Schultheis & Babbar 2023, section 4).
Parameters are initialised from an explicit generator.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from xcbench.features.base import Dropout, Encoder
from xcbench.registry import ENCODERS


@ENCODERS.register("identity")
class Identity(Encoder):
    def __init__(self, in_dim: int, gen: torch.Generator, dropout: float = 0.0) -> None:
        super().__init__()
        self.out_dim = in_dim
        self.drop = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(x)


@ENCODERS.register("mlp")
class MLP(Encoder):
    def __init__(self, in_dim: int, gen: torch.Generator, hidden: int = 512, dropout: float = 0.0) -> None:
        super().__init__()
        self.out_dim = hidden
        self.drop = Dropout(dropout)
        bound = 1.0 / math.sqrt(in_dim)
        self.A = nn.Parameter(torch.empty(in_dim, hidden).uniform_(-bound, bound, generator=gen))  # (e, I)
        self.a = nn.Parameter(torch.zeros(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.drop(x) @ self.A + self.a)                                          # (B, I)


@ENCODERS.register("linear")
class Linear(Encoder):
    def __init__(self, in_dim: int, gen: torch.Generator, out: int = 128, dropout: float = 0.0) -> None:
        super().__init__()
        self.out_dim = out
        self.drop = Dropout(dropout)
        self.P = nn.Parameter(torch.randn(in_dim, out, generator=gen) / math.sqrt(in_dim))        # (e, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(x) @ self.P                                                               # (B, out)
