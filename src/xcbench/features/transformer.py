"""Causal Transformer encoder for word-level language models (MIDX paper, section 6.2: 2 layers, 4
heads, feed-forward 1024, embedding 200).

`transformer_lm`: tokens x (B, T) -> token embedding (emb) + learned position embedding -> `layers`
pre-norm Transformer blocks with causal self-attention (position t attends to positions <= t) ->
final LayerNorm -> h (B*T, emb), one row per position. Its state is a token context: `forward(x,
state)` prepends the previous tokens `state` (B, c) as context that is attended to but not returned,
and returns the last `context` tokens as the next state. Training windows have no context (state
None), so by default (`context = 0`) evaluation reads each chunk without context too: positions past
the training window would be untrained (the public MIDX code also evaluates window by window). Weights come from the
explicit generator: normal(0, 0.02) for embeddings and projections (GPT-2's init), zero biases.
"""

from __future__ import annotations

import torch
from torch import nn

from xcbench.features.base import Encoder, init_normal_
from xcbench.registry import ENCODERS


@ENCODERS.register("transformer_lm")
class TransformerLM(Encoder):
    stateful = True

    def __init__(self, in_dim: int, gen: torch.Generator, emb: int = 200, layers: int = 2, heads: int = 4,
                 ff: int = 1024, dropout: float = 0.1, max_len: int = 512, context: int = 0,
                 sparse: bool = False) -> None:
        super().__init__()
        self.out_dim, self.max_len, self.context = emb, max_len, context
        self.tokens = nn.Embedding(in_dim, emb, sparse=sparse)                                   # (V, e)
        self.pos = nn.Embedding(max_len, emb)                                                    # (max_len, e)
        block = nn.TransformerEncoderLayer(emb, heads, ff, dropout, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(emb)
        self.drop = nn.Dropout(dropout)
        init_normal_(self, gen)

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None):
        T = x.shape[1]
        full = x if state is None else torch.cat([state, x], 1)                                  # (B, c + T)
        L = full.shape[1]
        if L > self.max_len:
            raise ValueError(f"transformer_lm: {L} positions (chunk + context) exceed max_len = {self.max_len}; "
                             "raise max_len or lower context")
        z = self.drop(self.tokens(full) + self.pos(torch.arange(L, device=x.device)))             # (B, L, e)
        causal = torch.triu(torch.full((L, L), float("-inf"), device=x.device), 1)               # (L, L)
        z = self.norm(self.blocks(z, mask=causal, is_causal=True))                               # (B, L, e)
        h = z[:, L - T:].reshape(-1, self.out_dim)                                               # (B*T, e)
        return h, full[:, L - self.context:] if self.context else None

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)[0].view(x.shape[0], x.shape[1], self.out_dim)[:, -1]                     # (B, e)

    def input_embedding(self) -> nn.Embedding:
        return self.tokens
