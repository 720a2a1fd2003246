"""Recurrent encoder for word-level language models (RF-softmax section 4.1, MIDX section 6).

`lstm_lm`: tokens x (B, T) -> embedding (emb) -> `layers`-layer LSTM (hidden) -> dropout ->
h (B*T, hidden), one row per position (the head normalises h when the method asks for it; the
RF-softmax PTB model has d = 200). `forward(x, state)` takes and returns the recurrent state
(features/base.py: a stateful encoder) so that evaluation can run over a long text in parallel
streams without resetting it (`tasks/lm.py`); training windows start from a zero state (None).
`embed(x)` is the top layer's output at the last position (B, hidden). The token table
(`input_embedding`) can be tied to the head's class embeddings when emb = hidden. Every weight is
drawn from the explicit generator: uniform(-1/sqrt(hidden), 1/sqrt(hidden)) as torch's LSTM default, embeddings
uniform(-0.1, 0.1) (Zaremba et al. 2014).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from xcbench.features.base import Dropout, Encoder
from xcbench.registry import ENCODERS


@ENCODERS.register("lstm_lm")
class LSTMLM(Encoder):
    stateful = True

    def __init__(self, in_dim: int, gen: torch.Generator, emb: int = 200, hidden: int = 200, layers: int = 2,
                 dropout: float = 0.0, sparse: bool = False) -> None:
        super().__init__()
        self.out_dim = hidden
        self.tokens = nn.Embedding(in_dim, emb, sparse=sparse)  # sparse: row gradients (lazy_adam, sgd)
        self.lstm = nn.LSTM(emb, hidden, num_layers=layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.drop = Dropout(dropout)
        with torch.no_grad():
            self.tokens.weight.uniform_(-0.1, 0.1, generator=gen)
            k = 1.0 / math.sqrt(hidden)
            for p in self.lstm.parameters():
                p.uniform_(-k, k, generator=gen)

    def forward(self, x: torch.Tensor, state: tuple | None = None):
        out, state = self.lstm(self.drop(self.tokens(x)), state)                               # (B, T, hidden)
        h = self.drop(out).reshape(-1, self.out_dim)                                            # (B*T, hidden)
        return h, tuple(s.detach() for s in state)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)[0].view(x.shape[0], x.shape[1], self.out_dim)[:, -1]                    # (B, hidden)

    def input_embedding(self) -> nn.Embedding:
        return self.tokens
