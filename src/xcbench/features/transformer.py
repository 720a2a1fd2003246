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

`transformer_lm_post` is the public MIDX code's model (XuHwang/MIDX_Journal at 3ed65da,
src/language_modeling/model/transformer.py), the same interface: torch's post-norm block
(LayerNorm(z + Dropout(Sublayer(z))) after attention and after the feed-forward), GELU, dropout on
the block input (token + position embedding) and on the output, no final LayerNorm, position table
initialised to zero; the other matrices as torch initialises that block (xavier-uniform attention
projections, uniform(+-1/sqrt(fan_in)) linear layers), from the explicit generator.
"""

from __future__ import annotations

import torch
from torch import nn

from xcbench.features.base import Dropout, Encoder, init_normal_
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
        self.drop, self.out_drop = Dropout(dropout), nn.Identity()
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
        z = self.out_drop(self.norm(self.blocks(z, mask=causal, is_causal=True)))                # (B, L, e)
        h = z[:, L - T:].reshape(-1, self.out_dim)                                               # (B*T, e)
        return h, full[:, L - self.context:] if self.context else None

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)[0].view(x.shape[0], x.shape[1], self.out_dim)[:, -1]                     # (B, e)

    def input_embedding(self) -> nn.Embedding:
        return self.tokens


@ENCODERS.register("transformer_lm_post")
class PostNormTransformerLM(TransformerLM):
    """The public MIDX code's Transformer LM: post-norm GELU blocks, dropout on input and output."""

    def __init__(self, in_dim: int, gen: torch.Generator, emb: int = 200, layers: int = 2, heads: int = 4,
                 ff: int = 1024, dropout: float = 0.1, max_len: int = 512, context: int = 0,
                 sparse: bool = False) -> None:
        super().__init__(in_dim, gen, emb, layers, heads, ff, dropout, max_len, context, sparse)
        block = nn.TransformerEncoderLayer(emb, heads, ff, dropout, activation="gelu", batch_first=True,
                                           norm_first=False)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm, self.out_drop = nn.Identity(), Dropout(dropout)
        init_torch_default_(self.blocks, gen)
        with torch.no_grad():
            xavier_uniform_(self.tokens.weight, gen)
            self.pos.weight.zero_()


def init_torch_default_(module: nn.Module, gen: torch.Generator) -> None:
    """torch's own init of Transformer blocks, drawn from `gen`: every nn.Linear uniform(+-1/sqrt(fan_in))
    for weight and bias, then attention in-projections xavier-uniform and attention biases zero,
    LayerNorms 1 and 0."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Linear):
                b = m.in_features ** -0.5
                m.weight.uniform_(-b, b, generator=gen)
                m.bias.uniform_(-b, b, generator=gen)
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()
        for m in module.modules():
            if isinstance(m, nn.MultiheadAttention):
                xavier_uniform_(m.in_proj_weight, gen)
                m.in_proj_bias.zero_()
                m.out_proj.bias.zero_()


def xavier_uniform_(w: torch.Tensor, gen: torch.Generator) -> None:
    """w ~ uniform(+-sqrt(6 / (fan_in + fan_out))) for a matrix (fan_out, fan_in)."""
    a = (6.0 / sum(w.shape)) ** 0.5
    w.uniform_(-a, a, generator=gen)
