"""The encoder interface h = f(x) (docs/design.md, Interfaces), trained jointly with the head.

    out_dim                        width d of h
    forward(x) -> h                (N, d) one row per query; a stateful encoder (recurrent LM)
    forward(x, state) -> (h, state)    takes and returns its recurrent state (detached)
    embed(x) -> (B, d)             the representation used for evaluation: verification pairs,
                                   retrieval; for a sequence, the state at its last position
    input_embedding() -> nn.Embedding | None   the token/item table of a sequence encoder, which a
                                   model may tie to the head's class embeddings (`tie_embeddings`)
`stateful` is a class attribute (capability), so the loop and the tasks never ask for a name.
"""

from __future__ import annotations

import torch
from torch import nn


class Encoder(nn.Module):
    stateful = False
    out_dim: int

    def forward(self, x: torch.Tensor, state=None):
        raise NotImplementedError

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)[0] if self.stateful else self(x)

    def input_embedding(self) -> nn.Embedding | None:
        return None


def init_normal_(module: nn.Module, gen: torch.Generator, std: float = 0.02) -> None:
    """GPT-2-style init from an explicit generator: matrices ~ normal(0, std), biases 0, norms untouched."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std, generator=gen)
            elif "norm" not in name:
                p.zero_()


class Dropout(nn.Module):
    """Inverted dropout x * m / (1 - p), m ~ Bernoulli(1 - p) elementwise (Srivastava et al. 2014), with
    the mask drawn on the CPU from torch's global stream and moved to x's device: on the CPU the same
    bits as nn.Dropout (tests/test_seed.py), on a GPU the mask the CPU would draw (seed.py); with
    `on_device` (train.draws: device) drawn on x's device from its global stream, with no copy."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = float(p)
        self.on_device = False  # True (train.draws: device): the mask is drawn where x lives

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0 or x.numel() == 0:
            return x
        if self.p == 1.0:
            return x * torch.zeros((), dtype=x.dtype, device=x.device)
        if self.on_device:  # `train.draws: device`: the device's own stream (torch.cuda's, in the checkpoint)
            return x * torch.empty_like(x).bernoulli_(1.0 - self.p).div_(1.0 - self.p)
        # x's shape and strides, on the CPU: the bits land in x's memory order as nn.Dropout's do (its mask is
        # empty_like(x)); an LSTM's batch-first output is a strided view, where a contiguous mask differs
        m = torch.empty_like(x, device="cpu").bernoulli_(1.0 - self.p)
        return x * m.div_(1.0 - self.p).to(x.device)

    def extra_repr(self) -> str:
        return f"p={self.p}"
